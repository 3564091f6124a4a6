package fake_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// recordTB records what AssertSafe reports.
type recordTB struct{ errs []string }

func (r *recordTB) Helper() {}

func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func minutes(n int) metav1.Duration { return metav1.Duration{Duration: time.Duration(n) * time.Minute} }

func incremental(mode strategy.CapacityMode) strategy.Incremental {
	return strategy.Incremental{StepPercent: 20, Interval: minutes(1), MaxSurgePercent: 20, Options: strategy.Options{Capacity: mode}}
}

func newWorld(t interface {
	Helper()
	Fatal(...any)
}, opts fake.WorldOptions) *fake.World {
	t.Helper()
	w, err := fake.NewWorld(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// outcome is how a rollout in a World ended.
type outcome struct {
	Phase                  strategy.Phase
	StableSide             strategy.Side
	StableRevision         string
	SideA, SideB           string // the revision each side runs
	Overloaded, Dropped    int64
	AbortReason            string
	NothingUnsafeInBetween bool
}

func outcomeOf(w *fake.World, s strategy.State) outcome {
	var tb recordTB
	w.AssertSafe(&tb)
	st := w.Traffic().Stats()
	o := outcome{
		Phase: s.Phase, StableSide: s.StableSide, StableRevision: s.StableRevision,
		SideA: w.Side(strategy.SideA).RevisionStatus().Revision, SideB: w.Side(strategy.SideB).RevisionStatus().Revision,
		Overloaded: st.Overloaded, Dropped: st.Dropped, NothingUnsafeInBetween: len(tb.errs) == 0,
	}
	if s.Aborted != nil {
		o.AbortReason = s.Aborted.Reason
	}
	return o
}

// TestWorldRollouts: a rollout from v1 to v2 ends as it should in every
// capacity mode and with every fault the options offer, and every
// observation on the way is safe.
func TestWorldRollouts(t *testing.T) {
	succeeded := outcome{Phase: strategy.PhaseSucceeded, StableSide: strategy.SideB, StableRevision: "v2", SideA: "v1", SideB: "v2", NothingUnsafeInBetween: true}
	aborted := outcome{Phase: strategy.PhaseAborted, StableSide: strategy.SideA, StableRevision: "v1", SideA: "v1", SideB: "v2",
		AbortReason: strategy.ReasonUnhealthy, NothingUnsafeInBetween: true}
	canary := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(10), strategy.Pause(30 * time.Second), strategy.SetWeight(50), strategy.Pause(time.Minute),
	}}
	cases := []struct {
		name string
		opts fake.WorldOptions
		want strategy.Phase
		end  outcome
	}{
		{"managed incremental", fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged)}, strategy.PhaseSucceeded, succeeded},
		{"fixed incremental", fake.WorldOptions{Strategy: incremental(strategy.CapacityFixed)}, strategy.PhaseSucceeded, succeeded},
		{"replicas incremental", fake.WorldOptions{Strategy: incremental(strategy.CapacityReplicas)}, strategy.PhaseSucceeded, succeeded},
		{"managed canary", fake.WorldOptions{Strategy: canary}, strategy.PhaseSucceeded, succeeded},
		{"managed blue-green", fake.WorldOptions{Strategy: strategy.BlueGreen{}}, strategy.PhaseSucceeded, succeeded},
		{"fixed blue-green", fake.WorldOptions{Strategy: strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed}}}, strategy.PhaseSucceeded, succeeded},
		{"lags and partial readiness", fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged),
			RouterLag: fake.Lag{Reads: 2, Duration: time.Second}, SideLag: fake.Lag{Reads: 1, Duration: 8 * time.Second}, Partial: true},
			strategy.PhaseSucceeded, succeeded},
		{"lags in the replicas mode", fake.WorldOptions{Strategy: incremental(strategy.CapacityReplicas),
			SideLag: fake.Lag{Duration: 8 * time.Second}, Partial: true, Replicas: 7}, strategy.PhaseSucceeded, succeeded},
		{"every third write fails", fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), FailEvery: 3}, strategy.PhaseSucceeded, succeeded},
		{"every second route write fails (fixed)", fake.WorldOptions{Strategy: incremental(strategy.CapacityFixed), FailEvery: 2}, strategy.PhaseSucceeded, succeeded},
		{"unhealthy canary", fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), UnhealthyCanary: true}, strategy.PhaseAborted, aborted},
		{"unhealthy canary (fixed)", fake.WorldOptions{Strategy: incremental(strategy.CapacityFixed), UnhealthyCanary: true}, strategy.PhaseAborted, aborted},
		{"unhealthy canary (replicas)", fake.WorldOptions{Strategy: incremental(strategy.CapacityReplicas), UnhealthyCanary: true}, strategy.PhaseAborted, aborted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Revision = "v1"
			w := newWorld(t, tc.opts)
			w.Start("v2")
			end, err := w.RunUntil(context.Background(), tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.end, outcomeOf(w, end)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			w.AssertSafe(t)
		})
	}
}

