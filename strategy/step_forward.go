package strategy

import (
	"time"
)

func (r *run) progress() {
	st, e := r.st, r.e
	if st.AwaitingResume && st.PromoteRequested {
		st.unholdStep() // a Promote passes the step's own hold, never another
	}
	if st.AwaitingResume {
		st.becomePaused()
		switch st.PauseReason {
		case ReasonPauseStep:
			st.Message = msgPausedStep
		case ReasonGateInconclusive:
			st.Message = msgPausedGate
		case ReasonUnhealthy:
			st.Message = msgPausedUnhealthy
		case ReasonControlPause:
			st.Message = msgPausedControl
		default:
			st.Message = msgPausedManual
		}
		return
	}
	st.becomeProgressing()
	if r.stableShort {
		// The stable side lost readiness under its traffic: move nothing
		// until it recovers (Degraded says why).
		o := &st.Observed
		setShort(&st.Message, "stable", o.Stable.Ready, 100-o.Weight)
		r.d.RequeueAfter = e.opts.pollInterval()
		return
	}
	if st.Observed.Health == HealthUnhealthy || r.canaryShort {
		st.Message = msgUnhealthy
		if r.canaryShort {
			o := &st.Observed
			setShort(&st.Message, "canary", o.Canary.Ready, o.Weight)
		}
		r.d.RequeueAfter = e.opts.pollInterval()
		return
	}
	if st.Observed.Health == HealthInconclusive && st.Observed.Weight > 0 {
		// The canary has traffic but its health cannot be told: give it
		// no more until it can, within the progress deadline.
		r.holdInconclusive()
		return
	}
	if !r.onRevision() {
		return
	}
	if !r.extrasTo(r.extrasAt(int(st.StepIndex))) {
		return
	}
	if st.PromoteFullRequested {
		st.ResumeWeight = 0
		if r.move(100, 0, 0) {
			r.reached()
		}
		return
	}
	if st.ResumeWeight > 0 {
		// Resumed from a suspension: back up to where it stood, then the
		// step it stood at is entered again.
		if st.Desired.Weight < st.ResumeWeight && !r.move(st.ResumeWeight, 0, 0) {
			return
		}
		st.ResumeWeight = 0
		r.enter(st.StepIndex) // a pause step holds the rollout again below
	}
	if !e.canary {
		end, waiting := r.intervalRunning(e.interval)
		waiting = waiting && st.Desired.Weight < 100 // at 100 nothing waits
		if !waiting && r.release() {
			return
		}
		if waiting {
			if !r.overlap(100, e.stepPct, end) {
				st.Message = msgWaitingInterval
				r.d.RequeueAfter = r.waitUntil(end)
			}
			return
		}
		if r.move(100, e.stepPct, e.interval) {
			r.reached()
		}
		return
	}
	for int(st.StepIndex) < len(e.steps) {
		i := st.StepIndex
		s := &e.steps[i]
		if !r.extrasTo(r.extrasAt(int(i))) {
			return // a header route or mirror step, or a step edited
		}
		switch {
		case s.SetWeight != nil:
			st.PromoteRequested = false // nothing to skip in a walk
			if !r.atWeight(*s.SetWeight) && !r.move(*s.SetWeight, 0, 0) {
				return
			}
		case s.Pause != nil && s.Pause.Duration != nil:
			end := after(st.StepStartedAt, s.Pause.Duration.Duration)
			if !st.PromoteRequested && r.now.Before(end) {
				st.becomePaused()
				if !r.overlap(e.weightAfter(int(i)), 0, end) {
					r.d.RequeueAfter = r.waitUntil(end)
				}
				st.Message = msgPausedStep
				return
			}
		case s.Pause != nil:
			if !st.PromoteRequested && !st.Resumed {
				st.hold(ReasonPauseStep, micro(r.now))
				st.becomePaused()
				r.release()
				st.Message = msgPausedStep
				return
			}
		case s.Gate != nil:
			st.Gate = s.Gate.Name
			g := st.Observed.Gate(s.Gate.Name)
			if !g.At.IsZero() && micro(g.At.Time).Time.Before(st.StepStartedAt.Time) {
				g.Verdict = VerdictPending // stale: from an earlier run of this gate
			}
			if !st.PromoteRequested && !st.Resumed {
				switch g.Verdict {
				case VerdictPass:
				case VerdictFail:
					st.Gate = ""
					r.abort(ReasonGateFailed)
					r.walkBack()
					return
				case VerdictInconclusive:
					st.hold(ReasonGateInconclusive, micro(r.now))
					st.becomePaused()
					st.Message = msgPausedGate
					return
				default:
					if !r.release() {
						r.deadline(true) // a verdict that never comes is a stuck rollout too
					}
					st.Message = msgWaitingGate
					return
				}
			}
		}
		r.enter(i + 1)
	}
	if r.move(100, 0, 0) {
		r.reached()
	}
}

