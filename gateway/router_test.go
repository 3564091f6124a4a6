package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

var (
	stable = gateway.Backend{Name: "web", Port: 80}
	canary = gateway.Backend{Name: "web-canary", Port: 80}
)

func newRoute(t *testing.T, c client.Client, ns, name string) *gwv1.HTTPRoute {
	t.Helper()
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: name, Gateway: "gw", A: stable, B: canary, Hostnames: []string{"shop.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	return rt
}

// playController acts as the gateway controller: it accepts the route's
// current generation for every parent.
func playController(t testing.TB, c client.Client, ref gateway.RouteRef) {
	t.Helper()
	kind := ref.Kind
	if kind == "" {
		kind = gateway.KindHTTPRoute
	}
	gatewaytest.Accept(t, c, kind, ref.Namespace, ref.Name)
}

// upgrade drives a rollout with the Runner, the gateway Router and fake
// capacity, playing the gateway controller after every reconcile. It
// returns the sequence of weights seen in the API server and the number of
// reconciles.
func upgrade(t *testing.T, admin client.Client, router *gateway.Router, refs []gateway.RouteRef, strat strategy.Strategy, s strategy.State) (strategy.State, []rollout.Weights, int, time.Duration) {
	t.Helper()
	ctx := context.Background()
	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	r := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock}
	var seen []rollout.Weights
	n := 0
	for ; n < 500 && !s.Phase.Terminal(); n++ {
		next, requeue, err := r.Reconcile(ctx, s)
		if err != nil {
			t.Logf("reconcile %d: %v", n, err)
		}
		s = next
		for _, ref := range refs {
			playController(t, admin, ref)
		}
		var rt gwv1.HTTPRoute
		if err := admin.Get(ctx, types.NamespacedName{Namespace: refs[0].Namespace, Name: refs[0].Name}, &rt); err == nil && refs[0].Kind != gateway.KindGRPCRoute {
			w := weightsIn(&rt)
			if len(seen) == 0 || seen[len(seen)-1] != w {
				seen = append(seen, w)
			}
		}
		if requeue <= 0 {
			requeue = time.Second
		}
		clock.Advance(requeue)
	}
	return s, seen, n, clock.Now().Sub(t0)
}

func weightsIn(rt *gwv1.HTTPRoute) rollout.Weights {
	var w rollout.Weights
	for _, ref := range rt.Spec.Rules[0].BackendRefs {
		v := int32(1)
		if ref.Weight != nil {
			v = *ref.Weight
		}
		switch string(ref.Name) {
		case stable.Name:
			w.A = v
		case canary.Name:
			w.B = v
		}
	}
	return w
}

