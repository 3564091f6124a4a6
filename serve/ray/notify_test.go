package ray_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// wakeLog records the wake calls of one subscriber: the clock's time since
// the write and the emulator's poll count at each.
type wakeLog struct {
	mu    sync.Mutex
	at    []time.Duration
	polls []int
}

// subscribed starts an emulated cluster with opts and an adapter of it on
// a fake clock, subscribed to its notifications with a wakeLog whose
// instants count from t0, the clock's start. The subscription's context
// ends with the test, or when its cancel is called.
func subscribed(t *testing.T, opts raytest.Options) (*raytest.Server, *fake.Clock, *ray.Ray, context.Context, context.CancelFunc, *wakeLog, time.Time) {
	t.Helper()
	rs, srv := cluster(t, opts)
	clk := fake.NewClock(time.Unix(1000, 0))
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Clock = clk })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &wakeLog{}
	t0 := clk.Now()
	if err := r.Notify(ctx, w.wake(clk, t0, rs)); err != nil {
		t.Fatal(err)
	}
	return rs, clk, r, ctx, cancel, w, t0
}

func (w *wakeLog) wake(clk *fake.Clock, t0 time.Time, rs *raytest.Server) func() {
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.at = append(w.at, clk.Now().Sub(t0))
		w.polls = append(w.polls, rs.Polls())
	}
}

func (w *wakeLog) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.at)
}

// drain advances clk from timer to timer until no poll is pending, and
// returns the GETs made meanwhile and the clock's time since t0.
func drain(t *testing.T, clk *fake.Clock, rs *raytest.Server, t0 time.Time) (gets int, quiet time.Duration) {
	t.Helper()
	before := rs.Polls()
	for i := 0; ; i++ {
		at, ok := clk.NextWake()
		if !ok {
			break
		}
		if i > 100 {
			t.Fatal("the poller never stops")
		}
		clk.Set(at)
	}
	return rs.Polls() - before, clk.Now().Sub(t0)
}

// backoffBound is the latest a change visible from the n-th GET after a
// write is seen: the sum of n intervals doubling from 50 ms, capped at 2 s.
func backoffBound(n int) time.Duration {
	var sum time.Duration
	d := ray.DefaultNotifyMinInterval
	for range n {
		sum += d
		d = min(2*d, ray.DefaultNotifyMaxInterval)
	}
	return sum
}

// TestNotifyAfterSetCapacity: a SetCapacity whose replicas start after N
// polls wakes the subscriber at the first poll (the capacity it reports
// changed) and at the N-th (the replicas are ready), within the backoff
// bound, and that N-th poll, which sees the side settled at the target
// capacity written, is the last one: N GETs in all, one for a cluster that
// applies the write at once.
func TestNotifyAfterSetCapacity(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5, 8} {
		rs, clk, r, ctx, _, w, t0 := subscribed(t, raytest.Options{StartPolls: n, StopPolls: 1})
		if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
			t.Fatal(err)
		}
		p0 := rs.Polls() // the GET of SetCapacity
		gets, quiet := drain(t, clk, rs, t0)
		want := max(n, 1) // the GET that sees the replicas running
		if w.len() != min(want, 2) {
			t.Fatalf("N=%d: %d wakes (at %v), want the capacity and the ready replicas", n, w.len(), w.at)
		}
		if w.at[0] != ray.DefaultNotifyMinInterval || w.polls[0] != p0+1 {
			t.Errorf("N=%d: first wake at %v after %d GETs, want at %v after 1", n, w.at[0], w.polls[0]-p0, ray.DefaultNotifyMinInterval)
		}
		// The replicas run from the N-th GET after the write on (the
		// emulator's clock is its polls): a wake at that GET, in time,
		// and no GET after it.
		last := len(w.at) - 1
		if w.polls[last]-p0 != want || gets != want {
			t.Fatalf("N=%d: last wake at GET %d, %d GETs in all; want both %d", n, w.polls[last]-p0, gets, want)
		}
		if bound := backoffBound(want); w.at[last] > bound || quiet != w.at[last] {
			t.Errorf("N=%d: ready seen %v after the write, last GET %v after it; want <= %v, the same", n, w.at[last], quiet, bound)
		}
		st, err := r.Capacity(ctx)
		if err != nil || st.Ready < 40 || !st.Settled {
			t.Fatalf("N=%d: %+v, %v: want ready and settled", n, st, err)
		}
		t.Logf("StartPolls %d: wakes at %v (GETs %v after the write's); %d GETs, last %v after the write",
			n, w.at, subtract(w.polls, p0), gets, quiet)
		if clk.Waiters() != 0 {
			t.Fatalf("N=%d: %d timers left", n, clk.Waiters())
		}
	}
}

