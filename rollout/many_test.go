package rollout_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// one rollout of many: its own adapters, clock and state, as a controller
// holds one status per object.
type oneOfMany struct {
	clock  *fake.Clock
	runner *rollout.Runner
	state  strategy.State
}

type manyResult struct {
	reconciles      int64
	elapsed         time.Duration
	liveBytesPer    float64 // heap held per rollout (state, runner and fakes), at its largest of start and end
	allocBytesPer   float64 // bytes allocated per rollout from start to end
	succeeded, left int
}

// runMany drives n rollouts to completion, each in its own goroutine.
func runMany(tb testing.TB, n int) manyResult {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
	var before, held, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	all := make([]*oneOfMany, n)
	for i := range all {
		clock := fake.NewClock(t0)
		router := fake.NewRouter(clock)
		a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
		router.KeepHistory(false)
		a.KeepHistory(false)
		b.KeepHistory(false)
		router.SetLag(fake.Lag{Reads: 1})
		b.SetLag(fake.Lag{Reads: 2})
		all[i] = &oneOfMany{clock: clock, state: strategy.NewState("v1", "v2"),
			runner: &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, Clock: clock}}
	}
	runtime.GC()
	runtime.ReadMemStats(&held)
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		reconciles int64
		succeeded  int
	)
	ctx := context.Background()
	start := time.Now()
	for _, r := range all {
		wg.Add(1)
		go func(r *oneOfMany) {
			defer wg.Done()
			var count int64
			for i := 0; i < 1000 && !r.state.Phase.Terminal(); i++ {
				next, requeue, err := r.runner.Reconcile(ctx, r.state)
				count++
				if err != nil {
					tb.Errorf("reconcile: %v", err)
					return
				}
				r.state = next
				r.clock.Advance(requeue)
			}
			mu.Lock()
			reconciles += count
			if r.state.Phase == strategy.PhaseSucceeded {
				succeeded++
			}
			mu.Unlock()
		}(r)
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	var done runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&done)
	runtime.KeepAlive(all)
	return manyResult{
		reconciles:    reconciles,
		elapsed:       elapsed,
		liveBytesPer:  float64(max(held.HeapAlloc, done.HeapAlloc)-before.HeapAlloc) / float64(n),
		allocBytesPer: float64(after.TotalAlloc-held.TotalAlloc) / float64(n),
		succeeded:     succeeded,
		left:          n - succeeded,
	}
}

// TestTenThousandRollouts drives 10,000 concurrent rollouts on fakes in one
// process to completion.
func TestTenThousandRollouts(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	r := runMany(t, n)
	if r.left != 0 {
		t.Fatalf("%d of %d rollouts did not succeed", r.left, n)
	}
	t.Logf("%d rollouts: %d reconciles in %s = %.0f reconciles/s; %.0f B held per rollout, %.0f B allocated per rollout",
		n, r.reconciles, r.elapsed.Round(time.Millisecond), float64(r.reconciles)/r.elapsed.Seconds(), r.liveBytesPer, r.allocBytesPer)
}

func BenchmarkTenThousandRollouts(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r := runMany(b, 10000)
		if r.left != 0 {
			b.Fatalf("%d rollouts did not succeed", r.left)
		}
		b.ReportMetric(float64(r.reconciles)/r.elapsed.Seconds(), "reconciles/s")
		b.ReportMetric(r.liveBytesPer, "B-held/rollout")
		b.ReportMetric(r.allocBytesPer, "B-alloc/rollout")
	}
}

func BenchmarkReconcile(b *testing.B) {
	g := newRig(strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}, fake.Lag{})
	g.router.KeepHistory(false)
	g.a.KeepHistory(false)
	g.b.KeepHistory(false)
	ctx := context.Background()
	// A mid-rollout state waiting on its interval: a full observe + Step.
	s := strategy.NewState("v1", "v2")
	for i := 0; i < 3; i++ {
		s, _, _ = g.runner.Reconcile(ctx, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := g.runner.Reconcile(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}
