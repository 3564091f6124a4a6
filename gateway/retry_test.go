package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var retryScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := gwv1.Install(s); err != nil {
		panic(err)
	}
	return s
}()

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface{ Fatal(args ...any) }

var traefikRetry = gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "upshift-retry", Attempts: 4, Codes: []int{502, 503}}

func mwFilter(name string) gwv1.HTTPRouteFilter {
	return gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gwv1.LocalObjectReference{Group: "traefik.io", Kind: "Middleware", Name: gwv1.ObjectName(name)}}
}

// retryRouteRules are another team's rule (with its own Middleware filter
// and retry) and the rule the Router moves (with a filter of the user's).
func retryRouteRules() []gwv1.HTTPRouteRule {
	admin, root := "/admin", "/"
	prefix := gwv1.PathMatchPathPrefix
	one, zero, hundred := int32(1), int32(0), int32(100)
	port := gwv1.PortNumber(80)
	attempts := 2
	return []gwv1.HTTPRouteRule{{
		Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &admin}}},
		Filters:     []gwv1.HTTPRouteFilter{mwFilter("admin-auth")},
		BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "admin", Port: &port}, Weight: &one}}},
		Retry:       &gwv1.HTTPRouteRetry{Attempts: &attempts},
	}, {
		Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &root}}},
		Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier,
			RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-Team", Value: "shop"}}}}},
		BackendRefs: []gwv1.HTTPBackendRef{
			{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(stable.Name), Port: &port}, Weight: &hundred}},
			{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(canary.Name), Port: &port}, Weight: &zero}},
		},
	}}
}

// retryWorld is a fake API server (which keeps rules[].retry, as the
// experimental-channel CRDs do) holding shop/web with rules.
// It holds the Middleware of traefikRetry too.
func retryWorld(t fataler, rules []gwv1.HTTPRouteRule) (client.Client, gateway.RouteRef) {
	rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}}, Rules: rules}}
	mw, err := gateway.TraefikRetryMiddleware("shop", traefikRetry)
	if err != nil {
		t.Fatal(err)
	}
	c := fakeclient.NewClientBuilder().WithScheme(retryScheme).WithObjects(rt, mw).Build()
	return c, gateway.RouteRef{Namespace: "shop", Name: "web"}
}

func getRetryRoute(t fataler, c client.Client, ref gateway.RouteRef) *gwv1.HTTPRoute {
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	return &rt
}

func retryRouter(t fataler, c client.Client, ref gateway.RouteRef, r *gateway.Retry) *gateway.Router {
	router, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary, Retry: r})
	if err != nil {
		t.Fatal(err)
	}
	return router
}

func TestRetryValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry gateway.Retry
		field string // "" when valid
	}{
		{"traefik", traefikRetry, ""},
		{"gateway api", gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503}, Backoff: 100 * time.Millisecond}, ""},
		{"no mode", gateway.Retry{Middleware: "m"}, "retry.mode"},
		{"unknown mode", gateway.Retry{Mode: "Envoy"}, "retry.mode"},
		{"traefik without a middleware", gateway.Retry{Mode: gateway.RetryTraefikMiddleware}, "retry.middleware"},
		{"bad middleware name", gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "Retry_1"}, "retry.middleware"},
		{"middleware with gateway api", gateway.Retry{Mode: gateway.RetryGatewayAPI, Middleware: "m"}, "retry.middleware"},
		{"one attempt", gateway.Retry{Mode: gateway.RetryGatewayAPI, Attempts: 1}, "retry.attempts"},
		{"too many attempts", gateway.Retry{Mode: gateway.RetryGatewayAPI, Attempts: 51}, "retry.attempts"},
		{"negative attempts", gateway.Retry{Mode: gateway.RetryGatewayAPI, Attempts: -3}, "retry.attempts"},
		{"a 2xx code", gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503, 200}}, "retry.codes[1]"},
		{"a code twice", gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503, 503}}, "retry.codes[1]"},
		{"negative backoff", gateway.Retry{Mode: gateway.RetryGatewayAPI, Backoff: -time.Second}, "retry.backoff"},
		{"sub-millisecond backoff", gateway.Retry{Mode: gateway.RetryGatewayAPI, Backoff: 1500 * time.Microsecond}, "retry.backoff"},
		{"huge backoff", gateway.Retry{Mode: gateway.RetryGatewayAPI, Backoff: 2 * time.Minute}, "retry.backoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.retry.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("Validate: %v; want ErrInvalid naming %s", err, tc.field)
			}
			// NewRouter refuses it too, naming the same field.
			_, err = gateway.NewRouter(nil, gateway.Config{Routes: []gateway.RouteRef{{Namespace: "shop", Name: "web"}}, A: stable, B: canary, Retry: &tc.retry})
			if !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("NewRouter: %v; want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
	_, err := gateway.NewRouter(nil, gateway.Config{Routes: []gateway.RouteRef{{Kind: gateway.KindGRPCRoute, Namespace: "shop", Name: "web"}}, A: stable, B: canary, Retry: &traefikRetry})
	if !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), "routes[0].kind:") {
		t.Fatalf("NewRouter with a GRPCRoute: %v; want ErrInvalid naming routes[0].kind", err)
	}
}

