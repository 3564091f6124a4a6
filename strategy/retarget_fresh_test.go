package strategy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRetargetBeforeFirstStep: a Retarget before the first Step is a walk
// back, which the first Step finishes at once when the world is observed at
// the stable allocation, and which first brings the canary's traffic back
// when a reconcile whose state was lost had moved it.
func TestRetargetBeforeFirstStep(t *testing.T) {
	strat := Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	t.Run("clean world: starts the new revision in the same Step", func(t *testing.T) {
		s := NewState("v1", "v2").Retarget("v3", t0)
		d := strat.Step(s, t0)
		got := []any{d.State.Phase, d.State.CanaryRevision, d.State.PendingRevision, d.State.Aborted == nil, d.CanaryCapacity}
		want := []any{PhaseProgressing, "v3", "", true, Target{Set: true, Value: 10}} // what the first weight needs
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		d = strat.Step(NewState("v1", "v2").Retarget("v1", t0), t0)
		if d.State.Phase != PhaseRolledBack || d.HasHops() {
			t.Fatalf("back to the stable: %s, hops %v", d.State.Phase, d.HasHops())
		}
	})
	t.Run("lost state: walks the canary's traffic back first", func(t *testing.T) {
		s := NewState("v1", "v2").Retarget("v1", t0)
		// A lost reconcile had moved 20 percent onto the canary.
		s.Observed.Weight = 20
		s.Observed.Canary = SideObservation{Capacity: 30, Ready: 30, Settled: true}
		d := strat.Step(s, t0.Add(time.Second))
		if d.State.Phase != PhaseAborting || !d.Weight.Set || d.Weight.Value != 0 {
			t.Fatalf("phase %s, weight %+v: want the walk back to write weight 0", d.State.Phase, d.Weight)
		}
	})
}

// TestFreshRolloutBehindAnUnacceptedRoute: a new rollout whose route the
// data plane has not accepted yet (just created) waits; it does not take the
// canary side's old revision for a redeploy under traffic.
func TestFreshRolloutBehindAnUnacceptedRoute(t *testing.T) {
	for _, mode := range []CapacityMode{CapacityFixed, CapacityManaged} {
		strat := Canary{Steps: []CanaryStep{SetWeight(50)}, MaxSurgePercent: 50, Options: Options{Capacity: mode}}
		s := NewState("v1", "v2")
		s.Observed.Revisions = true
		s.Observed.WeightApplied = false
		s.Observed.Stable.Revision, s.Observed.Stable.Updated = "v1", true
		s.Observed.Canary.Revision, s.Observed.Canary.Updated = "v0", true
		if mode == CapacityFixed {
			s.Observed.Canary = SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v0", Updated: true}
		}
		d := strat.Step(s, t0)
		if d.State.Phase != PhaseProgressing || d.HasHops() {
			t.Errorf("%q: %s (%v), hops %v: want Progressing, waiting for the route (%s)", mode, d.State.Phase, d.State.Aborted, d.HasHops(), d.State.Message)
		}
		s = d.State
		s.Observed.WeightApplied = true
		if d = strat.Step(s, t0.Add(time.Second)); !d.Deploy.Set || d.Deploy.Revision != "v2" {
			t.Errorf("%s: once accepted: deploy %+v, want v2", mode, d.Deploy)
		}
	}
}
