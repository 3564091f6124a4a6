package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// tick is the simulated time between two batches of requests, of
// trafficPerTick requests each.
const (
	tick           = 100 * time.Millisecond
	trafficPerTick = 1000
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The analysis of -analysis: at least minSuccess of the canary's requests
// in a window of 3 intervals succeed, evaluated every analysisInterval
// (health), and the canary strategy's gate of the same check.
const (
	minSuccess       = 0.95
	analysisInterval = time.Second
	gateName         = "success-rate"
	// metricsLag is how long after a request the fake metrics backend sees
	// it; the analysis trails the clock by analysis.DefaultLag, more.
	metricsLag = time.Second
)

// expectation is how a rollout must end.
type expectation int

const (
	// expectSuccess: Succeeded, or Aborted when -abort-at asked for it.
	expectSuccess expectation = iota
	// expectAnalysisAbort: Aborted, by the analysis unless -abort-at
	// asked first.
	expectAnalysisAbort
	// expectEither: -canary-errors next to the analysis' threshold, where
	// the failures in a window decide: either end.
	expectEither
)

// simulation is two sides and a route, shared by consecutive rollouts: after
// a rollout succeeds, the canary side holds the stable role of the next one.
// Each side runs a revision: side A starts with v1, side B with none, and
// the Runner deploys each rollout's canary revision on the canary side
// itself, at weight 0 and capacity 0 (the fake sides record any deploy made
// while serving or holding capacity as a violation).
type simulation struct {
	cfg     Config
	out     io.Writer
	clock   *fake.Clock
	router  *fake.Router
	a, b    *fake.Capacity
	side    strategy.Side // the physical side holding the stable role
	running string        // the revision on the stable side
	faults  faultCounts
	// metrics records every simulated request (with -analysis), for the
	// analysis to read.
	metrics *fake.Metrics
	// traffic is the current rollout's, and lastStats its stats at the
	// last sample.
	traffic   *fake.Traffic
	lastStats fake.TrafficStats
	// wrapRouter, when set, wraps the route the Runner of each rollout
	// writes to (canary: that rollout's canary side); tests use it.
	wrapRouter func(next rollout.TrafficRouter, canary strategy.Side) rollout.TrafficRouter
	// configure, when set, adjusts each rollout's traffic after the flags
	// did; tests use it.
	configure func(*fake.Traffic)
}

type faultCounts struct{ conflicts, errors int }

// sample is the allocation at one instant of a rollout, in role terms:
// the canary weight applied, the capacity each side is set to and the
// capacity each side has ready.
type sample struct {
	at                       time.Duration
	weight, stable, canary   int32
	readyStable, readyCanary int32
	paused                   bool
	// extras is what the traffic extras did at the sample.
	extras extrasSample
}

// deploy is a deploy hop the Runner applied: revision on side, at (since the
// start of the rollout), and when the side was observed running it fully
// rolled out (rolledOut false while it was not).
type deploy struct {
	revision    string
	side        strategy.Side
	at          time.Duration
	rolledOut   bool
	rolledOutAt time.Duration
}

type result struct {
	name  string
	phase strategy.Phase
	took  time.Duration
	plan  strategy.Timeline
	hops  int
	stats fake.TrafficStats
	// surge is the strategy's surge budget: peak capacity may reach 100 +
	// surge.
	surge   int32
	samples []sample
	// aborted reports that the rollout was aborted, abortAt when (since its
	// start) and abortReason why.
	aborted     bool
	abortAt     time.Duration
	abortReason string
	emergency   bool
	// deploys are the deploy hops applied, in order; violations the deploys
	// the fake sides recorded as made while serving or holding capacity,
	// "side B: ..." each.
	deploys    []deploy
	violations []string
	// expect is how the rollout must end; analysis reports that an
	// analysis judged it; canaryErrors is the share of requests its new
	// revision failed on purpose.
	expect       expectation
	analysis     bool
	revision     string
	canaryErrors float64
	// firstFailure is when (since the start) the first request failed
	// with a 500, -1 if none did; abortWhy is what the analysis reported
	// when the rollout aborted.
	firstFailure time.Duration
	abortWhy     string
	// extras reports that the rollout ran with an extras flag: its
	// samples hold what the extras did.
	extras bool
	// sticky reports -sticky; redraw is the re-draw model's share of
	// sessions on the canary at each sample (filled by the plot).
	sticky bool
	redraw []float64
	// problems lists what went wrong: an unexpected phase, requests dropped
	// or overloaded, capacity above the surge budget, a deploy violation.
	// Empty when all is well.
	problems []string
}

func newSimulation(cfg Config, out io.Writer) (*simulation, error) {
	if cfg.Replicas < 1 {
		return nil, fmt.Errorf("-replicas %d: want at least 1", cfg.Replicas)
	}
	if cfg.Speed < 0 {
		return nil, fmt.Errorf("-speed %v: want 0 or more", cfg.Speed)
	}
	if !(cfg.CanaryErrors >= 0 && cfg.CanaryErrors <= 1) {
		return nil, fmt.Errorf("-canary-errors %v: want a share from 0 to 1", cfg.CanaryErrors)
	}
	if cfg.Mirror < 0 || cfg.Mirror > 100 {
		return nil, fmt.Errorf("-mirror %d: want a percent from 0 to 100", cfg.Mirror)
	}
	if cfg.Header != "" {
		if _, err := parseHeader(cfg.Header); err != nil {
			return nil, err
		}
	}
	if (cfg.Header != "" || cfg.Mirror > 0) && cfg.Strategy != "canary" && cfg.Strategy != "all" {
		return nil, fmt.Errorf("-header and -mirror add canary steps: want -strategy canary or all, not %s", cfg.Strategy)
	}
	if cfg.extrasOn() && cfg.Users < 1 {
		return nil, fmt.Errorf("-users %d: want at least 1", cfg.Users)
	}
	sim := &simulation{cfg: cfg, out: out, clock: fake.NewClock(start), side: strategy.SideA, running: "v1"}
	sim.metrics = fake.NewMetrics(sim.clock)
	sim.metrics.SetLag(metricsLag)
	sim.router = fake.NewRouter(sim.clock)
	sim.a = fake.NewCapacity(sim.clock, fake.CapacityOptions{Replicas: int32(cfg.Replicas), Percent: 100})
	sim.b = fake.NewCapacity(sim.clock, fake.CapacityOptions{Replicas: int32(cfg.Replicas), Percent: 0})
	// Realistic lag: a data plane takes a moment to program a route; new
	// replicas take a while to become ready.
	sim.router.SetLag(fake.Lag{Duration: 300 * time.Millisecond})
	// Side A runs the first revision; a deploy reads from the route whether
	// the side serves traffic.
	sim.a.SetRevision(sim.running)
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		c := sim.capacity(side)
		c.ServingFunc(sim.router.Serving(side))
		// The lag applies to deploys too: the new revision's workload is
		// observed rolled out after it.
		c.SetLag(fake.Lag{Duration: 1500 * time.Millisecond})
		if cfg.Faults {
			c.SetLag(fake.Lag{Duration: 2500 * time.Millisecond})
			c.SetPartial(true)
		}
	}
	return sim, nil
}

