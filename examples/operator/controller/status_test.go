package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// TestMirror: the status conditions are the rollout's plus Released, each
// with the spec's generation; a condition whose status did not change
// keeps its transition time.
func TestMirror(t *testing.T) {
	progressing := metav1.Condition{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Progressing",
		LastTransitionTime: metav1.NewTime(t0)}
	for _, tc := range []struct {
		name     string
		prev     []metav1.Condition
		state    strategy.State
		revision string
		want     []metav1.Condition
	}{{
		name:     "idle on the revision asked for: released",
		state:    strategy.State{StableRevision: "v1", CanaryRevision: "v1"},
		revision: "v1",
		want: []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionTrue, Reason: strategy.ReasonIdle,
			Message: "v1 runs on the stable side with all traffic", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}},
	}, {
		name:     "a wiped status, not observed yet: not released",
		prev:     []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}},
		state:    strategy.State{}.Retarget("v2", t0),
		revision: "v2",
		want: []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse, Reason: strategy.ReasonAdopting,
			Message: "v2 is asked for; the route and the sides are not observed yet", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}},
	}, {
		name: "progressing: not released; Progressing keeps its transition time",
		prev: []metav1.Condition{progressing, {Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(t0)}},
		state: strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseProgressing,
			Conditions: []metav1.Condition{{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Progressing",
				LastTransitionTime: metav1.NewTime(t0)}}},
		revision: "v2",
		want: []metav1.Condition{
			{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Progressing", ObservedGeneration: 3,
				LastTransitionTime: metav1.NewTime(t0)},
			{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse, Reason: string(strategy.PhaseProgressing),
				Message: "v1 runs on the stable side; v2 is asked for", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0)},
		},
	}, {
		name:     "succeeded: released from now",
		prev:     []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0)}},
		state:    strategy.State{StableRevision: "v2", CanaryRevision: "v2", Phase: strategy.PhaseSucceeded},
		revision: "v2",
		want: []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionTrue, Reason: string(strategy.PhaseSucceeded),
			Message: "v2 runs on the stable side with all traffic", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}},
	}, {
		name:     "aborted: the stable revision is not the one asked for",
		state:    strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseAborted},
		revision: "v2",
		want: []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse, Reason: string(strategy.PhaseAborted),
			Message: "v1 runs on the stable side; v2 is asked for", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := mirror(tc.prev, &tc.state, tc.revision, 3, t0.Add(time.Minute+300*time.Millisecond))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("conditions (-want +got):\n%s", d)
			}
		})
	}
}

