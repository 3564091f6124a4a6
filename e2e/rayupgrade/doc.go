// Package rayupgrade measures one Ray Serve incremental upgrade driven by
// upshift against a real kube-apiserver (the etcd and kube-apiserver of
// kubetest) and two emulated Ray clusters (serve/ray/raytest), and counts
// what it costs: the API writes and reads, the HTTPRoute PUTs per weight
// move, the optimistic-concurrency conflicts, the dashboard reads, and how
// long the upgrade and its ramp take.
//
// The upgrade is rollout.Runner.Run with strategy.Incremental (step 10%,
// interval 5 s, max surge 30%, managed capacity): side A is a Ray cluster
// serving revision v1 at its steady target capacity, side B an empty one;
// each side's serve/ray adapter is the Runner's capacity setter and its
// Deployer the side's revision reader, so the upgrade deploys v2's Serve
// config on cluster B itself (at target_capacity 0) before moving capacity
// and traffic. The traffic moves on a real HTTPRoute through the gateway
// Router; the Runner's state is kept on the same route by the gateway
// AnnotationStore (built in one place, newStore); notifications are on:
// Run subscribes to the Router's watch and to the Ray adapters' polls
// after their writes. The adapters' reads reuse a cluster's last answer
// (a read's, a poll's, a write's) for up to 2 s unless they wrote since
// (serve/ray's Config.ReadMaxAge, at its default), so a reconcile woken by
// a poll reads what the poll got.
//
// Nothing runs a gateway controller in that environment, so the tests play
// one, kubetest/gatewaytest.Player: an informer of the routes and workers
// that, a short delay (playerDelay) after the route gains a generation,
// write Accepted and ResolvedRefs for it, as gatewaytest.Accept does. The emulated
// clusters move one step per GET of their applications (raytest's clock
// is its polls); their pace (build, start and stop polls) is that of the
// serve/ray upgrade tests.
//
// Every request of the upgrade's clientset passes through a counting
// RoundTripper, which also decodes each route PUT it sends to see the
// instant new weights land on the API server. The dashboards count the
// requests they answer. The figures, from the call of Run to its return:
//
//	trigger to done         Run's duration
//	first to last move      from the first weight PUT that lands to the last
//	ramp / minimum          that over (weight moves - 1) * interval
//	API writes              by verb and resource
//	route PUTs / move       every PUT of the route over the weight moves
//	API reads               GETs and LISTs (watches apart)
//	409 conflicts           answers 409 to the upgrade's requests
//	dashboard reads         GETs of both clusters' applications: Run's
//	                        own and the adapters' polls, beside what a
//	                        2 s poll of both clusters makes
//
// The package has no API. TestRayUpgrade, a shorter upgrade (interval 1 s)
// that checks the safety invariant (no side ever observed with less ready
// capacity than the traffic routed to it) and loose bounds on the counts,
// runs with the other tests. BenchmarkRayUpgrade is the measured upgrade,
// run by hand from the e2e module:
//
//	go test -run XXX -bench RayUpgrade -benchtime 1x ./rayupgrade
//
// It prints the figures as a table and reports each as a benchmark metric.
package rayupgrade
