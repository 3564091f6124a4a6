// Package slowapi checks, on a real kube-apiserver behind a proxy that
// holds chosen route writes, that an Incremental rollout driven by
// rollout.Runner.Run with the gateway Router and its AnnotationStore never
// lands two weight writes closer than its interval: the interval counts
// from the instant the previous weight write returned (the Runner records
// it in strategy.State.WeightAppliedAt), not from the instant it was
// decided, so a slow write, even one slower than the interval, cannot
// shorten the next gap. It
// also runs the same upgrade with the interval counted from the decision
// (as upshift did before) and logs the shorter gaps that lands.
//
// The proxy (net/http/httputil.ReverseProxy on loopback, in front of the
// kubetest API server) forwards everything the Runner sends, holds every
// other weight-changing HTTPRoute PUT for 400 ms to 1.3 s before forwarding it,
// and records for each weight-changing write that succeeded the instant it
// was forwarded and the instant the API server's answer came back. A write
// lands between the two, so forwarded(k+1) - answered(k) >= interval proves
// that weight k+1 landed at least one interval after weight k. A goroutine
// plays the gateway controller (kubetest/gatewaytest.Accept) for each new
// generation of the route, directly against the API server.
//
// The package has no API; its test runs with the others:
//
//	UPSHIFT_REQUIRE_KUBE=1 go test -race ./e2e/slowapi
package slowapi