// TestNotifySlowSide: replicas that take long to start are polled for at
// most every NotifyMaxInterval, the rate of a 2 s poll, and not after
// they run; a side that never settles is polled at that rate until the
// subscriber leaves, and a next write takes over from it.
func TestNotifySlowSide(t *testing.T) {
	const n = 40 // GETs until the replicas run
	rs, clk, r, ctx, cancel, w, t0 := subscribed(t, raytest.Options{StartPolls: n})
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
		t.Fatal(err)
	}
	p0 := rs.Polls()
	var at []time.Duration // the instant of each GET after the write
	for clk.Waiters() > 0 {
		next, _ := clk.NextWake()
		clk.Set(next)
		if rs.Polls() > p0+len(at) {
			at = append(at, clk.Now().Sub(t0))
		}
		if len(at) > 2*n {
			t.Fatal("the poller never stops")
		}
	}
	if len(at) != n || w.len() != 2 || w.polls[1]-p0 != n {
		t.Fatalf("%d GETs, wakes at GETs %v; want %d GETs, wakes at 1 and %d", len(at), subtract(w.polls, p0), n, n)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap > ray.DefaultNotifyMaxInterval {
			t.Errorf("GET %d came %v after the one before, more than %v", i+1, gap, ray.DefaultNotifyMaxInterval)
		}
	}
	// After the first second the GETs are 2 s apart: no more than a 2 s
	// poll makes over the same time, plus the fast ones at the start.
	if fast := len(at) - int((at[len(at)-1]-at[0])/ray.DefaultNotifyMaxInterval); fast > 6 {
		t.Errorf("%d GETs over %v: %d more than a %v poll", len(at), at[len(at)-1]-at[0], fast, ray.DefaultNotifyMaxInterval)
	}
	t.Logf("StartPolls %d: GETs at %v", n, at)

	// A deployment that fails never settles: GETs every 2 s while
	// subscribed, then none.
	if err := rs.FailDeployment("llm", "Model", "DEPLOY_FAILED", "no GPU"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 80}); err != nil {
		t.Fatal(err)
	}
	p1 := rs.Polls()
	var polls []time.Time
	for range 60 {
		next, ok := clk.NextWake()
		if !ok {
			t.Fatal("the poller stopped before the side settled")
		}
		clk.Set(next)
		polls = append(polls, next)
	}
	if got := rs.Polls() - p1; got != 60 {
		t.Fatalf("%d GETs at 60 timers, want one each", got)
	}
	// The Ingress replicas the write added start at its 40th GET (a
	// change: fast again); after that nothing changes, and the failed
	// Model never settles.
	for i := 1; i < len(polls); i++ {
		gap := polls[i].Sub(polls[i-1])
		if gap > ray.DefaultNotifyMaxInterval || i >= 50 && gap != ray.DefaultNotifyMaxInterval {
			t.Errorf("GET %d of the failed side %v after the one before; want at most %v, and %[3]v once nothing changes", i+1, gap, ray.DefaultNotifyMaxInterval)
		}
	}
	if clk.Waiters() != 1 {
		t.Fatalf("%d timers after 60 GETs of a side that does not settle, want the next poll", clk.Waiters())
	}
	minute := clk.Now()
	// A next write's goal replaces the failed one: the cluster at 0 is
	// settled.
	rs.HealDeployment("llm", "Model")
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	if gets, _ := drain(t, clk, rs, minute); gets > 2 || clk.Waiters() != 0 {
		t.Errorf("after a write to 0: %d GETs (want 1 or 2), %d timers", gets, clk.Waiters())
	}
	cancel()
	waitFor(t, func() bool { return clk.Waiters() == 0 && ray.Subscribers(r) == 0 })
}

