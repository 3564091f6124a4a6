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
// bound, and the poller stops once nothing changes at the slowest
// interval.
func TestNotifyAfterSetCapacity(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		rs, srv := cluster(t, raytest.Options{StartPolls: n, StopPolls: 1})
		clk := fake.NewClock(time.Unix(1000, 0))
		r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Clock = clk })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var w wakeLog
		t0 := clk.Now()
		if err := r.Notify(ctx, w.wake(clk, t0, rs)); err != nil {
			t.Fatal(err)
		}
		if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
			t.Fatal(err)
		}
		p0 := rs.Polls() // the GET of SetCapacity
		gets, quiet := drain(t, clk, rs, t0)
		if w.len() < min(n, 2) {
			t.Fatalf("N=%d: %d wakes (at %v), want the capacity and the ready replicas", n, w.len(), w.at)
		}
		if w.at[0] != ray.DefaultNotifyMinInterval || w.polls[0] != p0+1 {
			t.Errorf("N=%d: first wake at %v after %d GETs, want at %v after 1", n, w.at[0], w.polls[0]-p0, ray.DefaultNotifyMinInterval)
		}
		// The replicas run from the N-th GET after the write on (the
		// emulator's clock is its polls): a wake at that GET, in time.
		ready := -1
		for i, p := range w.polls {
			if p-p0 == n {
				ready = i
			}
		}
		if ready < 0 {
			t.Fatalf("N=%d: no wake at GET %d (wakes at GETs %v)", n, n, w.polls)
		}
		if bound := backoffBound(n); w.at[ready] > bound {
			t.Errorf("N=%d: ready seen %v after the write, want <= %v", n, w.at[ready], bound)
		}
		st, err := r.Capacity(ctx)
		if err != nil || st.Ready < 40 || !st.Settled {
			t.Fatalf("N=%d: %+v, %v: want ready and settled", n, st, err)
		}
		// The quiet tail: 50, 100, ... 1600, 2000 ms, then nothing.
		last := w.at[len(w.at)-1]
		if tail := quiet - last; tail != backoffBound(7) {
			t.Errorf("N=%d: polled %v after the last change, want %v", n, tail, backoffBound(7))
		}
		t.Logf("StartPolls %d: wakes at %v (GETs %v after the write's); ready seen after %v; %d GETs, last %v after the write",
			n, w.at, subtract(w.polls, p0), w.at[ready], gets, quiet)
		if clk.Waiters() != 0 {
			t.Fatalf("N=%d: %d timers left", n, clk.Waiters())
		}
	}
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
	// One poller: each GET is counted once, whatever the subscribers.
	if want := wa.polls[len(wa.polls)-1] - p0 + 7; gets != want {
		t.Errorf("%d GETs for two subscribers, want %d (one poller)", gets, want)
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
	rs, srv := cluster(t, raytest.Options{StartPolls: 1})
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
	// One wake at 10 ms (capacity and ready at once), then 10, 20, 40, 40.
	if w.len() != 1 || w.at[0] != 10*time.Millisecond || gets != 4 || quiet != 80*time.Millisecond {
		t.Fatalf("wakes at %v, %d GETs, last at %v; want [10ms], 4, 80ms", w.at, gets, quiet)
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
