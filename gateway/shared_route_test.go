package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

// sharedRule is a team's rule on a shared route: a name, a path prefix,
// header conditions "name: value" and a backend.
func sharedRule(name, path string, backend string, headers ...string) gwv1.HTTPRouteRule {
	prefix := gwv1.PathMatchPathPrefix
	m := gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: ptr(path)}}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(headers[i]), Value: headers[i+1]})
	}
	return gwv1.HTTPRouteRule{Name: ptr(gwv1.SectionName(name)), Matches: []gwv1.HTTPRouteMatch{m},
		BackendRefs: []gwv1.HTTPBackendRef{backend1(backend)}}
}

func backend1(name string) gwv1.HTTPBackendRef {
	return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr(gwv1.PortNumber(80))}}}
}

// sharedRoute is the route web in shop with the split rule for /shop
// (named "split") between the rules before and after.
func sharedRoute(t fatalTB, before, after []gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	t.Helper()
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: stable, B: canary,
		Hostnames: []string{"shop.example"}, PathPrefix: "/shop"})
	if err != nil {
		t.Fatal(err)
	}
	rt.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	R := rt.Spec.Rules[0]
	R.Name = ptr(gwv1.SectionName("split"))
	rt.Spec.Rules = append(append(append([]gwv1.HTTPRouteRule(nil), before...), R), after...)
	return rt
}

// peerRoute is another team's route on the listener of web.
func peerRoute(ns, name string, age time.Duration, host string, section string, rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	p := gwv1.ParentReference{Name: "gw", Namespace: ptr(gwv1.Namespace("shop"))}
	if section != "" {
		p.SectionName = ptr(gwv1.SectionName(section))
	}
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC).Add(age))},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{p}},
			Hostnames: []gwv1.Hostname{gwv1.Hostname(host)}, Rules: rules},
	}
}

func ruleNames(rt *gwv1.HTTPRoute) []string {
	var out []string
	for i := range rt.Spec.Rules {
		n := ruleName(&rt.Spec.Rules[i])
		if n == "" {
			n = "?"
		}
		out = append(out, n)
	}
	return out
}

