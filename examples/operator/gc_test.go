package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// pausedCanary stops at 25% until resumed.
func pausedCanary() v1alpha1.ReleaseStrategy {
	return v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{
		MaxSurgePercent: 25,
		Steps:           []strategy.CanaryStep{strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(100)},
		Options:         strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
}

// TestDeleteRelease: a Release deleted mid-rollout (at 25%), with each
// propagation policy, is gone once the operator's finalizer released its
// claims and the real garbage collector did its part (foreground: it
// removes its foregroundDeletion finalizer when no dependent is left;
// orphan: its orphan finalizer). A Release owns no object: it names
// Deployments and a route its user created, and sets no ownerReferences
// on them, so the garbage collector deletes none of them, nor their
// ReplicaSets and pods; the route keeps its split, and nothing is claimed.
func TestDeleteRelease(t *testing.T) {
	t.Parallel()
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			w, rel := pausedV2At25(t)
			if got := w.claimants(); got != [3]string{"web", "web", "web"} {
				t.Fatalf("claims %q before the deletion, want all by web", got)
			}
			uid := rel.UID
			if err := w.c.Delete(context.Background(), rel, client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
			w.waitGone(60 * time.Second)
			if got := w.claimants(); got != [3]string{} {
				t.Errorf("claims %q after the deletion, want none", got)
			}
			// The garbage collector has had its turn on the Release: the
			// objects it names live on, and none names it as an owner.
			w.waitSide("web-a", -1)
			w.waitSide("web-b", -1)
			w.checkNotOwned(uid)
			if got, want := w.history(), []string{"100/0", "75/25"}; !cmp.Equal(got, want) {
				t.Errorf("route splits %v, want %v (the deletion leaves the traffic as it is)", got, want)
			}
			if got, want := w.templatesOf("web-b"), []string{"example.com/app:none", "example.com/app:v2"}; !cmp.Equal(got, want) {
				t.Errorf("web-b ran %v, want %v", got, want)
			}
		})
	}
}

// waitGone waits until the Release web no longer exists.
func (w *world) waitGone(timeout time.Duration) {
	w.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		var rel v1alpha1.Release
		err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rel)
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			w.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("waited %v for the Release to be gone: finalizers %q, deleted at %v", timeout, rel.Finalizers, rel.DeletionTimestamp)
		}
	}
}

// checkNotOwned checks that no Deployment, ReplicaSet, pod or route of the
// namespace names the object uid as an owner.
func (w *world) checkNotOwned(uid types.UID) {
	w.t.Helper()
	ctx := context.Background()
	var objs []metav1.Object
	deps, err := w.env.Kube.AppsV1().Deployments(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range deps.Items {
		objs = append(objs, &deps.Items[i])
	}
	rss, err := w.env.Kube.AppsV1().ReplicaSets(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range rss.Items {
		objs = append(objs, &rss.Items[i])
	}
	pods, err := w.env.Kube.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range pods.Items {
		objs = append(objs, &pods.Items[i])
	}
	routes, err := w.env.Gateway.GatewayV1().HTTPRoutes(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range routes.Items {
		objs = append(objs, &routes.Items[i])
	}
	if len(routes.Items) != 1 || len(deps.Items) != 2 {
		w.t.Errorf("%d routes and %d Deployments, want the route and both Deployments", len(routes.Items), len(deps.Items))
	}
	for _, o := range objs {
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == uid {
				w.t.Errorf("%s is owned by the Release: %+v", o.GetName(), ref)
			}
		}
	}
}
