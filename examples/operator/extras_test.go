package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

// The tests of traffic extras: a Release's header routes, mirrors and
// sticky sessions, programmed by the operator into the HTTPRoute as rules
// the gateway Router owns, immediately before the route's own rule.

var (
	backendA = gateway.Backend{Name: "web-a", Port: 80}
	backendB = gateway.Backend{Name: "web-b", Port: 80}
)

// routeSnap is one generation of the route as the gateway saw it.
type routeSnap struct {
	generation int64
	// a and b are the weights of the route's own rule.
	a, b int32
	// roles are the extra rules, in order.
	roles []gateway.RuleRole
	// annotated: the route carries the Router's rules annotation.
	annotated bool
	// mirrored: a rule of the route has a RequestMirror filter.
	mirrored bool
}

func (s routeSnap) String() string {
	return fmt.Sprintf("gen %d %d/%d %v annotated=%v mirrored=%v", s.generation, s.a, s.b, s.roles, s.annotated, s.mirrored)
}

// extraRoles returns the roles of the extra rules of rt, in order, and the
// index of the route's own rule (the one without an extra-rule name).
func extraRoles(ns string, rt *gwv1.HTTPRoute) ([]gateway.RuleRole, int) {
	names := map[string]gateway.RuleRole{}
	for _, role := range []gateway.RuleRole{gateway.RoleHeader, gateway.RoleStickyCanary, gateway.RoleStickyStable, gateway.RoleSplit} {
		names[gateway.ExtraRuleName(ns, backendA, backendB, role)] = role
	}
	var roles []gateway.RuleRole
	user := -1
	for i, r := range rt.Spec.Rules {
		if r.Name != nil {
			if role, ok := names[string(*r.Name)]; ok {
				roles = append(roles, role)
				continue
			}
		}
		if user < 0 {
			user = i
		}
	}
	return roles, user
}

// snapshot summarises a generation of the route.
func snapshot(ns string, rt *gwv1.HTTPRoute) routeSnap {
	roles, user := extraRoles(ns, rt)
	s := routeSnap{generation: rt.Generation, roles: roles}
	_, s.annotated = rt.Annotations[gateway.RulesAnnotation(ns, backendA, backendB)]
	for _, r := range rt.Spec.Rules {
		for _, f := range r.Filters {
			s.mirrored = s.mirrored || f.Type == gwv1.HTTPRouteFilterRequestMirror
		}
	}
	if user >= 0 {
		for _, ref := range rt.Spec.Rules[user].BackendRefs {
			if ref.Weight == nil {
				continue
			}
			if ref.Name == gwv1.ObjectName(backendA.Name) {
				s.a = *ref.Weight
			} else {
				s.b = *ref.Weight
			}
		}
	}
	return s
}

// routeGenerations returns the route's generations the gateway saw, one
// snapshot each, in order.
func (w *world) routeGenerations() []routeSnap {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]routeSnap(nil), w.snaps...)
}

// route reads the HTTPRoute.
func (w *world) route() *gwv1.HTTPRoute {
	w.t.Helper()
	var rt gwv1.HTTPRoute
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rt); err != nil {
		w.t.Fatal(err)
	}
	return &rt
}

// ruleOf returns the extra rule with role, or nil.
func (w *world) ruleOf(rt *gwv1.HTTPRoute, role gateway.RuleRole) *gwv1.HTTPRouteRule {
	name := gateway.ExtraRuleName(w.ns, backendA, backendB, role)
	for i := range rt.Spec.Rules {
		if r := &rt.Spec.Rules[i]; r.Name != nil && string(*r.Name) == name {
			return r
		}
	}
	return nil
}

