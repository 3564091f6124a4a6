package watchloop_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/internal/watchloop"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func named(ns, name, rv string, replicas int32) *appsv1.Deployment {
	d := deployment(rv, replicas, replicas, nil)
	d.Name, d.Namespace = name, ns
	return d
}

// TestIgnoresOtherObjects: a server that ignores the field selector sends
// the events of every object in the collection. Only the watched one
// (name and namespace) counts: thousands of events of others, each
// different from the last, wake nobody and do not replace the object
// remembered, so its next real change wakes once.
func TestIgnoresOtherObjects(t *testing.T) {
	fw := watch.NewFake() // unbuffered: each send returns once the loop took it
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }
	var wakes atomic.Int64
	woke := make(chan struct{}, 1)
	wake := func() {
		wakes.Add(1)
		select {
		case woke <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats watchloop.Stats
	opts := watchloop.Options{Namespace: "prod", Changed: watchloop.SpecOrStatusChanged}
	if err := watchloop.Start(ctx, "web", start, wake, &stats, opts); err != nil {
		t.Fatal(err)
	}
	fw.Add(named("prod", "web", "1", 3))
	<-woke
	const others = 3000
	for i := range others {
		switch i % 3 {
		case 0:
			fw.Modify(named("prod", "other", "2", int32(i))) // another name
		case 1:
			fw.Modify(named("staging", "web", "2", int32(i))) // the same name elsewhere
		default:
			fw.Delete(named("prod", "gone", "2", int32(i)))
		}
		fw.Modify(named("prod", "web", "2", 3)) // the object, unchanged
	}
	fw.Modify(named("prod", "web", "3", 4)) // its real change
	<-woke
	if got := wakes.Load(); got != 2 {
		t.Fatalf("%d wakes for the first event, %d events of other objects interleaved with unchanged ones, and one change; want 2", got, others)
	}
}

// shortServer is a ListerWatcher whose every watch delivers one event and
// ends at once, as a misbehaving server or proxy does.
type shortServer struct {
	clk *fake.Clock
	// spin is cancelled at the limit-th request: a loop that never waits
	// on the clock gets that far in no simulated time.
	spin  context.CancelFunc
	limit int
	mu    sync.Mutex
	at    []time.Time // the instants of the watch requests
}

func (s *shortServer) watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.at = append(s.at, s.clk.Now())
	n := len(s.at)
	s.mu.Unlock()
	if n >= s.limit {
		s.spin()
	}
	w := watch.NewFakeWithChanSize(1, false)
	w.Modify(named("", "web", "1", int32(n)))
	w.Stop()
	return w, nil
}

func (s *shortServer) requests() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// TestShortWatchesBackOff: every watch delivers an event and ends at once.
// Over 10 minutes of simulated time the loop makes about 28 watch
// requests, the backoff doubling from 100 ms to 30 s, not one request
// after another with no wait at all.
func TestShortWatchesBackOff(t *testing.T) {
	clk := fake.NewClock(t0)
	spinning, spin := context.WithCancel(context.Background())
	defer spin()
	const span, limit = 10 * time.Minute, 1000
	srv := &shortServer{clk: clk, spin: spin, limit: limit}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats watchloop.Stats
	ended := make(chan struct{})
	opts := watchloop.Options{Clock: clk, Ended: func() { close(ended) }}
	if err := watchloop.Start(ctx, "web", srv.watch, func() {}, &stats, opts); err != nil {
		t.Fatal(err)
	}
	for clk.Now().Sub(t0) < span {
		// Wait until the loop sleeps on the clock (or spins without it).
		if err := clk.BlockUntil(spinning, 1); err != nil {
			t.Fatalf("%d watch requests at %v of simulated time, without one wait on the clock", stats.Watches.Load(), clk.Now().Sub(t0))
		}
		at, _ := clk.NextWake()
		clk.Set(at)
	}
	got := srv.requests()
	var gaps []time.Duration
	for i := 1; i < len(got); i++ {
		gaps = append(gaps, got[i].Sub(got[i-1]))
	}
	t.Logf("%d watch requests in %v; gaps %v", len(got), span, gaps)
	if len(got) > 30 {
		t.Errorf("%d watch requests in %v, want at most 30", len(got), span)
	}
	if len(gaps) < 10 || gaps[0] != 100*time.Millisecond || gaps[len(gaps)-1] != 30*time.Second {
		t.Errorf("gaps %v, want from 100ms doubling up to 30s", gaps)
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the loop did not end with its ctx")
	}
	if n := stats.Running.Load(); n != 0 {
		t.Fatalf("%d loops running after Ended", n)
	}
}

// TestLongWatchResetsTheBackoff: after short watches have grown the
// backoff, one that lives MinLifetime (here, until the clock has moved a
// minute) is healthy: the next watch starts at once, and the backoff after
// the next short one starts again from MinBackoff.
func TestLongWatchResetsTheBackoff(t *testing.T) {
	clk := fake.NewClock(t0)
	spinning, spin := context.WithCancel(context.Background())
	defer spin()
	var mu sync.Mutex
	var at []time.Time
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		mu.Lock()
		at = append(at, clk.Now())
		n := len(at)
		mu.Unlock()
		if n > 100 {
			spin() // watches without a wait on the clock
		}
		w := watch.NewFakeWithChanSize(1, false)
		w.Modify(named("", "web", "1", int32(n)))
		if n == 4 {
			clk.AfterFunc(time.Minute, w.Stop) // the long one
		} else {
			w.Stop()
		}
		return w, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats watchloop.Stats
	if err := watchloop.Start(ctx, "web", start, func() {}, &stats, watchloop.Options{Clock: clk}); err != nil {
		t.Fatal(err)
	}
	for stats.Watches.Load() < 7 {
		// The loop waits on the clock: in a backoff, or in the long
		// watch (whose end is a timer).
		if err := clk.BlockUntil(spinning, 1); err != nil {
			t.Fatalf("%d watch requests without a wait on the clock", stats.Watches.Load())
		}
		next, _ := clk.NextWake()
		clk.Set(next)
	}
	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, time.Minute, 100 * time.Millisecond}
	if len(gaps) < len(want) {
		t.Fatalf("gaps %v", gaps)
	}
	for i, w := range want {
		if gaps[i] != w {
			t.Fatalf("gaps %v, want %v first: short watches back off, the long one is followed at once", gaps, want)
		}
	}
}
