package strategy

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An emergency walk back that has asked weight 0 never finishes when the
// stable side holds more capacity than desired (the scale-up of a reconcile
// whose state was lost landed after the emergency hop was recorded): the
// repair refuses to scale the stable side down below its traffic, and the
// walk back waits for exactly the desired capacity. Not specific to
// revisions (it fails with Observation.Revisions off too).
func TestEmergencyWalkBackKeepsALargerStableSide(t *testing.T) {
	strat := Incremental{StepPercent: 1, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 4, Options: Options{AbortRamp: AbortEmergency}}
	for _, revisions := range []bool{true, false} {
		s := revState(PhaseAborting, Allocation{Weight: 0, StableCapacity: 80, CanaryCapacity: 24, CanaryRevision: "v2"}, 0,
			SideObservation{Capacity: 84, Ready: 100, Settled: true, Revision: "v1", Updated: true},
			SideObservation{Capacity: 24, Ready: 25, Settled: true, Revision: "v2", Updated: true})
		s.Observed.Revisions = revisions
		s.Aborted = &AbortStatus{Reason: ReasonUnhealthy, At: micro(t0), Emergency: true}
		now, asked := t0, false
		for i := 0; i < 600 && !asked; i++ { // 20 minutes, a poll every 2s
			now = now.Add(2 * time.Second)
			s.Observed.At = micro(now)
			d := strat.Step(s, now)
			asked = d.HasHops() || d.State.Phase != PhaseAborting
			s = d.State
		}
		if !asked {
			t.Errorf("revisions %v: the walk back asked nothing for 20 minutes: %s", revisions, s.Message)
		}
	}
}

// The revision chains with reconciles whose state is lost (which found the
// case above, -rapid.seed=14947974317204921140).
func TestRevisionChainsLostReconciles(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { revisionChain(t, true) })
}