// TestNotifyOverlappingWrites: a write before the goal of the one before
// was seen restarts the fast poll; a capacity write replaces the capacity
// the earlier one waited for, and the poller stops once the last one is
// seen; a capacity write after a Deploy waits for both.
func TestNotifyOverlappingWrites(t *testing.T) {
	t.Run("capacity", func(t *testing.T) {
		rs, clk, r, ctx, _, w, t0 := subscribed(t, raytest.Options{StartPolls: 3, StopPolls: 1})
		if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ray.DefaultNotifyMinInterval) // one poll: 40 written, replicas starting
		if w.len() != 1 {
			t.Fatalf("%d wakes after the first poll, want 1", w.len())
		}
		if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 80}); err != nil {
			t.Fatal(err)
		}
		p1 := rs.Polls() // the second write's GET
		gets, _ := drain(t, clk, rs, t0)
		st, err := r.Capacity(ctx)
		if err != nil || st.Capacity != 80 || st.Ready < 80 || !st.Settled {
			t.Fatalf("%+v, %v: want 80 ready and settled", st, err)
		}
		// The replicas the second write adds start at its third GET, and
		// the ones of the first (started one GET earlier) before them.
		if last := w.polls[len(w.polls)-1] - p1; last != 3 || gets != 3 {
			t.Errorf("last wake at GET %d after the second write, %d GETs; want 3 and 3", last, gets)
		}
		t.Logf("wakes at %v (GETs %v after the second write's)", w.at, subtract(w.polls, p1))
	})
	t.Run("deploy then capacity", func(t *testing.T) {
		rs, srv := cluster(t, raytest.Options{BuildPolls: 4, StartPolls: 1})
		clk := fake.NewClock(time.Unix(1000, 0))
		r, dp := revAdapter(t, srv.URL, func(c *ray.Config) { c.Clock = clk })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var w wakeLog
		t0 := clk.Now()
		if err := dp.Notify(ctx, w.wake(clk, t0, rs)); err != nil {
			t.Fatal(err)
		}
		if err := dp.Deploy(ctx, "v1"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ray.DefaultNotifyMinInterval) // one poll: still building
		// The capacity settles at the first GET (StartPolls 1); the
		// revision is not built yet, and the poller keeps polling for it.
		if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 10}); err != nil {
			t.Fatal(err)
		}
		if rs.Puts() != 2 {
			t.Fatalf("%d PUTs, want the deploy and the capacity", rs.Puts())
		}
		drain(t, clk, rs, t0)
		polled := rs.Polls()
		if st := revision(t, dp, "v1"); !st.Updated {
			t.Fatalf("revision %+v, want v1 updated", st)
		}
		// The last wake is the GET that saw v1 built, and the last GET;
		// Revision reads the answer that poll got (it is fresh: no time
		// has passed on the clock since), with no GET of its own.
		if last := w.polls[len(w.polls)-1]; last != polled {
			t.Errorf("last wake at GET %d, last GET %d: polled on after the goal, or stopped before it", last, polled)
		}
		if rs.Polls() != polled {
			t.Errorf("Revision sent %d GETs right after the poll that saw v1 built, want 0 (its answer reused)", rs.Polls()-polled)
		}
		t.Logf("wakes at %v (GETs %v)", w.at, w.polls)
	})
}

func subtract(xs []int, d int) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x - d
	}
	return out
}

