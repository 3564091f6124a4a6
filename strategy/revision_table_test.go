package strategy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Table tests of revisions on sides (DeployTarget's doc),
// at fixed instants, for what the revision properties once found.

// revState is a rollout from v1 to v2 in phase, asked for desired, observed
// with the route at weight (accepted) and the sides as given, everything
// recorded at t0.
func revState(phase Phase, desired Allocation, weight int32, stable, canary SideObservation) State {
	s := NewState("v1", "v2")
	s.Phase = phase
	s.StartedAt, s.HopAt, s.StepStartedAt, s.WeightChangedAt = micro(t0), micro(t0), micro(t0), micro(t0)
	s.Desired = desired
	s.Observed = Observation{At: micro(t0), Weight: weight, WeightApplied: true, Revisions: true, Stable: stable, Canary: canary}
	return s
}

// TestRevisionChangedWhileCompleting: a canary side redeployed with another
// revision while the rollout is completing (all traffic on it) is walked
// back; the rollout never succeeds onto a side running another revision.
func TestRevisionChangedWhileCompleting(t *testing.T) {
	strat := BlueGreen{}
	s := revState(PhaseCompleting, Allocation{Weight: 100, StableCapacity: 100, CanaryCapacity: 100, CanaryRevision: "v2"}, 100,
		SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v1", Updated: true},
		SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v9", Updated: true})
	s.ReachedAt = micro(t0)
	now := t0.Add(time.Minute)
	var hops []string
	for i := 0; i < 10 && !s.Phase.Terminal(); i++ {
		d := checkStep(t, strat, s, now)
		hops = append(hops, hopString(&d))
		s = d.State
		applyInstantly(&s, &d)
	}
	if s.Phase != PhaseAborted || s.StableRevision != "v1" || s.Aborted == nil || s.Aborted.Reason != ReasonRevisionChanged {
		t.Fatalf("ended %s with stable %q, abort %+v (hops %q); want Aborted for %s with stable v1",
			s.Phase, s.StableRevision, s.Aborted, hops, ReasonRevisionChanged)
	}
	if s.Desired.Weight != 0 || s.Desired.CanaryCapacity != 0 {
		t.Fatalf("ended at %+v: the redeployed canary keeps traffic or capacity", s.Desired)
	}
}

// TestWeightRepairOnARedeployedCanary: a route reset to 0 by another writer
// is not written back up onto a canary side observed running another
// revision: the rollout walks it back instead.
func TestWeightRepairOnARedeployedCanary(t *testing.T) {
	strat := Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	for _, rev := range []string{"v2", "v9"} {
		s := revState(PhaseProgressing, Allocation{Weight: 30, StableCapacity: 100, CanaryCapacity: 30, CanaryRevision: "v2"}, 0,
			SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v1", Updated: true},
			SideObservation{Capacity: 30, Ready: 30, Settled: true, Revision: rev, Updated: true})
		d := checkStep(t, strat, s, t0.Add(time.Minute))
		switch {
		case rev == "v2" && (!d.Weight.Set || d.Weight.Value != 30):
			t.Errorf("canary on v2: asked %s, want the weight 30 written back", hopString(&d))
		case rev == "v9" && d.Weight.Set && d.Weight.Value > 0:
			t.Errorf("canary on v9: asked weight %d onto it", d.Weight.Value)
		case rev == "v9" && d.State.Phase != PhaseAborting:
			t.Errorf("canary on v9: phase %s, want a walk back (%s)", d.State.Phase, ReasonRevisionChanged)
		}
	}
}

// TestWalkBackKeepsALowerCanary: a walk back whose canary side already
// holds less capacity than asked (the write of a reconcile whose state was
// lost), on another revision, keeps that capacity instead of asking it back
// up, and finishes.
func TestWalkBackKeepsALowerCanary(t *testing.T) {
	strat := Incremental{StepPercent: 1, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 1, Options: Options{AbortRamp: AbortGradual}}
	s := revState(PhaseAborting, Allocation{Weight: 18, StableCapacity: 82, CanaryCapacity: 19, CanaryRevision: "v2"}, 18,
		SideObservation{Capacity: 82, Ready: 100, Settled: true, Revision: "v1", Updated: true},
		SideObservation{Capacity: 18, Ready: 33, Settled: true, Revision: "v9", Updated: true})
	s.Aborted = &AbortStatus{Reason: ReasonRevisionChanged, At: micro(t0)}
	now := t0
	for i := 0; i < 2000 && !s.Phase.Terminal(); i++ {
		now = now.Add(2 * time.Second)
		s.Observed.At = micro(now)
		d := checkStep(t, strat, s, now)
		if c := d.CanaryCapacity; c.Set && c.Value > s.Observed.Canary.Capacity {
			t.Fatalf("canary capacity %d asked of a side holding %d on another revision", c.Value, s.Observed.Canary.Capacity)
		}
		s = d.State
		applyInstantly(&s, &d)
	}
	if s.Phase != PhaseAborted || s.Desired.Weight != 0 || s.Desired.CanaryCapacity != 0 || s.Desired.StableCapacity != 100 {
		t.Fatalf("ended %s at %+v: %s; want Aborted at weight 0, stable 100, canary 0", s.Phase, s.Desired, s.Message)
	}
}

// TestStableRevisionMismatchMessage: a stable side observed running
// another revision holds the rollout, and the message and the Degraded
// condition name what the side runs and what it should run; a Step that
// keeps holding allocates nothing.
func TestStableRevisionMismatchMessage(t *testing.T) {
	strat := Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	for _, tc := range []struct {
		side           Side
		observed, want string
	}{
		{SideA, "v0", "stable side A runs v0, want v1: holding"},
		{SideA, "", `stable side A runs no revision its adapter recognises (it reported ""), want v1: holding`},
		{SideB, "v3", "stable side B runs v3, want v1: holding"},
	} {
		s := revState(PhaseProgressing, Allocation{Weight: 10, StableCapacity: 100, CanaryCapacity: 10, CanaryRevision: "v2"}, 10,
			SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: tc.observed, Updated: true},
			SideObservation{Capacity: 10, Ready: 10, Settled: true, Revision: "v2", Updated: true})
		s.StableSide = tc.side
		d := checkStep(t, strat, s, t0.Add(time.Minute))
		var deg *metav1.Condition
		for i := range d.State.Conditions {
			if d.State.Conditions[i].Type == ConditionDegraded {
				deg = &d.State.Conditions[i]
			}
		}
		if d.State.Message != tc.want || deg == nil || deg.Reason != ReasonStableRevisionMismatch || deg.Message != tc.want {
			t.Errorf("stable side on %q: message %q, Degraded %+v; want %q", tc.observed, d.State.Message, deg, tc.want)
		}
		held := d.State
		if n := testing.AllocsPerRun(20, func() { strat.Step(held, t0.Add(time.Minute)) }); n != 0 {
			t.Errorf("stable side on %q: a Step that keeps holding allocates %v times", tc.observed, n)
		}
	}
}

// TestFixedWalkBackOntoAStableSideNotRolledOut: in the fixed mode a Runner
// reports each side as provisioned (Ready 100). A stable side observed
// running its revision without having rolled it out (a restart, or a
// redeploy by someone else that is stuck) may have no ready replica, so a
// walk back (and a repair) moves no traffic onto it until it has rolled
// out; then the walk back goes on. The case the Runner's state machine
// found: all traffic to the stable side while its pods restarted.
func TestFixedWalkBackOntoAStableSideNotRolledOut(t *testing.T) {
	strat := Canary{Steps: []CanaryStep{SetWeight(50)}, Options: Options{Capacity: CapacityFixed}}
	for _, hopAt := range []time.Duration{0, -time.Hour} { // a walk back, and a repair of an older hop
		s := revState(PhaseAborting, Allocation{Weight: 0, StableCapacity: 100, CanaryCapacity: 100, CanaryRevision: "v2"}, 100,
			SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v1", Updated: false},
			SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v2", Updated: true})
		if hopAt == 0 {
			s.Desired.Weight = 100
		}
		s.HopAt = micro(t0.Add(hopAt))
		s.Aborted = &AbortStatus{Reason: ReasonRetarget, At: micro(t0)}
		now := t0.Add(time.Minute)
		s.Observed.At = micro(now)
		d := checkStep(t, strat, s, now)
		if d.Weight.Set && d.Weight.Value < 100 {
			t.Fatalf("hop at %v: weight %d moves traffic onto a stable side whose revision has not rolled out (%s)", hopAt, d.Weight.Value, d.State.Message)
		}
		if d.State.Phase != PhaseAborting {
			t.Fatalf("hop at %v: %s, want Aborting until the stable side has rolled out", hopAt, d.State.Phase)
		}
		s = d.State
		s.Observed.Stable.Updated = true
		now = now.Add(time.Minute)
		s.Observed.At = micro(now)
		if d = checkStep(t, strat, s, now); !d.Weight.Set || d.Weight.Value != 0 {
			t.Fatalf("hop at %v: once rolled out, the walk back asks %s, want weight 0 (%s)", hopAt, hopString(&d), d.State.Message)
		}
	}
}

// TestRepairOfACanaryScaledToZero: someone scaled the canary side to 0 while
// its revision had not rolled out (another writer's rollout, stuck). A
// repair gives it capacity back only once it is observed rolled out: the
// replicas a scale-up starts mid-rollout may be of the old revision, and at
// 0 a rollout finishes at once.
func TestRepairOfACanaryScaledToZero(t *testing.T) {
	strat := Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 10, Options: Options{Capacity: CapacityReplicas}}
	for _, updated := range []bool{false, true} {
		s := revState(PhaseProgressing, Allocation{Weight: 10, StableCapacity: 90, CanaryCapacity: 10, CanaryRevision: "v2"}, 0,
			SideObservation{Capacity: 90, Ready: 100, Settled: true, Revision: "v1", Updated: true},
			SideObservation{Capacity: 0, Ready: 0, Settled: true, Revision: "v2", Updated: updated})
		s.Observed.WeightApplied = false
		s.HopAt = micro(t0.Add(-time.Hour))
		now := t0.Add(time.Minute)
		s.Observed.At = micro(now)
		d := checkStep(t, strat, s, now)
		if asked := d.CanaryCapacity.Set && d.CanaryCapacity.Value > 0; asked != updated {
			t.Errorf("updated %v: the repair asks %s (%s); want canary capacity back only once rolled out", updated, hopString(&d), d.State.Message)
		}
	}
}

// TestRepairNeverShrinksBothSidesBelowAvailability: in the Replicas mode a
// repair scales a side down only while the other keeps the total ready
// capacity within MaxUnavailablePercent. Both sides above a corrupt or
// stale desired allocation must not shrink together, each judged against
// the other's current capacity: the canary's scale-down counts the stable
// side at what the same repair shrinks it to. (Found by TestNeverUnsafe: a
// restored state asking stable 0, canary 1 took a world at 66/77 down to a
// total of 12% ready with MaxUnavailable 50.)
func TestRepairNeverShrinksBothSidesBelowAvailability(t *testing.T) {
	strat := Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 10,
		Options: Options{Capacity: CapacityReplicas, MaxUnavailablePercent: 50}}
	s := revState(PhaseProgressing, Allocation{Weight: 10, StableCapacity: 0, CanaryCapacity: 10, CanaryRevision: "v2"}, 0,
		SideObservation{Capacity: 66, Ready: 66, Settled: true, Revision: "v1", Updated: true},
		SideObservation{Capacity: 77, Ready: 77, Settled: true, Revision: "v2", Updated: true})
	s.Observed.WeightApplied = false
	s.HopAt = micro(t0.Add(-time.Hour))
	now := t0.Add(time.Minute)
	s.Observed.At = micro(now)
	d := checkStep(t, strat, s, now)
	var stable, canary int32 = 66, 77
	if d.StableCapacity.Set {
		stable = d.StableCapacity.Value
	}
	if d.CanaryCapacity.Set {
		canary = d.CanaryCapacity.Value
	}
	if stable+canary < 50 {
		t.Fatalf("the repair asks %s: stable %d + canary %d is below the 50%% MaxUnavailable allows (%s)", hopString(&d), stable, canary, d.State.Message)
	}
}
