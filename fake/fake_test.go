package fake_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func TestRouterLag(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		lag  fake.Lag
		// accepted after this many reads, with the clock advanced by step
		// before each read
		step  time.Duration
		reads int
	}{
		{"none", fake.Lag{}, 0, 1},
		{"reads", fake.Lag{Reads: 3}, 0, 3},
		{"duration", fake.Lag{Duration: 5 * time.Second}, 2 * time.Second, 3},
		{"both", fake.Lag{Reads: 4, Duration: time.Second}, time.Second, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0)
			r := fake.NewRouter(clock)
			r.SetLag(tc.lag)
			if err := r.SetWeights(ctx, rollout.Weights{A: 70, B: 30}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= tc.reads; i++ {
				clock.Advance(tc.step)
				st, err := r.Weights(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Weights != (rollout.Weights{A: 70, B: 30}) {
					t.Fatalf("spec weights %+v", st.Weights)
				}
				want := i == tc.reads
				if st.Accepted != want {
					t.Fatalf("read %d: accepted %v, want %v", i, st.Accepted, want)
				}
				if applied := r.Applied(); (applied.B == 30) != want {
					t.Fatalf("read %d: applied %+v", i, applied)
				}
			}
		})
	}
}

func TestRouterFaults(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	r.Conflicts(2)
	for i := 0; i < 2; i++ {
		if err := r.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); !errors.Is(err, rollout.ErrConflict) {
			t.Fatalf("write %d: %v, want a conflict", i, err)
		}
	}
	if got := r.Applied(); got.A != 100 {
		t.Fatalf("a conflicting write landed: %+v", got)
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	r.Reject("gateway gone")
	if err := r.SetWeights(ctx, rollout.Weights{A: 0, B: 100}); err != nil {
		t.Fatal(err)
	}
	st, _ := r.Weights(ctx)
	if st.Accepted || st.Message != "gateway gone" || r.Applied().B != 50 {
		t.Fatalf("rejected route: %+v applied %+v", st, r.Applied())
	}
	r.Reject("")
	if st, _ := r.Weights(ctx); !st.Accepted || r.Applied().B != 100 {
		t.Fatalf("after the rejection: %+v", st)
	}
	if err := r.SetWeights(ctx, rollout.Weights{A: 60, B: 60}); !rollout.IsPermanent(err) {
		t.Fatalf("weights that do not sum to 100: %v, want a permanent error", err)
	}
	boom := errors.New("boom")
	r.FailWith(boom)
	if _, err := r.Weights(ctx); !errors.Is(err, boom) {
		t.Fatalf("FailWith: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	r.FailWith(nil)
	if err := r.SetWeights(canceled, rollout.Weights{A: 100}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v", err)
	}
	var ops []string
	for _, c := range r.History() {
		ops = append(ops, fmt.Sprintf("%s %s %v", c.Op, c.Arg, c.Err != nil))
	}
	want := []string{
		"SetWeights A=50 B=50 true", "SetWeights A=50 B=50 true", "SetWeights A=50 B=50 false",
		"SetWeights A=0 B=100 false", "Weights  false", "Weights  false",
		"SetWeights A=60 B=60 true", "Weights  true", "SetWeights A=100 B=0 true",
	}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if r.Writes() != 2 || r.Reads() != 2 {
		t.Errorf("writes %d reads %d, want 2 and 2", r.Writes(), r.Reads())
	}
}

func TestCapacity(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 3, Percent: 0})
	c.SetLag(fake.Lag{Reads: 2})
	if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
		t.Fatal(err)
	}
	// 40% of 3 replicas is 2 replicas (rounded up): 66% once ready.
	want := []rollout.CapacityStatus{
		{Capacity: 40, Ready: 0, Settled: false},
		{Capacity: 40, Ready: 66, Settled: true},
	}
	for i, w := range want {
		got, err := c.Capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Fatalf("read %d (-want +got):\n%s", i, diff)
		}
	}
	// Partial: one more replica per observation.
	c.SetLag(fake.Lag{})
	c.SetPartial(true)
	if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Capacity(ctx); st.Ready != 100 || !st.Settled || !st.Steady {
		t.Fatalf("after one read: %+v", st)
	}
	// Scaling down stops replicas at once.
	if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 10}); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); st.Ready != 33 || !st.Settled {
		t.Fatalf("after scaling down: %+v", st)
	}
	if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 101}); !rollout.IsPermanent(err) {
		t.Fatalf("out of range: %v", err)
	}
	c.SetHealth(strategy.HealthUnhealthy, "crash loop")
	if st := c.Status(); st.Health != strategy.HealthUnhealthy || st.HealthMessage != "crash loop" {
		t.Fatalf("health: %+v", st)
	}
}