func (sim *simulation) strategy(name string) (strategy.Strategy, error) {
	opts := strategy.Options{AbortRamp: strategy.AbortImmediate, PollInterval: metav1.Duration{Duration: 500 * time.Millisecond}}
	switch sim.cfg.AbortRamp {
	case "immediate":
	case "gradual":
		opts.AbortRamp = strategy.AbortGradual
	case "emergency":
		opts.AbortRamp = strategy.AbortEmergency
	default:
		return nil, fmt.Errorf("-abort-ramp %q: want immediate, gradual or emergency", sim.cfg.AbortRamp)
	}
	if sim.cfg.Analysis {
		opts.UnhealthyThreshold = 1 // the analysis' own limits decide
	}
	if sim.cfg.Sticky {
		opts.SessionAffinity = &strategy.SessionAffinity{}
	}
	var s strategy.Strategy
	switch name {
	case "incremental":
		s = strategy.Incremental{StepPercent: int32(sim.cfg.Step), Interval: metav1.Duration{Duration: sim.cfg.Interval}, MaxSurgePercent: int32(sim.cfg.Surge), Options: opts}
	case "canary":
		steps, err := sim.cfg.extrasSteps()
		if err != nil {
			return nil, err
		}
		steps = append(steps, strategy.SetWeight(20))
		if sim.cfg.Analysis {
			steps = append(steps, strategy.Gate(gateName))
		}
		steps = append(steps, strategy.Pause(sim.cfg.Pause),
			strategy.SetWeight(50), strategy.PauseUntilResumed(),
			strategy.SetWeight(80))
		s = strategy.Canary{MaxSurgePercent: int32(sim.cfg.Surge), Options: opts, Steps: steps}
	default:
		s = strategy.BlueGreen{Options: opts}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// surgeBudget is the capacity a strategy may provision above 100 percent:
// MaxSurgePercent for Incremental and Canary, 100 for BlueGreen (the whole
// canary next to the whole stable side).
func surgeBudget(s strategy.Strategy) int32 {
	switch s := s.(type) {
	case strategy.Incremental:
		return s.MaxSurgePercent
	case strategy.Canary:
		return s.MaxSurgePercent
	case strategy.BlueGreen:
		return 100
	}
	panic(fmt.Sprintf("surgeBudget: unknown strategy %T", s))
}

// analysis returns the analysis of -analysis for a rollout of strat: the
// canary's success rate from the recorded requests, as the Runner's health
// and, when strat has one, its gate.
func (sim *simulation) analysis(strat strategy.Strategy) (*analysis.Analysis, error) {
	checks := []analysis.Check{analysis.SuccessRate(minSuccess)}
	a := &analysis.Analysis{
		Source: sim.metrics, Namespace: "sim", Route: "web",
		A:      analysis.ServiceRef{Namespace: "sim", Name: "web-a", Port: 80},
		B:      analysis.ServiceRef{Namespace: "sim", Name: "web-b", Port: 80},
		Checks: checks,
		// Evaluated every second over 3s; one failed evaluation is
		// tolerated, a second fails the canary; fewer than 100 of its
		// requests in the window is no data.
		Policy: analysis.Policy{Interval: analysisInterval, FailureLimit: 1, MinRequests: 100},
		Clock:  sim.clock,
	}
	if gates := strat.Gates(); len(gates) > 0 {
		a.Gates = map[string][]analysis.Check{}
		for _, g := range gates {
			a.Gates[g] = checks
		}
	}
	return a, a.Validate()
}

// expect is how a rollout must end: with -analysis, aborted when the new
// revision fails more requests than the analysis tolerates.
func (sim *simulation) expect() expectation {
	if !sim.cfg.Analysis {
		return expectSuccess
	}
	limit := 1 - minSuccess
	switch {
	case math.Abs(sim.cfg.CanaryErrors-limit) < 0.01:
		return expectEither
	case sim.cfg.CanaryErrors > limit:
		return expectAnalysisAbort
	}
	return expectSuccess
}

// capacity returns the fake of a physical side.
func (sim *simulation) capacity(side strategy.Side) *fake.Capacity {
	if side == strategy.SideB {
		return sim.b
	}
	return sim.a
}

func (sim *simulation) sides() (stable, canary *fake.Capacity) {
	if sim.side == strategy.SideB {
		return sim.b, sim.a
	}
	return sim.a, sim.b
}

// runner builds the Runner, with fault injection when asked. The fake sides
// are also its RevisionA and RevisionB: the Runner reads the revision each side
// runs and deploys the canary revision itself.
func (sim *simulation) runner(strat strategy.Strategy, hops *[]rollout.Hop) *rollout.Runner {
	var router rollout.TrafficRouter = sim.router
	var a, b rollout.CapacitySetter = sim.a, sim.b
	var deployA, deployB rollout.RevisionReader = sim.a, sim.b
	if sim.cfg.Faults {
		writes := 0
		router = fake.InterceptRouter(sim.router, fake.RouterFuncs{
			SetWeights: func(ctx context.Context, next rollout.TrafficRouter, w rollout.Weights) error {
				writes++
				if writes%3 == 0 { // every third write loses a race with another writer
					sim.faults.conflicts++
					return fmt.Errorf("route update: %w", rollout.ErrConflict)
				}
				return next.SetWeights(ctx, w)
			},
			SetRoutes: func(ctx context.Context, next rollout.ExtrasRouter, r rollout.Routes) error {
				writes++
				if writes%3 == 0 {
					sim.faults.conflicts++
					return fmt.Errorf("route update: %w", rollout.ErrConflict)
				}
				return next.SetRoutes(ctx, r)
			},
		})
		flaky := func(c *fake.Capacity) rollout.CapacitySetter {
			calls := 0
			return fake.InterceptCapacity(c, fake.CapacityFuncs{
				SetCapacity: func(ctx context.Context, next rollout.CapacitySetter, r rollout.CapacityRequest) error {
					calls++
					if calls%4 == 0 {
						sim.faults.errors++
						return errors.New("backend answered 503")
					}
					return next.SetCapacity(ctx, r)
				},
			})
		}
		a, b = flaky(sim.a), flaky(sim.b)
		deployA = &flakyDeployer{side: sim.a, failed: func() { sim.faults.errors++ }}
		deployB = &flakyDeployer{side: sim.b, failed: func() { sim.faults.errors++ }}
	}
	if sim.wrapRouter != nil {
		router = sim.wrapRouter(router, sim.side.Other())
	}
	return &rollout.Runner{
		Strategy: strat, Router: router, A: a, B: b, RevisionA: deployA, RevisionB: deployB, Clock: sim.clock,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			*hops = append(*hops, e.Applied...)
		}),
	}
}

