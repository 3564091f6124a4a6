// Package rollout applies the decisions of a strategy through adapters: a
// [TrafficRouter] that moves request weights between the two physical sides,
// a [CapacitySetter] per side, a [RevisionReader] (or [Deployer]) per side,
// and optional [Analyzer], [HealthChecker], [Store] and [Observer].
//
// A [Runner] embeds in a reconciler. Each [Runner.ReconcileAt] observes every
// adapter once, calls Strategy.Step once, and applies the hops in the safe
// order: capacity increases, the weight, capacity decreases, then a deploy.
// It returns the state to store and when to reconcile again:
//
//	func (c *MyController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		obj := ... // your CRD; obj.Status.Rollout is a strategy.State
//		now := c.runner.Now() // one instant, from the Runner's clock, for everything below
//		// A new object's zero state (or a wiped status) records the
//		// revision unobserved; the first reconcile observes the world and
//		// adopts it. A new revision later starts a rollout.
//		s := obj.Status.Rollout.Retarget(obj.Spec.Revision, now)
//		s, applied := s.Control(obj.Spec.Control, now) // paused, abort, promote... (strategy.Control)
//		for _, a := range applied {
//			c.recorder.Event(obj, "Normal", a.Command, a.Token)
//		}
//		// Name the object, for the Observer's Events and the logs.
//		next, requeue, err := c.runner.ReconcileAt(rollout.WithName(ctx, req.NamespacedName), s, now)
//		obj.Status.Rollout = next // store it even when err != nil: nothing is lost
//		if uerr := c.Status().Update(ctx, obj); uerr != nil {
//			return ctrl.Result{}, uerr
//		}
//		return ctrl.Result{RequeueAfter: requeue}, err
//	}
//
// Standalone programs call [Runner.Run] instead, which loops with a [Store]
// (a [ControlStore] also takes strategy.Control requests) so that a killed
// process resumes where it stopped. See the examples of [Runner].
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
