// Package drain takes an HTTP server out of service without failing a
// request: the server being replaced finishes what it accepted, turns new
// work away in a way clients understand, and stops within one grace period.
//
// It is the server half of a graceful upgrade. The client half is
// serve/retry, whose Transport retries the refusals this package produces
// ([MarkerHeader]). The two packages do not import each other; they share
// the marker header by value.
//
// A [Controller] moves through five [State] values, only forward, all within
// Config.GracePeriod from the signal ([Controller.Begin]):
//
//	Serving -> Unready -> Draining -> Terminating -> Stopped
//
// Config.Classify gives each request a [Class]: [Wait] (the default),
// [CancelOnDrain] (long streams, watches) or [Exempt] (health, metrics).
//
// # Usage
//
// The caller's duties, in order:
//
//  1. Create the controller with [New] and a [Config]: the grace period
//     your platform gives you (Kubernetes: terminationGracePeriodSeconds),
//     an AcceptGrace long enough for endpoint removal to propagate, and a
//     Classify that marks readiness, liveness and metrics Exempt.
//  2. Wrap the handler with [Controller.Middleware], serve readiness with
//     [Controller.ReadinessHandler], call [Controller.Attach] on the
//     http.Server before Serve, and serve a listener wrapped by
//     [Controller.Listener] (rather than ListenAndServe, whose listener
//     the controller cannot reach).
//  3. On the termination signal call [Controller.Begin]; on a second
//     signal, [Controller.Force].
//  4. Wait for [Controller.Done] (or [Controller.Wait]) before the
//     process exits, then read [Controller.Stats] for the log.
//
// For example:
//
//	ctrl, err := drain.New(drain.Config{
//		GracePeriod: 30 * time.Second,
//		AcceptGrace: 5 * time.Second,
//		Classify: func(r *http.Request) drain.Class {
//			switch {
//			case r.URL.Path == "/readyz" || r.URL.Path == "/metrics":
//				return drain.Exempt
//			case strings.HasPrefix(r.URL.Path, "/watch/"):
//				return drain.CancelOnDrain
//			}
//			return drain.Wait
//		},
//	})
//	if err != nil { ... }
//	mux.Handle("/readyz", ctrl.ReadinessHandler())
//	srv := &http.Server{Handler: ctrl.Middleware(mux)}
//	if err := ctrl.Attach(srv); err != nil { ... }
//	ln, err := net.Listen("tcp", ":8080")
//	if err != nil { ... }
//	go srv.Serve(ctrl.Listener(ln))
//	<-sigterm
//	ctrl.Begin()
//	<-ctrl.Done()
//
// Time comes from Config.Clock; tests pass a manual clock, or run with the
// wall clock inside testing/synctest.
package drain
