package main_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestStatusWiped: the status of a Release is wiped mid-rollout, with the
// route split between side A on v1 and side B on v2, while no operator
// runs. The operator started again adopts the world it observes: no
// status it writes says Released=True before all traffic is on side B,
// which runs v2, and the rollout ends there. (The zero status's Retarget
// used to record v2 as running on side A, unobserved: Released=True at
// once, with the route split for good.)
func TestStatusWiped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("first")
	create(t, w.c, w.release("v1", incremental(20, 2*time.Second)))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("weight 20", 30*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return s.Observed.Weight >= 20 && s.Observed.Weight < 100 && s.Observed.WeightApplied
	})
	op.kill()
	time.Sleep(300 * time.Millisecond)
	rel := w.get()
	rel.Status = v1alpha1.ReleaseStatus{}
	if err := w.c.Status().Update(context.Background(), rel); err != nil {
		t.Fatal(err)
	}
	split := routeSplit(t, w)
	if split == "0/100" || split == "100/0" {
		t.Fatalf("the route is not split when the status is wiped: %s", split)
	}
	t.Logf("status wiped with the route at %s", split)

	// Every status written from now on: Released only with all traffic on B.
	wc, err := client.NewWithWatch(w.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := wc.Watch(context.Background(), &v1alpha1.ReleaseList{}, client.InNamespace(w.ns),
		&client.ListOptions{Raw: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	w.start("second")
	deadline := time.After(90 * time.Second)
	for {
		select {
		case ev, ok := <-wi.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			rel, isRel := ev.Object.(*v1alpha1.Release)
			if ev.Type != watch.Modified || !isRel || !released(rel) {
				continue
			}
			s := rel.Status.Rollout
			if got := routeSplit(t, w); got != "0/100" || s.StableRevision != id("v2") || s.StableSide != strategy.SideB {
				t.Fatalf("Released=True with the route at %s, stable %s on side %s (%s): %s; route %v",
					got, s.StableRevision, s.StableSide, s.Phase, s.Message, w.history())
			}
			if got := w.templatesOf("web-b"); len(got) == 0 || got[len(got)-1] != "example.com/app:v2" {
				t.Fatalf("side B runs %v", got)
			}
			t.Logf("released %s on side B; route %v", s.Phase, w.history())
			return
		case <-deadline:
			s := w.get().Status.Rollout
			t.Fatalf("not released: %s %s; route %v", s.Phase, s.Message, w.history())
		}
	}
}

// routeSplit reads the route's weights as A/B.
func routeSplit(t *testing.T, w *world) string {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	var a, b int32
	for _, ref := range rt.Spec.Rules[0].BackendRefs {
		switch {
		case ref.Weight == nil:
		case ref.Name == "web-a":
			a = *ref.Weight
		default:
			b = *ref.Weight
		}
	}
	return fmt.Sprintf("%d/%d", a, b)
}
