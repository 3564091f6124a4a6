package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestStandaloneResumesFromTheRoute: Run keeps the state in an annotation on
// the route; a new process with a new Runner resumes from it.
func TestStandaloneResumesFromTheRoute(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	store := gateway.NewAnnotationStore(env.Client, ref)
	if _, err := store.Load(context.Background()); !errors.Is(err, rollout.ErrNotFound) {
		t.Fatalf("empty store: %v", err)
	}
	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{strategy.SetWeight(40), strategy.PauseUntilResumed()}}
	runner := func() *rollout.Runner {
		router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
		if err != nil {
			t.Fatal(err)
		}
		return &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock, Store: store,
			Observer: rollout.ObserverFunc(func(context.Context, rollout.Event) { playController(t, env.Client, ref) })}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runner().Run(ctx, strategy.NewState("v1", "v2"), nil)
		done <- err
	}()
	advanceUntil(t, clock, func() bool {
		s, err := store.Load(context.Background())
		return err == nil && s.Phase == strategy.PhasePaused
	})
	cancel() // the process dies while paused
	<-done

	saved, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if saved.Desired.Weight != 40 {
		t.Fatalf("saved weight %d", saved.Desired.Weight)
	}
	cmds := make(chan rollout.Command, 1)
	cmds <- strategy.State.Resume
	result := make(chan strategy.State, 1)
	go func() {
		s, err := runner().Run(context.Background(), strategy.NewState("ignored", "ignored"), cmds)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		result <- s
	}()
	var end strategy.State
	advanceUntil(t, clock, func() bool {
		select {
		case end = <-result:
			return true
		default:
			return false
		}
	})
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" {
		t.Fatalf("ended %s stable %s", end.Phase, end.StableRevision)
	}
	final, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(end.Phase, final.Phase); diff != "" {
		t.Fatalf("stored phase (-returned +stored):\n%s", diff)
	}
}

func advanceUntil(t *testing.T, clock *fake.Clock, cond func() bool) {
	t.Helper()
	if !clock.AdvanceUntil(cond, 60*time.Second) {
		t.Fatal("condition not met in time")
	}
}

// TestBuildersAndAdopt: the builders make objects the API server accepts;
// CreateOrAdopt creates once, then adopts without writing.
func TestBuildersAndAdopt(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	gw, err := gateway.BuildGateway(ns, "gw", "example",
		gateway.Listener{Name: "http", Port: 80, Hostname: "*.shop.example"},
		gateway.Listener{Name: "https", Protocol: gwv1.HTTPSProtocolType, Port: 443, Hostname: "shop.example", TLSSecrets: []string{"shop-tls"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if adopted, err := gateway.CreateOrAdopt(ctx, env.Client, gw); err != nil || adopted {
		t.Fatalf("create gateway: adopted %v err %v", adopted, err)
	}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw", SectionName: "https",
		Hostnames: []string{"shop.example"}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	if adopted, err := gateway.CreateOrAdopt(ctx, env.Client, rt); err != nil || adopted {
		t.Fatalf("create route: adopted %v err %v", adopted, err)
	}
	// The user changes the route; adopting it again must keep their change.
	rt.Spec.Hostnames = append(rt.Spec.Hostnames, "www.shop.example")
	rt.Annotations = map[string]string{"mine": "yes"}
	if err := env.Client.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	userVersion := rt.ResourceVersion
	again, _ := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw", A: stable, B: canary})
	adopted, err := gateway.CreateOrAdopt(ctx, env.Client, again)
	if err != nil || !adopted {
		t.Fatalf("adopt: adopted %v err %v", adopted, err)
	}
	var got gwv1.HTTPRoute
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != userVersion || len(got.Spec.Hostnames) != 2 || got.Annotations["mine"] != "yes" {
		t.Fatalf("adopting overwrote the user's route: %+v", got.ObjectMeta)
	}
	if again.ResourceVersion != userVersion {
		t.Fatalf("CreateOrAdopt did not read the existing route into its argument")
	}
	if _, err := gateway.BuildGateway(ns, "bad", "example", gateway.Listener{Name: "https", Protocol: gwv1.HTTPSProtocolType, Port: 443}); !errors.Is(err, gateway.ErrInvalid) {
		t.Fatalf("HTTPS without certificates: %v", err)
	}
}