// TestIncrementalUpgrade: a full upgrade on the real API server; the weights
// stored in etcd follow the Plan, and every write is one planned hop.
func TestIncrementalUpgrade(t *testing.T) {
	env := kubetest.Get(t)
	for _, api := range []string{"controller-runtime", "clientset"} {
		t.Run(api, func(t *testing.T) {
			ns := env.Namespace(t)
			newRoute(t, env.Client, ns, "web")
			ref := gateway.RouteRef{Namespace: ns, Name: "web"}
			cfg := gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary}
			var router *gateway.Router
			var err error
			if api == "clientset" {
				router, err = gateway.NewRouterForClientset(env.Gateway, cfg)
			} else {
				router, err = gateway.NewRouter(env.Client, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
			plan, err := strategy.Plan(strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			end, seen, reconciles, took := upgrade(t, env.Client, router, []gateway.RouteRef{ref}, strat, strategy.NewState("v1", "v2"))
			if end.Phase != strategy.PhaseSucceeded {
				t.Fatalf("ended %s: %s", end.Phase, end.Message)
			}
			want := []rollout.Weights{{A: 100, B: 0}}
			for _, e := range plan.Entries {
				var v int32
				if _, err := fmt.Sscanf(e.What, "weight %d", &v); err == nil {
					want = append(want, rollout.Weights{A: 100 - v, B: v})
				}
			}
			if diff := cmp.Diff(want, seen); diff != "" {
				t.Errorf("weights in etcd vs the plan (-plan +etcd):\n%s", diff)
			}
			c := router.Counts()
			if c.Writes != len(want)-1 {
				t.Errorf("%d route writes, want one per weight hop: %d", c.Writes, len(want)-1)
			}
			fixed := int(took / (2 * time.Second))
			t.Logf("%s: %d reconciles over %s: %d route writes (= %d weight hops), %d route reads (%.1f per reconcile) vs %d for a fixed 2s poll",
				api, reconciles, took, c.Writes, len(want)-1, c.Reads, float64(c.Reads)/float64(reconciles), fixed)
		})
	}
}

// TestUserFieldsSurvive: rules, filters, matches, a third backend, labels
// and annotations come out of a full upgrade intact; only the two weights
// differ.
func TestUserFieldsSurvive(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	rt := newRoute(t, env.Client, ns, "web")
	ctx := context.Background()
	rt.Annotations = map[string]string{"team": "shop", "example.com/owner": "someone"}
	rt.Labels["tier"] = "frontend"
	rt.Spec.Rules[0].BackendRefs = append(rt.Spec.Rules[0].BackendRefs, gwv1.HTTPBackendRef{
		BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-mirror", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(0))},
	})
	rt.Spec.Rules[0].Filters = []gwv1.HTTPRouteFilter{{
		Type:                  gwv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Add: []gwv1.HTTPHeader{{Name: "X-Shop", Value: "1"}}},
	}}
	prefix := "/admin"
	rt.Spec.Rules = append(rt.Spec.Rules, gwv1.HTTPRouteRule{
		Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Value: &prefix}}},
		BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr(gwv1.PortNumber(80))}}}},
	})
	if err := env.Client.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	before := rt.DeepCopy()
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	end, _, _, _ := upgrade(t, env.Client, router, []gateway.RouteRef{ref}, strategy.BlueGreen{}, strategy.NewState("v1", "v2"))
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s", end.Phase)
	}
	var after gwv1.HTTPRoute
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &after); err != nil {
		t.Fatal(err)
	}
	// Only the two weights may differ.
	before.Spec.Rules[0].BackendRefs[0].Weight = ptr(int32(0))
	before.Spec.Rules[0].BackendRefs[1].Weight = ptr(int32(100))
	ignore := cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "Generation", "ManagedFields")
	if diff := cmp.Diff(before.ObjectMeta, after.ObjectMeta, ignore); diff != "" {
		t.Errorf("metadata changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before.Spec, after.Spec); diff != "" {
		t.Errorf("spec changed beyond the two weights (-before +after):\n%s", diff)
	}
}

// TestConcurrentWriter: another writer keeps editing the same route during
// the upgrade; neither side loses an update, and conflicts are retried.
func TestConcurrentWriter(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary, MaxConflictRetries: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var edits, writerConflicts atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the other writer: one annotation per edit, never weights
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 2000; i++ {
			for {
				var rt gwv1.HTTPRoute
				if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &rt); err != nil {
					return
				}
				if rt.Annotations == nil {
					rt.Annotations = map[string]string{}
				}
				rt.Annotations[fmt.Sprintf("edit-%d", i)] = "x"
				err := env.Client.Update(ctx, &rt)
				if err == nil {
					edits.Add(1)
					break
				}
				if !apierrors.IsConflict(err) {
					return
				}
				writerConflicts.Add(1)
			}
		}
	}()
	strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 20}
	end, _, _, _ := upgrade(t, env.Client, router, []gateway.RouteRef{ref}, strat, strategy.NewState("v1", "v2"))
	cancel()
	wg.Wait()
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s", end.Phase)
	}
	var rt gwv1.HTTPRoute
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < edits.Load(); i++ {
		if _, ok := rt.Annotations[fmt.Sprintf("edit-%d", i)]; !ok {
			t.Fatalf("the other writer's edit %d was lost", i)
		}
	}
	if w := weightsIn(&rt); w != (rollout.Weights{A: 0, B: 100}) {
		t.Fatalf("weights %+v", w)
	}
	c := router.Counts()
	t.Logf("other writer: %d edits kept, %d conflicts; router: %d writes, %d conflicts retried", edits.Load(), writerConflicts.Load(), c.Writes, c.Conflicts)
	if edits.Load() == 0 {
		t.Fatal("the other writer made no edit")
	}
}

// TestLeastPrivilege: the Router works as a ServiceAccount allowed only get,
// update and patch on routes.
func TestLeastPrivilege(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	newRoute(t, env.Client, ns, "web")
	sa := env.ServiceAccount(t, ns, "upshift-router")
	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{
		APIGroups: []string{gwv1.GroupName},
		Resources: []string{"httproutes", "grpcroutes"},
		Verbs:     []string{"get", "update", "patch"},
	})
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, err := gateway.NewRouter(sa.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	store := gateway.NewAnnotationStore(sa.Client, ref)
	end, _, _, _ := upgrade(t, env.Client, router, []gateway.RouteRef{ref}, strategy.BlueGreen{}, strategy.NewState("v1", "v2"))
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	if err := store.Save(context.Background(), end); err != nil {
		t.Fatalf("store as the ServiceAccount: %v", err)
	}
	// And nothing more: listing routes is not allowed.
	var list gwv1.HTTPRouteList
	if err := sa.Client.List(context.Background(), &list, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Fatalf("list as the ServiceAccount: %v, want Forbidden", err)
	}
}

