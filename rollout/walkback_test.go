package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// degradedReason returns the reason of s's Degraded condition when it is
// true, "" otherwise.
func degradedReason(s *strategy.State) string {
	for _, c := range s.Conditions {
		if c.Type == strategy.ConditionDegraded && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// TestWalkBackDoesNotWaitOnTheState: another writer fills the route's
// annotations while a rollout runs with its state on the route
// (fake.RouteStore), and the rollout is aborted at that moment. Whatever
// room is left, the walk back returns all traffic to the stable side: the
// state travels with each hop whole when it fits, reduced when only that
// fits, and not at all when nothing does (Run then keeps it in memory,
// Degraded with reason StateRefused, until the annotations are cleared).
// No hop after the fill moves traffic toward the canary.
func TestWalkBackDoesNotWaitOnTheState(t *testing.T) {
	incremental := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 40}
	extras := strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetHeaderRoute(5, strategy.HeaderMatch{Name: "x-beta", Value: "1"}),
		strategy.SetMirror(20),
		strategy.SetWeight(20),
		strategy.SetWeight(40),
		strategy.PauseUntilResumed(),
	}}
	tests := []struct {
		name   string
		strat  strategy.Strategy
		fillAt int32 // the canary weight at which the annotations fill and the abort comes
		room   int   // bytes left for a larger state (fake.Router.FillAnnotations)
		// Run returns an error matching rollout.ErrStateRefused: the final
		// state is stored reduced.
		wantRefusedErr bool
		wantMarked     bool // some reconcile reports Degraded, reason StateRefused
	}{
		{name: "room for every state", strat: incremental, fillAt: 40, room: 100000},
		{name: "room for a reduced state", strat: incremental, fillAt: 40, room: 0, wantRefusedErr: true, wantMarked: true},
		{name: "no room at all", strat: incremental, fillAt: 40, room: -200000, wantMarked: true},
		{name: "extras dropped without room", strat: extras, fillAt: 40, room: -200000, wantMarked: true},
		// The extras leave the state as the walk back drops them: the
		// final state fits whole again.
		{name: "extras with room for a reduced state", strat: extras, fillAt: 40, room: 0, wantMarked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(tt.strat, fake.Lag{Reads: 1})
			store := g.router.Store()
			g.runner.Store = store
			cmds := make(chan rollout.Command, 1)
			var (
				mu                  sync.Mutex
				filled, marked      bool
				last                = rollout.Weights{A: 100}
				problems            []string
				cleared, walkedBack bool
			)
			g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
				mu.Lock()
				defer mu.Unlock()
				g.traffic.Tick()
				spec, _ := g.router.Status()
				if filled && spec.Weights.B > last.B {
					problems = append(problems, fmt.Sprintf("%s: the canary's weight rose from %d to %d after the fill", e.Time.Sub(t0), last.B, spec.Weights.B))
				}
				last = spec.Weights
				if degradedReason(&e.After) == rollout.ReasonStateRefused {
					marked = true
				}
				if e.After.AwaitingResume && !filled {
					cmds <- strategy.State.Resume
				}
				if !filled && spec.Weights.B >= tt.fillAt && e.Err == nil {
					filled = true
					g.router.FillAnnotations(tt.room)
					cmds <- func(s strategy.State, now time.Time) strategy.State { return s.Abort("stop", now) }
				}
				if filled && !cleared && e.After.Phase == strategy.PhaseAborted {
					walkedBack = spec.Weights == rollout.Weights{A: 100}
					if tt.room < 0 {
						// Nothing fits: Run holds the state until the
						// annotations have room again.
						cleared = true
						g.router.ClearAnnotations()
					}
				}
			})
			res := finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("v1", "v2"), cmds))
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			if !walkedBack {
				t.Errorf("the route did not hold all traffic on the stable side when the walk back ended")
			}
			if got := errors.Is(res.err, rollout.ErrStateRefused); got != tt.wantRefusedErr {
				t.Errorf("Run's error %v: matches ErrStateRefused %v, want %v", res.err, got, tt.wantRefusedErr)
			}
			if marked != tt.wantMarked {
				t.Errorf("a reconcile reported Degraded (StateRefused): %v, want %v", marked, tt.wantMarked)
			}
			if res.s.Phase != strategy.PhaseAborted {
				t.Fatalf("ended %s: %s", res.s.Phase, res.s.Message)
			}
			spec, _ := g.router.Status()
			if diff := cmp.Diff(rollout.Weights{A: 100}, spec.Weights); diff != "" {
				t.Errorf("route at the end (-want +got):\n%s", diff)
			}
			saved, err := store.Load(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if saved.Phase != strategy.PhaseAborted || saved.Desired.Weight != 0 || !saved.DesiredExtras.IsZero() {
				t.Errorf("stored: %s at weight %d with extras %s, want Aborted at 0 without extras", saved.Phase, saved.Desired.Weight, saved.DesiredExtras)
			}
		})
	}
}

