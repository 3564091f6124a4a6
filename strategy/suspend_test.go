package strategy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// TestSuspendCommands holds Suspend, and what the other commands do to a
// suspended rollout, to docs/design/commands.md: on each fixture, the
// command's result is the fixture with exactly the listed changes.
func TestSuspendCommands(t *testing.T) {
	fx := fixtures(t)
	c := fixtureCanary
	fx["suspending"] = fx["pausedStep"].Suspend(t1)
	fx["suspended"], _ = walk(t, c, fx["suspending"], t1, phaseIs(strategy.PhaseSuspended))
	fx["suspendedFresh"] = fx["fresh"].Suspend(t1)
	cmdAt := func(s *strategy.State) { s.LastCommandAt = mt(t9) }
	suspending := func(s *strategy.State) {
		cmdAt(s)
		s.Phase = strategy.PhaseAborting
		s.Aborted = &strategy.AbortStatus{Reason: strategy.ReasonSuspended, At: mt(t9)}
		s.ResumeWeight = s.Desired.Weight
		s.AwaitingResume, s.PauseReason = false, ""
		s.PromoteRequested, s.PromoteFullRequested, s.SteadyRequested = false, false, false
		s.Gate = ""
	}
	suspend := func(s strategy.State) strategy.State { return s.Suspend(t9) }

	tests := []commandCase{
		// Suspend walks back from anywhere a rollout goes forward, and
		// remembers the weight it stood at.
		{"progressing", "Suspend", suspend, suspending},
		{"pausedStep", "Suspend", suspend, suspending},
		{"manualPause", "Suspend", suspend, suspending},
		{"completing", "Suspend", suspend, suspending},
		// Not yet stepped: suspended at once, nothing to walk back.
		{"fresh", "Suspend", suspend, func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseSuspended
			s.Aborted = &strategy.AbortStatus{Reason: strategy.ReasonSuspended, At: mt(t9)}
		}},
		// An abort's walk back ends Aborted; a Retarget's is suspended
		// (the new revision waits for Resume).
		{"aborting", "Suspend", suspend, nil},
		{"retargeting", "Suspend", suspend, func(s *strategy.State) {
			cmdAt(s)
			s.Aborted = &strategy.AbortStatus{Reason: strategy.ReasonSuspended, At: mt(t9)}
		}},
		{"suspending", "Suspend", suspend, nil},
		{"suspended", "Suspend", suspend, nil},
		{"aborted", "Suspend", suspend, nil},
		{"rolledBack", "Suspend", suspend, nil},
		{"succeeded", "Suspend", suspend, nil},

		// Resume turns a suspension's walk back round, resumes a
		// suspended rollout, and starts one suspended before its first Step.
		{"suspending", "Resume", resume, func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseProgressing
			s.Aborted = nil
			s.Message = "resumed after a suspension"
		}},
		{"suspended", "Resume", resume, func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseProgressing
			s.Aborted = nil
			s.FinishedAt = metav1.MicroTime{}
			s.Message = "resumed after a suspension"
		}},
		{"suspendedFresh", "Resume", resume, func(s *strategy.State) {
			cmdAt(s)
			s.Phase = ""
			s.Aborted = nil
		}},

		// Abort ends a suspension Aborted; Retry, Promote, PromoteFull and
		// Pause leave it alone.
		{"suspending", "Abort", abort, func(s *strategy.State) {
			cmdAt(s)
			s.Aborted = &strategy.AbortStatus{Reason: "p50", At: mt(t9)}
			s.ResumeWeight = 0
		}},
		{"suspended", "Abort", abort, func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseAborted
			s.Aborted = &strategy.AbortStatus{Reason: "p50", At: mt(t9)}
			s.ResumeWeight = 0
		}},
		{"suspendedFresh", "Abort", abort, nil},
		{"suspending", "Retry", retry, nil},
		{"suspended", "Retry", retry, nil},
		{"suspended", "Promote", promote, nil},
		{"suspended", "PromoteFull", promoteFull, nil},
		{"suspended", "Pause", pause, nil},

		// Retarget while suspended: back to the stable revision is a
		// rollback with nothing left to walk back; a third revision stays
		// suspended, to start from its first step on Resume.
		{"suspended", "Retarget to the canary", retarget("v2"), nil},
		{"suspended", "Retarget to the stable", retarget("v1"), func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseRolledBack
			s.CanaryRevision = "v1"
			s.Aborted = nil
			s.ResumeWeight = 0
			s.Message = strategy.ReasonRolledBack
		}},
		{"suspended", "Retarget to another", retarget("v3"), func(s *strategy.State) {
			cmdAt(s)
			s.CanaryRevision = "v3"
			s.StepIndex, s.StepsHash = 0, ""
			s.Resumed = false
			s.Gate = ""
			s.UnhealthyCount = 0
			s.ReachedAt, s.FinishedAt, s.StartedAt = metav1.MicroTime{}, metav1.MicroTime{}, metav1.MicroTime{}
			s.ResumeWeight = 0
			s.Aborted = &strategy.AbortStatus{Reason: strategy.ReasonSuspended, At: mt(t9)}
		}},
	}
	runCommandCases(t, fx, tests)
}

