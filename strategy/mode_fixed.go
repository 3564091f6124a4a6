package strategy

// fixedMover is the mover of CapacityFixed: both sides stay as provisioned
// and only the route's weight moves, bounded by what each side reports
// ready. There is no capacity setter: nothing is scaled, waited for or
// repaired on the sides.
//
// A side reported as provisioned is not always ready: a Runner without a
// capacity setter reports each side at Ready 100, while a side observed
// running a revision that has not rolled out (restarting, or redeployed by
// someone else, perhaps stuck) may have lost its replicas. The mover
// trusts such a side with no more traffic than the route sends it now
// (provisioned), so nothing is moved onto it until it has rolled out.
type fixedMover struct{}

// provisioned returns f with the ready capacity the mover trusts: a side
// observed running a revision that has not rolled out is ready for the
// traffic it carries, no more.
func (f facts) provisioned() facts {
	if !f.revisions {
		return f
	}
	share := min(max(f.weight, 0), 100)
	if !f.stable.Updated {
		f.stable.Ready = min(f.stable.Ready, 100-share)
	}
	if !f.canary.Updated {
		f.canary.Ready = min(f.canary.Ready, f.load(share))
	}
	return f
}

func (fixedMover) applied(f facts) bool { return f.routeApplied() }

func (fixedMover) weightApplied(f facts) bool { return f.routeApplied() }

func (fixedMover) inPlace(f facts) bool { return f.weight == f.want.Weight }

func (fixedMover) readinessLost(f facts) (stable, canary bool) {
	return f.provisioned().shortOfTraffic()
}

func (fixedMover) takesRoute(f facts) bool { return f.provisioned().routeTakeable() }

func (fixedMover) ready(f facts) (stable, canary int32) {
	f = f.provisioned()
	return f.stable.Ready, f.canary.Ready
}

// next moves the weight within each side's trusted ready capacity, and
// otherwise waits for it.
func (fixedMover) next(f facts, t, limit int32) hop {
	f = f.provisioned()
	if h, ok := f.weightHop(t, limit, f.stable.Ready, f.canary.Ready); ok {
		return h
	}
	if f.want.Weight == t {
		return hop{kind: arrived}
	}
	return hop{kind: awaitReady}
}

func (fixedMover) restore(facts) hop { return hop{kind: arrived} }

// release: both sides stay as provisioned.
func (fixedMover) release(facts) hop { return hop{kind: arrived} }

func (fixedMover) provide(facts, int32) hop { return hop{kind: awaitReady} }

func (fixedMover) emergency(facts) (bool, hop) { return true, hop{kind: arrived} }

func (fixedMover) repair(f facts, fits bool) (weight, stable, canary bool) {
	return f.routeRepair(fits), false, false
}

func (fixedMover) completion() (drain, release bool) { return false, false }

func (fixedMover) available(f facts) bool { return f.provisioned().routeFits() }

// broken: the fixed mode has no rules of its own on a desired allocation.
func (fixedMover) broken(Allocation, bool) uint8 { return 0 }

func (fixedMover) breach(Allocation, int) (path string, value int32, detail string) {
	return "", 0, ""
}

func (fixedMover) atZero(f facts) bool { return f.routeAtZero() }

// keepHeld: the fixed mode asks nothing of the sides.
func (fixedMover) keepHeld(f facts) (Allocation, bool) { return f.want, false }

func (fixedMover) carries(f facts) bool { return f.want.Weight > 0 || f.weight > 0 }

// growForRoute: no stable capacity to grow.
func (fixedMover) growForRoute(facts) hop { return hop{kind: arrived} }
