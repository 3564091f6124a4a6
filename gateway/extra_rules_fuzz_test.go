package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var (
	fuzzA = Backend{Name: "web", Port: 80}
	fuzzB = Backend{Name: "web-canary", Port: 80}
)

// fuzzR is the user's rule that splits fuzzA and fuzzB.
func fuzzR() gwv1.HTTPRouteRule {
	prefix := gwv1.PathMatchPathPrefix
	return gwv1.HTTPRouteRule{
		Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: ptr("/shop")}}},
		Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
			Hostname: ptr(gwv1.PreciseHostname("internal.example"))}}},
		BackendRefs: []gwv1.HTTPBackendRef{
			{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(100))}},
			{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-canary", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(0))}},
		},
	}
}

// fuzzAsk turns the fuzzer's bits into a SetRoutes request.
func fuzzAsk(flags, theta uint8) *extrasAsk {
	ns := "shop"
	w := int32(theta % 101)
	s := &extrasAsk{id: extrasID(ns, fuzzA, fuzzB), key: RulesAnnotation(ns, fuzzA, fuzzB), ns: ns, a: &fuzzA, b: &fuzzB,
		weights: rollout.Weights{A: 100 - w, B: w}, canary: strategy.SideB}
	if flags&32 != 0 {
		s.canary = strategy.SideA
		s.weights = rollout.Weights{A: w, B: 100 - w}
	}
	var hs []strategy.HeaderMatch
	if flags&1 != 0 {
		hs = append(hs, strategy.HeaderMatch{Name: "X-Beta", Value: "1"})
	}
	if flags&2 != 0 {
		hs = append(hs, strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"})
	}
	if len(hs) > 0 {
		s.extras.HeaderRoute = &strategy.HeaderRoute{Matches: hs}
	}
	if flags&4 != 0 {
		s.extras.Sticky = &strategy.Sticky{Run: "r1", Grid: []int32{5, 10, 25, 50, 100}}
	}
	if flags&8 != 0 {
		s.extras.MirrorPercent = int32(theta%50) + 1
		if flags&16 != 0 {
			s.mirror, s.traefik = MirrorTraefikService, extraRulePrefix(s.id)+"mirror"
		}
	}
	return s
}

// stripped is rules without the two weights of the rules that hold both
// backends (the Router's to write).
func stripped(rules []gwv1.HTTPRouteRule) []gwv1.HTTPRouteRule {
	out := httpOps.copy(rules)
	for i := range out {
		refs := httpRefs(&gwv1.HTTPRoute{Spec: gwv1.HTTPRouteSpec{Rules: out[i : i+1]}})[0]
		if !holdsBoth(refs, &fuzzA, &fuzzB, "shop") {
			continue
		}
		for _, r := range refs {
			if fuzzA.matches(&r.BackendObjectReference, "shop") || fuzzB.matches(&r.BackendObjectReference, "shop") {
				r.Weight = nil
			}
		}
	}
	return out
}

// notExtra returns the rules classify does not recognise as owned.
func notExtra(rt *gwv1.HTTPRoute, s *extrasAsk) ([]gwv1.HTTPRouteRule, []RuleRole) {
	roles, _ := classify(infosOf(&httpOps, rt.Spec.Rules), s.id, readRecord(rt.Annotations, s.key))
	var user []gwv1.HTTPRouteRule
	var owned []RuleRole
	for i, r := range roles {
		if r == roleUser || r == roleForeign {
			user = append(user, rt.Spec.Rules[i])
		} else {
			owned = append(owned, r)
		}
	}
	return user, owned
}

// FuzzOwnedRules: whatever the user's rules (any names, matches, filters,
// backends, including names the Router uses for its own rules), programming
// extras and removing them never deletes or edits a user's rule (but for
// the two weights of the rule that holds both backends), programming twice
// changes nothing, and a refusal changes nothing.
func FuzzOwnedRules(f *testing.F) {
	id := extrasID("shop", fuzzA, fuzzB)
	for _, seed := range []string{
		`[]`,
		`[{"name":"admin","matches":[{"path":{"type":"Exact","value":"/admin"}}],"backendRefs":[{"name":"admin","port":80}]}]`,
		`[{"matches":[{"headers":[{"name":"X-Beta","value":"1"}]}],"backendRefs":[{"name":"web","port":80}]},{"backendRefs":[{"name":"static","port":80}]}]`,
		`[{"name":"upshift-` + id + `-header","backendRefs":[{"name":"web-canary","port":80}]}]`,
		`[{"name":"upshift-` + id + `-split","matches":[{"path":{"type":"PathPrefix","value":"/shop"}}],"backendRefs":[{"name":"web","port":80,"weight":90},{"name":"web-canary","port":80,"weight":10}]}]`,
		`[{"name":"upshift-0000000000000000-header","backendRefs":[{"name":"web-canary","port":80}]}]`,
		`[{"matches":[{"path":{"type":"PathPrefix","value":"/x"}}],"backendRefs":[{"name":"web","port":80,"weight":1},{"name":"web-canary","port":80}]}]`,
		`[{"filters":[{"type":"ResponseHeaderModifier","responseHeaderModifier":{"set":[{"name":"Set-Cookie","value":"a=b"}]}}],"backendRefs":[{"name":"web","port":80}]}]`,
		`[{"backendRefs":[{"name":"web","port":80},{"name":"other","port":80,"weight":0}]}]`,
	} {
		f.Add(seed, uint8(1), uint8(7), uint8(20))
		f.Add(seed, uint8(0), uint8(8|16|4), uint8(50))
		f.Add(seed, uint8(2), uint8(32|1|8), uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw string, pos, flags, theta uint8) {
		var user []gwv1.HTTPRouteRule
		if err := json.Unmarshal([]byte(raw), &user); err != nil || len(user) > 20 {
			return
		}
		rules := append([]gwv1.HTTPRouteRule{}, user...)
		at := int(pos) % (len(rules) + 1)
		rules = append(rules[:at], append([]gwv1.HTTPRouteRule{fuzzR()}, rules[at:]...)...)
		rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
			Annotations: map[string]string{"user": "kept"}}, Spec: gwv1.HTTPRouteSpec{Rules: rules}}
		orig := rt.DeepCopy()
		s := fuzzAsk(flags, theta)

		_, err := applyExtrasHTTP(rt, s)
		if err != nil {
			if diff := cmp.Diff(orig, rt); diff != "" {
				t.Fatalf("a refusal (%v) changed the route (-before +after):\n%s", err, diff)
			}
			var known []error
			for _, e := range []error{ErrInvalid, rollout.ErrUnsupported, rollout.ErrNotFound} {
				if errors.Is(err, e) {
					known = append(known, e)
				}
			}
			if len(known) == 0 {
				t.Fatalf("untyped refusal: %v (%T)", err, err)
			}
			return
		}
		kept, owned := notExtra(rt, s)
		if diff := cmp.Diff(stripped(orig.Spec.Rules), stripped(kept)); diff != "" {
			t.Fatalf("programming %+v edited the user's rules (-before +after):\n%s", s.extras, diff)
		}
		for _, r := range owned {
			if r == roleForeign {
				t.Fatalf("a rule with an extra-rule name survived as another writer's: %v", owned)
			}
		}
		rec := readRecord(rt.Annotations, s.key)
		if !s.extras.IsZero() && (!complete(append(owned, roleUser), rec) || len(owned) != len(rec.Rules)) {
			t.Fatalf("extra rules %v are not what the record lists: %+v", owned, rec)
		}
		if rt.Annotations["user"] != "kept" {
			t.Fatalf("the user's annotation is gone: %v", rt.Annotations)
		}
		if changed, err := applyExtrasHTTP(rt, s); err != nil || changed {
			t.Fatalf("programming again: changed=%v err=%v", changed, err)
		}

		s.extras = strategy.TrafficExtras{}
		if _, err := applyExtrasHTTP(rt, s); err != nil {
			t.Fatalf("removing the extras: %v", err)
		}
		if diff := cmp.Diff(stripped(orig.Spec.Rules), stripped(rt.Spec.Rules)); diff != "" {
			t.Fatalf("removal did not give back the user's rules (-before +after):\n%s", diff)
		}
		if _, ok := rt.Annotations[s.key]; ok {
			t.Fatalf("removal left the record")
		}
		for i := range rt.Spec.Rules {
			if n := rt.Spec.Rules[i].Name; n != nil && strings.HasPrefix(string(*n), extraRulePrefix(s.id)) {
				t.Fatalf("removal left rule %d %s", i, *n)
			}
		}
	})
}

