package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// These tests drive Run in a goroutine in lockstep with the fake clock, so
// that every reconcile happens at an instant fixed by the rollout alone:
//
//   - runClock tells the test when Run waits (it sets its requeue timer
//     right before it blocks) and whether that timer has fired;
//   - gate stands between the fakes' notifications and Run: a wake from a
//     fake is held until Run waits, then delivered as one wake (a burst
//     coalesced, as Run's own channel does).
//
// While Run waits, the test delivers the held wakes if there are any, or
// else moves the clock to the next timer (a lag's end, which may wake a
// fake's subscribers, or Run's requeue).

// runClock is the Runner's clock: the fake clock, with Run's waits made
// visible.
type runClock struct {
	*fake.Clock
	waiting chan struct{}

	mu     sync.Mutex
	latest int // the timer of Run's current (or last) wait
	fired  int // the last of Run's timers that fired
	polls  int // waits ended by the requeue timer
}

func (c *runClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.latest++
	id := c.latest
	c.mu.Unlock()
	stop := c.Clock.AfterFunc(d, func() {
		c.mu.Lock()
		c.fired = max(c.fired, id)
		c.polls++
		c.mu.Unlock()
		f()
	})
	c.waiting <- struct{}{}
	return stop
}

// current returns the timer of Run's current wait.
func (c *runClock) current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

// timerFired reports whether timer id has fired (Run may already be
// waiting on the next one).
func (c *runClock) timerFired(id int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fired >= id
}

// gate holds the fakes' wakes until the test delivers them to Run.
type gate struct {
	mu        sync.Mutex
	run       func() // Run's wake
	held      int    // wakes from the fakes not delivered yet
	received  int    // wakes from the fakes
	delivered int    // wakes delivered to Run
}

func (g *gate) subscribe(ctx context.Context, n rollout.Notifier, wake func()) error {
	g.mu.Lock()
	g.run = wake
	g.mu.Unlock()
	return n.Notify(ctx, g.hold)
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held++
	g.received++
}

// deliver wakes Run once if wakes are held, and reports whether it did.
func (g *gate) deliver() bool {
	g.mu.Lock()
	if g.held == 0 {
		g.mu.Unlock()
		return false
	}
	g.held = 0
	g.delivered++
	run := g.run
	g.mu.Unlock()
	run()
	return true
}

// gatedRouter and gatedSide are the fakes with their notifications gated.
type gatedRouter struct {
	*fake.Router
	g *gate
}

func (r *gatedRouter) Notify(ctx context.Context, wake func()) error {
	return r.g.subscribe(ctx, r.Router, wake)
}

type gatedSide struct {
	c *fake.Capacity
	g *gate

	mu      sync.Mutex
	hold    chan struct{} // blocks the next Capacity read until closed
	entered chan struct{} // told when that read blocks
}

// blockNextRead makes the next Capacity read wait until release is called;
// entered is closed once it waits.
func (s *gatedSide) blockNextRead() (entered <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := make(chan struct{})
	s.hold, s.entered = hold, make(chan struct{})
	return s.entered, func() { close(hold) }
}

func (s *gatedSide) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	return s.c.SetCapacity(ctx, r)
}

func (s *gatedSide) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	s.mu.Lock()
	hold, entered := s.hold, s.entered
	s.hold, s.entered = nil, nil
	s.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	return s.c.Capacity(ctx)
}

func (s *gatedSide) Deploy(ctx context.Context, rev string) error { return s.c.Deploy(ctx, rev) }

func (s *gatedSide) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return s.c.Revision(ctx, expect)
}

func (s *gatedSide) Notify(ctx context.Context, wake func()) error {
	return s.g.subscribe(ctx, s.c, wake)
}

// lockstep is one rollout run by Run on fakes, in lockstep with its clock.
type lockstep struct {
	clock      *fake.Clock
	rc         *runClock
	g          *gate
	router     *fake.Router
	a, b       *fake.Capacity
	sideA      *gatedSide
	store      *fake.Store
	runner     *rollout.Runner
	reconciles atomic.Int64
	cancel     context.CancelFunc
	done       chan runResult
}

