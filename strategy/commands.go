package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Commands are pure: each returns a new State and leaves s untouched. Each
// records when it happened (LastCommandAt), which also bounds the clock from
// below for later Steps. A command that does not apply to the current phase
// returns s unchanged (for example Resume when nothing is paused, or Retry
// when nothing was aborted); on an idle state (see State.Idle) only Retarget
// does anything.

func (s State) command(now time.Time) State {
	s.LastCommandAt = micro(clock(&s, now))
	return s
}

// Pause holds the rollout where it is until Resume. It does not hold an
// abort, nor a rollout that has finished. A timed pause step keeps counting
// while paused.
func (s State) Pause(now time.Time) State { return s.pause(ReasonManualPause, now) }

// pause is Pause with the reason recorded (ManualPause, or ControlPause for
// the pause Control.Paused holds).
func (s State) pause(reason string, now time.Time) State {
	if !s.holdable() || s.AwaitingResume {
		return s
	}
	s = s.command(now)
	s.hold(reason, s.LastCommandAt)
	return s
}

// Suspend walks all traffic and capacity back to the stable side and
// releases the canary (capacity 0, extras dropped), keeping where the
// rollout stood (State.ResumeWeight, the step): the rollout ends
// PhaseSuspended, and Resume goes on from there. The walk back is an
// abort's (Options.AbortRamp; never an emergency), stable capacity first,
// and Degraded stays clear. A rollout not yet stepped is suspended at
// once. It does nothing on an idle or finished rollout, nor during an
// abort's walk back; during a Retarget's walk back it keeps the new
// revision from starting until Resume.
func (s State) Suspend(now time.Time) State { return s.suspend(ReasonSuspended, now) }

// suspend is Suspend with the reason recorded (Suspended, or
// ControlSuspend for the suspension Control.Suspended holds).
func (s State) suspend(reason string, now time.Time) State {
	switch {
	case s.suspended():
		return s
	case s.Unobserved:
		if s.Aborted != nil {
			return s
		}
		s = s.command(now)
		s.recordAbort(reason, s.LastCommandAt, false)
		return s
	case s.Idle() || s.Phase.Terminal():
		return s
	case s.Phase == "":
		s = s.command(now)
		s.suspendUnstarted(reason, s.LastCommandAt)
		return s
	case s.Phase == PhaseAborting:
		if !s.retargetWalkBack() {
			return s // an abort's walk back: it ends Aborted
		}
		s = s.command(now)
		s.recordAbort(reason, s.LastCommandAt, true)
		return s
	}
	s = s.command(now)
	// A rollout resumed and suspended again before it was back where it
	// stood keeps that weight.
	s.ResumeWeight = max(s.ResumeWeight, s.Desired.Weight)
	s.becomeAborting(reason, s.LastCommandAt)
	return s
}

// Resume ends a manual pause (the Pause command's, or the one
// Control.Paused holds, which Control pauses again while the spec asks),
// an indefinite pause step, an inconclusive gate (which then counts as
// passed) or a pause for an unhealthy canary (whose count of unhealthy
// observations starts again).
//
// On a suspended rollout it ends the suspension: the canary is walked back
// up to State.ResumeWeight (capacity first, each hop observed, without the
// strategy's intervals) and the step it stood at is entered again (a timed
// pause timed again, a gate analysed again). During the suspension's walk
// back it turns round there; a rollout suspended before its first Step
// starts. A third revision a Retarget asked for meanwhile starts from its
// first step.
func (s State) Resume(now time.Time) State {
	if s.suspended() {
		return s.unsuspend(now)
	}
	if !s.AwaitingResume || s.Idle() {
		return s
	}
	s = s.command(now)
	switch s.PauseReason {
	case ReasonUnhealthy:
		s.UnhealthyCount = 0
	case ReasonPauseStep, ReasonGateInconclusive:
		// Only these end the step itself; resuming a manual pause or an
		// unhealthy hold leaves a pending gate pending.
		s.Resumed = true
	}
	s.unhold()
	return s
}

