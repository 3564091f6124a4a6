package raytest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The cases below are worked out from Ray's functions as they read in
// python/ray/serve/_private: calculate_target_capacity_direction
// (controller.py), get_capacity_adjusted_num_replicas (utils.py), and
// DeploymentAutoscalingState.get_num_replicas_lower_bound,
// get_num_replicas_upper_bound and apply_bounds (autoscaling_state.py).

func tcp(v float64) *float64 { return &v }

func applied(tc *float64, apps ...string) *rayApplied {
	a := &rayApplied{apps: map[string]bool{}, tc: tc}
	for _, n := range apps {
		a.apps[n] = true
	}
	return a
}

func TestRayCapacityDirection(t *testing.T) {
	cases := []struct {
		name       string
		curr, next *rayApplied
		dir        rayDirection // the direction before next
		want       rayDirection
	}{
		{"first config with a capacity scales up", nil, applied(tcp(10), "a"), rayDirNone, rayDirUp},
		{"first config at null has none", nil, applied(nil, "a"), rayDirNone, rayDirNone},
		{"first config after a shutdown ignores the old direction", nil, applied(nil, "a"), rayDirDown, rayDirNone},
		{"capacity rises", applied(tcp(30), "a"), applied(tcp(60), "a"), rayDirDown, rayDirUp},
		{"capacity falls", applied(tcp(60), "a"), applied(tcp(30), "a"), rayDirUp, rayDirDown},
		{"null to a number is down", applied(nil, "a"), applied(tcp(90), "a"), rayDirNone, rayDirDown},
		{"null to 100 is down too", applied(nil, "a"), applied(tcp(100), "a"), rayDirNone, rayDirDown},
		{"a number to null is none", applied(tcp(90), "a"), applied(nil, "a"), rayDirUp, rayDirNone},
		{"unchanged keeps up", applied(tcp(40), "a"), applied(tcp(40), "a"), rayDirUp, rayDirUp},
		{"unchanged keeps down", applied(tcp(40), "a"), applied(tcp(40), "a"), rayDirDown, rayDirDown},
		{"unchanged null keeps none", applied(nil, "a"), applied(nil, "a"), rayDirNone, rayDirNone},
		{"same names in another order match", applied(tcp(20), "a", "b"), applied(tcp(10), "b", "a"), rayDirUp, rayDirDown},
		{"other applications with a capacity scale up, even a lower one", applied(tcp(80), "a"), applied(tcp(20), "b"), rayDirDown, rayDirUp},
		{"an application added with a capacity scales up", applied(tcp(80), "a"), applied(tcp(80), "a", "b"), rayDirDown, rayDirUp},
		{"other applications at null have none", applied(tcp(20), "a"), applied(nil, "a", "b"), rayDirUp, rayDirNone},
		{"an empty config matches an empty config", applied(tcp(50)), applied(tcp(70)), rayDirNone, rayDirUp},
	}
	for _, c := range cases {
		if got := rayCapacityDirection(c.curr, c.next, c.dir); got != c.want {
			t.Errorf("%s: direction %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRayCapacityAdjusted(t *testing.T) {
	cases := []struct {
		n    int64
		tc   *float64
		want int64
		why  string
	}{
		{3, tcp(70), 2, "2.1 rounds down"},
		{1, tcp(1), 1, "0.01 rounds to 0, and the result is at least 1"},
		{2, tcp(0.5), 1, "0.01 again: at least 1"},
		{1, tcp(50), 1, "0.5 rounds half up"},
		{3, tcp(50), 2, "1.5 rounds half up"},
		{10, tcp(25), 3, "2.5 rounds half up, not to even"},
		{4, tcp(62.5), 3, "2.5 rounds half up, not to even"},
		{10, tcp(34), 3, "3.4 rounds down"},
		{10, tcp(35), 4, "3.5 rounds up"},
		{3, tcp(99.9), 3, "2.997 rounds up"},
		{8, tcp(12.5), 1, "exactly 1"},
		{10, tcp(33.3), 3, "10 * 33.3 is 333.0 in float64: 3.33"},
		{125, tcp(1.2), 2, "125 * 1.2 is 150.0 in float64 (the exact product of the float 1.2 is just below): 1.5 rounds up"},
		{10, tcp(0), 0, "0 percent is 0 replicas"},
		{0, tcp(50), 0, "0 replicas stay 0"},
		{0, nil, 0, "0 replicas stay 0"},
		{7, nil, 7, "null is every replica"},
		{7, tcp(100), 7, "100 percent is every replica"},
		{1 << 24, tcp(0.01), 1678, "1677.7216 rounds up"},
	}
	for _, c := range cases {
		if got := rayCapacityAdjusted(c.n, c.tc); got != c.want {
			tc := "null"
			if c.tc != nil {
				tc = fmt.Sprint(*c.tc)
			}
			t.Errorf("rayCapacityAdjusted(%d, %s) = %d, want %d (%s)", c.n, tc, got, c.want, c.why)
		}
	}
}

// Decimal(f) is exact, and a 28-digit context rounds a quotient half to
// even: Decimal(0.1) / 1 is 0.1000000000000000055511151231.
func TestRayDecimal(t *testing.T) {
	cases := []struct {
		f      float64
		digits int
		want   string
	}{
		{0.1, 100, "1000000000000000055511151231257827021181583404541015625e-55"},
		{0.1, 28, "1000000000000000055511151231e-28"},
		{210, 28, "210e0"},
		{1.5, 28, "15e-1"},
		{150, 28, "150e0"},
		{2.5e-28, 1, "3e-28"}, // 2.5000000000000000962...e-28: above the half
		{0.125, 2, "12e-2"},   // exactly half: to even
		{0.375, 2, "38e-2"},   // exactly half: to even
		{1 << 60, 28, "1152921504606846976e0"},
	}
	var got, want []string
	for _, c := range cases {
		d := decimalOf(c.f)
		d.roundDigits(c.digits)
		got = append(got, fmt.Sprintf("%se%d", d.coef, d.exp))
		want = append(want, c.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decimals (-want +got):\n%s", diff)
	}
}

func TestRayBounds(t *testing.T) {
	initial := func(n int64) *int64 { return &n }
	withInitial := raySpec{auto: true, min: 2, max: 8, initial: initial(4)}
	noInitial := raySpec{auto: true, min: 3, max: 10}
	scaleToZero := raySpec{auto: true, min: 0, max: 5, initial: initial(1)}
	type bounds struct{ Lower, Upper, Idle, Loaded int64 }
	cases := []struct {
		name string
		sp   raySpec
		tc   *float64
		dir  rayDirection
		want bounds
	}{
		{"up: initial_replicas is the floor", withInitial, tcp(50), rayDirUp, bounds{2, 4, 2, 4}},
		{"down: min_replicas is the floor", withInitial, tcp(50), rayDirDown, bounds{1, 4, 1, 4}},
		{"none: min_replicas is the floor", withInitial, tcp(50), rayDirNone, bounds{1, 4, 1, 4}},
		{"null: the bounds as configured", withInitial, nil, rayDirNone, bounds{2, 8, 2, 8}},
		{"up at 100", withInitial, tcp(100), rayDirUp, bounds{4, 8, 4, 8}},
		{"no initial_replicas: min_replicas even when up", noInitial, tcp(70), rayDirUp, bounds{2, 7, 2, 7}},
		{"small counts: 3 at 70 is 2, 10 at 70 is 7", noInitial, tcp(70), rayDirDown, bounds{2, 7, 2, 7}},
		{"1 percent keeps one replica", noInitial, tcp(1), rayDirDown, bounds{1, 1, 1, 1}},
		{"0 percent keeps none", withInitial, tcp(0), rayDirUp, bounds{0, 0, 0, 0}},
		{"scale to zero scaling down", scaleToZero, tcp(40), rayDirDown, bounds{0, 2, 0, 2}},
		{"scale to zero scaling up: initial 1 at 40 is at least 1", scaleToZero, tcp(40), rayDirUp, bounds{1, 2, 1, 2}},
	}
	for _, c := range cases {
		var got bounds
		got.Lower, got.Upper = rayBounds(c.sp, c.tc, c.dir)
		got.Idle = rayApplyBounds(0, c.sp, c.tc, c.dir)
		got.Loaded = rayApplyBounds(1000, c.sp, c.tc, c.dir)
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
