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
//     endpoint lists stop routing here before anything is refused. Their
//     responses carry Connection: close, so that clients holding
//     kept-alive connections reconnect (elsewhere, once endpoints are
//     updated) instead of finding the connection closed under their
//     next request later.
//   - Draining: new requests get 503 with Retry-After (whole seconds,
//     at least 1), Connection: close and "Upshift-Drain: refused"; the
//     handler never sees them. Admitted Wait requests run to
//     completion; CancelOnDrain requests have their context cancelled
//     (cause [ErrDraining]). Exempt requests pass and are not counted.
//     Draining ends when no counted request is left, or at
//     Begin + GracePeriod - TerminateGrace.
//   - Terminating: whatever still runs is cancelled (cause
//     [ErrTerminating]). Then, in order: the listeners wrapped by
//     [Controller.Listener] are stopped (their accept queues emptied
//     into the servers, which refuse those requests, and their sockets
//     closed; see Listener); the connections of attached servers settle
//     (see the notes below); and attached servers get
//     http.Server.Shutdown with the rest of the grace period, then Close
//     if it runs out.
//   - Stopped: at the latest at Begin + GracePeriod, whatever handlers
//     do. A handler that ignores its context is abandoned (counted in
//     Stats().InFlight); its connection has been closed. Connections
//     that handlers hijacked (websockets and the like) are closed too,
//     whether the handler still runs or handed the connection on; a
//     TLS connection is closed underneath, without waiting to send
//     close_notify. Done is closed after that.
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
// never marked. From Begin on, every response the Middleware lets
// through to a handler carries Connection: close (a 101 Switching
// Protocols excepted); exempt responses are left untouched.
//
// Every request that reaches a draining server over a connection it
// accepted, or that was waiting in a wrapped listener's accept queue,
// gets one of these answers, never a reset or an EOF, under the
// conditions given in the notes below. A client connecting after a
// wrapped listener closed is refused by the kernel before it sends
// anything ("connection refused"), which any client may retry.
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
// # Notes for operators
//
// Attach installs srv.BaseContext (wrapping one you set) so request
// contexts end at Terminating, srv.ConnState (likewise wrapping yours)
// to keep track of the server's connections and of the ones its
// handlers hijack, and an OnShutdown hook that calls Begin, so a
// Shutdown started elsewhere also fails readiness and refuses new work.
// Hijacked connections of a server that is not attached are tracked
// when the hijacking handler runs behind the Middleware (not exempt).
//
// Why Terminating settles connections before calling
// http.Server.Shutdown: once Shutdown has begun, the server drops,
// unanswered, any request it reads, on any connection, and it closes
// idle kept-alive connections at once, under a client that may be
// sending on them. So the controller first lets the connections of
// attached servers close by themselves: each request on them gets the
// refusal with Connection: close. It waits until all are closed, or
// for Config.RetryAfter at most (a refused client comes back after
// Retry-After, possibly on a connection it kept), bounded by the grace
// period, and then closes those still idle or never used (a connection
// whose request the server has not begun to read by then counts as
// never used; a server starved of CPU for that long can thus drop a
// request). A client that picks an idle connection at that very
// instant sees it closed: the race that any server's idle timeout has. Since every response from
// Begin on asks the client to close, the only connections left by then
// are those a client opened and never used, or kept unused since
// before Begin (none in use survives an AcceptGrace).
//
// Wrapped listeners close without resetting queued connections: the
// listener holds every connection it takes from the queue, and every
// one arriving after, unanswered until none has arrived for RetryAfter,
// so that clients refused earlier are back and waiting rather than
// about to connect at the moment of the close. If connections keep
// arriving (a load balancer still routing here), the listener closes
// once half of what remains of the grace period has passed, and a
// connection completing its handshake in the instant of that close can
// still be reset after its request went out. A listener that is not
// wrapped is closed by http.Server.Shutdown after the settling, and
// connections still in its accept queue then are reset: clients cannot
// tell whether such a request was processed. Clients that must ride
// through every restart also send non-idempotent requests with an
// Idempotency-Key (serve/retry then retries them).
//
// Time comes from Config.Clock; tests pass a manual clock, or run with
// the wall clock inside testing/synctest.
package drain