func TestClock(t *testing.T) {
	c := fake.NewClock(t0)
	early, late := c.After(time.Second), c.After(time.Minute)
	if c.Waiters() != 2 {
		t.Fatalf("waiters %d", c.Waiters())
	}
	if at, ok := c.NextWake(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("next wake %v %v", at, ok)
	}
	c.Advance(30 * time.Second)
	select {
	case got := <-early:
		if !got.Equal(t0.Add(30 * time.Second)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("the early waiter did not fire")
	}
	select {
	case <-late:
		t.Fatal("the late waiter fired early")
	default:
	}
	c.Advance(-time.Hour) // backwards fires nothing
	select {
	case <-late:
		t.Fatal("fired on a backward jump")
	default:
	}
	if now := <-c.After(0); !now.Equal(t0.Add(30*time.Second - time.Hour)) {
		t.Fatalf("After(0) delivered %v", now)
	}
}

func TestClockAfterFunc(t *testing.T) {
	c := fake.NewClock(t0)
	var fired []string
	at := func(name string) func() {
		return func() { fired = append(fired, fmt.Sprintf("%s@%s", name, c.Now().Sub(t0))) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	stopB := c.AfterFunc(2*time.Second, at("b"))
	c.AfterFunc(time.Second, at("a2"))
	stopLate := c.AfterFunc(time.Hour, at("late"))
	if c.Waiters() != 5 {
		t.Fatalf("waiters %d, want 5", c.Waiters())
	}
	if !stopB() || stopB() {
		t.Fatal("stop of a pending timer: want true once, then false")
	}
	if at, ok := c.NextWake(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("next wake %v %v", at, ok)
	}
	c.Advance(500 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired early: %v", fired)
	}
	c.Advance(5 * time.Second)
	if want := []string{"a@5.5s", "a2@5.5s", "c@5.5s"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v (deadline order, ties in order set, at the new time)", fired, want)
	}
	if c.Waiters() != 1 || !stopLate() {
		t.Fatalf("the late timer should still be pending (waiters %d)", c.Waiters())
	}
	c.Advance(2 * time.Hour)
	if len(fired) != 3 || c.Waiters() != 0 {
		t.Fatalf("a stopped timer fired: %v", fired)
	}

	now := make(chan struct{})
	stop := c.AfterFunc(0, func() { close(now) })
	select {
	case <-now:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc(0) did not fire without an Advance")
	}
	if stop() {
		t.Fatal("stop after AfterFunc(0) fired reported true")
	}
	if c.Waiters() != 0 {
		t.Fatalf("waiters %d after AfterFunc(0)", c.Waiters())
	}
}

func TestStoreRoundTrips(t *testing.T) {
	ctx := context.Background()
	var s fake.Store
	if _, err := s.Load(ctx); !errors.Is(err, rollout.ErrNotFound) {
		t.Fatalf("empty store: %v", err)
	}
	st := strategy.NewState("v1", "v2").Pause(t0.Add(1234567 * time.Nanosecond))
	if err := s.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, got); diff != "" {
		t.Fatalf("round trip (-saved +loaded):\n%s", diff)
	}
	if s.Saves() != 1 {
		t.Fatalf("saves %d", s.Saves())
	}
}

// TestAnalyzer: a gate answers the verdict last set for it (pending until
// then), FailWith fails every call until FailWith(nil), an ended ctx fails
// the call unrecorded, and History lists the calls with their errors.
func TestAnalyzer(t *testing.T) {
	boom := errors.New("boom")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	type step struct {
		set  map[string]strategy.Verdict
		fail error
		ctx  context.Context
		gate string
		want strategy.Verdict
		err  error
	}
	steps := []step{
		{gate: "smoke", want: strategy.VerdictPending},
		{set: map[string]strategy.Verdict{"smoke": strategy.VerdictPass}, gate: "smoke", want: strategy.VerdictPass},
		{gate: "load", want: strategy.VerdictPending},
		{set: map[string]strategy.Verdict{"smoke": strategy.VerdictFail, "load": strategy.VerdictInconclusive}, gate: "smoke", want: strategy.VerdictFail},
		{fail: boom, gate: "load", want: strategy.VerdictPending, err: boom},
		{fail: nil, gate: "load", want: strategy.VerdictInconclusive},
		{ctx: canceled, gate: "smoke", want: strategy.VerdictPending, err: context.Canceled},
	}
	var a fake.Analyzer // the zero value is ready
	for i, st := range steps {
		for gate, v := range st.set {
			a.Set(gate, v)
		}
		a.FailWith(st.fail)
		ctx := st.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		got, err := a.Analyze(ctx, st.gate)
		if got != st.want || !errors.Is(err, st.err) || (err == nil) != (st.err == nil) {
			t.Errorf("step %d: Analyze(%q) = %q, %v; want %q, %v", i, st.gate, got, err, st.want, st.err)
		}
	}
	want := []fake.Call{
		{Op: "Analyze", Arg: "smoke"}, {Op: "Analyze", Arg: "smoke"}, {Op: "Analyze", Arg: "load"},
		{Op: "Analyze", Arg: "smoke"}, {Op: "Analyze", Arg: "load", Err: boom}, {Op: "Analyze", Arg: "load"},
	}
	if diff := cmp.Diff(want, a.History(), cmp.Comparer(func(x, y error) bool { return x == y })); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

func TestInterceptors(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	var seen []rollout.Weights
	ir := fake.InterceptRouter(r, fake.RouterFuncs{
		SetWeights: func(ctx context.Context, next rollout.TrafficRouter, w rollout.Weights) error {
			seen = append(seen, w)
			// The write lands, but the caller is told it failed.
			if err := next.SetWeights(ctx, w); err != nil {
				return err
			}
			return errors.New("timeout after the write")
		},
	})
	if err := ir.SetWeights(ctx, rollout.Weights{A: 80, B: 20}); err == nil {
		t.Fatal("want the intercepted error")
	}
	if st, _ := ir.Weights(ctx); st.Weights.B != 20 {
		t.Fatalf("the write did not reach the wrapped router: %+v", st)
	}
	c := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 4, Percent: 0})
	ic := fake.InterceptCapacity(c, fake.CapacityFuncs{
		Capacity: func(ctx context.Context, next rollout.CapacitySetter) (rollout.CapacityStatus, error) {
			st, err := next.Capacity(ctx)
			st.Ready = 0 // a side whose readiness probe lies
			return st, err
		},
	})
	_ = ic.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50})
	if st, _ := ic.Capacity(ctx); st.Ready != 0 || c.Status().Ready != 50 {
		t.Fatalf("interceptor: %+v, wrapped %+v", st, c.Status())
	}
	if len(seen) != 1 {
		t.Fatalf("seen %v", seen)
	}
}

