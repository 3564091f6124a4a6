package gateway_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func waitCached(t *testing.T, r *gateway.Router) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gateway.Cached(r) {
		if time.Now().After(deadline) {
			t.Fatal("the routes were not read from the watch within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadsFromTheWatchOnKube: with either client, while Notify
// subscriptions are live the Router makes no GET: two subscriptions share
// one watch of the route; right after its own write Weights reports the
// weights written; another writer's weights are reported once the watch
// delivered them; a write racing another writer lands; once the
// subscriptions end, reads are GETs again.
func TestReadsFromTheWatchOnKube(t *testing.T) {
	env := kubetest.Get(t)
	for _, flavour := range []string{"controller-runtime", "clientset"} {
		t.Run(flavour, func(t *testing.T) {
			_, ref, router := flavourRouter(t, env, flavour)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := kubetest.NewWaker()
			if err := router.Notify(ctx, w.Wake); err != nil {
				t.Fatal(err)
			}
			second, cancelSecond := context.WithCancel(ctx)
			if err := router.Notify(second, func() {}); err != nil {
				t.Fatal(err)
			}
			waitWatching(t, router, 1)
			waitCached(t, router)
			before := router.Counts()
			for i, weights := range []rollout.Weights{{A: 90, B: 10}, {A: 50, B: 50}, {A: 0, B: 100}} {
				if err := router.SetWeights(ctx, weights); err != nil {
					t.Fatal(err)
				}
				// Read back at once, before the watch may have
				// delivered the write.
				if st, err := router.Weights(ctx); err != nil || st.Weights != weights || st.Accepted {
					t.Fatalf("hop %d, right after the write: %+v, %v", i, st, err)
				}
				w.After(t, "status", func() { playController(t, env.Client, ref) })
				if st, err := router.Weights(ctx); err != nil || !st.Accepted || st.Weights != weights {
					t.Fatalf("hop %d, accepted: %+v, %v", i, st, err)
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
			if st, err := router.Weights(ctx); err != nil || st.Weights != (rollout.Weights{A: 70, B: 30}) {
				t.Fatalf("after another writer's weights: %+v, %v", st, err)
			}
			c := router.Counts()
			if c.Reads != before.Reads || c.CachedReads < before.CachedReads+10 {
				t.Fatalf("reads with live subscriptions: %+v, then %+v: want no GET", before, c)
			}
			if c.Watches != 1 {
				t.Fatalf("%d watch requests for two subscriptions, want 1", c.Watches)
			}

			// Another writer's annotation and the Router's weights, one
			// right after the other: whether the Router's read was stale
			// (a conflict, then a GET) or not, both land.
			var rt gwv1.HTTPRoute
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
				t.Fatal(err)
			}
			rt.Annotations = map[string]string{"note": "theirs"}
			if err := env.Client.Update(ctx, &rt); err != nil {
				t.Fatal(err)
			}
			if err := router.SetWeights(ctx, rollout.Weights{A: 40, B: 60}); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
				t.Fatal(err)
			}
			if rt.Annotations["note"] != "theirs" || *rt.Spec.Rules[0].BackendRefs[1].Weight != 60 {
				t.Fatalf("after a racing write: annotations %v, backends %v", rt.Annotations, rt.Spec.Rules[0].BackendRefs)
			}
			c = router.Counts()
			if c.Reads != before.Reads+c.Conflicts {
				t.Fatalf("%+v: want one GET per conflict", c)
			}
			t.Logf("a write right after another writer's: %d conflicts", c.Conflicts)

			cancelSecond()
			if _, err := router.Weights(ctx); err != nil {
				t.Fatal(err)
			}
			if got := router.Counts().Reads; got != c.Reads {
				t.Fatalf("%d GETs with one subscription left, want %d", got, c.Reads)
			}
			cancel()
			waitWatching(t, router, 0)
			if _, err := router.Weights(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := router.Counts().Reads; got != c.Reads+1 {
				t.Fatalf("%d GETs after every subscription ended, want %d", got, c.Reads+1)
			}
		})
	}
}

// TestRunReadsFromTheWatch: an Incremental rollout driven by Run, with
// notifications, reads the route from the watch: a handful of GETs (the
// first read before the watch delivered the route, and one per write that
// lost a race), not one per reconcile.
func TestRunReadsFromTheWatch(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouterForClientset(env.Gateway, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	clock := fake.NewClock(t0)
	reconciles := 0
	runner := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 100}, Router: router,
		A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0}), Clock: clock,
		Store: gateway.NewAnnotationStoreForClientset(env.Gateway, ref),
		Observer: rollout.ObserverFunc(func(context.Context, rollout.Event) {
			reconciles++
			playController(t, env.Client, ref)
		}),
	}
	done := make(chan error, 1)
	var end strategy.State
	go func() {
		var err error
		end, err = runner.Run(context.Background(), strategy.NewState("v1", "v2"), nil)
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
		t.Fatalf("Run: %s: %v", end.Phase, runErr)
	}
	c := router.Counts()
	t.Logf("%d reconciles: %+v", reconciles, c)
	if c.Reads > 2+c.Conflicts || c.CachedReads < reconciles {
		t.Fatalf("%d reconciles: %+v: want at most 2 GETs and one per conflict, and a read from the watch per reconcile", reconciles, c)
	}
	if c.Watches != 1 {
		t.Fatalf("%d watch requests, want 1", c.Watches)
	}
}