// judged sets the analysis of -analysis on r: its health, and its gates'
// analyzer when the strategy has gates.
func (sim *simulation) judged(r *rollout.Runner) error {
	if !sim.cfg.Analysis {
		return nil
	}
	a, err := sim.analysis(r.Strategy)
	if err != nil {
		return err
	}
	r.Health = a
	if len(a.Gates) > 0 {
		r.Analyzer = a
	}
	return nil
}

// flakyDeployer is a side's rollout.Deployer whose every other deploy fails
// (the first attempt of each), as a deploy API that answers 503 once: the
// Runner asks again at the next reconcile.
type flakyDeployer struct {
	side   *fake.Capacity
	calls  int
	failed func()
}

func (d *flakyDeployer) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return d.side.Revision(ctx, expect)
}

func (d *flakyDeployer) Deploy(ctx context.Context, revision string) error {
	d.calls++
	if d.calls%2 == 1 {
		d.failed()
		return errors.New("backend answered 503")
	}
	return d.side.Deploy(ctx, revision)
}

// rollout runs one rollout from the revision running now to next and
// reports it. A rollout that succeeds makes next the running revision.
func (sim *simulation) rollout(ctx context.Context, name, next string) (*result, error) {
	strat, err := sim.strategy(name)
	if err != nil {
		return nil, err
	}
	plan, err := strategy.Plan(strat, strategy.PlanOptions{Start: sim.clock.Now(), ResumeAfter: sim.cfg.ResumeAfter})
	if err != nil {
		return nil, err
	}
	var hops []rollout.Hop
	runner := sim.runner(strat, &hops)
	if err := sim.judged(runner); err != nil {
		return nil, err
	}
	traffic := fake.NewTraffic(sim.router, sim.a, sim.b, trafficPerTick)
	traffic.SetErrorRate(next, sim.cfg.CanaryErrors)
	if sim.cfg.Analysis {
		traffic.RecordTo(sim.metrics)
	}
	if err := sim.configureTraffic(traffic); err != nil {
		return nil, err
	}
	if sim.configure != nil {
		sim.configure(traffic)
	}
	sim.traffic, sim.lastStats = traffic, fake.TrafficStats{}
	s := strategy.NewState(sim.running, next)
	s.StableSide = sim.side
	began := sim.clock.Now()
	res := &result{name: name, plan: plan, surge: surgeBudget(strat), expect: sim.expect(),
		analysis: sim.cfg.Analysis, revision: next, canaryErrors: sim.cfg.CanaryErrors, firstFailure: -1}
	var health strategy.Health
	var gate strategy.Verdict
	faultsBefore := sim.faults
	violationsBefore := map[strategy.Side]int{strategy.SideA: len(sim.a.Violations()), strategy.SideB: len(sim.b.Violations())}
	fmt.Fprintf(sim.out, "== %s %s -> %s (plan with instant adapters: %s, %d hops)\n", name, sim.running, next, plan.Duration, plan.Hops)
	fmt.Fprintf(sim.out, "  %7s %-11s %-10s %-16s %-15s %-22s %s\n", "time", "phase", "weight", "capacity st/ca", "ready st/ca", "canary traffic", "event")
	sim.record(res, began, &s)
	var resumeAt time.Time
	abortAsked := false
	applied := 0
	for reconciles := 0; !s.Phase.Terminal(); reconciles++ {
		now := sim.clock.Now()
		if now.Sub(began) > time.Hour || reconciles > 100000 {
			return nil, fmt.Errorf("%s: not finished after %s of simulated time and %d reconciles: %s (asked for weight %d, stable capacity %d, canary capacity %d; observed %d, %d, %d)",
				name, now.Sub(began).Round(time.Second), reconciles, s.Message, s.Desired.Weight, s.Desired.StableCapacity, s.Desired.CanaryCapacity,
				s.Observed.Weight, s.Observed.Stable.Capacity, s.Observed.Canary.Capacity)
		}
		if sim.cfg.AbortAt > 0 && !abortAsked && now.Sub(began) >= sim.cfg.AbortAt {
			abortAsked = true
			s = s.Abort("requested by -abort-at", now)
			sim.line(now.Sub(began), &s, "abort requested")
		}
		if !s.AwaitingResume || s.PauseReason != strategy.ReasonPauseStep {
			resumeAt = time.Time{} // not (or no longer) waiting for the operator: an abort ends the pause
		} else {
			if resumeAt.IsZero() {
				resumeAt = now.Add(sim.cfg.ResumeAfter)
				sim.line(now.Sub(began), &s, fmt.Sprintf("paused until resumed; the operator resumes in %s", sim.cfg.ResumeAfter))
			} else if !now.Before(resumeAt) {
				s = s.Resume(now)
				resumeAt = time.Time{}
				sim.line(now.Sub(began), &s, "resumed")
			}
		}
		prev := s.Phase
		next, requeue, err := runner.ReconcileAt(ctx, s, now)
		s = next
		if s.Aborted != nil && s.Aborted.Emergency {
			res.emergency = true
		}
		if s.Aborted != nil && res.abortWhy == "" && sim.cfg.Analysis {
			switch s.Aborted.Reason {
			case strategy.ReasonUnhealthy:
				res.abortWhy = s.Observed.HealthMessage
			case strategy.ReasonGateFailed:
				res.abortWhy = "gate " + gateName + " failed"
			}
		}
		// The analysis' verdicts, when they change.
		if h := s.Observed.Health; sim.cfg.Analysis && h != health && h != strategy.HealthUnknown {
			sim.line(now.Sub(began), &s, fmt.Sprintf("health %s: %s", h, s.Observed.HealthMessage))
		}
		health = s.Observed.Health
		for _, g := range s.Observed.Gates {
			if g.Verdict != gate && g.Verdict != strategy.VerdictPending {
				sim.line(now.Sub(began), &s, fmt.Sprintf("gate %s: %s", g.Name, g.Verdict))
			}
			gate = g.Verdict
		}
		hopped := applied < len(hops)
		for ; applied < len(hops); applied++ {
			h := hops[applied]
			sim.line(now.Sub(began), &s, "asked: "+hopText(h, true))
			if h.Kind == rollout.HopDeploy {
				res.deploys = append(res.deploys, deploy{revision: h.Revision, side: h.Side, at: now.Sub(began)})
			}
		}
		sim.watchDeploys(res, began, &s)
		if err != nil {
			sim.line(now.Sub(began), &s, "! "+describeError(err))
		} else if s.Phase != prev && !s.Phase.Terminal() && (!hopped || s.Phase == strategy.PhasePaused) {
			// A pause shows why, also when it begins with a hop (the
			// stable side shrunk to the traffic of the weight in force).
			sim.line(now.Sub(began), &s, s.Message)
		}
		if s.Phase.Terminal() {
			break
		}
		wait := requeue
		if wait <= 0 {
			wait = tick
		}
		if !resumeAt.IsZero() {
			wait = min(wait, max(resumeAt.Sub(now), time.Nanosecond))
		}
		if sim.cfg.AbortAt > 0 && !abortAsked {
			wait = min(wait, max(began.Add(sim.cfg.AbortAt).Sub(now), time.Nanosecond))
		}
		sim.wait(wait, traffic, res, began, &s)
	}
	res.phase = s.Phase
	res.took = sim.clock.Now().Sub(began)
	res.hops = len(hops)
	if s.Aborted != nil {
		res.aborted, res.abortReason = true, s.Aborted.Reason
		res.abortAt = s.Aborted.At.Sub(began)
	}
	traffic.Tick()
	res.stats = traffic.Stats()
	if res.firstFailure < 0 && res.stats.Failed > 0 {
		res.firstFailure = res.took
	}
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		for _, v := range sim.capacity(side).Violations()[violationsBefore[side]:] {
			res.violations = append(res.violations, fmt.Sprintf("side %s: %s", side, v))
		}
	}
	res.problems = sim.check(res, abortAsked)
	if sim.cfg.extrasOn() {
		res.extras, res.sticky = true, sim.cfg.Sticky
		res.problems = append(res.problems, checkExtras(res)...)
	}
	sim.line(res.took, &s, string(s.Phase))
	if s.Phase == strategy.PhaseSucceeded {
		sim.side = s.StableSide // the canary side is the stable side of the next rollout
		sim.running = s.StableRevision
	}
	sim.summary(res, faultCounts{sim.faults.conflicts - faultsBefore.conflicts, sim.faults.errors - faultsBefore.errors})
	if sim.cfg.extrasOn() {
		printSteps(sim.out, res, &sim.cfg)
	}
	return res, nil
}