func TestTraffic(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	a, b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	tr := fake.NewTraffic(r, a, b, 1000)
	tr.Tick()
	_ = b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 20})
	_ = r.SetWeights(ctx, rollout.Weights{A: 70, B: 30}) // 30% of traffic on 20% of capacity
	tr.Tick()
	_ = a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0})
	tr.Tick() // side A gets 700 requests with nothing ready
	want := fake.TrafficStats{Ticks: 3, Served: 1000 + 900 + 200, Overloaded: 100 + 100, Dropped: 700, PeakCapacity: 120,
		A: fake.SideTraffic{Requests: 1000 + 700 + 700}, B: fake.SideTraffic{Requests: 300 + 300}}
	if diff := cmp.Diff(want, tr.Stats()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Without a router, traffic follows ready capacity.
	ra, rb := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 4, Percent: 50}), fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 4, Percent: 25})
	tr = fake.NewTraffic(nil, ra, rb, 1000)
	tr.Tick()
	if st := tr.Stats(); st.Served != 750 || st.Overloaded != 250 || st.Dropped != 0 {
		t.Fatalf("replicas mode: %+v", st)
	}
}

// myReconciler is what a user of upshift might write: a reconciler that keeps
// its rollout state in a map, standing in for a CRD status.
type myReconciler struct {
	runner *rollout.Runner
	status map[string]strategy.State
}

