package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// engine is the machinery shared by every strategy: commands in the state,
// health, deadlines, steps, the capacity-safe mover and completion. What
// depends on the capacity mode is asked of mode, never tested here.
type engine struct {
	opts     Options
	mode     mover // the capacity mode's behaviour, picked once (moverFor)
	surge    int32
	stepPct  int32         // Incremental: largest weight hop; 0 = unlimited
	interval time.Duration // Incremental: least time between weight hops
	steps    []CanaryStep
	canary   bool
	// Session affinity (Options.SessionAffinity) and its ticket values:
	// the weights the rollout walks through, each weight hop rounded to
	// one of them.
	affinity *SessionAffinity
	grid     []int32
	mask     gridMask
}

// run is one Step in progress.
type run struct {
	e          *engine
	d          *Decision
	st         *State
	now        time.Time
	condCopied bool
	overdue    bool // ProgressDeadline passed while waiting
	failed     bool // the observation is an adapter error: nothing else is known
	// skewed: the state records an instant more than MaxClockSkew ahead of
	// the caller's now (see State.CheckClock).
	skewed bool

	// Readiness lost under traffic (managed and fixed modes, outside a walk
	// back): the side's observed ready capacity is below the traffic the
	// route sends it.
	canaryShort, stableShort bool
	// stableRevision: the stable side runs another revision than the
	// stable one; stableRevisionMsg says which (see stableMismatch).
	stableRevision    bool
	stableRevisionMsg string
	// polling: the requeue pollFull was set to wait for the world for
	// pollWaited so far; Step shortens it to a backed-off poll
	// (Options.pollWait) unless something else set the requeue since. (A
	// duration rather than an instant: a time.Time stored here would move
	// the run to the heap.)
	polling    bool
	pollWaited time.Duration
	pollFull   time.Duration
	// prepIn: a wait (a timed pause, an interval) will ask for the capacity
	// its next weight needs this long from now (see overlap); 0 when not.
	prepIn time.Duration
}

func (e *engine) invalid(s State, now time.Time, err error) Decision {
	d := Decision{State: s}
	r := run{e: e, d: &d, st: &d.State, now: clock(&s, now)}
	r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonInvalidOptions, err.Error())
	return d
}

func (e *engine) step(s State, now time.Time) Decision {
	d := Decision{State: s}
	r := run{e: e, d: &d, st: &d.State, now: clock(&s, now)}
	switch {
	case s.Idle():
		// Nothing to roll out: ask for nothing, whatever the allocation says.
		d.State.Message = msgIdle
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonIdle, msgIdle)
		return d
	case !s.valid(e.mode, nil):
		// A corrupt state is never applied, not even repaired.
		err := s.validate(e.mode)
		d.State.Message = err.Error()
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonInvalidState, err.Error())
		return d
	case s.Unobserved:
		// A state that has not looked at the world: adopt it from this
		// observation, asking for nothing.
		r.skewed = r.now.Sub(now) > MaxClockSkew
		r.adopt()
		if r.skewed {
			r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonClockSkew, msgClockSkew)
		}
		return d
	}
	r.skewed = r.now.Sub(now) > MaxClockSkew
	r.step()
	r.conditions()
	r.finish()
	return d
}

func (r *run) step() {
	st := r.st
	if st.Phase.Terminal() {
		return
	}
	if st.Observed.Error != "" {
		r.failing()
		return
	}
	st.FailingSince = metav1.MicroTime{}
	r.noteWeightApplied()
	r.notePace()
	if st.Phase == "" {
		st.Phase = PhaseProgressing
		st.StartedAt = micro(r.now)
		st.Pace = Pace{}
		promote := st.PromoteRequested // a Promote written with the new revision passes its first step
		r.enter(0)
		st.PromoteRequested = promote
	}
	if r.e.canary && st.Phase != PhaseAborting {
		r.checkSteps()
	}
	r.readiness()
	applied := r.applied()
	if bad, reason := r.countHealth(); bad && st.Phase != PhaseAborting && st.Phase != PhaseCompleting {
		if r.e.opts.UnhealthyAction == UnhealthyPause {
			if !st.AwaitingResume {
				st.AwaitingResume, st.PauseReason, st.PausedAt = true, ReasonUnhealthy, micro(r.now)
			}
		} else {
			r.abort(reason)
		}
	}
	if st.Phase != PhaseAborting && r.revisionChanged() {
		r.abort(ReasonRevisionChanged)
	}
	if st.Phase == PhaseAborting {
		r.keepHeld()
		r.markEmergency()
	}
	if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency && r.emergency() {
		return
	}
	if st.Phase == PhaseAborting && r.takeRouteWeight() {
		return
	}
	if !applied && !(st.Phase == PhaseAborting && r.inPlace()) {
		// A walk back does not wait for capacity that may never come (a
		// canary whose pods never become ready): every hop it asks for moves
		// toward the stable side and is bounded by observed ready capacity,
		// so once the route holds the desired weight and each side holds the
		// desired capacity (settled or not) it may go on.
		r.waitApplied()
		if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency && r.emergency() {
			return // the deadline just aborted: all traffic to the stable side now
		}
		r.repair()
		return
	}
	switch st.Phase {
	case PhaseAborting:
		r.walkBack()
	case PhaseCompleting:
		r.complete()
	default:
		r.progress()
	}
}