// Abort walks traffic back to the stable side, capacity-safe and within the
// same surge budget, as Options.AbortRamp says. reason is recorded in
// State.Abort and the Degraded condition.
//
// On a state that has not observed the world yet (Unobserved) the abort is
// recorded and acts on the rollout the next Step adopts (nothing to abort
// if that is the idle state). During the walk back that a Retarget to a
// third revision started, it stops that revision: the walk back goes on and
// the rollout ends Aborted with the new revision as its canary, which Retry
// starts. During any other walk back (an abort, a rollback to the stable
// revision) it does nothing.
func (s State) Abort(reason string, now time.Time) State {
	if reason == "" {
		reason = ReasonAborted
	}
	switch {
	case s.Unobserved:
		if s.Aborted != nil {
			return s
		}
		s = s.command(now)
		s.recordAbort(reason, s.LastCommandAt, false)
		return s
	case s.retargetWalkBack() && s.PendingRevision != s.StableRevision:
		s = s.command(now)
		s.recordAbort(reason, s.LastCommandAt, true)
		return s
	case s.suspending():
		// The suspension's walk back goes on, and ends Aborted.
		s = s.command(now)
		s.recordAbort(reason, s.LastCommandAt, true)
		s.ResumeWeight = 0
		return s
	case s.Phase == PhaseSuspended && !s.StartedAt.IsZero():
		s = s.command(now)
		s.abortSuspended(reason, s.LastCommandAt)
		s.ResumeWeight = 0
		return s
	case s.Idle() || s.Phase.Terminal() || s.Phase == PhaseAborting:
		return s
	}
	s = s.command(now)
	s.becomeAborting(reason, s.LastCommandAt)
	return s
}

// retargetWalkBack reports the walk back that a Retarget started (toward
// PendingRevision), with no abort requested since.
func (s *State) retargetWalkBack() bool {
	return s.Phase == PhaseAborting && s.PendingRevision != "" && (s.Aborted == nil || s.Aborted.Reason == ReasonRetarget)
}

// Promote finishes the current step now: it ends a pause or a gate (timed or
// not) and skips the wait for the next Incremental interval. A walk to a
// SetWeight step has nothing to skip; it still moves capacity-safely.
func (s State) Promote(now time.Time) State {
	if s.Idle() || s.Phase.Terminal() || s.Phase == PhaseAborting || s.Phase == PhaseCompleting {
		return s
	}
	s = s.command(now)
	s.PromoteRequested = true
	return s
}

// PromoteFull walks to weight 100 now, skipping every remaining step, pause,
// gate and interval; the walk stays capacity-safe. It also ends a manual
// pause.
func (s State) PromoteFull(now time.Time) State {
	if s.Idle() || s.Phase.Terminal() || s.Phase == PhaseAborting || s.Phase == PhaseCompleting {
		return s
	}
	s = s.command(now)
	s.PromoteFullRequested = true
	s.unhold()
	return s
}

// Retry starts an aborted rollout again (Aborted, or Aborting because of a
// failure): it continues at the first step whose weight is >= the current
// weight, from step 0 once the walk back has finished. It does nothing while
// an emergency walk back has not yet asked the stable side for the capacity
// its traffic needs. During the walk back of a Retarget that an Abort
// stopped (see Abort) it withdraws the abort: the new revision rolls out
// once the walk back ends. It does nothing on a state that has not observed
// the world yet (Unobserved), nor during a Retarget's walk back.
func (s State) Retry(now time.Time) State {
	if s.suspended() {
		return s // Resume ends a suspension
	}
	if s.Phase == PhaseAborting && 100-s.Desired.Weight > s.Desired.StableCapacity {
		return s // an emergency walk back has not scaled the stable side up yet
	}
	if s.Phase == PhaseAborting && s.PendingRevision != "" && s.PendingRevision != s.StableRevision && !s.retargetWalkBack() {
		s = s.command(now)
		s.recordAbort(ReasonRetarget, s.LastCommandAt, true)
		return s
	}
	if (s.Phase != PhaseAborted && s.Phase != PhaseAborting) || s.PendingRevision != "" {
		return s
	}
	s = s.command(now)
	s.becomeProgressing()
	s.FinishedAt = metav1.MicroTime{}
	s.UnhealthyCount = 0
	s.SteadyRequested = false
	s.StepsHash = "" // re-place by weight at the next Step
	return s
}

