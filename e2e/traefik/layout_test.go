package traefik_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
)

// Route layouts written by hand, rule by rule, as the extras of a canary
// program them: they show what Traefik does with each shape.

func pathPrefix(p string) gwv1.HTTPRouteMatch {
	t := gwv1.PathMatchPathPrefix
	return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &t, Value: &p}}
}

func exactHeader(name, value string) gwv1.HTTPHeaderMatch {
	t := gwv1.HeaderMatchExact
	return gwv1.HTTPHeaderMatch{Type: &t, Name: gwv1.HTTPHeaderName(name), Value: value}
}

func regexHeader(name, re string) gwv1.HTTPHeaderMatch {
	t := gwv1.HeaderMatchRegularExpression
	return gwv1.HTTPHeaderMatch{Type: &t, Name: gwv1.HTTPHeaderName(name), Value: re}
}

// cookieRegex matches a Cookie header line carrying the cookie name with one
// of values (Traefik tests the unanchored RE2 against each line).
func cookieRegex(name string, values ...string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = regexp.QuoteMeta(v)
	}
	return `(^|;\s*)` + regexp.QuoteMeta(name) + `=(` + strings.Join(q, "|") + `)(;|$)`
}

// withHeaders is every match of ms with hs added to its header matches.
func withHeaders(ms []gwv1.HTTPRouteMatch, hs ...gwv1.HTTPHeaderMatch) []gwv1.HTTPRouteMatch {
	out := make([]gwv1.HTTPRouteMatch, len(ms))
	for i, m := range ms {
		m.DeepCopyInto(&out[i])
		out[i].Headers = append(out[i].Headers, hs...)
	}
	return out
}

func svcRef(b *backend, weight int32, filters ...gwv1.HTTPRouteFilter) gwv1.HTTPBackendRef {
	port := gwv1.PortNumber(servicePort)
	return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(b.name), Port: &port},
		Weight:                 &weight,
	}, Filters: filters}
}

// tsRef names a TraefikService (served by Traefik's kubernetesCRD provider).
func tsRef(name string, weight int32) gwv1.HTTPBackendRef {
	g, k := gwv1.Group("traefik.io"), gwv1.Kind("TraefikService")
	return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Group: &g, Kind: &k, Name: gwv1.ObjectName(name)},
		Weight:                 &weight,
	}}
}

func rewritePrefix(to string) gwv1.HTTPRouteFilter {
	return gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
		Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &to}}}
}

func named(name string, r gwv1.HTTPRouteRule) gwv1.HTTPRouteRule {
	n := gwv1.SectionName(name)
	r.Name = &n
	return r
}

// setRules replaces the rules of the route and returns its new generation.
func setRules(t testing.TB, c client.Client, ref gateway.RouteRef, rules ...gwv1.HTTPRouteRule) int64 {
	t.Helper()
	ctx := context.Background()
	for {
		var rt gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
			t.Fatal(err)
		}
		rt.Spec.Rules = rules
		err := c.Update(ctx, &rt)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("update route %s: %v", ref, err)
		}
		return rt.Generation
	}
}

// eventually retries check until it succeeds, failing t after the
// propagation budget.
func eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(propagationBudget)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routeAccepted reports whether every parent accepted the route's current
// generation (Accepted and ResolvedRefs True).
func routeAccepted(ctx context.Context, c client.Client, ref gateway.RouteRef) (bool, error) {
	var rt gwv1.HTTPRoute
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
		return false, err
	}
	if len(rt.Status.Parents) == 0 {
		return false, nil
	}
	for _, ps := range rt.Status.Parents {
		for _, want := range []string{string(gwv1.RouteConditionAccepted), string(gwv1.RouteConditionResolvedRefs)} {
			cond := meta(ps.Conditions, want)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != rt.Generation {
				return false, nil
			}
		}
	}
	return true, nil
}
