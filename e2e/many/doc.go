// Package many measures many concurrent upshift rollouts against one real
// kube-apiserver (the etcd and kube-apiserver of kubetest), each
// rollout with its own HTTPRoute, driven by rollout.Runner.Run with the
// gateway Router in the fixed capacity mode and the Router's AnnotationStore
// for its state.
//
// Nothing runs a gateway controller in that environment, so the tests play
// one: a single goroutine with one shared informer (one list and one watch
// of every HTTPRoute in the namespace) and a work queue writes Accepted and
// ResolvedRefs for each new generation of a route, as
// kubetest/gatewaytest.Accept does for one route.
//
// The rollouts talk to the API server as one ServiceAccount through one
// shared Gateway API clientset, as an operator would, with client-go's rate
// limiter raised out of the way (QPS 5000, Burst 10000) and every request
// counted by a wrapping RoundTripper; the gateway controller has its own
// ServiceAccount and clientset, counted apart.
//
// The package has no API. TestConcurrentRollouts (20 short rollouts, a few
// seconds) runs with the other tests; BenchmarkConcurrentRollouts is run by
// hand:
//
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x ./e2e/many
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x ./e2e/many -many.n 100,400
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x -timeout 60m ./e2e/many -many.n 1000 -many.interval 30s -many.variants notify
//
// For each N it runs N rollouts (Incremental 10% every -many.interval, 1 s
// by default: a plan of 9 intervals), their starts spread evenly over one
// interval, in each variant of -many.variants: "notify", where Run is woken
// by the Router's watch of its route (rollout.Notifier), and "poll1s",
// where the Router is hidden behind a wrapper that forwards only the
// rollout.TrafficRouter methods and the strategy polls every second. It
// reports the fraction of rollouts done within 1.2x (and 1.05x) their plan,
// duration / plan (p50, p99), API requests per rollout (reads, writes,
// watches), the p99 latency of a reconcile and of the API requests, the
// client-side throttling, the CPU of this process (per hop), kube-apiserver
// and etcd, and the Go heap halfway through the plan.
package many