// enter starts step i now.
func (r *run) enter(i int32) {
	st := r.st
	st.StepIndex = i
	st.StepStartedAt = micro(r.now)
	st.PromoteRequested = false
	st.Gate = ""
	st.unholdStep()
	st.Resumed = false
	if r.e.canary {
		var buf [16]byte
		n := min(int(i)+1, len(r.e.steps))
		if h := stepsHash(r.e.steps[:n], &buf); string(h) != st.StepsHash {
			st.StepsHash = string(h)
		}
		if int(i) < len(r.e.steps) {
			// A hold of another kind (the spec's pause, a manual pause, an
			// unhealthy canary) stays: a Promote passes the pause step, never
			// that hold. The step holds the rollout once the hold ends.
			if p := r.e.steps[i].Pause; p != nil && p.Duration == nil {
				st.hold(ReasonPauseStep, micro(r.now))
			}
		}
	}
}

// effectiveWeight is the weight in force at step i: that of the last
// SetWeight at or before it, 0 if none.
func (e *engine) effectiveWeight(i int) int32 {
	for j := min(i, len(e.steps)-1); j >= 0; j-- {
		if w := e.steps[j].SetWeight; w != nil {
			return *w
		}
	}
	return 0
}

// checkSteps re-places the rollout when the steps up to and including the
// current one changed (an edit mid-rollout, or a Retry): it continues at the
// first step whose weight is >= the current weight, never at step 0 by
// default. Edits after the current step take effect without disturbing it.
func (r *run) checkSteps() {
	st := r.st
	var buf [16]byte
	n := min(int(st.StepIndex)+1, len(r.e.steps))
	if n < 0 {
		n = 0
	}
	if string(stepsHash(r.e.steps[:n], &buf)) == st.StepsHash && int(st.StepIndex) <= len(r.e.steps) && st.StepIndex >= 0 {
		return
	}
	i := len(r.e.steps)
	for j := range r.e.steps {
		if r.e.effectiveWeight(j) >= st.Desired.Weight {
			i = j
			break
		}
	}
	r.enter(int32(i))
}

// atWeight reports whether the weight asked for is t and observed in force:
// a SetWeight step is complete then, even where the mover still has
// capacity to release (see release), which the wait that follows does.
func (r *run) atWeight(t int32) bool {
	return r.st.Desired.Weight == t && r.e.mode.weightApplied(r.facts())
}

// release asks for the scale-down of capacity the weight in force no longer
// needs, as soon as that weight is observed applied (see mover.release). It
// reports whether it asked for a hop.
func (r *run) release() bool {
	h := r.e.mode.release(r.facts())
	if !h.scales() {
		return false
	}
	r.take(h, 0)
	return true
}

// overlap puts a wait that ends at end (a timed pause, an interval) to use
// before the walk toward canary weight t, each weight hop bounded by limit,
// goes on: it releases what the weight in force no longer needs, then asks
// for the capacity the walk's next weight needs, within the surge budget,
// as late as it can be asked and still be ready when the wait ends (the
// canary's Pace; as soon as the wait begins while that is unknown). Until
// then it leaves r.prepIn set. A wait too short to release and then
// prepare (less left than both sides' paces: the stable side's taken as
// the canary's until observed) asks for both in one decision when
// preparing is due, if the budget holds them with the stable side counted
// at the capacity it still has. It reports whether it asked for a hop.
func (r *run) overlap(t, limit int32, end time.Time) bool {
	f := r.facts()
	rel := r.e.mode.release(f)
	if t <= f.want.Weight {
		// Nothing to prepare: only the release.
		return r.release()
	}
	lead, known := r.st.Pace.CanarySettle.Duration, r.st.Pace.CanarySettle.Duration > 0
	if lead <= time.Microsecond {
		lead = 0 // observed ready at once (see Pace): prepared when the wait ends
	}
	settle := r.st.Pace.StableSettle.Duration
	if settle <= 0 {
		settle = lead // unknown: a scale-down taken to settle no faster than a scale-up
	}
	if rel.scales() && (!known || end.Sub(r.now) >= settle+lead) {
		r.take(rel, 0) // time enough to release, then prepare
		return true
	}
	after := f
	if rel.kind == scaleStable {
		after.want.StableCapacity = rel.to
	}
	h := r.e.mode.next(after, t, limit)
	switch {
	case h.kind != scaleCanary || h.to <= f.want.CanaryCapacity:
		// The capacity is there, or the walk moves weight first.
		return r.release()
	case rel.scales() && h.to+max(f.stable.Capacity, f.want.StableCapacity) > 100+f.surge:
		return r.release() // no room for both: the release first
	}
	if start := end.Add(-lead); known && r.now.Before(start) {
		r.prepIn = start.Sub(r.now)
		return false
	}
	r.release()
	r.take(h, 0)
	return true
}