// TestSharedRoute: where the extra rules go on a route that other teams
// share, and what is refused (see Router.SetRoutes, "Shared routes").
func TestSharedRoute(t *testing.T) {
	hdr := gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader)
	sc := gateway.ExtraRuleName("shop", stable, canary, gateway.RoleStickyCanary)
	ss := gateway.ExtraRuleName("shop", stable, canary, gateway.RoleStickyStable)
	split := gateway.ExtraRuleName("shop", stable, canary, gateway.RoleSplit)
	xBeta := &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}
	both := strategy.TrafficExtras{HeaderRoute: xBeta, Sticky: stickyRun}
	acme := sharedRule("acme", "/shop", "acme", "x-tenant", "acme")
	for _, tc := range []struct {
		name          string
		before, after []gwv1.HTTPRouteRule
		peers         []client.Object
		cfg           gateway.Config
		extras        strategy.TrafficExtras
		want          []string
		// wantErr: the error's type and what it names.
		shadowed   *gateway.ShadowedError
		precedence *gateway.PrecedenceError
	}{
		{name: "a tenant rule on the path after the split rule: the extra rules follow it",
			after: []gwv1.HTTPRouteRule{acme}, extras: both,
			want: []string{split, "split", "acme", hdr, sc, ss}},
		{name: "a tenant rule before the split rule: the usual layout",
			before: []gwv1.HTTPRouteRule{acme}, extras: both,
			want: []string{"acme", hdr, sc, ss, split, "split"}},
		{name: "a rule whose header excludes the header route's: no constraint",
			after: []gwv1.HTTPRouteRule{sharedRule("beta2", "/shop", "beta2", "x-beta", "2")}, extras: strategy.TrafficExtras{HeaderRoute: xBeta},
			want: []string{hdr, "split", "beta2"}},
		{name: "a rule on another path: no constraint",
			after: []gwv1.HTTPRouteRule{sharedRule("admin", "/admin", "admin", "x-tenant", "acme")}, extras: both,
			want: []string{hdr, sc, ss, split, "split", "admin"}},
		{name: "a longer path with a header ranks above the extra rules: no constraint",
			after: []gwv1.HTTPRouteRule{sharedRule("cart", "/shop/cart", "cart", "x-tenant", "acme")}, extras: both,
			want: []string{hdr, sc, ss, split, "split", "cart"}},
		{name: "the header route is already sent elsewhere by an earlier rule: shadowed",
			before: []gwv1.HTTPRouteRule{sharedRule("beta", "/shop", "elsewhere", "X-Beta", "1")}, extras: strategy.TrafficExtras{HeaderRoute: xBeta},
			shadowed: &gateway.ShadowedError{Route: webRef, Other: webRef, Rule: 0, Match: 0}},
		{name: "a rule with a query match ranks between the split rule's match and the extra rules'",
			after: []gwv1.HTTPRouteRule{func() gwv1.HTTPRouteRule {
				r := sharedRule("debug", "/shop", "debug")
				r.Matches[0].QueryParams = []gwv1.HTTPQueryParamMatch{{Name: "debug", Value: "1"}}
				return r
			}()}, extras: strategy.TrafficExtras{HeaderRoute: xBeta},
			precedence: &gateway.PrecedenceError{Route: webRef, Role: gateway.RoleHeader, Other: webRef, Rule: 1}},
		{name: "an older route on the listener ties with the extra rules and wins the tie",
			peers: []client.Object{peerRoute("team", "acme", -time.Hour, "shop.example", "", acme)}, extras: both,
			want: []string{hdr, sc, ss, split, "split"}},
		{name: "a newer route on the listener ties with the extra rules and would lose its requests",
			peers:      []client.Object{peerRoute("team", "acme", time.Hour, "shop.example", "", acme)},
			extras:     both,
			precedence: &gateway.PrecedenceError{Route: webRef, Role: gateway.RoleHeader, Other: gateway.RouteRef{Kind: "HTTPRoute", Namespace: "team", Name: "acme"}}},
		{name: "a newer route on another hostname competes with nothing",
			peers:  []client.Object{peerRoute("team", "acme", time.Hour, "other.example", "", acme)},
			extras: both, want: []string{hdr, sc, ss, split, "split"}},
		{name: "a newer route with a less specific hostname loses every request to the route",
			peers:  []client.Object{peerRoute("team", "acme", time.Hour, "*.example", "", acme)},
			extras: both, want: []string{hdr, sc, ss, split, "split"}},
		{name: "a route in a namespace the Router is told not to read",
			peers:  []client.Object{peerRoute("team", "acme", time.Hour, "shop.example", "", acme)},
			extras: both, want: []string{hdr, sc, ss, split, "split"},
			cfg: gateway.Config{PeerNamespaces: []string{"shop"}}},
		{name: "a newer route on another listener of the Gateway competes with nothing",
			peers:  []client.Object{peerRoute("team", "acme", time.Hour, "shop.example", "https", acme)},
			extras: both, want: []string{hdr, sc, ss, split, "split"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := sharedRoute(t, tc.before, tc.after)
			if tc.name == "a newer route on another listener of the Gateway competes with nothing" {
				rt.Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("http"))
			}
			c, r := extrasWorld(t, "mirroring", tc.cfg, append([]client.Object{rt}, tc.peers...)...)
			before := getHTTPRoute(t, c, webRef)
			err := r.SetRoutes(ctx, routesAt(20, tc.extras))
			switch {
			case tc.shadowed != nil:
				var se *gateway.ShadowedError
				if !errors.As(err, &se) || !errors.Is(err, gateway.ErrInvalid) {
					t.Fatalf("SetRoutes: %v, want a *ShadowedError", err)
				}
				if diff := cmp.Diff(tc.shadowed, se); diff != "" {
					t.Errorf("the error (-want +got):\n%s", diff)
				}
			case tc.precedence != nil:
				var pe *gateway.PrecedenceError
				if !errors.As(err, &pe) || !errors.Is(err, gateway.ErrInvalid) {
					t.Fatalf("SetRoutes: %v, want a *PrecedenceError", err)
				}
				got := &gateway.PrecedenceError{Route: pe.Route, Role: pe.Role, Other: pe.Other, Rule: pe.Rule}
				if diff := cmp.Diff(tc.precedence, got); diff != "" {
					t.Errorf("the error (-want +got):\n%s\n%v", diff, err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, ruleNames(getHTTPRoute(t, c, webRef))); diff != "" {
					t.Errorf("rules (-want +got):\n%s", diff)
				}
				if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(tc.extras) {
					t.Errorf("Routes: %+v, %v", st.Extras, err)
				}
				return
			}
			if after := getHTTPRoute(t, c, webRef); after.ResourceVersion != before.ResourceVersion {
				t.Errorf("a refused SetRoutes wrote the route")
			}
			if st, err := r.Routes(ctx); err != nil || !st.Extras.IsZero() {
				t.Errorf("Routes after a refusal: %+v, %v", st.Extras, err)
			}
		})
	}
}