func (m *myReconciler) Reconcile(ctx context.Context, name, revision string, now time.Time) (time.Duration, error) {
	s, ok := m.status[name]
	if !ok {
		s = strategy.NewState("v1", revision)
	}
	s = s.Retarget(revision, now)
	next, requeue, err := m.runner.ReconcileAt(ctx, s, now)
	m.status[name] = next // stored even on error: nothing is lost
	return requeue, err
}

// Example tests a user's own reconciler with the fakes: a slow canary side,
// a route that loses a write race, and simulated traffic that must never
// reach capacity that is not ready.
func Example() {
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	stable, canary := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	canary.SetLag(fake.Lag{Duration: 20 * time.Second})
	router.Conflicts(1)
	traffic := fake.NewTraffic(router, stable, canary, 1000)

	rec := &myReconciler{
		runner: &rollout.Runner{
			Strategy: strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
				strategy.SetWeight(25), strategy.Pause(time.Minute), strategy.SetWeight(75),
			}},
			Router: router, A: stable, B: canary, Clock: clock,
		},
		status: map[string]strategy.State{},
	}
	ctx := context.Background()
	errs := 0
	for i := 0; i < 500 && !rec.status["web"].Phase.Terminal(); i++ {
		requeue, err := rec.Reconcile(ctx, "web", "v2", clock.Now())
		if err != nil {
			errs++
		}
		for d := time.Duration(0); d < requeue; d += time.Second {
			clock.Advance(min(time.Second, requeue-d))
			traffic.Tick()
		}
	}
	st := traffic.Stats()
	fmt.Println("phase:", rec.status["web"].Phase, "stable:", rec.status["web"].StableRevision)
	fmt.Println("took:", clock.Now().Sub(t0), "errors retried:", errs)
	fmt.Println("served:", st.Served, "overloaded:", st.Overloaded, "dropped:", st.Dropped, "peak capacity:", st.PeakCapacity)
	// Output:
	// phase: Succeeded stable: v2
	// took: 1m42.5s errors retried: 1
	// served: 120000 overloaded: 0 dropped: 0 peak capacity: 150
}

