package fake_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// counter is a subscriber that counts its wakes.
type counter struct{ n atomic.Int64 }

func (c *counter) wake()        { c.n.Add(1) }
func (c *counter) count() int64 { return c.n.Load() }
func (c *counter) reset()       { c.n.Store(0) }
func subscribe(t *testing.T, n rollout.Notifier) *counter {
	t.Helper()
	c := &counter{}
	if err := n.Notify(t.Context(), c.wake); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	return c
}

func TestNotifyOnWritesAndControls(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	type sides struct {
		clock  *fake.Clock
		router *fake.Router
		c      *fake.Capacity
		d      *fake.FixedSide
	}
	for _, tc := range []struct {
		name  string
		setup func(s sides)
		do    func(s sides)
		wakes int64
	}{
		{name: "SetWeights changes the spec", do: func(s sides) { s.router.SetWeights(ctx, rollout.Weights{A: 70, B: 30}) }, wakes: 1},
		{name: "SetWeights writes what is in place", do: func(s sides) { s.router.SetWeights(ctx, rollout.Weights{A: 100}) }},
		{name: "SetWeights fails", setup: func(s sides) { s.router.Conflicts(1) }, do: func(s sides) { s.router.SetWeights(ctx, rollout.Weights{A: 70, B: 30}) }},
		{name: "Weights read", do: func(s sides) { s.router.Weights(ctx) }},
		{name: "Overwrite", do: func(s sides) { s.router.Overwrite(rollout.Weights{A: 100, B: 30}) }, wakes: 1},
		{name: "Delete", do: func(s sides) { s.router.Delete() }, wakes: 1},
		{name: "Delete a deleted route", setup: func(s sides) { s.router.Delete() }, do: func(s sides) { s.router.Delete() }},
		{name: "Create", setup: func(s sides) { s.router.Delete() }, do: func(s sides) { s.router.Create(rollout.Weights{A: 100}) }, wakes: 1},
		{name: "Reject", do: func(s sides) { s.router.Reject("no") }, wakes: 1},
		{name: "Reject again", setup: func(s sides) { s.router.Reject("no") }, do: func(s sides) { s.router.Reject("no") }},
		{name: "router FailWith", do: func(s sides) { s.router.FailWith(boom) }, wakes: 1},
		{name: "Conflicts", do: func(s sides) { s.router.Conflicts(2) }},
		{name: "router SetLag", do: func(s sides) { s.router.SetLag(fake.Lag{Reads: 3}) }},

		{name: "SetCapacity changes the percent", do: func(s sides) { s.c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}) }, wakes: 1},
		{name: "SetCapacity asks what is in place", do: func(s sides) { s.c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}) }},
		{name: "SetCapacity steady", do: func(s sides) { s.c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}) }, wakes: 1},
		{name: "Capacity read", do: func(s sides) { s.c.Capacity(ctx) }},
		{name: "SetHealth", do: func(s sides) { s.c.SetHealth(strategy.HealthUnhealthy, "5xx") }, wakes: 1},
		{name: "capacity FailWith", do: func(s sides) { s.c.FailWith(boom) }, wakes: 1},
		{name: "Crash", do: func(s sides) { s.c.Crash(2) }, wakes: 1},
		{name: "Crash none", do: func(s sides) { s.c.Crash(0) }},
		{name: "CrashLoop", do: func(s sides) { s.c.CrashLoop(true) }, wakes: 1},
		{name: "CrashLoop as it is", do: func(s sides) { s.c.CrashLoop(false) }},
		{name: "SetPartial", do: func(s sides) { s.c.SetPartial(true) }, wakes: 1},
		{name: "capacity SetLag", do: func(s sides) { s.c.SetLag(fake.Lag{Reads: 3}) }},
		{name: "Deploy", do: func(s sides) { s.c.Deploy(ctx, "v2") }, wakes: 1},
		{name: "Deploy what runs", setup: func(s sides) { s.c.SetRevision("v2") }, do: func(s sides) { s.c.Deploy(ctx, "v2") }},
		{name: "Revision read", do: func(s sides) { s.c.Revision(ctx, "v1") }},
		{name: "SetRevision", do: func(s sides) { s.c.SetRevision("v3") }, wakes: 1},
		{name: "StallDeploys", do: func(s sides) { s.c.StallDeploys(true) }, wakes: 1},

		{name: "Deployment Deploy", do: func(s sides) { s.d.Deploy(ctx, "v2") }, wakes: 1},
		{name: "Deployment Deploy what runs", do: func(s sides) { s.d.Deploy(ctx, "v1") }},
		{name: "Deployment Revision read", do: func(s sides) { s.d.Revision(ctx, "v1") }},
		{name: "Deployment SetRevision", do: func(s sides) { s.d.SetRevision("v2") }, wakes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0)
			s := sides{clock: clock, router: fake.NewRouter(clock), c: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100}), d: fake.NewFixedSide(clock, 4, "v1")}
			counters := []*counter{subscribe(t, s.router), subscribe(t, s.c), subscribe(t, s.d)}
			if tc.setup != nil {
				tc.setup(s)
			}
			for _, c := range counters {
				c.reset()
			}
			tc.do(s)
			var got int64
			for _, c := range counters {
				got += c.count()
			}
			if got != tc.wakes {
				t.Fatalf("%d wakes, want %d", got, tc.wakes)
			}
		})
	}
}