type runResult struct {
	s   strategy.State
	err error
}

// delivery is how the lockstep's adapters tell Run of their changes.
type delivery int

const (
	// notified: every change wakes Run.
	notified delivery = iota
	// dropped: Run subscribes, but nothing is ever delivered (a broken
	// watch): Run, believing itself notified, polls at the poll interval.
	dropped
	// unsupported: the adapters do not implement rollout.Notifier, so Run
	// polls fast after each hop, backing off to the poll interval.
	unsupported
)

func (d delivery) String() string { return [...]string{"notified", "dropped", "unsupported"}[d] }

// pollRouter and pollSide hide the Notifier of the lockstep's adapters.
type pollRouter struct{ r *gatedRouter }

func (p pollRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	return p.r.SetWeights(ctx, w)
}
func (p pollRouter) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return p.r.Weights(ctx)
}

type pollSide struct{ s *gatedSide }

func (p pollSide) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	return p.s.SetCapacity(ctx, r)
}
func (p pollSide) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	return p.s.Capacity(ctx)
}
func (p pollSide) Deploy(ctx context.Context, rev string) error { return p.s.Deploy(ctx, rev) }
func (p pollSide) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return p.s.Revision(ctx, expect)
}

func newLockstep(strat strategy.Strategy, lag fake.Lag, how delivery) *lockstep {
	clock := fake.NewClock(t0)
	l := &lockstep{
		clock: clock, rc: &runClock{Clock: clock, waiting: make(chan struct{}, 1)}, g: &gate{},
		router: fake.NewRouter(clock), a: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), b: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0}),
		store: &fake.Store{}, done: make(chan runResult, 1),
	}
	l.a.SetRevision("v1")
	l.a.ServingFunc(l.router.Serving(strategy.SideA))
	l.b.ServingFunc(l.router.Serving(strategy.SideB))
	l.router.SetLag(lag)
	for _, c := range []*fake.Capacity{l.a, l.b} {
		c.SetLag(lag)
	}
	if how != notified {
		l.router.DropNotifications(true)
		l.a.DropNotifications(true)
		l.b.DropNotifications(true)
	}
	l.sideA = &gatedSide{c: l.a, g: l.g}
	sideB := &gatedSide{c: l.b, g: l.g}
	router := &gatedRouter{Router: l.router, g: l.g}
	l.runner = &rollout.Runner{
		Strategy: strat, Router: router,
		A: l.sideA, B: sideB, RevisionA: l.sideA, RevisionB: sideB,
		Store: l.store, Clock: l.rc,
		Observer: rollout.ObserverFunc(func(context.Context, rollout.Event) { l.reconciles.Add(1) }),
	}
	if how == unsupported {
		a, b := pollSide{l.sideA}, pollSide{sideB}
		l.runner.Router, l.runner.A, l.runner.B, l.runner.RevisionA, l.runner.RevisionB = pollRouter{router}, a, b, a, b
	}
	return l
}

func (l *lockstep) start(commands <-chan rollout.Command) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() {
		s, err := l.runner.Run(ctx, strategy.NewState("v1", "v2"), commands)
		l.done <- runResult{s, err}
	}()
}

// wait returns once Run waits (true) or has returned (false).
func (l *lockstep) wait(t harnessTB) (runResult, bool) {
	t.Helper()
	select {
	case <-l.rc.waiting:
		return runResult{}, true
	case res := <-l.done:
		return res, false
	case <-time.After(20 * time.Second):
		t.Fatal("Run neither waits nor returns")
		return runResult{}, false
	}
}

