package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// stateOn reads the state the AnnotationStore keeps on a route and the
// canary's weight in the route's spec.
func stateOn(t *testing.T, c client.Client, ref gateway.RouteRef) (strategy.State, int32, bool) {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	var st strategy.State
	raw, ok := rt.Annotations[gateway.StateAnnotation]
	if !ok {
		return st, 0, false
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	want := canary
	if st.StableSide == strategy.SideB {
		want = stable
	}
	for _, rule := range rt.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if string(b.Name) == want.Name && b.Weight != nil {
				return st, *b.Weight, true
			}
		}
	}
	t.Fatalf("%s: no weight for %s", ref, want.Name)
	return st, 0, false
}

// TestRunWritesTheHopWithItsState: with the Router's AnnotationStore, Run
// writes each weight hop and the state that records it in one update of
// the route: right after every weight hop the route holds the new weights
// and the state that asked for them, the route is written once per hop
// (the weight hops with their state, the capacity hops' states alone), and
// no write conflicts with the gateway's status writes.
func TestRunWritesTheHopWithItsState(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	store, err := router.AnnotationStore(ref)
	if err != nil {
		t.Fatal(err)
	}
	if !store.Moves(router) {
		t.Fatal("the Router's AnnotationStore does not report moving it")
	}
	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	strat := strategy.Incremental{StepPercent: 25, MaxSurgePercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}}
	var (
		mu                  sync.Mutex
		weightHops, capHops int
		problems            []string
		weightsWithoutState int
	)
	r := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock, Store: store,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Err != nil {
				problems = append(problems, fmt.Sprintf("reconcile at %s: %v", e.Time.Sub(t0), e.Err))
			}
			for _, h := range e.Applied {
				switch h.Kind {
				case rollout.HopWeight:
					weightHops++
					// The Observer runs before Run saves: the state on
					// the route is the one written with the weights.
					st, w, ok := stateOn(t, env.Client, ref)
					if !ok || st.Desired.Weight != h.Value || w != h.Value {
						weightsWithoutState++
						problems = append(problems, fmt.Sprintf("after hop %s: route weight %d, state on it asks %d (present %v)", h, w, st.Desired.Weight, ok))
					}
				case rollout.HopCapacity:
					capHops++
				}
			}
			playController(t, env.Client, ref)
		})}
	done := make(chan strategy.State, 1)
	go func() {
		s, err := r.Run(context.Background(), strategy.NewState("v1", "v2"), nil)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- s
	}()
	var end strategy.State
	advanceUntil(t, clock, func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	})
	for _, p := range problems {
		t.Error(p)
	}
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	c := router.Counts()
	t.Logf("%d weight hops, %d capacity hops: %d writes of the route, %d conflicts, %d reads", weightHops, capHops, c.Writes, c.Conflicts, c.Reads)
	if weightHops != 4 {
		t.Errorf("%d weight hops, want 4", weightHops)
	}
	// One write per hop, and the first state (Run saves the state it
	// starts from once it has reconciled it) when that reconcile moved
	// nothing.
	if c.Writes > weightHops+capHops+1 {
		t.Errorf("%d writes of the route for %d hops: more than one per hop", c.Writes, weightHops+capHops)
	}
	if c.Conflicts != 0 {
		t.Errorf("%d conflicts", c.Conflicts)
	}
	if st, w, ok := stateOn(t, env.Client, ref); !ok || st.Phase != strategy.PhaseSucceeded || w != 0 {
		t.Errorf("final route: weight %d for the canary side, state %s (present %v)", w, st.Phase, ok)
	}
}

// TestHopStoreRefusals: the Router's AnnotationStore is built only for one
// of its routes; a store built otherwise writes no weights; and a route
// whose rule another owner claims takes neither the weights nor the state.
func TestHopStoreRefusals(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := router.AnnotationStore(gateway.RouteRef{Namespace: ns, Name: "other"}); !errors.Is(err, gateway.ErrInvalid) {
		t.Errorf("a store on another route: %v, want ErrInvalid", err)
	}
	plain := gateway.NewAnnotationStore(env.Client, ref)
	if plain.Moves(router) {
		t.Error("a store built by NewAnnotationStore reports moving the Router")
	}
	ctx := context.Background()
	st := strategy.NewState("v1", "v2")
	if err := plain.SaveWeights(ctx, rollout.Weights{A: 90, B: 10}, st); !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Errorf("SaveWeights of a plain store: %v, want a permanent ErrInvalid", err)
	}
	store, err := router.AnnotationStore(ref)
	if err != nil {
		t.Fatal(err)
	}
	other := rollout.Owner{Kind: "Release", Namespace: ns, Name: "other", UID: "u-other"}
	if err := router.Claim(ctx, other, rollout.Owner{}); err != nil {
		t.Fatal(err)
	}
	me := rollout.Owner{Kind: "Release", Namespace: ns, Name: "me", UID: "u-me"}
	err = store.SaveWeights(rollout.WithOwner(ctx, me), rollout.Weights{A: 90, B: 10}, st)
	var claimed *rollout.ClaimedError
	if !errors.As(err, &claimed) || claimed.Owner != other {
		t.Fatalf("SaveWeights on a route another owner claims: %v, want a *ClaimedError naming it", err)
	}
	if _, _, ok := stateOn(t, env.Client, ref); ok {
		t.Error("a refused SaveWeights wrote the state")
	}
	if w, err := router.Weights(ctx); err != nil || w.Weights != (rollout.Weights{A: 100, B: 0}) {
		t.Errorf("a refused SaveWeights wrote the weights: %+v %v", w.Weights, err)
	}
	// Its owner writes both, in one update.
	before := router.Counts().Writes
	if err := store.SaveWeights(rollout.WithOwner(ctx, other), rollout.Weights{A: 90, B: 10}, st); err != nil {
		t.Fatal(err)
	}
	if got := router.Counts().Writes - before; got != 1 {
		t.Errorf("%d writes for the weights and the state, want 1", got)
	}
	if saved, w, ok := stateOn(t, env.Client, ref); !ok || w != 10 || saved.CanaryRevision != "v2" {
		t.Errorf("after SaveWeights: weight %d, state %+v (present %v)", w, saved.CanaryRevision, ok)
	}
}