// A Lag with a Duration ends at an instant of the clock: the wake fires
// when the clock reaches it, and a read then sees the change.
func TestNotifyAtTheEndOfADurationLag(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0})
	router.SetLag(fake.Lag{Duration: 300 * time.Millisecond})
	b.SetLag(fake.Lag{Duration: 2 * time.Second})
	rw, bw := subscribe(t, router), subscribe(t, b)

	router.SetWeights(ctx, rollout.Weights{A: 50, B: 50})
	b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50})
	for _, step := range []struct {
		at             time.Duration
		routerWakes    int64
		accepted       bool
		capacityWakes  int64
		ready          int32
		pendingWakeups int
	}{
		{at: 0, routerWakes: 1, capacityWakes: 1, pendingWakeups: 2},
		{at: 299 * time.Millisecond, routerWakes: 1, capacityWakes: 1, pendingWakeups: 2},
		{at: 300 * time.Millisecond, routerWakes: 2, accepted: true, capacityWakes: 1, pendingWakeups: 1},
		{at: 1999 * time.Millisecond, routerWakes: 2, accepted: true, capacityWakes: 1, pendingWakeups: 1},
		{at: 2 * time.Second, routerWakes: 2, accepted: true, capacityWakes: 2, ready: 50},
	} {
		clock.Set(t0.Add(step.at))
		st, _ := router.Status()
		if got := rw.count(); got != step.routerWakes || st.Accepted != step.accepted {
			t.Errorf("+%s: router woke %d times, accepted %v; want %d, %v", step.at, got, st.Accepted, step.routerWakes, step.accepted)
		}
		if got, ready := bw.count(), b.Status().Ready; got != step.capacityWakes || ready != step.ready {
			t.Errorf("+%s: capacity woke %d times, ready %d; want %d, %d", step.at, got, ready, step.capacityWakes, step.ready)
		}
		if got := clock.Waiters(); got != step.pendingWakeups {
			t.Errorf("+%s: %d timers pending, want %d", step.at, got, step.pendingWakeups)
		}
	}
}

// A Lag counted in reads ends at a read, which sees the change: no wake.
func TestNoWakeForALagInReads(t *testing.T) {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	router.SetLag(fake.Lag{Reads: 2})
	w := subscribe(t, router)
	router.SetWeights(ctx, rollout.Weights{A: 50, B: 50})
	first, _ := router.Weights(ctx)
	second, _ := router.Weights(ctx)
	if w.count() != 1 || first.Accepted || !second.Accepted {
		t.Fatalf("woken %d times (want 1, the write), accepted at reads 1, 2: %v, %v (want false, true)", w.count(), first.Accepted, second.Accepted)
	}
}

// Without subscribers (or with notifications dropped) no timer is left on
// the clock: tests that count the clock's waiters are not disturbed.
func TestNoTimersWithoutListeners(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	router.SetLag(fake.Lag{Duration: time.Second})
	router.SetWeights(ctx, rollout.Weights{A: 50, B: 50})
	if n := clock.Waiters(); n != 0 {
		t.Fatalf("%d timers without subscribers", n)
	}
	// A subscriber that arrives during the lag is woken at its end.
	w := subscribe(t, router)
	if n := clock.Waiters(); n != 1 {
		t.Fatalf("%d timers once subscribed, want 1", n)
	}
	clock.Advance(time.Second)
	if w.count() != 1 {
		t.Fatalf("woken %d times at the end of the lag, want 1", w.count())
	}
}

func TestNotifySubscribersAndTheirEnd(t *testing.T) {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	first, second := &counter{}, &counter{}
	ctx1, cancel1 := context.WithCancel(ctx)
	if err := router.Notify(ctx1, first.wake); err != nil {
		t.Fatal(err)
	}
	if err := router.Notify(ctx, second.wake); err != nil {
		t.Fatal(err)
	}
	router.Overwrite(rollout.Weights{A: 90, B: 10})
	cancel1()
	router.Overwrite(rollout.Weights{A: 80, B: 20})
	if first.count() != 1 || second.count() != 2 {
		t.Fatalf("woken %d and %d times, want 1 (then its ctx ended) and 2", first.count(), second.count())
	}
	if err := router.Notify(ctx1, first.wake); err == nil {
		t.Fatal("Notify with an ended ctx: no error")
	}
}

func TestDropNotifications(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0})
	c.SetLag(fake.Lag{Duration: time.Second})
	w := subscribe(t, c)
	c.DropNotifications(true)
	c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100})
	if w.count() != 0 || clock.Waiters() != 0 {
		t.Fatalf("dropped: woken %d times, %d timers", w.count(), clock.Waiters())
	}
	clock.Advance(500 * time.Millisecond)
	c.DropNotifications(false) // the watch is back: one wake, and the lag's end is scheduled again
	if w.count() != 1 || clock.Waiters() != 1 {
		t.Fatalf("back: woken %d times, %d timers; want 1, 1", w.count(), clock.Waiters())
	}
	clock.Advance(500 * time.Millisecond)
	if w.count() != 2 || c.Status().Ready != 100 {
		t.Fatalf("at the end of the lag: woken %d times, ready %d; want 2, 100", w.count(), c.Status().Ready)
	}
}

