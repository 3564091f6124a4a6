// Package gateway moves traffic with Gateway API routes: [Router] is a
// rollout.TrafficRouter over one or more HTTPRoutes and GRPCRoutes that an
// operator already owns, [AnnotationStore] keeps a rollout's state (and its
// strategy.Control, [ControlAnnotation]) on a route, and the builders
// ([BuildGateway], [BuildHTTPRoute], [CreateOrAdopt]) create a Gateway and
// an HTTPRoute for users who want upshift to own them.
//
//	router, err := gateway.NewRouter(c, gateway.Config{
//		Routes: []gateway.RouteRef{{Namespace: "shop", Name: "web"}},
//		A:      gateway.Backend{Namespace: "shop", Name: "web-a", Port: 8080},
//		B:      gateway.Backend{Namespace: "shop", Name: "web-b", Port: 8080},
//	})
//	r := &rollout.Runner{Strategy: s, Router: router, A: a, B: b}
//
// A standalone program keeps the state on the route with the Router's own
// store, a rollout.HopStore: Run then writes each weight hop and the state
// that records it in one update of the route.
//
//	r.Store, err = router.AnnotationStore(gateway.RouteRef{Namespace: "shop", Name: "web"})
//
// The state shares the route's 256 KiB of annotations with every other
// writer: when another tool leaves it no room, a walk back still returns
// traffic to the stable side (with a reduced state, or the weights alone),
// forward hops wait, and the rollout reports Degraded with reason
// StateRefused naming [StateAnnotation] (see [AnnotationStore]).
//
// Rules:
//   - the Router writes only the two weights in the rules that hold both
//     backends, and one claim annotation per rule ([Router.Claim]); a GitOps
//     tool applying the route should ignore those and [StateAnnotation];
//   - a rule that holds both backends must split its traffic between them
//     alone, or the rollout aborts ([ExtraBackendError]);
//   - weights count as applied once every parent has accepted the route's
//     current generation ([Router.Weights]), plus [Config].SettleDelay for
//     data planes that report before traffic moves;
//   - RBAC: get, update and watch on the managed routes by name ([Router]);
//     [Router.Notify] watches each route by name and never lists;
//   - while a [Router.Notify] subscription is live, the Router reads each
//     route from what its watch delivered (one watch per route, however
//     many subscriptions), not from the API server: a rollout driven by
//     rollout.Runner.Run makes a handful of GETs, not one per reconcile
//     ([Counts] tells the GETs from the reads the watch answered).
//
// # Traffic extras
//
// [Router] is a rollout.RouteShaper: [Router.SetRoutes] writes the weights
// and the extras of a canary (a header route, a mirror, sticky sessions) in
// one update of each route. The extras are rules the Router owns, named
// upshift-<16 hex digits>-<role> ([OwnedRuleName]), placed by Gateway
// API's precedence so that they take only the requests of the user's rule
// (never another rule's, in this route or another on the same listener:
// [PrecedenceError], [ShadowedError]); the user's rule keeps its content
// and gets only its weights; their
// hashes are recorded in [RulesAnnotation], so an owned rule edited by
// another writer is reported and never overwritten
// ([OwnedRuleConflictError]). Header routes are Gateway API Core (Exact) or
// implementation-specific (RegularExpression, cookies). Mirrors are either
// a RequestMirror filter, programmed only when the GatewayClass lists the
// Extended features HTTPRouteRequestMirror and
// HTTPRouteRequestPercentageMirror, or a Traefik TraefikService
// ([MirrorTraefikService]). Sticky sessions hand each new session a ticket
// cookie once and route by it, so the share of sessions on the canary is
// the weight at every step: re-drawing a session at each step instead would
// leave 1-Π(1-w_i) of them on the canary (49.6% after 10, 20 and 30%). A
// ticket never changes, so no session returns to the stable side while the
// weight rises, and at weight 0 all of them are there. The layout, the
// conformance of each part, the refusals and the permissions are in
// [Router.SetRoutes].
package gateway