// check lists what went wrong in a finished rollout: it must succeed (or,
// when -abort-at asked for it, may end aborted; with -analysis and a new
// revision that fails too many requests, it must end aborted by the
// analysis), serve every request (unless an emergency abort sent traffic
// beyond ready capacity on purpose), stay within the strategy's surge
// budget and deploy only on a side that serves nothing and holds no
// capacity.
func (sim *simulation) check(res *result, abortAsked bool) []string {
	var problems []string
	byAnalysis := res.aborted && (res.abortReason == strategy.ReasonUnhealthy || res.abortReason == strategy.ReasonGateFailed)
	switch res.expect {
	case expectSuccess:
		if res.phase != strategy.PhaseSucceeded && !(abortAsked && res.phase == strategy.PhaseAborted) {
			problems = append(problems, fmt.Sprintf("%s: ended %s", res.name, res.phase))
		}
	case expectAnalysisAbort:
		if res.phase != strategy.PhaseAborted {
			problems = append(problems, fmt.Sprintf("%s: ended %s: the analysis should have aborted a canary failing %s of its requests",
				res.name, res.phase, percent(res.canaryErrors)))
		} else if !byAnalysis && !abortAsked {
			problems = append(problems, fmt.Sprintf("%s: aborted (%s), not by the analysis", res.name, res.abortReason))
		}
	case expectEither:
		if res.phase != strategy.PhaseSucceeded && res.phase != strategy.PhaseAborted {
			problems = append(problems, fmt.Sprintf("%s: ended %s", res.name, res.phase))
		}
	}
	if (res.stats.Dropped > 0 || res.stats.Overloaded > 0) && !res.emergency {
		problems = append(problems, fmt.Sprintf("%s: %d requests dropped and %d overloaded", res.name, res.stats.Dropped, res.stats.Overloaded))
	}
	if res.stats.PeakCapacity > 100+res.surge {
		problems = append(problems, fmt.Sprintf("%s: peak capacity %d exceeds its surge budget (100 + %d)", res.name, res.stats.PeakCapacity, res.surge))
	}
	for _, v := range res.violations {
		problems = append(problems, fmt.Sprintf("%s: %s", res.name, v))
	}
	return problems
}