func TestTraefikRetryMiddleware(t *testing.T) {
	r := gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "upshift-retry", Codes: []int{502, 503}, Backoff: 50 * time.Millisecond, NonIdempotent: true}
	mw, err := gateway.TraefikRetryMiddleware("shop", r)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "traefik.io/v1alpha1",
		"kind":       "Middleware",
		"metadata":   map[string]any{"namespace": "shop", "name": "upshift-retry", "labels": map[string]any{gateway.ManagedByLabel: "upshift"}},
		"spec": map[string]any{"retry": map[string]any{
			"attempts": int64(3), "initialInterval": "50ms", "status": []any{"502", "503"}, "retryNonIdempotentMethod": true,
		}},
	}
	if d := cmp.Diff(want, mw.Object); d != "" {
		t.Errorf("Middleware (-want +got):\n%s", d)
	}
	// The idempotent default leaves retryNonIdempotentMethod out.
	r.NonIdempotent = false
	mw, _ = gateway.TraefikRetryMiddleware("shop", r)
	if _, ok := mw.Object["spec"].(map[string]any)["retry"].(map[string]any)["retryNonIdempotentMethod"]; ok {
		t.Errorf("retryNonIdempotentMethod set without NonIdempotent")
	}
	for _, tc := range []struct {
		ns    string
		r     gateway.Retry
		field string
	}{
		{"shop", gateway.Retry{Mode: gateway.RetryGatewayAPI}, "retry.mode"},
		{"Shop!", traefikRetry, "namespace"},
		{"shop", gateway.Retry{Mode: gateway.RetryTraefikMiddleware}, "retry.middleware"},
	} {
		if _, err := gateway.TraefikRetryMiddleware(tc.ns, tc.r); !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("TraefikRetryMiddleware(%q, %+v): %v; want ErrInvalid naming %s", tc.ns, tc.r, err, tc.field)
		}
	}
}

// TestRouterRetryTraefik: the filter goes on the moved rule only, in the
// weights' update; a Router that has it writes nothing more; it follows
// the weights; dropping the option takes the filter and the record back,
// leaving the route as it was but for the weights.
func TestRouterRetryTraefik(t *testing.T) {
	ctx := context.Background()
	c, ref := retryWorld(t, retryRouteRules())
	before := getRetryRoute(t, c, ref)
	r := retryRouter(t, c, ref, &traefikRetry)
	if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
		t.Fatal(err)
	}
	after := getRetryRoute(t, c, ref)
	if got := r.Counts().Writes; got != 1 {
		t.Errorf("writes %d, want 1", got)
	}
	if d := cmp.Diff(before.Spec.Rules[0], after.Spec.Rules[0]); d != "" {
		t.Errorf("another team's rule changed (-before +after):\n%s", d)
	}
	wantFilters := append(append([]gwv1.HTTPRouteFilter{}, before.Spec.Rules[1].Filters...), mwFilter("upshift-retry"))
	if d := cmp.Diff(wantFilters, after.Spec.Rules[1].Filters); d != "" {
		t.Errorf("moved rule's filters (-want +got):\n%s", d)
	}
	key := gateway.RetryAnnotation("shop", stable, canary)
	if got, want := after.Annotations[key], `{"mode":"TraefikMiddleware","middleware":"upshift-retry"}`; got != want {
		t.Errorf("record %q, want %q", got, want)
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
		t.Fatal(err)
	}
	if got := r.Counts().Writes; got != 1 {
		t.Errorf("a second SetWeights wrote: %d writes", got)
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	if got := getRetryRoute(t, c, ref).Spec.Rules[1].Filters; len(got) != 2 {
		t.Errorf("filters after a hop: %+v", got)
	}
	// Dropped: back as it was, but for the weights.
	if err := retryRouter(t, c, ref, nil).SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	back := getRetryRoute(t, c, ref)
	if _, ok := back.Annotations[key]; ok {
		t.Errorf("record left: %v", back.Annotations)
	}
	if d := cmp.Diff(before.Spec.Rules[1].Filters, back.Spec.Rules[1].Filters); d != "" {
		t.Errorf("filters after the retry was dropped (-before +after):\n%s", d)
	}
	if d := cmp.Diff(before.Spec.Rules[0], back.Spec.Rules[0]); d != "" {
		t.Errorf("another team's rule changed (-before +after):\n%s", d)
	}
}

