package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// move walks toward canary weight t, one hop at a time, and reports whether
// t is reached with nothing left to do. limit bounds one weight hop (0: no
// bound); interval is the least time between two weight hops. The mover
// decides each hop; move makes it.
func (r *run) move(t, limit int32, interval time.Duration) bool {
	h := r.e.mode.next(r.facts(), t, limit)
	if h.kind == arrived {
		return true
	}
	r.take(h, interval)
	return false
}

// take makes a hop a mover decided. A weight hop waits for interval first.
func (r *run) take(h hop, interval time.Duration) {
	switch h.kind {
	case shiftWeight:
		r.weightHop(h.to, interval)
	case shiftReplicas:
		r.replicaHop(h.to, interval)
	case scaleStable:
		r.hopStable(h.to)
	case scaleCanary:
		r.hopCanary(h.to)
	case awaitRoute:
		r.waitApplied()
	case awaitReady:
		r.waitCapacity()
	}
}

func (r *run) weightHop(w int32, interval time.Duration) {
	if r.intervalWait(interval) {
		return
	}
	r.hopWeight(w)
	r.st.PromoteRequested = false
}

// intervalWait reports whether a weight hop must wait for the interval, and
// if so sets the exact requeue. The interval counts from intervalStart.
func (r *run) intervalWait(interval time.Duration) bool {
	end, waiting := r.intervalRunning(interval)
	if waiting {
		r.st.Message = msgWaitingInterval
		r.d.RequeueAfter = end.Sub(r.now)
	}
	return waiting
}

func (r *run) waitCapacity() {
	r.st.Message = msgWaitingCapacity
	r.deadline(true)
}

func (r *run) hopped() {
	r.st.HopAt = micro(r.now)
	r.poll(r.now, r.e.opts.pollInterval())
	if r.st.Phase != PhaseAborting {
		r.st.Message = ReasonProgressing
	}
}

func (r *run) hopWeight(w int32) {
	r.d.Weight = Target{Set: true, Value: w}
	r.st.Desired.Weight = w
	r.st.WeightChangedAt, r.st.WeightAppliedAt, r.st.WeightPendingAt = micro(r.now), metav1.MicroTime{}, metav1.MicroTime{}
	r.hopped()
}

func (r *run) hopStable(c int32) {
	r.d.StableCapacity = Target{Set: true, Value: c}
	r.st.Pace.StableAskedAt = micro(r.now)
	r.st.Desired.StableCapacity = c
	r.hopped()
}

func (r *run) hopCanary(c int32) {
	r.d.CanaryCapacity = Target{Set: true, Value: c}
	r.st.Pace.CanaryAskedAt = micro(r.now)
	r.st.Desired.CanaryCapacity = c
	r.hopped()
}

func (r *run) waitApplied() {
	if r.st.Phase != PhasePaused {
		// A hop asked during a pause (capacity released or prepared)
		// leaves the pause's message, and so its condition, as it was.
		r.st.Message = msgWaitingHop
	}
	r.deadline(false)
}

// waitingSince is when the current wait for the world began: the latest of
// the last hop, the start of the rollout, the start of the current step and
// the last command.
func (r *run) waitingSince() time.Time {
	st := r.st
	t := st.HopAt.Time
	for _, x := range [...]*metav1.MicroTime{&st.StartedAt, &st.StepStartedAt, &st.LastCommandAt} {
		if x.Time.After(t) {
			t = x.Time
		}
	}
	return t
}

