package traefik_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Whole rollouts with extras, driven by the rollout Runner on fake
// capacities and the real gateway Router on the real route, while users
// keep sending requests through Traefik.

// extrasRunner drives rollouts of strat through log's router, checking the
// capacity rule on every observation: the canary's load, with the
// header-routed and mirrored requests counted, never exceeds its ready
// capacity.
type extrasRunner struct {
	t      *testing.T
	runner *rollout.Runner
	// each, when set, sees every state the Runner returns.
	each       func(strategy.State)
	violations int
	// Observations with extras, and the one whose canary load came
	// closest to its ready capacity.
	withExtras            int
	tightLoad, tightReady int32
	tightWeight           int32
	tightExtras           strategy.TrafficExtras
}

// report logs how close the canary's load came to its ready capacity.
func (e *extrasRunner) report() {
	e.t.Helper()
	e.t.Logf("capacity rule: %d observations with extras; closest: weight %d with %+v, canary load %d, ready %d",
		e.withExtras, e.tightWeight, e.tightExtras, e.tightLoad, e.tightReady)
	if e.withExtras == 0 {
		e.t.Errorf("no observation with extras")
	}
}

func newExtrasRunner(t *testing.T, strat strategy.Strategy, log *shaperLog) *extrasRunner {
	t.Helper()
	a := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100})
	b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	r := &rollout.Runner{Strategy: strat, Router: log, A: a, B: b}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return &extrasRunner{t: t, runner: r}
}

// drive reconciles s until done holds, and returns the last state.
func (e *extrasRunner) drive(ctx context.Context, s strategy.State, done func(strategy.State) bool) strategy.State {
	t := e.t
	t.Helper()
	for !done(s) {
		next, requeue, err := e.runner.Reconcile(ctx, s)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		s = next
		o := s.Observed
		load := o.Extras.CanaryLoad(o.Weight)
		if !o.Extras.IsZero() {
			if e.withExtras == 0 || o.Canary.Ready-load < e.tightReady-e.tightLoad {
				e.tightLoad, e.tightReady, e.tightWeight, e.tightExtras = load, o.Canary.Ready, o.Weight, *o.Extras.DeepCopy()
			}
			e.withExtras++
		}
		if load > o.Canary.Ready && s.Phase != strategy.PhaseAborted {
			e.violations++
			if e.violations <= 5 {
				t.Errorf("phase %s: canary load %d (weight %d, extras %+v) above its ready capacity %d",
					s.Phase, load, o.Weight, o.Extras, o.Canary.Ready)
			}
		}
		if e.each != nil {
			e.each(s)
		}
		if ctx.Err() != nil {
			t.Fatalf("stuck: phase %s weight %d extras %+v: %s", s.Phase, s.Desired.Weight, s.DesiredExtras, s.Observed.Error)
		}
		time.Sleep(min(max(requeue, time.Millisecond), 20*time.Millisecond))
	}
	return s
}

// pausedAt: paused with weight w applied.
func pausedAt(w int32) func(strategy.State) bool {
	return func(s strategy.State) bool {
		return s.Phase == strategy.PhasePaused && s.Desired.Weight == w && s.Observed.Weight == w && s.Observed.WeightApplied
	}
}

func phaseIs(p strategy.Phase) func(strategy.State) bool {
	return func(s strategy.State) bool { return s.Phase == p }
}

// TestRunnerHeaderRouteThroughTraefik: two Canary rollouts with a header
// route (expected 40%) before the weight steps, the first on x-beta: 1 and
// aborted at 30%, the second on the cookie beta=yes and completed, while
// 600 users (200 with both, the others near misses or nothing) send
// requests: checkHeader's checks (every header request on
// the canary while the header route is applied, the others on the weights,
// the user's URLRewrite kept), the capacity rule on every observation, and
// the route back to the user's rule alone after the abort and the
// completion.
func TestRunnerHeaderRouteThroughTraefik(t *testing.T) {
	w := newWorld(t)
	rewriteApp(t, w)
	const settle, users, withHeader = 2 * time.Second, 600, 200
	log := &shaperLog{ExtrasRouter: w.shaper(t, settle, gateway.MirrorGatewayAPI)}
	pop := headerUsers(t, w.proxy.url, users, withHeader)
	tr := &traffic{pop: pop}
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := tr.run(loadCtx, w.proxy.url, "/app/x", pop.users)
	hold := tr.holdFor(t, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Rollout 1: header route on x-beta, 10%, 30%, abort.
	r1 := newExtrasRunner(t, strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetHeaderRoute(40, headerExact), strategy.Pause(hold), strategy.SetWeight(10), strategy.Pause(hold),
		strategy.SetWeight(30), strategy.PauseUntilResumed(),
	}}, log)
	s := r1.drive(ctx, strategy.NewState("v1", "v2"), pausedAt(30))
	time.Sleep(hold)
	r1.drive(ctx, s.Abort("e2e: abort at 30%", time.Now()), phaseIs(strategy.PhaseAborted))
	time.Sleep(hold)
	checkNoOwnedRules(t, w, "after the abort")
	// Rollout 2: header route on the cookie, 10%, 50%, completion.
	r2 := newExtrasRunner(t, strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetHeaderRoute(40, headerCookie), strategy.Pause(hold), strategy.SetWeight(10), strategy.Pause(hold),
		strategy.SetWeight(50), strategy.Pause(hold),
	}}, log)
	r2.drive(ctx, strategy.NewState("v1", "v3"), phaseIs(strategy.PhaseSucceeded))
	time.Sleep(hold)
	checkNoOwnedRules(t, w, "after the completion")
	stop()
	<-done
	tr.stats.report(t)
	r1.report()
	r2.report()
	checkHeader(t, log.snapshot(), hold*9/10, tr.log, withHeader)
}

