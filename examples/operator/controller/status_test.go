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
