// Package strategy is the deterministic core of upshift: from a rollout's
// [State] (with the latest [Observation] of the route and the two sides) and
// the current instant, a [Strategy] decides the next hop of an upgrade.
// Nothing here does I/O, reads a clock, logs or sleeps, so [Plan] can
// simulate a whole rollout and return its exact timeline.
//
// # Strategies
//
// [Incremental] raises the canary weight by StepPercent once per Interval;
// [Canary] walks explicit steps ([SetWeight], [Pause], [PauseUntilResumed],
// [Gate]), then promotes to 100; [BlueGreen] provisions the whole canary and
// moves all traffic in one hop. [Options] holds what they share (capacity
// mode, abort ramp, health, deadlines). They embed in a CRD spec as they are.
// [Plan] dry-runs one, with the delays its adapters have
// ([PlanOptions].ReadyDelay, RouteDelay), and reports what it costs in time
// and surge, so strategies compare before one runs ([Timeline].SurgeCost).
//
// # Beyond weights
//
// Canary steps [SetHeaderRoute] and [SetMirror] send chosen requests to the
// canary and copy stable requests to it; [Options].SessionAffinity keeps each
// session on one side ([Sticky] tickets: the share of sessions on the canary
// is the weight, none flips back while the weight rises, all are on the
// stable side at weight 0). They travel to the router with the weight
// ([State].DesiredExtras, [Decision].Extras). Header-routed and mirrored
// requests are load on the canary ([TrafficExtras.CanaryLoad]): a header
// route counts its ExpectedPercent, or all requests when that is unknown.
//
// # Use
//
// On every reconcile, in this order (package rollout's Runner does it all):
//
//	s = s.Retarget(spec.Revision, now)         // the zero State adopts the world
//	s, applied := s.Control(spec.Control, now) // record an Event for each of applied
//	s.Observed = observation                   // what the adapters report
//	d := strat.Step(s, now)
//	// apply d.Deploy, capacity increases, d.Weight, then capacity decreases;
//	// store d.State; step again after d.RequeueAfter
//
// The commands [State.Pause], [State.Resume], [State.Abort], [State.Promote],
// [State.PromoteFull] and [State.Retry] make the same requests from Go. The
// examples of [Plan], [Incremental] and [Strategy] run as they are.
//
// Rules: now is the only clock; give commands and Step the same one, a real
// instant ([MaxClockSkew]). Store the State each [Decision] returns; a stored
// state is never trusted ([State.Validate]). The zero State is idle.
//
// # Invariants
//
// The property tests of this package and of package rollout hold these on
// random strategies, from any stored state, against a world that lags,
// rounds, crashes, rejects routes, is redeployed and scaled by others, loses
// its status and whose clock jumps back. Rules 1 to 5 are the mover's (see
// [Strategy]); 6 to 8 hold while the sides report revisions ([DeployTarget]).
//
//  1. traffic never exceeds a side's observed ready capacity ([AbortEmergency]
//     excepted), header-routed and mirrored requests counted on the canary;
//  2. desired StableCapacity + CanaryCapacity <= 100 + MaxSurgePercent;
//  3. a side is scaled down only to the traffic it may still receive;
//  4. a hop is asked for only once the previous one is observed applied (a
//     walk back excepted);
//  5. with adapters that apply what they are asked, a rollout ends in exactly
//     the hops [Plan] predicts;
//  6. traffic only reaches a side observed running its role's revision;
//  7. a side's revision changes only at weight 0 (and capacity 0 with setters);
//  8. the canary gains capacity or weight only once observed running its
//     revision, rolled out; a chain of Retargets ends on the last revision;
//  9. Step is deterministic, keeps its input, and a JSON round trip of the
//     state changes no decision;
//  10. an invalid state yields no hop; nothing turns a valid state invalid;
//  11. an unobserved state asks for nothing, and nothing is reported released
//     before the world is observed released;
//  12. an Abort written with a new revision mid-rollout lets no later Step
//     raise the weight until a Retry;
//  13. weight moves forward only while healthy and not commanded back; pauses
//     last exactly their duration;
//  14. a rollout left alone ends, waits for a person, or reports Degraded once
//     its progress deadline has passed;
//  15. extras are hops like weights: an abort drops the header route and the
//     mirror before the weight walks back and never raises them; a rollout
//     ends with none; with sticky sessions the weight stops only on ticket
//     values and never falls while it goes forward;
//  16. intervals count from the world: a weight hop is decided no sooner
//     than the Interval ([Incremental]) after the previous weight hop's
//     weight landed: when the caller's write of it returned, as package
//     rollout's Runner records in [State].WeightAppliedAt (so no two weight
//     writes land closer than the Interval, however slow one of them), or
//     else when it was first observed in force (the route accepted with its
//     weight and extras; the canary settled at its capacity in the Replicas
//     mode), for callers that keep the state in memory between Steps as
//     package rollout's Runner.Run does, when that observation came within
//     the Interval since the hop or since a Step saw the weight pending;
//     else no sooner than the Interval after the hop (a promote and an abort
//     excepted). A caller that loses [State].WeightAppliedAt and
//     [State].WeightPendingAt (they are volatile: [Changed]) may count from
//     the decision instead; the wait for the Interval never ends later than
//     twice the Interval after the hop (or after the latest pending
//     observation it stored), so nothing is postponed indefinitely;
//  17. capacity follows the weight: while a rollout goes forward, the
//     stable side shrinks to the traffic it carries as soon as a weight is
//     observed in force (in a wait too short to shrink it and then grow the
//     canary, in one decision with that growth), and the canary is asked for
//     what the next weight hop needs, no more; during a timed pause or an
//     interval that growth is asked the canary's observed pace ([Pace])
//     before the wait ends. With
//     adapters of fixed delays a rollout's ramp is its waits plus one
//     data-plane lag per weight hop, and its surge cost ([Timeline].SurgeCost)
//     one ready delay plus one lag of full capacity.
package strategy