// summary prints the closing line of a rollout: how long it took against
// the plan (which assumes adapters that apply every hop at once), or, for an
// aborted rollout, when it was aborted and how long walking back took.
func (sim *simulation) summary(res *result, faults faultCounts) {
	if res.aborted {
		fmt.Fprintf(sim.out, "   %s at +%s (%s), walked back in %s",
			res.phase, seconds(res.abortAt), res.abortReason, (res.took - res.abortAt).Round(time.Millisecond))
	} else {
		fmt.Fprintf(sim.out, "   %s in %s (plan with instant adapters: %s)",
			res.phase, res.took.Round(time.Millisecond), res.plan.Duration)
	}
	fmt.Fprintf(sim.out, ", %d hops; %s; peak capacity %d (100 + MaxSurge %d); requests served %d, overloaded %d, dropped %d",
		res.hops, deploysText(res.deploys), res.stats.PeakCapacity, res.surge, res.stats.Served, res.stats.Overloaded, res.stats.Dropped)
	if sim.cfg.Faults {
		fmt.Fprintf(sim.out, "; faults injected: %s, %s", count(faults.conflicts, "route conflict"), count(faults.errors, "adapter error"))
	}
	fmt.Fprintln(sim.out)
	if res.analysis || res.canaryErrors > 0 {
		fmt.Fprintln(sim.out, "   "+failuresText(res))
	}
}

