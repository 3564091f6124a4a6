package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"testing"

	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestHopStoreKeepsTheStateWithTheWeights: for random upgrades run by Run
// with a HopStore on the route, through writes that lose races, a route
// that fails for a while and processes killed at random reconciles and
// started again from the store, every weight hop leaves the route holding
// its weights and the state that asked for them, a refused one leaves the
// route's weights as they were, and the rollout still succeeds.
func TestHopStoreKeepsTheStateWithTheWeights(t *testing.T) {
	withChecks(200, func() { rapid.Check(t, hopStoreKeepsTheState) })
}

func hopStoreKeepsTheState(t *rapid.T) {
	{
		surge := rapid.Int32Range(10, 100).Draw(t, "surge")
		strat := strategy.Incremental{
			StepPercent:     rapid.Int32Range(10, surge).Draw(t, "step"),
			Interval:        metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 20).Draw(t, "intervalSec")) * time.Second},
			MaxSurgePercent: surge,
		}
		g := newRig(strat, fake.Lag{Reads: rapid.IntRange(0, 2).Draw(t, "lagReads")})
		store := g.router.Store()
		g.runner.Store = store
		type fault struct{ conflicts, failFor int }
		faults := rapid.MapOfN(rapid.IntRange(0, 60), rapid.Custom(func(t *rapid.T) fault {
			return fault{conflicts: rapid.IntRange(0, 3).Draw(t, "conflicts"), failFor: rapid.IntRange(0, 3).Draw(t, "failFor")}
		}), 0, 8).Draw(t, "faults")
		crashes := rapid.SliceOfNDistinct(rapid.IntRange(1, 80), 0, 4, rapid.ID[int]).Draw(t, "crashes")
		crashAt := map[int]bool{}
		for _, c := range crashes {
			crashAt[c] = true
		}

		var (
			mu        sync.Mutex
			n         int // reconciles so far, across processes
			failUntil = -1
			lastSpec  = rollout.Weights{A: 100}
			problems  []string
			cancel    context.CancelFunc
		)
		g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			mu.Lock()
			defer mu.Unlock()
			n++
			spec, _ := g.router.Status()
			for _, h := range e.Applied {
				if h.Kind != rollout.HopWeight {
					continue
				}
				saved, err := store.Load(context.Background())
				if err != nil || saved.Desired.Weight != h.Value || spec.Weights != h.Weights {
					problems = append(problems, fmt.Sprintf("reconcile %d, after %s: route %+v, state on it asks %d (%v)", n, h, spec.Weights, saved.Desired.Weight, err))
				}
			}
			var ae *rollout.AdapterError
			if errors.As(e.Err, &ae) && ae.Adapter == "router" && ae.Hop != "" && spec.Weights != lastSpec {
				problems = append(problems, fmt.Sprintf("reconcile %d: a refused hop (%v) changed the route from %+v to %+v", n, e.Err, lastSpec, spec.Weights))
			}
			if e.Err == nil {
				lastSpec = spec.Weights
			}
			if n == failUntil {
				g.router.FailWith(nil)
			}
			if f, ok := faults[n]; ok {
				g.router.Conflicts(f.conflicts)
				if f.failFor > 0 {
					g.router.FailWith(errAway)
					failUntil = n + f.failFor
				}
			}
			if crashAt[n] {
				cancel() // the process dies
			}
		})
		var end strategy.State
		for process := 0; ; process++ {
			if process > len(crashes)+10 {
				t.Fatalf("Run did not finish after %d processes", process)
			}
			ctx, c := context.WithCancel(context.Background())
			mu.Lock()
			cancel = c
			mu.Unlock()
			done := make(chan strategy.State, 1)
			go func() {
				s, err := g.runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
				if err != nil && ctx.Err() == nil && !errors.Is(err, errAway) {
					t.Errorf("Run: %v", err)
				}
				done <- s
			}()
			finished := false
			if !g.clock.AdvanceUntil(func() bool {
				select {
				case end = <-done:
					finished = true
					return true
				default:
					return ctx.Err() != nil
				}
			}, 20*time.Second) {
				c()
				t.Fatal("Run neither finished nor crashed")
			}
			if !finished {
				end = <-done // the process is gone
			}
			crashed := ctx.Err() != nil
			c()
			if end.Phase.Terminal() {
				break
			}
			if !crashed {
				// Run gave up without a crash: it could not load the state
				// from a failing route. The next process starts later.
				mu.Lock()
				g.router.FailWith(nil)
				mu.Unlock()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Error(p)
		}
		if end.Phase != strategy.PhaseSucceeded {
			t.Fatalf("ended %s: %s", end.Phase, end.Message)
		}
		g.router.FailWith(nil) // a fault drawn for a later reconcile may still be on
		if spec, _ := g.router.Status(); spec.Weights != (rollout.Weights{B: 100}) {
			t.Fatalf("route at the end: %+v", spec.Weights)
		}
	}
}

// errAway is the failure of a route that does not answer.
var errAway = errors.New("the API server is away")