// userRuleWithoutWeights returns the route's own rule as JSON, its
// weights left out.
func userRuleWithoutWeights(t *testing.T, ns string, rt *gwv1.HTTPRoute) string {
	t.Helper()
	_, i := extraRoles(ns, rt)
	if i < 0 {
		t.Fatalf("the route has no rule of its own: %+v", rt.Spec.Rules)
	}
	r := rt.Spec.Rules[i].DeepCopy()
	for j := range r.BackendRefs {
		r.BackendRefs[j].Weight = nil
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// checkNoExtras checks that the route holds no extra rule and no rules
// annotation.
func (w *world) checkNoExtras(when string) {
	w.t.Helper()
	rt := w.route()
	if s := snapshot(w.ns, rt); len(s.roles) > 0 || s.annotated {
		w.t.Errorf("%s: the route still holds extras: %v", when, s)
	}
	for _, r := range rt.Spec.Rules {
		if r.Name != nil && strings.HasPrefix(string(*r.Name), "upshift-") {
			w.t.Errorf("%s: the route still holds rule %s", when, *r.Name)
		}
	}
}

// pausedAt waits until the rollout is paused at weight with extras x
// applied (desired and observed).
func (w *world) pausedAt(what string, weight int32, x strategy.TrafficExtras, same func(a, b strategy.TrafficExtras) bool) *v1alpha1.Release {
	w.t.Helper()
	return w.waitFor(what, 45*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && s.Phase == strategy.PhasePaused &&
			s.Observed.Weight == weight && s.Desired.Weight == weight && s.Observed.WeightApplied &&
			same(s.DesiredExtras, x) && s.Observed.Extras.Equal(s.DesiredExtras)
	})
}

func headerOnly(a, b strategy.TrafficExtras) bool {
	return a.MirrorPercent == b.MirrorPercent && a.Sticky == nil && b.Sticky == nil &&
		cmp.Equal(a.HeaderRoute, b.HeaderRoute)
}

// checkHeaderRule checks the extra header rule of the route: immediately
// before the route's own rule, its matches those of the route's rule each
// with the header route's matches, to the canary (side B); the route's
// rule as it was created but for its weights.
func (w *world) checkHeaderRule(when string, want []gwv1.HTTPHeaderMatch, user string) {
	w.t.Helper()
	rt := w.route()
	roles, ui := extraRoles(w.ns, rt)
	if diff := cmp.Diff([]gateway.RuleRole{gateway.RoleHeader}, roles); diff != "" {
		w.t.Errorf("%s: extra rules (-want +got):\n%s", when, diff)
		return
	}
	h := w.ruleOf(rt, gateway.RoleHeader)
	if got := rt.Spec.Rules[ui-1].Name; got == nil || *got != *h.Name {
		w.t.Errorf("%s: the header rule is not immediately before the route's rule: %+v", when, rt.Spec.Rules)
	}
	r := rt.Spec.Rules[ui]
	matches := r.Matches
	if len(matches) == 0 {
		matches = []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: new(gwv1.PathMatchPathPrefix), Value: new("/")}}}
	}
	var wantMatches []gwv1.HTTPRouteMatch
	for _, m := range matches {
		m = *m.DeepCopy()
		m.Headers = append(m.Headers, want...)
		wantMatches = append(wantMatches, m)
	}
	if diff := cmp.Diff(wantMatches, h.Matches); diff != "" {
		w.t.Errorf("%s: the header rule's matches (-want +got):\n%s", when, diff)
	}
	if len(h.BackendRefs) != 1 || h.BackendRefs[0].Name != gwv1.ObjectName(backendB.Name) {
		w.t.Errorf("%s: the header rule sends to %+v, want only %s", when, h.BackendRefs, backendB.Name)
	}
	if diff := cmp.Diff(user, userRuleWithoutWeights(w.t, w.ns, rt)); diff != "" {
		w.t.Errorf("%s: the route's own rule changed beyond its weights (-want +got):\n%s", when, diff)
	}
}

func headerRoute(expected int32, m ...strategy.HeaderMatch) *strategy.HeaderRoute {
	return &strategy.HeaderRoute{Matches: m, ExpectedPercent: new(expected)}
}

var (
	betaHeader = strategy.HeaderMatch{Name: "X-Canary", Value: "always"}
	betaCookie = strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"}
	exact      = gwv1.HeaderMatchExact
	regex      = gwv1.HeaderMatchRegularExpression
	// The route's matches for betaHeader and then betaCookie.
	betaHeaderMatch = gwv1.HTTPHeaderMatch{Type: &exact, Name: "X-Canary", Value: "always"}
	betaCookieMatch = gwv1.HTTPHeaderMatch{Type: &regex, Name: "Cookie", Value: `(^|;\s*)beta=yes(;|$)`}
)

func extrasCanary(steps ...strategy.CanaryStep) *strategy.Canary {
	return &strategy.Canary{MaxSurgePercent: 50, Steps: steps,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}
}

