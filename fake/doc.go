// Package fake holds stateful, in-memory adapters for testing code that uses
// upshift: your own reconciler, an operator that embeds a rollout.Runner, or
// a program that drives strategy.Step by hand. The fakes behave like the
// systems they stand in for, not like mocks: changes land after a lag,
// replicas crash, deploys under traffic are caught.
//
// Start with [World]: two sides, a [Router] (none in the replicas mode),
// [Traffic], a [Clock] and a rollout.Runner, wired in the strategy's
// capacity mode with the faults [WorldOptions] asks for. [World.RunUntil]
// drives it to a phase; [World.AssertSafe] fails the test if any observation
// on the way overloaded a side, dropped requests, held capacity above the
// surge budget, sent requests to a side not running its role's revision,
// deployed under traffic or capacity, or showed a Degraded hold:
//
//	w, err := fake.NewWorld(fake.WorldOptions{Strategy: myStrategy, Revision: "v1"})
//	...
//	w.Start("v2")
//	end, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
//	...
//	w.AssertSafe(t)
//
// Each piece also stands alone (the package Example wires them by hand):
// [Router], [Capacity], [FixedSide], [Traffic], [Metrics], [Store],
// [Analyzer] and [Clock]. Faults are methods of each fake (SetLag,
// FailWith, Crash...); [InterceptRouter] and [InterceptCapacity] wrap an
// adapter for anything else. Every fake is safe for concurrent use, and the
// adapters record a History of their calls. Router, Store, Analyzer and
// Clock work from their zero value; the others are built with their New
// function. See docs/design/fake.md for each piece and fault.
package fake
