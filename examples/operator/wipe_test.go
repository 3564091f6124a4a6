package main_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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

// TestStatusWipedWhileRunning: the status of a Release is wiped while the
// operator runs and nothing else changes: its rollout from v1 to v2 holds
// at 25% on a pause until resumed, which asks for no requeue, and no
// Deployment or route moves. The wipe alone is reconciled: the rollout is
// adopted again within seconds (paused at 25%, side A stable, v2 canary
// on side B), with no traffic moved and no side redeployed or
// scaled before it was observed, nor after. The operator's own status
// writes reconcile nothing: once paused again it neither reconciles nor
// writes. Resumed, the adopted rollout ends released on side B. (The
// operator's watch of Releases used to pass only spec changes, so a wiped
// status waited for something else to change.)
func TestStatusWipedWhileRunning(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("operator")
	create(t, w.c, w.release("v1", pausedCanary()))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.pausedAt25()
	splits, templates, scales := w.history(), w.templatesOf("web-b"), w.replicasOf("web-a", "web-b")

	rel := w.get()
	rel.Status = v1alpha1.ReleaseStatus{}
	if err := w.c.Status().Update(context.Background(), rel); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	w.waitFor("the rollout adopted again, paused at 25", 20*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && !s.Unobserved && s.Phase == strategy.PhasePaused &&
			s.Observed.Weight == 25 && s.CanaryRevision == id("v2") && s.StableSide == strategy.SideA &&
			// web-a was made by its user and never deployed by the
			// operator, so nothing but the wiped status named what it
			// runs: its template is no revision the spec describes.
			(s.StableRevision == "" || s.StableRevision == id("v1"))
	})
	t.Logf("adopted again %s after the wipe", time.Since(wiped).Round(time.Millisecond))
	if got := w.history(); !slices.Equal(got, splits) {
		t.Errorf("the route moved after the wipe: %v, was %v", got, splits)
	}
	if got := w.templatesOf("web-b"); !slices.Equal(got, templates) {
		t.Errorf("web-b redeployed after the wipe: %v, was %v", got, templates)
	}
	if got := w.replicasOf("web-a", "web-b"); got != scales {
		t.Errorf("replicas after the wipe %s, were %s", got, scales)
	}

	// Quiet again: the writes of the adoption reconciled nothing more.
	before := reconciles(t, op, w.ns)
	count := w.countWrites()
	time.Sleep(3 * time.Second)
	if n, after := count(), reconciles(t, op, w.ns); n != 0 || after > before {
		t.Errorf("paused after the adoption: %d status writes, %d reconciles in 3s", n, after-before)
	}

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Resume = "r1" })
	end := w.waitFor("v2 released", 60*time.Second, released)
	w.checkServes(end, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
}

// reconciles reads how many reconciles of the world's Release the operator
// has counted.
func reconciles(t *testing.T, op *operator, ns string) int {
	t.Helper()
	for _, line := range strings.Split(op.scrape(t), "\n") {
		if rest, ok := strings.CutPrefix(line, series("reconcile_seconds_count", ns)+" "); ok {
			n, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// replicasOf reads the spec.replicas of the named Deployments, as
// "name=n ...".
func (w *world) replicasOf(names ...string) string {
	w.t.Helper()
	var out []string
	for _, name := range names {
		var d appsv1.Deployment
		if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &d); err != nil {
			w.t.Fatal(err)
		}
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		out = append(out, fmt.Sprintf("%s=%d", name, n))
	}
	return strings.Join(out, " ")
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
