package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestStepRunnerObservesFromStored: the Runner of a reconcile reports each
// Event against the state as stored in the status, not the one it was
// given (the spec's commands applied), so that a command is a change of
// the reconcile that applies it; the generation's Runner keeps no Observer
// and is otherwise what the reconcile's is.
func TestStepRunnerObservesFromStored(t *testing.T) {
	paused := strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhasePaused, AwaitingResume: true}
	aborting := paused.Abort("spec.control", t0)
	aborted := aborting
	aborted.Phase = strategy.PhaseAborted
	for _, tc := range []struct {
		name                 string
		stored, given, after strategy.State
		want                 []string
	}{
		{"an abort by the spec's control", paused, aborting, aborting, []string{
			"Warning PhaseAborting Paused -> Aborting (v1 to v2): ",
			"Warning Aborted v1 to v2 aborted: spec.control",
		}},
		{"a walk back that ends", aborting, aborting, aborted, []string{
			"Warning PhaseAborted Aborting -> Aborted (v1 to v2): ",
		}},
		{"nothing changed", paused, paused, paused, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Recorder: rec, Metrics: NewMetrics(prometheus.NewRegistry())}
			rel := &v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
			gen := &cachedRunner{release: rel, runner: &rollout.Runner{RetryInterval: time.Second}}
			step := r.stepRunner(gen, tc.stored)
			if gen.runner.Observer != nil || step.Observer == nil {
				t.Fatalf("Observer: the generation's %v, the reconcile's %v; want none and one", gen.runner.Observer, step.Observer)
			}
			if step.RetryInterval != gen.runner.RetryInterval {
				t.Errorf("the reconcile's Runner is not the generation's: RetryInterval %v, want %v", step.RetryInterval, gen.runner.RetryInterval)
			}
			step.Observer.Reconciled(context.Background(), rollout.Event{Time: t0, Before: tc.given, After: tc.after})
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
