// Package fake holds stateful, in-memory adapters for testing code that uses
// upshift: your own reconciler, an operator that embeds a rollout.Runner, or
// a program that drives strategy.Step by hand. The fakes behave like the
// systems they stand in for, not like mocks: changes land after a lag,
// replicas crash, deploys under traffic are caught.
//
// Start with World, one value that holds a whole test world: two sides, a
// Router (none in the replicas mode), Traffic, a Clock and a
// rollout.Runner, wired in the strategy's capacity mode with the faults
// WorldOptions asks for (lags, partial readiness, failing writes, an
// unhealthy canary). RunUntil drives it to a phase; AssertSafe fails the
// test if any observation on the way overloaded a side, dropped requests,
// held capacity above the surge budget, sent requests to a side not
// running its role's revision, deployed under traffic or capacity, or
// showed a Degraded hold:
//
//	w, err := fake.NewWorld(fake.WorldOptions{Strategy: myStrategy, Revision: "v1"})
//	...
//	w.Start("v2")
//	end, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
//	...
//	w.AssertSafe(t)
//
// World's Side, Router, Traffic, Clock and Runner hand out its pieces, to
// crash replicas mid-rollout, wrap an adapter or reconcile with a Runner of
// your own. Each piece also stands alone (the package Example wires them
// by hand):
//
//   - Router, a rollout.TrafficRouter and rollout.RouteShaper whose data
//     plane accepts weights and extras (header routes, mirrors, sticky
//     sessions) late;
//   - Capacity, one side's workload and a rollout.Deployer; FixedSide, a
//     side of the fixed capacity mode that runs a revision;
//   - Traffic, simulated requests split by the applied weights, counting
//     what each side could not serve (Overloaded, Dropped); with users
//     (SetUsers) and marked requests (SetHeaderShare) it follows the
//     applied extras request by request: header routes, mirrored copies
//     and sticky-session tickets, counting sessions and flips;
//   - Metrics, an analysis.Source over the simulated requests;
//   - Store and Analyzer, a rollout.Store and a rollout.Analyzer;
//   - Clock, a manual clock.Clock whose timers fire as the test advances it.
//
// Router, Capacity and FixedSide are rollout.Notifiers and
// rollout.Claimers, as the real adapters are (see Router.Notify and
// Router.Claim). Faults are methods of each fake: SetLag delays changes by
// a Lag (reads and/or a duration on the Clock); FailWith fails every call
// until FailWith(nil); others stand for what the real system does (Reject,
// Conflicts, Overwrite, DropExtras, Unsupported, Crash, CrashLoop,
// StallDeploys, Redeploy, SetErrorRate, SetDown...). For anything else, such as a delay, a one-off
// error or a write that lands but reports failure, wrap any adapter with
// InterceptRouter or InterceptCapacity: each intercepting func receives
// the wrapped adapter and decides what to do with the call.
//
// Every fake is safe for concurrent use. The adapters (Router, Capacity,
// FixedSide, Store, Analyzer) record a History of their calls
// (KeepHistory(false) keeps only counts). Router, Store, Analyzer and Clock
// work from their zero value; the others are built with their New function.
package fake
