package strategy

// mover is the behaviour of one capacity mode. Every decision of the engine
// that depends on how capacity moves is asked of it: the engine picks it once
// from Options.Capacity when it is built (moverFor) and never tests the mode
// itself. Each mode's mover lives in its own file: managedMover,
// fixedMover and replicasMover.
//
// A mover decides from facts, passed by value, and returns values; the
// engine applies what it decides. It holds no pointer into the Step's state,
// so a call through the interface lets nothing escape to the heap and Step
// stays free of allocations.
type mover interface {
	// applied reports whether the last hop is observed applied: the route
	// programmed with the desired weight, each side settled at its
	// capacity, as far as the mode has a route and capacity setters.
	applied(f facts) bool
	// weightApplied reports whether the weight asked for is observed in
	// force: the route programmed with it and accepted by the data plane
	// (the modes with a router), the canary settled at its capacity (the
	// Replicas mode, where traffic follows ready replicas). The interval
	// counts from the first such observation (State.WeightAppliedAt).
	weightApplied(f facts) bool
	// inPlace reports, for a walk back, whether every adapter holds what
	// was asked, settled or not, accepted by the data plane or not.
	inPlace(f facts) bool
	// readinessLost reports which sides lost readiness under traffic:
	// observed ready capacity below the traffic the route sends them
	// while they are not settled.
	readinessLost(f facts) (stable, canary bool)
	// takesRoute reports whether a walk back may take a route that already
	// sends less to the canary than asked as its next hop.
	takesRoute(f facts) bool
	// growForRoute is, for a walk back whose route already sends the
	// canary less than asked (another writer, a route re-created at
	// 100/0), the scale-up that lets the stable side carry what the route
	// sends it, within the surge budget; arrived when there is none.
	growForRoute(f facts) hop
	// next is the next hop of a walk toward canary weight t, each weight
	// hop bounded by limit (0: no bound); arrived when t is reached with
	// nothing left to do.
	next(f facts, t, limit int32) hop
	// release is the scale-down of capacity the weight in force no longer
	// needs, once that weight is observed applied, while the walk goes
	// toward the canary: the stable side down to the traffic it still
	// receives. arrived when there is none.
	release(f facts) hop
	// provide is the hop that gives the canary observed ready capacity for
	// load (a header route or a mirror about to be added): a capacity hop
	// within the surge budget where the mode has capacity setters, else
	// awaitReady.
	provide(f facts, load int32) hop
	// restore is what a walk back still asks of the sides once traffic is
	// back on the stable side; arrived when nothing is left.
	restore(f facts) hop
	// emergency reports whether all traffic can be sent to the stable side
	// at once (there is a router to do it) and the capacity hop that goes
	// with it, if any.
	emergency(f facts) (ok bool, stable hop)
	// repair reports which adapters a repair asks again for what was
	// desired: the route's weight (if fits, the caller's verdict that
	// the sides' observed ready capacity covers it) and each side's
	// capacity.
	repair(f facts, fits bool) (weight, stable, canary bool)
	// completion says what completing asks of the capacity setters: drain,
	// to scale the stable side to 0 once Options.ScaleDownDelay has
	// passed; release, to return the canary to its steady state.
	completion() (drain, release bool)
	// atZero reports whether the canary side carries nothing a deploy
	// could disturb: weight 0 asked and observed on an accepted route (as
	// far as the mode has a router) and capacity 0 asked and observed,
	// settled, with nothing ready (as far as it has capacity setters).
	atZero(f facts) bool
	// carries reports whether the canary side carries traffic or capacity,
	// asked or observed (the route's spec weight, the side's capacity and
	// ready share), as far as the mode has a router and capacity setters.
	carries(f facts) bool
	// keepHeld returns, for a walk back, the desired allocation with a
	// canary capacity the side holds below f.want's kept, where it still
	// covers its traffic. ok is false when nothing is kept.
	keepHeld(f facts) (a Allocation, ok bool)
	// ready returns the ready capacity of each side that the mode trusts
	// when it checks a weight against it (a repair, an emergency aside).
	ready(f facts) (stable, canary int32)
	// available reports whether the Available condition holds.
	available(f facts) bool
	// broken reports which of the mode's own rules a desired allocation a
	// breaks, as a set of bits (1<<i for rule i, in field order);
	// emergency says an emergency walk back is under way.
	broken(a Allocation, emergency bool) uint8
	// breach describes rule i, broken by a, for State.Validate: the field,
	// its value and the problem.
	breach(a Allocation, i int) (path string, value int32, detail string)
}