// TestForwardHopNeverWithoutItsState: once the route has no room for the
// state, no hop moves traffic toward the canary: the forward hop is
// refused whole, the rollout reports the refusal (naming the annotation),
// and it goes on to success once the annotations are cleared.
func TestForwardHopNeverWithoutItsState(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 40}
	for _, room := range []int{-200000, 0} {
		t.Run(fmt.Sprintf("room %d", room), func(t *testing.T) {
			g := newRig(strat, fake.Lag{Reads: 1})
			store := g.router.Store()
			g.runner.Store = store
			var (
				mu               sync.Mutex
				filled           bool
				refusals, rounds int
				at               rollout.Weights
				problems         []string
			)
			g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
				mu.Lock()
				defer mu.Unlock()
				g.traffic.Tick()
				spec, _ := g.router.Status()
				if filled {
					rounds++
					if spec.Weights != at {
						// Only with its whole state: one that fits the room
						// left (a state smaller than the last one stored
						// does, at room 0).
						if st, err := store.Load(context.Background()); err != nil || st.Desired.Weight != spec.Weights.B {
							problems = append(problems, fmt.Sprintf("%s: the route moved from %+v to %+v without its state", e.Time.Sub(t0), at, spec.Weights))
						}
						at = spec.Weights
					}
					if errors.Is(e.Err, rollout.ErrStateRefused) {
						refusals++
						if !strings.Contains(e.After.Observed.Error, "metadata.annotations["+fake.StateAnnotation+"]") {
							problems = append(problems, "the refusal does not name the annotation: "+e.After.Observed.Error)
						}
					}
					// Cleared after 20 rounds, or once the rollout is
					// completing (a state that shrank fits room 0, so the
					// rollout may get that far).
					if rounds == 20 || e.After.Phase == strategy.PhaseCompleting {
						filled = false
						g.router.ClearAnnotations()
					}
					return
				}
				if spec.Weights.B == 20 && rounds == 0 && e.Err == nil {
					filled, at = true, spec.Weights
					// Room 0 still takes a state no larger than the one
					// on the route: make the next one larger.
					g.router.FillAnnotations(room)
				}
			})
			res := finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("v1", "v2"), nil))
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			if room < 0 && refusals == 0 {
				t.Error("no forward hop was refused while the route had no room")
			}
			if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
				t.Fatalf("ended %s (%v): %s", res.s.Phase, res.err, res.s.Message)
			}
		})
	}
}

// TestRestartAfterAReducedWalkBack: a process killed during a walk back
// whose state the route keeps only in its reduced form is followed by
// one that loads that state and walks back to the end; the canary's weight
// never rises.
func TestRestartAfterAReducedWalkBack(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 40, Options: strategy.Options{AbortRamp: strategy.AbortGradual}}
	g := newRig(strat, fake.Lag{Reads: 1})
	store := g.router.Store()
	g.runner.Store = store
	cmds := make(chan rollout.Command, 1)
	live, kill := context.WithCancel(context.Background())
	defer kill()
	var (
		mu       sync.Mutex
		filled   bool
		last     = rollout.Weights{A: 100}
		problems []string
	)
	g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		mu.Lock()
		defer mu.Unlock()
		g.traffic.Tick()
		spec, _ := g.router.Status()
		if filled && spec.Weights.B > last.B {
			problems = append(problems, fmt.Sprintf("%s: the canary's weight rose from %d to %d", e.Time.Sub(t0), last.B, spec.Weights.B))
		}
		last = spec.Weights
		if !filled && spec.Weights.B >= 60 && e.Err == nil {
			filled = true
			g.router.FillAnnotations(0)
			cmds <- func(s strategy.State, now time.Time) strategy.State { return s.Abort("stop", now) }
			return
		}
		if filled && live.Err() == nil && spec.Weights.B < 60 && spec.Weights.B > 0 {
			kill() // killed in the middle of the walk back
		}
	})
	first := finishRun(t, g.clock, runAsync(live, g.runner, strategy.NewState("v1", "v2"), cmds))
	if !errors.Is(first.err, context.Canceled) {
		t.Fatalf("first process: %v", first.err)
	}
	saved, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if saved.Phase != strategy.PhaseAborting || saved.Observed.At != (metav1.MicroTime{}) {
		t.Fatalf("stored after the kill: %s, observed at %v; want the reduced state of the walk back", saved.Phase, saved.Observed.At)
	}
	res := finishRun(t, g.clock, runAsync(context.Background(), g.runner, strategy.NewState("v1", "v2"), nil))
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if res.s.Phase != strategy.PhaseAborted {
		t.Fatalf("second process ended %s (%v): %s", res.s.Phase, res.err, res.s.Message)
	}
	if spec, _ := g.router.Status(); spec.Weights != (rollout.Weights{A: 100}) {
		t.Errorf("route at the end: %+v", spec.Weights)
	}
}
