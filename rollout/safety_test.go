package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Regression tests for rollouts that could take a service down or wait
// forever in silence. Each names the defect it pins.

var pausedAt30 = strategy.Canary{MaxSurgePercent: 40, Steps: []strategy.CanaryStep{
	strategy.SetWeight(30), strategy.PauseUntilResumed(), strategy.SetWeight(60),
}}

// reconcileUntil reconciles (advancing the clock by each requeue, at least
// 100ms) until cond holds, and returns the last state and error.
func (g *rig) reconcileUntil(t *testing.T, s strategy.State, max int, cond func(strategy.State) bool) (strategy.State, error) {
	t.Helper()
	var err error
	for i := 0; i < max; i++ {
		var requeue time.Duration
		s, requeue, err = g.runner.Reconcile(context.Background(), s)
		if cond(s) {
			return s, err
		}
		g.clock.Advance(max64(requeue, 100*time.Millisecond))
	}
	t.Fatalf("condition not reached after %d reconciles: %s: %s (err %v)", max, s.Phase, s.Message, err)
	return s, err
}

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

func condition(s strategy.State, typ string) metav1.Condition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func writes(g *rig) int { return g.router.Writes() + g.a.Writes() + g.b.Writes() }

// Defect: the zero State (a new CRD object's status, or a stored null)
// scaled the stable side, which carries all traffic, to 0.
func TestZeroStateAppliesNothing(t *testing.T) {
	var fromNull strategy.State
	if err := json.Unmarshal([]byte("null"), &fromNull); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]strategy.State{
		"zero":          {},
		"null":          fromNull,
		"NewState(v,v)": strategy.NewState("v1", "v1"),
	} {
		t.Run(name, func(t *testing.T) {
			g := newRig(pausedAt30, fake.Lag{})
			var errs []error
			var requeues []time.Duration
			for i := 0; i < 5; i++ {
				next, requeue, err := g.runner.Reconcile(context.Background(), s)
				errs, requeues = append(errs, err), append(requeues, requeue)
				s = next
				g.clock.Advance(time.Minute)
			}
			if got := g.a.Status(); got.Capacity != 100 || got.Ready != 100 {
				t.Fatalf("stable side A now %+v: %v", got, g.a.History())
			}
			if n := writes(g) + g.router.Reads() + g.a.Reads() + g.b.Reads(); n != 0 {
				t.Fatalf("%d adapter calls for an idle state: %v %v %v", n, g.router.History(), g.a.History(), g.b.History())
			}
			for i := range errs {
				if errs[i] != nil || requeues[i] != 0 {
					t.Fatalf("reconcile %d: err %v requeue %s", i, errs[i], requeues[i])
				}
			}
			if !s.Idle() {
				t.Fatalf("no longer idle: %+v", s)
			}
		})
	}
	// The one-line start: the zero state's Retarget records v1 unobserved;
	// the first reconcile reads the adapters and writes nothing (all
	// traffic on A: adopted as idle there), later ones read nothing; then
	// v2 rolls out from it.
	g := newRig(strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 50}, fake.Lag{})
	s := strategy.State{}.Retarget("v1", t0)
	if s.StableRevision != "v1" || s.CanaryRevision != "v1" || !s.Unobserved || s.Idle() {
		t.Fatalf("unobserved %+v", s)
	}
	for i := 0; i < 5; i++ {
		next, _, err := g.runner.Reconcile(context.Background(), s)
		if err != nil || !next.Idle() || next.StableSide != strategy.SideA {
			t.Fatalf("reconcile %d of the unobserved state: err %v, %+v", i, err, next)
		}
		s = next
	}
	if n := writes(g); n != 0 || g.router.Reads() != 1 || g.a.Reads() != 1 || g.b.Reads() != 1 {
		t.Fatalf("adopting: %d writes, reads router %d A %d B %d (want 0 and one each)", n, g.router.Reads(), g.a.Reads(), g.b.Reads())
	}
	s = s.Retarget("v2", t0)
	end, _ := g.run(t, s, 1000)
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || g.traffic.Stats().Dropped != 0 || g.traffic.Stats().Overloaded != 0 {
		t.Fatalf("ended %s stable %s traffic %+v", end.Phase, end.StableRevision, g.traffic.Stats())
	}
}