// moverFor returns the mover of a capacity mode: the one place where a mode
// is mapped to its behaviour. It returns nil for a mode that Options.validate
// rejects; State.Validate then checks only what every mode shares.
func moverFor(mode CapacityMode) mover {
	switch mode {
	case CapacityManaged:
		return managedMover{}
	case CapacityFixed:
		return fixedMover{}
	case CapacityReplicas:
		return replicasMover{}
	}
	return nil
}

var (
	_ mover = managedMover{}
	_ mover = fixedMover{}
	_ mover = replicasMover{}
)

// facts are what a mover decides from: the allocation asked for, the route
// and the sides as observed, and the budgets. They hold no pointer.
type facts struct {
	want                         Allocation // State.Desired
	weight                       int32      // the route's observed weight
	weightApplied, weightInvalid bool
	stable, canary               SideObservation
	revisions                    bool  // Observation.Revisions: each side's revision is observed
	surge                        int32 // MaxSurgePercent
	maxUnavailable               int32 // Options.MaxUnavailablePercent
	// The header route's counted share and the mirror percent in force:
	// the larger of what was asked and what the router reports, so a hop
	// on its way counts either way. Both 0 without extras.
	hdr, mirror int32
	// With sticky sessions, the weights a hop may stop on (the tickets'
	// values); empty without.
	grid gridMask
}

// load is the canary's load at weight w with the extras in force (see
// TrafficExtras.CanaryLoad); w itself without extras.
func (f facts) load(w int32) int32 {
	if f.hdr == 0 && f.mirror == 0 {
		return w
	}
	return canaryLoad(f.hdr, f.mirror, w)
}

// weightFor is the largest weight whose load is at most ready (-1 when
// none is); ready itself without extras.
func (f facts) weightFor(ready int32) int32 {
	if f.hdr == 0 && f.mirror == 0 {
		return ready
	}
	for w := int32(100); w >= 0; w-- {
		if canaryLoad(f.hdr, f.mirror, w) <= ready {
			return w
		}
	}
	return -1
}

// hop is one move of a walk, as a mover decides it and the engine makes it.
type hop struct {
	kind hopKind
	to   int32 // the weight or capacity a hop asks for
}

// scales reports whether h sets a side's capacity.
func (h hop) scales() bool { return h.kind == scaleStable || h.kind == scaleCanary }

type hopKind uint8

const (
	// arrived: nothing left to do.
	arrived hopKind = iota
	// shiftWeight: set the route's weight, once the interval allows.
	shiftWeight
	// shiftReplicas: without a router, move traffic by setting the
	// canary's capacity, once the interval allows (see replicaHop).
	shiftReplicas
	// scaleStable and scaleCanary: set a side's capacity.
	scaleStable
	scaleCanary
	// awaitRoute: wait for the data plane to accept the route (the canary
	// may still receive its old share).
	awaitRoute
	// awaitReady: wait for ready capacity.
	awaitReady
)

// The rules below are shared by the modes that have a traffic router
// (managed and fixed) or capacity setters (managed and replicas).

// routeApplied reports whether the data plane has accepted the desired
// weight as a valid split.
func (f facts) routeApplied() bool {
	return f.weightApplied && !f.weightInvalid && f.weight == f.want.Weight
}

// routeAtZero reports whether the data plane has accepted a route that
// sends the canary nothing, as asked.
func (f facts) routeAtZero() bool { return f.want.Weight == 0 && f.routeApplied() }

// canaryAtZero reports whether the canary side was asked for capacity 0 and
// is observed settled there with nothing ready.
func (f facts) canaryAtZero() bool {
	return f.want.CanaryCapacity == 0 && f.canary.Capacity == 0 && f.canary.Ready == 0 && f.canary.Settled
}

// sidesSettled reports whether each side has settled at its desired
// capacity.
func (f facts) sidesSettled() bool {
	return f.stable.Settled && f.stable.Capacity == f.want.StableCapacity &&
		f.canary.Settled && f.canary.Capacity == f.want.CanaryCapacity
}

// sidesHeldBack reports whether each side holds its desired capacity,
// settled or not, for a walk back: a stable side that holds
// more than desired (the write of a reconcile whose state was lost, landed
// after a smaller value was recorded) is as good as held, since a walk back
// wants the stable side larger; the mover scales it to 100 at the end.
func (f facts) sidesHeldBack() bool {
	return f.stable.Capacity >= f.want.StableCapacity && f.canary.Capacity == f.want.CanaryCapacity
}