// TestHeaderRoute: a Canary whose steps set a header route before the
// first weight step and another between two: at each step the route holds
// the extra header rule before its own rule, which is unchanged but for
// its weights, and the status shows the extras; after the rollout nothing
// of them is left.
func TestHeaderRoute(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	h1, h2 := headerRoute(10, betaHeader), headerRoute(10, betaHeader, betaCookie)
	c := extrasCanary(strategy.SetHeaderRoute(10, betaHeader), strategy.PauseUntilResumed(),
		strategy.SetWeight(25), strategy.PauseUntilResumed(),
		strategy.SetHeaderRoute(10, betaHeader, betaCookie), strategy.PauseUntilResumed(),
		strategy.SetWeight(50), strategy.PauseUntilResumed(), strategy.SetWeight(100))
	create(t, w.c, w.release("v1", v1alpha1.ReleaseStrategy{Canary: c}))
	w.waitFor("v1 released", 30*time.Second, released)
	user := userRuleWithoutWeights(t, w.ns, w.route())
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	for i, at := range []struct {
		weight  int32
		x       *strategy.HeaderRoute
		matches []gwv1.HTTPHeaderMatch
	}{
		{0, h1, []gwv1.HTTPHeaderMatch{betaHeaderMatch}},
		{25, h1, []gwv1.HTTPHeaderMatch{betaHeaderMatch}},
		{25, h2, []gwv1.HTTPHeaderMatch{betaHeaderMatch, betaCookieMatch}},
		{50, h2, []gwv1.HTTPHeaderMatch{betaHeaderMatch, betaCookieMatch}},
	} {
		when := fmt.Sprintf("pause %d (weight %d)", i+1, at.weight)
		rel := w.pausedAt(when, at.weight, strategy.TrafficExtras{HeaderRoute: at.x}, headerOnly)
		if diff := cmp.Diff(at.x, rel.Status.Rollout.Observed.Extras.HeaderRoute); diff != "" {
			t.Errorf("%s: status.rollout.observed.extras.headerRoute (-want +got):\n%s", when, diff)
		}
		w.checkHeaderRule(when, at.matches, user)
		if s := snapshot(w.ns, w.route()); s.b != at.weight || s.a != 100-at.weight {
			t.Errorf("%s: the route's rule has weights %d/%d", when, s.a, s.b)
		}
		w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = fmt.Sprintf("p%d", i+1) })
	}
	rel := w.waitFor("v2 released", 45*time.Second, released)
	if s := rel.Status.Rollout; s.Phase != strategy.PhaseSucceeded || !s.DesiredExtras.IsZero() || !s.Observed.Extras.IsZero() {
		t.Errorf("ended %s with extras %v (observed %v)", s.Phase, s.DesiredExtras, s.Observed.Extras)
	}
	w.checkNoExtras("after the rollout")
	if diff := cmp.Diff(user, userRuleWithoutWeights(t, w.ns, w.route())); diff != "" {
		t.Errorf("the route's own rule after the rollout (-want +got):\n%s", diff)
	}
	t.Logf("route generations: %v", w.routeGenerations())
}

// TestHeaderRouteAbort: an abort while a header route is in force removes
// the header rule before the weight walks back (the route's generations
// show it), and none is left once Aborted.
func TestHeaderRouteAbort(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	c := extrasCanary(strategy.SetHeaderRoute(10, betaHeader), strategy.SetWeight(25), strategy.PauseUntilResumed(),
		strategy.SetWeight(100))
	create(t, w.c, w.release("v1", v1alpha1.ReleaseStrategy{Canary: c}))
	w.waitFor("v1 released", 30*time.Second, released)
	user := userRuleWithoutWeights(t, w.ns, w.route())
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.pausedAt("the pause at 25", 25, strategy.TrafficExtras{HeaderRoute: headerRoute(10, betaHeader)}, headerOnly)
	w.checkHeaderRule("the pause at 25", []gwv1.HTTPHeaderMatch{betaHeaderMatch}, user)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Abort = "a1" })
	rel := w.waitFor("aborted", 45*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return s.Phase == strategy.PhaseAborted && s.Observed.Weight == 0 && s.Observed.WeightApplied
	})
	if s := rel.Status.Rollout; !s.DesiredExtras.IsZero() || !s.Observed.Extras.IsZero() {
		t.Errorf("aborted with extras %v (observed %v)", s.DesiredExtras, s.Observed.Extras)
	}
	w.checkNoExtras("aborted")
	gens := w.routeGenerations()
	last := -1
	for i, s := range gens {
		if len(s.roles) > 0 {
			last = i
		}
		if i > 0 && s.generation <= gens[i-1].generation {
			t.Errorf("route generations out of order: %v", gens)
		}
	}
	switch {
	case last < 0:
		t.Fatalf("the gateway never saw the header rule: %v", gens)
	case last+1 >= len(gens):
		t.Fatalf("the header rule was never removed: %v", gens)
	}
	held, removed := gens[last], gens[last+1]
	if held.b != 25 || removed.b != 25 || len(removed.roles) > 0 || removed.annotated {
		t.Errorf("want the header rule removed at weight 25, before the weight moves: %v then %v (all: %v)", held, removed, gens)
	}
	for _, s := range gens[last+1:] {
		if len(s.roles) > 0 || s.annotated {
			t.Errorf("extras after their removal: %v", gens)
		}
	}
	if end := gens[len(gens)-1]; end.b != 0 {
		t.Errorf("the walk back ends at %v", end)
	}
	t.Logf("route generations: %v", gens)
}