// Defect: a corrupt but parseable stored state routed everything to a canary
// with nothing ready, or scaled the stable side to 0 under its own traffic.
func TestCorruptStoredStateAppliesNothing(t *testing.T) {
	for name, stored := range map[string]string{
		"unknown phase, weight 500": `{"phase":"Bogus","desired":{"weight":500}}`,
		"completing below 100": `{"stableRevision":"v1","canaryRevision":"v2","phase":"Completing",
			"desired":{"weight":30,"stableCapacity":70,"canaryCapacity":40}}`,
		"stable below its traffic": `{"stableRevision":"v1","canaryRevision":"v2","phase":"Progressing",
			"desired":{"weight":30,"stableCapacity":0,"canaryCapacity":40}}`,
	} {
		t.Run(name, func(t *testing.T) {
			var s strategy.State
			if err := json.Unmarshal([]byte(stored), &s); err != nil {
				t.Fatal(err)
			}
			g := newRig(pausedAt30, fake.Lag{})
			g.router.Overwrite(rollout.Weights{A: 70, B: 30})
			g.b.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: 40})
			var errs []error
			for i := 0; i < 5; i++ {
				next, _, err := g.runner.Reconcile(context.Background(), s)
				errs = append(errs, err)
				s = next
				g.clock.Advance(time.Minute)
			}
			if n := g.router.Writes() + g.a.Writes(); n != 0 {
				t.Fatalf("%d writes from a corrupt state: %v %v", n, g.router.History(), g.a.History())
			}
			if got := g.a.Status(); got.Capacity != 100 {
				t.Fatalf("stable side scaled to %d", got.Capacity)
			}
			for i, err := range errs {
				if !errors.Is(err, strategy.ErrInvalidState) {
					t.Fatalf("reconcile %d: err %v, want ErrInvalidState", i, err)
				}
				var se *strategy.StateError
				if !errors.As(err, &se) || len(se.Errors) == 0 || se.Errors[0].Field == "" {
					t.Fatalf("error %v does not name the field", err)
				}
			}
			if c := condition(s, strategy.ConditionDegraded); c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonInvalidState {
				t.Fatalf("Degraded %+v", c)
			}
		})
	}
}