// deadline sets the requeue while waiting for the world (a hop to be
// applied, capacity to become ready, a gate verdict) and enforces the
// progress deadline, counted from waitingSince: Degraded when it passes,
// and an abort if asked.
//
// applied says every hop is in place, so an abort can start walking back in
// this same Step.
func (r *run) deadline(applied bool) {
	st, o := r.st, r.e.opts
	wait := o.pollInterval()
	if dl, since := o.progressDeadline(), r.waitingSince(); dl > 0 && !since.IsZero() {
		deadline := since.Add(dl)
		if !r.now.Before(deadline) {
			r.overdue = true
			if o.AbortOnProgressDeadline && st.Phase != PhaseAborting {
				r.abort(ReasonProgressDeadlineExceeded)
				r.d.RequeueAfter = wait
				if applied {
					r.walkBack()
				}
				return
			}
		} else if left := deadline.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.poll(r.waitingSince(), wait)
}

// poll sets the requeue to wait for the world since the instant since:
// full for a caller notified of every change, a backed-off poll otherwise
// (see finish).
func (r *run) poll(since time.Time, full time.Duration) {
	r.d.RequeueAfter = full
	r.polling, r.pollWaited, r.pollFull = true, r.now.Sub(since), full
}

// finish sets the requeues of the decision: WatchedRequeueAfter is the one
// Step decided; RequeueAfter is shortened to a backed-off poll when that
// decision is a wait for the world.
func (r *run) finish() {
	d := r.d
	d.WatchedRequeueAfter = d.RequeueAfter
	if r.polling && d.RequeueAfter == r.pollFull && d.RequeueAfter > 0 {
		d.RequeueAfter = min(d.RequeueAfter, r.e.opts.pollWait(r.pollWaited))
	}
}

// repair asks again for what the adapters do not hold once a poll interval
// has passed since the hop: a write that was lost, overwritten by someone
// else, or made by a reconcile whose state was never stored, and weights
// that are not a valid split. Adapters are idempotent. It does not touch
// HopAt: the progress deadline keeps counting.
//
// A repair is checked against the world as observed now, never trusted
// because it was once recorded: the weight is written back only if both
// sides' observed ready capacity covers it; a side is scaled down only to
// at least the traffic it may carry (the larger of what the route holds and
// what was asked; none while the route's weights are invalid, as the real
// split is unknown); a side is scaled up only within the surge budget,
// counting the other side at the larger of its desired and observed
// capacity. In the Replicas mode a side is scaled down only while the other
// side's ready capacity keeps the total within MaxUnavailablePercent, the
// other side counted at what the same repair shrinks it to, and only once
// it has settled (one still moving may be shrinking). The mover decides
// what its mode repairs (no route without a router, no side without
// capacity setters).
func (r *run) repair() {
	st := r.st
	if !st.HopAt.IsZero() && r.now.Before(after(st.HopAt, r.e.opts.pollInterval())) {
		return
	}
	want := &st.Desired
	weight, stable, canary := r.e.mode.repair(r.facts(), r.fits(want.Weight))
	if weight && st.Phase == PhaseAborting && want.Weight > st.Observed.Weight && st.Observed.WeightApplied && !st.Observed.WeightInvalid {
		// A walk back never writes the canary's share back onto a route
		// that already sends it less: it takes that route once the stable
		// side is ready for it (takeRouteWeight).
		weight = false
	}
	if weight && (want.Weight <= st.Observed.Weight || r.canaryRevisionOK()) {
		r.d.Weight = Target{Set: true, Value: want.Weight}
	}
	if stable {
		r.d.StableCapacity = Target{Set: true, Value: want.StableCapacity}
	}
	if canary && (want.CanaryCapacity < st.Observed.Canary.Capacity || r.canaryRevisionOK() && r.canaryFromZeroOK()) {
		c := want.CanaryCapacity
		r.d.CanaryCapacity = Target{Set: true, Value: c, Steady: st.SteadyRequested && c == 100}
	}
	if !r.extrasApplied() && r.extrasFit(st.DesiredExtras) {
		r.d.Extras = true
	}
}

// fits reports whether canary weight w would keep traffic within the
// observed ready capacity of both sides. An emergency walk back may always
// lower the weight.
func (r *run) fits(w int32) bool {
	st := r.st
	if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency &&
		(w == 0 || w < st.Observed.Weight && !st.Observed.WeightInvalid) {
		return true
	}
	f := r.facts()
	stable, canary := r.e.mode.ready(f)
	return f.load(w) <= canary && 100-w <= stable
}
