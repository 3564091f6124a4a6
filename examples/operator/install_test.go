package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestInstallOnServingApplication: the operator installed on an
// application that already serves. web-a runs v1 with all traffic, web-b is
// idle at 0 replicas, and a Release is created whose spec already names v2.
// No Release was ever there, so no side carries a note of its revision:
// the Deployer recognises web-a's template as no revision it knows (it is
// asked about v2). The Release adopts web-a as its stable side and rolls v2
// out on web-b (deployed at zero, observed, ramped forward), and is never
// reported Released before all traffic is on web-b running v2. web-b idle
// runs something else, v2 already, or v1 (both made from one template).
// (The operator used to hold, Degraded AdoptionBlocked, on web-a's
// unrecognised revision.)
func TestInstallOnServingApplication(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, idle string // the image web-b runs at 0 replicas
		want       string // the images web-b is seen with
	}{
		{"idle side runs something else", "", "example.com/app:none example.com/app:v2"},
		{"idle side runs the new revision", "example.com/app:v2", "example.com/app:none example.com/app:v2"},
		{"idle side runs the old revision", "example.com/app:v1", "example.com/app:none example.com/app:v1 example.com/app:v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			if tc.idle != "" {
				w.setImage("web-b", tc.idle)
			}
			wc, err := client.NewWithWatch(w.env.Config, client.Options{Scheme: scheme})
			if err != nil {
				t.Fatal(err)
			}
			wi, err := wc.Watch(context.Background(), &v1alpha1.ReleaseList{}, client.InNamespace(w.ns))
			if err != nil {
				t.Fatal(err)
			}
			defer wi.Stop()
			w.start("operator")
			create(t, w.c, w.release("v2", incremental(25, time.Second)))
			deadline := time.After(120 * time.Second)
			var end *v1alpha1.Release
			for end == nil {
				select {
				case ev, ok := <-wi.ResultChan():
					if !ok {
						t.Fatal("the watch ended")
					}
					rel, isRel := ev.Object.(*v1alpha1.Release)
					if ev.Type != watch.Modified || !isRel {
						continue
					}
					if s := &rel.Status.Rollout; s.Aborted != nil || degradedReason(rel) == strategy.ReasonAdoptionBlocked {
						t.Fatalf("%s (%s): %s; route %v", s.Phase, degradedReason(rel), s.Message, w.history())
					}
					if !released(rel) {
						continue
					}
					if got := routeSplit(t, w); got != "0/100" {
						t.Fatalf("Released=True with the route at %s: %s", got, rel.Status.Rollout.Message)
					}
					end = rel
				case <-deadline:
					s := w.get().Status.Rollout
					t.Fatalf("not released: %s %s; route %v", s.Phase, s.Message, w.history())
				}
			}
			w.checkServes(end, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
			checkForward(t, w.history(), "B", 25)
			if got := strings.Join(w.templatesOf("web-b"), " "); got != tc.want {
				t.Errorf("web-b ran %q, want %q", got, tc.want)
			}
			if got := w.templatesOf("web-a"); len(got) != 1 {
				t.Errorf("web-a ran %q: the stable side was redeployed", got)
			}
		})
	}
}

// setImage sets the image of the app container of Deployment name.
func (w *world) setImage(name, image string) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		return w.c.Update(context.Background(), &d)
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// degradedReason is the reason of the Release's Degraded condition when it
// is true.
func degradedReason(rel *v1alpha1.Release) string {
	for _, c := range rel.Status.Conditions {
		if c.Type == strategy.ConditionDegraded && c.Status == "True" {
			return c.Reason
		}
	}
	return ""
}
