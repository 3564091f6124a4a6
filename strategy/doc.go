// Package strategy is the deterministic core of upshift: it decides, from a
// rollout's State and the current instant, the next hop of an upgrade.
//
//	d := strategy.Incremental{StepPercent: 10, Interval: time.Minute, MaxSurgePercent: 30}.Step(state, now)
//	// apply d.StableCapacity / d.CanaryCapacity / d.Weight, store d.State,
//	// call again after d.RequeueAfter
//
// Nothing here does I/O, reads a clock, logs or sleeps. Step is pure (see
// the root package for the caller's duties), so Plan can simulate a whole
// rollout and return its exact timeline.
//
// # Strategies
//
// Incremental raises the canary weight by at most StepPercent at most once per
// Interval and grows capacity by the surge budget as soon as traffic has
// caught up with it. Canary walks explicit steps: SetWeight, timed Pause,
// PauseUntilResumed and Gate, then promotes to 100. BlueGreen provisions the
// whole canary, moves all traffic in one hop, then scales the stable down.
// Options holds what all three share: capacity mode, abort ramp, health,
// deadlines, scale-down delay.
//
// # The capacity-safe mover
//
// Every strategy only picks a target weight; one mover walks there in hops
// that keep these true, on observed values:
//
//  1. traffic never exceeds ready capacity: a weight hop toward the canary
//     goes no further than the canary's observed ready capacity, and one
//     toward the stable no further than the stable's;
//  2. desired StableCapacity + CanaryCapacity <= 100 + MaxSurgePercent;
//  3. a side is scaled down only to the traffic it still receives;
//  4. a hop is asked for only after the previous one is observed applied
//     (Observation.WeightApplied with the desired weight; each side Settled at
//     the desired capacity);
//  5. it always finishes when adapters apply what they are asked: a jump from
//     20 to 80 with MaxSurge 20 becomes several capacity and weight hops. A
//     side that settles below what was asked (3 replicas at 40 percent ready
//     at 33) does not stall the walk: traffic follows the ready capacity and
//     the mover asks for more.
//
// Moving down (an abort, a rollback, a lower canary step) is the same walk
// with the roles swapped: the stable side is scaled back up before traffic
// returns to it. AbortEmergency is the one exception to rule 1: all traffic
// goes to the stable side at once while it scales up.
//
// Rule 1 on the stable side assumes a side scaled down to c percent reports
// Ready >= c once settled, as a replica count rounded up gives. A backend that
// rounds down can leave the stable side briefly short of its traffic after a
// scale-down; the mover then keeps walking forward, which relieves it.
//
// The capacity modes: CapacityManaged (a capacity setter per side),
// CapacityFixed (both sides stay provisioned; only weights move; report each
// side as Capacity 100, Ready 100, Settled) and CapacityReplicas (no traffic
// router: traffic follows ready replicas, bounded by MaxSurgePercent and
// MaxUnavailablePercent like a rolling update).
//
// # Commands
//
// Pause, Resume, Abort, Promote, PromoteFull, Retry and Retarget are pure
// methods on State that return a new State and record when they happened.
// Retarget handles a new canary revision mid-rollout: back to the stable is a
// rollback; a third revision rolls the abandoned canary back safely, then
// starts the new one from the first step.
//
// # Time
//
// now is the only clock. Every instant the state depends on is recorded, to
// the microsecond (what metav1.MicroTime keeps through JSON), so a restarted
// controller resumes exactly where it stopped, and durations are measured
// from the recorded instants. A now earlier than a recorded instant counts as
// that instant: time that runs backwards never causes progress, nor a panic.
// now must be a real instant, not the zero time.
//
// # Completion
//
// When weight 100 and canary capacity 100 are observed, the rollout enters
// PhaseCompleting: after Options.ScaleDownDelay the stable side is scaled to
// 0 and the canary asked to return to its steady state (Target.Steady). Once
// that is observed the rollout is PhaseSucceeded, the canary revision is the
// stable one and the roles swap: State.StableSide flips to the other physical
// side, and the allocation reads weight 0, stable 100, canary 0 again, ready
// for the next Retarget.
package strategy