// capacityView is what a Capacity reports, read without counting a read.
type capacityView struct {
	status   rollout.CapacityStatus
	revision rollout.RevisionStatus
}

func capacityViewOf(c *fake.Capacity) capacityView {
	return capacityView{c.Status(), c.RevisionStatus()}
}

type routerView struct {
	status rollout.RouteStatus
	err    string
}

func routerViewOf(r *fake.Router) routerView {
	st, err := r.Status()
	v := routerView{status: st}
	if err != nil {
		v.err = err.Error()
	}
	return v
}

// TestNotifyProperty: after any sequence of writes, test controls, reads
// and clock advances, what each fake reports is what its subscriber saw at
// its last wake or its last read: no change goes unnotified while
// notifications are delivered.
func TestNotifyProperty(t *testing.T) {
	ctx := context.Background()
	rapid.Check(t, func(t *rapid.T) {
		clock := fake.NewClock(t0)
		router := fake.NewRouter(clock)
		c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: rapid.Int32Range(1, 8).Draw(t, "replicas"), Percent: rapid.SampledFrom([]int32{0, 50, 100}).Draw(t, "percent")})
		c.SetRevision(rapid.SampledFrom([]string{"", "v1"}).Draw(t, "revision"))
		lag := func(label string) fake.Lag {
			return fake.Lag{
				Reads:    rapid.IntRange(0, 2).Draw(t, label+" reads"),
				Duration: time.Duration(rapid.IntRange(0, 3).Draw(t, label+" ms")) * 250 * time.Millisecond,
			}
		}
		router.SetLag(lag("router lag"))
		c.SetLag(lag("capacity lag"))
		c.SetPartial(rapid.Bool().Draw(t, "partial"))

		var knownR routerView
		var knownC capacityView
		sub, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := router.Notify(sub, func() { knownR = routerViewOf(router) }); err != nil {
			t.Fatal(err)
		}
		if err := c.Notify(sub, func() { knownC = capacityViewOf(c) }); err != nil {
			t.Fatal(err)
		}
		knownR, knownC = routerViewOf(router), capacityViewOf(c)
		dropped := false
		weights := []rollout.Weights{{A: 100}, {A: 90, B: 10}, {A: 50, B: 50}, {B: 100}}
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			op := rapid.IntRange(0, 19).Draw(t, "op")
			switch op {
			case 0, 1:
				router.SetWeights(ctx, rapid.SampledFrom(weights).Draw(t, "weights"))
			case 2:
				router.Overwrite(rollout.Weights{A: 100, B: 30})
			case 3:
				router.Delete()
			case 4:
				router.Create(rapid.SampledFrom(weights).Draw(t, "create"))
			case 5:
				router.Reject(rapid.SampledFrom([]string{"", "", "refused"}).Draw(t, "reject"))
			case 6:
				router.Weights(ctx)
				knownR = routerViewOf(router) // the reader saw it
			case 7, 8:
				c.SetCapacity(ctx, rollout.CapacityRequest{Percent: rapid.SampledFrom([]int32{0, 30, 50, 100}).Draw(t, "capacity")})
			case 9:
				c.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true})
			case 10:
				c.Capacity(ctx)
				knownC = capacityViewOf(c)
			case 11:
				c.Crash(rapid.Int32Range(0, 3).Draw(t, "crash"))
			case 12:
				c.CrashLoop(rapid.Bool().Draw(t, "loop"))
			case 13:
				c.SetHealth(rapid.SampledFrom([]strategy.Health{strategy.HealthHealthy, strategy.HealthUnhealthy}).Draw(t, "health"), "")
			case 14:
				c.Deploy(ctx, rapid.SampledFrom([]string{"v1", "v2"}).Draw(t, "deploy"))
			case 15:
				c.StallDeploys(rapid.Bool().Draw(t, "stall"))
			case 16:
				c.SetPartial(rapid.Bool().Draw(t, "set partial"))
			case 17, 18:
				clock.Advance(time.Duration(rapid.IntRange(1, 1200).Draw(t, "advance ms")) * time.Millisecond)
			case 19:
				dropped = rapid.Bool().Draw(t, "drop")
				router.DropNotifications(dropped)
				c.DropNotifications(dropped)
			}
			if dropped {
				continue
			}
			if got := routerViewOf(router); got != knownR {
				t.Fatalf("step %d (op %d) at +%s: the router reports %+v, its subscriber last saw %+v",
					i, op, clock.Now().Sub(t0), got, knownR)
			}
			if got := capacityViewOf(c); got != knownC {
				t.Fatalf("step %d (op %d) at +%s: the capacity reports %+v, its subscriber last saw %+v",
					i, op, clock.Now().Sub(t0), got, knownC)
			}
		}
	})
}