// TestNotifyIdle: a subscriber alone makes no GET; nor does a SetCapacity
// that writes nothing, nor, after the fast polls, the time passing.
func TestNotifyIdle(t *testing.T) {
	rs, srv := cluster(t, raytest.Options{StartPolls: 2})
	clk := fake.NewClock(time.Unix(1000, 0))
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Clock = clk })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w wakeLog
	if err := r.Notify(ctx, w.wake(clk, clk.Now(), rs)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if rs.Polls() != 0 || clk.Waiters() != 0 || w.len() != 0 {
		t.Fatalf("idle: %d GETs, %d timers, %d wakes; want none", rs.Polls(), clk.Waiters(), w.len())
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	drain(t, clk, rs, clk.Now())
	p := rs.Polls()
	clk.Advance(time.Hour)
	if rs.Polls() != p || clk.Waiters() != 0 {
		t.Fatalf("after the fast polls: %d more GETs, %d timers", rs.Polls()-p, clk.Waiters())
	}
	// The same request again: one GET, no PUT, no poll.
	puts, wakes := rs.Puts(), w.len()
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if rs.Puts() != puts || rs.Polls() != p+1 || clk.Waiters() != 0 || w.len() != wakes {
		t.Fatalf("no-op SetCapacity: %d PUTs, %d GETs, %d timers, %d wakes; want 0, 1, 0, 0",
			rs.Puts()-puts, rs.Polls()-p, clk.Waiters(), w.len()-wakes)
	}
}

// TestNotifyCancel: ending ctx stops the fast polls at once, and a write
// afterwards polls nothing.
func TestNotifyCancel(t *testing.T) {
	rs, srv := cluster(t, raytest.Options{StartPolls: 5})
	clk := fake.NewClock(time.Unix(1000, 0))
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Clock = clk })
	ctx, cancel := context.WithCancel(context.Background())
	var w wakeLog
	if err := r.Notify(ctx, w.wake(clk, clk.Now(), rs)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ray.DefaultNotifyMinInterval) // one poll
	if w.len() != 1 || clk.Waiters() != 1 {
		t.Fatalf("%d wakes, %d timers; want 1 and the next poll", w.len(), clk.Waiters())
	}
	cancel()
	waitFor(t, func() bool { return clk.Waiters() == 0 && ray.Subscribers(r) == 0 })
	p := rs.Polls()
	clk.Advance(time.Hour)
	if err := r.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: 70}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if got := rs.Polls() - p; got != 1 || w.len() != 1 || clk.Waiters() != 0 {
		t.Fatalf("after cancel: %d GETs (want SetCapacity's 1), %d wakes (want 1), %d timers", got, w.len(), clk.Waiters())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNotifySharedWithDeployer: a Ray and its Deployer poll the cluster
// once for both subscribers; a Deploy wakes both when the revision lands
// and when Ray has built it; a subscriber that leaves is no longer woken
// while the other still is.
func TestNotifySharedWithDeployer(t *testing.T) {
	rs, srv := cluster(t, raytest.Options{BuildPolls: 3, StartPolls: 2})
	clk := fake.NewClock(time.Unix(1000, 0))
	r, dp := revAdapter(t, srv.URL, func(c *ray.Config) { c.Clock = clk })
	ctx := context.Background()
	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	t0 := clk.Now()
	var wa, wb wakeLog
	if err := r.Notify(ctxA, wa.wake(clk, t0, rs)); err != nil {
		t.Fatal(err)
	}
	if err := dp.Notify(ctxB, wb.wake(clk, t0, rs)); err != nil {
		t.Fatal(err)
	}
	if err := dp.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	p0 := rs.Polls()
	gets, quiet := drain(t, clk, rs, t0)
	if wa.len() == 0 || wa.len() != wb.len() {
		t.Fatalf("wakes: %v and %v, want the same, at least one", wa.at, wb.at)
	}
	// One poller: each GET is counted once, whatever the subscribers,
	// and the one that sees the revision built is the last.
	if want := wa.polls[len(wa.polls)-1] - p0; gets != want {
		t.Errorf("%d GETs for two subscribers, want %d (one poller, none after v1 is built)", gets, want)
	}
	if st := revision(t, dp, "v1"); st.Revision != "v1" || !st.Updated {
		t.Fatalf("revision %+v, want v1 updated", st)
	}
	last := wa.at[len(wa.at)-1]
	if w := wa.polls[len(wa.polls)-1] - p0; w != 3 || last > backoffBound(3) {
		t.Errorf("built seen at GET %d, %v after the deploy; want GET 3 (BuildPolls), <= %v", w, last, backoffBound(3))
	}
	t.Logf("Deploy: wakes at %v (GETs %v); %d GETs, last %v after the deploy", wa.at, subtract(wa.polls, p0), gets, quiet)

	// B leaves; A alone is woken by the next write.
	cancelB()
	nb := wb.len()
	waitFor(t, func() bool { return ray.Subscribers(r) == 1 })
	na := wa.len()
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	drain(t, clk, rs, clk.Now())
	if wa.len() == na || wb.len() != nb {
		t.Fatalf("after B left: A woken %d times, B %d; want A only", wa.len()-na, wb.len()-nb)
	}
}

// TestNotifyIntervals: Config's intervals set the polls; negative ones are
// invalid.
func TestNotifyIntervals(t *testing.T) {
	rs, srv := cluster(t, raytest.Options{StartPolls: 6})
	clk := fake.NewClock(time.Unix(1000, 0))
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) {
		c.Clock, c.NotifyMinInterval, c.NotifyMaxInterval = clk, 10*time.Millisecond, 40*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w wakeLog
	t0 := clk.Now()
	if err := r.Notify(ctx, w.wake(clk, t0, rs)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	gets, quiet := drain(t, clk, rs, t0)
	// GETs at 10 ms (the capacity: a change, back to 10 ms), 20, 40, 80,
	// 120 and 160 ms (the replicas running: the last).
	if w.len() != 2 || w.at[0] != 10*time.Millisecond || w.at[1] != 160*time.Millisecond || gets != 6 || quiet != 160*time.Millisecond {
		t.Fatalf("wakes at %v, %d GETs, last at %v; want [10ms 160ms], 6, 160ms", w.at, gets, quiet)
	}
	for _, c := range []ray.Config{{NotifyMinInterval: -1}, {NotifyMaxInterval: -1}} {
		c.Dashboard, c.ServeConfig = srv.URL, []byte(llmConfig)
		if _, err := ray.New(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := r.Notify(ctx, nil); err == nil {
		t.Error("Notify with a nil wake: no error")
	}
}