// TestRouterRetryRefusals: what the Router refuses, with the error and
// nothing written.
func TestRouterRetryRefusals(t *testing.T) {
	get := gwv1.HTTPMethodGet
	post := gwv1.HTTPMethodPost
	attempts := 5
	for _, tc := range []struct {
		name  string
		retry gateway.Retry
		edit  func(rules []gwv1.HTTPRouteRule)
		check func(error) bool
	}{
		{"gateway api on a rule that may carry POST", gateway.Retry{Mode: gateway.RetryGatewayAPI}, nil,
			func(err error) bool { var e *gateway.RetryUnsafeError; return errors.As(err, &e) && e.Rule == 1 }},
		{"gateway api on a POST rule", gateway.Retry{Mode: gateway.RetryGatewayAPI},
			func(rules []gwv1.HTTPRouteRule) { rules[1].Matches[0].Method = &post },
			func(err error) bool { var e *gateway.RetryUnsafeError; return errors.As(err, &e) }},
		{"a retry of another writer's", gateway.Retry{Mode: gateway.RetryGatewayAPI},
			func(rules []gwv1.HTTPRouteRule) {
				rules[1].Matches[0].Method = &get
				rules[1].Retry = &gwv1.HTTPRouteRetry{Attempts: &attempts}
			},
			func(err error) bool {
				var e *gateway.RetryConflictError
				return errors.As(err, &e) && e.Field == "retry"
			}},
		{"the Middleware's filter, set by another writer", traefikRetry,
			func(rules []gwv1.HTTPRouteRule) {
				rules[1].Filters = append(rules[1].Filters, mwFilter("upshift-retry"))
			},
			func(err error) bool {
				var e *gateway.RetryConflictError
				return errors.As(err, &e) && e.Field == "filters" && e.Middleware == "upshift-retry"
			}},
		{"no room for a filter", traefikRetry,
			func(rules []gwv1.HTTPRouteRule) {
				for i := len(rules[1].Filters); i < 16; i++ {
					rules[1].Filters = append(rules[1].Filters, mwFilter(fmt.Sprintf("f%d", i)))
				}
			},
			func(err error) bool { var e *gateway.RuleLimitError; return errors.As(err, &e) && e.Max == 16 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := retryRouteRules()
			if tc.edit != nil {
				tc.edit(rules)
			}
			c, ref := retryWorld(t, rules)
			before := getRetryRoute(t, c, ref)
			r := retryRouter(t, c, ref, &tc.retry)
			err := r.SetWeights(context.Background(), rollout.Weights{A: 90, B: 10})
			if !tc.check(err) || !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
				t.Fatalf("SetWeights: %v (%T)", err, err)
			}
			if d := cmp.Diff(before, getRetryRoute(t, c, ref)); d != "" {
				t.Errorf("route written (-before +after):\n%s", d)
			}
			err = r.SetRoutes(context.Background(), rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}})
			if !tc.check(err) {
				t.Fatalf("SetRoutes: %v (%T)", err, err)
			}
		})
	}
}

