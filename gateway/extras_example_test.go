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
	"github.com/upshift-dev/upshift/strategy"
)

// SetRoutes sends the requests with header X-Beta: 1 to the canary (side
// B) through a rule of its own, inserted before the user's rule, which
// keeps splitting the rest 90/10.
func ExampleRouter_SetRoutes() {
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

	router, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{{Namespace: "shop", Name: "web"}}, A: a, B: b})
	if err != nil {
		panic(err)
	}
	err = router.SetRoutes(ctx, rollout.Routes{
		Weights: rollout.Weights{A: 90, B: 10},
		Canary:  strategy.SideB,
		Extras: strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{
			Matches: []strategy.HeaderMatch{{Name: "X-Beta", Value: "1"}},
		}},
	})
	if err != nil {
		panic(err)
	}

	var rt gwv1.HTTPRoute
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "web"}, &rt); err != nil {
		panic(err)
	}
	for _, rule := range rt.Spec.Rules {
		name := "the user's rule"
		if rule.Name != nil {
			name = string(*rule.Name)
		}
		fmt.Printf("%s:", name)
		for _, m := range rule.Matches {
			fmt.Printf(" %s %s", *m.Path.Type, *m.Path.Value)
			for _, h := range m.Headers {
				fmt.Printf(" %s: %s", h.Name, h.Value)
			}
		}
		for _, ref := range rule.BackendRefs {
			fmt.Printf(" → %s weight %d", ref.Name, *ref.Weight)
		}
		fmt.Println()
	}
	st, err := router.Routes(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("programmed: header route %s to side %s\n", st.Extras.HeaderRoute.Matches[0].Name, st.Canary)
	// Output:
	// upshift-2ae6e0af9b8024cd-header: PathPrefix / X-Beta: 1 → web-b weight 1
	// the user's rule: PathPrefix / → web-a weight 90 → web-b weight 10
	// programmed: header route X-Beta to side B
}
