package rollout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// extrasCanary has a header route before any weight, a mirror, and sticky
// sessions.
var extrasCanary = strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
	strategy.SetHeaderRoute(5, strategy.HeaderMatch{Name: "x-beta", Value: "1"}),
	strategy.SetWeight(20),
	strategy.SetMirror(20),
	strategy.SetWeight(50),
	strategy.SetMirror(0),
}, Options: strategy.Options{SessionAffinity: &strategy.SessionAffinity{CookieName: "s"}}}

// TestRunnerWritesExtrasWithTheWeight: with extras, every route write is one
// SetRoutes carrying the weights and the state's extras pointed at the
// canary side; the extras the router reports reach the observation; the
// plan's hops are the writes, and nothing is left at the end.
func TestRunnerWritesExtrasWithTheWeight(t *testing.T) {
	plan, err := strategy.Plan(extrasCanary, strategy.PlanOptions{Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(extrasCanary, fake.Lag{Reads: 1, Duration: time.Second})
	g.router.KeepHistory(true)
	end, _ := g.run(t, strategy.NewState("v1", "v2"), 10000)
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", end.Phase, end.Message)
	}
	var writes []string
	for _, c := range g.router.History() {
		switch c.Op {
		case "SetWeights":
			t.Errorf("SetWeights while the strategy has extras: %s", c.Arg)
		case "SetRoutes":
			if c.Err != nil {
				continue
			}
			if c.Routes.Canary != strategy.SideB {
				t.Errorf("extras pointed at side %s, the canary is B", c.Routes.Canary)
			}
			writes = append(writes, c.Routes.Extras.String())
		}
	}
	var planned []string
	for _, e := range plan.Entries {
		if strings.HasPrefix(e.What, "weight ") || e.What == e.Extras.String() {
			planned = append(planned, e.Extras.String())
		}
	}
	if diff := cmp.Diff(planned, writes); diff != "" {
		t.Errorf("route writes (extras of each) differ from the plan (-plan +writes):\n%s", diff)
	}
	if got := g.router.AppliedRoutes().Extras; !got.IsZero() {
		t.Errorf("extras left on the route: %s", got)
	}
	if st := g.traffic.Stats(); st.Overloaded != 0 || st.Dropped != 0 {
		t.Errorf("traffic: %+v", st)
	}
}

// TestRunnerRepairsDroppedExtras: extras another writer drops (the route
// re-applied from git) are written again.
func TestRunnerRepairsDroppedExtras(t *testing.T) {
	strat := strategy.Canary{Options: strategy.Options{Capacity: strategy.CapacityFixed}, Steps: []strategy.CanaryStep{
		strategy.SetWeight(10),
		strategy.SetHeaderRoute(5, strategy.HeaderMatch{Name: "x-beta", Value: "1"}),
		strategy.PauseUntilResumed(),
	}}
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	runner := &rollout.Runner{Strategy: strat, Router: router, Clock: clock}
	ctx := context.Background()
	s := strategy.NewState("v1", "v2")
	for i := 0; i < 50 && s.Phase != strategy.PhasePaused; i++ {
		next, requeue, err := runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		s = next
		clock.Advance(max(requeue, 100*time.Millisecond))
	}
	if s.Phase != strategy.PhasePaused || s.Observed.Extras.HeaderRoute == nil {
		t.Fatalf("not paused with the header route: %s %s", s.Phase, s.Observed.Extras)
	}
	router.DropExtras()
	for i := 0; i < 20; i++ {
		var requeue time.Duration
		s, requeue, _ = runner.Reconcile(ctx, s)
		clock.Advance(max(requeue, 100*time.Millisecond))
	}
	if got := router.AppliedRoutes().Extras; got.HeaderRoute == nil {
		t.Fatalf("dropped header route not written again: %s (%s)", got, s.Message)
	}
}

// TestRunnerExtrasUnsupported: a router whose data plane cannot program an
// extra refuses it before writing anything, permanently: the rollout
// aborts, naming the refusal, and walks back with the weights alone.
func TestRunnerExtrasUnsupported(t *testing.T) {
	g := newRig(extrasCanary, fake.Lag{})
	g.router.Unsupported(fake.ExtraHeaderRoute)
	end, _ := g.run(t, strategy.NewState("v1", "v2"), 1000)
	if end.Phase != strategy.PhaseAborted || end.Aborted == nil || !strings.Contains(end.Aborted.Reason, "unsupported") {
		t.Fatalf("ended %s, aborted %+v; want Aborted naming the refusal", end.Phase, end.Aborted)
	}
	if got := g.router.AppliedRoutes().Extras; got.HeaderRoute != nil {
		t.Errorf("refused extras written: %s", got)
	}
	if st := g.traffic.Stats(); st.Overloaded != 0 || st.Dropped != 0 {
		t.Errorf("traffic: %+v", st)
	}
}

// TestRunnerValidateNeedsARouteShaper: a strategy with extras and a router
// that cannot program them is refused before anything runs.
func TestRunnerValidateNeedsARouteShaper(t *testing.T) {
	clock := fake.NewClock(t0)
	weightsOnly := struct{ rollout.TrafficRouter }{fake.NewRouter(clock)}
	r := &rollout.Runner{Strategy: extrasCanary, Router: weightsOnly, A: fake.NewCapacity(clock, fake.CapacityOptions{}),
		B: fake.NewCapacity(clock, fake.CapacityOptions{})}
	if err := r.Validate(); !errors.Is(err, rollout.ErrInvalid) || !strings.Contains(err.Error(), "ExtrasRouter") {
		t.Fatalf("Validate: %v", err)
	}
	r.Router = fake.NewRouter(clock)
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate with an ExtrasRouter: %v", err)
	}
}
