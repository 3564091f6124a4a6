package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types set on State.Conditions.
const (
	ConditionProgressing = "Progressing"
	ConditionPaused      = "Paused"
	ConditionDegraded    = "Degraded"
	ConditionAvailable   = "Available"
	// ConditionSuspended is present once a rollout has been suspended: True
	// with reason Suspending while it walks back, Suspended once it has;
	// False with reason Resumed after a Resume (see PhaseSuspended).
	ConditionSuspended = "Suspended"
)

// Reasons of a suspension: those of its record (State.Aborted) and of the
// Suspended condition.
const (
	// ReasonSuspended: suspended by the Suspend command; Resume resumes it.
	ReasonSuspended = "Suspended"
	// ReasonControlSuspend: suspended by the spec (Control.Suspended);
	// setting it false again resumes it.
	ReasonControlSuspend = "ControlSuspend"
	// ReasonSuspending: a suspended rollout walking back to the stable side.
	ReasonSuspending = "Suspending"
	// ReasonResumed: a suspended rollout resumed.
	ReasonResumed = "Resumed"

	msgSuspending = "suspending: walking traffic and capacity back to the stable side"
	msgSuspended  = "suspended: all traffic and capacity on the stable side, the canary released"
	msgResumed    = "resumed after a suspension"
)

// isSuspension reports whether an abort record's reason is a suspension's.
func isSuspension(reason string) bool {
	return reason == ReasonSuspended || reason == ReasonControlSuspend
}

// Reasons used in conditions, PauseReason and AbortStatus.Reason.
const (
	ReasonProgressing                 = "Progressing"
	ReasonCompleting                  = "Completing"
	ReasonSucceeded                   = "Succeeded"
	ReasonAborting                    = "Aborting"
	ReasonAborted                     = "Aborted"
	ReasonRolledBack                  = "RolledBack"
	ReasonPauseStep                   = "PauseStep"
	ReasonManualPause                 = "ManualPause"
	ReasonGateInconclusive            = "GateInconclusive"
	ReasonGateFailed                  = "GateFailed"
	ReasonUnhealthy                   = "Unhealthy"
	ReasonProgressDeadlineExceeded    = "ProgressDeadlineExceeded"
	ReasonInvalidOptions              = "InvalidOptions"
	ReasonRetarget                    = "Retarget"
	ReasonAsExpected                  = "AsExpected"
	ReasonTrafficExceedsReadyCapacity = "TrafficExceedsReadyCapacity"
	ReasonWaitingForObservation       = "WaitingForObservation"
	ReasonIdle                        = "Idle"
	ReasonInvalidState                = "InvalidState"
	ReasonObservationFailed           = "ObservationFailed"
	ReasonCanaryReadinessLost         = "CanaryReadinessLost"
	ReasonStableReadinessLost         = "StableReadinessLost"
	// ReasonRevisionChanged: the canary side was observed running another
	// revision than the canary one while it carried traffic or capacity.
	ReasonRevisionChanged = "RevisionChanged"
	// ReasonStableRevisionMismatch: the stable side is observed running
	// another revision than the stable one; nothing moves forward.
	ReasonStableRevisionMismatch = "StableRevisionMismatch"
	// ReasonAdopting: a state that has not observed the world yet
	// (State.Unobserved) waits to adopt it (Progressing); the message says
	// what it waits for.
	ReasonAdopting = "Adopting"
	// ReasonAdoptionBlocked: a state that has not observed the world yet
	// cannot adopt what it sees (Degraded): a split route whose sides do not
	// report revisions, weights that are not a split of 100, a side that
	// carries traffic and runs no revision it recognises. The message names
	// what was observed; nothing is asked until the world changes.
	ReasonAdoptionBlocked = "AdoptionBlocked"
	msgDeploying          = "deploying the canary revision on the canary side"
	msgWaitingRevision    = "waiting for the canary revision to roll out on the canary side"
	msgIdle               = "idle: no rollout started"
	reasonHealthy         = "Healthy"
	msgWaitingHop         = "waiting for the last hop to be observed applied"
	msgWaitingInterval    = "waiting for the step interval"
	msgWaitingCapacity    = "waiting for ready capacity"
	msgWaitingGate        = "waiting for a gate verdict"
	msgPausedStep         = "paused by a step"
	msgPausedManual       = "paused by command"
	msgPausedGate         = "paused: gate inconclusive"
	msgPausedUnhealthy    = "paused: canary unhealthy"
	msgUnhealthy          = "canary unhealthy: holding"
	msgInconclusive       = "canary health inconclusive: holding"
	msgDeadline           = "the rollout did not progress within the progress deadline"
	msgScaleDownDelay     = "waiting for the scale-down delay"
	msgDone               = "done"
	msgAborting           = "walking traffic back to the stable side"
	msgAvailable          = "ready capacity covers the traffic on both sides"
	msgUnavailable        = "traffic exceeds ready capacity on a side"
	msgDegradedClear      = "no problem"
)

