package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

type rig struct {
	clock   *fake.Clock
	router  *fake.Router
	a, b    *fake.Capacity
	traffic *fake.Traffic
	runner  *rollout.Runner
}

func newRig(strat strategy.Strategy, lag fake.Lag) *rig {
	clock := fake.NewClock(t0)
	g := &rig{clock: clock, router: fake.NewRouter(clock), a: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), b: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})}
	for _, c := range []*fake.Capacity{g.a, g.b} {
		c.SetLag(lag)
	}
	g.router.SetLag(lag)
	g.traffic = fake.NewTraffic(g.router, g.a, g.b, 1000)
	g.runner = &rollout.Runner{Strategy: strat, Router: g.router, A: g.a, B: g.b, Clock: clock}
	return g
}

// run reconciles until a terminal phase, advancing the clock by each requeue
// and ticking the traffic after every reconcile.
func (g *rig) run(t testing.TB, s strategy.State, maxReconciles int) (strategy.State, int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < maxReconciles; i++ {
		next, requeue, err := g.runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		s = next
		g.traffic.Tick()
		if s.Phase.Terminal() {
			return s, i + 1
		}
		if s.AwaitingResume {
			s = s.Resume(g.clock.Now())
			continue
		}
		g.clock.Advance(requeue)
	}
	t.Fatalf("not finished after %d reconciles: %s %s", maxReconciles, s.Phase, s.Message)
	return s, 0
}

func TestRunnerIncrementalCounts(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
	plan, err := strategy.Plan(strat, strategy.PlanOptions{Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(strat, fake.Lag{Reads: 1, Duration: 3 * time.Second})
	end, reconciles := g.run(t, strategy.NewState("v1", "v2"), 10000)
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || end.StableSide != strategy.SideB {
		t.Fatalf("ended %s stable %s side %s", end.Phase, end.StableRevision, end.StableSide)
	}
	// The plan deploys the canary revision first; this rig's sides do not
	// report revisions, so the Runner asks for every hop but that one.
	writes := g.router.Writes() + g.a.Writes() + g.b.Writes()
	if writes != plan.Hops-1 {
		t.Errorf("writes %d, want one per planned hop but the deploy: %d", writes, plan.Hops-1)
	}
	st := g.traffic.Stats()
	if st.Dropped != 0 || st.Overloaded != 0 {
		t.Errorf("traffic: %+v", st)
	}
	// Capacity is asked for the next weight only: one step of 10 above
	// full, never the whole surge budget of 20.
	if st.PeakCapacity != 110 {
		t.Errorf("peak capacity %d, want 110", st.PeakCapacity)
	}
	elapsed := g.clock.Now().Sub(t0)
	reads := g.router.Reads() + g.a.Reads() + g.b.Reads()
	fixedPoll := 3 * int(elapsed/(2*time.Second))
	t.Logf("incremental step 10 surge 20, lag 1 read + 3s: %s (plan %s), %d reconciles, %d writes (= %d hops), %d reads vs %d for a fixed 2s poll",
		elapsed, plan.Duration, reconciles, writes, plan.Hops, reads, fixedPoll)
	if reads >= fixedPoll {
		t.Errorf("%d reads, no better than a fixed 2s poll (%d)", reads, fixedPoll)
	}
	if a := g.a.Status(); a.Capacity != 0 {
		t.Errorf("old stable side A left at capacity %d", a.Capacity)
	}
	if b := g.b.Status(); !b.Steady || b.Capacity != 100 {
		t.Errorf("new stable side B: %+v, want steady at 100", b)
	}
	if w := g.router.Applied(); w != (rollout.Weights{A: 0, B: 100}) {
		t.Errorf("applied weights %+v", w)
	}
}

func TestRunnerSafeOrderAndErrors(t *testing.T) {
	strat := strategy.BlueGreen{}
	g := newRig(strat, fake.Lag{})
	var order []string
	g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		for _, h := range e.Applied {
			order = append(order, h.String())
		}
	})
	ctx := context.Background()
	s := strategy.NewState("v1", "v2")
	// A transient error on the canary side: the hop is asked again next time.
	boom := errors.New("boom")
	g.b.FailWith(boom)
	next, requeue, err := g.runner.ReconcileAt(ctx, s, t0)
	var ae *rollout.AdapterError
	if !errors.As(err, &ae) || !errors.Is(err, boom) || ae.Adapter != "capacity B" {
		t.Fatalf("err %v, want an AdapterError for capacity B wrapping boom", err)
	}
	if requeue != strategy.DefaultPollInterval {
		t.Errorf("requeue %v after a transient error", requeue)
	}
	if next.Desired != s.Desired {
		t.Fatalf("a failed hop was recorded as asked: %+v", next.Desired)
	}
	g.b.FailWith(nil)
	s = next
	end, _ := g.run(t, s, 100)
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s", end.Phase)
	}
	want := []string{
		"canary capacity 100 (side B)",
		"weight 100 (A=0 B=100)",
		"canary capacity steady (side B)",
		"stable capacity 0 (side A)",
	}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("hops (-want +got):\n%s", diff)
	}
}

