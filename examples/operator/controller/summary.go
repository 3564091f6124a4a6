package controller

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// Phases of status.phase that are no strategy.Phase.
const (
	// PhaseIdle: no rollout runs (the rollout's phase is empty).
	PhaseIdle = "Idle"
	// PhaseAdopting: the operator has not observed the sides and the route
	// yet (a new Release, or a wiped status).
	PhaseAdopting = "Adopting"
)

// summarize sets the fields of status that say where the rollout stands
// (phase, step, what each side runs and its weight, the message) from
// status.Rollout, status.Conditions and the spec's strategy.
func summarize(status *v1alpha1.ReleaseStatus, spec *v1alpha1.ReleaseSpec) {
	s := &status.Rollout
	status.Phase = string(s.Phase)
	switch {
	case s.Unobserved:
		status.Phase = PhaseAdopting
	case s.Phase == "":
		status.Phase = PhaseIdle
	}
	status.Step = step(s, spec.Strategy)
	status.A, status.B = nil, nil
	if !s.Unobserved {
		stable := &v1alpha1.SideStatus{Revision: s.Observed.Stable.Revision, Weight: 100 - s.Observed.Weight}
		canary := &v1alpha1.SideStatus{Revision: s.Observed.Canary.Revision, Weight: s.Observed.Weight}
		if !s.Observed.Revisions {
			// Revisions not tracked: the roles' revisions.
			stable.Revision, canary.Revision = s.StableRevision, ""
			if !s.Idle() {
				canary.Revision = s.CanaryRevision
			}
		}
		status.A, status.B = stable, canary
		if s.StableSide == strategy.SideB {
			status.A, status.B = canary, stable
		}
	}
	status.Message = s.Message
	if c := apimeta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReleased); status.Message == "" && c != nil {
		status.Message = c.Message
	}
	if c := apimeta.FindStatusCondition(status.Conditions, strategy.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason == ReasonInvalidSpec {
		status.Message = "invalid spec: " + c.Message
	}
}

// step describes what the rollout does now; empty when none runs. A
// suspended rollout names the step it stood at and the weight Resume
// walks back up to.
func step(s *strategy.State, st v1alpha1.ReleaseStrategy) string {
	if s.Phase == strategy.PhaseSuspended && !s.Unobserved {
		if s.StartedAt.IsZero() {
			return "suspended before its first step (resume starts it)"
		}
		d := fmt.Sprintf("suspended (resume continues from weight %d)", s.ResumeWeight)
		if c := st.Canary; c != nil {
			if i := int(s.StepIndex); i >= 0 && i < len(c.Steps) {
				d = fmt.Sprintf("%d/%d %s, %s", i+1, len(c.Steps), describeStep(c.Steps[i]), d)
			}
		}
		return d
	}
	if s.Unobserved || (s.Phase != strategy.PhaseProgressing && s.Phase != strategy.PhasePaused) {
		return ""
	}
	var d string
	if c := st.Canary; c != nil {
		if i := int(s.StepIndex); i >= 0 && i < len(c.Steps) {
			d = fmt.Sprintf("%d/%d %s", i+1, len(c.Steps), describeStep(c.Steps[i]))
		}
	} else {
		d = fmt.Sprintf("to weight %d", s.Desired.Weight)
	}
	if s.AwaitingResume && s.PauseReason != strategy.ReasonPauseStep {
		if d != "" {
			d += ", "
		}
		d += "paused (" + s.PauseReason + ")"
	}
	return d
}

// describeStep names a canary step as the spec writes it.
func describeStep(cs strategy.CanaryStep) string {
	switch {
	case cs.SetWeight != nil:
		return fmt.Sprintf("setWeight %d", *cs.SetWeight)
	case cs.Pause != nil && cs.Pause.Duration != nil:
		return "pause " + cs.Pause.Duration.Duration.String()
	case cs.Pause != nil:
		return "pause until resumed"
	case cs.Gate != nil:
		return "gate " + cs.Gate.Name
	}
	return "(empty step)"
}
