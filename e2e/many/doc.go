// Package many measures many concurrent upshift rollouts against one real
// kube-apiserver (kubetest), each rollout with its own HTTPRoute, driven by
// rollout.Runner.Run with the gateway Router in the fixed capacity mode and
// the Router's AnnotationStore for its state. A single goroutine with one
// shared informer and a work queue plays the gateway controller, accepting
// each new generation of a route. The rollouts share one ServiceAccount and
// one Gateway API clientset, as an operator would, with every request
// counted (the gateway controller's apart).
//
// The package has no API. TestConcurrentRollouts (20 short rollouts) runs
// with the other tests; BenchmarkConcurrentRollouts is run by hand:
//
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x ./e2e/many
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x ./e2e/many -many.n 100,400
//
// For each N it runs N rollouts (Incremental 10% every -many.interval) in
// each variant of -many.variants ("notify": woken by the Router's watch;
// "poll1s": polling every second), and reports how many finished near their
// plan, API requests per rollout, latencies, throttling, CPU and heap. See
// docs/design/e2e.md for the set-up and every figure.
package many
