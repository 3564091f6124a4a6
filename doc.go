// Package upshift moves a live service from one version to the next without
// dropping a request and without paying for two full copies: traffic and
// serving capacity shift from a stable version to a canary version in small,
// observable hops, and back again when something goes wrong.
//
// The library has a pure core and adapters around it. Package strategy
// decides: Strategy.Step(state, now) returns a Decision (the next State,
// the hops to apply, when to call again); it does no I/O and reads no clock
// but now, so equal inputs give deep-equal decisions and Plan simulates a
// whole rollout. Package rollout applies decisions through adapter
// interfaces (TrafficRouter, CapacitySetter, RevisionReader and Deployer,
// Notifier, HealthChecker, Analyzer, Store, Observer); its Runner does one
// reconcile, or a whole standalone rollout (Runner.Run). gateway, serve/ray
// and serve/replicas are adapters; serve/drain and serve/retry help the
// servers being upgraded and their clients; fake holds in-memory adapters
// for tests, and serve/ray/raytest an emulated Ray cluster.
//
// Dependencies run one way, and TestLayering holds every package to them:
// strategy imports only the standard library and apimachinery types; clock
// only the standard library; rollout strategy and clock (and logr);
// rollout/analysis those three (and apimachinery types, for its Spec); fake
// rollout, rollout/analysis, strategy and clock; serve/ray/raytest fake and
// never serve/ray, which it checks; adapters rollout, strategy and clock,
// never one another nor fake; the serving helpers clock and nothing of
// Kubernetes; only examples import examples. A program that imports only
// strategy, rollout or fake never links client-go, the Gateway API client
// or controller-runtime.
//
// See docs/design/upshift.md for the reconcile, step by step, and determinism.
package upshift
