// Package strategy is the deterministic core of upshift: from a rollout's
// [State], its latest [Observation] and the current instant, a [Strategy]
// ([Incremental], [Canary], [BlueGreen]) decides the next hop. It does no
// I/O and reads no clock, so [Plan] simulates a rollout exactly. Give
// commands and Step one real instant ([MaxClockSkew]), store the State each
// [Decision] returns (never trusted: [State.Validate]); the zero State is
// idle. See docs/design/strategy.md for its use and each invariant in full.
//
// # Invariants
//
// The property tests here and in package rollout hold these; 1 to 5 are the
// mover's ([Strategy]), 6 to 8 hold while sides report revisions ([DeployTarget]).
//  1. traffic never exceeds a side's observed ready capacity, extras counted
//     on the canary ([AbortEmergency] excepted);
//  2. desired StableCapacity + CanaryCapacity <= 100 + MaxSurgePercent;
//  3. a side is scaled down only to the traffic it may still receive;
//  4. a hop waits for the previous one to be observed applied (walk backs aside);
//  5. adapters that apply what they are asked give exactly [Plan]'s hops;
//  6. traffic only reaches a side observed running its role's revision;
//  7. a side's revision changes only at weight 0 (and capacity 0 with setters);
//  8. the canary gains capacity or weight only once its revision rolled out;
//  9. Step is deterministic, keeps its input, and survives a JSON round trip;
//  10. an invalid state yields no hop; nothing turns a valid state invalid;
//  11. an unobserved state asks for nothing; no release is reported unobserved;
//  12. an Abort with a new revision lets no Step raise the weight until Retry;
//  13. weight moves forward only while healthy and not commanded back; exact pauses;
//  14. a rollout left alone ends, waits for a person, or reports Degraded;
//  15. extras are hops: an abort drops them first; a rollout ends with none;
//  16. a weight hop waits the Interval after the last one landed, at most twice it (a Resume aside);
//  17. capacity follows the weight: the stable shrinks, the canary grows just in time.
package strategy