// TestSessionAffinity: with spec.strategy.canary.sessionAffinity the route
// holds the sticky rules at each step, the canary's weight as the ticket
// threshold, and none at the end.
func TestSessionAffinity(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	c := extrasCanary(strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(50), strategy.PauseUntilResumed(),
		strategy.SetWeight(100))
	c.SessionAffinity = &strategy.SessionAffinity{CookieName: "shop-canary"}
	create(t, w.c, w.release("v1", v1alpha1.ReleaseStrategy{Canary: c}))
	w.waitFor("v1 released", 30*time.Second, released)
	user := userRuleWithoutWeights(t, w.ns, w.route())
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	sticky := func(a, b strategy.TrafficExtras) bool {
		return a.Sticky != nil && a.HeaderRoute == nil && a.MirrorPercent == 0
	}
	for i, weight := range []int32{25, 50} {
		when := fmt.Sprintf("the pause at %d", weight)
		rel := w.pausedAt(when, weight, strategy.TrafficExtras{}, sticky)
		st := rel.Status.Rollout.Observed.Extras.Sticky
		if st == nil || st.Cookie.CookieName != "shop-canary" || st.Run == "" {
			t.Fatalf("%s: status.rollout.observed.extras.sticky %+v", when, st)
		}
		rt := w.route()
		roles, _ := extraRoles(w.ns, rt)
		if diff := cmp.Diff([]gateway.RuleRole{gateway.RoleStickyCanary, gateway.RoleStickyStable, gateway.RoleSplit}, roles); diff != "" {
			t.Fatalf("%s: extra rules (-want +got):\n%s", when, diff)
		}
		// The split rule hands out tickets: the ticket values up to the
		// weight are on the canary, each ticket weighted by its gap from
		// the one below, so the canary's tickets weigh the weight.
		var onA, onB int32
		for _, ref := range w.ruleOf(rt, gateway.RoleSplit).BackendRefs {
			cookie := ""
			for _, f := range ref.Filters {
				if f.ResponseHeaderModifier != nil {
					for _, h := range f.ResponseHeaderModifier.Add {
						if h.Name == "Set-Cookie" {
							cookie = h.Value
						}
					}
				}
			}
			var ticket int32
			if _, err := fmt.Sscanf(strings.TrimPrefix(cookie, "shop-canary="+st.Run+"."), "%d;", &ticket); err != nil {
				t.Fatalf("%s: split ref %s sets cookie %q: %v", when, ref.Name, cookie, err)
			}
			if canary := ref.Name == gwv1.ObjectName(backendB.Name); canary != (ticket <= weight) {
				t.Errorf("%s: ticket %d goes to %s", when, ticket, ref.Name)
			}
			if ref.Name == gwv1.ObjectName(backendB.Name) {
				onB += *ref.Weight
			} else {
				onA += *ref.Weight
			}
		}
		if onA != 100-weight || onB != weight {
			t.Errorf("%s: the tickets weigh %d/%d", when, onA, onB)
		}
		pin := w.ruleOf(rt, gateway.RoleStickyCanary)
		for _, m := range pin.Matches {
			h := m.Headers[len(m.Headers)-1]
			if h.Name != "Cookie" || !strings.Contains(h.Value, "shop-canary="+st.Run) || !strings.Contains(h.Value, fmt.Sprint(weight)) {
				t.Errorf("%s: the sticky-canary rule matches %+v", when, h)
			}
		}
		if diff := cmp.Diff(user, userRuleWithoutWeights(t, w.ns, rt)); diff != "" {
			t.Errorf("%s: the route's own rule changed beyond its weights (-want +got):\n%s", when, diff)
		}
		w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = fmt.Sprintf("p%d", i+1) })
	}
	rel := w.waitFor("v2 released", 45*time.Second, released)
	if s := rel.Status.Rollout; !s.DesiredExtras.IsZero() || !s.Observed.Extras.IsZero() {
		t.Errorf("ended with extras %v (observed %v)", s.DesiredExtras, s.Observed.Extras)
	}
	w.checkNoExtras("after the rollout")
}