// TestPrunedRuleNames: on a CRD that drops rule names, extra rules are
// recognised by their hash: Routes-style recognition finds them all, a
// second SetRoutes writes nothing, and removal takes them off.
func TestPrunedRuleNames(t *testing.T) {
	s := fuzzAsk(1|4|8, 20)
	rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: gwv1.HTTPRouteSpec{Rules: []gwv1.HTTPRouteRule{fuzzR()}}}
	if _, err := applyExtrasHTTP(rt, s); err != nil {
		t.Fatal(err)
	}
	for i := range rt.Spec.Rules {
		rt.Spec.Rules[i].Name = nil
	}
	_, owned := notExtra(rt, s)
	want := []RuleRole{RoleHeader, RoleStickyCanary, RoleStickyStable, RoleSplit}
	if diff := cmp.Diff(want, owned); diff != "" {
		t.Fatalf("recognised (-want +got):\n%s", diff)
	}
	if changed, err := applyExtrasHTTP(rt, s); err != nil || changed {
		t.Fatalf("programming again: changed=%v err=%v", changed, err)
	}
	s.extras = strategy.TrafficExtras{}
	if _, err := applyExtrasHTTP(rt, s); err != nil {
		t.Fatal(err)
	}
	if len(rt.Spec.Rules) != 1 {
		t.Fatalf("%d rules after removal, want the user's one", len(rt.Spec.Rules))
	}
}
