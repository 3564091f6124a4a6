package rollout_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// runAsync starts Run in a goroutine; the channel gets its result.
func runAsync(ctx context.Context, r *rollout.Runner, initial strategy.State, commands <-chan rollout.Command) <-chan runResult {
	done := make(chan runResult, 1)
	go func() {
		s, err := r.Run(ctx, initial, commands)
		done <- runResult{s, err}
	}()
	return done
}

// finishRun drives the fake clock until Run has returned.
func finishRun(t *testing.T, clock *fake.Clock, done <-chan runResult) runResult {
	t.Helper()
	var res runResult
	waitFor(t, clock, func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	return res
}

// subscriptions counts the live subscriptions of a rig's fakes.
func (g *rig) subscriptions() map[string]int {
	return map[string]int{"router": g.router.Subscriptions(), "A": g.a.Subscriptions(), "B": g.b.Subscriptions()}
}

// TestRunEndsItsSubscriptions: once Run has returned, whether the rollout
// finished or ctx ended, none of the subscriptions it made is live, even
// though the caller's ctx lives on; a program that calls Run again and
// again accumulates none.
func TestRunEndsItsSubscriptions(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60)}}
	g := newRig(strat, fake.Lag{Duration: 300 * time.Millisecond})
	store := &fake.Store{}
	g.runner.Store = store
	none := map[string]int{"router": 0, "A": 0, "B": 0}
	live := ctx(t) // the caller's context, never cancelled during the test

	// Three Runs cancelled while paused, one after the other.
	for i := range 3 {
		runCtx, cancel := context.WithCancel(live)
		done := runAsync(runCtx, g.runner, strategy.NewState("v1", "v2"), nil)
		waitFor(t, g.clock, func() bool {
			s, err := store.Load(live)
			got := g.subscriptions()
			return err == nil && s.Phase == strategy.PhasePaused && got["router"] == 1 && got["A"] == 1 && got["B"] == 1
		})
		cancel()
		if res := <-done; !errors.Is(res.err, context.Canceled) {
			t.Fatalf("run %d: Run: %v", i, res.err)
		}
		if diff := cmp.Diff(none, g.subscriptions()); diff != "" {
			t.Fatalf("run %d: subscriptions after Run returned (-want +got):\n%s", i, diff)
		}
	}
	// A Run that finishes the rollout, with the caller's ctx still live.
	cmds := make(chan rollout.Command, 1)
	cmds <- strategy.State.Resume
	res := finishRun(t, g.clock, runAsync(live, g.runner, strategy.NewState("v1", "v2"), cmds))
	if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("Run ended %s: %v", res.s.Phase, res.err)
	}
	if diff := cmp.Diff(none, g.subscriptions()); diff != "" {
		t.Fatalf("subscriptions after Run finished the rollout (-want +got):\n%s", diff)
	}
}

// ctx is a context that ends with the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

// stuckSide blocks every Capacity read of its side once armed, until the
// read's ctx ends, and returns ctx's error, as a client does whose request
// is cancelled.
type stuckSide struct {
	c       *fake.Capacity
	armed   atomic.Bool
	entered chan struct{}
}

func (s *stuckSide) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	if s.armed.Load() {
		s.entered <- struct{}{}
		<-ctx.Done()
		return rollout.CapacityStatus{}, ctx.Err()
	}
	return s.c.Capacity(ctx)
}

func (s *stuckSide) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	return s.c.SetCapacity(ctx, r)
}

func (s *stuckSide) Notify(ctx context.Context, wake func()) error { return s.c.Notify(ctx, wake) }

// TestRunCancelledDuringAReconcile: ctx ends while a reconcile reads an
// adapter, which fails with ctx's error. That failure is no change of the
// state to save: Run returns ctx's error, not ErrUnsaved, and the state it
// had (the one saved).
func TestRunCancelledDuringAReconcile(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60)}}
	g := newRig(strat, fake.Lag{})
	store := &fake.Store{}
	g.runner.Store = store
	side := &stuckSide{c: g.b, entered: make(chan struct{}, 1)}
	g.runner.B = side
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(runCtx, g.runner, strategy.NewState("v1", "v2"), nil)
	waitFor(t, g.clock, func() bool {
		s, err := store.Load(context.Background())
		return err == nil && s.Phase == strategy.PhasePaused
	})
	paused, _ := store.Load(context.Background())
	side.armed.Store(true)
	// Wake Run: the fakes' write below reaches it through side A's
	// notifications, and its reconcile blocks in side B's read.
	g.a.SetHealth(strategy.HealthHealthy, "poke")
	select {
	case <-side.entered:
	case res := <-done:
		t.Fatalf("Run returned %v before the read", res.err)
	case <-time.After(20 * time.Second):
		t.Fatal("no reconcile reads side B")
	}
	cancel()
	res := <-done
	if !errors.Is(res.err, context.Canceled) || errors.Is(res.err, rollout.ErrUnsaved) {
		t.Fatalf("Run: %v, want context.Canceled and nothing unsaved", res.err)
	}
	if res.s.Observed.Error != "" || res.s.Phase != strategy.PhasePaused {
		t.Errorf("Run returned %s with the observation error %q, want the paused state it had", res.s.Phase, res.s.Observed.Error)
	}
	saved, _ := store.Load(context.Background())
	if strategy.Changed(&paused, &saved) {
		t.Errorf("the store changed after the cancel")
	}
}

// TestRunOnAFinishedState: a state already finished in the store is
// returned at once without a commands channel; with one, Run waits for a
// command, runs the rollout it starts to its end, and returns; a closed
// channel ends the wait.
func TestRunOnAFinishedState(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50}
	g := newRig(strat, fake.Lag{})
	store := &fake.Store{}
	g.runner.Store = store
	first := finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("v1", "v2"), nil))
	if first.err != nil || first.s.Phase != strategy.PhaseSucceeded || first.s.StableRevision != "v2" {
		t.Fatalf("first rollout: %s stable %s: %v", first.s.Phase, first.s.StableRevision, first.err)
	}

	// No channel: at once.
	res := finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("x", "y"), nil))
	if res.err != nil || res.s.Phase != strategy.PhaseSucceeded || res.s.StableRevision != "v2" {
		t.Fatalf("no channel: %s stable %s: %v", res.s.Phase, res.s.StableRevision, res.err)
	}

	// A closed channel: the wait ends, nothing changes.
	closed := make(chan rollout.Command)
	close(closed)
	res = finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("x", "y"), closed))
	if res.err != nil || res.s.StableRevision != "v2" {
		t.Fatalf("closed channel: %s stable %s: %v", res.s.Phase, res.s.StableRevision, res.err)
	}

	// A channel: Run waits for the command that starts the next rollout,
	// then runs it.
	cmds := make(chan rollout.Command, 1)
	cmds <- func(s strategy.State, now time.Time) strategy.State { return s.Retarget("v3", now) }
	res = finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("x", "y"), cmds))
	if res.err != nil || res.s.Phase != strategy.PhaseSucceeded || res.s.StableRevision != "v3" || res.s.StableSide != strategy.SideA {
		t.Fatalf("after Retarget v3: %s stable %s on %s: %v", res.s.Phase, res.s.StableRevision, res.s.StableSide, res.err)
	}
	saved, _ := store.Load(context.Background())
	if saved.StableRevision != "v3" {
		t.Errorf("saved stable %s, want v3", saved.StableRevision)
	}
}
