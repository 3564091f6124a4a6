package gateway_test

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func withWatch(t *testing.T, env *kubetest.Env, c *kubetest.Clients) client.WithWatch {
	t.Helper()
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// waitWatching waits until r runs want watch loops.
func waitWatching(t *testing.T, r *gateway.Router, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for gateway.Watching(r) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d watch loops running, want %d", gateway.Watching(r), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flavourRouter creates the route "web" in a new namespace and a Router
// of it through the controller-runtime client (one that can watch) or the
// clientset, as flavour says.
func flavourRouter(t *testing.T, env *kubetest.Env, flavour string) (string, gateway.RouteRef, *gateway.Router) {
	t.Helper()
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	cfg := gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary}
	var router *gateway.Router
	var err error
	if flavour == "clientset" {
		router, err = gateway.NewRouterForClientset(env.Gateway, cfg)
	} else {
		router, err = gateway.NewRouter(withWatch(t, env, &env.Clients), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns, ref, router
}

// TestNotifyWakesOnWeightsAndStatus: with either client, the status the
// data plane writes when it accepts the weights wakes the subscriber, and
// so do weights written by someone else; the Router's own weight writes
// and an annotation (a saved state) wake nobody; cancelling ctx stops
// every watch.
func TestNotifyWakesOnWeightsAndStatus(t *testing.T) {
	env := kubetest.Get(t)
	for _, flavour := range []string{"controller-runtime", "clientset"} {
		t.Run(flavour, func(t *testing.T) {
			ns, ref, router := flavourRouter(t, env, flavour)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := kubetest.NewWaker()
			if err := router.Notify(ctx, w.Wake); err != nil {
				t.Fatal(err)
			}
			waitWatching(t, router, 1)
			w.Drain() // the first event of the watch
			for i, weights := range []rollout.Weights{{A: 90, B: 10}, {A: 50, B: 50}} {
				w.Quiet(t, "the Router's own weights", func() {
					if err := router.SetWeights(ctx, weights); err != nil {
						t.Fatal(err)
					}
				})
				w.After(t, "status", func() { playController(t, env.Client, ref) })
				st, err := router.Weights(ctx)
				if err != nil || !st.Accepted || st.Weights != weights {
					t.Fatalf("hop %d: %+v, %v", i, st, err)
				}
			}
			other, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
			if err != nil {
				t.Fatal(err)
			}
			w.After(t, "another writer's weights", func() {
				if err := other.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
					t.Fatal(err)
				}
			})
			store := gateway.NewAnnotationStoreForClientset(env.Gateway, ref)
			w.Quiet(t, "annotation", func() {
				if err := store.Save(ctx, strategy.NewState("v1", "v2")); err != nil {
					t.Fatal(err)
				}
			})
			// Another route in the namespace wakes nobody.
			w.Drain()
			newRoute(t, env.Client, ns, "other")
			playController(t, env.Client, gateway.RouteRef{Namespace: ns, Name: "other"})
			select {
			case <-w:
				t.Fatal("woken by a route the Router does not manage")
			case <-time.After(300 * time.Millisecond):
			}
			cancel()
			waitWatching(t, router, 0)
			if c := router.Counts(); c.Watches != 1 {
				t.Fatalf("%d watch requests, want 1", c.Watches)
			}
		})
	}
}

// TestNotifyLeastPrivilege: a ServiceAccount allowed get, update and watch
// on the named route only is notified of that route, by both clients; a
// route it may not watch makes Notify fail (the caller polls), and it still
// may neither list nor watch the collection.
func TestNotifyLeastPrivilege(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	newRoute(t, env.Client, ns, "other")
	sa := env.ServiceAccount(t, ns, "upshift-router")
	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{
		APIGroups:     []string{gwv1.GroupName},
		Resources:     []string{"httproutes", "grpcroutes"},
		ResourceNames: []string{"web"},
		Verbs:         []string{"get", "update", "watch"},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	cfg := gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary}
	cr, err := gateway.NewRouter(withWatch(t, env, sa), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := gateway.NewRouterForClientset(sa.Gateway, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := kubetest.NewWaker()
	for _, r := range []*gateway.Router{cr, cs} {
		if err := r.Notify(ctx, w.Wake); err != nil {
			t.Fatalf("Notify as the ServiceAccount: %v", err)
		}
	}
	w.After(t, "weights as the ServiceAccount", func() {
		if err := cr.SetWeights(ctx, rollout.Weights{A: 80, B: 20}); err != nil {
			t.Fatal(err)
		}
	})
	w.After(t, "status", func() { playController(t, env.Client, ref) })

	// A route outside resourceNames: Forbidden, nothing left running.
	other := cfg
	other.Routes = []gateway.RouteRef{ref, {Namespace: ns, Name: "other"}}
	for _, mk := range []func() (*gateway.Router, error){
		func() (*gateway.Router, error) { return gateway.NewRouter(withWatch(t, env, sa), other) },
		func() (*gateway.Router, error) { return gateway.NewRouterForClientset(sa.Gateway, other) },
	} {
		r, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Notify(ctx, w.Wake); !apierrors.IsForbidden(err) {
			t.Fatalf("Notify on a route the Role does not name: %v, want Forbidden", err)
		}
		waitWatching(t, r, 0)
	}
	// The collection stays closed: watch and list without the name.
	if _, err := sa.Gateway.GatewayV1().HTTPRoutes(ns).Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("watching every route: %v, want Forbidden", err)
	}
	if _, err := sa.Gateway.GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing routes: %v, want Forbidden", err)
	}
}

// TestNotifyReestablishes: a watch the server closes is opened again, from
// where it left off, and still wakes; ctx stops it.
func TestNotifyReestablishes(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	newRoute(t, env.Client, ns, "api")
	refs := []gateway.RouteRef{{Namespace: ns, Name: "web"}, {Namespace: ns, Name: "api"}}
	router, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: refs, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	gateway.SetWatchOptions(router, time.Second, 10*time.Millisecond) // the server closes each watch after 1 s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := kubetest.NewWaker()
	if err := router.Notify(ctx, w.Wake); err != nil {
		t.Fatal(err)
	}
	waitWatching(t, router, 2)
	deadline := time.Now().Add(10 * time.Second)
	for router.Counts().Watches < 6 { // each route's watch closed twice
		if time.Now().After(deadline) {
			t.Fatalf("%d watch requests after %v", router.Counts().Watches, 10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	other, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: refs, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	w.After(t, "weights (another writer's) after the watches were re-established", func() {
		if err := other.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
			t.Fatal(err)
		}
	})
	w.After(t, "status of the second route", func() { playController(t, env.Client, refs[1]) })
	cancel()
	waitWatching(t, router, 0)
}

// TestNotifyWithoutWatch: a controller-runtime client that cannot watch
// makes Notify fail, so the caller polls; nothing keeps running.
func TestNotifyWithoutWatch(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	// Embedding only client.Client hides any Watch method the
	// environment's client may have.
	noWatch := struct{ client.Client }{env.Client}
	router, err := gateway.NewRouter(noWatch, gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	err = router.Notify(context.Background(), func() {})
	if err == nil {
		t.Fatal("Notify with a client that cannot watch: no error")
	}
	t.Log(err)
	waitWatching(t, router, 0)
}

// TestNotifySettleDelay: the end of a SettleDelay, which no event marks,
// wakes the subscriber, whether Weights or the watch saw the acceptance
// first.
func TestNotifySettleDelay(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	clock := fake.NewClock(t0)
	router, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary,
		SettleDelay: 5 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := kubetest.NewWaker()
	if err := router.Notify(ctx, w.Wake); err != nil {
		t.Fatal(err)
	}
	playController(t, env.Client, ref)
	if st, err := router.Weights(ctx); err != nil || st.Accepted {
		t.Fatalf("while settling: %+v, %v", st, err)
	}
	w.After(t, "settle delay", func() { clock.Advance(5 * time.Second) })
	if st, err := router.Weights(ctx); err != nil || !st.Accepted {
		t.Fatalf("settled: %+v, %v", st, err)
	}

	// The status the data plane writes for new weights starts the
	// settling when the watch sees it, before anyone reads the route:
	// that event wakes nobody, the end of the settling does.
	w.Quiet(t, "the Router's own weights", func() {
		if err := router.SetWeights(ctx, rollout.Weights{A: 60, B: 40}); err != nil {
			t.Fatal(err)
		}
	})
	w.Quiet(t, "the status of the new generation (settling)", func() { playController(t, env.Client, ref) })
	w.After(t, "the end of the settling", func() { clock.Advance(5 * time.Second) })
	if st, err := router.Weights(ctx); err != nil || !st.Accepted || st.Weights != (rollout.Weights{A: 60, B: 40}) {
		t.Fatalf("settled, with no read while settling: %+v, %v", st, err)
	}
}

// TestRunEndsTheRouteWatch: Run watches the route while it drives a
// rollout and ends that watch before it returns, although the caller's
// ctx lives on: right after each Run (one that finishes a rollout, then
// three that find it finished) no watch loop runs, and each Run made one
// watch request.
func TestRunEndsTheRouteWatch(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	runner := &rollout.Runner{
		Strategy: strategy.BlueGreen{}, Router: router,
		A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0}), Clock: clock,
		Store:    gateway.NewAnnotationStoreForClientset(env.Gateway, ref),
		Observer: rollout.ObserverFunc(func(context.Context, rollout.Event) { playController(t, env.Client, ref) }),
	}
	ctx, cancel := context.WithCancel(context.Background()) // the caller's: live throughout
	defer cancel()
	for i := range 4 {
		done := make(chan error, 1)
		var end strategy.State
		go func() {
			var err error
			end, err = runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
			done <- err
		}()
		var runErr error
		advanceUntil(t, clock, func() bool {
			select {
			case runErr = <-done:
				return true
			default:
				return false
			}
		})
		if runErr != nil || end.Phase != strategy.PhaseSucceeded {
			t.Fatalf("Run %d: %s: %v", i, end.Phase, runErr)
		}
		if n := gateway.Watching(router); n != 0 {
			t.Fatalf("Run %d returned with %d route watches running", i, n)
		}
		if c := router.Counts(); c.Watches != i+1 {
			t.Fatalf("after Run %d: %d watch requests, want %d", i, c.Watches, i+1)
		}
	}
}