// failuresText renders the requests sent and failed in a rollout and, for
// one that the analysis aborted, how long after the first failure:
// "requests sent 94000, failed 440 (v2 answers 10% of its requests with a
// 500); the first failed at +3.3s, the analysis aborted 4.1s after it:
// success-rate Fail (...)".
func failuresText(res *result) string {
	st := res.stats
	text := fmt.Sprintf("requests sent %d, failed %d", st.Served+st.Overloaded+st.Dropped, st.Failed)
	if res.canaryErrors > 0 {
		text += fmt.Sprintf(" (%s answers %s of its requests with a 500)", res.revision, percent(res.canaryErrors))
	}
	if res.firstFailure >= 0 {
		text += "; the first failed at +" + seconds(res.firstFailure)
	}
	switch {
	case res.aborted && res.abortWhy != "" && res.firstFailure >= 0 && res.firstFailure <= res.abortAt:
		text += fmt.Sprintf(", the analysis aborted %s after it: %s", seconds(res.abortAt-res.firstFailure), res.abortWhy)
	case res.aborted && res.abortWhy != "":
		text += "; the analysis aborted: " + res.abortWhy
	case res.analysis && !res.aborted:
		text += "; the analysis let it through"
	}
	return text
}

// percent renders a share as "10%", "2.5%" (to a ten-thousandth of a
// percent, so that 0.07 is "7%").
func percent(share float64) string {
	return strconv.FormatFloat(math.Round(share*1e6)/1e4, 'f', -1, 64) + "%"
}

