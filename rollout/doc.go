// Package rollout applies the decisions of a strategy through adapters: a
// [TrafficRouter] that moves request weights between the two physical sides,
// a [CapacitySetter] per side, a [RevisionReader] (or [Deployer]) per side,
// and optional [Analyzer], [HealthChecker], [Store] and [Observer].
//
// A [Runner] embeds in a reconciler: each [Runner.ReconcileAt] observes
// every adapter once, calls Strategy.Step once, applies the hops in the
// safe order (capacity increases, the weight, capacity decreases, then a
// deploy), and returns the state to store and when to reconcile again.
// Standalone programs call [Runner.Run] instead, which loops with a [Store]
// (a [ControlStore] also takes strategy.Control requests) so that a killed
// process resumes where it stopped. See the examples of [Runner], and
// docs/design/rollout.md for a whole Reconcile.
//
// Rules:
//   - one clock: take one [Runner.Now] per reconcile and give it to the
//     commands and to ReconcileAt (a state stamped by another clock waits
//     for it, and is reported past strategy.MaxClockSkew);
//   - store the returned state, also with an error ([Runner.ReconcileAt]);
//   - set [Runner.RevisionA] and RevisionB so that the strategy keeps each side
//     on its role's revision and deploys new ones at weight 0;
//   - set [Runner.Owner] so that two rollouts pointed at the same route or
//     workloads are refused instead of undoing each other's hops;
//   - with watches, set [Runner.Watched]; adapters that are a [Notifier] wake
//     Run themselves; adapters reading one object share it ([ReadOnce]);
//   - errors come back as [*AdapterError]; [Permanent] ones abort the rollout.
package rollout
