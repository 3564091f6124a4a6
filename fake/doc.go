// Package fake holds stateful, in-memory adapters for testing code that uses
// upshift: your own reconciler, an operator that embeds a rollout.Runner, or
// a program that drives strategy.Step by hand.
//
// The fakes behave like the systems they stand in for, not like mocks:
//
//   - Router keeps a route's spec weights and the weights its data plane has
//     accepted; a change is accepted after a Lag (a number of observations
//     and/or a duration on a Clock). Reject makes the data plane refuse the
//     route; Conflicts makes writes lose optimistic-concurrency races.
//   - Capacity is one side's workload: a replica count, replicas that stop at
//     once and start after a Lag (all together, or one per observation with
//     SetPartial), health, and errors. Ready replicas can crash: Crash takes
//     them out at once and the workload replaces them after the Lag;
//     CrashLoop keeps every replica that is down, or new, from becoming
//     ready. Crashes leave Health as SetHealth set it.
//   - Capacity is also a rollout.Deployer for Runner.RevisionA/RevisionB: the
//     side runs a revision ("" until Deploy, or SetRevision for a side that
//     runs one from the start). A deploy replaces its replicas with ones of
//     the new revision, ready after the Lag, and Revision reports it
//     Updated once every wanted replica runs it; StallDeploys makes deploys
//     never roll out. What a side runs is its template: Redeploy stands
//     for another writer putting another revision on it, leaving the
//     revision upshift recorded (Recorded) stale, and Revision reports what
//     runs, as serve/replicas reads a Deployment (any revision, or "" for a
//     template no revision maps to). A deploy of another revision while the
//     side holds capacity, or serves traffic (ServingFunc, given
//     Router.Serving), is a violation: Violations lists them; another
//     writer's Redeploy is not.
//   - FixedSide is a side of the fixed capacity mode that runs a
//     revision: fully provisioned, a deploy restarts its replicas (its
//     ready share drops for the Lag), and a deploy while it serves traffic
//     is a violation. NewFixedTraffic simulates requests on two of
//     them.
//   - Router, Capacity and FixedSide are rollout.Claimers, as the real
//     adapters: each holds a claim (Claimant, SetClaimant), a second owner's
//     Claim is refused with a *rollout.ClaimedError, a write for an owner
//     other than the claimant (rollout.OwnerFrom) changes nothing, and each
//     recorded call names its owner (Call.Owner). See claim.go.
//   - Store keeps a rollout's state as JSON; Analyzer answers gates.
//   - Clock is a manual clock (a clock.Clock) whose timers fire as a test
//     advances it; it drives a Runner, a gateway Router, a drain Controller
//     or a retry Transport.
//   - Traffic sends simulated requests split by the applied weights and
//     counts what each side could serve: a rollout that ever sends traffic
//     to capacity that is not ready shows up as Overloaded or Dropped. A
//     revision can answer a share of its requests with a 500
//     (SetErrorRate), and every request can be recorded into a Metrics
//     (RecordTo).
//   - Metrics is an analysis.Source over requests recorded per side, as a
//     metrics backend scrapes them: the canary's success rate and latency
//     quantile over a window, values of custom queries (SetQuery), a scrape
//     and ingestion lag (SetLag), and a backend that is down (SetDown). An
//     analysis.Analysis over it judges the simulated canary.
//   - RayServe emulates one Ray cluster's Serve REST API as an
//     http.Handler for httptest.NewServer: it validates PUT configs as Ray
//     does, derives the target capacity direction and every deployment's
//     target as Ray's controller does (capacity-adjusted num_replicas, and
//     autoscaling bounds whose floor is initial_replicas while scaling up,
//     min_replicas otherwise, with Ray's decimal half-up rounding, written
//     apart from the adapter's), scales replicas toward them over a number
//     of polls, checks tokens as Ray's dashboard does (RequireToken), and
//     can fail a deployment, kill running replicas (KillReplicas: Ray
//     replaces them, reporting the deployment UNHEALTHY until they run),
//     keep replacements failing (CrashLoop), answer 5xx, hang or answer
//     garbage. Package serve/ray's adapter is tested against it.
//     DeployedConfig returns an application's deployed config. With
//     RayServeOptions.GuardRedeploys (off by default), a PUT that changes
//     the config on a cluster not at target_capacity 0, or serving traffic
//     (ServingFunc), is refused with 400 and listed by Violations;
//     writing back what GET reports is no change. PutByOther is another
//     writer's PUT (someone redeploying a serving cluster), which the
//     guard lets through.
//
// Router, Capacity and FixedSide are rollout.Notifiers, as a watch on the
// route or workload is: Notify wakes a subscriber on every write or test
// control that changes what the fake reports, and at the instant a Lag's
// Duration ends (a timer on the Clock); a Lag counted in reads ends at a
// read, which sees it, and wakes no one. DropNotifications stands for a
// watch that is down, so that a Runner falls back to polling. A
// subscription ends when its ctx does, and Notify reports its end to a
// Runner's Run (rollout.TrackNotify); Subscriptions counts the live ones,
// so a test can check that nothing outlives the code under test.
//
// Every fake is safe for concurrent use, records a History of its calls
// (KeepHistory(false) keeps only counts), and fails on demand with FailWith
// (RayServe with FailRequests).
// For anything else — a delay, a one-off error, a write that lands but
// reports failure — wrap a fake (or any adapter) with InterceptRouter or
// InterceptCapacity: each intercepting func receives the wrapped adapter and
// decides what to do with the call.
//
// A typical test:
//
//	clock := fake.NewClock(t0)
//	router := fake.NewRouter(clock)
//	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
//	b.SetLag(fake.Lag{Reads: 2})
//	r := &rollout.Runner{Strategy: myStrategy, Router: router, A: a, B: b, Clock: clock}
//	// To let the Runner deploy revisions, and check it never does so on
//	// a side that serves or holds capacity:
//	a.SetRevision("v1")
//	a.ServingFunc(router.Serving(strategy.SideA))
//	b.ServingFunc(router.Serving(strategy.SideB))
//	r.RevisionA, r.RevisionB = a, b
//	s := strategy.NewState("v1", "v2")
//	for !s.Phase.Terminal() {
//		next, requeue, err := r.Reconcile(ctx, s)
//		...
//		s = next
//		clock.Advance(requeue)
//	}
//	// then: a.Violations() and b.Violations() are empty
//
// # A whole world
//
// World does that wiring for you: two sides (side A running and serving
// WorldOptions.Revision, side B running nothing), a Router (none in the
// replicas mode), Traffic, a Clock and a rollout.Runner, in the capacity
// mode of the strategy, with the faults the options ask for (lags, partial
// readiness, failing writes, an unhealthy canary). RunUntil drives the
// clock, a tick of traffic at a time, and the Runner until a phase, and
// gives up with a *NotReachedError (ErrNotReached) naming the phase and
// message reached when the rollout ends otherwise or a deadline of
// simulated time passes. AssertSafe fails a test, naming the instant and
// what was observed, if any observation on the way overloaded a side,
// dropped requests, held capacity above the surge budget, sent requests to
// a side not running its role's revision, deployed under traffic or
// capacity, or showed a Degraded hold:
//
//	w, err := fake.NewWorld(fake.WorldOptions{Strategy: myStrategy, Revision: "v1"})
//	...
//	w.Start("v2")
//	end, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
//	...
//	w.AssertSafe(t)
//
// Side, Router, Traffic, Clock and Runner give the pieces for anything else:
// crash replicas mid-rollout, wrap an adapter with InterceptRouter, or
// reconcile with a Runner of your own.
package fake