// shortOfTraffic reports which sides have observed ready capacity below the
// traffic the route sends them while they are not settled.
func (f facts) shortOfTraffic() (stable, canary bool) {
	return 100-f.weight > f.stable.Ready && !f.stable.Settled, f.load(f.weight) > f.canary.Ready && !f.canary.Settled
}

// routeTakeable reports whether the route, accepted as a valid split, sends
// the canary less than asked, and the stable side's observed ready capacity
// covers the traffic it already sends it.
func (f facts) routeTakeable() bool {
	return f.weightApplied && !f.weightInvalid && f.weight < f.want.Weight && 100-f.weight <= f.stable.Ready
}

// routeFits reports whether the traffic the route sends each side is within
// its observed ready capacity.
func (f facts) routeFits() bool {
	return f.load(f.weight) <= f.canary.Ready && 100-f.weight <= f.stable.Ready
}

// routeRepair reports whether a repair writes the desired weight back: the
// route does not hold it as a valid split, and fits.
func (f facts) routeRepair(fits bool) bool {
	return (f.weight != f.want.Weight || f.weightInvalid) && fits
}

// nextWeight is the weight a walk toward t moves to next when each weight
// hop is bounded by limit (0: no bound), on the sticky sessions' grid.
func (f facts) nextWeight(t, limit int32) int32 {
	w := f.want.Weight
	if limit <= 0 || t == w {
		return t
	}
	if t > w {
		if n := f.grid.snap(min(t, w+limit), true); n > w {
			return n
		}
		return min(t, w+limit)
	}
	if n := f.grid.snap(max(t, w-limit), false); n < w {
		return n
	}
	return max(t, w-limit)
}

// weightHop is the next weight hop of a walk on a router toward canary
// weight t: no further than the ready capacity each side may take (rs, rc),
// nor than limit (0: no bound). ok is false when the weight cannot move.
func (f facts) weightHop(t, limit, rs, rc int32) (h hop, ok bool) {
	w := f.want.Weight
	switch {
	case w < t:
		next := min(t, f.weightFor(rc))
		if limit > 0 {
			next = min(next, w+limit)
		}
		next = f.grid.snap(next, true)
		return hop{shiftWeight, next}, next > w
	case w > t:
		next := max(t, 100-rs)
		if limit > 0 {
			next = max(next, w-limit)
		}
		next = f.grid.snap(next, false)
		return hop{shiftWeight, next}, next < w
	}
	return hop{}, false
}

// repairSides reports whether a repair asks each side again for its desired
// capacity: not while the side holds it; up only within the surge budget,
// counting the other side at the larger of its desired and observed
// capacity; down only as the mode's rule down allows, given the traffic the
// side may still carry (the larger of what the route holds and what was
// asked; 101 while the route's weights are invalid, as the real split is
// unknown) and the other side as observed, or as it is asked to shrink to
// in the same repair.
func (f facts) repairSides(down func(f facts, c, traffic int32, other SideObservation) bool) (stable, canary bool) {
	canaryTraffic, stableTraffic := f.load(max(f.want.Weight, f.weight)), 100-min(f.want.Weight, f.weight)
	if f.weightInvalid || !f.weightApplied {
		// The real split is unknown: an invalid one, or weights the data
		// plane has not accepted yet (it may still route by older ones).
		// Nothing may shrink below traffic it might carry.
		canaryTraffic, stableTraffic = 101, 101
	}
	stable = f.resize(f.want.StableCapacity, f.stable, max(f.want.CanaryCapacity, f.canary.Capacity), f.canary, stableTraffic, down)
	// Both sides may be asked in one hop: the canary's rule then counts the
	// stable side at what it is asked to shrink to, not at what it holds
	// now (each side's scale-down, judged against the other's current
	// capacity alone, could let both shrink together below the bound).
	after := f.stable
	if stable && f.want.StableCapacity < after.Capacity {
		after.Capacity = f.want.StableCapacity
		after.Ready = min(after.Ready, f.want.StableCapacity)
	}
	canary = f.resize(f.want.CanaryCapacity, f.canary, max(f.want.StableCapacity, f.stable.Capacity), after, canaryTraffic, down)
	return stable, canary
}

// resize reports whether a repair may ask a side (observed as side) for
// capacity c, the other side counted at other. See repairSides.
func (f facts) resize(c int32, side SideObservation, other int32, otherSide SideObservation, traffic int32,
	down func(f facts, c, traffic int32, other SideObservation) bool) bool {
	switch {
	case c == side.Capacity:
		return false // nothing to repair
	case c > side.Capacity:
		return c+other <= 100+f.surge
	}
	return down(f, c, traffic, otherSide)
}
