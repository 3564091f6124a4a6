package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/extras and testdata/json")

var webRef = gateway.RouteRef{Namespace: "shop", Name: "web"}

// extrasRoute is the user's route: an admin rule, the rule R that splits
// web and web-canary (a URLRewrite, a request header filter, a filter on
// the canary ref), and a static rule.
func extrasRoute(t testing.TB) *gwv1.HTTPRoute {
	t.Helper()
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: stable, B: canary,
		Hostnames: []string{"shop.example"}, PathPrefix: "/shop"})
	if err != nil {
		t.Fatal(err)
	}
	R := &rt.Spec.Rules[0]
	R.Filters = []gwv1.HTTPRouteFilter{
		{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{Path: &gwv1.HTTPPathModifier{
			Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/")}}},
		{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
			Set: []gwv1.HTTPHeader{{Name: "X-Shop", Value: "1"}}}},
	}
	R.BackendRefs[1].Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterResponseHeaderModifier,
		ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Add: []gwv1.HTTPHeader{{Name: "X-Version", Value: "canary"}}}}}
	exact, prefix := gwv1.PathMatchExact, gwv1.PathMatchPathPrefix
	admin := gwv1.HTTPRouteRule{Name: ptr(gwv1.SectionName("admin")),
		Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &exact, Value: ptr("/admin")}}},
		BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "admin", Port: ptr(gwv1.PortNumber(80))}}}}}
	static := gwv1.HTTPRouteRule{
		Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: ptr("/static")}}},
		BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "static", Port: ptr(gwv1.PortNumber(80))}}}}}
	rt.Spec.Rules = []gwv1.HTTPRouteRule{admin, *R, static}
	return rt
}

// mirrorClass lists the features a Gateway API mirror needs; plainClass
// lists none of them.
func gatewayObjects(class string) []client.Object {
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	mirror := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "mirroring"}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/gw"},
		Status: gwv1.GatewayClassStatus{SupportedFeatures: []gwv1.SupportedFeature{
			{Name: "HTTPRouteRequestMirror"}, {Name: "HTTPRouteRequestPercentageMirror"}}}}
	plain := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/gw"},
		Status: gwv1.GatewayClassStatus{SupportedFeatures: []gwv1.SupportedFeature{{Name: "HTTPRouteRequestMirror"}}}}
	return []client.Object{gw, mirror, plain}
}

// extrasWorld is a fake API server holding objs and the Gateway of class,
// and a Router over webRef.
func extrasWorld(t fatalTB, class string, cfg gateway.Config, objs ...client.Object) (client.Client, *gateway.Router) {
	t.Helper()
	objs = append(objs, gatewayObjects(class)...)
	c := fakeclient.NewClientBuilder().WithScheme(fuzzScheme).
		WithTypeConverters(managedfields.NewDeducedTypeConverter()).
		WithObjects(objs...).
		WithStatusSubresource(&gwv1.HTTPRoute{}, &gwv1.GRPCRoute{}, &gwv1.GatewayClass{}).Build()
	if len(cfg.Routes) == 0 {
		cfg.Routes = []gateway.RouteRef{webRef}
	}
	cfg.A, cfg.B = stable, canary
	r, err := gateway.NewRouter(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

func getHTTPRoute(t fatalTB, c client.Client, ref gateway.RouteRef) *gwv1.HTTPRoute {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	return &rt
}

var (
	grid       = []int32{10, 20, 50, 100}
	stickyRun  = &strategy.Sticky{Run: "0a1b2c3d", Grid: grid}
	betaHeader = &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{
		{Name: "X-Beta", Value: "1"},
		{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"},
	}}
)

func routesAt(canaryWeight int32, x strategy.TrafficExtras) rollout.Routes {
	return rollout.Routes{Weights: rollout.Weights{A: 100 - canaryWeight, B: canaryWeight}, Canary: strategy.SideB, Extras: x}
}

// goldenView is what a golden file holds: the route's rules, the rules
// annotation, and the mirror's TraefikService spec.
type goldenView struct {
	Annotation     any                  `json:"annotation,omitempty"`
	Rules          []gwv1.HTTPRouteRule `json:"rules"`
	TraefikService any                  `json:"traefikService,omitempty"`
}

func checkGolden(t *testing.T, name string, v goldenView) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "extras", name+".yaml")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func viewOf(t *testing.T, c client.Client, rt *gwv1.HTTPRoute) goldenView {
	t.Helper()
	v := goldenView{Rules: rt.Spec.Rules}
	if raw, ok := rt.Annotations[gateway.RulesAnnotation("shop", stable, canary)]; ok {
		if err := json.Unmarshal([]byte(raw), &v.Annotation); err != nil {
			t.Fatal(err)
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gateway.TraefikServiceGVK)
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: gateway.MirrorServiceName("shop", stable, canary)}, u); err == nil {
		v.TraefikService = u.Object["spec"]
	}
	return v
}