// The rollback condition: a walk back because the desired revision changed.
const (
	// ConditionRollbackInProgress is True while the rollout walks back
	// because the desired revision changed mid-rollout (see
	// State.RollingBack), with reason ReasonDesiredRevisionChanged and a
	// message that says whether the spec went back to the stable revision
	// or on to a third one. It is removed, never set False, when the walk
	// back is cancelled (the spec returns to the canary revision) or ends
	// (RolledBack, Aborted, Suspended, or the third revision started):
	// absent means false.
	ConditionRollbackInProgress = "RollbackInProgress"
	// ReasonDesiredRevisionChanged: the reason of RollbackInProgress, the
	// desired revision changed while a rollout was in progress.
	ReasonDesiredRevisionChanged = "DesiredRevisionChanged"

	msgRollbackToStable     = "the desired revision went back to the stable revision: rolling back"
	msgRollbackToThird      = "the desired revision changed mid-rollout: rolling back to the stable revision, then rolling out the new one"
	msgRollbackThirdAborted = "the desired revision changed mid-rollout: rolling back to the stable revision; an abort stopped the new one, which a retry starts"
	msgRollbackThirdHeld    = "the desired revision changed mid-rollout: rolling back to the stable revision; the rollout is suspended, and a resume rolls out the new one"
)

// Reasons of the declarative control and of the clock check.
const (
	// ReasonControlPause: the pause Control.Paused holds (see State.Control).
	ReasonControlPause = "ControlPause"
	// ReasonClockSkew: the state records an instant more than MaxClockSkew
	// ahead of now (see State.CheckClock).
	ReasonClockSkew = "ClockSkew"
	// ReasonClaimed: another rollout holds the claim on an object this one
	// would move (Observation.Claimed); the message names the object and
	// the owner, and nothing is written until the claim is released.
	ReasonClaimed = "Claimed"

	msgPausedControl = "paused by the spec (control.paused)"
	msgClockSkew     = "the state records an instant more than a minute ahead of now: a command or a reconcile used another clock; time-gated progress waits until the clock reaches it"
)

// seconds is the recorded form of a condition's transition time.
func seconds(t time.Time) metav1.Time {
	return metav1.Time{Time: time.Unix(t.Unix(), 0).UTC()}
}

// conditions brings the four conditions (and Suspended, once a rollout
// was suspended, and RollbackInProgress while it rolls back) in line with
// the state.
func (r *run) conditions() {
	st := r.st
	switch st.Phase {
	case PhaseSucceeded:
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonSucceeded, msgDone)
	case PhaseAborted:
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonAborted, msgDone)
	case PhaseRolledBack:
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonRolledBack, msgDone)
	case PhaseSuspended:
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonSuspended, msgSuspended)
	case PhaseAborting:
		if st.suspending() {
			r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonSuspending, msgSuspending)
			break
		}
		r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonAborting, msgAborting)
	case PhaseCompleting:
		r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonCompleting, ReasonCompleting)
	default:
		r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonProgressing, ReasonProgressing)
	}
	if st.AwaitingResume || st.Phase == PhasePaused {
		reason := st.PauseReason
		if reason == "" {
			reason = ReasonPauseStep
		}
		r.setCond(ConditionPaused, metav1.ConditionTrue, reason, st.Message)
	} else {
		r.setCond(ConditionPaused, metav1.ConditionFalse, ReasonProgressing, ReasonProgressing)
	}
	switch {
	case r.skewed:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonClockSkew, msgClockSkew)
	case r.failed && st.Observed.Claimed:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonClaimed, st.Observed.Error)
	case st.Aborted != nil && st.Aborted.Reason != ReasonRetarget && !isSuspension(st.Aborted.Reason):
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonAborted, st.Aborted.Reason)
	case r.overdue && r.failed:
		r.setCondJoined(ConditionDegraded, metav1.ConditionTrue, ReasonProgressDeadlineExceeded, msgDeadline+": ", st.Observed.Error)
	case r.overdue:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonProgressDeadlineExceeded, msgDeadline)
	case r.failed:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonObservationFailed, st.Observed.Error)
	case r.stableRevision:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonStableRevisionMismatch, r.stableRevisionMsg)
	case r.stableShort:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonStableReadinessLost, "stable ready capacity is below its traffic")
	case r.canaryShort:
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonCanaryReadinessLost, "canary ready capacity is below its traffic")
	default:
		r.setCond(ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, msgDegradedClear)
	}
	switch {
	case st.suspending():
		r.setCond(ConditionSuspended, metav1.ConditionTrue, ReasonSuspending, msgSuspending)
	case st.Phase == PhaseSuspended:
		r.setCond(ConditionSuspended, metav1.ConditionTrue, ReasonSuspended, msgSuspended)
	case !r.hasCond(ConditionSuspended, metav1.ConditionTrue):
	case st.Phase == PhaseAborted || st.Phase == PhaseRolledBack:
		// The suspension ended otherwise: an Abort, a rollback.
		r.setCond(ConditionSuspended, metav1.ConditionFalse, string(st.Phase), msgDone)
	default:
		r.setCond(ConditionSuspended, metav1.ConditionFalse, ReasonResumed, msgResumed)
	}
	r.rollbackCondition()
	if r.failed {
		return // the observation is stale: keep Available as it was
	}
	if r.e.mode.available(r.facts()) {
		r.setCond(ConditionAvailable, metav1.ConditionTrue, ReasonAsExpected, msgAvailable)
	} else {
		r.setCond(ConditionAvailable, metav1.ConditionFalse, ReasonTrafficExceedsReadyCapacity, msgUnavailable)
	}
}

