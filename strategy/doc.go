// Package strategy is the deterministic core of upshift: it decides, from a
// rollout's State and the current instant, the next hop of an upgrade.
//
//	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
//	d := inc.Step(state, now)
//	// apply d.StableCapacity / d.CanaryCapacity / d.Weight, store d.State,
//	// call again after d.RequeueAfter (d.WatchedRequeueAfter when
//	// every change of the route and the workloads wakes you)
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
// side as Capacity 100, Ready 100, Settled; with revisions observed, a side
// whose revision has not rolled out, Updated false, is trusted with no more
// traffic than the route sends it, since its pods may be restarting, so
// neither a step nor a walk back moves traffic onto it until it has) and
// CapacityReplicas (no traffic
// router: traffic follows ready replicas, bounded by MaxSurgePercent and
// MaxUnavailablePercent like a rolling update; a side counts with its ready
// capacity only once it has settled at what was asked, so a side still
// moving never lets the other shrink beyond MaxUnavailablePercent).
//
// # The zero State, new objects and lost states
//
// The zero State is idle: Step asks no adapter for anything, and a Runner
// does not even read them, until a rollout is started. A brand-new object
// (whose status holds a zero or null state) starts with one line, called on
// every reconcile with the revision its spec asks for:
//
//	s = s.Retarget(spec.Revision, now)
//
// On the zero state this assumes nothing: it records the revision without
// looking (State.Unobserved). The same line serves an object whose status
// was wiped, or that was deleted and re-created with the same spec, while
// the route and the sides still hold a rollout: the zero state may stand
// for any world. An unobserved state is not idle: the Runner observes it
// (the route, both sides' capacity and revision), and the next Step adopts
// what it sees, asking for nothing in that Step:
//
//   - all traffic applied on one side whose observed revision is the spec's,
//     fully rolled out: the idle state, with that side stable;
//   - the spec's revision on one side while the other carries traffic (or
//     on the side with none): the rollout in progress from the other side's
//     observed revision, at the observed weight and capacities, Progressing,
//     continuing at the first canary step whose weight is >= the observed
//     weight; a side whose reader recognises no revision is the stable side
//     with an unknown revision (""), from which traffic only moves away
//     (but for a walk back);
//   - the spec's revision on no side: a walk back to the side that carries
//     the most traffic (its observed revision is the stable one), then the
//     spec's revision deployed and rolled out, as after a Retarget;
//   - without revisions in the observation, all traffic on one side is
//     adopted as the idle state there; a split is held (below);
//   - held, asking for nothing: an observation that failed, a route not
//     accepted yet, the spec's revision still rolling out on the side with
//     all traffic (reason Adopting, then Degraded once the progress
//     deadline has passed since the Retarget); weights that are not a split
//     of 100, a split route whose sides report no revisions, no side
//     running the spec's revision while the side with the most traffic runs
//     none its reader recognises (Degraded, reason AdoptionBlocked, naming
//     what was observed, until the world changes).
//
// Nothing is reported released before the world is observed released: an
// unobserved state is neither idle nor terminal. Requests of a Control seen
// before the adoption act on the adopted rollout: an Abort walks it back to
// the side that runs the stable revision (ending Aborted, with the spec's
// revision as the canary a Retry starts), Paused holds it, Promote and
// PromoteFull pass its steps; on an adopted idle state they have nothing
// to act on and are dropped. Retry and Resume find nothing to act on.
// Another Retarget before the adoption replaces the revision recorded.
// Plan has nothing to plan for an unobserved state (an empty timeline).
//
// NewState(v, v) is the idle state with v on SideA, for a caller who knows
// the world; NewState(stable, canary) is a rollout about to start.
//
// A state read back from storage is never trusted. Step validates it first
// (State.Validate): an unknown phase or side, a percentage outside 0..100, a
// negative counter, or a desired allocation that breaks the invariants below
// (the stable side below its traffic, the canary below its weight, phase
// Completing with traffic still on the stable side) asks for nothing and
// reports Degraded with reason InvalidState; the Runner returns the
// *StateError, which names every field. Replace such a state to recover.
//
// Repairs (asking again for a hop that a lost write, another writer or a
// lost state left undone) are checked against the world as observed now,
// not trusted because they were once recorded: a weight is written back only
// if both sides' observed ready capacity covers it, and a side is scaled
// down only to at least the traffic the route may still send it. A route
// whose weights are not a split of 100 (Observation.WeightInvalid) is
// repaired the same way; until then, and while the data plane has not
// accepted the route's weights (it may still route by older ones), no
// repair scales a side down at all.
//
// # Revisions on sides
//
// Each physical side runs a revision: the stable side the stable revision,
// the canary side the canary one. When the observation reports what each
// side runs (Observation.Revisions, with SideObservation.Revision and
// Updated; the Runner sets them from its RevisionA and RevisionB), Step puts
// each revision on its side itself and keeps these true:
//
//  6. traffic only ever reaches a side observed running the revision its
//     role should run (during the walk back after a Retarget the canary
//     role still names the abandoned revision, which its side still runs);
//  7. a side's revision changes only while it carries weight 0, observed on
//     an accepted route, and, with capacity setters (the managed and
//     replicas modes), while it is settled at capacity 0: the canary
//     revision is deployed at zero (Decision.Deploy, recorded in
//     Desired.CanaryRevision and asked again if it does not appear), which
//     is what keeps an upgrade within the surge budget; in the fixed mode
//     the side stays provisioned and is redeployed while it carries weight 0;
//  8. no capacity is added to the canary side and no weight moves onto it
//     until it is observed running the canary revision, fully rolled out
//     (Updated).
//
// A Retarget to a third revision walks the abandoned one out (weight, then
// capacity), deploys the new one at zero, observes it, and only then ramps.
// A canary side observed running another revision while it carries traffic
// or capacity (someone redeployed it) is walked back, in any phase
// (Completing included): the rollout aborts with reason RevisionChanged,
// and Retry deploys the canary revision again. A walk back keeps a canary
// that already holds less capacity than asked, as long as that covers its
// traffic, rather than scaling a side of unknown revision back up. A stable
// side observed running another revision than the stable one holds all
// forward progress, with Degraded (StableRevisionMismatch); a walk back
// still returns traffic to it, since it is where an abort goes and holding
// would leave the traffic on the canary being aborted. A deploy that never
// rolls out is bounded by the progress deadline like any other hop. At
// success the roles swap, so a chain v1 -> v2 -> v3 -> v2 alternates
// between the same two sides with no bookkeeping by the caller.
//
// The first revision is the one the caller creates the workload with: on
// the zero state, Retarget(first) records it unobserved, and the first
// Step adopts the side that runs it with all traffic (see "The zero State,
// new objects and lost states"). Without revisions in the observation
// nothing is checked or deployed, and the caller puts each revision on its
// side.
//
// # Deadlines, failures and lost readiness
//
// No default leaves a rollout waiting in silence. Options.ProgressDeadline
// (DefaultProgressDeadline, ten minutes, when zero; NoProgressDeadline turns
// it off) bounds every wait for the world, counted from the latest of the
// last hop, the start of the rollout, the start of the current step and the
// last command: a hop not observed applied, ready capacity that does not
// come, a route no gateway reports on, a gate verdict that never arrives.
// When it passes the rollout reports Degraded (ProgressDeadlineExceeded),
// and aborts if AbortOnProgressDeadline. Pauses and step intervals are
// exempt. A canary with traffic whose health is inconclusive (an analysis
// without data, or whose metrics source is down) is held, and the hold is
// such a wait: it counts toward the deadline from when the rollout would
// have moved on without it (the hop applied and, later still, the end of
// the step interval or of the timed pauses ahead), so a hold that lasts
// longer than the deadline past that instant reports Degraded and, with
// AbortOnProgressDeadline, aborts; one that ends in time costs nothing.
// (A PauseUntilResumed step next bounds nothing: the rollout would wait
// there for a Resume without a deadline.)
// Adapters that fail (Observation.Error, set by the Runner from a
// read or a write that failed) report Degraded (ObservationFailed) at once,
// ask for nothing, and count toward the deadline from their first failure
// (State.FailingSince), pauses included.
//
// Readiness lost under traffic is a signal, in the managed and fixed modes:
// a side whose observed ready capacity is below the traffic the route sends
// it while it is not settled (pods crashed or failing their checks) has lost
// readiness. On the canary each such observation counts as unhealthy toward
// Options.UnhealthyAction (the abort reason is CanaryReadinessLost); on the
// stable side progress holds, with Degraded (StableReadinessLost), until it
// recovers. A side that has settled a little below its traffic (whole
// replicas) has lost nothing. In the Replicas mode traffic follows ready
// replicas, and a side that does not become ready is bounded by the
// progress deadline.
//
// A walk back (an abort, a rollback) does not wait for the data plane to
// accept its weight hops: each moves traffic toward a stable side observed
// ready for it, so a parent that rejects the route, or never reports on it,
// cannot freeze an abort. It does wait for acceptance before scaling the
// canary below traffic it may still receive. A route that already sends
// less to the canary than asked is taken as it is, not written back up.
//
// # Invariants
//
// The property tests of this package and of package rollout hold these on
// random strategies, from any stored state (corrupt ones included), against
// a world that lags, rounds, crashes on either side, rewrites and rejects
// routes and stops answering, whose sides other writers redeploy (with any
// revision, or a template no revision maps to) and scale, whose status is
// wiped or restored from an older save, with random commands, restarts and
// clocks that jump back:
//
//   - Step is deterministic, does not modify its input, and a JSON round trip
//     of the state changes no decision;
//   - no hop puts traffic above a side's observed ready capacity (a hop may
//     only lower the share of a side that is already short), except the
//     AbortEmergency ramp, as documented;
//   - no side is scaled below the traffic it may carry;
//   - desired capacity stays within 100 + MaxSurgePercent;
//   - a hop starts only after the previous one is observed applied (a walk
//     back excepted, as above);
//   - while the sides report revisions, traffic only reaches a side observed
//     running its role's revision (a side redeployed by someone else
//     excepted: a redeployed canary is walked back, and a walk back still
//     returns traffic to a redeployed stable side), a deploy is asked only of a side that
//     carries weight 0 (and, with capacity setters, capacity 0), and
//     capacity only grows on a side running its role's revision; a chain of
//     Retargets, aborts, retries and promotes ends with all traffic on the
//     last revision asked for;
//   - an invalid state yields no hop, and neither Step nor a command turns a
//     valid state into an invalid one;
//   - a state that has not observed the world (Unobserved) asks for
//     nothing, and nothing is reported released (the idle state adopted,
//     Succeeded reached) on an observation that does not show all traffic
//     on the stable side running the stable revision;
//   - an Abort written with a new revision mid-rollout lets no later Step
//     raise the weight until a Retry;
//   - weight only moves forward while healthy and not commanded back, and a
//     rollout finishes within a bounded number of hops when the adapters
//     apply what they are asked, in exactly the hops Plan predicts;
//   - pauses last exactly their duration;
//   - a rollout left alone reaches a terminal phase, waits for a person
//     (paused), or reports Degraded with a reason once its progress deadline
//     has passed.
//
// # Commands
//
// Pause, Resume, Abort, Promote, PromoteFull, Retry and Retarget are pure
// methods on State that return a new State and record when they happened.
// State.Control applies them from a spec (see Declarative control).
// Retarget handles a new canary revision mid-rollout: back to the stable is a
// rollback; a third revision rolls the abandoned canary back safely, then
// starts the new one from the first step.
//
// # Declarative control
//
// An operator whose spec steers the rollout embeds a Control in it and
// calls State.Control on every reconcile, after Retarget, with the spec as
// it is and the same now as the Step that follows:
//
//	s = s.Retarget(spec.Revision, now)
//	s, applied := s.Control(spec.Control, now) // record an Event for each of applied
//	d := strat.Step(s, now)                    // or Runner.ReconcileAt(ctx, s, now)
//
// Control.Paused is level-triggered: while it is true the rollout is held
// by a pause of its own (reason ControlPause); set back to false, that
// pause, and only that one, is resumed. A manual pause made with the Pause
// command and a pause for an unhealthy canary stay until a Resume. A
// PauseUntilResumed step (or an inconclusive gate) is passed with a
// Promote request (or Resume); while Paused is true Control takes such a
// pause over, so that a Promote requested meanwhile waits for the spec to
// be un-paused, and un-pausing hands the pause back to the step, which
// still waits for its Promote unless one came. A walk back is never held,
// and an Abort request ends the spec's pause.
//
// Abort, Retry, Promote, PromoteFull and Resume are one-shot requests: a
// token (a timestamp, a counter) that acts once each time it changes to a
// non-empty value. State.Handled records the last value of each request
// seen, so a request acts exactly once however many reconciles see it, and
// also across a restart of the controller and a JSON round trip of the
// state; it is kept across rollouts, so a token left in the spec does not
// act on the next one. A request that does not apply when it is seen (Retry
// with nothing aborted) is used up all the same and reported as Ignored.
// Within one call Retry comes before Abort (both new: the rollout ends up
// aborting), then PromoteFull, Promote, Resume, and Paused last. Control is
// idempotent: applied again to its own result, at any instant, it applies
// nothing and changes nothing.
//
// Requests written in the same spec update as a new revision act on what
// the Retarget made of the rollout (Retarget first, then Control). With
// the revision the canary already runs (or the one a Retarget's walk back
// had abandoned for, cancelling it), every request acts on the rollout as
// it is. With the stable revision (a rollback, walked back and ended
// RolledBack) Abort, Retry, Promote, PromoteFull and Resume are Ignored and
// Paused holds nothing: a walk back is never held. With a third revision
// mid-rollout (the canary is walked back, then the new revision starts from
// its first step), Abort stops the new revision: the walk back goes on and
// the rollout ends Aborted with the new revision as its canary, which a
// later Retry starts (a Retry during that walk back withdraws the abort);
// Retry, Promote, PromoteFull and Resume are Ignored (they meet the walk
// back: write them again once the new rollout runs); Paused holds the new
// revision from its first step, before any traffic reaches it. After a
// finished rollout (Succeeded, RolledBack, Aborted) a new revision starts
// at once: Abort ends it Aborted before any traffic moves, Promote passes
// its first step, PromoteFull walks to 100, Paused holds it, and Retry and
// Resume are Ignored.
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
// Commands and Step must therefore share one clock. A state stamped by
// another (a command given time.Now() while the steps run on a test clock)
// holds every time-gated event until now reaches the stamp. When a recorded
// instant is more than MaxClockSkew (a minute) ahead of now, Step still
// decides as above but reports Degraded with reason ClockSkew, and
// State.CheckClock returns a *ClockSkewError (errors.Is ErrClockSkew)
// naming the field, which the Runner of package rollout returns; a smaller
// skew, as between the clocks of two machines, is absorbed.
//
// # When to step again
//
// Decision.RequeueAfter is the exact time until the next time-gated event
// (the end of a step interval, a timed pause, the scale-down delay, the
// progress deadline), or, while waiting for the world to show a hop, a
// poll: the first at Options.InitialPollInterval (100ms by default) after
// the hop, each later one as long as the wait so far, so polls double up to
// PollInterval and the last lands on the instant a lost hop is asked again.
// A hop the world applies in 300ms is seen within about 400ms, and a slow
// one costs a handful of extra reads. Decision.WatchedRequeueAfter is the
// requeue for a caller that is woken by every change of what its adapters
// observe (watches): the same time-gated events, but polls only at
// PollInterval. Neither is stored in the State; both derive from the
// recorded instants, so a restarted controller polls as the one before.
//
// # In a CRD spec
//
// Incremental, Canary and BlueGreen embed in a custom resource's spec as
// they are. Their durations are metav1.Duration, strings like "1m30s" in
// JSON and YAML (build them with metav1.Duration{Duration: d}; Pause still
// takes a time.Duration). Each has a DeepCopy generated by controller-gen,
// and controller-gen markers give the CRD schema the rules of Validate:
//
//	type RolloutSpec struct {
//		Revision string `json:"revision"`
//		// +optional
//		Incremental *strategy.Incremental `json:"incremental,omitempty"`
//		// +optional
//		Canary *strategy.Canary `json:"canary,omitempty"`
//		// +optional
//		BlueGreen *strategy.BlueGreen `json:"blueGreen,omitempty"`
//	}
//
// The API server then rejects what Validate rejects, naming the field as
// Validate does ("spec.incremental.stepPercent" for "incremental.stepPercent"):
// percentages out of range, an unknown capacity mode, abort ramp or
// unhealthy action, a negative threshold or duration, a zero interval or
// pause, a poll interval neither 0 nor at least 100ms, an initial poll
// interval above the poll interval, a canary step with other than one of
// setWeight, pause and gate, a gate without a name, and the cross-field
// rules (maxSurgePercent at least stepPercent unless capacity is Fixed,
// at least 1 in the managed mode, maxUnavailablePercent only in the
// Replicas mode, where maxSurgePercent + maxUnavailablePercent must be at
// least 1, no Emergency
// abort ramp in the Replicas mode, abortOnProgressDeadline and a set
// progressDeadline only without noProgressDeadline). Only Validate
// (and Step, which validates first) enforces them on a strategy built in
// Go or stored before the CRD had these rules; the schema rejects a
// duration that does not parse with a CEL type conversion error rather
// than Validate's message, and, as the schema skips CEL rules when a
// bound or an enum already fails, it may report fewer problems at once
// than Validate. The e2e/crd tests hold the two to the same answers on a
// real API server.
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