// TestSuspendResumeWalk walks a canary through a suspension and back: the
// walk back ends Suspended with everything on the stable side and the
// canary released, Degraded clear and the Suspended condition True; Resume
// brings the canary back to the weight it stood at and the step it stood
// at (here a pause step, which holds it again), the condition False.
func TestSuspendResumeWalk(t *testing.T) {
	c := fixtureCanary
	fx := fixtures(t)
	s := fx["pausedStep"]
	at := s.Desired.Weight
	s, now := walk(t, c, s.Suspend(t1), t1, phaseIs(strategy.PhaseSuspended))
	want := strategy.Allocation{Weight: 0, StableCapacity: 100, CanaryCapacity: 0, CanaryRevision: s.Desired.CanaryRevision}
	if diff := cmp.Diff(want, s.Desired); diff != "" {
		t.Fatalf("suspended allocation (-want +got):\n%s", diff)
	}
	if s.ResumeWeight != at {
		t.Fatalf("resumeWeight = %d, want %d (the weight it stood at)", s.ResumeWeight, at)
	}
	checkCond := func(typ string, status metav1.ConditionStatus, reason string) {
		t.Helper()
		for _, cond := range s.Conditions {
			if cond.Type == typ {
				if cond.Status != status || cond.Reason != reason {
					t.Fatalf("condition %s = %s/%s, want %s/%s", typ, cond.Status, cond.Reason, status, reason)
				}
				return
			}
		}
		t.Fatalf("no condition %s", typ)
	}
	checkCond(strategy.ConditionSuspended, metav1.ConditionTrue, strategy.ReasonSuspended)
	checkCond(strategy.ConditionDegraded, metav1.ConditionFalse, strategy.ReasonAsExpected)
	checkCond(strategy.ConditionProgressing, metav1.ConditionFalse, strategy.ReasonSuspended)
	// Nothing happens while suspended, however long.
	if d := c.Step(s, now.Add(24*time.Hour)); d.HasHops() || d.State.Phase != strategy.PhaseSuspended {
		t.Fatalf("a suspended rollout asked for hops or moved: %+v", d)
	}
	now = now.Add(time.Hour)
	s, _ = walk(t, c, s.Resume(now), now, phaseIs(strategy.PhasePaused))
	if s.Desired.Weight != at || s.ResumeWeight != 0 || s.PauseReason != strategy.ReasonPauseStep {
		t.Fatalf("resumed to weight %d (resumeWeight %d, pause %q), want %d held by the pause step", s.Desired.Weight, s.ResumeWeight, s.PauseReason, at)
	}
	checkCond(strategy.ConditionSuspended, metav1.ConditionFalse, strategy.ReasonResumed)
}

// A rollout suspended by command, then resumed: the suspension walks
// everything back to the stable side, and Resume walks back up.
func ExampleState_Suspend() {
	inc := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := strategy.NewState("v1", "v2")
	step := func() {
		for range 20 {
			d := inc.Step(s, now)
			s = d.State
			// A world that applies every hop at once, fully ready.
			s.Observed = strategy.Observation{
				Weight: s.Desired.Weight, WeightApplied: true,
				Stable: strategy.SideObservation{Capacity: s.Desired.StableCapacity, Ready: s.Desired.StableCapacity, Settled: true},
				Canary: strategy.SideObservation{Capacity: s.Desired.CanaryCapacity, Ready: s.Desired.CanaryCapacity, Settled: true},
				At:     metav1.NewMicroTime(now),
			}
			if s.Phase.Terminal() || (d.RequeueAfter >= time.Minute-time.Second && !d.HasHops()) {
				return
			}
			now = now.Add(time.Second)
		}
	}
	step()
	now = now.Add(time.Minute)
	step() // weight 40
	fmt.Println(s.Phase, s.Desired.Weight)
	s = s.Suspend(now)
	step()
	fmt.Println(s.Phase, s.Desired.Weight, s.Desired.CanaryCapacity, s.ResumeWeight)
	s = s.Resume(now)
	step()
	fmt.Println(s.Phase, s.Desired.Weight)
	// Output:
	// Progressing 40
	// Suspended 0 0 40
	// Progressing 40
}