// toPaused30 runs pausedAt30 until it waits for Resume at weight 30.
func toPaused30(t *testing.T, g *rig) strategy.State {
	t.Helper()
	s, err := g.reconcileUntil(t, strategy.NewState("v1", "v2"), 200, func(s strategy.State) bool {
		return s.Phase == strategy.PhasePaused && s.Observed.Weight == 30 && s.Observed.WeightApplied
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Defect: weights that do not sum to 100 while the canary's weight equals
// the desired one were never repaired.
func TestInvalidSplitIsRepaired(t *testing.T) {
	for _, w := range []rollout.Weights{{A: 100, B: 30}, {A: 0, B: 30}, {A: 50, B: 30}} {
		g := newRig(pausedAt30, fake.Lag{})
		s := toPaused30(t, g)
		g.router.Overwrite(w)
		s, _ = g.reconcileUntil(t, s, 20, func(s strategy.State) bool { return g.router.Applied() == rollout.Weights{A: 70, B: 30} })
		if s.Phase != strategy.PhasePaused {
			t.Fatalf("after repairing %+v: %s %s", w, s.Phase, s.Message)
		}
	}
}

// Defect: a route that no gateway ever writes status for stalled with no
// write, no error and Degraded False, even past the progress deadline.
func TestRouteWithoutStatusDegradesAtTheDefaultDeadline(t *testing.T) {
	g := newRig(pausedAt30, fake.Lag{})
	g.router.SetLag(fake.Lag{Reads: 1 << 30})
	g.router.Overwrite(rollout.Weights{A: 100}) // a write nobody will ever accept
	s := strategy.NewState("v1", "v2")
	start := g.clock.Now()
	s, _ = g.reconcileUntil(t, s, 10000, func(s strategy.State) bool {
		return condition(s, strategy.ConditionDegraded).Status == metav1.ConditionTrue
	})
	if c := condition(s, strategy.ConditionDegraded); c.Reason != strategy.ReasonProgressDeadlineExceeded {
		t.Fatalf("Degraded %+v", c)
	}
	if got := g.clock.Now().Sub(start); got < strategy.DefaultProgressDeadline || got > strategy.DefaultProgressDeadline+strategy.DefaultPollInterval {
		t.Fatalf("Degraded after %s, want the default deadline %s", got, strategy.DefaultProgressDeadline)
	}
}

// Defects: an abort froze while a parent rejected the route, and while the
// route held an invalid split.
func TestAbortWalksBackPastARejectingParentAndAnInvalidSplit(t *testing.T) {
	t.Run("rejected", func(t *testing.T) {
		g := newRig(pausedAt30, fake.Lag{})
		s := toPaused30(t, g)
		g.router.Reject("ResolvedRefs False: backend other-svc not found")
		s = s.Abort("bad canary", g.clock.Now())
		s, _ = g.reconcileUntil(t, s, 60, func(s strategy.State) bool {
			st, _ := g.router.Weights(context.Background())
			return st.Weights == rollout.Weights{A: 100}
		})
		if s.Phase != strategy.PhaseAborting {
			t.Fatalf("phase %s", s.Phase)
		}
		// The canary keeps its capacity while the data plane may still send
		// it the old share; once the parent accepts, the walk back ends.
		if g.b.Status().Capacity == 0 {
			t.Fatalf("canary scaled to 0 before the route was accepted")
		}
		g.router.Reject("")
		s, _ = g.reconcileUntil(t, s, 60, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted })
		if got := g.b.Status().Capacity; got != 0 {
			t.Fatalf("canary capacity %d after the abort", got)
		}
	})
	t.Run("invalid split", func(t *testing.T) {
		g := newRig(pausedAt30, fake.Lag{})
		s := toPaused30(t, g)
		s = s.Abort("bad canary", g.clock.Now())
		g.router.Overwrite(rollout.Weights{A: 100, B: 30})
		s, _ = g.reconcileUntil(t, s, 60, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted })
		if got := g.router.Applied(); got != (rollout.Weights{A: 100}) || s.Aborted.Reason != "bad canary" {
			t.Fatalf("route %+v after the abort (%+v)", got, s.Aborted)
		}
	})
}

// Defect: a deleted route was invisible in status, the deadline could not
// fire, and when the route came back at 100/0 the canary was written back
// to 30 before walking back.
func TestDeletedRouteSurfacesAndCountsTowardTheDeadline(t *testing.T) {
	strat := pausedAt30
	strat.ProgressDeadline = metav1.Duration{Duration: 5 * time.Minute}
	strat.AbortOnProgressDeadline = true
	g := newRig(strat, fake.Lag{})
	s := toPaused30(t, g)
	g.router.Delete()
	next, _, err := g.runner.Reconcile(context.Background(), s)
	if !errors.Is(err, rollout.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	if c := condition(next, strategy.ConditionDegraded); c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonObservationFailed ||
		!strings.Contains(c.Message, "not found") {
		t.Fatalf("Degraded %+v", c)
	}
	failing := g.clock.Now()
	s, _ = g.reconcileUntil(t, next, 1000, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborting })
	if got := g.clock.Now().Sub(failing); got < 5*time.Minute || got > 5*time.Minute+strategy.DefaultPollInterval {
		t.Fatalf("aborted %s after the route went away, want the deadline", got)
	}
	if s.Aborted == nil || s.Aborted.Reason != strategy.ReasonProgressDeadlineExceeded {
		t.Fatalf("abort %+v", s.Aborted)
	}
	g.router.Create(rollout.Weights{A: 100})
	before := len(g.router.History())
	s, _ = g.reconcileUntil(t, s, 60, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted })
	for _, c := range g.router.History()[before:] {
		if c.Op == "SetWeights" && c.Arg != "A=100 B=0" {
			t.Fatalf("wrote %s to a route that came back at 100/0", c.Arg)
		}
	}
	if !s.FailingSince.IsZero() || condition(s, strategy.ConditionDegraded).Reason != strategy.ReasonAborted {
		t.Fatalf("after recovery: failing since %v, Degraded %+v", s.FailingSince, condition(s, strategy.ConditionDegraded))
	}
}

// Defect: a canary that crashes under traffic without any health signal
// kept its traffic forever.
func TestCrashedCanaryIsAborted(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{strategy.SetWeight(90), strategy.PauseUntilResumed()}}
	g := newRig(strat, fake.Lag{})
	s, _ := g.reconcileUntil(t, strategy.NewState("v1", "v2"), 200, func(s strategy.State) bool {
		return s.Phase == strategy.PhasePaused && s.Observed.Weight == 90
	})
	g.b.CrashLoop(true)
	g.b.Crash(g.b.Replicas())
	s, _ = g.reconcileUntil(t, s, 20, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborting })
	if s.Aborted == nil || s.Aborted.Reason != strategy.ReasonCanaryReadinessLost {
		t.Fatalf("abort %+v", s.Aborted)
	}
	s, _ = g.reconcileUntil(t, s, 100, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted })
	if got := g.router.Applied(); got != (rollout.Weights{A: 100}) {
		t.Fatalf("route %+v after the abort", got)
	}
}

