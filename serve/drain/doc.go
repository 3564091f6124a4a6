// Package drain takes an HTTP server out of service without failing a
// request: the server being replaced finishes what it accepted, turns new
// work away in a way clients understand, and stops within one grace period.
// It is the server half of a graceful upgrade; the client half is
// serve/retry, whose Transport retries the refusals this package produces
// ([MarkerHeader]). The two share the marker header by value, not by
// import.
//
// A [Controller] moves through five [State] values, only forward, all
// within Config.GracePeriod from the signal ([Controller.Begin]): Serving,
// Unready, Draining, Terminating, Stopped. Config.Classify gives each
// request a [Class]: [Wait] (the default), [CancelOnDrain] (long streams,
// watches) or [Exempt] (health, metrics).
//
// The caller's duties, in order:
//  1. create the controller with [New] and a [Config]: the grace period
//     your platform gives you, an AcceptGrace long enough for endpoint
//     removal to propagate, and a Classify that marks readiness, liveness
//     and metrics Exempt;
//  2. wrap the handler with [Controller.Middleware], serve readiness with
//     [Controller.ReadinessHandler], call [Controller.Attach] on the
//     http.Server before Serve, and serve a listener wrapped by
//     [Controller.Listener] (not ListenAndServe's);
//  3. on the termination signal call [Controller.Begin]; on a second,
//     [Controller.Force];
//  4. wait for [Controller.Done] (or [Controller.Wait]) before the process
//     exits, then read [Controller.Stats] for the log.
//
// Time comes from Config.Clock. See docs/design/drain.md for an example.
package drain
