package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// claimants returns the owners of the claims on the route rule and on
// the two Deployments, by name ("" for none).
func (w *world) claimants() [3]string {
	w.t.Helper()
	ctx := context.Background()
	var out [3]string
	name := func(raw string, ok bool) string {
		if !ok {
			return ""
		}
		var o rollout.Owner
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			w.t.Fatalf("claim %q: %v", raw, err)
		}
		return o.Name
	}
	var rt gwv1.HTTPRoute
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "web"}, &rt); err != nil {
		w.t.Fatal(err)
	}
	raw, ok := rt.Annotations[gateway.ClaimAnnotation(w.ns, gateway.Backend{Name: "web-a", Port: 80}, gateway.Backend{Name: "web-b", Port: 80})]
	out[0] = name(raw, ok)
	for i, d := range []string{"web-a", "web-b"} {
		var dep appsv1.Deployment
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: d}, &dep); err != nil {
			w.t.Fatal(err)
		}
		raw, ok := dep.Annotations[replicas.ClaimAnnotation]
		out[i+1] = name(raw, ok)
	}
	return out
}

// getNamed reads the Release name.
func (w *world) getNamed(name string) *v1alpha1.Release {
	w.t.Helper()
	var rel v1alpha1.Release
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &rel); err != nil {
		w.t.Fatal(err)
	}
	return &rel
}

// waitForNamed is waitFor for the Release name.
func (w *world) waitForNamed(name, what string, timeout time.Duration, cond func(*v1alpha1.Release) bool) *v1alpha1.Release {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rel := w.getNamed(name)
		if cond(rel) {
			return rel
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("waited %v for %s of %s: phase %q: %s; conditions %+v; route %v; claims %v", timeout, what, name,
				rel.Status.Rollout.Phase, rel.Status.Rollout.Message, rel.Status.Conditions, w.history(), w.claimants())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSecondReleaseRefused: a second Release pointed at the route and the
// Deployments of a first one, which is at 80/20, is edited to v3. It is
// refused: Degraded with reason Claimed naming the first Release and the
// route, and the route stays at 80/20 until the first goes on and
// completes. Deleting the first Release releases its claims (the
// finalizer), and the second then takes the objects over.
func TestSecondReleaseRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{
		MaxSurgePercent: 100,
		Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.PauseUntilResumed(), strategy.SetWeight(100)},
		Options:         strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
	create(t, w.c, w.release("v1", canary))
	w.waitFor("v1 released", 30*time.Second, released)
	if rel := w.get(); !strings.Contains(strings.Join(rel.Finalizers, ","), controller.Finalizer) {
		t.Errorf("finalizers %v, want %s", rel.Finalizers, controller.Finalizer)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("the pause at 20", 30*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return s.Phase == strategy.PhasePaused && s.Observed.Weight == 20 && s.Observed.WeightApplied
	})
	if got := w.claimants(); got != [3]string{"web", "web", "web"} {
		t.Fatalf("claims %v, want the first Release's on the route and both Deployments", got)
	}

	second := w.release("v1", canary)
	second.Name = "web-copy"
	create(t, w.c, second)
	// The second Release's state is unobserved: it may not even read the
	// world it would adopt, since another Release holds the claims.
	w.waitForNamed("web-copy", "refused before adopting", 30*time.Second, func(rel *v1alpha1.Release) bool {
		c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded)
		return rel.Status.Rollout.Unobserved && !released(rel) && c != nil && c.Status == metav1.ConditionTrue && c.Reason == strategy.ReasonClaimed
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rel := w.getNamed("web-copy")
		rel.Spec.Revision = "v3"
		return w.c.Update(context.Background(), rel)
	})
	if err != nil {
		t.Fatal(err)
	}
	rel := w.waitForNamed("web-copy", "Degraded: Claimed", 30*time.Second, func(rel *v1alpha1.Release) bool {
		c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == strategy.ReasonClaimed && c.ObservedGeneration == rel.Generation
	})
	msg := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded).Message
	if !strings.Contains(msg, "Release "+w.ns+"/web ") || !strings.Contains(msg, "HTTPRoute "+w.ns+"/web") {
		t.Errorf("Degraded message %q, want it to name Release %s/web and the route", msg, w.ns)
	}
	time.Sleep(2 * time.Second) // the second Release retries meanwhile
	if h := w.history(); h[len(h)-1] != "80/20" {
		t.Fatalf("route %v, want it left at 80/20", h)
	}
	if got := w.claimants(); got != [3]string{"web", "web", "web"} {
		t.Fatalf("claims %v after the refusal, want the first Release's", got)
	}
	if got := w.templatesOf("web-b"); strings.Contains(strings.Join(got, " "), "v3") {
		t.Fatalf("web-b ran %v: the refused Release deployed", got)
	}

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Resume = "r1" })
	w.waitFor("v2 released", 30*time.Second, released)
	checkForward(t, w.history(), "B", 80)
	if rel := w.getNamed("web-copy"); apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded).Reason != strategy.ReasonClaimed {
		t.Errorf("web-copy is no longer refused while web holds the claims: %+v", rel.Status.Conditions)
	}

	if err := w.c.Delete(context.Background(), w.get()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var rel v1alpha1.Release
		err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rel)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first Release is not gone: %v, finalizers %v", err, rel.Finalizers)
		}
	}
	rel = w.waitForNamed("web-copy", "the claims taken over", 30*time.Second, func(rel *v1alpha1.Release) bool {
		c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded)
		return c != nil && c.Reason != strategy.ReasonClaimed && w.claimants() == [3]string{"web-copy", "web-copy", "web-copy"}
	})
	t.Logf("web-copy after the takeover: phase %s, %s; route %v", rel.Status.Rollout.Phase, rel.Status.Rollout.Message, w.history())
}