// Readiness lost on the stable side holds progress with Degraded, and the
// rollout goes on once it is back.
func TestStableReadinessLostHoldsProgress(t *testing.T) {
	strat := strategy.Canary{MaxSurgePercent: 40, Steps: []strategy.CanaryStep{
		strategy.SetWeight(30), strategy.Pause(time.Minute), strategy.SetWeight(60),
	}}
	g := newRig(strat, fake.Lag{Duration: 30 * time.Second})
	s, _ := g.reconcileUntil(t, strategy.NewState("v1", "v2"), 200, func(s strategy.State) bool {
		return s.Phase == strategy.PhasePaused && s.Observed.Weight == 30
	})
	g.a.Crash(5) // 5 of 10 stable replicas: ready 50 under 70 of traffic, replaced after 30s
	g.a.CrashLoop(true)
	hops := writes(g)
	s, _ = g.reconcileUntil(t, s, 200, func(s strategy.State) bool {
		return condition(s, strategy.ConditionDegraded).Reason == strategy.ReasonStableReadinessLost
	})
	g.clock.Advance(5 * time.Minute)
	s, _ = g.reconcileUntil(t, s, 5, func(s strategy.State) bool { return true })
	if writes(g) != hops || s.Desired.Weight != 30 {
		t.Fatalf("progress while the stable side lost readiness: weight %d, %d writes", s.Desired.Weight, writes(g)-hops)
	}
	g.a.CrashLoop(false)
	end, _ := g.run(t, s, 1000)
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s", end.Phase)
	}
}

// Defect: with one failed store write, Run lost an Abort command.
func TestRunKeepsACommandWhoseSaveFailed(t *testing.T) {
	g := newRig(pausedAt30, fake.Lag{Reads: 1})
	store := &fake.Store{}
	g.runner.Store = store
	cmds := make(chan rollout.Command)
	done := make(chan strategy.State, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		s, err := g.runner.Run(ctx, strategy.NewState("v1", "v2"), cmds)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- s
	}()
	waitFor(t, g.clock, func() bool { s, err := store.Load(ctx); return err == nil && s.Phase == strategy.PhasePaused })
	store.FailWith(errors.New("etcd unavailable"))
	cmds <- func(s strategy.State, now time.Time) strategy.State { return s.Abort("operator", now) }
	for i := 0; i < 3; i++ { // a few retries fail too
		g.clock.Advance(strategy.DefaultPollInterval)
		time.Sleep(10 * time.Millisecond)
	}
	store.FailWith(nil)
	var end strategy.State
	waitFor(t, g.clock, func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	})
	if end.Phase != strategy.PhaseAborted || end.Aborted == nil || end.Aborted.Reason != "operator" {
		t.Fatalf("ended %s abort %+v", end.Phase, end.Aborted)
	}
	if saved, _ := store.Load(ctx); saved.Phase != strategy.PhaseAborted {
		t.Fatalf("stored %s", saved.Phase)
	}
}

// Defect: a retry interval of 1ns validated.
func TestRunnerRejectsATinyRetryInterval(t *testing.T) {
	g := newRig(pausedAt30, fake.Lag{})
	g.runner.RetryInterval = time.Nanosecond
	if err := g.runner.Validate(); !errors.Is(err, rollout.ErrInvalid) || !strings.Contains(err.Error(), "RetryInterval") {
		t.Fatalf("Validate() = %v", err)
	}
}

// userStrategy is a strategy of a user's own, wrapping a Canary.
type userStrategy struct{ c strategy.Canary }

func (u userStrategy) Step(s strategy.State, now time.Time) strategy.Decision {
	return u.c.Step(s, now)
}
func (u userStrategy) Validate() error          { return u.c.Validate() }
func (u userStrategy) Shared() strategy.Options { return u.c.Options }
func (u userStrategy) Gates() []string          { return u.c.Gates() }

// A user's strategy is checked like the package's own: its capacity mode
// decides which adapters the Runner needs and how stored states are checked.
func TestRunnerTreatsAUserStrategyLikeItsOwn(t *testing.T) {
	fixed := userStrategy{strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(50)},
		Options: strategy.Options{Capacity: strategy.CapacityFixed}}}
	g := newRig(fixed, fake.Lag{})
	if err := g.runner.Validate(); !errors.Is(err, rollout.ErrInvalid) || !strings.Contains(err.Error(), "fixed capacity mode") {
		t.Fatalf("Validate() with capacity setters in the fixed mode = %v", err)
	}
	g.runner.A, g.runner.B = nil, nil
	if err := g.runner.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	managed := userStrategy{strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{strategy.SetWeight(50)}}}
	g = newRig(managed, fake.Lag{})
	// Valid in the fixed mode, invalid in the managed one: the stable side
	// below its traffic.
	s := strategy.NewState("v1", "v2")
	s.Phase, s.Desired = strategy.PhaseProgressing, strategy.Allocation{Weight: 30, StableCapacity: 50, CanaryCapacity: 30}
	if _, _, err := g.runner.Reconcile(context.Background(), s); !errors.Is(err, strategy.ErrInvalidState) {
		t.Fatalf("Reconcile = %v, want ErrInvalidState", err)
	}
}
