package gateway_test

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
)

// A retry in Traefik for the rule the Router moves: the user applies the
// Middleware, and the Router adds the ExtensionRef filter in the same
// update as the weights.
func ExampleRetry() {
	ctx := context.Background()
	a, b := gateway.Backend{Name: "web-a", Port: 8080}, gateway.Backend{Name: "web-b", Port: 8080}
	route, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: a, B: b})
	if err != nil {
		panic(err)
	}
	scheme := runtime.NewScheme()
	if err := gwv1.Install(scheme); err != nil {
		panic(err)
	}
	c := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(route).Build() // a cluster's client in real use

	retry := gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "web-retry", Attempts: 4, Codes: []int{502, 503, 504}}
	mw, err := gateway.TraefikRetryMiddleware("shop", retry)
	if err != nil {
		panic(err)
	}
	fmt.Println("apply:", mw.GetKind(), mw.GetNamespace()+"/"+mw.GetName(), mw.Object["spec"])
	if err := c.Create(ctx, mw); err != nil { // the Router refuses a Middleware that is not there
		panic(err)
	}

	router, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{{Namespace: "shop", Name: "web"}}, A: a, B: b, Retry: &retry})
	if err != nil {
		panic(err)
	}
	if err := router.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
		panic(err)
	}
	var rt gwv1.HTTPRoute
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "web"}, &rt); err != nil {
		panic(err)
	}
	for _, f := range rt.Spec.Rules[0].Filters {
		fmt.Println("filter:", f.Type, f.ExtensionRef.Group, f.ExtensionRef.Kind, f.ExtensionRef.Name)
	}
	fmt.Println("writes:", router.Counts().Writes)
	// Output:
	// apply: Middleware shop/web-retry map[retry:map[attempts:4 status:[502 503 504]]]
	// filter: ExtensionRef traefik.io Middleware web-retry
	// writes: 1
}
