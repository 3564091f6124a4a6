package strategy

// fixedMover is the mover of CapacityFixed: both sides stay as provisioned
// and only the route's weight moves, bounded by what each side reports
// ready. There is no capacity setter: nothing is scaled, waited for or
// repaired on the sides.
type fixedMover struct{}

func (fixedMover) applied(f facts) bool { return f.routeApplied() }

func (fixedMover) inPlace(f facts) bool { return f.weight == f.want.Weight }

func (fixedMover) readinessLost(f facts) (stable, canary bool) { return f.shortOfTraffic() }

func (fixedMover) takesRoute(f facts) bool { return f.routeTakeable() }

// next moves the weight within each side's observed ready capacity, and
// otherwise waits for it.
func (fixedMover) next(f facts, t, limit int32) hop {
	if h, ok := f.weightHop(t, limit, f.stable.Ready, f.canary.Ready); ok {
		return h
	}
	if f.want.Weight == t {
		return hop{kind: arrived}
	}
	return hop{kind: awaitReady}
}

func (fixedMover) restore(facts) hop { return hop{kind: arrived} }

func (fixedMover) emergency(facts) (bool, hop) { return true, hop{kind: arrived} }

func (fixedMover) repair(f facts, fits bool) (weight, stable, canary bool) {
	return f.routeRepair(fits), false, false
}

func (fixedMover) completion() (drain, release bool) { return false, false }

func (fixedMover) available(f facts) bool { return f.routeFits() }

// broken: the fixed mode has no rules of its own on a desired allocation.
func (fixedMover) broken(Allocation, bool) uint8 { return 0 }

func (fixedMover) breach(Allocation, int) (path string, value int32, detail string) {
	return "", 0, ""
}

func (fixedMover) atZero(f facts) bool { return f.routeAtZero() }

// keepHeld: the fixed mode asks nothing of the sides.
func (fixedMover) keepHeld(f facts) (Allocation, bool) { return f.want, false }

func (fixedMover) carries(f facts) bool { return f.want.Weight > 0 || f.weight > 0 }
