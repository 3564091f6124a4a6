package gateway_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// annotateControl writes the control annotation of route ns/name.
func annotateControl(t *testing.T, c client.Client, ref gateway.RouteRef, value string) {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(rt.DeepCopy())
	if rt.Annotations == nil {
		rt.Annotations = map[string]string{}
	}
	rt.Annotations[gateway.ControlAnnotation] = value
	if err := c.Patch(context.Background(), &rt, patch); err != nil {
		t.Fatal(err)
	}
}

// TestControlAnnotation: AnnotationStore.LoadControl reads the route's
// control annotation, and Run applies it: a promote written on the route
// passes a pause step without end, once.
func TestControlAnnotation(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	store := gateway.NewAnnotationStore(env.Client, ref)
	ctx := context.Background()

	if c, err := store.LoadControl(ctx); err != nil || c != (strategy.Control{}) {
		t.Fatalf("LoadControl without the annotation: %+v, %v", c, err)
	}
	annotateControl(t, env.Client, ref, `{"paused":`)
	if _, err := store.LoadControl(ctx); err == nil || !rollout.IsPermanent(err) {
		t.Fatalf("LoadControl of bad JSON: %v, want a permanent error", err)
	}
	missing := gateway.NewAnnotationStore(env.Client, gateway.RouteRef{Namespace: ns, Name: "none"})
	if _, err := missing.LoadControl(ctx); !errors.Is(err, rollout.ErrNotFound) {
		t.Fatalf("LoadControl of a missing route: %v", err)
	}
	annotateControl(t, env.Client, ref, `{"paused":true,"abort":"a0"}`)
	c, err := store.LoadControl(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strategy.Control{Paused: true, Abort: "a0"}, c); diff != "" {
		t.Fatalf("LoadControl (-want +got):\n%s", diff)
	}
	annotateControl(t, env.Client, ref, `{}`)

	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{strategy.SetWeight(40), strategy.PauseUntilResumed()}}
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	runner := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock, Store: store,
		Observer: rollout.ObserverFunc(func(context.Context, rollout.Event) { playController(t, env.Client, ref) })}
	result := make(chan strategy.State, 1)
	go func() {
		s, err := runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		result <- s
	}()
	advanceUntil(t, clock, func() bool {
		s, err := store.Load(ctx)
		return err == nil && s.Phase == strategy.PhasePaused && s.PauseReason == strategy.ReasonPauseStep
	})
	annotateControl(t, env.Client, ref, `{"promote":"p1"}`)
	var end strategy.State
	advanceUntil(t, clock, func() bool {
		select {
		case end = <-result:
			return true
		default:
			return false
		}
	})
	if end.Phase != strategy.PhaseSucceeded || end.Handled.Promote != "p1" {
		t.Fatalf("after the promote annotation: phase %s, handled %+v", end.Phase, end.Handled)
	}
}