func TestRunnerPermanentErrorAborts(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
	g := newRig(strat, fake.Lag{})
	ctx := context.Background()
	s := strategy.NewState("v1", "v2")
	var err error
	for i := 0; i < 6; i++ { // walk a few hops in
		s, _, err = g.runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(time.Minute)
	}
	g.router.FailWith(rollout.Permanent(errors.New("route is invalid")))
	s, _, err = g.runner.Reconcile(ctx, s)
	if err != nil {
		t.Fatalf("a permanent error should be handled into the state, got %v", err)
	}
	if s.Phase != strategy.PhaseAborting || s.Aborted == nil {
		t.Fatalf("phase %s abort %+v, want Aborting", s.Phase, s.Aborted)
	}
	g.router.FailWith(nil)
	end, _ := g.run(t, s, 100)
	if end.Phase != strategy.PhaseAborted {
		t.Fatalf("ended %s", end.Phase)
	}
	if st := g.traffic.Stats(); st.Dropped+st.Overloaded != 0 {
		t.Fatalf("traffic %+v", st)
	}
}

func TestRunnerValidate(t *testing.T) {
	clock := fake.NewClock(t0)
	cases := []struct {
		name string
		r    rollout.Runner
		ok   bool
	}{
		{"managed", rollout.Runner{Strategy: strategy.BlueGreen{}, Router: fake.NewRouter(clock), A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 0})}, true},
		{"managed without sides", rollout.Runner{Strategy: strategy.BlueGreen{}, Router: fake.NewRouter(clock)}, false},
		{"fixed", rollout.Runner{Strategy: strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed}}, Router: fake.NewRouter(clock)}, true},
		{"replicas with router", rollout.Runner{Strategy: strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityReplicas}}, Router: fake.NewRouter(clock), A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 0})}, false},
		{"invalid strategy", rollout.Runner{Strategy: strategy.Incremental{}, Router: fake.NewRouter(clock), A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 0})}, false},
		{"nothing", rollout.Runner{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, rollout.ErrInvalid) && !errors.Is(err, strategy.ErrInvalid) {
				t.Fatalf("untyped error %v", err)
			}
		})
	}
}

func TestRunResumesFromStore(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60),
	}}
	g := newRig(strat, fake.Lag{Reads: 1})
	store := &fake.Store{}
	g.runner.Store = store
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
		done <- err
	}()
	// Drive the clock until the rollout pauses, then kill the process.
	waitFor(t, g.clock, func() bool { s, err := store.Load(ctx); return err == nil && s.Phase == strategy.PhasePaused })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	// A new process, a new Runner, the same store: resume and finish.
	cmds := make(chan rollout.Command, 1)
	cmds <- strategy.State.Resume
	r2 := *g.runner
	done2 := make(chan strategy.State, 1)
	go func() {
		s, err := r2.Run(context.Background(), strategy.NewState("ignored", "ignored"), cmds)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done2 <- s
	}()
	var end strategy.State
	waitFor(t, g.clock, func() bool {
		select {
		case end = <-done2:
			return true
		default:
			return false
		}
	})
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" {
		t.Fatalf("ended %s with stable %s", end.Phase, end.StableRevision)
	}
}

// waitFor advances the fake clock whenever the runner waits on it, until
// cond holds.
func waitFor(t *testing.T, clock *fake.Clock, cond func() bool) {
	t.Helper()
	if !clock.AdvanceUntil(cond, 20*time.Second) {
		t.Fatalf("condition not met")
	}
}

func ExampleRunner() {
	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0})
	b.SetLag(fake.Lag{Duration: 5 * time.Second}) // new replicas take 5s to become ready
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 50},
		Router:   fake.NewRouter(clock), A: a, B: b, Clock: clock,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			for _, h := range e.Applied {
				fmt.Printf("+%-7s %s\n", e.Time.Sub(t0), h)
			}
		}),
	}
	s := strategy.NewState("v1", "v2")
	for !s.Phase.Terminal() {
		next, requeue, err := r.Reconcile(context.Background(), s)
		if err != nil {
			fmt.Println(err)
			return
		}
		s = next
		clock.Advance(requeue)
	}
	fmt.Println(s.Phase, "- stable:", s.StableRevision, "on side", s.StableSide)
	// Output:
	// +0s      canary capacity 25 (side B)
	// +6s      weight 25 (A=75 B=25)
	// +6.1s    stable capacity 75 (side A)
	// +1m0s    canary capacity 50 (side B)
	// +1m6s    weight 50 (A=50 B=50)
	// +1m6.1s  stable capacity 50 (side A)
	// +2m0s    canary capacity 75 (side B)
	// +2m6s    weight 75 (A=25 B=75)
	// +2m6.1s  stable capacity 25 (side A)
	// +3m0s    canary capacity 100 (side B)
	// +3m6s    weight 100 (A=0 B=100)
	// +3m6.1s  canary capacity steady (side B)
	// +3m6.1s  stable capacity 0 (side A)
	// Succeeded - stable: v2 on side B
}