// userRule is the route's rule that is not owned (has no extra-rule name).
func userRules(rt *gwv1.HTTPRouteRule) bool {
	return rt.Name == nil || !strings.HasPrefix(string(*rt.Name), "upshift-")
}

// withWeights is rule R of extrasRoute with the given weights.
func withWeights(t testing.TB, wa, wb int32) []gwv1.HTTPRouteRule {
	rules := extrasRoute(t).Spec.Rules
	rules[1].BackendRefs[0].Weight = ptr(wa)
	rules[1].BackendRefs[1].Weight = ptr(wb)
	return rules
}

// TestSetRoutesGolden programs each layout on the route and compares the
// result with testdata/extras; the user's rules stay as they were but for
// R's weights, every extra rule carries R's filters, Routes reports the
// extras, a second SetRoutes writes nothing, and removing the extras gives
// back the user's route exactly.
func TestSetRoutesGolden(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mode   gateway.MirrorMode
		weight int32
		extras strategy.TrafficExtras
		roles  []gateway.RuleRole
	}{
		{"header", "", 10, strategy.TrafficExtras{HeaderRoute: betaHeader}, []gateway.RuleRole{gateway.RoleHeader}},
		{"header-sticky", "", 20, strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun},
			[]gateway.RuleRole{gateway.RoleHeader, gateway.RoleStickyCanary, gateway.RoleStickyStable, gateway.RoleSplit}},
		{"mirror-gatewayapi", "", 10, strategy.TrafficExtras{MirrorPercent: 20}, []gateway.RuleRole{gateway.RoleSplit}},
		{"mirror-traefikservice", gateway.MirrorTraefikService, 10, strategy.TrafficExtras{MirrorPercent: 20}, []gateway.RuleRole{gateway.RoleSplit}},
		{"sticky-mirror-traefikservice", gateway.MirrorTraefikService, 20, strategy.TrafficExtras{MirrorPercent: 20, Sticky: stickyRun},
			[]gateway.RuleRole{gateway.RoleStickyCanary, gateway.RoleStickyStable, gateway.RoleSplit}},
		{"sticky-0", "", 0, strategy.TrafficExtras{Sticky: stickyRun}, []gateway.RuleRole{gateway.RoleStickyStable, gateway.RoleSplit}},
		{"sticky-50", "", 50, strategy.TrafficExtras{Sticky: stickyRun}, []gateway.RuleRole{gateway.RoleStickyCanary, gateway.RoleStickyStable, gateway.RoleSplit}},
		{"sticky-100", "", 100, strategy.TrafficExtras{Sticky: stickyRun}, []gateway.RuleRole{gateway.RoleStickyCanary, gateway.RoleSplit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := extrasWorld(t, "mirroring", gateway.Config{Mirror: tc.mode}, extrasRoute(t))
			if err := r.SetRoutes(ctx, routesAt(tc.weight, tc.extras)); err != nil {
				t.Fatal(err)
			}
			rt := getHTTPRoute(t, c, webRef)
			checkGolden(t, tc.name, viewOf(t, c, rt))

			// The user's rules: R differs in its weights only.
			var user []gwv1.HTTPRouteRule
			var roles []gateway.RuleRole
			R := -1
			for i := range rt.Spec.Rules {
				rule := &rt.Spec.Rules[i]
				if userRules(rule) {
					if R < 0 && len(user) == 1 {
						R = i
					}
					user = append(user, *rule)
					continue
				}
				roles = append(roles, gateway.RuleRole(strings.TrimPrefix(string(*rule.Name), "upshift-"+extraHex()+"-")))
			}
			if diff := cmp.Diff(withWeights(t, 100-tc.weight, tc.weight), user); diff != "" {
				t.Errorf("user rules (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.roles, roles); diff != "" {
				t.Errorf("extra rules (-want +got):\n%s", diff)
			}
			// Extra rules sit right before R and carry R's filters.
			for k := range roles {
				rule := rt.Spec.Rules[R-len(roles)+k]
				if userRules(&rule) {
					t.Fatalf("rule %d is not owned: extra rules must sit right before R (rule %d)", R-len(roles)+k, R)
				}
				if diff := cmp.Diff(rt.Spec.Rules[R].Filters, rule.Filters[:len(rt.Spec.Rules[R].Filters)]); diff != "" {
					t.Errorf("%s: R's filters (-R +owned):\n%s", *rule.Name, diff)
				}
			}

			st, err := r.Routes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Canary != strategy.SideB || !st.Extras.Equal(tc.extras) {
				t.Errorf("Routes: canary %q extras %+v, want B and %+v", st.Canary, st.Extras, tc.extras)
			}
			if st.Weights != (rollout.Weights{A: 100 - tc.weight, B: tc.weight}) {
				t.Errorf("Routes: weights %+v", st.Weights)
			}
			writes := r.Counts().Writes
			if err := r.SetRoutes(ctx, routesAt(tc.weight, tc.extras)); err != nil {
				t.Fatal(err)
			}
			if got := r.Counts().Writes; got != writes {
				t.Errorf("a second SetRoutes wrote the route (%d writes, then %d)", writes, got)
			}

			// Removal restores the user's route exactly.
			if err := r.SetRoutes(ctx, routesAt(tc.weight, strategy.TrafficExtras{})); err != nil {
				t.Fatal(err)
			}
			rt = getHTTPRoute(t, c, webRef)
			if diff := cmp.Diff(withWeights(t, 100-tc.weight, tc.weight), rt.Spec.Rules); diff != "" {
				t.Errorf("after removal (-want +got):\n%s", diff)
			}
			if v, ok := rt.Annotations[gateway.RulesAnnotation("shop", stable, canary)]; ok {
				t.Errorf("rules annotation left behind: %s", v)
			}
			st, err = r.Routes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Extras.IsZero() || st.Canary != "" {
				t.Errorf("Routes after removal: %q %+v", st.Canary, st.Extras)
			}
			// A TraefikService goes once the route without it is applied.
			playController(t, c, webRef)
			if _, err := r.Routes(ctx); err != nil {
				t.Fatal(err)
			}
			if v := viewOf(t, c, rt); v.TraefikService != nil {
				t.Errorf("TraefikService left behind: %v", v.TraefikService)
			}
		})
	}
}