// TestStatusChanged: a reconcile that changes nothing but the rollout's
// volatile fields writes nothing; a control request seen, a generation or
// a condition does.
func TestStatusChanged(t *testing.T) {
	base := v1alpha1.ReleaseStatus{ObservedGeneration: 2, Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2",
		Phase: strategy.PhaseProgressing}}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.ReleaseStatus)
		want   bool
	}{
		{"nothing", func(*v1alpha1.ReleaseStatus) {}, false},
		{"a control request seen", func(s *v1alpha1.ReleaseStatus) { s.Rollout.Handled.Abort = "a1" }, true},
		{"the generation", func(s *v1alpha1.ReleaseStatus) { s.ObservedGeneration = 3 }, true},
		{"a condition", func(s *v1alpha1.ReleaseStatus) {
			s.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionTrue}}
		}, true},
		{"the phase", func(s *v1alpha1.ReleaseStatus) { s.Rollout.Phase = strategy.PhaseCompleting }, true},
		{"a revision identity recorded", func(s *v1alpha1.ReleaseStatus) {
			s.Revisions = []v1alpha1.RevisionImage{{Identity: "v2@00000000", Container: "app", Image: "x:v2"}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := *base.DeepCopy()
			tc.change(&next)
			if got := statusChanged(&base, &next); got != tc.want {
				t.Errorf("statusChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSummarize: the status fields kubectl get shows say where the rollout
// stands: the phase also when idle, the current step (a pause without end
// too), each side's revision and weight whichever role it holds, and the
// message.
func TestSummarize(t *testing.T) {
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{Steps: []strategy.CanaryStep{
		strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.Pause(30 * time.Second), {Gate: &strategy.GateStep{Name: "smoke"}},
		strategy.SetWeight(100)}}}
	incremental := v1alpha1.ReleaseStrategy{Incremental: &strategy.Incremental{StepPercent: 10}}
	side := func(rev string, ready int32) strategy.SideObservation {
		return strategy.SideObservation{Revision: rev, Updated: rev != "", Capacity: ready, Ready: ready, Settled: true}
	}
	released := func(status metav1.ConditionStatus, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionReleased, Status: status, Message: msg}}
	}
	for _, tc := range []struct {
		name     string
		strategy v1alpha1.ReleaseStrategy
		status   v1alpha1.ReleaseStatus
		want     v1alpha1.ReleaseStatus // only the summary fields
	}{{
		name:     "idle on side A",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v1", StableSide: strategy.SideA,
			Observed: strategy.Observation{Revisions: true, Stable: side("v1", 100)}}, Conditions: released(metav1.ConditionTrue, "v1 runs on the stable side with all traffic")},
		want: v1alpha1.ReleaseStatus{Phase: "Idle", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 100}, B: &v1alpha1.SideStatus{},
			Message: "v1 runs on the stable side with all traffic"},
	}, {
		name:     "not observed yet",
		strategy: canary,
		status:   v1alpha1.ReleaseStatus{Rollout: strategy.State{}.Retarget("v1", t0)},
		want:     v1alpha1.ReleaseStatus{Phase: "Adopting", Message: strategy.State{}.Retarget("v1", t0).Message},
	}, {
		name:     "at a pause step without end",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2", StableSide: strategy.SideA,
			Phase: strategy.PhasePaused, StepIndex: 1, AwaitingResume: true, PauseReason: strategy.ReasonPauseStep, Message: "waiting for resume",
			Observed: strategy.Observation{Revisions: true, Weight: 25, Stable: side("v1", 100), Canary: side("v2", 25)}}},
		want: v1alpha1.ReleaseStatus{Phase: "Paused", Step: "2/5 pause until resumed", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 75},
			B: &v1alpha1.SideStatus{Revision: "v2", Weight: 25}, Message: "waiting for resume"},
	}, {
		name:     "a manual pause during a setWeight step, stable on side B",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v2", CanaryRevision: "v3", StableSide: strategy.SideB,
			Phase: strategy.PhasePaused, StepIndex: 0, AwaitingResume: true, PauseReason: strategy.ReasonManualPause,
			Observed: strategy.Observation{Revisions: true, Weight: 10, Stable: side("v2", 100), Canary: side("v3", 25)}}},
		want: v1alpha1.ReleaseStatus{Phase: "Paused", Step: "1/5 setWeight 25, paused (ManualPause)", A: &v1alpha1.SideStatus{Revision: "v3", Weight: 10},
			B: &v1alpha1.SideStatus{Revision: "v2", Weight: 90}},
	}, {
		name:     "at a gate step, revisions not tracked",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseProgressing,
			StepIndex: 3, Observed: strategy.Observation{Weight: 25}}},
		want: v1alpha1.ReleaseStatus{Phase: "Progressing", Step: "4/5 gate smoke", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 75},
			B: &v1alpha1.SideStatus{Revision: "v2", Weight: 25}},
	}, {
		name:     "incremental",
		strategy: incremental,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseProgressing,
			Desired: strategy.Allocation{Weight: 40}, Observed: strategy.Observation{Revisions: true, Weight: 30, Stable: side("v1", 70), Canary: side("v2", 40)}}},
		want: v1alpha1.ReleaseStatus{Phase: "Progressing", Step: "to weight 40", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 70},
			B: &v1alpha1.SideStatus{Revision: "v2", Weight: 30}},
	}, {
		name:     "succeeded: all traffic on side B",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v2", CanaryRevision: "v2", StableSide: strategy.SideB,
			Phase: strategy.PhaseSucceeded, StepIndex: 4, Observed: strategy.Observation{Revisions: true, Weight: 0, Stable: side("v2", 100), Canary: side("v1", 0)}},
			Conditions: released(metav1.ConditionTrue, "v2 runs on the stable side with all traffic")},
		want: v1alpha1.ReleaseStatus{Phase: "Succeeded", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 0},
			B: &v1alpha1.SideStatus{Revision: "v2", Weight: 100}, Message: "v2 runs on the stable side with all traffic"},
	}, {
		name:     "suspended at a pause step",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2", StableSide: strategy.SideA,
			Phase: strategy.PhaseSuspended, StepIndex: 1, StartedAt: metav1.NewMicroTime(t0), ResumeWeight: 25, Message: "suspended",
			Observed: strategy.Observation{Revisions: true, Stable: side("v1", 100), Canary: side("v2", 0)}}},
		want: v1alpha1.ReleaseStatus{Phase: "Suspended", Step: "2/5 pause until resumed, suspended (resume continues from weight 25)",
			A: &v1alpha1.SideStatus{Revision: "v1", Weight: 100}, B: &v1alpha1.SideStatus{Revision: "v2"}, Message: "suspended"},
	}, {
		name:     "suspended before its first step, incremental",
		strategy: incremental,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseSuspended,
			Observed: strategy.Observation{Revisions: true, Stable: side("v1", 100)}}},
		want: v1alpha1.ReleaseStatus{Phase: "Suspended", Step: "suspended before its first step (resume starts it)",
			A: &v1alpha1.SideStatus{Revision: "v1", Weight: 100}, B: &v1alpha1.SideStatus{}},
	}, {
		name:     "an invalid spec",
		strategy: canary,
		status: v1alpha1.ReleaseStatus{Rollout: strategy.State{StableRevision: "v1", CanaryRevision: "v1", Message: "idle",
			Observed: strategy.Observation{Revisions: true, Stable: side("v1", 100)}},
			Conditions: []metav1.Condition{{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonInvalidSpec, Message: "spec.replicas: must be positive"}}},
		want: v1alpha1.ReleaseStatus{Phase: "Idle", A: &v1alpha1.SideStatus{Revision: "v1", Weight: 100}, B: &v1alpha1.SideStatus{},
			Message: "invalid spec: spec.replicas: must be positive"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.status
			summarize(&got, &v1alpha1.ReleaseSpec{Strategy: tc.strategy})
			want := tc.status
			want.Phase, want.Step, want.A, want.B, want.Message = tc.want.Phase, tc.want.Step, tc.want.A, tc.want.B, tc.want.Message
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("status (-want +got):\n%s", d)
			}
		})
	}
}