// TestRunnerMirrorThroughTraefik: a Canary rollout mirroring 20% (the
// Router's TraefikService) at weights 0, 10 and 30, then completed, while
// 997 users send requests: checkMirror's checks per round (exactly
// ⌊0.2·s⌋ or ⌈0.2·s⌉ copies of s stable answers; only stable answers at
// weight 0; no failure while the canary answers 500 to every copy), and
// the capacity rule with the mirrored load counted on every observation.
func TestRunnerMirrorThroughTraefik(t *testing.T) {
	f := &faults{}
	w := newWorldWith(t, startBackend(t, nameStable), startFaultyBackend(t, nameCanary, f))
	const settle = 2 * time.Second
	log := &shaperLog{ExtrasRouter: w.shaper(t, settle, gateway.MirrorTraefikService)}
	pop := newPopulation(t, 997, 16)
	var stableN, canaryN atomic.Int64
	var mu sync.Mutex
	var rounds []mirrorRound
	tr := &traffic{pop: pop, chunk: 250, seen: func(_ *user, a answer) {
		if a.backend == nameCanary {
			canaryN.Add(1)
		} else {
			stableN.Add(1)
		}
	}}
	c0 := w.canary.hits.Load()
	tr.afterRound = func(_ int, from, _ time.Time) {
		c1 := quiet(&w.canary.hits)
		s, c := stableN.Swap(0), canaryN.Swap(0)
		mu.Lock()
		rounds = append(rounds, mirrorRound{from: from, to: time.Now(), stable: s, canary: c, copies: c1 - c0 - c})
		mu.Unlock()
		c0 = c1
	}
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := tr.run(loadCtx, w.proxy.url, "/", pop.users)
	hold := tr.holdFor(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newExtrasRunner(t, strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetMirror(20), strategy.PauseUntilResumed(), strategy.SetWeight(10), strategy.Pause(hold),
		strategy.SetWeight(30), strategy.Pause(hold),
	}}, log)
	s := r.drive(ctx, strategy.NewState("v1", "v2"), func(s strategy.State) bool {
		return s.Phase == strategy.PhasePaused && s.Observed.Extras.MirrorPercent == 20 && s.Observed.WeightApplied
	})
	time.Sleep(hold)
	failFrom := time.Now()
	f.failEvery.Store(1) // the canary answers 500 to every copy
	failed0 := f.n.Load()
	time.Sleep(hold)
	f.failEvery.Store(0)
	failTo := time.Now()
	failedCopies := f.n.Load() - failed0
	r.drive(ctx, s.Resume(time.Now()), phaseIs(strategy.PhaseSucceeded))
	time.Sleep(hold)
	stop()
	<-done
	tr.stats.report(t)
	checkNoOwnedRules(t, w, "after the completion")
	if failedCopies == 0 {
		t.Errorf("the canary answered no copy with 500")
	}
	r.report()
	checkMirror(t, log.snapshot(), hold*9/10, rounds, failFrom, failTo)
}

// TestRunnerStickyThroughTraefik: a Canary rollout with session affinity
// through 10, 20 and 50%, then aborted, while 2,000 users with cookie jars
// send requests: checkSticky's checks (the share of active users on the
// canary within 2 points of the weight at every step, each on its
// ticket's side, no flip back to stable going forward, all on stable once
// the abort's weight 0 is applied with its settle delay), the capacity rule
// on every observation, and the route back to the user's rule alone.
//
// The 2-point bound with 2,000 users: tickets are handed out by the split
// rule's weighted round robin, which Traefik runs deterministically
// (earliest deadline first), and only new sessions reach that rule (every
// later request matches a sticky rule); so the tickets of N sessions match
// the grid's gaps up to one per bucket, an error of at most (grid size)/N,
// 0.2 points here, instead of a binomial one (which at 99.99% would be 4.4
// points for 2,000 users at 50%, and would need 9,500 users for 2 points).
func TestRunnerStickyThroughTraefik(t *testing.T) {
	w := newWorld(t)
	const settle, users = 2 * time.Second, 2000
	log := &shaperLog{ExtrasRouter: w.shaper(t, settle, gateway.MirrorGatewayAPI)}
	pop := newPopulation(t, users, 16)
	check := &stickyCheck{base: w.proxy.url, everCanary: make([]bool, users), forward: true}
	tr := &traffic{pop: pop, seen: check.seen}
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := tr.run(loadCtx, w.proxy.url, "/", pop.users)
	hold := tr.holdFor(t, 2500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	strat := strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetWeight(10), strategy.Pause(hold), strategy.SetWeight(20), strategy.Pause(hold),
		strategy.SetWeight(50), strategy.PauseUntilResumed(),
	}}
	strat.SessionAffinity = &strategy.SessionAffinity{MaxAge: &metav1.Duration{Duration: strategy.DefaultSessionMaxAge}}
	r := newExtrasRunner(t, strat, log)
	r.each = func(s strategy.State) { check.setSticky(s.DesiredExtras.Sticky) }
	s := r.drive(ctx, strategy.NewState("v1", "v2"), pausedAt(50))
	time.Sleep(hold)
	check.backward()
	abortAt := time.Now()
	r.drive(ctx, s.Abort("e2e: abort at 50%", time.Now()), phaseIs(strategy.PhaseAborted))
	time.Sleep(hold)
	stop()
	<-done
	tr.stats.report(t)
	checkNoOwnedRules(t, w, "after the abort")
	if check.sticky == nil {
		t.Fatal("the rollout never asked for sticky sessions")
	}
	r.report()
	checkSticky(t, log.snapshot(), hold*9/10, tr.log, check, abortAt, pop)
}
