package raytest

import (
	"math"
	"math/big"
)

// This file models how Ray Serve turns a target_capacity into replica
// counts, after Ray's own functions (named in each comment), and
// independently of package serve/ray's arithmetic: the emulator is what
// checks that adapter, so the two must not share a mistake.

// rayDirection is the scaling direction Ray's controller keeps next to the
// target capacity (TargetCapacityDirection in serve/_private/common.py),
// or none.
type rayDirection int

const (
	rayDirNone rayDirection = iota
	rayDirUp
	rayDirDown
)

func (d rayDirection) String() string {
	switch d {
	case rayDirUp:
		return "UP"
	case rayDirDown:
		return "DOWN"
	}
	return ""
}

// rayApplied is what the controller remembers of the last config it
// applied: its application names and its target_capacity (nil for null).
type rayApplied struct {
	apps map[string]bool
	tc   *float64
}

// sameApps reports whether a and b name the same applications (Ray's
// applications_match compares the sets of names).
func (a *rayApplied) sameApps(b *rayApplied) bool {
	if len(a.apps) != len(b.apps) {
		return false
	}
	for name := range a.apps {
		if !b.apps[name] {
			return false
		}
	}
	return true
}

// rayCapacityDirection is the direction after next is applied over curr
// (nil when no config was applied since Serve started), as Ray's
// calculate_target_capacity_direction (serve/_private/controller.py)
// decides it:
//
//   - With a previous config naming the same applications: an unchanged
//     target_capacity keeps the direction; null to a number is DOWN; a
//     number to null is none; a rise is UP and a fall DOWN.
//   - Otherwise (a first config, or other applications): UP when next has
//     a target_capacity, none when it is null.
func rayCapacityDirection(curr, next *rayApplied, dir rayDirection) rayDirection {
	if curr == nil || !curr.sameApps(next) {
		if next.tc != nil {
			return rayDirUp
		}
		return rayDirNone
	}
	switch c, n := curr.tc, next.tc; {
	case c == nil && n == nil, c != nil && n != nil && *c == *n:
		return dir
	case c == nil:
		return rayDirDown
	case n == nil:
		return rayDirNone
	case *c < *n:
		return rayDirUp
	}
	return rayDirDown
}

// rayCapacityAdjusted is Ray's get_capacity_adjusted_num_replicas
// (serve/_private/utils.py): n for a null target capacity or exactly 100;
// 0 for a target capacity of 0 or n = 0; otherwise n * tc computed in
// float64 (Python multiplies the int by the float), that product converted
// exactly to a Decimal, divided by Decimal(100) in Python's default
// context (28 significant digits, half to even), rounded to an integer
// half up, and at least 1.
func rayCapacityAdjusted(n int64, tc *float64) int64 {
	switch {
	case tc == nil || *tc == 100:
		return n
	case *tc == 0 || n == 0:
		return 0
	}
	d := decimalOf(float64(n) * *tc)
	d.exp -= 2 // / Decimal(100): exact before the context rounds it
	d.roundDigits(28)
	return max(1, d.roundHalfUp())
}

// rayDecimal is coef * 10^exp, coef >= 0: the part of Python's Decimal
// that get_capacity_adjusted_num_replicas uses.
type rayDecimal struct {
	coef *big.Int
	exp  int
}

// decimalOf converts a finite f >= 0 exactly, with the digits Decimal(f)
// has: f is m * 2^e with an odd integer m (or f = 0); an integer is its
// digits, and for e < 0, f is m * 5^-e * 10^e.
func decimalOf(f float64) rayDecimal {
	frac, e := math.Frexp(f)
	bits := int64(math.Ldexp(frac, 53)) // exact: 53 bits
	e -= 53
	for bits != 0 && bits&1 == 0 {
		bits >>= 1
		e++
	}
	m := big.NewInt(bits)
	if e >= 0 {
		return rayDecimal{coef: m.Lsh(m, uint(e))}
	}
	five := new(big.Int).Exp(big.NewInt(5), big.NewInt(int64(-e)), nil)
	return rayDecimal{coef: m.Mul(m, five), exp: e}
}

// roundDigits rounds d to at most digits significant digits, half to
// even, as a Decimal context of that precision rounds a quotient.
func (d *rayDecimal) roundDigits(digits int) {
	extra := len(d.coef.String()) - digits
	if d.coef.Sign() == 0 || extra <= 0 {
		return
	}
	unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(extra)), nil)
	q, r := new(big.Int).QuoRem(d.coef, unit, new(big.Int))
	switch r.Lsh(r, 1).Cmp(unit) { // 2r against unit
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	d.coef, d.exp = q, d.exp+extra
}

// roundHalfUp is d.to_integral_value(rounding=ROUND_HALF_UP): for d >= 0,
// the integer part, plus one when the fraction is at least a half.
func (d *rayDecimal) roundHalfUp() int64 {
	if d.exp >= 0 {
		unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.exp)), nil)
		return new(big.Int).Mul(d.coef, unit).Int64()
	}
	unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-d.exp)), nil)
	q, r := new(big.Int).QuoRem(d.coef, unit, new(big.Int))
	if r.Lsh(r, 1).Cmp(unit) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// rayBounds are an autoscaling deployment's replica bounds at a target
// capacity and direction, as Ray's DeploymentAutoscalingState computes
// them (serve/_private/autoscaling_state.py):
//
//   - get_num_replicas_lower_bound: initial_replicas capacity-adjusted when
//     the deployment has one and the direction is UP; min_replicas
//     capacity-adjusted otherwise (DOWN or none).
//   - get_num_replicas_upper_bound: max_replicas capacity-adjusted.
func rayBounds(sp raySpec, tc *float64, dir rayDirection) (lower, upper int64) {
	lower = rayCapacityAdjusted(sp.min, tc)
	if sp.initial != nil && dir == rayDirUp {
		lower = rayCapacityAdjusted(*sp.initial, tc)
	}
	return lower, rayCapacityAdjusted(sp.max, tc)
}

// rayApplyBounds is DeploymentAutoscalingState.apply_bounds: n clipped to
// the upper bound, then raised to the lower bound (the lower bound wins
// when the two cross).
func rayApplyBounds(n int64, sp raySpec, tc *float64, dir rayDirection) int64 {
	lower, upper := rayBounds(sp, tc, dir)
	return max(lower, min(upper, n))
}
