// Package gateway moves traffic with Gateway API routes: Router is a
// rollout.TrafficRouter over one or more HTTPRoutes and GRPCRoutes that an
// operator already owns, AnnotationStore keeps a rollout's state on a
// route, and the builders create a Gateway and an HTTPRoute for users who
// want upshift to own them.
//
// # What the Router writes
//
// Each side is a Backend named exactly (group, kind, name, namespace, port;
// never by substring). In every rule that holds both backends, the Router
// writes both weights (an omitted weight means 1 in Gateway API, never 0,
// so both are always written). Nothing else changes: rules with only one of
// the backends, other backends, filters, matches, hostnames, labels and
// annotations survive. Writes use the route's resourceVersion; after a
// conflict the Router re-reads and re-applies, a bounded number of times,
// with the caller's context. When the weights are already right it writes
// nothing.
//
// # What the Router and the AnnotationStore own
//
// Besides the two weights, the Router owns one annotation per rule it
// moves: the claim ClaimAnnotation(namespace, A, B)
// (upshift.dev/claim-<16 hex digits of the two backends>, either order),
// whose value names the rollout.Owner that moves the rule (see
// rollout.Claimer). Router.Claim writes it with the route's
// resourceVersion, so two claimants racing for a free rule cannot both
// win; a rule another owner claims is refused with a *rollout.ClaimedError
// naming that owner, and SetWeights for an owner other than the claimant
// (rollout.OwnerFrom) writes nothing. Two rollouts on different rules of
// one route hold a claim each. Router.Release removes the claim. The
// AnnotationStore owns StateAnnotation, and refuses to save on a route
// whose rules only other owners claim (AnnotationStore.Owner). A GitOps
// tool that applies the route should ignore the backendRefs' weights, the
// annotations with prefix ClaimAnnotationPrefix, and StateAnnotation.
//
// # One rule, two backends
//
// A rule that holds both backends must split its traffic between them
// alone, so that the two weights are the real shares. Any other backendRef
// in that rule needs weight 0 (an omitted weight is 1, and the API server
// stores it as 1, so it counts), and each side may be named only once (a
// second ref to A would get A's weight too and double A's share).
// Otherwise SetWeights writes nothing and Weights reports no status: both
// return an *ExtraBackendError naming the rule and the backendRef, which
// matches ErrInvalid and is rollout.Permanent. A rollout therefore aborts
// instead of counting 70/30 while a third backend takes its own share, and
// its walk back writes nothing until the rule is fixed. A backend that
// must keep serving belongs in a rule of its own (a different match),
// where the Router leaves it alone.
//
// Weights reports the spec's weights, an omitted one read as 1: two
// omitted weights are 1 and 1, not 50 and 50. A pair sums to 100 only when
// it is the real split in percent, which is what a rollout checks before
// it counts weights as applied.
//
// # When weights count as applied
//
// For every route in the group, every parentRef must have a status entry
// whose Accepted and ResolvedRefs conditions are True with
// observedGeneration equal to the route's generation. A missing or older
// status is "not yet"; a False condition is reported as a
// *NotAcceptedError in rollout.RouteStatus.Rejected. Some data planes write
// status before traffic has moved; Config.SettleDelay adds a wait after the
// status first confirms. Measured through Traefik v3.7.13 on loopback
// (e2e/traefik): status about 40-80 ms after a write, traffic 100-450 ms
// after it, once 631 ms on a loaded 2-core host, so leave headroom: with no
// settle delay most requests right after "accepted" still reach the old
// side.
//
// # Putting a revision on a side
//
// The Router moves traffic only. With a route and no capacity setters (the
// fixed capacity mode) both backends stay provisioned, so a side gets its
// new revision while it carries weight 0: set rollout.Runner's RevisionA and
// RevisionB to a rollout.Deployer per backend, and the Runner asks the canary
// side to deploy the canary revision only once every parent of the route
// has accepted weight 0 for it, then waits until the side reports the
// revision fully rolled out (rollout.RevisionStatus.Updated) before the
// first weight moves onto it. Any Deployer fits: serve/replicas deploys a
// revision's pod template on a Deployment or StatefulSet, and a function
// of your own (a Helm upgrade, a call to your CI) works through a small
// type with Deploy and Revision. A caller who redeploys by other means
// implements only rollout.RevisionReader (rollout.RevisionFunc), and the
// rollout waits until the side reports the revision. examples/gateway
// deploys the canary image on the canary Deployment this way.
//
// # Permissions
//
// The Router and the AnnotationStore need only get and update on the
// managed routes, and Router.Notify watch on the same names:
//
//	apiVersion: rbac.authorization.k8s.io/v1
//	kind: Role
//	metadata: {name: upshift-router, namespace: shop}
//	rules:
//	- apiGroups: ["gateway.networking.k8s.io"]
//	  resources: ["httproutes", "grpcroutes"]
//	  resourceNames: ["web", "web-grpc"]
//	  verbs: ["get", "update", "watch"]
//
// Notify watches each route by name (a field selector
// metadata.name=<name> in its namespace), which RBAC authorises with
// resourceNames like a get; it never lists or watches the collection.
// Without watch, Notify fails with Forbidden and rollout.Runner.Run polls.
// With NewRouter, Notify needs a client.WithWatch (client.NewWithWatch);
// NewRouterForClientset always can.
//
// CreateOrAdopt additionally needs create on the kinds it creates.
package gateway