func extraHex() string {
	return strings.TrimPrefix(gateway.ClaimAnnotation("shop", stable, canary), gateway.ClaimAnnotationPrefix)
}

// TestSetWeightsMovesTheThreshold: with sticky sessions on, SetWeights
// rebuilds the sticky rules for the new weight in the same update, and
// Weights reads R only.
func TestSetWeightsMovesTheThreshold(t *testing.T) {
	ctx := context.Background()
	x := strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun, MirrorPercent: 10}
	for _, w := range []int32{10, 20, 50, 100, 20, 0} {
		c, r := extrasWorld(t, "mirroring", gateway.Config{}, extrasRoute(t))
		if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
			t.Fatal(err)
		}
		before := r.Counts().Writes
		if err := r.SetWeights(ctx, rollout.Weights{A: 100 - w, B: w}); err != nil {
			t.Fatal(err)
		}
		want := getHTTPRoute(t, c, webRef)
		// The same layout as SetRoutes writes at w, on a fresh route.
		c2, r2 := extrasWorld(t, "mirroring", gateway.Config{}, extrasRoute(t))
		if err := r2.SetRoutes(ctx, routesAt(w, x)); err != nil {
			t.Fatal(err)
		}
		got := getHTTPRoute(t, c2, webRef)
		if diff := cmp.Diff(got.Spec.Rules, want.Spec.Rules); diff != "" {
			t.Errorf("w=%d: SetWeights vs SetRoutes (-SetRoutes +SetWeights):\n%s", w, diff)
		}
		if n := r.Counts().Writes - before; n != 1 && w != 10 {
			t.Errorf("w=%d: SetWeights made %d writes, want 1", w, n)
		}
		st, err := r.Routes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Weights != (rollout.Weights{A: 100 - w, B: w}) || !st.Extras.Equal(x) {
			t.Errorf("w=%d: Routes %+v %+v", w, st.Weights, st.Extras)
		}
	}
}