// TestRouterRetryMiddlewareChecked: the Router reads the Middleware before
// it writes the filter: Traefik keeps a route whose ExtensionRef names a
// missing Middleware Accepted and serves none of the rule's requests.
func TestRouterRetryMiddlewareChecked(t *testing.T) {
	ctx := context.Background()
	c, ref := retryWorld(t, retryRouteRules())
	before := getRetryRoute(t, c, ref)
	missing := traefikRetry
	missing.Middleware = "not-applied"
	r := retryRouter(t, c, ref, &missing)
	for _, call := range []func() error{
		func() error { return r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}) },
		func() error { return r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}}) },
	} {
		err := call()
		var me *gateway.RetryMiddlewareError
		if !errors.As(err, &me) || !me.NotFound || !errors.Is(err, rollout.ErrNotFound) || rollout.IsPermanent(err) {
			t.Fatalf("missing Middleware: %v (%T); want a *RetryMiddlewareError, NotFound, not permanent", err, err)
		}
	}
	// Not a retry Middleware.
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "traefik.io/v1alpha1", "kind": "Middleware",
		"metadata": map[string]any{"namespace": "shop", "name": "not-applied"}, "spec": map[string]any{"stripPrefix": map[string]any{}}}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10})
	var me *gateway.RetryMiddlewareError
	if !errors.As(err, &me) || me.NotFound || !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Fatalf("a Middleware without spec.retry: %v (%T)", err, err)
	}
	if d := cmp.Diff(before, getRetryRoute(t, c, ref)); d != "" {
		t.Errorf("route written (-before +after):\n%s", d)
	}
	// The clientset cannot read it: refused at construction.
	if _, err := gateway.NewRouterForClientset(nil, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary, Retry: &traefikRetry}); !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), "retry.mode:") {
		t.Errorf("NewRouterForClientset: %v", err)
	}
}

// TestRouterRetryGatewayAPI: rules[].retry on a GET-only rule, or with
// NonIdempotent on any; a switch to the Traefik form takes it back.
func TestRouterRetryGatewayAPI(t *testing.T) {
	ctx := context.Background()
	get := gwv1.HTTPMethodGet
	backoff, two := gwv1.Duration("100ms"), 2
	want := &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{503}, Attempts: &two, Backoff: &backoff}
	for _, tc := range []struct {
		name          string
		method        *gwv1.HTTPMethod
		nonIdempotent bool
	}{{"GET only", &get, false}, {"any method, NonIdempotent", nil, true}} {
		t.Run(tc.name, func(t *testing.T) {
			rules := retryRouteRules()
			rules[1].Matches[0].Method = tc.method
			c, ref := retryWorld(t, rules)
			before := getRetryRoute(t, c, ref)
			r := retryRouter(t, c, ref, &gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503}, Backoff: 100 * time.Millisecond, NonIdempotent: tc.nonIdempotent})
			if err := r.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
				t.Fatal(err)
			}
			after := getRetryRoute(t, c, ref)
			if d := cmp.Diff(want, after.Spec.Rules[1].Retry); d != "" {
				t.Errorf("retry (-want +got):\n%s", d)
			}
			if d := cmp.Diff(before.Spec.Rules[0], after.Spec.Rules[0]); d != "" {
				t.Errorf("another team's rule changed:\n%s", d)
			}
			if err := r.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil || r.Counts().Writes != 1 {
				t.Errorf("second SetWeights: %v, %d writes", err, r.Counts().Writes)
			}
			// The Traefik form instead: the retry goes, the filter comes.
			if err := retryRouter(t, c, ref, &traefikRetry).SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
				t.Fatal(err)
			}
			switched := getRetryRoute(t, c, ref)
			if switched.Spec.Rules[1].Retry != nil || len(switched.Spec.Rules[1].Filters) != 2 {
				t.Errorf("after the switch: retry %+v, filters %+v", switched.Spec.Rules[1].Retry, switched.Spec.Rules[1].Filters)
			}
		})
	}
}

