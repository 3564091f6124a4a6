package rollout_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func TestReadOnce(t *testing.T) {
	var n atomic.Int32
	read := func(context.Context) (int32, error) { return n.Add(1), nil }
	fail := func(context.Context) (int32, error) { n.Add(1); return 0, errors.New("boom") }
	ctx := context.Background()
	if a, _ := rollout.ReadOnce(ctx, "k", read); a != 1 {
		t.Fatalf("without a scope: %d", a)
	}
	if a, _ := rollout.ReadOnce(ctx, "k", read); a != 2 {
		t.Fatalf("without a scope, every call reads: %d", a)
	}
	scope := rollout.WithReads(ctx)
	a, _ := rollout.ReadOnce(scope, "k", read)
	b, _ := rollout.ReadOnce(scope, "k", read)
	c, _ := rollout.ReadOnce(scope, "other", read)
	if a != 3 || b != 3 || c != 4 {
		t.Fatalf("in a scope: %d %d %d, want 3 3 4", a, b, c)
	}
	if _, err := rollout.ReadOnce(scope, "bad", fail); err == nil {
		t.Fatal("the error is lost")
	}
	if _, err := rollout.ReadOnce(scope, "bad", fail); err == nil || n.Load() != 6 {
		t.Fatalf("an error is kept: %v, %d reads", err, n.Load())
	}
	if s, err := rollout.ReadOnce(scope, "k", func(context.Context) (string, error) { return "x", nil }); err != nil || s != "x" {
		t.Fatalf("another type under a key: %q %v", s, err)
	}
	if a, _ := rollout.ReadOnce(rollout.WithReads(ctx), "k", read); a != 7 {
		t.Fatalf("a new scope reads again: %d", a)
	}
}

// sharedSide is a capacity setter and a revision reader of one workload,
// reading it through ReadOnce, as serve/replicas and serve/ray do.
type sharedSide struct {
	c     *fake.Capacity
	reads atomic.Int32
}

func (s *sharedSide) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	return s.c.SetCapacity(ctx, r)
}

func (s *sharedSide) Deploy(ctx context.Context, rev string) error { return s.c.Deploy(ctx, rev) }

func (s *sharedSide) read(ctx context.Context) (rollout.CapacityStatus, error) {
	s.reads.Add(1)
	return s.c.Capacity(ctx)
}

func (s *sharedSide) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	return rollout.ReadOnce(ctx, s, s.read)
}

func (s *sharedSide) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	if _, err := rollout.ReadOnce(ctx, s, s.read); err != nil {
		return rollout.RevisionStatus{}, err
	}
	return s.c.Revision(ctx, expect)
}

// TestReconcileReadsEachObjectOnce: a reconcile reads a side whose capacity
// setter and revision reader share one object once.
func TestReconcileReadsEachObjectOnce(t *testing.T) {
	clock := fake.NewClock(t0)
	a := &sharedSide{c: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100})}
	b := &sharedSide{c: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0})}
	a.c.SetRevision("v1")
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 50},
		Router:   fake.NewRouter(clock), A: a, B: b, RevisionA: a, RevisionB: b, Clock: clock,
	}
	s := strategy.NewState("v1", "v2")
	for i := 1; i <= 3; i++ {
		next, _, err := r.Reconcile(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		s = next
		if ra, rb := a.reads.Load(), b.reads.Load(); ra != int32(i) || rb != int32(i) {
			t.Fatalf("after %d reconciles: %d and %d reads of the sides, want %d each", i, ra, rb, i)
		}
	}
}