func TestCapacityCrash(t *testing.T) {
	ctx := context.Background()
	set := func(p int32) func(*testing.T, *fake.Capacity) {
		return func(t *testing.T, c *fake.Capacity) {
			if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	crash := func(n int32) func(*testing.T, *fake.Capacity) {
		return func(_ *testing.T, c *fake.Capacity) { c.Crash(n) }
	}
	loop := func(on bool) func(*testing.T, *fake.Capacity) {
		return func(_ *testing.T, c *fake.Capacity) { c.CrashLoop(on) }
	}
	// A step sets the clock to t0+at, runs do, then observes the side: with
	// Capacity (one read) when read is set, with Status otherwise.
	type step struct {
		at   time.Duration
		do   func(*testing.T, *fake.Capacity)
		read bool
		want rollout.CapacityStatus
	}
	full := rollout.CapacityStatus{Capacity: 100, Ready: 100, Settled: true}
	at := func(capacity, ready int32, settled bool) rollout.CapacityStatus {
		return rollout.CapacityStatus{Capacity: capacity, Ready: ready, Settled: settled}
	}
	cases := []struct {
		name             string
		replicas, start  int32
		lag              fake.Lag
		partial, healthy bool
		steps            []step
	}{
		{
			name: "replaced after a duration", replicas: 10, start: 100, lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{at: 0, do: crash(3), want: at(100, 70, false)},
				{at: 29 * time.Second, read: true, want: at(100, 70, false)},
				{at: 30 * time.Second, want: full},
			},
		},
		{
			name: "replaced after reads", replicas: 10, start: 100, lag: fake.Lag{Reads: 2},
			steps: []step{
				{do: crash(4), want: at(100, 60, false)},
				{read: true, want: at(100, 60, false)},
				{read: true, want: full},
			},
		},
		{
			name: "partial: one back per read", replicas: 10, start: 100, partial: true,
			steps: []step{
				{do: crash(3), want: at(100, 70, false)},
				{read: true, want: at(100, 80, false)},
				{read: true, want: at(100, 90, false)},
				{want: at(100, 90, false)}, // Status is not a read
				{read: true, want: full},
			},
		},
		{
			name: "clamped to what is ready", replicas: 10, start: 50, lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: crash(8), want: at(50, 0, false)},
				{do: crash(-1), want: at(50, 0, false)},
				{at: 10 * time.Second, want: at(50, 50, true)},
			},
		},
		{
			name: "ready share rounds down", replicas: 3, start: 100, lag: fake.Lag{Duration: time.Second},
			steps: []step{
				{do: crash(1), want: at(100, 66, false)},
				{at: time.Second, want: full},
			},
		},
		{
			name: "a crash restarts the lag", replicas: 10, start: 100, lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: crash(2), want: at(100, 80, false)},
				{at: 20 * time.Second, do: crash(2), want: at(100, 60, false)},
				{at: 30 * time.Second, want: at(100, 60, false)},
				{at: 50 * time.Second, want: full},
			},
		},
		{
			name: "crash during a scale-up", replicas: 10, start: 50, lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: set(100), want: at(100, 50, false)},
				{at: 10 * time.Second, do: crash(5), want: at(100, 0, false)},
				{at: 30 * time.Second, want: at(100, 50, false)}, // the new replicas
				{at: 40 * time.Second, want: full},               // the replacements
			},
		},
		{
			name: "scale-down removes crashed replicas first", replicas: 10, start: 100, lag: fake.Lag{Duration: time.Minute},
			steps: []step{
				{do: crash(3), want: at(100, 70, false)},
				{at: time.Second, do: set(80), want: at(80, 70, false)}, // 7 ready, 1 crashed
				{at: time.Minute, want: at(80, 80, false)},              // the crashed one is back...
				{at: time.Minute + time.Second, want: at(80, 80, true)}, // ...then the scale change is done
				{at: 2 * time.Minute, do: crash(3), want: at(80, 50, false)},
				{at: 2*time.Minute + time.Second, do: set(50), want: at(50, 50, false)}, // none crashed
				{at: 3*time.Minute + time.Second, want: at(50, 50, true)},
			},
		},
		{
			name: "crash loop keeps them down", replicas: 10, start: 100, lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: loop(true), want: full}, // ready replicas keep serving
				{do: crash(10), want: at(100, 0, false)},
				{at: time.Hour, read: true, want: at(100, 0, false)},
				{at: time.Hour, do: loop(false), want: at(100, 0, false)},
				{at: time.Hour + 29*time.Second, want: at(100, 0, false)},
				{at: time.Hour + 30*time.Second, want: full},
			},
		},
		{
			name: "crash loop holds back a restart under way", replicas: 10, start: 100, lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: crash(4), want: at(100, 60, false)},
				{at: 10 * time.Second, do: loop(true), want: at(100, 60, false)},
				{at: time.Minute, want: at(100, 60, false)},
			},
		},
		{
			name: "crash loop: new replicas never get ready", replicas: 10, start: 0, lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: loop(true), want: at(0, 0, true)},
				{do: set(50), want: at(50, 0, false)},
				{at: 10 * time.Second, want: at(50, 0, false)},
				{at: time.Minute, do: set(30), want: at(30, 0, false)},
				{at: 2 * time.Minute, do: loop(false), want: at(30, 0, false)},
				{at: 2*time.Minute + 10*time.Second, want: at(30, 30, true)},
			},
		},
		{
			name: "crash loop: a scale-down to zero settles", replicas: 4, start: 100,
			steps: []step{
				{do: loop(true), want: full},
				{do: crash(4), want: at(100, 0, false)},
				{do: set(0), want: at(0, 0, true)},
			},
		},
		{
			name: "health is not touched", replicas: 4, start: 100, healthy: true,
			steps: []step{
				{do: loop(true)},
				{do: crash(4), read: true, want: rollout.CapacityStatus{Capacity: 100, Health: strategy.HealthHealthy, HealthMessage: "probe ok"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0)
			c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: tc.replicas, Percent: tc.start})
			c.SetLag(tc.lag)
			c.SetPartial(tc.partial)
			if tc.healthy {
				c.SetHealth(strategy.HealthHealthy, "probe ok")
			}
			for i, s := range tc.steps {
				clock.Set(t0.Add(s.at))
				if s.do != nil {
					s.do(t, c)
				}
				got := c.Status()
				if s.read {
					var err error
					if got, err = c.Capacity(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if s.want == (rollout.CapacityStatus{}) {
					continue
				}
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Fatalf("step %d at +%v (-want +got):\n%s", i, s.at, diff)
				}
			}
		})
	}
}