// TestShadowedLater: a rule another writer adds after the header route
// was programmed, which takes all its requests, makes Routes report no
// extras; the next weight write removes the extra rules with the weights,
// and SetRoutes refuses to put them back.
func TestShadowedLater(t *testing.T) {
	ctx := context.Background()
	c, r := extrasWorld(t, "mirroring", gateway.Config{}, sharedRoute(t, nil, nil))
	x := strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}}
	if err := r.SetRoutes(ctx, routesAt(20, x)); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(x) {
		t.Fatalf("Routes: %+v, %v", st.Extras, err)
	}
	rt := getHTTPRoute(t, c, webRef)
	rt.Spec.Rules = append([]gwv1.HTTPRouteRule{sharedRule("beta", "/shop", "elsewhere", "x-beta", "1")}, rt.Spec.Rules...)
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.IsZero() {
		t.Errorf("Routes with the header route shadowed: %+v, %v", st.Extras, err)
	}
	if err := r.SetWeights(ctx, routesAt(10, x).Weights); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"beta", "split"}, ruleNames(getHTTPRoute(t, c, webRef))); diff != "" {
		t.Errorf("rules after the weight write (-want +got):\n%s", diff)
	}
	var se *gateway.ShadowedError
	if err := r.SetRoutes(ctx, routesAt(10, x)); !errors.As(err, &se) || se.Rule != 0 {
		t.Errorf("SetRoutes: %v, want a *ShadowedError naming rule 0", err)
	}
}

// TestSharedGRPCRoute: on a GRPCRoute (service, then method, then header
// count) the header rule follows a tenant rule on the same service that
// ties with it, leaves a rule on a method of the service alone, and is
// refused when a tenant rule ranks between the split rule's match and its
// own.
func TestSharedGRPCRoute(t *testing.T) {
	svc, method := "shop.Cart", "Checkout"
	grpcRule := func(name string, m gwv1.GRPCMethodMatch, backend string, headers ...string) gwv1.GRPCRouteRule {
		match := gwv1.GRPCRouteMatch{Method: &m}
		for i := 0; i+1 < len(headers); i += 2 {
			match.Headers = append(match.Headers, gwv1.GRPCHeaderMatch{Name: gwv1.GRPCHeaderName(headers[i]), Value: headers[i+1]})
		}
		r := gwv1.GRPCRouteRule{Matches: []gwv1.GRPCRouteMatch{match},
			BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(backend), Port: ptr(gwv1.PortNumber(80))}}}}}
		if name != "" {
			r.Name = ptr(gwv1.SectionName(name))
		}
		return r
	}
	split := grpcRule("split", gwv1.GRPCMethodMatch{Service: &svc}, "web")
	split.BackendRefs = append(split.BackendRefs, gwv1.GRPCBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-canary", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(0))}})
	hdr := gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader)
	x := strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}}
	ref := gateway.RouteRef{Kind: gateway.KindGRPCRoute, Namespace: "shop", Name: "cart"}
	for _, tc := range []struct {
		name  string
		after gwv1.GRPCRouteRule
		want  []string
		rule  int // of the *PrecedenceError when want is nil
	}{
		{"a tenant rule on the service", grpcRule("acme", gwv1.GRPCMethodMatch{Service: &svc}, "acme", "x-tenant", "acme"), []string{"split", "acme", hdr}, 0},
		{"a rule on one method of the service ranks above the header rule", grpcRule("checkout", gwv1.GRPCMethodMatch{Service: &svc, Method: &method}, "checkout", "x-tenant", "acme"), []string{hdr, "split", "checkout"}, 0},
		{"a tenant rule ranks between the split rule and a header route of two headers", grpcRule("acme", gwv1.GRPCMethodMatch{Service: &svc}, "acme", "x-tenant", "acme"), nil, 1},
		{"a rule on another service", grpcRule("other", gwv1.GRPCMethodMatch{Service: ptr("shop.Other")}, "other", "x-tenant", "acme"), []string{hdr, "split", "other"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := &gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"},
				Spec: gwv1.GRPCRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
					Rules: []gwv1.GRPCRouteRule{*split.DeepCopy(), *tc.after.DeepCopy()}}}
			c, r := extrasWorld(t, "mirroring", gateway.Config{Routes: []gateway.RouteRef{ref}}, rt)
			x := x
			if tc.want == nil {
				x = strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}, {Name: "x-team", Value: "core"}}}}
			}
			err := r.SetRoutes(ctx, routesAt(10, x))
			if tc.want == nil {
				var pe *gateway.PrecedenceError
				if !errors.As(err, &pe) || pe.Rule != tc.rule || pe.Other != ref {
					t.Fatalf("SetRoutes: %v, want a *PrecedenceError naming rule %d of %s", err, tc.rule, ref)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got gwv1.GRPCRoute
			if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "cart"}, &got); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range got.Spec.Rules {
				names = append(names, string(*r.Name))
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}