// TestWorldSequence: rollouts one after the other, a retarget mid-rollout,
// and a pause that waits for a command, in one World.
func TestWorldSequence(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fake.WorldOptions{Revision: "v1", Strategy: strategy.Canary{MaxSurgePercent: 30, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60),
	}}})
	var got []string
	note := func(s strategy.State) {
		got = append(got, fmt.Sprintf("%s %s on %s (canary %s)", s.Phase, s.StableRevision, s.StableSide, s.CanaryRevision))
	}
	w.Command(nil) // nothing
	w.Start("v2")
	s, err := w.RunUntil(ctx, strategy.PhasePaused)
	if err != nil {
		t.Fatal(err)
	}
	note(s)
	w.Command(func(s strategy.State, now time.Time) strategy.State { return s.Resume(now) })
	if s, err = w.RunUntil(ctx, strategy.PhaseSucceeded); err != nil {
		t.Fatal(err)
	}
	note(s)
	w.Start("v3") // on side A, the canary side now
	if s, err = w.RunUntil(ctx, strategy.PhasePaused); err != nil {
		t.Fatal(err)
	}
	note(s)
	w.Start("v4") // a retarget: v3 is walked back, then v4 begins
	w.Command(func(s strategy.State, now time.Time) strategy.State { return s.PromoteFull(now) })
	if s, err = w.RunUntil(ctx, strategy.PhasePaused); err != nil {
		t.Fatal(err)
	}
	note(s)
	w.Command(func(s strategy.State, now time.Time) strategy.State { return s.Resume(now) })
	if s, err = w.RunUntil(ctx, strategy.PhaseSucceeded); err != nil {
		t.Fatal(err)
	}
	note(s)
	want := []string{
		"Paused v1 on A (canary v2)",
		"Succeeded v2 on B (canary v2)",
		"Paused v2 on B (canary v3)",
		"Paused v2 on B (canary v4)",
		"Succeeded v4 on A (canary v4)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	w.AssertSafe(t)
}

// TestWorldReconcile: RunUntil drives a reconciler of the test's own,
// given the World's Runner, and checks what it does.
func TestWorldReconcile(t *testing.T) {
	ctx := context.Background()
	t.Run("one that calls the Runner", func(t *testing.T) {
		var calls []time.Duration
		w := newWorld(t, fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), Revision: "v1",
			Reconcile: func(ctx context.Context, r *rollout.Runner, s strategy.State, now time.Time) (strategy.State, time.Duration, error) {
				calls = append(calls, now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
				return r.ReconcileAt(ctx, s, now)
			}})
		w.Start("v2")
		if _, err := w.RunUntil(ctx, strategy.PhaseSucceeded); err != nil {
			t.Fatal(err)
		}
		if len(calls) < 5 || calls[0] != 0 || !slices.IsSorted(calls) {
			t.Errorf("reconciled at %v", calls)
		}
		w.AssertSafe(t)
	})
	t.Run("one that forgets the observed stable side", func(t *testing.T) {
		// A reconciler whose status keeps no StableSide (say, a field it
		// forgot to copy) sends the second rollout's canary onto the
		// side that serves.
		w := newWorld(t, fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), Revision: "v1", Deadline: 10 * time.Minute,
			Reconcile: func(ctx context.Context, r *rollout.Runner, s strategy.State, now time.Time) (strategy.State, time.Duration, error) {
				next, requeue, err := r.ReconcileAt(ctx, s, now)
				if next.Phase.Terminal() {
					next.StableSide = strategy.SideA
				}
				return next, requeue, err
			}})
		w.Start("v2")
		if _, err := w.RunUntil(ctx, strategy.PhaseSucceeded); err != nil {
			t.Fatal(err)
		}
		w.Start("v3")
		_, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
		var tb recordTB
		w.AssertSafe(&tb)
		const want = `traffic to the wrong revision at 00:04:00.400 (+4m0.4s), phase not started: side B receives 100% of requests and runs "v2", but as the canary side it must run "v3"`
		if !slices.ContainsFunc(tb.errs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("AssertSafe did not report %q for a reconciler that lost the stable side (RunUntil: %v); it reported:\n%s",
				want, err, strings.Join(tb.errs, "\n"))
		}
	})
}

