package rollout_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// controlStore is a fake.Store that also keeps a strategy.Control, as the
// gateway package's AnnotationStore keeps one in a route annotation.
type controlStore struct {
	fake.Store
	mu  sync.Mutex
	c   strategy.Control
	err error
}

var _ rollout.ControlStore = (*controlStore)(nil)

func (s *controlStore) LoadControl(ctx context.Context) (strategy.Control, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c, s.err
}

func (s *controlStore) set(f func(*strategy.Control)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.c)
}

func (s *controlStore) failWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *controlStore) state(t *testing.T) strategy.State {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil && !errors.Is(err, rollout.ErrNotFound) {
		t.Fatal(err)
	}
	return st
}

// TestRunAppliesStoredControl: Run applies the Control of a ControlStore
// as an operator applies spec.control: paused holds the rollout (also a
// pause step taken over), promote passes a pause step once per token, abort
// walks back, retry starts again, a token written back acts once only, and
// a failing read of the control is retried without stopping the rollout.
func TestRunAppliesStoredControl(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60), strategy.PauseUntilResumed()}}
	g := newRig(strat, fake.Lag{Duration: 300 * time.Millisecond})
	store := &controlStore{}
	g.runner.Store = store
	live := ctx(t)
	store.set(func(c *strategy.Control) { c.Paused = true })
	done := runAsync(live, g.runner, strategy.NewState("v1", "v2"), nil)

	// Paused from the first step: no traffic reaches the canary.
	waitFor(t, g.clock, func() bool {
		s := store.state(t)
		return s.AwaitingResume && s.PauseReason == strategy.ReasonControlPause
	})
	g.clock.Advance(time.Minute)
	if s := store.state(t); s.Desired.Weight != 0 || !s.AwaitingResume {
		t.Fatalf("held by control.paused: weight %d, paused %v (%s)", s.Desired.Weight, s.AwaitingResume, s.PauseReason)
	}

	// Un-paused: it walks to the pause step; promote passes it, once.
	store.set(func(c *strategy.Control) { c.Paused = false })
	waitFor(t, g.clock, func() bool {
		s := store.state(t)
		return s.Phase == strategy.PhasePaused && s.PauseReason == strategy.ReasonPauseStep && s.StepIndex == 1
	})
	store.failWith(errors.New("route unreachable"))
	g.clock.Advance(10 * time.Second) // reconciles go on while the control cannot be read
	store.failWith(nil)
	store.set(func(c *strategy.Control) { c.Promote = "p1" })
	waitFor(t, g.clock, func() bool {
		s := store.state(t)
		return s.StepIndex == 3 && s.Phase == strategy.PhasePaused && s.Handled.Promote == "p1"
	})
	g.clock.Advance(time.Minute)
	if s := store.state(t); s.StepIndex != 3 {
		t.Fatalf("the same promote token acted again: step %d", s.StepIndex)
	}

	// Abort walks back; the rollout ends Aborted and Run returns.
	store.set(func(c *strategy.Control) { c.Abort = "a1" })
	res := finishRun(t, g.clock, done)
	if res.err != nil || res.s.Phase != strategy.PhaseAborted || res.s.Handled.Abort != "a1" {
		t.Fatalf("Run after abort: phase %s, handled %+v, err %v", res.s.Phase, res.s.Handled, res.err)
	}
	if w := g.router.Applied(); w.A != 100 || w.B != 0 {
		t.Fatalf("route weights after abort: %+v, want all on A", w)
	}

	// A Run started on the aborted state with a retry token written: the
	// rollout starts again, and a promote and a promote-full finish it.
	store.set(func(c *strategy.Control) { c.Retry = "r1" })
	done = runAsync(live, g.runner, strategy.State{}, nil)
	waitFor(t, g.clock, func() bool {
		s := store.state(t)
		return s.Handled.Retry == "r1" && s.Phase == strategy.PhasePaused && s.StepIndex == 1
	})
	store.set(func(c *strategy.Control) { c.Promote = "p2" })
	waitFor(t, g.clock, func() bool {
		s := store.state(t)
		return s.Phase == strategy.PhasePaused && s.StepIndex == 3
	})
	store.set(func(c *strategy.Control) { c.PromoteFull = "f1" })
	res = finishRun(t, g.clock, done)
	if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("Run after retry: phase %s (%s), err %v", res.s.Phase, res.s.Message, res.err)
	}
}
