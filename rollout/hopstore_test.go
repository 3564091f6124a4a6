package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// runToEnd runs g's Runner with store until the rollout ends, checking
// after every reconcile (check) and driving the fake clock.
func runToEnd(t *testing.T, g *rig, store rollout.Store, check func(rollout.Event)) strategy.State {
	t.Helper()
	g.runner.Store = store
	g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		g.traffic.Tick()
		if check != nil {
			check(e)
		}
	})
	done := make(chan strategy.State, 1)
	go func() {
		s, err := g.runner.Run(context.Background(), strategy.NewState("v1", "v2"), nil)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- s
	}()
	var end strategy.State
	waitFor(t, g.clock, func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	})
	return end
}

// TestRunWritesEachWeightHopWithItsState: with a HopStore on the Router's
// route, Run writes each weight hop and its state in one update, so the
// upgrade makes one write per hop: the weight hops carry the state, and
// only the hops that move no weight save it alone. The same upgrade with a
// separate Store writes the state once more per weight hop.
func TestRunWritesEachWeightHopWithItsState(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 30}
	lag := fake.Lag{Reads: 1, Duration: 2 * time.Second}

	// The same upgrade with a Store of its own: two writes per weight hop.
	base := newRig(strat, lag)
	apart := &fake.Store{}
	if end := runToEnd(t, base, apart, nil); end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("with a separate store: ended %s: %s", end.Phase, end.Message)
	}
	baseWrites := base.router.Writes() + base.a.Writes() + base.b.Writes() + apart.Saves()

	g := newRig(strat, lag)
	store := g.router.Store()
	var (
		mu         sync.Mutex
		weightHops int
		problems   []string
	)
	end := runToEnd(t, g, store, func(e rollout.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range e.Applied {
			if h.Kind == rollout.HopWeight {
				weightHops++
			}
		}
		// Whatever the reconcile did, the route and the state on it agree:
		// the weights on the route are those the stored state asked for.
		saved, err := store.Load(context.Background())
		if errors.Is(err, rollout.ErrNotFound) && weightHops == 0 {
			return // the first state is saved after the first reconcile
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: load: %v", e.Time.Sub(t0), err))
			return
		}
		spec, _ := g.router.Status()
		if got := spec.Weights.Of(saved.StableSide.Other()); saved.Phase != strategy.PhaseSucceeded && got != saved.Desired.Weight {
			problems = append(problems, fmt.Sprintf("%s: the route holds canary weight %d, the state on it asked for %d", e.Time.Sub(t0), got, saved.Desired.Weight))
		}
	})
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" {
		t.Fatalf("ended %s (stable %s): %s", end.Phase, end.StableRevision, end.Message)
	}
	for _, p := range problems {
		t.Error(p)
	}
	stateAlone := store.Saves() - weightHops // Saves counts the writes that carried the state
	routeWrites := g.router.Writes()
	capWrites := g.a.Writes() + g.b.Writes()
	writes := routeWrites + capWrites + stateAlone
	t.Logf("%d weight hops; writes: %d of the route (each with the state), %d of capacity, %d of the state alone: %d in all, against %d with a separate store",
		weightHops, routeWrites, capWrites, stateAlone, writes, baseWrites)
	if weightHops != 10 {
		t.Errorf("%d weight hops, want 10", weightHops)
	}
	if routeWrites != weightHops {
		t.Errorf("%d route writes for %d weight hops, want one each", routeWrites, weightHops)
	}
	if want := baseWrites - weightHops; writes != want {
		t.Errorf("%d writes, want %d: the separate store's %d less one per weight hop", writes, want, baseWrites)
	}
	if stateAlone > capWrites+2 {
		t.Errorf("%d saves of the state alone for %d capacity writes: more than one per hop (and the start and the end)", stateAlone, capWrites)
	}
}

// TestRunHopStoreRefusedWritesNeither: a weight hop whose write the route
// refuses (a conflict, a failure) leaves neither the weights nor the state
// on the route, and Run asks for it again until it lands.
func TestRunHopStoreRefusedWritesNeither(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50}
	g := newRig(strat, fake.Lag{Reads: 1})
	store := g.router.Store()
	var (
		mu       sync.Mutex
		refused  int
		problems []string
	)
	end := runToEnd(t, g, store, func(e rollout.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range e.Applied {
			if h.Kind == rollout.HopCapacity && h.Role == "canary" && refused == 0 {
				// The next two writes of the route lose a race: the save
				// of this hop's state (retried by Run), then the first
				// weight hop.
				g.router.Conflicts(2)
			}
		}
		var ae *rollout.AdapterError
		if errors.As(e.Err, &ae) && ae.Adapter == "router" {
			refused++
			saved, err := store.Load(context.Background())
			spec, _ := g.router.Status()
			if spec.Weights.B != 0 || err == nil && saved.Desired.Weight != 0 || err != nil && !errors.Is(err, rollout.ErrNotFound) {
				problems = append(problems, fmt.Sprintf("after the refused hop: state weight %d (%v), route %+v: want neither written", saved.Desired.Weight, err, spec.Weights))
			}
		}
	})
	for _, p := range problems {
		t.Error(p)
	}
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	if refused != 1 {
		t.Errorf("%d refused route writes, want 1", refused)
	}
}

// TestRunHopStoreOfAnotherRouter: a HopStore that does not write through
// the Runner's Router (here, a wrapper of it) is used as a plain Store: the
// weights go through the Router, the state is saved apart.
func TestRunHopStoreOfAnotherRouter(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50}
	g := newRig(strat, fake.Lag{})
	store := g.router.Store()
	g.runner.Router = routerOnly{g.router}
	if store.Moves(g.runner.Router) {
		t.Fatal("Moves reports a wrapper of the Router as the Router")
	}
	end := runToEnd(t, g, store, nil)
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	if w, s := g.router.Writes(), store.Saves(); w != 2 || s <= w {
		t.Errorf("%d route writes and %d saves: want the 2 weight hops through the Router and the state saved apart after each", w, s)
	}
}

// routerOnly hides every method of a Router but the TrafficRouter's.
type routerOnly struct{ r *fake.Router }

func (o routerOnly) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return o.r.Weights(ctx)
}

func (o routerOnly) SetWeights(ctx context.Context, w rollout.Weights) error {
	return o.r.SetWeights(ctx, w)
}