// TestRouteGroup: an HTTPRoute and a GRPCRoute move together. A write that
// fails on the second leaves the group not accepted, and the next reconcile
// converges.
func TestRouteGroup(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	newRoute(t, env.Client, ns, "web")
	grpc := &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-grpc"},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules: []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{
				{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(100))}},
				{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-canary", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(0))}},
			}}},
		},
	}
	if err := env.Client.Create(ctx, grpc); err != nil {
		t.Fatal(err)
	}
	refs := []gateway.RouteRef{{Namespace: ns, Name: "web"}, {Kind: gateway.KindGRPCRoute, Namespace: ns, Name: "web-grpc"}}
	failures := atomic.Int64{}
	failures.Store(1)
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	flaky := interceptor.NewClient(ww, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*gwv1.GRPCRoute); ok && failures.Add(-1) >= 0 {
				return apierrors.NewServiceUnavailable("injected")
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	router, err := gateway.NewRouter(flaky, gateway.Config{Routes: refs, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err == nil {
		t.Fatal("want the injected failure")
	}
	for _, r := range refs {
		playController(t, env.Client, r)
	}
	st, err := router.Weights(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted || st.Weights != (rollout.Weights{A: -1, B: -1}) {
		t.Fatalf("half-moved group reported %+v, want not accepted and no common weights", st)
	}
	end, _, _, _ := upgrade(t, env.Client, router, refs, strategy.BlueGreen{}, strategy.NewState("v1", "v2"))
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	var g gwv1.GRPCRoute
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(grpc), &g); err != nil {
		t.Fatal(err)
	}
	if w := *g.Spec.Rules[0].BackendRefs[1].Weight; w != 100 {
		t.Fatalf("GRPCRoute canary weight %d", w)
	}
}

// TestInvalidInput: typed errors, no panic, nothing written.
func TestInvalidInput(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rt := newRoute(t, env.Client, ns, "web")
	other := newRoute(t, env.Client, ns, "other")
	other.Spec.Rules[0].BackendRefs[1].Kind = ptr(gwv1.Kind("ServiceImport"))
	other.Spec.Rules[0].BackendRefs[1].Group = ptr(gwv1.Group("multicluster.x-k8s.io"))
	if err := env.Client.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		cfg   gateway.Config
		w     rollout.Weights
		check func(error) bool
	}{
		{"no canary backend", gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}}, A: stable, B: gateway.Backend{Name: "web-canary2", Port: 80}},
			rollout.Weights{A: 50, B: 50}, func(err error) bool { var e *gateway.BackendNotFoundError; return errors.As(err, &e) }},
		{"a backendRef of another kind", gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}, {Namespace: ns, Name: "other"}}, A: stable, B: canary},
			rollout.Weights{A: 50, B: 50}, func(err error) bool {
				var e *gateway.BackendNotFoundError
				return errors.As(err, &e) && e.Near != ""
			}},
		{"route not found", gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "nope"}}, A: stable, B: canary},
			rollout.Weights{A: 50, B: 50}, func(err error) bool { return errors.Is(err, rollout.ErrNotFound) }},
		{"weights out of range", gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}}, A: stable, B: canary},
			rollout.Weights{A: -5, B: 105}, func(err error) bool { return errors.Is(err, gateway.ErrInvalid) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before gwv1.HTTPRoute
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &before); err != nil {
				t.Fatal(err)
			}
			router, err := gateway.NewRouter(env.Client, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = router.SetWeights(ctx, tc.w)
			if err == nil || !tc.check(err) {
				t.Fatalf("err %v (%T)", err, err)
			}
			if tc.name != "route not found" && !rollout.IsPermanent(err) {
				t.Errorf("err %v should be permanent", err)
			}
			var after gwv1.HTTPRoute
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &after); err != nil {
				t.Fatal(err)
			}
			if before.ResourceVersion != after.ResourceVersion {
				t.Fatalf("the route was written")
			}
		})
	}
	// The API server's own validation: a weight above Gateway API's limit.
	rt.Spec.Rules[0].BackendRefs[0].Weight = ptr(int32(1000001))
	if err := env.Client.Update(ctx, rt); !apierrors.IsInvalid(err) {
		t.Fatalf("the API server accepted weight 1000001: %v", err)
	}
	if _, err := gateway.NewRouter(env.Client, gateway.Config{}); !errors.Is(err, gateway.ErrInvalid) {
		t.Fatalf("empty config: %v", err)
	}
}

