package strategy

// managedMover is the mover of CapacityManaged: a traffic router and a
// capacity setter per side; traffic and capacity move together within the
// surge budget.
type managedMover struct{}

func (managedMover) applied(f facts) bool { return f.routeApplied() && f.sidesSettled() }

func (managedMover) weightApplied(f facts) bool { return f.routeApplied() }

func (managedMover) inPlace(f facts) bool { return f.weight == f.want.Weight && f.sidesHeldBack() }

func (managedMover) readinessLost(f facts) (stable, canary bool) { return f.shortOfTraffic() }

// takesRoute also asks that the stable side was asked for the capacity the
// route's traffic needs.
func (managedMover) takesRoute(f facts) bool {
	return f.routeTakeable() && 100-f.weight <= f.want.StableCapacity
}

// growForRoute grows the stable side toward the traffic the route already
// sends it (it was shrunk to the traffic of the weight asked), rather than
// have the canary's share written back.
func (managedMover) growForRoute(f facts) hop {
	if !f.weightApplied || f.weightInvalid || f.weight >= f.want.Weight {
		return hop{kind: arrived}
	}
	need := 100 - f.weight
	if n := min(need, 100+f.surge-max(f.want.CanaryCapacity, f.canary.Capacity)); n > f.want.StableCapacity {
		return hop{scaleStable, n}
	}
	return hop{kind: arrived}
}

// next moves traffic only within ready capacity that was asked for, and
// capacity only within the surge budget: toward the canary, the canary side
// is scaled up before traffic follows and the stable side scaled down only to
// the traffic it still receives; toward the stable side, the same with the
// roles swapped.
//
// A side takes traffic on the strength of its observed ready capacity only
// once it has settled at (at least) what was asked: a walk back goes on
// while sides are still moving (see inPlace), and a side still moving may be
// shrinking (the scale-down of a reconcile whose state was lost, not yet
// visible in its capacity), so the ready capacity it shows now may be gone
// when the weight lands.
func (managedMover) next(f facts, t, limit int32) hop {
	w, s, c := f.want.Weight, f.want.StableCapacity, f.want.CanaryCapacity
	rs, rc := int32(0), int32(0)
	if f.stable.Settled && f.stable.Capacity >= s {
		rs = min(f.stable.Ready, s)
	}
	if f.canary.Settled && f.canary.Capacity >= c {
		rc = min(f.canary.Ready, c)
	}
	if h, ok := f.weightHop(t, limit, rs, rc); ok {
		return h
	}
	switch {
	case w < t:
		// Toward the canary, capacity is asked for the next weight hop
		// only, not for the whole walk: surge is spent for as short a
		// time as the walk allows. Toward the stable side it is asked for
		// the whole walk at once: a walk back never waits on capacity it
		// could have asked for.
		want := f.load(f.nextWeight(t, limit))
		if c >= want && f.canary.Ready < want { // settled below what was asked: ask for more
			want = c + want - f.canary.Ready
		}
		if n := min(100, want, 100+f.surge-s); n > c {
			return hop{scaleCanary, n}
		}
		if n := 100 - w; n < s {
			return hop{scaleStable, n}
		}
	case w > t:
		want := 100 - t
		if s >= want && f.stable.Ready < want {
			want = s + want - f.stable.Ready
		}
		if n := min(100, want, 100+f.surge-c); n > s {
			return hop{scaleStable, n}
		}
		if l := f.load(w); l < c {
			if !f.routeApplied() {
				// The canary may still receive its old share until the
				// route is accepted.
				return hop{kind: awaitRoute}
			}
			return hop{scaleCanary, l}
		}
	default:
		return hop{kind: arrived}
	}
	return hop{kind: awaitReady}
}

// release scales the stable side down to the traffic it receives once the
// route is accepted with the weight asked for; at weight 100 completion
// drains it (after Options.ScaleDownDelay).
func (managedMover) release(f facts) hop {
	if n := 100 - f.want.Weight; f.routeApplied() && n > 0 && n < f.want.StableCapacity {
		return hop{scaleStable, n}
	}
	return hop{kind: arrived}
}