// A crash takes ready replicas out at once; the workload replaces them after
// the side's lag, unless the side crash-loops. Health is left as set.
func ExampleCapacity_Crash() {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	web := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100})
	web.SetLag(fake.Lag{Duration: 30 * time.Second})
	show := func() {
		st, _ := web.Capacity(ctx)
		fmt.Printf("+%v: ready %d%%, settled %v, health %q\n", clock.Now().Sub(t0), st.Ready, st.Settled, st.Health)
	}
	web.Crash(3)
	show()
	clock.Advance(30 * time.Second)
	show()

	web.CrashLoop(true) // a bad revision: nothing comes back
	web.Crash(web.Replicas())
	clock.Advance(time.Hour)
	show()
	web.CrashLoop(false)
	clock.Advance(30 * time.Second)
	show()
	// Output:
	// +0s: ready 70%, settled false, health ""
	// +30s: ready 100%, settled true, health ""
	// +1h0m30s: ready 0%, settled false, health ""
	// +1h1m0s: ready 100%, settled true, health ""
}

// TestClockBlockUntil: BlockUntil returns once the goroutines waiting on
// the clock have set n timers, and with ctx's error when ctx ends first.
func TestClockBlockUntil(t *testing.T) {
	c := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	for range 2 {
		go func() { <-c.After(time.Minute) }()
	}
	if err := c.BlockUntil(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if n := c.Waiters(); n != 2 {
		t.Fatalf("%d waiters after BlockUntil(2)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.BlockUntil(ctx, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntil(3) with an ended ctx: %v", err)
	}
	c.Advance(time.Minute)
	if err := c.BlockUntil(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}