// TestForeignEdit: an extra rule edited by another writer makes Routes
// report no extras, and SetRoutes refuses to overwrite it.
func TestForeignEdit(t *testing.T) {
	ctx := context.Background()
	c, r := extrasWorld(t, "mirroring", gateway.Config{}, extrasRoute(t))
	x := strategy.TrafficExtras{HeaderRoute: betaHeader}
	if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
		t.Fatal(err)
	}
	rt := getHTTPRoute(t, c, webRef)
	rt.Spec.Rules[1].Matches[0].Headers[0].Value = "2" // the header rule
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	edited := getHTTPRoute(t, c, webRef)
	st, err := r.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Extras.IsZero() {
		t.Errorf("Routes reports %+v over an edited rule", st.Extras)
	}
	err = r.SetRoutes(ctx, routesAt(20, x))
	var conflict *gateway.ExtraRuleConflictError
	if !errors.As(err, &conflict) || !rollout.IsPermanent(err) || conflict.Rule != 1 ||
		conflict.Name != gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader) {
		t.Fatalf("SetRoutes: %v (%T), want a permanent *ExtraRuleConflictError for rule 1", err, err)
	}
	if got := getHTTPRoute(t, c, webRef); got.ResourceVersion != edited.ResourceVersion {
		t.Errorf("SetRoutes wrote the route after refusing")
	}
	// SetWeights still moves R, and leaves the other writer's rule alone.
	if err := r.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
		t.Fatal(err)
	}
	got := getHTTPRoute(t, c, webRef)
	if diff := cmp.Diff(edited.Spec.Rules[1], got.Spec.Rules[1]); diff != "" {
		t.Errorf("SetWeights touched the edited rule (-want +got):\n%s", diff)
	}
	if w, err := r.Weights(ctx); err != nil || w.Weights != (rollout.Weights{A: 70, B: 30}) {
		t.Errorf("Weights: %+v, %v", w.Weights, err)
	}
}

// TestGitOpsRestore: a GitOps tool puts its copy of the route back (the
// extra rules gone, the annotation kept or not); Routes reports no extras
// and the next SetRoutes restores them.
func TestGitOpsRestore(t *testing.T) {
	ctx := context.Background()
	for _, keepAnnotation := range []bool{true, false} {
		c, r := extrasWorld(t, "mirroring", gateway.Config{}, extrasRoute(t))
		x := strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun}
		if err := r.SetRoutes(ctx, routesAt(20, x)); err != nil {
			t.Fatal(err)
		}
		programmed := getHTTPRoute(t, c, webRef)
		rt := programmed.DeepCopy()
		rt.Spec.Rules = extrasRoute(t).Spec.Rules
		if !keepAnnotation {
			delete(rt.Annotations, gateway.RulesAnnotation("shop", stable, canary))
		}
		if err := c.Update(ctx, rt); err != nil {
			t.Fatal(err)
		}
		st, err := r.Routes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Extras.IsZero() || st.Canary != "" {
			t.Errorf("keep=%v: Routes reports %q %+v without the extra rules", keepAnnotation, st.Canary, st.Extras)
		}
		if err := r.SetRoutes(ctx, routesAt(20, x)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(programmed.Spec.Rules, getHTTPRoute(t, c, webRef).Spec.Rules); diff != "" {
			t.Errorf("keep=%v: restored (-want +got):\n%s", keepAnnotation, diff)
		}
		if st, _ := r.Routes(ctx); !st.Extras.Equal(x) {
			t.Errorf("keep=%v: Routes after the restore: %+v", keepAnnotation, st.Extras)
		}
	}
}

