package gateway_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestExtrasOnKube: the owned rules pass the API server's validation of
// the standard-channel CRDs, read back (with the defaults the API server
// fills in) as programmed, are not written again, follow SetWeights, and
// their removal gives back the stored route.
func TestExtrasOnKube(t *testing.T) {
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
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
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