// TestRouterExtraBackend: a managed rule that also sends traffic to a third
// backend (weight omitted, which the API server stores as 1), or names a
// side twice, is refused by SetWeights and by Weights with a typed error
// naming the rule and the backendRef, and nothing is written. A third
// backend at weight 0 is fine.
func TestRouterExtraBackend(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	port := ptr(gwv1.PortNumber(80))
	cases := []struct {
		name  string
		extra gwv1.BackendRef
		want  *gateway.ExtraBackendError // nil: accepted
	}{
		{"third backend, weight omitted",
			gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-mirror", Port: port}},
			&gateway.ExtraBackendError{Rule: 0, Backend: "Service " + ns + "/web-mirror:80", Weight: ptr(int32(1))}},
		{"third backend, weight 50",
			gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-mirror", Port: port}, Weight: ptr(int32(50))},
			&gateway.ExtraBackendError{Rule: 0, Backend: "Service " + ns + "/web-mirror:80", Weight: ptr(int32(50))}},
		{"stable named twice",
			gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: port}, Weight: ptr(int32(100))},
			&gateway.ExtraBackendError{Rule: 0, Backend: "Service " + ns + "/web:80", Duplicate: true}},
		{"third backend, weight 0",
			gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-mirror", Port: port}, Weight: ptr(int32(0))},
			nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("web-%d", i)
			rt := newRoute(t, env.Client, ns, name)
			rt.Spec.Rules[0].BackendRefs = append(rt.Spec.Rules[0].BackendRefs, gwv1.HTTPBackendRef{BackendRef: tc.extra})
			if err := env.Client.Update(ctx, rt); err != nil {
				t.Fatal(err)
			}
			ref := gateway.RouteRef{Namespace: ns, Name: name}
			playController(t, env.Client, ref)
			var before gwv1.HTTPRoute
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &before); err != nil {
				t.Fatal(err)
			}
			router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want != nil {
				want.Route = ref
			}
			check := func(op string, err error) {
				t.Helper()
				if want == nil {
					if err != nil {
						t.Fatalf("%s: %v", op, err)
					}
					return
				}
				var got *gateway.ExtraBackendError
				if !errors.As(err, &got) {
					t.Fatalf("%s: err %v (%T), want *gateway.ExtraBackendError", op, err, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: error (-want +got):\n%s", op, diff)
				}
				if !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
					t.Errorf("%s: %v should match ErrInvalid and be permanent", op, err)
				}
				t.Logf("%s: %v", op, err)
			}
			st, err := router.Weights(ctx)
			check("Weights", err)
			if want != nil && st != (rollout.RouteStatus{}) {
				t.Errorf("Weights reported %+v along with the error", st)
			}
			check("SetWeights", router.SetWeights(ctx, rollout.Weights{A: 70, B: 30}))
			var after gwv1.HTTPRoute
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), &after); err != nil {
				t.Fatal(err)
			}
			if want == nil {
				if w := weightsIn(&after); w != (rollout.Weights{A: 70, B: 30}) {
					t.Fatalf("weights %+v after SetWeights 70/30", w)
				}
				if mirror := after.Spec.Rules[0].BackendRefs[2].Weight; mirror == nil || *mirror != 0 {
					t.Fatalf("the weight-0 backend's weight changed to %v", mirror)
				}
				return
			}
			if before.ResourceVersion != after.ResourceVersion {
				t.Fatalf("the route was written: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
			}
			if c := router.Counts(); c.Writes != 0 {
				t.Fatalf("%d writes", c.Writes)
			}
		})
	}
	// In a group, a route with a third backend keeps the others unwritten
	// too: web-3 (third backend at weight 0) is checked fine, web-0 is not.
	t.Run("group", func(t *testing.T) {
		good, bad := gateway.RouteRef{Namespace: ns, Name: "web-3"}, gateway.RouteRef{Namespace: ns, Name: "web-0"}
		var before gwv1.HTTPRoute
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: good.Name}, &before); err != nil {
			t.Fatal(err)
		}
		router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{good, bad}, A: stable, B: canary})
		if err != nil {
			t.Fatal(err)
		}
		err = router.SetWeights(ctx, rollout.Weights{A: 50, B: 50})
		var e *gateway.ExtraBackendError
		if !errors.As(err, &e) || e.Route != bad || !rollout.IsPermanent(err) {
			t.Fatalf("err %v, want a permanent *ExtraBackendError for %s", err, bad)
		}
		var after gwv1.HTTPRoute
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: good.Name}, &after); err != nil {
			t.Fatal(err)
		}
		if before.ResourceVersion != after.ResourceVersion {
			t.Fatalf("%s was written although %s was refused", good, bad)
		}
	})
}

