// Package rayupgrade measures one Ray Serve incremental upgrade driven by
// upshift against a real kube-apiserver (kubetest) and two emulated Ray
// clusters (serve/ray/raytest), and counts what it costs: the API writes
// and reads, the HTTPRoute PUTs per weight move, the optimistic-concurrency
// conflicts, the dashboard reads, and how long the upgrade and its ramp
// take.
//
// The upgrade is rollout.Runner.Run with strategy.Incremental in the managed
// capacity mode: side A is a Ray cluster serving v1, side B an empty one,
// each side's serve/ray adapter its capacity setter and its Deployer its
// revision reader, so the upgrade deploys v2 on cluster B itself before
// moving capacity and traffic on a real HTTPRoute through the gateway
// Router, whose AnnotationStore keeps the state (built in newStore).
// Notifications are on. kubetest/gatewaytest.Player plays the gateway
// controller, accepting each generation after playerDelay; every request of
// the upgrade's clientset, and of the dashboards, is counted.
//
// The package has no API. TestRayUpgrade, a shorter upgrade that checks the
// safety invariant (no side ever observed with less ready capacity than the
// traffic routed to it) and loose bounds on the counts, runs with the other
// tests. BenchmarkRayUpgrade is the measured upgrade, run by hand from the
// e2e module, and prints the figures as a table and as benchmark metrics:
//
//	go test -run XXX -bench RayUpgrade -benchtime 1x ./rayupgrade
//
// See docs/design/e2e.md for the upgrade's parameters and every figure.
package rayupgrade
