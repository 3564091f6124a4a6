package strategy

import (
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Control is the declarative form of the commands: the part of an object's
// spec with which a person (or a GitOps tool) steers a rollout. It embeds in
// a CRD spec (every field has a JSON tag and a kubebuilder marker, and
// DeepCopy is provided); State.Control turns the spec as it is now into the
// commands still to apply.
//
// Paused is level-triggered: the rollout is held while it is true. Every
// other field is a one-shot request: a token (any string; a timestamp or a
// counter is usual) that acts once when it changes to a non-empty value. The
// State records the last value of each request it has seen (State.Handled),
// so a request acts exactly once, whatever the number of reconciles, and
// also after a restart of the controller or a JSON round trip of the state.
// Handled is kept across rollouts, so a token left in the spec does not act
// on the next one. To ask again, write a new value. A value written back after another one
// (a, then b, then a) is a new request; clearing a field asks for nothing.
//
// A request that does not apply to the rollout as it stands when it is
// seen (Retry when nothing was aborted, Promote on a finished rollout) is
// used up all the same, and reported as Ignored: it never lies in wait to
// surprise a later rollout.
type Control struct {
	// Holds the rollout while true (a pause with reason ControlPause);
	// false resumes only a pause that paused caused. A walk back (an
	// abort) is never held, nor a finished rollout.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Suspends the rollout while true (State.Suspend, with reason
	// ControlSuspend): traffic and capacity walk back to the stable side
	// and the canary is released; false resumes only a suspension that
	// suspended caused, from where the rollout stood (State.Resume). A
	// rollout started while it is true is suspended before its first Step.
	// +optional
	Suspended bool `json:"suspended,omitempty"`
	// Walks traffic back to the stable side (an abort, with reason
	// Aborted), once for each new value. It acts even while paused.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Abort string `json:"abort,omitempty"`
	// Starts an aborted rollout again (a retry), once for each new value.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Retry string `json:"retry,omitempty"`
	// Finishes the current step now (a promote): it passes a
	// timed pause, a pause step without a duration, a gate, or the wait for
	// the next interval of the incremental strategy. Once for each new
	// value.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Promote string `json:"promote,omitempty"`
	// Walks to weight 100 now, skipping every remaining step (a full
	// promote), once for each new value.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PromoteFull string `json:"promoteFull,omitempty"`
	// Ends the pause in force (a resume): a pause step
	// without a duration, an inconclusive gate, a pause for an unhealthy
	// canary or a manual pause, once for each new value. It does not end
	// the pause that paused holds: seen while paused holds the rollout (a
	// step's pause taken over included), it is used up without effect
	// (Ignored). A promote, which is kept until the spec is un-paused,
	// passes the step.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Resume string `json:"resume,omitempty"`
}

// Requests is the last value of each one-shot request of a Control that a
// State has seen (its handled field, State.Handled). It is what makes each
// request act once.
type Requests struct {
	// The last abort request seen.
	Abort string `json:"abort,omitempty"`
	// The last retry request seen.
	Retry string `json:"retry,omitempty"`
	// The last promote request seen.
	Promote string `json:"promote,omitempty"`
	// The last promoteFull request seen.
	PromoteFull string `json:"promoteFull,omitempty"`
	// The last resume request seen.
	Resume string `json:"resume,omitempty"`
}

// The commands an Applied names.
const (
	CommandPause       = "Pause"
	CommandResume      = "Resume"
	CommandAbort       = "Abort"
	CommandRetry       = "Retry"
	CommandPromote     = "Promote"
	CommandPromoteFull = "PromoteFull"
	CommandSuspend     = "Suspend"
)

// Applied is one command that State.Control applied, for the caller to
// record (a Kubernetes Event, a log line).
type Applied struct {
	// Command is one of the Command constants.
	Command string `json:"command"`
	// Token is the request's value; empty for a pause or a resume that
	// Control.Paused caused.
	Token string `json:"token,omitempty"`
	// Ignored reports a request that did not apply to the rollout as it
	// stood (nothing to retry, a finished rollout, a Resume while Paused
	// holds the rollout): nothing changed but the request recorded as seen.
	Ignored bool `json:"ignored,omitempty"`
}

// Control applies the spec's Control to the state at now and returns the new
// state with the commands it applied, in order. It is pure (s is not
// modified; the clock is the caller's now) and idempotent: on its own result
// it applies nothing, at any now. Call it on every reconcile after Retarget
// with the spec's revision, so that requests written with a new revision act
// on what the Retarget made of the rollout:
//
//	s = s.Retarget(spec.Revision, now)
//	s, applied := s.Control(spec.Control, now)
//	// record an Event for each of applied, then step (Runner.ReconcileAt(ctx, s, now))
//
// Within one call: Retry, then Abort (both new: the abort wins), PromoteFull,
// Promote, Resume, and last Paused. A request that does not apply to the
// rollout as it stands is recorded as seen and reported Ignored.
//
// Paused holds the rollout with a pause of its own (ReasonControlPause);
// un-pausing resumes that pause only, never a manual or unhealthy pause.
// While Paused, a pause step or an inconclusive gate is taken over so that a
// Promote cannot pass it, and handed back to the step on un-pause; a Promote
// or PromoteFull requested meanwhile takes effect then; an Abort acts at
// once. docs/design/commands.md lists what each request does on a rollback,
// a third revision, a new rollout and an unobserved state.
func (s State) Control(c Control, now time.Time) (State, []Applied) {
	var applied []Applied
	request := func(command, token string, field func(*Requests) *string, apply func(State) State) {
		last := field(&s.Handled)
		if token == *last {
			return
		}
		*last = token
		*field(&s.Ignored) = "" // the record is of the last request seen
		if token == "" {
			return // a cleared request asks for nothing
		}
		next := apply(s)
		ignored := !commandChanged(&s, &next)
		applied = append(applied, Applied{Command: command, Token: token, Ignored: ignored})
		s = next
		if ignored {
			*field(&s.Ignored) = token
		}
	}
	// The records are written into the local copy, which every command
	// then carries along (commands only ever copy the state).
	request(CommandRetry, c.Retry, func(r *Requests) *string { return &r.Retry }, func(s State) State { return s.Retry(now) })
	request(CommandAbort, c.Abort, func(r *Requests) *string { return &r.Abort }, func(s State) State { return s.Abort(ReasonAborted, now) })
	request(CommandPromoteFull, c.PromoteFull, func(r *Requests) *string { return &r.PromoteFull }, func(s State) State {
		held := c.Paused && s.AwaitingResume && s.PauseReason == ReasonControlPause
		n := s.PromoteFull(now)
		if held {
			n.hold(ReasonControlPause, n.PausedAt) // kept until the spec is un-paused
		}
		return n
	})
	request(CommandPromote, c.Promote, func(r *Requests) *string { return &r.Promote }, func(s State) State { return s.Promote(now) })
	request(CommandResume, c.Resume, func(r *Requests) *string { return &r.Resume }, func(s State) State {
		if c.Suspended && s.suspendedBy(ReasonControlSuspend) {
			return s // the spec suspends the rollout: set suspended false instead
		}
		if c.Paused && s.AwaitingResume && s.PauseReason == ReasonControlPause && !s.suspended() {
			return s // the spec holds the rollout: un-pause it instead
		}
		return s.Resume(now)
	})
	switch {
	case c.Suspended && !s.suspended():
		if next := s.suspend(ReasonControlSuspend, now); next.suspended() || next.Aborted != s.Aborted {
			s = next
			applied = append(applied, Applied{Command: CommandSuspend})
		}
	case c.Suspended && s.suspendedBy(ReasonSuspended):
		s = s.command(now)
		s.retakeSuspension(ReasonControlSuspend) // released only by the spec from now on
		applied = append(applied, Applied{Command: CommandSuspend})
	case !c.Suspended && s.suspendedBy(ReasonControlSuspend):
		s = s.Resume(now)
		applied = append(applied, Applied{Command: CommandResume})
	}
	switch {
	case c.Paused && !s.AwaitingResume:
		if next := s.pause(ReasonControlPause, now); next.AwaitingResume {
			s = next
			applied = append(applied, Applied{Command: CommandPause})
		}
	case c.Paused && s.holdable() && (s.PauseReason == ReasonPauseStep || s.PauseReason == ReasonGateInconclusive):
		// Take the step's pause over, so that a Promote requested
		// meanwhile does not pass it before the spec is un-paused. The
		// step pauses again once this pause ends (it was not resumed).
		s = s.command(now)
		s.retakeHold(ReasonControlPause, s.LastCommandAt)
		applied = append(applied, Applied{Command: CommandPause})
	case !c.Paused && s.AwaitingResume && s.PauseReason == ReasonControlPause:
		if next := s.Resume(now); !next.AwaitingResume {
			s = next
			applied = append(applied, Applied{Command: CommandResume})
		}
	}
	return s, applied
}

// holdable reports whether Pause applies to the rollout's phase.
func (s *State) holdable() bool {
	return !s.Idle() && !s.Phase.Terminal() && s.Phase != PhaseAborting
}

// commandChanged reports whether a command changed anything in the state
// but the instant it records (LastCommandAt): whether it applied.
func commandChanged(before, after *State) bool {
	a, b := *before, *after
	a.LastCommandAt, b.LastCommandAt = metav1.MicroTime{}, metav1.MicroTime{}
	return !reflect.DeepEqual(a, b)
}