// nudge ends Run's current wait: with the held wakes if any, or else by
// moving the clock from timer to timer until Run's requeue fires or a
// fake wakes. It is called once wait has reported that Run waits: Run arms
// its requeue timer only after it has taken every wake and command already
// pending, right before it blocks (see Runner.Run), so nothing but what
// nudge does can end that wait.
func (l *lockstep) nudge(t harnessTB) {
	t.Helper()
	id := l.rc.current()
	for !l.g.deliver() {
		at, ok := l.clock.NextWake()
		if !ok {
			l.rc.mu.Lock()
			t.Fatalf("Run waits, but on no timer: now %v latest %d fired %v waiters %d", l.clock.Now().Sub(t0), l.rc.latest, l.rc.fired, l.clock.Waiters())
			return
		}
		l.clock.Set(at)
		if l.rc.timerFired(id) {
			return
		}
	}
}

// finish drives Run to its end and returns its result.
func (l *lockstep) finish(t harnessTB, maxWaits int) runResult {
	t.Helper()
	for i := 0; i < maxWaits; i++ {
		res, waiting := l.wait(t)
		if !waiting {
			return res
		}
		l.nudge(t)
	}
	t.Fatalf("Run not done after %d waits", maxWaits)
	return runResult{}
}

// TestRunReactsToNotifications: a rollout through Run on fakes whose every
// change takes 300 ms to show. Without notifications (a watch that is
// down) each wait for a hop to show ends at the next 2 s poll; with them,
// it ends when the hop shows: the rollout takes its plan plus the same
// number of waits, each 300 ms instead of 2 s. Every hop is observed within
// one notification of being applied, and Run reconciles at most once per
// wake or timer.
func TestRunReactsToNotifications(t *testing.T) {
	const lag = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		strat strategy.Strategy
	}{
		{"BlueGreen", strategy.BlueGreen{}},
		{"Incremental 25/10s/25", strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 25}},
		{"Canary 20, 30s, 60", strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), strategy.Pause(30 * time.Second), strategy.SetWeight(60)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := strategy.Plan(tc.strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			poll := tc.strat.Shared().PollInterval.Duration
			if poll == 0 {
				poll = strategy.DefaultPollInterval
			}
			took := map[bool]time.Duration{}
			for _, notify := range []bool{false, true} {
				how := dropped
				if notify {
					how = notified
				}
				l := newLockstep(tc.strat, fake.Lag{Duration: lag}, how)
				l.start(nil)
				res := l.finish(t, 10000)
				l.cancel()
				if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
					t.Fatalf("notify %v: Run ended %s (%s): %v", notify, res.s.Phase, res.s.Message, res.err)
				}
				for _, c := range []*fake.Capacity{l.a, l.b} {
					if v := c.Violations(); v != nil {
						t.Fatalf("notify %v: violations %v", notify, v)
					}
				}
				d := l.clock.Now().Sub(t0)
				took[notify] = d
				reconciles, wakes, timers := int(l.reconciles.Load()), l.g.delivered, l.rc.polls
				ratio := "-"
				if plan.Duration > 0 {
					ratio = fmt.Sprintf("%.3f", float64(d)/float64(plan.Duration))
				}
				t.Logf("notify %-5v: %v = plan %v + %v (ratio %s; %d hops), %d reconciles = 1 + %d wakes + %d timers, %d store writes",
					notify, d, plan.Duration, d-plan.Duration, ratio, plan.Hops, reconciles, wakes, timers, l.store.Saves())
				if reconciles > 1+wakes+timers {
					t.Errorf("notify %v: %d reconciles, more than 1 + %d wakes + %d timers", notify, reconciles, wakes, timers)
				}
				if !notify && wakes != 0 {
					t.Errorf("notifications dropped, yet %d wakes", wakes)
				}
			}
			// Without notifications every wait for a hop is one poll.
			waits := (took[false] - plan.Duration) / poll
			if took[false] != plan.Duration+waits*poll || waits == 0 || int(waits) > plan.Hops {
				t.Fatalf("polling: %v, not the plan %v plus 1..%d polls of %v", took[false], plan.Duration, plan.Hops, poll)
			}
			// With them, every such wait lasts the lag, exactly.
			if want := plan.Duration + waits*lag; took[true] != want {
				t.Errorf("with notifications %v, want the plan %v plus %d waits of %v = %v",
					took[true], plan.Duration, waits, lag, want)
			}
		})
	}
}