// provide asks the canary for load within the surge budget (more when it
// settled below what it was asked: a backend that rounds), scaling the
// stable side down to its traffic first when the budget is spent.
func (managedMover) provide(f facts, load int32) hop {
	c, s := f.want.CanaryCapacity, f.want.StableCapacity
	want := load
	if c >= load && f.canary.Ready < load {
		want = c + load - f.canary.Ready
	}
	if n := min(100, want, 100+f.surge-s); n > c {
		return hop{scaleCanary, n}
	}
	if n := 100 - f.want.Weight; n < s {
		return hop{scaleStable, n} // down to its traffic, to free surge budget
	}
	return hop{kind: awaitReady}
}

// restore scales the canary to 0, once the route is accepted (the canary may
// still receive traffic until then), and the stable side back to 100.
func (managedMover) restore(f facts) hop {
	switch {
	case f.want.CanaryCapacity > 0:
		if !f.routeApplied() {
			return hop{kind: awaitRoute}
		}
		return hop{scaleCanary, 0}
	case f.want.StableCapacity < 100:
		return hop{scaleStable, 100}
	}
	return hop{kind: arrived}
}

// emergency scales the stable side up within the surge budget, never down.
func (managedMover) emergency(f facts) (bool, hop) {
	// Budget against the larger of what was asked and what the side
	// reports: a hop may have landed without being recorded.
	// A side that already holds more (a scale-up applied in a reconcile
	// whose state was not stored) is asked for what it holds, so that the
	// state records it and the walk back can finish: never a scale-down.
	s := min(100, 100+f.surge-max(f.want.CanaryCapacity, f.canary.Capacity))
	if s = max(s, f.stable.Capacity); s > f.want.StableCapacity {
		return true, hop{scaleStable, s}
	}
	return true, hop{kind: arrived}
}

func (managedMover) repair(f facts, fits bool) (weight, stable, canary bool) {
	stable, canary = f.repairSides(managedScaleDown)
	return f.routeRepair(fits), stable, canary
}

// managedScaleDown lets a repair scale a side down only to at least the
// traffic it may carry.
func managedScaleDown(_ facts, c, traffic int32, _ SideObservation) bool { return c >= traffic }

func (managedMover) completion() (drain, release bool) { return true, true }

func (managedMover) available(f facts) bool { return f.routeFits() }

func (managedMover) ready(f facts) (stable, canary int32) { return f.stable.Ready, f.canary.Ready }

// The rules of a desired allocation in the managed mode.
const (
	managedCanaryCovers = iota // the canary's capacity covers its weight
	managedStableCovers        // the stable's covers the rest
)

// broken: an emergency walk back may leave the stable side short while it
// scales up.
func (managedMover) broken(a Allocation, emergency bool) (rules uint8) {
	if a.Weight > a.CanaryCapacity {
		rules |= 1 << managedCanaryCovers
	}
	if 100-a.Weight > a.StableCapacity && !emergency {
		rules |= 1 << managedStableCovers
	}
	return rules
}

func (managedMover) breach(a Allocation, i int) (path string, value int32, detail string) {
	if i == managedCanaryCovers {
		return "desired.weight", a.Weight, "exceeds desired.canaryCapacity (" + itoa(a.CanaryCapacity) + ")"
	}
	return "desired.stableCapacity", a.StableCapacity, "is below the stable side's traffic (" + itoa(100-a.Weight) + ")"
}

func (managedMover) atZero(f facts) bool { return f.routeAtZero() && f.canaryAtZero() }

func (managedMover) carries(f facts) bool {
	return f.want.Weight > 0 || f.weight > 0 || f.want.CanaryCapacity > 0 || f.canary.Capacity > 0
}

// keepHeld keeps a canary capacity that still covers the traffic the side
// is asked for and is observed receiving, on an accepted route.
func (managedMover) keepHeld(f facts) (Allocation, bool) {
	a, ok := f.want, false
	if c := f.canary.Capacity; c < a.CanaryCapacity && c >= f.load(a.Weight) && c >= f.load(f.weight) && !f.weightInvalid && f.weightApplied {
		a.CanaryCapacity, ok = c, true
	}
	return a, ok
}