// TestWorldOptionsValidate: every bad option is named.
func TestWorldOptionsValidate(t *testing.T) {
	good := fake.WorldOptions{Strategy: strategy.BlueGreen{}, Revision: "v1"}
	cases := []struct {
		name string
		edit func(*fake.WorldOptions)
		want []string // fragments of the error, each required
	}{
		{"the zero value", func(o *fake.WorldOptions) { *o = fake.WorldOptions{} }, []string{"WorldOptions.Strategy is required", "WorldOptions.Revision is required"}},
		{"an invalid strategy", func(o *fake.WorldOptions) { o.Strategy = strategy.Incremental{} }, []string{"WorldOptions.Strategy: "}},
		{"negative replicas", func(o *fake.WorldOptions) { o.Replicas = -1 }, []string{"WorldOptions.Replicas -1"}},
		{"negative requests", func(o *fake.WorldOptions) { o.Requests = -1 }, []string{"WorldOptions.Requests -1"}},
		{"negative tick", func(o *fake.WorldOptions) { o.Tick = -time.Second }, []string{"WorldOptions.Tick -1s"}},
		{"negative deadline", func(o *fake.WorldOptions) { o.Deadline = -time.Second }, []string{"WorldOptions.Deadline -1s"}},
		{"fail every write", func(o *fake.WorldOptions) { o.FailEvery = 1 }, []string{"WorldOptions.FailEvery 1"}},
		{"negative lag", func(o *fake.WorldOptions) { o.SideLag = fake.Lag{Reads: -1} }, []string{"WorldOptions.SideLag"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			err := o.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, frag := range tc.want {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("error %q does not name %q", err, frag)
				}
			}
			if !errors.Is(err, rollout.ErrInvalid) && !errors.Is(err, strategy.ErrInvalid) {
				t.Errorf("error %v matches neither rollout.ErrInvalid nor strategy.ErrInvalid", err)
			}
			if w, err2 := fake.NewWorld(o); w != nil || err2 == nil || err2.Error() != err.Error() {
				t.Errorf("NewWorld: %v, %v; want nil and %v", w, err2, err)
			}
		})
	}
	if err := good.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestWorldNotReached: RunUntil stops at another terminal phase and at its
// deadline, with an error that names what it reached, and at ctx's end.
func TestWorldNotReached(t *testing.T) {
	ctx := context.Background()
	t.Run("another terminal phase", func(t *testing.T) {
		w := newWorld(t, fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), Revision: "v1", UnhealthyCanary: true})
		w.Start("v2")
		end, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
		var nr *fake.NotReachedError
		if !errors.As(err, &nr) || !errors.Is(err, fake.ErrNotReached) {
			t.Fatalf("error %v, want a *NotReachedError", err)
		}
		if nr.Want != strategy.PhaseSucceeded || nr.Phase != strategy.PhaseAborted || nr.Deadline || nr.Message != end.Message || end.Phase != strategy.PhaseAborted {
			t.Errorf("error %+v, end %s", nr, end.Phase)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		w := newWorld(t, fake.WorldOptions{Strategy: incremental(strategy.CapacityManaged), Revision: "v1", Deadline: 5 * time.Minute})
		w.Side(strategy.SideB).StallDeploys(true) // v2 never rolls out
		w.Start("v2")
		before := w.Clock().Now()
		_, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
		want := `fake world: phase Succeeded not reached after 5m0s: still Progressing at the deadline (message "waiting for the canary revision to roll out on the canary side")`
		if err == nil || err.Error() != want {
			t.Errorf("error %v\nwant %s", err, want)
		}
		if got := w.Clock().Now().Sub(before); got != 5*time.Minute {
			t.Errorf("ran %s of simulated time, want 5m", got)
		}
	})
	t.Run("idle", func(t *testing.T) {
		w := newWorld(t, fake.WorldOptions{Strategy: strategy.BlueGreen{}, Revision: "v1", Deadline: time.Minute})
		_, err := w.RunUntil(ctx, strategy.PhaseSucceeded) // no Start
		want := `fake world: phase Succeeded not reached after 1m0s: still idle (no phase) at the deadline (message "idle: no rollout started")`
		if err == nil || err.Error() != want {
			t.Errorf("error %v\nwant %s", err, want)
		}
		w.AssertSafe(t)
	})
	t.Run("canceled", func(t *testing.T) {
		w := newWorld(t, fake.WorldOptions{Strategy: strategy.BlueGreen{}, Revision: "v1"})
		w.Start("v2")
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := w.RunUntil(canceled, strategy.PhaseSucceeded); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	})
}