// RollingBack reports whether the rollout walks back because the desired
// revision changed mid-rollout (a Retarget to the stable revision or to a
// third one: PendingRevision is set), which is when RollbackInProgress is
// True. It stays true when an Abort stops the third revision during the
// walk back, and when the change comes during a walk back that an abort
// or a suspension had already started (that walk back now ends
// RolledBack, or with the third revision as the canary that a Retry, or a
// Resume of the suspension, starts). It is false once a
// Retarget to the canary revision cancels the walk back, and once the walk
// back ends.
func (s *State) RollingBack() bool {
	return s.Phase == PhaseAborting && s.PendingRevision != ""
}

// rollbackCondition sets RollbackInProgress while the state is rolling back
// (see State.RollingBack) and removes it otherwise.
func (r *run) rollbackCondition() {
	st := r.st
	switch {
	case !st.RollingBack():
		r.removeCond(ConditionRollbackInProgress)
	case st.PendingRevision == st.StableRevision:
		r.setCond(ConditionRollbackInProgress, metav1.ConditionTrue, ReasonDesiredRevisionChanged, msgRollbackToStable)
	case st.suspending():
		r.setCond(ConditionRollbackInProgress, metav1.ConditionTrue, ReasonDesiredRevisionChanged, msgRollbackThirdHeld)
	case st.Aborted != nil && st.Aborted.Reason != ReasonRetarget:
		r.setCond(ConditionRollbackInProgress, metav1.ConditionTrue, ReasonDesiredRevisionChanged, msgRollbackThirdAborted)
	default:
		r.setCond(ConditionRollbackInProgress, metav1.ConditionTrue, ReasonDesiredRevisionChanged, msgRollbackToThird)
	}
}

// removeCond removes a condition, copying the slice first so the caller's
// state is never modified; a state without it is left as it is.
func (r *run) removeCond(typ string) {
	st := r.st
	for i := range st.Conditions {
		if st.Conditions[i].Type != typ {
			continue
		}
		r.copyConds()
		st.Conditions = append(st.Conditions[:i], st.Conditions[i+1:]...)
		return
	}
}

// hasCond reports whether the state holds condition typ with status.
func (r *run) hasCond(typ string, status metav1.ConditionStatus) bool {
	for i := range r.st.Conditions {
		if c := &r.st.Conditions[i]; c.Type == typ {
			return c.Status == status
		}
	}
	return false
}

// setCond sets a condition, copying the slice before the first change so the
// caller's state is never modified. LastTransitionTime comes from now.
func (r *run) setCond(typ string, status metav1.ConditionStatus, reason, msg string) {
	r.setCondJoined(typ, status, reason, msg, "")
}

// setCondJoined is setCond with the message msg+more, joined only when the
// condition changes: a Step that finds it in place allocates nothing.
func (r *run) setCondJoined(typ string, status metav1.ConditionStatus, reason, msg, more string) {
	st := r.st
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status == status && c.Reason == reason && isJoined(c.Message, msg, more) {
			return
		}
		r.copyConds()
		c = &st.Conditions[i]
		if c.Status != status {
			c.LastTransitionTime = seconds(r.now)
		}
		c.Status, c.Reason, c.Message = status, reason, msg+more
		return
	}
	r.copyConds()
	st.Conditions = append(st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg + more,
		LastTransitionTime: seconds(r.now),
	})
}

// isJoined reports whether s is a+b, without joining them.
func isJoined(s, a, b string) bool {
	return len(s) == len(a)+len(b) && s[:len(a)] == a && s[len(a):] == b
}

// setJoined sets *dst to a+b, joining them only when *dst differs.
func setJoined(dst *string, a, b string) {
	if !isJoined(*dst, a, b) {
		*dst = a + b
	}
}

func (r *run) copyConds() {
	if r.condCopied {
		return
	}
	r.condCopied = true
	c := make([]metav1.Condition, len(r.st.Conditions), max(len(r.st.Conditions), 5))
	copy(c, r.st.Conditions)
	r.st.Conditions = c
}
