package kubetest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

func TestServerVersion(t *testing.T) {
	env := kubetest.Get(t)
	v, err := env.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != kubetest.KubeVersion {
		t.Errorf("server reports %s, want %s", v.GitVersion, kubetest.KubeVersion)
	}
}

func TestGatewayCRDsStandardChannel(t *testing.T) {
	env := kubetest.Get(t)
	for _, want := range []string{
		"gatewayclasses.gateway.networking.k8s.io",
		"gateways.gateway.networking.k8s.io",
		"httproutes.gateway.networking.k8s.io",
		"grpcroutes.gateway.networking.k8s.io",
		"referencegrants.gateway.networking.k8s.io",
	} {
		found := false
		for _, got := range env.CRDs {
			found = found || got == want
		}
		if !found {
			t.Errorf("CRD %s not installed; installed: %v", want, env.CRDs)
		}
	}
	for _, got := range env.CRDs {
		if strings.HasPrefix(got, "x") || strings.Contains(got, ".x-k8s.io") {
			t.Errorf("experimental CRD %s installed", got)
		}
	}
}

func route(ns, name string) *gatewayv1.HTTPRoute {
	port := gatewayv1.PortNumber(80)
	w := int32(90)
	backend := func(svc string, weight int32) gatewayv1.HTTPBackendRef {
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port},
			Weight:                 &weight,
		}}
	}
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"owner": "test"}},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{
				BackendRefs: []gatewayv1.HTTPBackendRef{backend("stable", w), backend("canary", 100-w)},
			}},
		},
	}
}

// An object written through the controller-runtime client reads back the
// same through the typed clientset.
func TestHTTPRouteRoundTrip(t *testing.T) {
	t.Parallel()
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := t.Context()

	in := route(ns, "web")
	if err := env.Client.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	out, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.ResourceVersion != in.ResourceVersion || out.Generation != 1 {
		t.Errorf("resourceVersion %s generation %d, want %s and 1", out.ResourceVersion, out.Generation, in.ResourceVersion)
	}
	if diff := cmp.Diff(in.Spec.Rules[0].BackendRefs, out.Spec.Rules[0].BackendRefs); diff != "" {
		t.Errorf("backendRefs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(in.Annotations, out.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}

	// Status is a subresource: a test playing the gateway controller
	// writes it with Status().Update.
	out.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Name: "gw"},
		ControllerName: "upshift.dev/test",
		Conditions: []metav1.Condition{{
			Type: string(gatewayv1.RouteConditionAccepted), Status: metav1.ConditionTrue,
			Reason: "Accepted", ObservedGeneration: out.Generation, LastTransitionTime: metav1.Now(),
		}},
	}}
	if _, err := env.Gateway.GatewayV1().HTTPRoutes(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var back gatewayv1.HTTPRoute
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Status.Parents) != 1 || back.Generation != 1 {
		t.Errorf("after status update: %d parents, generation %d; want 1 and 1", len(back.Status.Parents), back.Generation)
	}
}

// The two identities the least-privilege tests use get exactly the verbs
// their Role grants, and Forbidden for the rest.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := t.Context()
	if err := env.Client.Create(ctx, route(ns, "web")); err != nil {
		t.Fatal(err)
	}
	routeRule := rbacv1.PolicyRule{
		APIGroups: []string{gatewayv1.GroupName},
		Resources: []string{"httproutes", "grpcroutes"},
		Verbs:     []string{"get", "update", "patch"},
	}

	for name, who := range map[string]*kubetest.Clients{
		"serviceaccount": env.ServiceAccount(t, ns, "router"),
		"user":           env.User(t, "alice", "upshift-testers"),
	} {
		t.Run(name, func(t *testing.T) {
			// Before the grant: nothing.
			var r gatewayv1.HTTPRoute
			key := types.NamespacedName{Namespace: ns, Name: "web"}
			if err := who.Client.Get(ctx, key, &r); !apierrors.IsForbidden(err) {
				t.Fatalf("get before the grant: %v, want Forbidden", err)
			}

			env.Grant(t, ns, who.Subject, routeRule)

			if err := who.Client.Get(ctx, key, &r); err != nil {
				t.Fatalf("get: %v", err)
			}
			w := int32(50)
			r.Spec.Rules[0].BackendRefs[0].Weight = &w
			r.Spec.Rules[0].BackendRefs[1].Weight = &w
			if err := who.Client.Update(ctx, &r); err != nil {
				t.Fatalf("update: %v", err)
			}
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"yes"}}}`))
			if err := who.Client.Patch(ctx, &r, patch); err != nil {
				t.Fatalf("patch: %v", err)
			}
			if _, err := who.Gateway.GatewayV1().HTTPRoutes(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
				t.Fatalf("typed get: %v", err)
			}

			forbidden := map[string]error{
				"list httproutes":   who.Client.List(ctx, &gatewayv1.HTTPRouteList{}, client.InNamespace(ns)),
				"create httproute":  who.Client.Create(ctx, route(ns, "other-"+name)),
				"delete httproute":  who.Client.Delete(ctx, &r),
				"update status":     who.Client.Status().Update(ctx, &r),
				"get gateway":       who.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gw"}, &gatewayv1.Gateway{}),
				"get service":       who.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "stable"}, &corev1.Service{}),
				"get other ns":      who.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, &gatewayv1.HTTPRoute{}),
				"typed list routes": typedList(ctx, who, ns),
			}
			for what, err := range forbidden {
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v, want Forbidden", what, err)
				}
			}
		})
	}
}

func typedList(ctx context.Context, c *kubetest.Clients, ns string) error {
	_, err := c.Gateway.GatewayV1().HTTPRoutes(ns).List(ctx, metav1.ListOptions{})
	return err
}

func TestNamespacesAreFresh(t *testing.T) {
	t.Parallel()
	env := kubetest.Get(t)
	a, b := env.Namespace(t), env.Namespace(t)
	if a == b || !strings.HasPrefix(a, "testnamespacesarefresh-") {
		t.Errorf("namespaces %q and %q: want two distinct names starting with the test's", a, b)
	}
}