// TestRouterRetryExtras: the extra rules of SetRoutes copy the moved
// rule's filter; Routes reports them programmed and SetRoutes writes
// nothing more.
func TestRouterRetryExtras(t *testing.T) {
	ctx := context.Background()
	c, ref := retryWorld(t, retryRouteRules())
	r := retryRouter(t, c, ref, &traefikRetry)
	rs := rollout.Routes{Weights: rollout.Weights{A: 80, B: 20}, Canary: strategy.SideB,
		Extras: strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "X-Beta", Value: "1"}}}}}
	if err := r.SetRoutes(ctx, rs); err != nil {
		t.Fatal(err)
	}
	rt := getRetryRoute(t, c, ref)
	n := 0
	for _, rule := range rt.Spec.Rules {
		for _, f := range rule.Filters {
			if cmp.Equal(f, mwFilter("upshift-retry")) {
				n++
			}
		}
	}
	if n != len(rt.Spec.Rules)-1 {
		t.Errorf("%d of %d rules (the other team's excluded) carry the retry filter", n, len(rt.Spec.Rules)-1)
	}
	st, err := r.Routes(ctx)
	if err != nil || !st.Extras.Equal(rs.Extras) {
		t.Fatalf("Routes: %+v, %v", st, err)
	}
	writes := r.Counts().Writes
	if err := r.SetRoutes(ctx, rs); err != nil || r.Counts().Writes != writes {
		t.Errorf("SetRoutes again: %v, %d writes after %d", err, r.Counts().Writes, writes)
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 60, B: 40}); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(rs.Extras) || st.Weights != (rollout.Weights{A: 60, B: 40}) {
		t.Fatalf("Routes after SetWeights: %+v, %v", st, err)
	}
}

// TestRouterRetryAddedToExtras: extra rules programmed without a retry get
// it with the next SetWeights of a Router that has one, and lose it with
// the next of a Router without; Routes reports the extras programmed
// throughout.
func TestRouterRetryAddedToExtras(t *testing.T) {
	ctx := context.Background()
	c, ref := retryWorld(t, retryRouteRules())
	x := strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "X-Beta", Value: "1"}}}}
	plain := retryRouter(t, c, ref, nil)
	if err := plain.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 80, B: 20}, Canary: strategy.SideB, Extras: x}); err != nil {
		t.Fatal(err)
	}
	count := func() (with, rules int) {
		rt := getRetryRoute(t, c, ref)
		for _, rule := range rt.Spec.Rules {
			for _, f := range rule.Filters {
				if cmp.Equal(f, mwFilter("upshift-retry")) {
					with++
				}
			}
		}
		return with, len(rt.Spec.Rules)
	}
	for _, step := range []struct {
		r    *gateway.Router
		w    int32
		want func(rules int) int
	}{
		{retryRouter(t, c, ref, &traefikRetry), 30, func(rules int) int { return rules - 1 }},
		{plain, 40, func(int) int { return 0 }},
	} {
		if err := step.r.SetWeights(ctx, rollout.Weights{A: 100 - step.w, B: step.w}); err != nil {
			t.Fatal(err)
		}
		if with, rules := count(); with != step.want(rules) {
			t.Errorf("weight %d: %d of %d rules carry the filter, want %d", step.w, with, rules, step.want(rules))
		}
		st, err := step.r.Routes(ctx)
		if err != nil || !st.Extras.Equal(x) || st.Weights != (rollout.Weights{A: 100 - step.w, B: step.w}) {
			t.Errorf("weight %d: Routes %+v, %v", step.w, st, err)
		}
	}
}