// TestExtraBackendAbortsTheRollout: a rollout over a route whose managed
// rule has a third backend aborts at its first reconcile without writing;
// its walk back waits, writing nothing, until the rule is fixed, then ends
// Aborted at 100/0.
func TestExtraBackendAbortsTheRollout(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rt := newRoute(t, env.Client, ns, "web")
	rt.Spec.Rules[0].BackendRefs = append(rt.Spec.Rules[0].BackendRefs, gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: "web-mirror", Port: ptr(gwv1.PortNumber(80))}}})
	if err := env.Client.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	playController(t, env.Client, ref)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	rv := rt.ResourceVersion
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	clock := fake.NewClock(t0)
	r := &rollout.Runner{Strategy: strategy.Incremental{StepPercent: 30, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 100}, Router: router,
		A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0}), Clock: clock}
	s, _, err := r.Reconcile(ctx, strategy.NewState("v1", "v2"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != strategy.PhaseAborting {
		t.Fatalf("first reconcile: phase %s (%s), want %s", s.Phase, s.Message, strategy.PhaseAborting)
	}
	if s.Aborted == nil || !strings.Contains(s.Aborted.Reason, "web-mirror") {
		t.Fatalf("abort reason %+v does not name the third backend", s.Aborted)
	}
	t.Logf("aborting: %s", s.Aborted.Reason)
	for i := 0; i < 5; i++ {
		clock.Advance(time.Minute)
		var err error
		if s, _, err = r.Reconcile(ctx, s); err == nil || s.Phase != strategy.PhaseAborting {
			t.Fatalf("reconcile %d with the third backend still there: phase %s, err %v", i, s.Phase, err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	if rt.ResourceVersion != rv || router.Counts().Writes != 0 {
		t.Fatalf("the route was written (resourceVersion %s -> %s, %d writes)", rv, rt.ResourceVersion, router.Counts().Writes)
	}
	// The operator takes the third backend out of the split.
	rt.Spec.Rules[0].BackendRefs[2].Weight = ptr(int32(0))
	if err := env.Client.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 50 && !s.Phase.Terminal(); n++ {
		playController(t, env.Client, ref)
		next, requeue, err := r.Reconcile(ctx, s)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		s = next
		if requeue <= 0 {
			requeue = time.Second
		}
		clock.Advance(requeue)
	}
	if s.Phase != strategy.PhaseAborted {
		t.Fatalf("after the fix: phase %s (%s), want %s", s.Phase, s.Message, strategy.PhaseAborted)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	if w := weightsIn(rt); w != (rollout.Weights{A: 100, B: 0}) {
		t.Fatalf("weights %+v after the abort", w)
	}
}

// TestSettleDelay: weights count as accepted only SettleDelay after the
// status first confirmed them.
func TestSettleDelay(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	clock := fake.NewClock(t0)
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary,
		SettleDelay: 700 * time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
		t.Fatal(err)
	}
	if st, _ := router.Weights(ctx); st.Accepted {
		t.Fatal("accepted before any status")
	}
	playController(t, env.Client, ref)
	if st, _ := router.Weights(ctx); st.Accepted {
		t.Fatal("accepted at the moment the status confirmed, before the settle delay")
	}
	clock.Advance(699 * time.Millisecond)
	if st, _ := router.Weights(ctx); st.Accepted {
		t.Fatal("accepted before the settle delay ended")
	}
	clock.Advance(time.Millisecond)
	if st, _ := router.Weights(ctx); !st.Accepted || st.Weights != (rollout.Weights{A: 70, B: 30}) {
		t.Fatalf("after the settle delay: %+v", st)
	}
}

// TestNotAccepted: a parent that refuses the route is reported as a typed
// rejection, and the weights do not count as applied.
func TestNotAccepted(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rt := newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	router, _ := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	playController(t, env.Client, ref)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	rt.Status.Parents[0].Conditions[1].Status = metav1.ConditionFalse
	rt.Status.Parents[0].Conditions[1].Reason = "BackendNotFound"
	rt.Status.Parents[0].Conditions[1].Message = "service web-canary not found"
	if err := env.Client.Status().Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	st, err := router.Weights(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var na *gateway.NotAcceptedError
	if st.Accepted || !errors.As(st.Rejected, &na) || na.Reason != "BackendNotFound" || na.Condition != "ResolvedRefs" {
		t.Fatalf("status %+v", st)
	}
}

func ptr[T any](v T) *T { return &v }
