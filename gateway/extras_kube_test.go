package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestExtrasOnKube: the extra rules pass the API server's validation of
// the standard-channel CRDs, read back (with the defaults the API server
// fills in) as programmed, are not written again, follow SetWeights, and
// their removal gives back the stored route.
func TestExtrasOnKube(t *testing.T) {
	env, ns, ref := mirroringWorld(t)
	ctx := context.Background()
	stored := getHTTPRoute(t, env.Client, ref)
	r, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	x := strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun, MirrorPercent: 10}
	if err := r.SetRoutes(ctx, routesAt(20, x)); err != nil {
		t.Fatal(err)
	}
	playController(t, env.Client, ref)
	st, err := r.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Accepted || st.Canary != strategy.SideB || !st.Extras.Equal(x) || st.Weights != (rollout.Weights{A: 80, B: 20}) {
		t.Fatalf("Routes: %+v", st)
	}
	writes := r.Counts().Writes
	if err := r.SetRoutes(ctx, routesAt(20, x)); err != nil {
		t.Fatal(err)
	}
	if r.Counts().Writes != writes {
		t.Errorf("SetRoutes rewrote a route that already holds the extras")
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Routes(ctx); err != nil || !st.Extras.Equal(x) || st.Weights != (rollout.Weights{A: 50, B: 50}) {
		t.Fatalf("Routes after SetWeights: %+v, %v", st, err)
	}
	if err := r.SetRoutes(ctx, routesAt(50, strategy.TrafficExtras{})); err != nil {
		t.Fatal(err)
	}
	var got gwv1.HTTPRoute
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &got); err != nil {
		t.Fatal(err)
	}
	want := stored.Spec.Rules
	want[1].BackendRefs[0].Weight, want[1].BackendRefs[1].Weight = ptr(int32(50)), ptr(int32(50))
	if diff := cmp.Diff(want, got.Spec.Rules); diff != "" {
		t.Errorf("after removal (-stored +got):\n%s", diff)
	}
}

// TestExtrasLeastPrivilege: header routes and sticky sessions need the
// routes' permissions and list on the routes of Config.PeerNamespaces (to
// place the extra rules among theirs), and say so while they lack it; a
// Gateway API mirror also needs get on the parent Gateways and on
// GatewayClasses, and says so while it lacks them, writing nothing.
func TestExtrasLeastPrivilege(t *testing.T) {
	env, ns, ref := mirroringWorld(t)
	ctx := context.Background()
	sa := env.ServiceAccount(t, ns, "upshift-router")
	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{APIGroups: []string{gwv1.GroupName}, Resources: []string{"httproutes"},
		ResourceNames: []string{"web"}, Verbs: []string{"get", "update"}})
	r, err := gateway.NewRouter(sa.Client, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary, PeerNamespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	shaped := routesAt(20, strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyRun})
	var ple *gateway.PeerListError
	if err := r.SetRoutes(ctx, shaped); !errors.As(err, &ple) || !apierrors.IsForbidden(err) || ple.Namespace != ns ||
		!strings.Contains(err.Error(), "grant list on httproutes") {
		t.Fatalf("header route and sticky sessions without list on httproutes: %v, want a *PeerListError naming the permission", err)
	}
	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{APIGroups: []string{gwv1.GroupName}, Resources: []string{"httproutes"}, Verbs: []string{"list"}})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := r.SetRoutes(ctx, shaped)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("header route and sticky sessions with the routes' permissions and list in the namespace: %v", err)
		}
	}
	before := getHTTPRoute(t, env.Client, ref)
	mirror := routesAt(20, strategy.TrafficExtras{MirrorPercent: 10})
	err = r.SetRoutes(ctx, mirror)
	if err == nil || !rollout.IsPermanent(err) || !strings.Contains(err.Error(), "Gateway "+ns+"/gw: forbidden") {
		t.Fatalf("mirror without get on gateways: %v, want a permanent error naming the Gateway", err)
	}
	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{APIGroups: []string{gwv1.GroupName}, Resources: []string{"gateways"}, Verbs: []string{"get"}})
	err = r.SetRoutes(ctx, mirror)
	if err == nil || !rollout.IsPermanent(err) || !strings.Contains(err.Error(), "GatewayClass mirroring-"+ns+": forbidden") {
		t.Fatalf("mirror without get on gatewayclasses: %v, want a permanent error naming the GatewayClass", err)
	}
	if got := getHTTPRoute(t, env.Client, ref); got.ResourceVersion != before.ResourceVersion {
		t.Fatalf("a refused mirror wrote the route")
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gatewayclasses-" + ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{gwv1.GroupName}, Resources: []string{"gatewayclasses"}, Verbs: []string{"get"}}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: []rbacv1.Subject{sa.Subject}}
	if err := env.Client.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cr) })
	if err := env.Client.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
	deadline := time.Now().Add(30 * time.Second)
	for err = r.SetRoutes(ctx, mirror); err != nil; err = r.SetRoutes(ctx, mirror) {
		if time.Now().After(deadline) {
			t.Fatalf("mirror with get on gateways and gatewayclasses: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, err := r.Routes(ctx); err != nil || st.Extras.MirrorPercent != 10 {
		t.Fatalf("Routes: %+v, %v", st, err)
	}
}

// mirroringWorld makes a namespace with a GatewayClass that lists the
// mirror features, a Gateway of that class and the route of extrasRoute
// attached to it, on the test API server.
func mirroringWorld(t *testing.T) (*kubetest.Env, string, gateway.RouteRef) {
	t.Helper()
	env := kubetest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	class := "mirroring-" + ns
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/gw"}}
	if err := env.Client.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), gc) })
	gc.Status.SupportedFeatures = []gwv1.SupportedFeature{{Name: gateway.FeatureRequestMirror}, {Name: gateway.FeatureRequestPercentageMirror}}
	if err := env.Client.Status().Update(ctx, gc); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.BuildGateway(ns, "gw", class, gateway.Listener{Name: "http", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	rt := extrasRoute(t)
	rt.Namespace = ns
	if err := env.Client.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	return env, ns, gateway.RouteRef{Namespace: ns, Name: "web"}
}