// Retarget changes the canary revision the rollout moves to:
//   - to the current canary: nothing, but it cancels a walk back an earlier
//     Retarget started (A->B->A->B continues toward B);
//   - to the stable revision: a rollback; the canary is walked back and the
//     rollout ends RolledBack (A->B->A);
//   - to another revision: the abandoned canary is walked back safely, then
//     the new one starts from the first step (A->B->C);
//   - after Succeeded or RolledBack: the next rollout, from the current
//     stable.
//
// A change mid-rollout is always a walk back, even when the state shows
// nothing on the canary (a lost state may have moved the world); it ends in
// the next Step when the stable allocation is already observed.
//
// On a state that names no stable revision (the zero State: a new object,
// or one whose status was wiped or re-created) it records revision as the
// spec's, not yet observed (State.Unobserved), and asks for nothing: the
// Runner observes the world and the next Step adopts what it sees (an idle
// state, a rollout in progress, upshift installed on a serving application,
// a walk back, or a Degraded hold naming what it cannot adopt). Call it on
// every reconcile with the spec's revision. NewState(v, v) is the idle
// state with v on SideA, for a caller who knows the world.
//
// docs/design/commands.md lists every case of the adoption and how a
// Control seen before it acts.
func (s State) Retarget(revision string, now time.Time) State {
	switch {
	case s.Unobserved:
		if revision == "" || revision == s.CanaryRevision {
			return s
		}
		s = s.command(now)
		s.StableRevision, s.CanaryRevision = revision, revision
		return s
	case s.StableRevision == "" && s.Idle():
		if revision == "" {
			return s
		}
		n := NewState(revision, revision)
		if s.StableSide != "" {
			n.StableSide = s.StableSide
		}
		n.Unobserved = true
		n.Conditions, n.Handled = s.Conditions, s.Handled
		n.LastCommandAt = micro(clock(&s, now))
		return n
	case s.Idle():
		// Nothing was rolled out: the stable side holds everything, whatever
		// an idle state's allocation says.
		if revision == "" || revision == s.StableRevision {
			return s
		}
		n := NewState(s.StableRevision, revision)
		if s.StableSide != "" {
			n.StableSide = s.StableSide
		}
		n.Conditions, n.Handled = s.Conditions, s.Handled
		n.LastCommandAt = micro(clock(&s, now))
		return n
	case s.Phase == PhaseSucceeded || s.Phase == PhaseRolledBack:
		if revision == s.StableRevision || revision == "" {
			return s
		}
		return s.restart(revision, now)
	case s.Phase == PhaseAborted || s.Phase == PhaseSuspended:
		switch revision {
		case s.CanaryRevision, "":
			return s
		case s.StableRevision:
			s = s.command(now)
			s.becomeRolledBack()
			s.CanaryRevision = revision
			s.ResumeWeight = 0
			s.Message = ReasonRolledBack
			return s
		}
		suspended := s.Phase == PhaseSuspended
		s = s.restart(revision, now)
		if suspended {
			// Still suspended, now toward revision: Resume starts it.
			s.suspendUnstarted(ReasonSuspended, s.LastCommandAt)
		}
		return s
	case revision == "":
		return s
	case revision == s.CanaryRevision && s.PendingRevision == "":
		return s
	case revision == s.CanaryRevision:
		// Cancel the walk back that a Retarget started.
		s = s.command(now)
		s.PendingRevision = ""
		if s.Aborted != nil && s.Aborted.Reason == ReasonRetarget {
			s.becomeProgressing()
			s.StepsHash = ""
		}
		return s
	}
	// Whatever the state last observed, the world may have moved since (a
	// reconcile whose state was lost), so a change of revision mid-rollout
	// is always a walk back: it ends once the route and the sides are
	// observed at the stable allocation (in the next Step when they already
	// are), then rolls back or starts the new revision.
	s = s.command(now)
	s.PendingRevision = revision
	if s.Phase != PhaseAborting {
		s.becomeAborting(ReasonRetarget, s.LastCommandAt)
	}
	return s
}

// restart begins a new rollout toward revision from the current stable.
func (s State) restart(revision string, now time.Time) State {
	s = s.command(now)
	s.CanaryRevision = revision
	s.PendingRevision = ""
	s.becomeNew()
	s.StepIndex = 0
	s.StepsHash = ""
	s.Resumed = false
	s.PromoteRequested, s.PromoteFullRequested, s.SteadyRequested = false, false, false
	s.Gate = ""
	s.UnhealthyCount = 0
	s.ReachedAt, s.FinishedAt = metav1.MicroTime{}, metav1.MicroTime{}
	s.ResumeWeight = 0
	return s
}

// unsuspend is Resume on a suspended rollout.
func (s State) unsuspend(now time.Time) State {
	s = s.command(now)
	switch {
	case s.Phase == PhaseAborting && s.PendingRevision != "":
		// A Retarget came during the suspension's walk back: its walk back
		// goes on, and the new revision starts once it ends.
		s.recordAbort(ReasonRetarget, s.LastCommandAt, true)
		s.ResumeWeight = 0
	case s.StartedAt.IsZero():
		s.becomeNew() // never stepped: the next Step starts it
	default:
		s.becomeProgressing()
		s.FinishedAt = metav1.MicroTime{}
		s.UnhealthyCount = 0
		s.Message = msgResumed
	}
	return s
}