// TestRunnerWaitsForTheDataPlane: with a router whose data plane lags its
// spec, no capacity moves until the new weights are accepted, so the
// simulated traffic never finds a side short of ready capacity.
func TestRunnerWaitsForTheDataPlane(t *testing.T) {
	for _, lag := range []fake.Lag{{Reads: 3}, {Duration: 7 * time.Second}, {Reads: 2, Duration: 3 * time.Second}} {
		t.Run(fmt.Sprintf("%+v", lag), func(t *testing.T) {
			g := newRig(strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 10}, fake.Lag{})
			g.a, g.b = fake.NewCapacity(g.clock, fake.CapacityOptions{Replicas: 100, Percent: 100}), fake.NewCapacity(g.clock, fake.CapacityOptions{Replicas: 100, Percent: 0})
			g.runner.A, g.runner.B = g.a, g.b
			g.traffic = fake.NewTraffic(g.router, g.a, g.b, 1000)
			g.router.SetLag(lag)
			ctx := context.Background()
			s := strategy.NewState("v1", "v2")
			for i := 0; i < 2000 && !s.Phase.Terminal(); i++ {
				next, requeue, err := g.runner.Reconcile(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				s = next
				g.traffic.Tick()
				g.clock.Advance(min(requeue, time.Second))
				g.traffic.Tick()
			}
			if s.Phase != strategy.PhaseSucceeded {
				t.Fatalf("ended %s", s.Phase)
			}
			if st := g.traffic.Stats(); st.Overloaded+st.Dropped != 0 {
				t.Fatalf("traffic %+v", st)
			}
		})
	}
}

// TestRunnerLogsThroughTheContext: the logger comes from the context, hops
// are logged at V(1) and adapter errors as errors.
func TestRunnerLogsThroughTheContext(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 1})
	ctx := logr.NewContext(context.Background(), log)
	g := newRig(strategy.BlueGreen{}, fake.Lag{})
	s, _, err := g.runner.Reconcile(ctx, strategy.NewState("v1", "v2"))
	if err != nil {
		t.Fatal(err)
	}
	g.b.FailWith(errors.New("boom"))
	if _, _, err := g.runner.Reconcile(ctx, s); err == nil {
		t.Fatal("want an error")
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{`"msg"="hop"`, `"hop"="canary capacity 100 (side B)"`, `"error"="capacity B: read capacity: boom"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("log lacks %s:\n%s", want, joined)
		}
	}
}

// TestLostStateThenAbortKeepsTheSurge is the case the state machine found:
// a reconcile whose state is never stored grows the canary; an abort then
// must repair the world to the stored state before walking back, or both
// sides together exceed the surge budget.
func TestLostStateThenAbortKeepsTheSurge(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 1, Options: strategy.Options{Capacity: strategy.CapacityReplicas}}
	clock := fake.NewClock(t0)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 1, Percent: 0})
	r := &rollout.Runner{Strategy: strat, A: a, B: b, Clock: clock}
	ctx := context.Background()
	s := strategy.NewState("v1", "v2")
	var err error
	for i := 0; i < 2; i++ {
		if s, _, err = r.Reconcile(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err = r.Reconcile(ctx, s); err != nil { // its state is lost
		t.Fatal(err)
	}
	s = s.Abort("test", clock.Now())
	for i := 0; i < 20 && !s.Phase.Terminal(); i++ {
		if s, _, err = r.Reconcile(ctx, s); err != nil {
			t.Fatal(err)
		}
		if total := a.Status().Capacity + b.Status().Capacity; total > 101 {
			t.Fatalf("reconcile %d: capacity %d exceeds 100 + MaxSurge 1", i, total)
		}
		clock.Advance(time.Second)
	}
	if s.Phase != strategy.PhaseAborted {
		t.Fatalf("ended %s", s.Phase)
	}
}

// TestReconcileWatched: after a hop, ReconcileAt polls fast (the strategy's
// RequeueAfter, from InitialPollInterval) for a caller that polls, and
// waits the poll interval (WatchedRequeueAfter) for one that is woken by
// every change of the adapters (Runner.Watched).
func TestReconcileWatched(t *testing.T) {
	for _, tc := range []struct {
		watched bool
		want    time.Duration
	}{
		{false, strategy.DefaultInitialPollInterval},
		{true, strategy.DefaultPollInterval},
	} {
		clock := fake.NewClock(t0)
		r := &rollout.Runner{
			Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 50},
			Router:   fake.NewRouter(clock), A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0}),
			Clock: clock, Watched: tc.watched,
		}
		s, requeue, err := r.Reconcile(context.Background(), strategy.NewState("v1", "v2"))
		if err != nil {
			t.Fatal(err)
		}
		if s.Desired.CanaryCapacity != 25 || requeue != tc.want { // what the first weight needs
			t.Errorf("watched %v: canary capacity %d, requeue %v; want 25 and %v", tc.watched, s.Desired.CanaryCapacity, requeue, tc.want)
		}
	}
}
