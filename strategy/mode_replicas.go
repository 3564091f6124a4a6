package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replicasMover is the mover of CapacityReplicas: there is no traffic
// router; traffic follows ready replicas, so only capacities move, like a
// rolling update bounded by MaxSurgePercent and MaxUnavailablePercent.
// State.Desired.Weight mirrors the canary's capacity, and Decision.Weight is
// never set.
type replicasMover struct{}

func (replicasMover) applied(f facts) bool { return f.sidesSettled() }

// weightApplied: traffic follows ready replicas, so the canary's share is in
// force once the canary has settled at the capacity asked.
func (replicasMover) weightApplied(f facts) bool {
	return f.canary.Settled && f.canary.Capacity == f.want.CanaryCapacity
}

func (replicasMover) inPlace(f facts) bool { return f.sidesHeldBack() }

// readinessLost is no signal here: traffic follows ready replicas, and a
// side that does not become ready is bounded by the progress deadline.
func (replicasMover) readinessLost(facts) (stable, canary bool) { return false, false }

func (replicasMover) takesRoute(facts) bool { return false }

// next grows the canary within the surge budget and shrinks the stable side
// only while total ready capacity stays within MaxUnavailablePercent (and
// the reverse toward the stable side). A canary hop is the traffic hop: it
// waits for the interval and is bounded by limit.
func (replicasMover) next(f facts, t, limit int32) hop {
	s, c := f.want.StableCapacity, f.want.CanaryCapacity
	// A side counts with its ready capacity only once it has settled at
	// what was asked: one still moving (a walk back does not wait for
	// sides to settle, and a write whose state was lost may be shrinking
	// it) may lose what it shows, so the other side shrinks only as far as
	// MaxUnavailablePercent allows on its own.
	rs, rc := int32(0), int32(0)
	if f.stable.Settled && f.stable.Capacity == s {
		rs = min(f.stable.Ready, s)
	}
	if f.canary.Settled && f.canary.Capacity == c {
		rc = min(f.canary.Ready, c)
	}
	mu := f.maxUnavailable
	switch {
	case c < t || s > 100-t:
		if c < t {
			n := min(t, 100+f.surge-s)
			if limit > 0 {
				n = min(n, c+limit)
			}
			if n > c {
				return hop{shiftReplicas, n}
			}
		}
		if s > 100-t {
			if n := max(100-t, 100-mu-rc, 0); n < s {
				return hop{scaleStable, n}
			}
		}
		return hop{kind: awaitReady}
	case c > t || s < 100-t:
		if s < 100-t {
			if n := min(100-t, 100+f.surge-c); n > s {
				return hop{scaleStable, n}
			}
		}
		if c > t {
			n := max(t, 100-mu-rs, 0)
			if limit > 0 {
				n = max(n, c-limit)
			}
			if n < c {
				return hop{shiftReplicas, n}
			}
		}
		return hop{kind: awaitReady}
	}
	return hop{kind: arrived}
}

// replicaHop makes a shiftReplicas hop: the canary's capacity moves to c,
// once the interval allows, and the desired weight mirrors it. A hop toward
// the canary ends a promote request.
func (r *run) replicaHop(c int32, interval time.Duration) {
	if r.intervalWait(interval) {
		return
	}
	forward := c > r.st.Desired.CanaryCapacity
	r.hopCanary(c)
	r.st.Desired.Weight = c
	r.st.WeightChangedAt, r.st.WeightAppliedAt, r.st.WeightPendingAt = micro(r.now), metav1.MicroTime{}, metav1.MicroTime{}
	if forward {
		r.st.PromoteRequested = false
	}
}

// release scales the stable side down to the canary's complement once the
// canary has settled at its capacity (traffic follows ready replicas),
// only while total ready capacity stays within MaxUnavailablePercent; the
// walk to 100 takes it to 0.
func (replicasMover) release(f facts) hop {
	s, c := f.want.StableCapacity, f.want.CanaryCapacity
	if !f.canary.Settled || f.canary.Capacity != c || s <= 100-c || c >= 100 {
		return hop{kind: arrived}
	}
	if n := max(100-c, 100-f.maxUnavailable-min(f.canary.Ready, c), 0); n < s {
		return hop{scaleStable, n}
	}
	return hop{kind: arrived}
}

// provide: the Replicas mode has no router, so no extras to provide for.
func (replicasMover) provide(facts, int32) hop { return hop{kind: awaitReady} }

func (replicasMover) restore(facts) hop { return hop{kind: arrived} }

// emergency is not possible without a router (Options.validate rejects
// AbortEmergency in this mode).
func (replicasMover) emergency(facts) (bool, hop) { return false, hop{kind: arrived} }

func (replicasMover) repair(f facts, _ bool) (weight, stable, canary bool) {
	stable, canary = f.repairSides(replicasScaleDown)
	return false, stable, canary
}

// replicasScaleDown lets a repair scale a side down only while the other
// side's ready capacity keeps the total within MaxUnavailablePercent. The
// other side counts only once it has settled, as in next: one still moving
// may lose what it shows (a write whose state was lost may be shrinking it).
func replicasScaleDown(f facts, c, _ int32, other SideObservation) bool {
	ready := int32(0)
	if other.Settled {
		ready = min(other.Ready, other.Capacity)
	}
	return c+ready >= 100-f.maxUnavailable
}

// completion has no stable side to drain: the walk has already scaled it to
// the canary's traffic, 0.
func (replicasMover) completion() (drain, release bool) { return false, true }

func (replicasMover) ready(f facts) (stable, canary int32) { return f.stable.Ready, f.canary.Ready }

func (replicasMover) available(f facts) bool {
	return f.stable.Ready+f.canary.Ready >= 100-f.maxUnavailable
}

// broken has one rule: the weight mirrors the canary's capacity.
func (replicasMover) broken(a Allocation, _ bool) uint8 {
	if a.Weight != a.CanaryCapacity {
		return 1
	}
	return 0
}

func (replicasMover) breach(a Allocation, _ int) (path string, value int32, detail string) {
	return "desired.weight", a.Weight, "must equal desired.canaryCapacity (" + itoa(a.CanaryCapacity) + ") in the Replicas capacity mode"
}

func (replicasMover) atZero(f facts) bool { return f.canaryAtZero() }

// keepHeld keeps a smaller canary (the weight mirrors its capacity and
// follows it down: traffic follows ready replicas).
func (replicasMover) keepHeld(f facts) (Allocation, bool) {
	a, ok := f.want, false
	if c := f.canary.Capacity; c < a.CanaryCapacity {
		a.CanaryCapacity, a.Weight, ok = c, c, true
	}
	return a, ok
}

func (replicasMover) carries(f facts) bool {
	return f.want.CanaryCapacity > 0 || f.canary.Capacity > 0 || f.canary.Ready > 0
}

// growForRoute: no stable capacity to grow.
func (replicasMover) growForRoute(facts) hop { return hop{kind: arrived} }
