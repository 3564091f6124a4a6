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
// that fails for a while, another writer that fills the route's
// annotations for a while (leaving room for the state, for a reduced
// state, or for none), an abort at a random reconcile and processes
// killed at random reconciles and started again from the store:
//   - every hop that moves traffic toward the canary leaves the route
//     holding its weights and, whole, the state that asked for them;
//   - every weight hop lands (the route holds its weights), and one that
//     left the route's state behind moved traffic toward the stable side,
//     while the annotations had no room for it;
//   - a refused hop leaves the route's weights as they were;
//   - once the process aborts, or a stored state records the abort, the
//     canary's weight never rises again, in this process or a later one;
//   - the rollout ends: aborted, with all traffic on the stable side, when
//     a stored state recorded the abort; succeeded otherwise.
//
// Processes are not killed while the route holds weights that its stored
// state does not record (a walk back whose state fitted nowhere): Run's
// memory is then the rollout's only record (see rollout.HopStore).
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
		strat.AbortRamp = rapid.SampledFrom([]strategy.AbortRamp{strategy.AbortImmediate, strategy.AbortGradual}).Draw(t, "abortRamp")
		g := newRig(strat, fake.Lag{Reads: rapid.IntRange(0, 2).Draw(t, "lagReads")})
		store := g.router.Store()
		g.runner.Store = store
		type fault struct{ conflicts, failFor, room, fillFor int }
		faults := rapid.MapOfN(rapid.IntRange(0, 60), rapid.Custom(func(t *rapid.T) fault {
			f := fault{conflicts: rapid.IntRange(0, 3).Draw(t, "conflicts"), failFor: rapid.IntRange(0, 3).Draw(t, "failFor")}
			// Another writer fills the annotations for fillFor
			// reconciles, leaving room bytes (-1: less than the state
			// takes now, so that no state fits).
			if f.fillFor = rapid.IntRange(0, 8).Draw(t, "fillFor"); f.fillFor > 0 {
				if f.room = rapid.IntRange(-1, 600).Draw(t, "room"); f.room < 0 {
					f.room = -fake.AnnotationLimit
				}
			}
			return f
		}), 0, 8).Draw(t, "faults")
		abortAt := rapid.IntRange(0, 60).Draw(t, "abortAt") // 0: never
		// The annotations may fill as the abort comes, for the walk back.
		if abortAt > 0 && rapid.Bool().Draw(t, "fillAtAbort") {
			f := faults[abortAt]
			f.fillFor = rapid.IntRange(1, 20).Draw(t, "abortFillFor")
			if f.room = rapid.IntRange(-1, 600).Draw(t, "abortRoom"); f.room < 0 {
				f.room = -fake.AnnotationLimit
			}
			faults[abortAt] = f
		}
		crashes := rapid.SliceOfNDistinct(rapid.IntRange(1, 80), 0, 4, rapid.ID[int]).Draw(t, "crashes")
		crashAt := map[int]bool{}
		for _, c := range crashes {
			crashAt[c] = true
		}

		var (
			mu          sync.Mutex
			n           int // reconciles so far, across processes
			failUntil   = -1
			fillUntil   = -1
			filled      bool
			stale       bool // the route's weights are not those its state records
			lastSpec    = rollout.Weights{A: 100}
			problems    []string
			cancel      context.CancelFunc
			cmds        chan rollout.Command
			aborted     bool // this process has aborted
			abortStored bool // a stored state records the abort
		)
		g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			mu.Lock()
			defer mu.Unlock()
			n++
			spec, statusErr := g.router.Status()
			saved, loadErr := store.Load(context.Background())
			if statusErr != nil {
				// The route fails (FailWith): nothing was written to it.
				spec.Weights = lastSpec
			}
			for _, h := range e.Applied {
				if h.Kind != rollout.HopWeight {
					continue
				}
				if spec.Weights != h.Weights {
					problems = append(problems, fmt.Sprintf("reconcile %d, after %s: route %+v", n, h, spec.Weights))
				}
				forward := h.Weights.Of(h.Side) > lastSpec.Of(h.Side)
				switch {
				case loadErr == nil && saved.Desired.Weight == h.Value && (!forward || !saved.Observed.At.IsZero()):
				case forward:
					problems = append(problems, fmt.Sprintf("reconcile %d, after %s (forward): route %+v, state on it asks %d, observed at %v (%v)", n, h, spec.Weights, saved.Desired.Weight, saved.Observed.At, loadErr))
				case !filled:
					problems = append(problems, fmt.Sprintf("reconcile %d, after %s: the route had room, but its state asks %d (%v)", n, h, saved.Desired.Weight, loadErr))
				}
			}
			var ae *rollout.AdapterError
			if errors.As(e.Err, &ae) && ae.Adapter == "router" && ae.Hop != "" && spec.Weights != lastSpec {
				problems = append(problems, fmt.Sprintf("reconcile %d: a refused hop (%v) changed the route from %+v to %+v", n, e.Err, lastSpec, spec.Weights))
			}
			if (aborted || abortStored) && spec.Weights.B > lastSpec.B {
				problems = append(problems, fmt.Sprintf("reconcile %d: after the abort the canary's weight rose from %d to %d", n, lastSpec.B, spec.Weights.B))
			}
			lastSpec = spec.Weights
			aborted = aborted || e.After.Aborted != nil
			abortStored = abortStored || loadErr == nil && saved.Aborted != nil
			if n == failUntil {
				g.router.FailWith(nil)
			}
			// A walk back whose state fitted nowhere leaves the route's
			// weights below what the stored state records, and Run's
			// memory is then the rollout's only record: a process killed
			// before it is saved loses it (a restarted one finds the
			// state stored before), which is not a crash this test draws.
			if loadErr == nil && statusErr == nil {
				stale = saved.Desired.Weight != spec.Weights.Of(saved.StableSide.Other())
			}
			if n == fillUntil {
				g.router.ClearAnnotations()
				filled = false
			}
			if f, ok := faults[n]; ok {
				g.router.Conflicts(f.conflicts)
				if f.failFor > 0 {
					g.router.FailWith(errAway)
					failUntil = n + f.failFor
				}
				if f.fillFor > 0 {
					g.router.FillAnnotations(f.room)
					filled, fillUntil = true, n+f.fillFor
				}
			}
			if n == abortAt && cmds != nil {
				cmds <- func(s strategy.State, now time.Time) strategy.State { return s.Abort("stop", now) }
				close(cmds)
				cmds = nil
			}
			if crashAt[n] && !stale {
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
			cancel, aborted, cmds = c, false, nil
			if n < abortAt {
				// The abort comes at reconcile abortAt, if this process
				// is still alive then; Run takes a closed channel as
				// "no more commands".
				cmds = make(chan rollout.Command, 1)
			}
			commands := cmds
			mu.Unlock()
			done := make(chan strategy.State, 1)
			go func() {
				var in <-chan rollout.Command
				if commands != nil {
					in = commands
				}
				s, err := g.runner.Run(ctx, strategy.NewState("v1", "v2"), in)
				if err != nil && ctx.Err() == nil && !errors.Is(err, errAway) && !errors.Is(err, rollout.ErrStateRefused) {
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
		g.router.FailWith(nil) // a fault drawn for a later reconcile may still be on
		spec, _ := g.router.Status()
		switch {
		case end.Phase == strategy.PhaseAborted:
			if spec.Weights != (rollout.Weights{A: 100}) {
				t.Fatalf("aborted, route at the end: %+v", spec.Weights)
			}
		case abortStored:
			t.Fatalf("a stored state recorded the abort, but the rollout ended %s: %s", end.Phase, end.Message)
		case end.Phase != strategy.PhaseSucceeded:
			t.Fatalf("ended %s: %s", end.Phase, end.Message)
		case spec.Weights != (rollout.Weights{B: 100}):
			t.Fatalf("route at the end: %+v", spec.Weights)
		}
	}
}

// errAway is the failure of a route that does not answer.
var errAway = errors.New("the API server is away")
