package strategy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// A walk back moves traffic onto the stable side on the strength of its
// ready capacity only once that side has settled: a stable side still
// moving may be shrinking (here the scale-down to 30 of a reconcile whose
// state was lost, not yet visible in its capacity, which leaves one replica
// of three: 33 ready), so weight 63 (37 to the stable side) asked on the
// strength of the 66 it shows would exceed what it keeps. Found by
// TestRevisionChainsLostReconciles (testdata/rapid).
func TestWalkBackWaitsForAMovingStableSide(t *testing.T) {
	strat := Incremental{StepPercent: 3, Interval: metav1.Duration{Duration: 11 * time.Second}, MaxSurgePercent: 7}
	desired := Allocation{Weight: 70, StableCapacity: 37, CanaryCapacity: 70, CanaryRevision: "v2"}
	canary := SideObservation{Capacity: 70, Ready: 100, Settled: true, Revision: "v2", Updated: true}
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name   string
		stable SideObservation
		want   string // the hops asked
	}{
		{"moving", SideObservation{Capacity: 37, Ready: 66, Settled: false, Revision: "v1", Updated: true}, "none"},
		{"settled", SideObservation{Capacity: 37, Ready: 66, Settled: true, Revision: "v1", Updated: true}, "weight 63"},
		{"settled above what was asked", SideObservation{Capacity: 50, Ready: 66, Settled: true, Revision: "v1", Updated: true}, "weight 63"},
		{"shrunk", SideObservation{Capacity: 30, Ready: 33, Settled: true, Revision: "v1", Updated: true}, "stable 37"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := revState(PhaseProgressing, desired, 70, tc.stable, canary).Abort("test", t0)
			d := checkStep(t, strat, s, now)
			if diff := cmp.Diff(tc.want, hopString(&d)); diff != "" {
				t.Errorf("hops (-want +got):\n%s\nmessage: %s", diff, d.State.Message)
			}
		})
	}
}

// In the Replicas mode (no router: traffic follows ready replicas) a
// repair scales a side down on the strength of the other side's ready
// capacity only once that side has settled: one still moving may be
// shrinking (here the scale-down to 1 of a reconcile whose state was lost,
// not yet visible in its capacity), so the canary scaled to 0 on the
// strength of the 100 the stable side shows would leave 8 ready where
// MaxUnavailablePercent 6 asks for 94. The state is an older save restored
// (desired 0/100/0); the canary side, which held 100 as the stable side of
// a later rollout, runs another revision, so the rollout walks back. Found
// by TestNeverUnsafe (testdata/rapid/TestNeverUnsafe_1).
func TestReplicasRepairWaitsForAMovingStableSide(t *testing.T) {
	strat := BlueGreen{Options: Options{Capacity: CapacityReplicas, MaxUnavailablePercent: 6}}
	desired := Allocation{Weight: 0, StableCapacity: 100, CanaryCapacity: 0}
	canary := SideObservation{Capacity: 100, Ready: 98, Settled: false, Revision: "v3", Updated: true}
	stableSide := func(capacity, ready int32, settled bool) SideObservation {
		return SideObservation{Capacity: capacity, Ready: ready, Settled: settled, Revision: "v1", Updated: true}
	}
	// The stable side as observed at each step, and the hops asked.
	for _, tc := range []struct {
		name  string
		steps []SideObservation
		want  []string
	}{
		{"settled", []SideObservation{stableSide(100, 100, true)}, []string{"canary 0"}},
		{"moving", []SideObservation{stableSide(100, 100, false), stableSide(100, 100, false), stableSide(1, 8, true), stableSide(100, 100, true)},
			[]string{"none", "none", "stable 100", "canary 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := revState(PhaseProgressing, desired, 0, tc.steps[0], canary)
			s.Observed.WeightApplied = false // no router
			now := t0
			var got []string
			for _, stable := range tc.steps {
				now = now.Add(time.Minute)
				s.Observed.At, s.Observed.Stable = micro(now), stable
				d := checkStep(t, strat, s, now)
				if d.State.Phase != PhaseAborting {
					t.Fatalf("phase %s, want %s (the canary side runs v3): %s", d.State.Phase, PhaseAborting, d.State.Message)
				}
				got = append(got, hopString(&d))
				s = d.State
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hops (-want +got):\n%s", diff)
			}
		})
	}
}
