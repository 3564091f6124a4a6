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

// step is one Step of a rollout that has observed the world: what every
// phase does first (an observation that failed, what the observation shows
// of the last hops), then the step function of the phase the rollout is in.
// A phase's step may change the phase (see transitions.go); a rollout that
// starts walking back in this Step goes on as one in the same Step.
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
		r.start()
	}
	if st.Phase != PhaseAborting {
		r.judge()
	} else {
		r.countHealth() // counted, never acted on: the walk back goes on
	}
	switch st.Phase {
	case PhaseAborting:
		r.stepAborting()
	case PhaseCompleting:
		r.stepCompleting()
	case PhaseProgressing, PhasePaused:
		r.stepForward()
	}
}

// start begins the rollout at its first step, now.
func (r *run) start() {
	st := r.st
	st.becomeProgressing()
	st.StartedAt = micro(r.now)
	st.Pace = Pace{}
	promote := st.PromoteRequested // a Promote written with the new revision passes its first step
	r.enter(0)
	st.PromoteRequested = promote
}

// judge reads what this Step's observation says of a rollout that is not
// walking back: edited steps, readiness lost under traffic, the canary's
// health and the sides' revisions. An unhealthy canary holds the rollout
// or aborts it (Options.UnhealthyAction; a completing rollout only counts
// it), and so does a revision changed under the rollout.
func (r *run) judge() {
	st := r.st
	if r.e.canary {
		r.checkSteps()
	}
	r.readiness()
	if bad, reason := r.countHealth(); bad && st.Phase != PhaseCompleting {
		if r.e.opts.UnhealthyAction == UnhealthyPause {
			st.hold(ReasonUnhealthy, micro(r.now))
		} else {
			r.abort(reason)
		}
	}
	if st.Phase != PhaseAborting && r.revisionChanged() {
		r.abort(ReasonRevisionChanged)
	}
}

// stepForward is the step of PhaseProgressing and PhasePaused: once the last
// hop is observed applied, walk the steps (see progress).
func (r *run) stepForward() {
	if !r.applied() {
		r.awaitHop()
		return
	}
	r.progress()
}

// stepCompleting is the step of PhaseCompleting: once the last hop is
// observed applied, release the stable side and succeed (see complete).
func (r *run) stepCompleting() {
	if !r.applied() {
		r.awaitHop()
		return
	}
	r.complete()
}

// stepAborting is the step of PhaseAborting: an emergency walk back sends
// everything to the stable side at once; otherwise the walk back takes a
// route that already sends the canary less, and then walks back hop by hop
// (see walkBack). It does not wait for capacity that may never come (a
// canary whose pods never become ready): every hop it asks for moves toward
// the stable side and is bounded by observed ready capacity, so once the
// route holds the desired weight and each side the desired capacity
// (settled or not) it goes on.
func (r *run) stepAborting() {
	applied := r.applied() // of the hops asked, before keepHeld revises them
	r.keepHeld()
	r.markEmergency()
	if r.emergencyNow() || r.takeRouteWeight() {
		return
	}
	if !applied && !r.inPlace() {
		r.awaitHop()
		return
	}
	r.walkBack()
}

// awaitHop waits for the last hop to be applied, and asks again for what
// the adapters lost (see repair). A progress deadline that aborts the
// rollout meanwhile may send everything to the stable side at once.
func (r *run) awaitHop() {
	r.waitApplied()
	if r.emergencyNow() {
		return
	}
	r.repair()
}
