package strategy

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Transitions. The functions in this file are the only code that writes a
// State's Phase, its hold (AwaitingResume, PauseReason, PausedAt) and its
// abort record (Aborted). Step and the commands decide; these functions
// change the phase, and each refuses (returns false, changing nothing) a
// transition that canBecome does not allow. The phases and their
// transitions:
//
//	""          -> Progressing (first Step, adoption), Aborting (Retarget, an adopted walk back),
//	               Suspended (Suspend before the first Step)
//	Progressing -> Paused, Completing, Aborting
//	Paused      -> Progressing, Aborting
//	Completing  -> Succeeded, Aborting
//	Aborting    -> Aborted, RolledBack, Suspended, Progressing (Retry, Resume, a Retarget cancelled or ended)
//	Aborted     -> Progressing (Retry), RolledBack (Retarget to the stable revision), "" (Retarget)
//	Suspended   -> Progressing (Resume), "" (Resume of a rollout never started), Aborted (Abort),
//	               RolledBack (Retarget to the stable revision)
//	RolledBack  -> "" (Retarget)
//	Succeeded   -> "" (Retarget)
//
// Staying in a phase is always allowed.

// canBecome reports whether a rollout in phase from may move to phase to.
func canBecome(from, to Phase) bool {
	if from == to {
		return from.Known()
	}
	switch from {
	case "":
		return to == PhaseProgressing || to == PhaseAborting || to == PhaseSuspended
	case PhaseProgressing:
		return to == PhasePaused || to == PhaseCompleting || to == PhaseAborting
	case PhasePaused:
		return to == PhaseProgressing || to == PhaseAborting
	case PhaseCompleting:
		return to == PhaseSucceeded || to == PhaseAborting
	case PhaseAborting:
		return to == PhaseAborted || to == PhaseRolledBack || to == PhaseProgressing || to == PhaseSuspended
	case PhaseSuspended:
		return to == PhaseProgressing || to == "" || to == PhaseAborted || to == PhaseRolledBack
	case PhaseAborted:
		return to == PhaseProgressing || to == PhaseRolledBack || to == ""
	case PhaseRolledBack, PhaseSucceeded:
		return to == ""
	}
	return false
}

// refused, when set (by the package's tests), sees every transition that
// become refuses: code that tried to make a move the table does not allow.
var refused func(from, to Phase)

// become moves s to phase to, if allowed.
func (s *State) become(to Phase) bool {
	if !canBecome(s.Phase, to) {
		if refused != nil {
			refused(s.Phase, to)
		}
		return false
	}
	s.Phase = to
	return true
}

// becomeProgressing walks the rollout forward: from its start, a pause, or
// the end of a walk back or an abort, whose record it drops.
func (s *State) becomeProgressing() bool {
	from := s.Phase
	if !s.become(PhaseProgressing) {
		return false
	}
	if from == PhaseAborting || from == PhaseAborted || from == PhaseSuspended {
		s.Aborted = nil
	}
	return true
}

// becomeSuspended ends a suspension's walk back: everything is on the
// stable side. The suspension's record stays, for Resume.
func (s *State) becomeSuspended() bool { return s.become(PhaseSuspended) }

// suspendUnstarted suspends a rollout that has not been stepped (phase
// ""), which has nothing to walk back, recording reason and at.
func (s *State) suspendUnstarted(reason string, at metav1.MicroTime) bool {
	if s.Phase != "" || !s.become(PhaseSuspended) {
		return false
	}
	s.Aborted = &AbortStatus{Reason: reason, At: at}
	s.unhold()
	s.ResumeWeight = 0
	s.StartedAt = metav1.MicroTime{}
	return true
}

// retakeSuspension gives the suspension in force another reason (the spec
// taking a Suspend command's suspension over as its own).
func (s *State) retakeSuspension(reason string) bool {
	if !s.suspended() || !isSuspension(reason) {
		return false
	}
	a := *s.Aborted
	a.Reason = reason
	s.Aborted = &a
	return true
}

// abortSuspended turns a suspended rollout into an aborted one.
func (s *State) abortSuspended(reason string, at metav1.MicroTime) bool {
	if s.Phase != PhaseSuspended || s.StartedAt.IsZero() || !s.become(PhaseAborted) {
		return false
	}
	s.Aborted = &AbortStatus{Reason: reason, At: at}
	return true
}

// suspending reports a suspension's walk back.
func (s *State) suspending() bool {
	return s.Phase == PhaseAborting && s.Aborted != nil && isSuspension(s.Aborted.Reason)
}