// deploysText renders the deploys of a rollout for its summary: "deployed
// v2 on side B (rolled out in 1.5s)", "deployed v3 on side A (not rolled
// out)", several joined by commas, or "nothing deployed".
func deploysText(ds []deploy) string {
	if len(ds) == 0 {
		return "nothing deployed"
	}
	var parts []string
	for _, d := range ds {
		state := "not rolled out"
		if d.rolledOut {
			state = "rolled out in " + seconds(d.rolledOutAt-d.at)
		}
		parts = append(parts, fmt.Sprintf("deployed %s on side %s (%s)", d.revision, d.side, state))
	}
	return strings.Join(parts, ", ")
}

// count renders "1 route conflict", "2 route conflicts".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// seconds renders an offset as "12.0s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// wait lets simulated time pass in ticks of traffic, pacing with the wall
// clock by cfg.Speed.
func (sim *simulation) wait(d time.Duration, traffic *fake.Traffic, res *result, began time.Time, s *strategy.State) {
	for d > 0 {
		step := min(d, tick)
		sim.clock.Advance(step)
		d -= step
		traffic.Tick()
		if res.firstFailure < 0 && traffic.Stats().Failed > 0 {
			res.firstFailure = sim.clock.Now().Sub(began)
		}
		sim.record(res, began, s)
		sim.watchDeploys(res, began, s)
		if sim.cfg.Speed > 0 {
			time.Sleep(time.Duration(float64(step) / sim.cfg.Speed))
		}
	}
}

// watchDeploys notes, and shows, when the side of a deploy is first
// observed running its revision fully rolled out.
func (sim *simulation) watchDeploys(res *result, began time.Time, s *strategy.State) {
	for i := range res.deploys {
		d := &res.deploys[i]
		if d.rolledOut {
			continue
		}
		if rs := sim.capacity(d.side).RevisionStatus(); rs.Revision == d.revision && rs.Updated {
			d.rolledOut, d.rolledOutAt = true, sim.clock.Now().Sub(began)
			sim.line(d.rolledOutAt, s, fmt.Sprintf("%s rolled out on side %s", d.revision, d.side))
		}
	}
}

// record samples the applied weight and both sides' capacities now.
func (sim *simulation) record(res *result, began time.Time, s *strategy.State) {
	stable, canary := sim.sides()
	st, cs := stable.Status(), canary.Status()
	var extras extrasSample
	if sim.traffic != nil && sim.cfg.extrasOn() {
		stats := sim.traffic.Stats()
		extras = extrasNow(sim.router.AppliedRoutes(), sim.side.Other(), stats, sim.lastStats, trafficPerTick)
		sim.lastStats = stats
	}
	res.samples = append(res.samples, sample{
		extras:      extras,
		at:          sim.clock.Now().Sub(began),
		weight:      sim.router.Applied().Of(sim.side.Other()),
		stable:      st.Capacity,
		canary:      cs.Capacity,
		readyStable: st.Ready,
		readyCanary: cs.Ready,
		paused:      s.Phase == strategy.PhasePaused || s.AwaitingResume,
	})
}

// line prints one compact progress line.
func (sim *simulation) line(at time.Duration, s *strategy.State, what string) {
	stable, canary := sim.sides()
	st, cs := stable.Status(), canary.Status()
	w := sim.router.Applied().Of(sim.side.Other())
	phase := string(s.Phase)
	if phase == "" {
		phase = "-" // not started: the rollout's first hop failed
	}
	fmt.Fprintf(sim.out, "  %7s %-11s %-10d %3d/%-12d %3d/%-11d %s %s\n",
		"+"+seconds(at), phase, w, st.Capacity, cs.Capacity, st.Ready, cs.Ready,
		bar(w), strings.TrimSpace(what))
}

// bar draws the canary weight as a 20-character progress bar.
func bar(w int32) string {
	n := int(w) / 5
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 20-n) + "]"
}