// TestRunWritesNothingWhilePaused: a paused rollout reconciled by Run for
// many polls writes its state when it pauses (with the hop that shrinks the
// stable side to its traffic), and never again.
func TestRunWritesNothingWhilePaused(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60)}}
	for _, notify := range []bool{true, false} {
		l := newLockstep(strat, fake.Lag{Duration: 300 * time.Millisecond}, map[bool]delivery{true: notified, false: dropped}[notify])
		l.start(nil)
		paused := func() bool {
			s, err := l.store.Load(context.Background())
			return err == nil && s.Phase == strategy.PhasePaused && s.Desired.StableCapacity == 70
		}
		for !paused() {
			if _, waiting := l.wait(t); !waiting {
				t.Fatal("Run returned before the pause")
			}
			l.nudge(t)
		}
		saves, reconciles, start := l.store.Saves(), l.reconciles.Load(), l.clock.Now()
		before, _ := l.store.Load(context.Background())
		const polls = 50
		for i := 0; l.reconciles.Load()-reconciles < polls; i++ {
			if i > 4*polls {
				t.Fatalf("only %d reconciles in %d waits", l.reconciles.Load()-reconciles, i)
			}
			if _, waiting := l.wait(t); !waiting {
				t.Fatal("Run returned while paused")
			}
			l.nudge(t)
		}
		l.wait(t) // the last reconcile is done
		l.cancel()
		res := <-l.done
		if !errors.Is(res.err, context.Canceled) || errors.Is(res.err, rollout.ErrUnsaved) {
			t.Fatalf("Run: %v", res.err)
		}
		after := l.store.Saves() - saves
		t.Logf("notify %-5v: paused for %v: %d reconciles, %d store writes (%d before the pause)",
			notify, l.clock.Now().Sub(start), l.reconciles.Load()-reconciles, after, saves)
		if got := l.reconciles.Load() - reconciles; got < polls {
			t.Fatalf("%d reconciles while paused, want at least %d", got, polls)
		}
		if after != 0 {
			now, _ := l.store.Load(context.Background())
			t.Errorf("notify %v: %d store writes while paused, want 0: %s", notify, after, cmp.Diff(before, now))
		}
	}
}

// TestRunCoalescesABurstOfWakes: wakes that arrive while a reconcile runs
// make one more reconcile, however many they are.
func TestRunCoalescesABurstOfWakes(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60)}}
	l := newLockstep(strat, fake.Lag{}, notified)
	l.start(nil)
	for {
		s, err := l.store.Load(context.Background())
		if err == nil && s.Phase == strategy.PhasePaused {
			break
		}
		if _, waiting := l.wait(t); !waiting {
			t.Fatal("Run returned before the pause")
		}
		l.nudge(t)
	}
	l.wait(t)
	before := l.reconciles.Load()
	// One wake starts a reconcile, held in its read of side A while a
	// burst of 100 more arrives.
	entered, release := l.sideA.blockNextRead()
	l.g.mu.Lock()
	wake := l.g.run
	l.g.mu.Unlock()
	wake()
	<-entered
	const burst = 100
	for range burst {
		wake()
	}
	release()
	l.wait(t) // Run took the burst before it waited again
	got := l.reconciles.Load() - before
	t.Logf("1 + %d wakes: %d reconciles", burst, got)
	if got != 2 {
		t.Errorf("1 + %d wakes: %d reconciles, want 2 (the one running, then one for the burst)", burst, got)
	}
	if polls := l.rc.polls; got > int64(1+burst+polls) {
		t.Errorf("%d reconciles for %d wakes and %d polls", got, 1+burst, polls)
	}
	l.cancel()
	<-l.done
}

// harnessTB is what the lockstep harness needs of a test: a *testing.T, a
// *testing.B or a *rapid.T.
type harnessTB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}