// suspendedBy reports a suspended rollout whose suspension has reason.
func (s *State) suspendedBy(reason string) bool {
	return s.suspended() && s.Aborted != nil && s.Aborted.Reason == reason
}

// suspended reports a suspended rollout: walking back, or walked back.
func (s *State) suspended() bool { return s.suspending() || s.Phase == PhaseSuspended }

// becomePaused holds the rollout in a pause: a hold (see hold) or a timed
// pause step.
func (s *State) becomePaused() bool { return s.become(PhasePaused) }

// becomeCompleting: all traffic is observed on the canary.
func (s *State) becomeCompleting() bool { return s.become(PhaseCompleting) }

// becomeSucceeded ends a completed rollout.
func (s *State) becomeSucceeded() bool { return s.become(PhaseSucceeded) }

// becomeAborting starts (or continues) the walk back, recording reason and
// at unless an abort is already recorded, and drops what holds or skips the
// walk forward: the hold, the gate, promotions and the steady-state
// request (a later completion asks for it again).
func (s *State) becomeAborting(reason string, at metav1.MicroTime) bool {
	if !s.become(PhaseAborting) {
		return false
	}
	if s.Aborted == nil {
		s.Aborted = &AbortStatus{Reason: reason, At: at}
	}
	s.unhold()
	s.Gate = ""
	s.PromoteRequested, s.PromoteFullRequested = false, false
	s.SteadyRequested = false
	return true
}

// becomeAborted ends a walk back with the rollout aborted; the abort record
// stays, for Retry.
func (s *State) becomeAborted() bool { return s.become(PhaseAborted) }

// becomeRolledBack ends a rollback to the stable revision: after its walk
// back, or at once from an aborted rollout. The abort record is dropped.
func (s *State) becomeRolledBack() bool {
	if !s.become(PhaseRolledBack) {
		return false
	}
	s.Aborted = nil
	return true
}

// becomeNew returns a finished rollout to the unstepped phase, for the next
// rollout: no abort record, no hold.
func (s *State) becomeNew() bool {
	if !s.Phase.Terminal() || !s.become("") {
		return false
	}
	s.Aborted = nil
	s.unhold()
	return true
}

// hold pauses the rollout until Resume, for reason, from at. It refuses a
// rollout already held, walking back or finished.
func (s *State) hold(reason string, at metav1.MicroTime) bool {
	if s.AwaitingResume || s.Phase == PhaseAborting || s.Phase.Terminal() || reason == "" {
		return false
	}
	s.AwaitingResume, s.PauseReason, s.PausedAt = true, reason, at
	return true
}

// retakeHold gives the hold in force another reason, from at (the spec
// taking a pause step's hold over as its own); at zero keeps PausedAt.
func (s *State) retakeHold(reason string, at metav1.MicroTime) bool {
	if !s.AwaitingResume || reason == "" {
		return false
	}
	s.PauseReason = reason
	if !at.IsZero() {
		s.PausedAt = at
	}
	return true
}

// unhold ends the hold, if any. PausedAt stays: when the last hold began.
func (s *State) unhold() bool {
	if !s.AwaitingResume && s.PauseReason == "" {
		return false
	}
	s.AwaitingResume, s.PauseReason = false, ""
	return true
}

// unholdStep ends a hold that belongs to the step (a pause step, an
// inconclusive gate); other holds stay.
func (s *State) unholdStep() bool {
	if s.PauseReason != ReasonPauseStep && s.PauseReason != ReasonGateInconclusive {
		return false
	}
	return s.unhold()
}

// recordAbort records an abort without walking back yet: one requested
// before the state has observed the world (a later adoption walks it
// back), or one that stops a Retarget's walk back (see Abort). replace
// says whether an earlier record gives way.
func (s *State) recordAbort(reason string, at metav1.MicroTime, replace bool) bool {
	if s.Aborted != nil && !replace {
		return false
	}
	s.Aborted = &AbortStatus{Reason: reason, At: at}
	return true
}

// dropAbort drops the abort record of a walk back that a Retarget started
// and that is no longer wanted.
func (s *State) dropAbort() bool {
	if s.Aborted == nil {
		return false
	}
	s.Aborted = nil
	return true
}

// markEmergency marks the recorded abort an emergency (all traffic to the
// stable side at once), copying the record so that the caller's state is
// not modified.
func (s *State) markEmergency() bool {
	if s.Aborted == nil || s.Aborted.Emergency {
		return false
	}
	a := *s.Aborted
	a.Emergency = true
	s.Aborted = &a
	return true
}
