// Package upshift moves a live service from one version to the next without
// dropping a request and without paying for two full copies: traffic and
// serving capacity shift from a stable version to a canary version in small,
// observable hops, and back again when something goes wrong.
//
// The library has a pure core and adapters around it:
//
//   - package strategy decides. Strategy.Step(state, now) returns a Decision:
//     the next State, the hops to apply (a canary weight, a capacity for each
//     side) and when to call again. Incremental, Canary and BlueGreen share
//     one capacity-safe mover. Step does no I/O and reads no clock but now.
//   - package rollout applies decisions through adapter interfaces
//     (traffic router, capacity setters, analyzer, store, observer).
//   - gateway (Gateway API routes), serve/ray (Ray Serve) and
//     serve/replicas (Deployments, StatefulSets) are adapters; serve/drain
//     and serve/retry help the servers being upgraded and their clients;
//     fake holds in-memory adapters for tests.
//
// Dependencies run one way, and TestLayering holds every package to them:
// strategy imports only the standard library and apimachinery types;
// clock only the standard library; rollout imports strategy and clock (and
// logr), rollout/analysis those three only (and apimachinery types, for
// its CRD-embeddable Spec); fake imports rollout,
// rollout/analysis, strategy and clock; adapters import rollout, strategy and clock, never one another nor
// fake; the serving helpers import clock and nothing of Kubernetes; only
// examples import examples. A program that imports only
// strategy, rollout or fake never links client-go, the Gateway API client or
// controller-runtime.
//
// # Usage
//
// A controller that embeds upshift keeps one strategy.State per rollout (in
// its CRD status, or through a rollout Store) and on every reconcile:
//
//  1. Reads the state it stored last. A new rollout starts from
//     strategy.NewState(stableRevision, canaryRevision).
//  2. Applies the commands it received since (Pause, Resume, Abort, Promote,
//     PromoteFull, Retry, Retarget): each is a pure method that returns a new
//     State and records when it happened.
//  3. Observes every adapter and writes the result into State.Observed: the
//     weight the router reports as programmed and whether the data plane
//     accepted it, each side's capacity, ready capacity and whether it has
//     settled, the canary's health, gate verdicts, and the instant (At).
//  4. Calls Step(state, now) once, with now read from its clock.
//  5. Applies the decision's hops in the safe order: capacity increases
//     first, then the weight, then capacity decreases. It applies nothing
//     else and re-applies nothing that is already in place.
//  6. Stores Decision.State before anything else can happen, so a crash
//     never loses a hop that was asked for.
//  7. Calls again after Decision.RequeueAfter, or sooner when an observation
//     changes. Calling early is always safe: Step never progresses before its
//     time. A zero RequeueAfter means nothing happens without a command or a
//     new observation.
//
// The Runner in package rollout does steps 3 to 7 for you.
//
// # Determinism
//
// Step is a function of its arguments: equal states and instants give
// deep-equal decisions, the state passed in is never modified, and a JSON
// round trip of the state changes no decision (recorded instants are kept
// to the microsecond, which is what metav1.MicroTime serialises). Time that
// runs backwards counts as no time passing. Plan uses this to simulate a
// whole rollout and return its exact timeline before anything is touched.
package upshift