// waitUntil is the requeue of a wait that ends at end: then, or sooner when
// overlap prepares capacity before it.
func (r *run) waitUntil(end time.Time) time.Duration {
	d := end.Sub(r.now)
	if r.prepIn > 0 {
		d = min(d, r.prepIn)
	}
	return d
}

// intervalRunning reports whether a weight hop must wait for the interval
// (counted from intervalStart; a promote skips it), and when that wait
// ends.
func (r *run) intervalRunning(interval time.Duration) (time.Time, bool) {
	st := r.st
	if interval <= 0 || st.PromoteRequested || st.WeightChangedAt.IsZero() {
		return time.Time{}, false
	}
	end := st.intervalStart().Add(interval)
	return end, r.now.Before(end)
}

// weightAfter is the weight the steps walk to after step i, when what
// follows it is a SetWeight (or the end: 100); -1 when a gate, a pause or
// a change of extras comes first, whose end cannot be timed.
func (e *engine) weightAfter(i int) int32 {
	if i+1 >= len(e.steps) {
		return 100
	}
	if w := e.steps[i+1].SetWeight; w != nil {
		return *w
	}
	return -1
}

// holdInconclusive holds a canary with traffic whose health cannot be told
// (HealthInconclusive) and counts the hold toward the progress deadline
// from holdDue: once the deadline passes the rollout is Degraded
// (ProgressDeadlineExceeded), and aborts if AbortOnProgressDeadline. A hold
// that ends before then costs nothing more than its wait.
func (r *run) holdInconclusive() {
	st, o := r.st, r.e.opts
	st.Message = msgInconclusive
	wait := o.pollInterval()
	if due, bounded := r.holdDue(); bounded && o.progressDeadline() > 0 {
		end := due.Add(o.progressDeadline())
		if !r.now.Before(end) {
			r.overdue = true
			if o.AbortOnProgressDeadline {
				r.abort(ReasonProgressDeadlineExceeded)
				r.d.RequeueAfter = wait
				r.walkBack()
				return
			}
		} else if left := end.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.d.RequeueAfter = wait
}

// holdDue is when the rollout would have moved on had the canary's health
// been known: when the wait for the world began (waitingSince: the last
// hop, the start of the step, the last command), or later when the timed
// waits it was in end: the step interval since the last weight hop
// (Incremental) or the timed pauses the steps hold next (Canary: a pause
// step in progress counts from its start; the pauses that follow a
// SetWeight already reached, from the start of the wait). A promotion
// skips them. So an inconclusive health during a pause or an interval
// costs none of the deadline; only the time the hold adds does. It reports
// false when the steps ahead pause until resumed: the rollout would not
// have moved on by itself, and such a pause has no deadline either.
func (r *run) holdDue() (time.Time, bool) {
	st, e := r.st, r.e
	due := r.waitingSince()
	if st.PromoteRequested || st.PromoteFullRequested {
		return due, true
	}
	if !e.canary {
		if e.interval > 0 && !st.WeightChangedAt.IsZero() {
			if end := st.intervalStart().Add(e.interval); end.After(due) {
				due = end
			}
		}
		return due, true
	}
	for i := int(st.StepIndex); i >= 0 && i < len(e.steps); i++ {
		s := &e.steps[i]
		switch {
		case s.SetWeight != nil && *s.SetWeight == st.Desired.Weight:
			// Reached: the next step would begin.
		case s.Pause != nil && s.Pause.Duration != nil:
			start := due
			if i == int(st.StepIndex) {
				start = st.StepStartedAt.Time
			}
			if end := start.Add(s.Pause.Duration.Duration); end.After(due) {
				due = end
			}
		case s.Pause != nil:
			return due, i == int(st.StepIndex) && st.Resumed
		default:
			return due, true // a hop or a gate
		}
	}
	return due, true
}

// reached is called when all traffic is observed on the canary.
func (r *run) reached() {
	st := r.st
	st.becomeCompleting()
	st.ReachedAt = micro(r.now)
	st.PromoteRequested, st.PromoteFullRequested = false, false
	r.complete()
}
