// Package gateway moves traffic with Gateway API routes: [Router] is a
// rollout.TrafficRouter and rollout.ExtrasRouter over one or more HTTPRoutes
// and GRPCRoutes that an operator already owns, [AnnotationStore] keeps a
// rollout's state (and its strategy.Control, [ControlAnnotation]) on a
// route, and the builders ([BuildGateway], [BuildHTTPRoute],
// [CreateOrAdopt]) create a Gateway and an HTTPRoute for users who want
// upshift to own them.
//
//	router, err := gateway.NewRouter(c, gateway.Config{
//		Routes: []gateway.RouteRef{{Namespace: "shop", Name: "web"}},
//		A:      gateway.Backend{Namespace: "shop", Name: "web-a", Port: 8080},
//		B:      gateway.Backend{Namespace: "shop", Name: "web-b", Port: 8080},
//	})
//	r := &rollout.Runner{Strategy: s, Router: router, A: a, B: b}
//	r.Store, err = router.AnnotationStore(gateway.RouteRef{Namespace: "shop", Name: "web"})
//
// Rules: the Router writes only the two weights in the rules that hold both
// backends, one claim annotation per rule ([Router.Claim]) and, with its
// store (a rollout.HopStore: a hop and its state in one update),
// [StateAnnotation]: a GitOps tool applying the route should ignore those.
// Such a rule must split its traffic between the two alone
// ([ExtraBackendError]); weights count as applied once every parent has
// accepted the route's generation, plus [Config].SettleDelay; RBAC is get,
// update and watch on the managed routes by name. When other annotations
// leave the state no room, a walk back still returns traffic and the
// rollout reports Degraded (StateRefused). [Router.SetRoutes] adds header
// routes, mirrors and sticky sessions as rules the Router owns, and
// [Config].Retry a data-plane retry on the rules it moves ([Retry]). See
// docs/design/gateway.md for the rules, the traffic extras and the watch.
package gateway