// TestRetryProperty: whatever the other rules hold, SetWeights with a retry
// leaves them byte-identical and puts the retry exactly once on each moved
// rule, or refuses with a typed error and writes nothing; dropping the
// option gives the moved rules back as they were.
func TestRetryProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		get, post := gwv1.HTTPMethodGet, gwv1.HTTPMethodPost
		methods := []*gwv1.HTTPMethod{nil, &get, &post}
		names := []string{"upshift-retry", "auth", "other"}
		filters := func(label string) []gwv1.HTTPRouteFilter {
			var fs []gwv1.HTTPRouteFilter
			for i, n := 0, rapid.IntRange(0, 3).Draw(t, label+"-filters"); i < n; i++ {
				fs = append(fs, mwFilter(rapid.SampledFrom(names).Draw(t, label+"-filter")))
			}
			return fs
		}
		retryOf := func(label string) *gwv1.HTTPRouteRetry {
			if !rapid.Bool().Draw(t, label+"-retry") {
				return nil
			}
			a := rapid.IntRange(1, 5).Draw(t, label+"-attempts")
			return &gwv1.HTTPRouteRetry{Attempts: &a}
		}
		base := retryRouteRules()
		var rules []gwv1.HTTPRouteRule
		var moved []int
		for i, n := 0, rapid.IntRange(1, 5).Draw(t, "rules"); i < n; i++ {
			label := fmt.Sprint("rule", i)
			rule := base[0].DeepCopy()
			if rapid.Bool().Draw(t, label+"-moved") || (i == n-1 && len(moved) == 0) {
				rule = base[1].DeepCopy()
				moved = append(moved, i)
			}
			path := fmt.Sprintf("/p%d", i)
			rule.Matches[0].Path.Value = &path
			rule.Matches[0].Method = rapid.SampledFrom(methods).Draw(t, label+"-method")
			rule.Filters = filters(label)
			rule.Retry = retryOf(label)
			rules = append(rules, *rule)
		}
		retry := &gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "upshift-retry"}
		if rapid.Bool().Draw(t, "gateway-api") {
			retry = &gateway.Retry{Mode: gateway.RetryGatewayAPI, Codes: []int{503}, NonIdempotent: rapid.Bool().Draw(t, "non-idempotent")}
		}
		c, ref := retryWorld(t, rules)
		before := getRetryRoute(t, c, ref)
		w := int32(rapid.IntRange(0, 100).Draw(t, "weight"))
		err := retryRouter(t, c, ref, retry).SetWeights(ctx, rollout.Weights{A: 100 - w, B: w})
		after := getRetryRoute(t, c, ref)
		if err != nil {
			var unsafe *gateway.RetryUnsafeError
			var conflict *gateway.RetryConflictError
			if !errors.As(err, &unsafe) && !errors.As(err, &conflict) {
				t.Fatalf("SetWeights: %v (%T)", err, err)
			}
			if d := cmp.Diff(before, after); d != "" {
				t.Fatalf("refused, yet written:\n%s", d)
			}
			return
		}
		isMoved := map[int]bool{}
		for _, i := range moved {
			isMoved[i] = true
		}
		for i := range rules {
			b, _ := json.Marshal(before.Spec.Rules[i])
			a, _ := json.Marshal(after.Spec.Rules[i])
			if !isMoved[i] {
				if string(a) != string(b) {
					t.Fatalf("rule %d, not moved, changed:\n%s\n%s", i, b, a)
				}
				continue
			}
			got := after.Spec.Rules[i]
			n := 0
			for _, f := range got.Filters {
				if cmp.Equal(f, mwFilter("upshift-retry")) {
					n++
				}
			}
			if retry.Mode == gateway.RetryTraefikMiddleware && n != 1 {
				t.Fatalf("rule %d has the retry filter %d times: %+v", i, n, got.Filters)
			}
			if retry.Mode == gateway.RetryGatewayAPI && (got.Retry == nil || len(got.Retry.Codes) != 1 || !cmp.Equal(got.Filters, before.Spec.Rules[i].Filters)) {
				t.Fatalf("rule %d: retry %+v, filters %+v", i, got.Retry, got.Filters)
			}
		}
		if err := retryRouter(t, c, ref, nil).SetWeights(ctx, rollout.Weights{A: 100 - w, B: w}); err != nil {
			t.Fatal(err)
		}
		back := getRetryRoute(t, c, ref)
		for i := range rules {
			if d := cmp.Diff(before.Spec.Rules[i].Filters, back.Spec.Rules[i].Filters); d != "" {
				t.Fatalf("rule %d's filters after the drop:\n%s", i, d)
			}
			if d := cmp.Diff(before.Spec.Rules[i].Retry, back.Spec.Rules[i].Retry); d != "" {
				t.Fatalf("rule %d's retry after the drop:\n%s", i, d)
			}
		}
		if len(back.Annotations) != 0 {
			t.Fatalf("annotations after the drop: %v", back.Annotations)
		}
	})
}