// TestRefusals: each refusal is typed, permanent, names the field, and
// writes nothing.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	sticky := strategy.TrafficExtras{Sticky: stickyRun}
	for _, tc := range []struct {
		name   string
		class  string
		mode   gateway.MirrorMode
		edit   func(*gwv1.HTTPRoute)
		extras strategy.TrafficExtras
		check  func(error) bool
		field  string
	}{
		{name: "gatewayclass without the mirror features", class: "plain", extras: strategy.TrafficExtras{MirrorPercent: 10},
			check: func(err error) bool {
				var u *gateway.UnsupportedError
				return errors.Is(err, rollout.ErrUnsupported) && errors.As(err, &u) && u.GatewayClass == "plain" &&
					cmp.Equal(u.Missing, []string{gateway.FeatureRequestPercentageMirror})
			}, field: "HTTPRouteRequestPercentageMirror"},
		{name: "too many rules", class: "mirroring", extras: strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun},
			edit: func(rt *gwv1.HTTPRoute) {
				for i := 0; i < 10; i++ {
					rt.Spec.Rules = append(rt.Spec.Rules, rt.Spec.Rules[2])
				}
			},
			check: func(err error) bool {
				var l *gateway.RuleLimitError
				return errors.As(err, &l) && l.Need == 17 && l.Max == 16
			}, field: "spec.rules"},
		{name: "too many header matches", class: "mirroring", extras: strategy.TrafficExtras{HeaderRoute: betaHeader},
			edit: func(rt *gwv1.HTTPRoute) {
				for i := 0; i < 15; i++ {
					rt.Spec.Rules[1].Matches[0].Headers = append(rt.Spec.Rules[1].Matches[0].Headers,
						gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName("X-H" + string(rune('a'+i))), Value: "1"})
				}
			},
			check: func(err error) bool {
				var l *gateway.RuleLimitError
				return errors.As(err, &l) && l.Need == 17
			}, field: "spec.rules[1].matches[0].headers"},
		{name: "too many matches in the route", class: "mirroring", extras: strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun},
			edit: func(rt *gwv1.HTTPRoute) {
				for i := 0; i < 39; i++ {
					m := *rt.Spec.Rules[1].Matches[0].DeepCopy()
					m.Path.Value = ptr(fmt.Sprintf("/shop/%d", i))
					rt.Spec.Rules[1].Matches = append(rt.Spec.Rules[1].Matches, m)
				}
			},
			check: func(err error) bool {
				var l *gateway.RuleLimitError
				return errors.As(err, &l) && l.Need == 5*40+2 && l.Max == 128
			}, field: "spec.rules[*].matches"},
		{name: "R matches the header", class: "mirroring", extras: strategy.TrafficExtras{HeaderRoute: betaHeader},
			edit: func(rt *gwv1.HTTPRoute) {
				rt.Spec.Rules[1].Matches[0].Headers = []gwv1.HTTPHeaderMatch{{Name: "x-beta", Value: "0"}}
			},
			check: func(err error) bool { var h *gateway.HeaderClashError; return errors.As(err, &h) },
			field: "spec.rules[1].matches[0].headers[0]"},
		{name: "R matches the cookie header with sticky sessions", class: "mirroring", extras: sticky,
			edit: func(rt *gwv1.HTTPRoute) {
				rt.Spec.Rules[1].Matches[0].Headers = []gwv1.HTTPHeaderMatch{{Name: "Cookie", Value: "a=b"}}
			},
			check: func(err error) bool { var h *gateway.HeaderClashError; return errors.As(err, &h) },
			field: "Cookie"},
		{name: "two cookie matches", class: "mirroring", extras: strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{
			{Type: strategy.HeaderCookie, Name: "a", Value: "1"}, {Type: strategy.HeaderCookie, Name: "b", Value: "2"}}}},
			check: func(err error) bool { var h *gateway.HeaderClashError; return errors.As(err, &h) },
			field: "extras.headerRoute.matches[1]"},
		{name: "R sets Set-Cookie", class: "mirroring", extras: sticky,
			edit: func(rt *gwv1.HTTPRoute) {
				rt.Spec.Rules[1].Filters = append(rt.Spec.Rules[1].Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterResponseHeaderModifier,
					ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "set-cookie", Value: "a=b"}}}})
			},
			check: func(err error) bool { var s *gateway.SetCookieClashError; return errors.As(err, &s) },
			field: "spec.rules[1].filters[2].responseHeaderModifier.set"},
		{name: "R's canary ref sets Set-Cookie", class: "mirroring", extras: sticky,
			edit: func(rt *gwv1.HTTPRoute) {
				rt.Spec.Rules[1].BackendRefs[1].Filters[0].ResponseHeaderModifier.Set = []gwv1.HTTPHeader{{Name: "Set-Cookie", Value: "a=b"}}
			},
			check: func(err error) bool { var s *gateway.SetCookieClashError; return errors.As(err, &s) },
			field: "spec.rules[1].backendRefs[1].filters[0]"},
		{name: "two rules hold both backends", class: "mirroring", extras: sticky,
			edit: func(rt *gwv1.HTTPRoute) {
				second := *rt.Spec.Rules[1].DeepCopy()
				second.Matches[0].Path.Value = ptr("/other")
				rt.Spec.Rules = append(rt.Spec.Rules, second)
			},
			check: func(err error) bool { return errors.Is(err, rollout.ErrUnsupported) },
			field: "2 rules hold both backends"},
		{name: "bad grid", class: "mirroring", extras: strategy.TrafficExtras{Sticky: &strategy.Sticky{Run: "r", Grid: []int32{10, 50}}},
			check: func(err error) bool { return errors.Is(err, gateway.ErrInvalid) },
			field: "extras.sticky.grid[1]"},
		{name: "stable ref with filters through a TraefikService", class: "mirroring", mode: gateway.MirrorTraefikService,
			extras: strategy.TrafficExtras{MirrorPercent: 10},
			edit: func(rt *gwv1.HTTPRoute) {
				rt.Spec.Rules[1].BackendRefs[0].Filters = rt.Spec.Rules[1].BackendRefs[1].Filters
			},
			check: func(err error) bool { return errors.Is(err, rollout.ErrUnsupported) },
			field: "stable backendRef has filters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := extrasRoute(t)
			if tc.edit != nil {
				tc.edit(rt)
			}
			c, r := extrasWorld(t, tc.class, gateway.Config{Mirror: tc.mode}, rt)
			before := getHTTPRoute(t, c, webRef)
			err := r.SetRoutes(ctx, routesAt(20, tc.extras))
			if err == nil || !tc.check(err) || !rollout.IsPermanent(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("SetRoutes: %v (%T): want a permanent typed error naming %s", err, err, tc.field)
			}
			after := getHTTPRoute(t, c, webRef)
			if after.ResourceVersion != before.ResourceVersion || r.Counts().Writes != 0 {
				t.Errorf("the route was written (%d writes)", r.Counts().Writes)
			}
			if v := viewOf(t, c, after); v.TraefikService != nil {
				t.Errorf("a TraefikService was written: %v", v.TraefikService)
			}
		})
	}
}

