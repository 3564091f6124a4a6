// Package drain takes an HTTP server out of service without failing a
// request: the server being replaced finishes what it accepted, turns
// new work away in a way clients understand, and stops within one
// grace period.
//
// It is the server half of a graceful upgrade. The client half is
// serve/retry, whose Transport retries the refusals this package
// produces. The two packages do not import each other; they share the
// marker header below by value.
//
// # States
//
// A [Controller] moves through five states, only forward:
//
//	Serving -> Unready -> Draining -> Terminating -> Stopped
//
// What each state means:
//
//   - Serving: every request is admitted; the readiness handler answers 200.
//   - Unready (from Begin, for Config.AcceptGrace): readiness answers 503
//     while requests are still admitted, so that load balancers and
//     endpoint lists stop routing here before anything is refused.
//   - Draining: new requests get 503 with Retry-After (whole seconds,
//     at least 1), Connection: close and "Upshift-Drain: refused"; the
//     handler never sees them. Admitted Wait requests run to
//     completion; CancelOnDrain requests have their context cancelled
//     (cause [ErrDraining]). Exempt requests pass and are not counted.
//     Draining ends when no counted request is left, or at
//     Begin + GracePeriod - TerminateGrace.
//   - Terminating: whatever still runs is cancelled (cause
//     [ErrTerminating]); attached servers get http.Server.Shutdown with
//     the rest of the grace period, then Close if it runs out.
//   - Stopped: at the latest at Begin + GracePeriod, whatever handlers
//     do. A handler that ignores its context is abandoned (counted in
//     Stats().InFlight); its connection has been closed.
//
// Every deadline derives from one GracePeriod measured at the signal:
// the instant Begin (or Force, if it comes first) was called. Nothing
// restarts the clock, so a slow phase eats into the next one rather
// than extending the total. Begin is idempotent; Force is the second
// signal and jumps to Terminating at once.
//
// # Classes and the one predicate
//
// Config.Classify assigns each request a [Class]: Wait (the default),
// CancelOnDrain (long streams, watches, work that can resume elsewhere)
// or Exempt (health, readiness, metrics, control endpoints). The
// middleware classifies a request once, and admission and in-flight
// counting happen in the same step under one lock: there is no moment
// at which the drain can see zero requests in flight while a request
// that was classified for admission has not been counted yet.
//
// # What clients see
//
// A refusal is "503 + Upshift-Drain: refused": nothing ran, so any
// request may be retried, POST included. A request whose handler the
// drain cancelled before it wrote anything becomes "503 +
// Upshift-Drain: cancelled": work may have started, so only requests
// that are safe to repeat should be retried. A response cut short after
// its headers went out cannot change its status; it ends with the
// trailer "Upshift-Drain: resumable" instead (visible on chunked
// HTTP/1.1 and on HTTP/2), so a client that streams can resume from
// another server. A request that completed before any cancellation is
// never marked.
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
//     [Controller.ReadinessHandler], and call [Controller.Attach] on the
//     http.Server before Serve.
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
//	srv := &http.Server{Addr: ":8080", Handler: ctrl.Middleware(mux)}
//	if err := ctrl.Attach(srv); err != nil { ... }
//	go srv.ListenAndServe()
//	<-sigterm
//	ctrl.Begin()
//	<-ctrl.Done()
//
// # Notes for operators
//
// Attach installs srv.BaseContext (wrapping one you set) so request
// contexts end at Terminating, and registers an OnShutdown hook that
// calls Begin, so a Shutdown started elsewhere also fails readiness and
// refuses new work. During Draining, responses carry Connection: close
// so that clients stop reusing connections to this server.
//
// http.Server.Shutdown treats a connection that has not sent a request
// as idle only after five seconds. A client that dialled spare
// connections and never used them can therefore hold Terminating open
// for that long (never beyond the grace period).
//
// The listener closes when Terminating begins. A client whose connection
// was still in the kernel's accept queue at that instant sees a reset
// after it has written its request; it cannot tell whether the request
// was processed. Clients that must ride through such restarts send
// non-idempotent requests with an Idempotency-Key (serve/retry then
// retries them), or run behind a load balancer that stops routing during
// the AcceptGrace.
//
// Time comes from Config.Clock; tests pass a manual clock, or run with
// the wall clock inside testing/synctest.
package drain