// TestMirrorFeatures: a mirror step behind a GatewayClass that does not
// list the mirror features is refused: the Release is aborted, Degraded
// with a message naming the class and the missing feature, and nothing of
// a mirror is written to the route. Once the class lists the features, a
// retry mirrors.
func TestMirrorFeatures(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	class := "mirror-" + w.ns
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/gw"}}
	create(t, w.c, gc)
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), gc) })
	setFeatures := func(features ...gwv1.FeatureName) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var got gwv1.GatewayClass
			if err := w.c.Get(ctx, client.ObjectKey{Name: class}, &got); err != nil {
				return err
			}
			got.Status.SupportedFeatures = nil
			for _, f := range features {
				got.Status.SupportedFeatures = append(got.Status.SupportedFeatures, gwv1.SupportedFeature{Name: f})
			}
			return w.c.Status().Update(ctx, &got)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setFeatures(gateway.FeatureRequestMirror)
	gw, err := gateway.BuildGateway(w.ns, "gw", class, gateway.Listener{Name: "http", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	create(t, w.c, gw)
	// GatewayClasses are cluster-scoped: the operator reads them through a
	// ClusterRoleBinding.
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: controller.Name + "-" + w.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: controller.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "upshift-operator"}},
	}
	create(t, w.c, binding)
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), binding) })

	w.start("operator")
	c := extrasCanary(strategy.SetWeight(25), strategy.SetMirror(20), strategy.PauseUntilResumed(), strategy.SetWeight(100))
	create(t, w.c, w.release("v1", v1alpha1.ReleaseStrategy{Canary: c}))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	rel := w.waitFor("the mirror refused", 45*time.Second, func(rel *v1alpha1.Release) bool {
		return rel.Status.Rollout.Phase == strategy.PhaseAborted && rel.Status.Rollout.Observed.Weight == 0
	})
	deg := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded)
	if deg == nil || deg.Status != metav1.ConditionTrue ||
		!strings.Contains(deg.Message, "GatewayClass "+class) || !strings.Contains(deg.Message, gateway.FeatureRequestPercentageMirror) {
		t.Errorf("Degraded condition %+v: want True, naming GatewayClass %s and %s", deg, class, gateway.FeatureRequestPercentageMirror)
	}
	if deg != nil {
		t.Logf("Degraded: %s", deg.Message)
	}
	if deg != nil && strings.Contains(deg.Message, gateway.FeatureRequestMirror+" ") {
		t.Errorf("Degraded names %s, which the class lists: %s", gateway.FeatureRequestMirror, deg.Message)
	}
	for _, s := range w.routeGenerations() {
		if len(s.roles) > 0 || s.annotated || s.mirrored {
			t.Errorf("the refused mirror wrote to the route: %v", w.routeGenerations())
			break
		}
	}
	w.checkNoExtras("refused")

	setFeatures(gateway.FeatureRequestMirror, gateway.FeatureRequestPercentageMirror)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Retry = "r1" })
	mirrored := func(a, b strategy.TrafficExtras) bool {
		return a.MirrorPercent == 20 && a.HeaderRoute == nil && a.Sticky == nil
	}
	w.pausedAt("the mirror at 25", 25, strategy.TrafficExtras{}, mirrored)
	rt := w.route()
	roles, _ := extraRoles(w.ns, rt)
	if diff := cmp.Diff([]gateway.RuleRole{gateway.RoleSplit}, roles); diff != "" {
		t.Fatalf("extra rules (-want +got):\n%s", diff)
	}
	var mirror *gwv1.HTTPRequestMirrorFilter
	for _, f := range w.ruleOf(rt, gateway.RoleSplit).Filters {
		if f.Type == gwv1.HTTPRouteFilterRequestMirror {
			mirror = f.RequestMirror
		}
	}
	// 20% of the stable side's 75% of the requests.
	want := &gwv1.HTTPRequestMirrorFilter{
		BackendRef: gwv1.BackendObjectReference{Group: new(gwv1.Group("")), Kind: new(gwv1.Kind("Service")), Name: "web-b", Port: new(gwv1.PortNumber(80))},
		Fraction:   &gwv1.Fraction{Numerator: 20 * 75, Denominator: new(int32(10000))},
	}
	if diff := cmp.Diff(want, mirror); diff != "" {
		t.Errorf("the split rule's RequestMirror (-want +got):\n%s", diff)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p1" })
	w.waitFor("v2 released", 45*time.Second, released)
	w.checkNoExtras("after the rollout")
	if s := snapshot(w.ns, w.route()); s.mirrored {
		t.Errorf("a RequestMirror is left after the rollout: %v", s)
	}
	t.Logf("route generations: %v", w.routeGenerations())
}