// TestGRPCRouteHeaderRoute: a GRPCRoute takes a header route as an owned
// rule; sticky sessions and mirrors are refused, unwritten.
func TestGRPCRouteHeaderRoute(t *testing.T) {
	ctx := context.Background()
	svc := "shop.Cart"
	rt := &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules: []gwv1.GRPCRouteRule{{
				Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: &svc}}},
				BackendRefs: []gwv1.GRPCBackendRef{
					{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(100))}},
					{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web-canary", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(0))}},
				},
			}},
		},
	}
	ref := gateway.RouteRef{Kind: gateway.KindGRPCRoute, Namespace: "shop", Name: "cart"}
	c, r := extrasWorld(t, "mirroring", gateway.Config{Routes: []gateway.RouteRef{ref}}, rt)
	for _, x := range []strategy.TrafficExtras{{Sticky: stickyRun}, {MirrorPercent: 10}} {
		if err := r.SetRoutes(ctx, routesAt(10, x)); !errors.Is(err, rollout.ErrUnsupported) || !rollout.IsPermanent(err) {
			t.Errorf("%+v: %v, want a permanent ErrUnsupported", x, err)
		}
	}
	if r.Counts().Writes != 0 {
		t.Fatalf("%d writes after refusals", r.Counts().Writes)
	}
	x := strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}}
	if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
		t.Fatal(err)
	}
	var got gwv1.GRPCRoute
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "cart"}, &got); err != nil {
		t.Fatal(err)
	}
	exact := gwv1.GRPCHeaderMatchExact
	methodExact := gwv1.GRPCMethodMatchExact
	want := []gwv1.GRPCRouteRule{{
		Name: ptr(gwv1.SectionName(gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader))),
		Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Type: &methodExact, Service: &svc},
			Headers: []gwv1.GRPCHeaderMatch{{Type: &exact, Name: "x-beta", Value: "1"}}}},
		BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Group: ptr(gwv1.Group("")), Kind: ptr(gwv1.Kind("Service")), Name: "web-canary", Port: ptr(gwv1.PortNumber(80))}, Weight: ptr(int32(1))}}},
	}, rt.Spec.Rules[0]}
	want[1].BackendRefs[0].Weight, want[1].BackendRefs[1].Weight = ptr(int32(90)), ptr(int32(10))
	if diff := cmp.Diff(want, got.Spec.Rules); diff != "" {
		t.Errorf("GRPCRoute rules (-want +got):\n%s", diff)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(x) || st.Weights != (rollout.Weights{A: 90, B: 10}) {
		t.Errorf("Routes: %+v, %v", st, err)
	}
}