// hopText describes a hop the Runner applied, with the side it went to when
// withSide: "weight 30 (A=70 B=30)", "weight 20 (A=80 B=20) with mirror 20%
// to side B", "canary capacity 40 (side B)", "canary
// side B back to its steady state (full capacity, nothing pinned)", "deploy
// v3 on side A".
func hopText(h rollout.Hop, withSide bool) string {
	if h.Kind == rollout.HopDeploy {
		if withSide {
			return fmt.Sprintf("deploy %s on side %s", h.Revision, h.Side)
		}
		return "deploy " + h.Revision
	}
	if h.Kind == rollout.HopWeight {
		return fmt.Sprintf("weight %d (A=%d B=%d)", h.Value, h.Weights.A, h.Weights.B)
	}
	if h.Kind == rollout.HopRoutes {
		text := fmt.Sprintf("weight %d (A=%d B=%d) with %s", h.Value, h.Weights.A, h.Weights.B, h.Extras)
		if withSide && !h.Extras.IsZero() {
			text += " to side " + string(h.Side)
		}
		return text
	}
	if h.Steady {
		side := ""
		if withSide {
			side = " side " + string(h.Side)
		}
		return fmt.Sprintf("%s%s back to its steady state (full capacity, nothing pinned)", h.Role, side)
	}
	if withSide {
		return fmt.Sprintf("%s capacity %d (side %s)", h.Role, h.Value, h.Side)
	}
	return fmt.Sprintf("%s capacity %d", h.Role, h.Value)
}

var (
	weightHop   = regexp.MustCompile(`^weight (\d+) \(A=(\d+) B=(\d+)\)$`)
	capacityHop = regexp.MustCompile(`^(stable|canary) capacity (steady|\d+) \(side ([AB])\)$`)
	deployHop   = regexp.MustCompile(`^deploy (\S+) on side ([AB])$`)
)

// parseHop reads back the hop an *rollout.AdapterError names (rendered by
// rollout.Hop.String), so that it is described like the applied hops.
func parseHop(s string) (rollout.Hop, bool) {
	atoi := func(s string) int32 { n, _ := strconv.Atoi(s); return int32(n) }
	if m := weightHop.FindStringSubmatch(s); m != nil {
		return rollout.Hop{Kind: rollout.HopWeight, Role: "canary", Value: atoi(m[1]),
			Weights: rollout.Weights{A: atoi(m[2]), B: atoi(m[3])}}, true
	}
	if m := capacityHop.FindStringSubmatch(s); m != nil {
		h := rollout.Hop{Kind: rollout.HopCapacity, Role: m[1], Side: strategy.Side(m[3])}
		if m[2] == "steady" {
			h.Steady = true
		} else {
			h.Value = atoi(m[2])
		}
		return h, true
	}
	if m := deployHop.FindStringSubmatch(s); m != nil {
		return rollout.Hop{Kind: rollout.HopDeploy, Role: "canary", Side: strategy.Side(m[2]), Revision: m[1]}, true
	}
	return rollout.Hop{}, false
}

// describeError renders an error of the Runner for a progress line, naming
// the adapter and the hop (or the operation) once, then the cause: the
// context each wrapper added, outermost first, and the root error
// ("router: could not apply weight 30 (A=70 B=30): route update: conflict",
// "side B: could not deploy v2: backend answered 503").
func describeError(err error) string {
	var ae *rollout.AdapterError
	if !errors.As(err, &ae) {
		return causeText(err)
	}
	who := ae.Adapter
	side, onSide := strings.CutPrefix(ae.Adapter, "capacity ")
	if !onSide {
		side, onSide = strings.CutPrefix(ae.Adapter, "revision ")
	}
	if onSide {
		who = "side " + side
	}
	what := ae.Op // a verb: "read weights", "set capacity", "load"...
	if ae.Hop != "" {
		what = "apply " + ae.Hop
		if h, ok := parseHop(ae.Hop); ok {
			// The side is named already when the adapter is a side's; a
			// deploy is its own verb.
			what = hopText(h, !onSide)
			if h.Kind != rollout.HopDeploy {
				what = "apply " + what
			}
		}
	}
	return who + ": could not " + what + ": " + causeText(ae.Err)
}

// causeText renders an error chain (errors.Unwrap) without repeating
// itself: the context each wrapper adds before its cause ("route update"),
// then the root error, then the details wrappers add after it. The root's
// "rollout: " prefix (the package's sentinel errors) is dropped: the line
// already says what failed. A wrapper that renders its cause its own way is
// kept whole.
func causeText(err error) string {
	var head []string
	tail := ""
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			break
		}
		// fmt.Errorf("context: %w: detail", inner), either part optional, or
		// a marker that adds nothing.
		msg := err.Error()
		before, after, ok := strings.Cut(msg, inner.Error())
		context, colon := strings.CutSuffix(before, ": ")
		if !ok || before != "" && !colon {
			return strings.Join(append(head, msg), ": ") + tail
		}
		if context != "" {
			head = append(head, context)
		}
		tail = after + tail
		err = inner
	}
	return strings.Join(append(head, strings.TrimPrefix(err.Error(), "rollout: ")), ": ") + tail
}