// TestWorldAssertSafeFails: a World broken for each rule makes AssertSafe
// fail with that rule, and only the rules broken.
func TestWorldAssertSafeFails(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		opts    fake.WorldOptions
		breakIt func(*testing.T, *fake.World)
		// rules are the rules reported; first is the exact report of
		// the first one.
		rules []string
		first string
	}{
		{"overload: half of the stable side's replicas crash and stay down", fake.WorldOptions{},
			func(t *testing.T, w *fake.World) {
				w.Side(strategy.SideA).CrashLoop(true)
				w.Side(strategy.SideA).Crash(5)
			},
			[]string{"overload"},
			"fake world: overload at 00:00:00.100 (+100ms), phase idle: 500 of 1000 requests overloaded a side (side A: 100% of requests, capacity 100, ready 50%; side B: 0% of requests, capacity 0, ready 0%) [10 observations broke this rule, the last at +1s]"},
		{"dropped requests: the route is deleted", fake.WorldOptions{},
			func(t *testing.T, w *fake.World) { w.Router().Delete() },
			[]string{"dropped requests"},
			"fake world: dropped requests at 00:00:00.100 (+100ms), phase idle: 1000 of 1000 requests dropped (side A: 0% of requests, capacity 100, ready 100%; side B: 0% of requests, capacity 0, ready 0%) [10 observations broke this rule, the last at +1s]"},
		{"surge: the canary side is scaled up next to the stable side", fake.WorldOptions{},
			func(t *testing.T, w *fake.World) {
				if err := w.Side(strategy.SideB).SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
					t.Fatal(err)
				}
			},
			[]string{"surge over budget"},
			"fake world: surge over budget at 00:00:00.000 (+0s), phase idle: the sides hold 200% of capacity (A 100, B 100), above 100 + the surge budget 20 [21 observations broke this rule, the last at +1s]"},
		{"wrong revision: someone puts another revision on the serving side", fake.WorldOptions{},
			func(t *testing.T, w *fake.World) { w.Side(strategy.SideA).SetRevision("v0") },
			[]string{"traffic to the wrong revision"},
			`fake world: traffic to the wrong revision at 00:00:00.000 (+0s), phase idle: side A receives 100% of requests and runs "v0", but as the stable side it must run "v1" [21 observations broke this rule, the last at +1s]`},
		{"wrong revision: a router that sends traffic to the canary side running nothing", fake.WorldOptions{},
			func(t *testing.T, w *fake.World) {
				w.Side(strategy.SideB).SetRevision("v1") // ready to serve, as the old stable revision
				if err := w.Side(strategy.SideB).SetCapacity(ctx, rollout.CapacityRequest{Percent: 20}); err != nil {
					t.Fatal(err)
				}
				w.Router().Overwrite(rollout.Weights{A: 90, B: 10})
				w.Side(strategy.SideB).SetRevision("")
			},
			[]string{"traffic to the wrong revision"},
			`fake world: traffic to the wrong revision at 00:00:00.000 (+0s), phase idle: side B receives 10% of requests and runs no revision ("" reported), but as the canary side it must run "v1" [21 observations broke this rule, the last at +1s]`},
		{"deploy under traffic: a deploy on the serving side", fake.WorldOptions{SideLag: fake.Lag{Duration: time.Hour}},
			func(t *testing.T, w *fake.World) {
				if err := w.Side(strategy.SideA).Deploy(ctx, "v9"); err != nil {
					t.Fatal(err)
				}
			},
			[]string{"dropped requests", "traffic to the wrong revision", "deploy under traffic or capacity"},
			"fake world: dropped requests at 00:00:00.100 (+100ms), phase idle: 1000 of 1000 requests dropped (side A: 100% of requests, capacity 100, ready 0%; side B: 0% of requests, capacity 0, ready 0%) [10 observations broke this rule, the last at +1s]"},
		{"a router adapter that swaps the sides: the canary side gets the stable side's share", fake.WorldOptions{Deadline: 3 * time.Minute},
			func(t *testing.T, w *fake.World) {
				swap := func(wt rollout.Weights) rollout.Weights { return rollout.Weights{A: wt.B, B: wt.A} }
				w.Runner().Router = fake.InterceptRouter(w.Router(), fake.RouterFuncs{
					SetWeights: func(ctx context.Context, next rollout.TrafficRouter, wt rollout.Weights) error {
						return next.SetWeights(ctx, swap(wt))
					},
					Weights: func(ctx context.Context, next rollout.TrafficRouter) (rollout.RouteStatus, error) {
						st, err := next.Weights(ctx)
						st.Weights = swap(st.Weights)
						return st, err
					},
				})
				w.Start("v2")
			},
			// Observed swapped, the route shows all traffic on the canary
			// side: the Runner aborts, and its walk back sends every
			// request to side B, which runs nothing.
			[]string{"dropped requests", "traffic to the wrong revision"},
			"fake world: dropped requests at 00:00:00.100 (+100ms), phase Aborting: 1000 of 1000 requests dropped (side A: 0% of requests, capacity 100, ready 100%; side B: 100% of requests, capacity 0, ready 0%)"},
		{"a side adapter that reports replicas ready before they are", fake.WorldOptions{Deadline: 3 * time.Minute, SideLag: fake.Lag{Duration: 30 * time.Second}},
			func(t *testing.T, w *fake.World) {
				w.Runner().B = fake.InterceptCapacity(w.Side(strategy.SideB), fake.CapacityFuncs{
					Capacity: func(ctx context.Context, next rollout.CapacitySetter) (rollout.CapacityStatus, error) {
						st, err := next.Capacity(ctx)
						st.Ready, st.Settled = st.Capacity, true
						return st, err
					},
				})
				w.Start("v2")
			},
			// v2 rolls out on side B at 30s; the Runner asks it for
			// capacity 20 and, told it is ready, gives it weight 20 while
			// its replicas start for another 30s; later, with the stable
			// side shrunk to the traffic it carries, weight 40 overloads
			// the canary's 20 percent ready.
			[]string{"overload", "dropped requests"},
			"fake world: overload at 00:01:30.200 (+1m30.2s), phase Progressing: 200 of 1000 requests overloaded a side (side A: 60% of requests, capacity 80, ready 80%; side B: 40% of requests, capacity 40, ready 20%) [596 observations broke this rule, the last at +2m59.9s]"},
		{"Degraded hold: the canary revision never rolls out", fake.WorldOptions{
			Strategy: strategy.BlueGreen{Options: strategy.Options{ProgressDeadline: minutes(1)}}},
			func(t *testing.T, w *fake.World) {
				w.Side(strategy.SideB).StallDeploys(true)
				w.Start("v2")
			},
			[]string{"Degraded hold"},
			"fake world: Degraded hold at 00:01:00.000 (+1m0s), phase Progressing: Degraded (ProgressDeadlineExceeded) after a reconcile: the rollout did not progress within the progress deadline [631 observations broke this rule, the last at +2m0s]"},
		{"Degraded hold: the stable side runs another revision", fake.WorldOptions{Strategy: strategy.BlueGreen{}},
			func(t *testing.T, w *fake.World) {
				w.Side(strategy.SideA).SetRevision("")
				w.Start("v2")
			},
			[]string{"traffic to the wrong revision", "Degraded hold"},
			`fake world: traffic to the wrong revision at 00:00:00.000 (+0s), phase not started: side A receives 100% of requests and runs no revision ("" reported), but as the stable side it must run "v1" [1267 observations broke this rule, the last at +2m0s]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Revision = "v1"
			if opts.Strategy == nil {
				opts.Strategy = incremental(strategy.CapacityManaged)
			}
			if opts.Deadline == 0 {
				opts.Deadline = time.Second
			}
			if _, isBG := opts.Strategy.(strategy.BlueGreen); isBG {
				opts.Deadline = 2 * time.Minute
			}
			w := newWorld(t, opts)
			tc.breakIt(t, w)
			_, err := w.RunUntil(ctx, strategy.PhaseSucceeded)
			if !errors.Is(err, fake.ErrNotReached) {
				t.Fatalf("RunUntil: %v, want ErrNotReached", err)
			}
			var tb recordTB
			w.AssertSafe(&tb)
			var rules []string
			for _, e := range tb.errs {
				rule, _, _ := strings.Cut(strings.TrimPrefix(e, "fake world: "), " at ")
				rules = append(rules, rule)
			}
			if diff := cmp.Diff(tc.rules, rules); diff != "" {
				t.Errorf("rules reported (-want +got):\n%s\nreports:\n%s", diff, strings.Join(tb.errs, "\n"))
			}
			if len(tb.errs) > 0 {
				if diff := cmp.Diff(tc.first, tb.errs[0]); diff != "" {
					t.Errorf("first report (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestWorldPropertySafe: random valid strategies, capacity modes and
// faults reach Succeeded, twice in a row, or, with an unhealthy canary,
// Aborted, and every observation on the way is safe.
func TestWorldPropertySafe(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]strategy.CapacityMode{strategy.CapacityManaged, strategy.CapacityFixed, strategy.CapacityReplicas}).Draw(t, "mode")
		opts := strategy.Options{Capacity: mode,
			AbortRamp:    rapid.SampledFrom([]strategy.AbortRamp{strategy.AbortImmediate, strategy.AbortGradual}).Draw(t, "abortRamp"),
			PollInterval: metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 50).Draw(t, "poll")) * 100 * time.Millisecond}}
		var strat strategy.Strategy
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			step := int32(rapid.IntRange(5, 100).Draw(t, "step"))
			surge := int32(rapid.IntRange(int(step), 100).Draw(t, "surge"))
			if mode == strategy.CapacityFixed {
				surge = int32(rapid.IntRange(0, 100).Draw(t, "surge"))
			}
			strat = strategy.Incremental{StepPercent: step, MaxSurgePercent: surge, Options: opts,
				Interval: metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 60).Draw(t, "interval")) * time.Second}}
		case 1:
			c := strategy.Canary{MaxSurgePercent: int32(rapid.IntRange(1, 100).Draw(t, "surge")), Options: opts}
			for range rapid.IntRange(0, 4).Draw(t, "steps") {
				if rapid.Bool().Draw(t, "pause") {
					c.Steps = append(c.Steps, strategy.Pause(time.Duration(rapid.IntRange(1, 120).Draw(t, "pauseSeconds"))*time.Second))
				} else {
					c.Steps = append(c.Steps, strategy.SetWeight(int32(rapid.IntRange(0, 100).Draw(t, "weight"))))
				}
			}
			strat = c
		default:
			strat = strategy.BlueGreen{Options: opts}
		}
		if err := strat.Validate(); err != nil {
			t.Skipf("not a valid strategy: %v", err)
		}
		lag := func(name string) fake.Lag {
			return fake.Lag{Reads: rapid.IntRange(0, 3).Draw(t, name+"Reads"),
				Duration: time.Duration(rapid.IntRange(0, 100).Draw(t, name+"Duration")) * 100 * time.Millisecond}
		}
		unhealthy := rapid.Bool().Draw(t, "unhealthyCanary")
		w := newWorld(t, fake.WorldOptions{
			Strategy: strat, Revision: "v1",
			Replicas:  int32(rapid.IntRange(1, 20).Draw(t, "replicas")),
			RouterLag: lag("routerLag"), SideLag: lag("sideLag"),
			Partial:         rapid.Bool().Draw(t, "partial"),
			FailEvery:       rapid.SampledFrom([]int{0, 2, 3, 5}).Draw(t, "failEvery"),
			UnhealthyCanary: unhealthy,
		})
		if unhealthy {
			// An unhealthy canary is walked back, safely.
			w.Start("v2")
			end, err := w.RunUntil(context.Background(), strategy.PhaseAborted)
			if err != nil {
				t.Fatal(err)
			}
			if end.StableSide != strategy.SideA || w.Side(strategy.SideA).RevisionStatus().Revision != "v1" || end.Aborted == nil || end.Aborted.Reason != strategy.ReasonUnhealthy {
				t.Fatalf("aborted with stable side %s running %+v, abort %+v", end.StableSide, w.Side(strategy.SideA).RevisionStatus(), end.Aborted)
			}
			w.AssertSafe(t)
			return
		}
		// Two rollouts: the second from side B, the stable side after the
		// first.
		for i, rev := range []string{"v2", "v3"} {
			w.Start(rev)
			end, err := w.RunUntil(context.Background(), strategy.PhaseSucceeded)
			if err != nil {
				t.Fatal(err)
			}
			wantSide := []strategy.Side{strategy.SideB, strategy.SideA}[i]
			if end.StableRevision != rev || end.StableSide != wantSide || w.Side(wantSide).RevisionStatus().Revision != rev {
				t.Fatalf("succeeded with stable revision %s on side %s running %+v; want %s on side %s",
					end.StableRevision, end.StableSide, w.Side(end.StableSide).RevisionStatus(), rev, wantSide)
			}
		}
		w.AssertSafe(t)
	})
}