// TestTraefikMirrorNeedsControllerRuntime: the clientset cannot write a
// TraefikService.
func TestTraefikMirrorNeedsControllerRuntime(t *testing.T) {
	cs := gwfake.NewSimpleClientset(extrasRoute(t))
	r, err := gateway.NewRouterForClientset(cs, gateway.Config{Routes: []gateway.RouteRef{webRef}, A: stable, B: canary, Mirror: gateway.MirrorTraefikService})
	if err != nil {
		t.Fatal(err)
	}
	err = r.SetRoutes(context.Background(), routesAt(10, strategy.TrafficExtras{MirrorPercent: 10}))
	if !errors.Is(err, rollout.ErrUnsupported) || !rollout.IsPermanent(err) {
		t.Fatalf("SetRoutes: %v, want a permanent ErrUnsupported", err)
	}
	// A header route works through the clientset.
	if err := r.SetRoutes(context.Background(), routesAt(10, strategy.TrafficExtras{HeaderRoute: betaHeader})); err != nil {
		t.Fatal(err)
	}
}

// TestTraefikServiceOutlivesItsRoute: when the mirror goes, the
// TraefikService stays until Routes sees the route that no longer points
// at it accepted (and settled) for its generation: Traefik drops a router
// whose service is missing, so deleting it with the route's write would
// send, for as long as Traefik's Gateway provider lags its CRD provider,
// the sticky-stable rule's requests to the split rule, to be handed new
// tickets (measured through Traefik, e2e/traefik). A Router started later
// sweeps one left behind.
func TestTraefikServiceOutlivesItsRoute(t *testing.T) {
	ctx := context.Background()
	clk := fake.NewClock(time.Unix(1_000_000, 0))
	cfg := gateway.Config{Mirror: gateway.MirrorTraefikService, SettleDelay: time.Second, Clock: clk}
	c, r := extrasWorld(t, "plain", cfg, extrasRoute(t))
	present := func() bool {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gateway.TraefikServiceGVK)
		err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: gateway.MirrorServiceName("shop", stable, canary)}, u)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	routes := func() {
		t.Helper()
		if _, err := r.Routes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetRoutes(ctx, routesAt(20, strategy.TrafficExtras{MirrorPercent: 20, Sticky: stickyRun})); err != nil {
		t.Fatal(err)
	}
	playController(t, c, webRef)
	routes()
	clk.Advance(2 * time.Second)
	routes()
	if !present() {
		t.Fatal("no TraefikService while the mirror is programmed")
	}
	if err := r.SetRoutes(ctx, routesAt(20, strategy.TrafficExtras{Sticky: stickyRun})); err != nil {
		t.Fatal(err)
	}
	// The fake client keeps metadata.generation: move it as the API
	// server does on a spec change.
	rt := getHTTPRoute(t, c, webRef)
	rt.Generation++
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if !present() {
		t.Fatal("SetRoutes deleted the TraefikService before the route without it was applied")
	}
	routes() // the new generation not yet accepted
	if !present() {
		t.Fatal("deleted before the route without it was accepted")
	}
	playController(t, c, webRef)
	routes() // accepted, settling
	if !present() {
		t.Fatal("deleted before the settle delay")
	}
	clk.Advance(2 * time.Second)
	routes()
	if present() {
		t.Fatal("TraefikService left once the route without it was applied")
	}

	// One left behind (by a process that stopped before its Routes saw
	// the route applied) goes with the first Routes of a new Router.
	if err := r.SetRoutes(ctx, routesAt(20, strategy.TrafficExtras{MirrorPercent: 20})); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, routesAt(20, strategy.TrafficExtras{})); err != nil {
		t.Fatal(err)
	}
	playController(t, c, webRef)
	cfg.Routes, cfg.A, cfg.B, cfg.SettleDelay = []gateway.RouteRef{webRef}, stable, canary, 0
	r2, err := gateway.NewRouter(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !present() {
		t.Fatal("no TraefikService left to sweep")
	}
	if _, err := r2.Routes(ctx); err != nil {
		t.Fatal(err)
	}
	if present() {
		t.Fatal("a new Router left the TraefikService behind")
	}
}

