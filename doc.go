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
//   - package rollout applies decisions through adapter interfaces: a
//     TrafficRouter (the two weights), a CapacitySetter per side, a
//     RevisionReader per side (what revision it runs; a Deployer also puts
//     one there), a Notifier (an adapter that says when what it reports
//     changed), a HealthChecker and an Analyzer (the canary's health and
//     its gate verdicts), a Store (where a standalone rollout keeps its
//     state) and an Observer (events, metrics, logs).
//   - gateway (Gateway API routes), serve/ray (Ray Serve) and
//     serve/replicas (Deployments, StatefulSets) are adapters; serve/drain
//     and serve/retry help the servers being upgraded and their clients;
//     fake holds in-memory adapters for tests, and serve/ray/raytest an
//     emulated Ray cluster for tests of serve/ray.
//
// Dependencies run one way, and TestLayering holds every package to them:
// strategy imports only the standard library and apimachinery types;
// clock only the standard library; rollout imports strategy and clock (and
// logr), rollout/analysis those three only (and apimachinery types, for
// its CRD-embeddable Spec); fake imports rollout,
// rollout/analysis, strategy and clock; serve/ray/raytest imports fake
// and never serve/ray, which it checks; adapters import rollout, strategy and clock, never one another nor
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
//  1. Reads the state it stored last. The zero State is a valid start: it
//     asks for nothing. State.Retarget(revision, now) names the revision
//     that should run; on the zero state (a new object, or a wiped status)
//     it records that revision unobserved, and the first reconcile adopts
//     whatever the adapters report (all traffic on one side running it, a
//     rollout in progress, or one to walk back). A later Retarget to
//     another revision starts a rollout.
//  2. Applies the commands it received since: State.Control with the
//     declarative strategy.Control a spec holds (paused, and the tokens
//     abort, retry, promote, promoteFull, resume), or the methods Pause,
//     Resume, Abort, Promote, PromoteFull and Retry. Each is pure, returns
//     a new State and records when it happened.
//  3. Observes every adapter and writes the result into State.Observed: the
//     weights the router reports as programmed and whether the data plane
//     accepted them, each side's revision, capacity, ready capacity and
//     whether it has settled, the canary's health, gate verdicts, and the
//     instant (At).
//  4. Calls Step(state, now) once, with now read from its clock (the same
//     instant as the commands').
//  5. Applies the decision's hops in the safe order: capacity increases
//     first, then the weight, then capacity decreases, then deploys. It
//     applies nothing else and re-applies nothing that is already in place.
//  6. Stores Decision.State, also when a hop failed (the state then is the
//     one before the failed hop). A crash between 5 and 6 loses nothing:
//     the stored state is a record, and what the adapters report is the
//     truth. The next reconcile observes the hop that was applied, and a
//     hop asked for is only counted done once it is observed applied.
//  7. Calls again after Decision.RequeueAfter, or sooner when an observation
//     changes. Calling early is always safe: Step never progresses before its
//     time. A zero RequeueAfter means nothing happens without a command or a
//     new observation.
//
// The Runner in package rollout does steps 3 to 5 and returns the state to
// store (Runner.ReconcileAt); for a standalone program Runner.Run does all
// seven, with a Store and a channel of commands.
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