// TestTraefikServiceRepaired: a TraefikService deleted or edited by
// someone else makes Routes report no extras; SetRoutes writes it back.
func TestTraefikServiceRepaired(t *testing.T) {
	ctx := context.Background()
	c, r := extrasWorld(t, "plain", gateway.Config{Mirror: gateway.MirrorTraefikService, MirrorMaxBodySize: -1}, extrasRoute(t))
	x := strategy.TrafficExtras{MirrorPercent: 30}
	if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gateway.TraefikServiceGVK)
	key := types.NamespacedName{Namespace: "shop", Name: gateway.MirrorServiceName("shop", stable, canary)}
	if err := c.Get(ctx, key, u); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, int64(5), "spec", "mirroring", "maxBodySize"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.IsZero() {
		t.Errorf("Routes over an edited TraefikService: %+v, %v", st.Extras, err)
	}
	if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(x) {
		t.Errorf("Routes after the repair: %+v, %v", st.Extras, err)
	}
	if err := c.Get(ctx, key, u); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedInt64(u.Object, "spec", "mirroring", "maxBodySize"); v != -1 {
		t.Errorf("maxBodySize %d, want -1", v)
	}
}

// TestRoutesAccepted: acceptance is the weights' (every parent accepted
// the route's generation).
func TestRoutesAccepted(t *testing.T) {
	ctx := context.Background()
	c, r := extrasWorld(t, "mirroring", gateway.Config{}, extrasRoute(t))
	x := strategy.TrafficExtras{HeaderRoute: betaHeader}
	if err := r.SetRoutes(ctx, routesAt(10, x)); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || st.Accepted {
		t.Fatalf("Routes before any status: accepted=%v, %v", st.Accepted, err)
	}
	playController(t, c, webRef)
	st, err := r.Routes(ctx)
	if err != nil || !st.Accepted || !st.Extras.Equal(x) {
		t.Fatalf("Routes after acceptance: %+v, %v", st, err)
	}
}

// TestRouteGroupExtras: every route of a group gets the extras; Routes
// reports them only while every route holds them.
func TestRouteGroupExtras(t *testing.T) {
	ctx := context.Background()
	second := extrasRoute(t)
	second.Name = "web-2"
	ref2 := gateway.RouteRef{Namespace: "shop", Name: "web-2"}
	c, r := extrasWorld(t, "mirroring", gateway.Config{Routes: []gateway.RouteRef{webRef, ref2}}, extrasRoute(t), second)
	x := strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun}
	rs := routesAt(20, x)
	rs.Weights, rs.Canary = rollout.Weights{A: 20, B: 80}, strategy.SideA // the canary on side A
	if err := r.SetRoutes(ctx, rs); err != nil {
		t.Fatal(err)
	}
	st, err := r.Routes(ctx)
	if err != nil || st.Canary != strategy.SideA || !st.Extras.Equal(x) {
		t.Fatalf("Routes: %q %+v, %v", st.Canary, st.Extras, err)
	}
	for _, ref := range []gateway.RouteRef{webRef, ref2} {
		rt := getHTTPRoute(t, c, ref)
		header := rt.Spec.Rules[1]
		if header.Name == nil || string(*header.Name) != gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader) ||
			header.BackendRefs[0].Name != gwv1.ObjectName(stable.Name) {
			t.Errorf("%s: rule 1 is %v to %s, want the header rule to side A (%s)", ref, header.Name, header.BackendRefs[0].Name, stable.Name)
		}
	}
	rt := getHTTPRoute(t, c, ref2)
	rt.Spec.Rules = append(rt.Spec.Rules[:1], rt.Spec.Rules[2:]...) // drop the header rule of one route
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.IsZero() {
		t.Errorf("Routes with one route incomplete: %+v, %v", st.Extras, err)
	}
}

func TestConfigMirrorValidation(t *testing.T) {
	for _, cfg := range []gateway.Config{{Mirror: "Envoy"}, {MirrorMaxBodySize: -2}} {
		cfg.Routes, cfg.A, cfg.B = []gateway.RouteRef{webRef}, stable, canary
		err := cfg.Validate()
		if !errors.Is(err, gateway.ErrInvalid) || !strings.Contains(err.Error(), "mirror") {
			t.Errorf("%+v: %v, want ErrInvalid naming the mirror field", cfg, err)
		}
	}
}
