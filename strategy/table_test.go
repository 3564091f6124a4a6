package strategy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// Fixed instants, ten seconds apart, as golang.org/x/time/rate's tests do.
const tick = 10 * time.Second

var (
	t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	t1 = t0.Add(1 * tick)
	t2 = t0.Add(2 * tick)
	t3 = t0.Add(3 * tick)
	t4 = t0.Add(4 * tick)
	t5 = t0.Add(5 * tick)
	t6 = t0.Add(6 * tick)
	t9 = t0.Add(9 * tick)
)

// mt is t as a State records it: UTC, whole microseconds, what a JSON round
// trip of metav1.MicroTime keeps.
func mt(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.UTC().Truncate(time.Microsecond))
}

// tb is the part of testing.TB the helpers need.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// observe plays adapters that apply every hop of d at once and are ready
// at once, observed at now.
func observe(s *strategy.State, d strategy.Decision, now time.Time) {
	o := &s.Observed
	o.At = mt(now)
	if d.Weight.Set {
		o.Weight, o.WeightApplied = d.Weight.Value, true
	}
	if d.StableCapacity.Set {
		v := d.StableCapacity.Value
		o.Stable = strategy.SideObservation{Capacity: v, Ready: v, Settled: true}
	}
	if d.CanaryCapacity.Set {
		v := d.CanaryCapacity.Value
		o.Canary = strategy.SideObservation{Capacity: v, Ready: v, Settled: true}
	}
}

// walk steps s with instant adapters from now until done(s) holds, stepping
// again at once after a hop and after RequeueAfter otherwise, as Plan does.
// It returns the state and the instant reached.
func walk(t tb, strat strategy.Strategy, s strategy.State, now time.Time, done func(*strategy.State) bool) (strategy.State, time.Time) {
	t.Helper()
	if done(&s) {
		return s, now
	}
	for range 1000 {
		d := strat.Step(s, now)
		s = d.State
		observe(&s, d, now)
		if done(&s) {
			return s, now
		}
		if !d.HasHops() {
			if d.RequeueAfter <= 0 {
				t.Fatalf("walk: stuck in phase %s (%s) at %v: %+v", s.Phase, s.Message, now, s)
			}
			now = now.Add(d.RequeueAfter)
		}
	}
	t.Fatalf("walk: no end after 1000 steps: %+v", s)
	return s, now
}

func phaseIs(p strategy.Phase) func(*strategy.State) bool {
	return func(s *strategy.State) bool { return s.Phase == p }
}

// fixtureCanary is the canary the command fixtures are walked with.
var fixtureCanary = strategy.Canary{
	Steps: []strategy.CanaryStep{
		strategy.SetWeight(20),
		strategy.PauseUntilResumed(),
		strategy.SetWeight(50),
	},
	MaxSurgePercent: 100,
}

// fixtures returns a state in each phase, all walked from t0; none records a
// time after t5.
func fixtures(t tb) map[string]strategy.State {
	t.Helper()
	c := fixtureCanary
	fresh := strategy.NewState("v1", "v2")
	// progressing: the canary capacity hop toward 20 asked at t0.
	d := c.Step(fresh, t0)
	progressing := d.State
	observe(&progressing, d, t0)
	pausedStep, _ := walk(t, c, progressing, t0, phaseIs(strategy.PhasePaused))
	manual := progressing.Pause(t1)
	unhealthy := progressing
	unhealthy.AwaitingResume, unhealthy.PauseReason, unhealthy.PausedAt = true, strategy.ReasonUnhealthy, mt(t1)
	unhealthy.UnhealthyCount = 3
	aborting := pausedStep.Abort("p99", t1)
	aborted, _ := walk(t, c, aborting, t1, phaseIs(strategy.PhaseAborted))
	retargeting := pausedStep.Retarget("v3", t1)
	rolledBack, _ := walk(t, c, pausedStep.Retarget("v1", t1), t1, phaseIs(strategy.PhaseRolledBack))
	slow := c
	slow.ScaleDownDelay = metav1.Duration{Duration: time.Hour}
	completing, _ := walk(t, slow, pausedStep.Resume(t1), t1, phaseIs(strategy.PhaseCompleting))
	succeeded, _ := walk(t, c, pausedStep.Resume(t1), t1, phaseIs(strategy.PhaseSucceeded))
	return map[string]strategy.State{
		"fresh":       fresh,
		"progressing": progressing,
		"pausedStep":  pausedStep,
		"manualPause": manual,
		"unhealthy":   unhealthy,
		"aborting":    aborting,
		"aborted":     aborted,
		"retargeting": retargeting,
		"rollingBack": pausedStep.Retarget("v1", t1),
		"rolledBack":  rolledBack,
		"completing":  completing,
		"succeeded":   succeeded,
	}
}

// Commands at t9, later than anything the fixtures record.
var (
	pause       = func(s strategy.State) strategy.State { return s.Pause(t9) }
	resume      = func(s strategy.State) strategy.State { return s.Resume(t9) }
	abort       = func(s strategy.State) strategy.State { return s.Abort("p50", t9) }
	promote     = func(s strategy.State) strategy.State { return s.Promote(t9) }
	promoteFull = func(s strategy.State) strategy.State { return s.PromoteFull(t9) }
	retry       = func(s strategy.State) strategy.State { return s.Retry(t9) }
	retarget    = func(rev string) func(strategy.State) strategy.State {
		return func(s strategy.State) strategy.State { return s.Retarget(rev, t9) }
	}
)

func TestCommands(t *testing.T) {
	fx := fixtures(t)
	cmdAt := func(s *strategy.State) { s.LastCommandAt = mt(t9) }
	paused := func(s *strategy.State) {
		cmdAt(s)
		s.AwaitingResume, s.PauseReason, s.PausedAt = true, strategy.ReasonManualPause, mt(t9)
	}
	resumed := func(s *strategy.State) {
		cmdAt(s)
		s.AwaitingResume, s.PauseReason, s.Resumed = false, "", true
	}
	aborted := func(reason string) func(s *strategy.State) {
		return func(s *strategy.State) {
			cmdAt(s)
			s.Aborted = &strategy.AbortStatus{Reason: reason, At: mt(t9)}
			s.Phase = strategy.PhaseAborting
			s.AwaitingResume, s.PauseReason = false, ""
			s.PromoteRequested, s.PromoteFullRequested = false, false
		}
	}
	promoted := func(s *strategy.State) { cmdAt(s); s.PromoteRequested = true }
	promotedFull := func(s *strategy.State) {
		cmdAt(s)
		s.PromoteFullRequested = true
		s.AwaitingResume, s.PauseReason = false, ""
	}
	retried := func(s *strategy.State) {
		cmdAt(s)
		s.Aborted = nil
		s.Phase = strategy.PhaseProgressing
		s.FinishedAt = metav1.MicroTime{}
		s.UnhealthyCount = 0
		s.StepsHash = ""
	}
	rolledBackTo := func(rev string) func(s *strategy.State) {
		return func(s *strategy.State) {
			cmdAt(s)
			s.Phase = strategy.PhaseRolledBack
			s.CanaryRevision = rev
			s.PendingRevision = ""
			s.Aborted = nil
		}
	}
	walkBackFor := func(rev string) func(s *strategy.State) {
		return func(s *strategy.State) {
			aborted(strategy.ReasonRetarget)(s)
			s.PendingRevision = rev
		}
	}
	restartedWith := func(rev string) func(s *strategy.State) {
		return func(s *strategy.State) {
			cmdAt(s)
			s.CanaryRevision, s.PendingRevision = rev, ""
			s.Phase, s.StepIndex, s.StepsHash = "", 0, ""
			s.Aborted = nil
			s.AwaitingResume, s.PauseReason, s.Resumed = false, "", false
			s.PromoteRequested, s.PromoteFullRequested, s.SteadyRequested = false, false, false
			s.UnhealthyCount = 0
			s.ReachedAt, s.FinishedAt = metav1.MicroTime{}, metav1.MicroTime{}
		}
	}

	tests := []commandCase{
		// Pause holds anything but an abort or a finished rollout.
		{"fresh", "Pause", pause, paused},
		{"progressing", "Pause", pause, paused},
		{"completing", "Pause", pause, paused},
		{"pausedStep", "Pause", pause, nil},
		{"manualPause", "Pause", pause, nil},
		{"unhealthy", "Pause", pause, nil},
		{"aborting", "Pause", pause, nil},
		{"retargeting", "Pause", pause, nil},
		{"aborted", "Pause", pause, nil},
		{"rolledBack", "Pause", pause, nil},
		{"succeeded", "Pause", pause, nil},

		// Resume ends a pause of any kind; only a pause step (or an
		// inconclusive gate) counts as the step being done.
		{"pausedStep", "Resume", resume, resumed},
		{"manualPause", "Resume", resume, func(s *strategy.State) { resumed(s); s.Resumed = false }},
		{"unhealthy", "Resume", resume, func(s *strategy.State) { resumed(s); s.Resumed = false; s.UnhealthyCount = 0 }},
		{"fresh", "Resume", resume, nil},
		{"progressing", "Resume", resume, nil},
		{"completing", "Resume", resume, nil},
		{"aborting", "Resume", resume, nil},
		{"aborted", "Resume", resume, nil},
		{"succeeded", "Resume", resume, nil},

		// Abort walks back from anywhere but a walk back or an end.
		{"fresh", "Abort", abort, aborted("p50")},
		{"progressing", "Abort", abort, aborted("p50")},
		{"pausedStep", "Abort", abort, aborted("p50")},
		{"manualPause", "Abort", abort, aborted("p50")},
		{"unhealthy", "Abort", abort, aborted("p50")},
		{"completing", "Abort", abort, aborted("p50")},
		{"progressing", "Abort without a reason", func(s strategy.State) strategy.State { return s.Abort("", t9) }, aborted(strategy.ReasonAborted)},
		{"aborting", "Abort", abort, nil},
		// During the walk back a Retarget to a third revision began, an
		// Abort stops that revision: the rollout will end Aborted with it
		// as the canary.
		{"retargeting", "Abort", abort, func(s *strategy.State) {
			cmdAt(s)
			s.Aborted = &strategy.AbortStatus{Reason: "p50", At: mt(t9)}
		}},
		{"rollingBack", "Abort", abort, nil},
		{"aborted", "Abort", abort, nil},
		{"rolledBack", "Abort", abort, nil},
		{"succeeded", "Abort", abort, nil},

		// Promote finishes the current step.
		{"fresh", "Promote", promote, promoted},
		{"progressing", "Promote", promote, promoted},
		{"pausedStep", "Promote", promote, promoted},
		{"manualPause", "Promote", promote, promoted},
		{"completing", "Promote", promote, nil},
		{"aborting", "Promote", promote, nil},
		{"aborted", "Promote", promote, nil},
		{"rolledBack", "Promote", promote, nil},
		{"succeeded", "Promote", promote, nil},

		// PromoteFull walks to 100 and ends a manual pause.
		{"progressing", "PromoteFull", promoteFull, promotedFull},
		{"pausedStep", "PromoteFull", promoteFull, promotedFull},
		{"manualPause", "PromoteFull", promoteFull, promotedFull},
		{"completing", "PromoteFull", promoteFull, nil},
		{"aborting", "PromoteFull", promoteFull, nil},
		{"aborted", "PromoteFull", promoteFull, nil},
		{"succeeded", "PromoteFull", promoteFull, nil},

		// Retry restarts an abort, not a walk back for a Retarget.
		{"aborted", "Retry", retry, retried},
		{"aborting", "Retry", retry, retried},
		{"retargeting", "Retry", retry, nil},
		{"rollingBack", "Retry", retry, nil},
		{"fresh", "Retry", retry, nil},
		{"progressing", "Retry", retry, nil},
		{"pausedStep", "Retry", retry, nil},
		{"completing", "Retry", retry, nil},
		{"rolledBack", "Retry", retry, nil},
		{"succeeded", "Retry", retry, nil},

		// Retarget: A->B->A, A->B->C, A->B->A->B.
		{"fresh", "Retarget to the canary", retarget("v2"), nil},
		{"fresh", "Retarget to nothing", retarget(""), nil},
		{"fresh", "Retarget to the stable", retarget("v1"), walkBackFor("v1")},
		{"fresh", "Retarget to another", retarget("v3"), walkBackFor("v3")},
		{"progressing", "Retarget to the canary", retarget("v2"), nil},
		{"progressing", "Retarget to nothing", retarget(""), nil},
		{"progressing", "Retarget to the stable", retarget("v1"), walkBackFor("v1")},
		{"progressing", "Retarget to another", retarget("v3"), walkBackFor("v3")},
		{"pausedStep", "Retarget to another", retarget("v3"), walkBackFor("v3")},
		{"manualPause", "Retarget to the stable", retarget("v1"), walkBackFor("v1")},
		{"completing", "Retarget to the stable", retarget("v1"), walkBackFor("v1")},
		{"retargeting", "Retarget back to the canary", retarget("v2"), func(s *strategy.State) {
			cmdAt(s)
			s.PendingRevision, s.Aborted, s.Phase, s.StepsHash = "", nil, strategy.PhaseProgressing, ""
		}},
		{"retargeting", "Retarget to the stable", retarget("v1"), func(s *strategy.State) { cmdAt(s); s.PendingRevision = "v1" }},
		{"retargeting", "Retarget to the pending", retarget("v3"), func(s *strategy.State) { cmdAt(s) }},
		{"retargeting", "Retarget to nothing", retarget(""), nil},
		{"aborting", "Retarget to another", retarget("v3"), func(s *strategy.State) { cmdAt(s); s.PendingRevision = "v3" }},
		{"aborting", "Retarget to the canary", retarget("v2"), nil},
		{"aborted", "Retarget to the stable", retarget("v1"), func(s *strategy.State) { rolledBackTo("v1")(s); s.Message = strategy.ReasonRolledBack }},
		{"aborted", "Retarget to the canary", retarget("v2"), nil},
		{"aborted", "Retarget to another", retarget("v3"), restartedWith("v3")},
		{"rolledBack", "Retarget to the stable", retarget("v1"), nil},
		{"rolledBack", "Retarget to another", retarget("v4"), restartedWith("v4")},
		{"succeeded", "Retarget to the stable", retarget("v2"), nil},
		{"succeeded", "Retarget to the old stable", retarget("v1"), restartedWith("v1")},
		{"succeeded", "Retarget to nothing", retarget(""), nil},
	}
	runCommandCases(t, fx, tests)
}

// commandCase is a command applied to a fixture, and what it changes.
type commandCase struct {
	fixture string
	name    string
	cmd     func(strategy.State) strategy.State
	want    func(*strategy.State) // nil: the command is a no-op
}

// runCommandCases checks that each command's result is its fixture with
// exactly the changes want makes, and that the fixture is left as it was.
func runCommandCases(t *testing.T, fx map[string]strategy.State, tests []commandCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.fixture+"/"+tt.name, func(t *testing.T) {
			in, ok := fx[tt.fixture]
			if !ok {
				t.Fatalf("no fixture %q", tt.fixture)
			}
			before := *in.DeepCopy()
			want := *in.DeepCopy()
			if tt.want != nil {
				tt.want(&want)
			}
			got := tt.cmd(in)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, in); diff != "" {
				t.Errorf("the command modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

// A command given a time earlier than one the state records happens at that
// recorded time: the clock never runs backwards.
func TestCommandTimeBackwards(t *testing.T) {
	s := fixtures(t)["manualPause"] // records t1 as PausedAt and LastCommandAt
	got := s.Resume(t0.Add(-time.Hour))
	if want := mt(t1); !got.LastCommandAt.Equal(&want) {
		t.Errorf("LastCommandAt = %v, want %v", got.LastCommandAt, want)
	}
	got = fixtures(t)["pausedStep"].Abort("x", t0.Add(-time.Hour)) // latest record t0
	if want := (strategy.AbortStatus{Reason: "x", At: mt(t0)}); got.Aborted == nil || !cmp.Equal(want, *got.Aborted) {
		t.Errorf("Aborted = %+v, want %+v", got.Aborted, want)
	}
}

// set is a Target asking for v.
func set(v int32) strategy.Target { return strategy.Target{Set: true, Value: v} }

// hopsOf is the part of a decision the Step tables compare.
type hopsOf struct {
	Weight, Stable, Canary strategy.Target
	RequeueAfter           time.Duration
	Phase                  strategy.Phase
}

func hopsIn(d strategy.Decision) hopsOf {
	return hopsOf{d.Weight, d.StableCapacity, d.CanaryCapacity, d.WatchedRequeueAfter, d.State.Phase}
}

// stepChecked steps in at now and fails if Step modified in.
func stepChecked(t tb, strat strategy.Strategy, in strategy.State, now time.Time) strategy.Decision {
	t.Helper()
	before := *in.DeepCopy()
	d := strat.Step(in, now)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("Step modified its input (-before +after):\n%s", diff)
	}
	return d
}

func cond(s *strategy.State, typ string) metav1.Condition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// without is cs without the condition of type typ.
func without(cs []metav1.Condition, typ string) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range cs {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	return out
}

var incremental = strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: 3 * tick}, MaxSurgePercent: 30}

// TestStepInterval: an Incremental weight hop waits for Interval after the
// last one, and RequeueAfter is exactly the time left.
func TestStepInterval(t *testing.T) {
	// At t0: canary capacity 10, weight 10 (WeightChangedAt t0), the
	// stable side shrunk to 90.
	s, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool {
		return s.Desired.Weight == 10 && s.Desired.StableCapacity == 90
	})
	if want := mt(t0); !s.WeightChangedAt.Equal(&want) {
		t.Fatalf("WeightChangedAt = %v, want %v", s.WeightChangedAt, want)
	}
	// The capacity of the next weight already there (TestStepIntervalPrepares
	// covers when it is asked for): what is left is the interval.
	s.Desired.CanaryCapacity = 20
	s.Observed.Canary.Capacity, s.Observed.Canary.Ready = 20, 20
	tests := []struct {
		name string
		now  time.Time
		want hopsOf
	}{
		{"at once", t0, hopsOf{RequeueAfter: 3 * tick, Phase: strategy.PhaseProgressing}},
		{"t1", t1, hopsOf{RequeueAfter: 2 * tick, Phase: strategy.PhaseProgressing}},
		{"a nanosecond early", t3.Add(-time.Nanosecond), hopsOf{RequeueAfter: time.Nanosecond, Phase: strategy.PhaseProgressing}},
		{"to the instant", t3, hopsOf{Weight: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}},
		{"late", t5, hopsOf{Weight: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}},
		{"time ran backwards", t0.Add(-time.Hour), hopsOf{RequeueAfter: 3 * tick, Phase: strategy.PhaseProgressing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := stepChecked(t, incremental, s, tt.now)
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if d.Weight.Set {
				if want := mt(tt.now); !d.State.WeightChangedAt.Equal(&want) {
					t.Errorf("WeightChangedAt = %v, want %v", d.State.WeightChangedAt, want)
				}
			}
		})
	}
	// Promote skips the wait for the interval.
	d := stepChecked(t, incremental, s.Promote(t1), t1)
	if diff := cmp.Diff(set(20), d.Weight); diff != "" {
		t.Errorf("after Promote (-want +got):\n%s", diff)
	}
}

// TestStepTimedPause: a timed pause counts from the moment the previous step
// is observed complete and ends to the instant.
func TestStepTimedPause(t *testing.T) {
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(3 * tick), strategy.SetWeight(40)},
		MaxSurgePercent: 100,
	}
	// Canary capacity 20 at t0, weight 20 asked at t0 but observed only at t2.
	d := c.Step(strategy.NewState("v1", "v2"), t0)
	s := d.State
	observe(&s, d, t0)
	d = stepChecked(t, c, s, t0)
	if diff := cmp.Diff(set(20), d.Weight); diff != "" {
		t.Fatalf("weight hop (-want +got):\n%s", diff)
	}
	s = d.State
	s.Observed.At = mt(t0.Add(time.Second)) // not applied yet
	d = stepChecked(t, c, s, t0.Add(time.Second))
	if diff := cmp.Diff(hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Fatalf("waiting for the weight (-want +got):\n%s", diff)
	}
	s = d.State
	observe(&s, strategy.Decision{Weight: set(20)}, t2)
	d = stepChecked(t, c, s, t2)
	// The pause begins; the stable side shrinks to its traffic at once.
	if diff := cmp.Diff(hopsOf{Stable: set(80), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhasePaused}, hopsIn(d)); diff != "" {
		t.Fatalf("pause start (-want +got):\n%s", diff)
	}
	s = d.State
	observe(&s, d, t2)
	d = stepChecked(t, c, s, t2)
	if diff := cmp.Diff(hopsOf{RequeueAfter: 3 * tick, Phase: strategy.PhasePaused}, hopsIn(d)); diff != "" {
		t.Fatalf("pause (-want +got):\n%s", diff)
	}
	if want := mt(t2); !d.State.StepStartedAt.Equal(&want) || d.State.StepIndex != 1 {
		t.Fatalf("pause step %d started at %v, want step 1 at %v", d.State.StepIndex, d.State.StepStartedAt, want)
	}
	s = d.State
	tests := []struct {
		name string
		now  time.Time
		want hopsOf
	}{
		{"t3", t3, hopsOf{RequeueAfter: 2 * tick, Phase: strategy.PhasePaused}},
		{"a microsecond early", t5.Add(-time.Microsecond), hopsOf{RequeueAfter: time.Microsecond, Phase: strategy.PhasePaused}},
		{"to the instant", t5, hopsOf{Canary: set(40), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}},
		{"late", t9, hopsOf{Canary: set(40), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}},
		{"time ran backwards", t0, hopsOf{RequeueAfter: 3 * tick, Phase: strategy.PhasePaused}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := stepChecked(t, c, s, tt.now)
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Promote ends a timed pause at once; a manual pause holds it.
	d = stepChecked(t, c, s.Promote(t3), t3)
	if diff := cmp.Diff(set(40), d.CanaryCapacity); diff != "" {
		t.Errorf("after Promote (-want +got):\n%s", diff)
	}
	d = stepChecked(t, c, s.Pause(t3), t9)
	if diff := cmp.Diff(hopsOf{Phase: strategy.PhasePaused}, hopsIn(d)); diff != "" {
		t.Errorf("paused by command (-want +got):\n%s", diff)
	}
}

// notApplied is an Incremental state whose last hop (weight 10, asked at t0)
// is not observed yet.
func notApplied(t tb, strat strategy.Strategy) strategy.State {
	t.Helper()
	s, _ := walk(t, strat, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.Desired.CanaryCapacity == 10 })
	d := strat.Step(s, t0)
	if !d.Weight.Set || d.Weight.Value != 10 {
		t.Fatalf("want a weight hop to 10, got %+v", d)
	}
	s = d.State
	s.Observed.At = mt(t0)
	return s
}

// TestStepPollBackoff: while a hop is not observed, RequeueAfter starts at
// InitialPollInterval and is as long as the wait so far, so polls double up
// to PollInterval; WatchedRequeueAfter, for a caller notified of every
// change, is the poll interval throughout. Neither passes the progress
// deadline.
func TestStepPollBackoff(t *testing.T) {
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	slow := incremental
	slow.PollInterval = metav1.Duration{Duration: 10 * time.Second}
	fixed := slow
	fixed.InitialPollInterval = slow.PollInterval
	first := slow
	first.InitialPollInterval = metav1.Duration{Duration: 500 * ms}
	nearDeadline := slow
	nearDeadline.ProgressDeadline = metav1.Duration{Duration: 3 * time.Second}
	tests := []struct {
		name           string
		strat          strategy.Incremental
		now            time.Time
		want, watched  time.Duration
		wantRepairHops bool
	}{
		{"at the hop", slow, t0, 100 * ms, 10 * time.Second, false},
		{"50ms after", slow, at(50 * ms), 100 * ms, 10 * time.Second, false},
		{"100ms after", slow, at(100 * ms), 100 * ms, 10 * time.Second, false},
		{"200ms after", slow, at(200 * ms), 200 * ms, 10 * time.Second, false},
		{"400ms after", slow, at(400 * ms), 400 * ms, 10 * time.Second, false},
		{"3.2s after", slow, at(3200 * ms), 3200 * ms, 10 * time.Second, false},
		{"6.4s after: to the repair", slow, at(6400 * ms), 3600 * ms, 10 * time.Second, false},
		{"9.95s after", slow, at(9950 * ms), 100 * ms, 10 * time.Second, false},
		{"a fixed poll", fixed, at(200 * ms), 10 * time.Second, 10 * time.Second, false},
		{"a first poll of 500ms", first, at(100 * ms), 500 * ms, 10 * time.Second, false},
		{"a first poll of 500ms, later", first, at(800 * ms), 800 * ms, 10 * time.Second, false},
		{"the deadline first", nearDeadline, at(2 * time.Second), time.Second, time.Second, false},
		{"the deadline before the first poll", nearDeadline, at(2950 * ms), 50 * ms, 50 * ms, false},
		// After a poll interval the hop is asked again (a lost write):
		// from then on, polls are at the poll interval.
		{"the repair", slow, at(10 * time.Second), 10 * time.Second, 10 * time.Second, true},
		{"after the repair", slow, at(11 * time.Second), 10 * time.Second, 10 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := notApplied(t, tt.strat) // weight 10 asked at t0, not observed
			d := stepChecked(t, tt.strat, s, tt.now)
			if d.HasHops() != tt.wantRepairHops {
				t.Fatalf("hops %+v, want hops: %v", hopsIn(d), tt.wantRepairHops)
			}
			if d.RequeueAfter != tt.want || d.WatchedRequeueAfter != tt.watched {
				t.Errorf("RequeueAfter %v, WatchedRequeueAfter %v; want %v, %v", d.RequeueAfter, d.WatchedRequeueAfter, tt.want, tt.watched)
			}
		})
	}
	// A time-gated wait is exact for both callers.
	s := notApplied(t, slow)
	observe(&s, strategy.Decision{Weight: set(10)}, t0)
	d := stepChecked(t, slow, s, t0) // the stable side shrinks to its traffic
	s = d.State
	observe(&s, d, t0)
	d = stepChecked(t, slow, s, t1)
	if want := 2 * tick; d.RequeueAfter != want || d.WatchedRequeueAfter != want {
		t.Errorf("waiting for the interval: RequeueAfter %v, WatchedRequeueAfter %v; want %v for both", d.RequeueAfter, d.WatchedRequeueAfter, want)
	}
}

func TestStepProgressDeadline(t *testing.T) {
	withDeadline := func(abort bool) strategy.Incremental {
		in := incremental
		in.ProgressDeadline = metav1.Duration{Duration: 3 * tick}
		in.AbortOnProgressDeadline = abort
		in.PollInterval = metav1.Duration{Duration: time.Hour} // no repair of the hop within the test
		return in
	}
	noDeadline := incremental
	noDeadline.PollInterval = metav1.Duration{Duration: time.Hour}
	noDeadline.NoProgressDeadline = true
	defaultDeadline := incremental
	defaultDeadline.PollInterval = metav1.Duration{Duration: time.Hour}
	tests := []struct {
		name         string
		strat        strategy.Incremental
		now          time.Time
		want         hopsOf
		wantDegraded metav1.ConditionStatus
		wantAbort    string
	}{
		{"within: requeue at the deadline", withDeadline(false), t1, hopsOf{RequeueAfter: 2 * tick, Phase: strategy.PhaseProgressing}, metav1.ConditionFalse, ""},
		{"a second before", withDeadline(false), t3.Add(-time.Second), hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, metav1.ConditionFalse, ""},
		{"exceeded", withDeadline(false), t3, hopsOf{RequeueAfter: time.Hour, Phase: strategy.PhaseProgressing}, metav1.ConditionTrue, ""},
		{"exceeded, abort", withDeadline(true), t3, hopsOf{RequeueAfter: time.Hour, Phase: strategy.PhaseAborting}, metav1.ConditionTrue, strategy.ReasonProgressDeadlineExceeded},
		{"within, abort", withDeadline(true), t2, hopsOf{RequeueAfter: tick, Phase: strategy.PhaseProgressing}, metav1.ConditionFalse, ""},
		{"no deadline", noDeadline, t9, hopsOf{RequeueAfter: time.Hour, Phase: strategy.PhaseProgressing}, metav1.ConditionFalse, ""},
		{"default deadline, within", defaultDeadline, t0.Add(strategy.DefaultProgressDeadline - time.Minute), hopsOf{RequeueAfter: time.Minute, Phase: strategy.PhaseProgressing}, metav1.ConditionFalse, ""},
		{"default deadline, exceeded", defaultDeadline, t0.Add(strategy.DefaultProgressDeadline), hopsOf{RequeueAfter: time.Hour, Phase: strategy.PhaseProgressing}, metav1.ConditionTrue, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := notApplied(t, tt.strat)
			d := stepChecked(t, tt.strat, s, tt.now)
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := cond(&d.State, strategy.ConditionDegraded).Status; got != tt.wantDegraded {
				t.Errorf("Degraded = %q, want %q (%+v)", got, tt.wantDegraded, d.State.Conditions)
			}
			var gotAbort string
			if d.State.Aborted != nil {
				gotAbort = d.State.Aborted.Reason
			}
			if gotAbort != tt.wantAbort {
				t.Errorf("abort reason %q, want %q", gotAbort, tt.wantAbort)
			}
			if tt.wantDegraded == metav1.ConditionTrue && tt.wantAbort == "" {
				// The hop lands late: Degraded clears and the walk goes on.
				s := d.State
				observe(&s, strategy.Decision{Weight: set(10)}, t4)
				d := stepChecked(t, tt.strat, s, t4.Add(3*tick))
				if got := cond(&d.State, strategy.ConditionDegraded); got.Status != metav1.ConditionFalse {
					t.Errorf("after the hop landed, Degraded = %+v", got)
				}
				// The stable side shrinks to the traffic of the weight in force.
				if diff := cmp.Diff(set(90), d.StableCapacity); diff != "" {
					t.Errorf("after the hop landed (-want +got):\n%s", diff)
				}
			}
		})
	}
	// Pauses are exempt: a timed pause longer than the deadline is no delay.
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(time.Hour)},
		MaxSurgePercent: 100,
		Options:         strategy.Options{ProgressDeadline: metav1.Duration{Duration: tick}, AbortOnProgressDeadline: true},
	}
	s, _ := walk(t, c, strategy.NewState("v1", "v2"), t0, phaseIs(strategy.PhasePaused))
	d := stepChecked(t, c, s, t0.Add(59*time.Minute))
	if diff := cmp.Diff(hopsOf{RequeueAfter: time.Minute, Phase: strategy.PhasePaused}, hopsIn(d)); diff != "" {
		t.Errorf("pause (-want +got):\n%s", diff)
	}
	if got := cond(&d.State, strategy.ConditionDegraded).Status; got != metav1.ConditionFalse {
		t.Errorf("Degraded during a pause: %+v", d.State.Conditions)
	}
}

// TestStepUnhealthy: an unhealthy canary makes no progress; consecutive
// unhealthy observations (counted by distinct At) reach the threshold and
// abort, or pause by option.
func TestStepUnhealthy(t *testing.T) {
	with := func(action strategy.UnhealthyAction) strategy.Incremental {
		in := incremental
		in.UnhealthyThreshold = 2
		in.UnhealthyAction = action
		return in
	}
	// Mid-walk at weight 10 from t0, the stable side shrunk to 90 and the
	// canary's capacity for the next weight there; the interval ends at t3.
	base, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool {
		return s.Desired.Weight == 10 && s.Desired.StableCapacity == 90
	})
	base.Desired.CanaryCapacity = 20
	base.Observed.Canary.Capacity, base.Observed.Canary.Ready = 20, 20
	// An abort grows the stable side back first.
	aborting := hopsOf{Stable: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}
	const (
		ok  = strategy.HealthHealthy
		bad = strategy.HealthUnhealthy
		inc = strategy.HealthInconclusive
	)
	holding := hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}
	tests := []struct {
		name       string
		strat      strategy.Incremental
		start      time.Time         // the observations are stepped at start, start+1s, ...
		obs        []strategy.Health // each observed at the instant it is stepped
		sameAt     bool              // all observations carry the first one's At
		want       hopsOf
		wantCount  int32
		wantAbort  string
		wantReason string // PauseReason
	}{
		{"healthy", with(""), t3, []strategy.Health{ok},
			false, hopsOf{Weight: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 0, "", ""},
		{"one unhealthy holds", with(""), t3, []strategy.Health{bad}, false, holding, 1, "", ""},
		{"the same observation counts once", with(""), t1, []strategy.Health{bad, bad}, true, holding, 1, "", ""},
		{"a healthy one in between resets", with(""), t1, []strategy.Health{bad, ok, bad}, false, holding, 1, "", ""},
		{"threshold aborts", with(strategy.UnhealthyAbort), t1, []strategy.Health{bad, bad},
			false, aborting, 2, strategy.ReasonUnhealthy, ""},
		{"threshold pauses", with(strategy.UnhealthyPause), t1, []strategy.Health{bad, bad},
			false, hopsOf{Phase: strategy.PhasePaused}, 2, "", strategy.ReasonUnhealthy},
		{"inconclusive holds", with(""), t3, []strategy.Health{inc}, false, holding, 0, "", ""},
		{"inconclusive holds at every poll", with(""), t3, []strategy.Health{inc, inc, inc, inc}, false, holding, 0, "", ""},
		{"inconclusive, then healthy, goes on", with(""), t3, []strategy.Health{inc, inc, ok},
			false, hopsOf{Weight: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 0, "", ""},
		{"inconclusive neither counts nor resets", with(strategy.UnhealthyAbort), t1, []strategy.Health{bad, inc, inc, bad},
			false, aborting, 2, strategy.ReasonUnhealthy, ""},
		{"default threshold is 3", incremental, t1, []strategy.Health{bad, bad}, false, holding, 2, "", ""},
		{"default threshold is 3, reached", incremental, t1, []strategy.Health{bad, bad, bad},
			false, aborting, 3, strategy.ReasonUnhealthy, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			var d strategy.Decision
			for i, h := range tt.obs {
				now := tt.start.Add(time.Duration(i) * time.Second)
				s.Observed.Health, s.Observed.At = h, mt(now)
				if tt.sameAt {
					s.Observed.At = mt(tt.start)
				}
				d = stepChecked(t, tt.strat, s, now)
				s = d.State
				if i < len(tt.obs)-1 && d.HasHops() {
					t.Fatalf("observation %d: unexpected hops %+v", i, hopsIn(d))
				}
			}
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if last := tt.obs[len(tt.obs)-1]; last == inc && s.Message != "canary health inconclusive: holding" {
				t.Errorf("message %q, want the inconclusive hold", s.Message)
			}
			if s.UnhealthyCount != tt.wantCount {
				t.Errorf("UnhealthyCount = %d, want %d", s.UnhealthyCount, tt.wantCount)
			}
			var gotAbort string
			if s.Aborted != nil {
				gotAbort = s.Aborted.Reason
			}
			if gotAbort != tt.wantAbort || s.PauseReason != tt.wantReason {
				t.Errorf("abort %q pause %q, want abort %q pause %q", gotAbort, s.PauseReason, tt.wantAbort, tt.wantReason)
			}
		})
	}
}

// TestStepInconclusiveWithoutTraffic: an inconclusive health (no data yet)
// does not hold a canary that has no traffic: the first weight hop is made,
// so that data can come.
func TestStepInconclusiveWithoutTraffic(t *testing.T) {
	s, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool {
		return s.Observed.Canary.Capacity >= 10 && s.Observed.Weight == 0
	})
	s.Observed.Health, s.Observed.At = strategy.HealthInconclusive, mt(t0)
	d := stepChecked(t, incremental, s, t0)
	if diff := cmp.Diff(set(10), d.Weight); diff != "" {
		t.Errorf("first weight hop with an inconclusive health (-want +got):\n%s", diff)
	}
}

// gateCanary waits for gate "g" at weight 20, then walks to 50.
var gateCanary = strategy.Canary{
	Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.Gate("g"), strategy.SetWeight(50)},
	MaxSurgePercent: 100,
}

// atGate is gateCanary waiting at its gate, entered at t2.
func atGate(t tb) strategy.State {
	t.Helper()
	s, _ := walk(t, gateCanary, strategy.NewState("v1", "v2"), t2, func(s *strategy.State) bool { return s.StepIndex == 1 })
	if want := mt(t2); !s.StepStartedAt.Equal(&want) || s.Phase != strategy.PhaseProgressing {
		t.Fatalf("gate step started %v in phase %s, want %v", s.StepStartedAt, s.Phase, want)
	}
	return s
}

func TestStepGate(t *testing.T) {
	waiting := hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}
	passed := hopsOf{Canary: set(50), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}
	// The stable side was shrunk to its traffic while the gate was waited
	// for: the walk back grows it first.
	failed := hopsOf{Stable: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}
	tests := []struct {
		name      string
		gates     []strategy.GateResult
		want      hopsOf
		wantIndex int32
		wantAbort string
		wantPause string
	}{
		{"no verdict", nil, waiting, 1, "", ""},
		{"pending", []strategy.GateResult{{Name: "g", At: mt(t3)}}, waiting, 1, "", ""},
		{"another gate passed", []strategy.GateResult{{Name: "h", Verdict: strategy.VerdictPass, At: mt(t3)}}, waiting, 1, "", ""},
		{"pass", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass, At: mt(t3)}}, passed, 2, "", ""},
		{"pass without a time", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass}}, passed, 2, "", ""},
		{"pass at the step start", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass, At: mt(t2)}}, passed, 2, "", ""},
		{"stale pass", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass, At: mt(t1)}}, waiting, 1, "", ""},
		{"stale by a microsecond", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass, At: mt(t2.Add(-time.Microsecond))}}, waiting, 1, "", ""},
		{"fail", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictFail, At: mt(t3)}}, failed, 1, strategy.ReasonGateFailed, ""},
		{"stale fail", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictFail, At: mt(t1)}}, waiting, 1, "", ""},
		{"inconclusive", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictInconclusive, At: mt(t3)}}, hopsOf{Phase: strategy.PhasePaused}, 1, "", strategy.ReasonGateInconclusive},
		{"stale inconclusive", []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictInconclusive, At: mt(t1)}}, waiting, 1, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := atGate(t)
			s.Observed.Gates = tt.gates
			d := stepChecked(t, gateCanary, s, t3)
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			var gotAbort string
			if d.State.Aborted != nil {
				gotAbort = d.State.Aborted.Reason
			}
			if d.State.StepIndex != tt.wantIndex || gotAbort != tt.wantAbort || d.State.PauseReason != tt.wantPause {
				t.Errorf("step %d abort %q pause %q, want step %d abort %q pause %q",
					d.State.StepIndex, gotAbort, d.State.PauseReason, tt.wantIndex, tt.wantAbort, tt.wantPause)
			}
		})
	}
	// An inconclusive gate resumed counts as passed; so does a promoted one.
	s := atGate(t)
	s.Observed.Gates = []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictInconclusive, At: mt(t3)}}
	paused := stepChecked(t, gateCanary, s, t3).State
	for name, cmd := range map[string]func(strategy.State) strategy.State{
		"Resume":  func(s strategy.State) strategy.State { return s.Resume(t4) },
		"Promote": func(s strategy.State) strategy.State { return s.Promote(t4) },
	} {
		d := stepChecked(t, gateCanary, cmd(paused), t4)
		if diff := cmp.Diff(passed, hopsIn(d)); diff != "" {
			t.Errorf("inconclusive, then %s (-want +got):\n%s", name, diff)
		}
	}
}

// TestBug_ResumeManualPausePassesGate: a manual Pause and Resume while a
// gate waits for its verdict must not pass the gate. Resume ends "a manual
// pause, an indefinite pause step, an inconclusive gate (which then counts
// as passed)": only an inconclusive gate counts as passed, and a Gate step
// waits for a verdict (CanaryStep.Gate: fail -> abort).
func TestResumeOfAManualPauseKeepsTheGatePending(t *testing.T) {
	for _, reason := range []string{"manual", "unhealthy"} {
		t.Run(reason, func(t *testing.T) {
			strat := gateCanary
			s := atGate(t)
			if reason == "manual" {
				s = s.Pause(t3)
			} else {
				strat.UnhealthyAction, strat.UnhealthyThreshold = strategy.UnhealthyPause, 1
				s.Observed.Health, s.Observed.At = strategy.HealthUnhealthy, mt(t3)
			}
			d := stepChecked(t, strat, s, t3)
			if d.State.Phase != strategy.PhasePaused || d.HasHops() {
				t.Fatalf("want paused without hops, got %+v", hopsIn(d))
			}
			s = d.State.Resume(t4)
			s.Observed.Health, s.Observed.At = strategy.HealthHealthy, mt(t4)
			d = stepChecked(t, strat, s, t4)
			want := hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}
			if diff := cmp.Diff(want, hopsIn(d)); diff != "" || d.State.StepIndex != 1 {
				t.Errorf("after Resume with no verdict: step %d (want 1), (-want +got):\n%s", d.State.StepIndex, diff)
			}
			// A failing verdict reported after the Resume must still abort.
			s = d.State
			s.Observed.Gates = []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictFail, At: mt(t5)}}
			s.Observed.At = mt(t5)
			d = stepChecked(t, strat, s, t5)
			if d.State.Phase != strategy.PhaseAborting || d.State.Aborted == nil || d.State.Aborted.Reason != strategy.ReasonGateFailed {
				t.Errorf("gate failed after the Resume: phase %s aborted %+v, want Aborting for GateFailed", d.State.Phase, d.State.Aborted)
			}
		})
	}
}

// TestStepStepsEdited: steps edited mid-rollout continue at the first step
// whose weight is >= the current weight, never back at step 0 by default.
func TestStepStepsEdited(t *testing.T) {
	p := strategy.Pause(3 * tick)
	orig := strategy.Canary{
		Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), p, strategy.SetWeight(50), p, strategy.SetWeight(80),
		},
		MaxSurgePercent: 100,
	}
	// Paused at weight 50 (step 3) from t3 on.
	s, _ := walk(t, orig, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.StepIndex == 3 })
	if s.Phase != strategy.PhasePaused || s.Desired.Weight != 50 {
		t.Fatalf("fixture: phase %s weight %d", s.Phase, s.Desired.Weight)
	}
	w := strategy.SetWeight
	tests := []struct {
		name      string
		steps     []strategy.CanaryStep
		want      hopsOf
		wantIndex int32
	}{
		{"unchanged", orig.Steps, hopsOf{RequeueAfter: 2 * tick, Phase: strategy.PhasePaused}, 3},
		{"later steps edited", []strategy.CanaryStep{w(20), p, w(50), p, w(90), p}, hopsOf{RequeueAfter: 2 * tick, Phase: strategy.PhasePaused}, 3},
		{"weights raised", []strategy.CanaryStep{w(10), w(30), w(60), p, w(90)}, hopsOf{Canary: set(60), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 2},
		{"weights lowered", []strategy.CanaryStep{w(20), p, w(40), p, w(80)}, hopsOf{Canary: set(80), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 4},
		{"first step at the weight", []strategy.CanaryStep{w(50), strategy.Pause(time.Hour), w(70)}, hopsOf{RequeueAfter: time.Hour, Phase: strategy.PhasePaused}, 1},
		{"all below", []strategy.CanaryStep{w(10), p, w(20)}, hopsOf{Canary: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 3},
		{"none", nil, hopsOf{Canary: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 0},
		{"fewer steps", []strategy.CanaryStep{w(20), p}, hopsOf{Canary: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := orig
			c.Steps = tt.steps
			d := stepChecked(t, c, s, t4)
			if diff := cmp.Diff(tt.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if d.State.StepIndex != tt.wantIndex {
				t.Errorf("StepIndex = %d, want %d", d.State.StepIndex, tt.wantIndex)
			}
			// The edit is taken once: the next Step keeps the new place.
			next := d.State
			observe(&next, d, t4)
			if d2 := c.Step(next, t4); d2.State.StepIndex < d.State.StepIndex {
				t.Errorf("step went back from %d to %d", d.State.StepIndex, d2.State.StepIndex)
			}
		})
	}
}

// TestStepTimeBackwards: a now earlier than a time the state records is that
// time: no time-gated progress, the same decision as at the latest record;
// more than MaxClockSkew earlier, Step also reports Degraded (ClockSkew).
func TestStepTimeBackwards(t *testing.T) {
	c := strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(time.Minute)}, MaxSurgePercent: 100}
	bg := strategy.BlueGreen{Options: strategy.Options{ScaleDownDelay: metav1.Duration{Duration: time.Minute}}}
	pausedAt5, _ := walk(t, c, strategy.NewState("v1", "v2"), t5, phaseIs(strategy.PhasePaused))
	// Weight 10 in force, the stable side shrunk to it: the interval runs.
	inInterval := func(s *strategy.State) bool { return s.Desired.Weight == 10 && s.Desired.StableCapacity == 90 }
	intervalAt5, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t5, inInterval)
	delayAt5, _ := walk(t, bg, strategy.NewState("v1", "v2"), t5, phaseIs(strategy.PhaseCompleting))
	intervalAt0, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, inInterval)
	commandAt5 := intervalAt0.Pause(t5)
	tests := []struct {
		name  string
		strat strategy.Strategy
		s     strategy.State
	}{
		{"timed pause", c, pausedAt5},
		{"interval", incremental, intervalAt5},
		{"scale-down delay", bg, delayAt5},
		{"command", incremental, commandAt5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := stepChecked(t, tt.strat, tt.s, t5)
			if want.HasHops() {
				t.Fatalf("fixture: hops at t5: %+v", hopsIn(want))
			}
			for _, now := range []time.Time{t4, t0, t5.Add(-time.Nanosecond), {}, time.Unix(0, 0)} {
				got := stepChecked(t, tt.strat, tt.s, now)
				if skewed := t5.Sub(now) > strategy.MaxClockSkew; skewed {
					if c := cond(&got.State, strategy.ConditionDegraded); c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonClockSkew {
						t.Errorf("at %v, %s behind the state: Degraded %s %s, want True ClockSkew", now, t5.Sub(now), c.Status, c.Reason)
					}
					got.State.Conditions = without(got.State.Conditions, strategy.ConditionDegraded)
					w := want
					w.State.Conditions = without(want.State.Conditions, strategy.ConditionDegraded)
					if diff := cmp.Diff(w, got); diff != "" {
						t.Errorf("at %v: more than the Degraded condition changed (-want at t5 +got):\n%s", now, diff)
					}
					continue
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("at %v (-want at t5 +got):\n%s", now, diff)
				}
			}
		})
	}
}

// TestStepInvalidOptions: Step on invalid options changes nothing but a
// Degraded condition with reason InvalidOptions, and asks for no hop.
func TestStepInvalidOptions(t *testing.T) {
	s, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.Desired.Weight == 10 })
	tests := []struct {
		name  string
		strat strategy.Strategy
	}{
		{"incremental zero", strategy.Incremental{}},
		{"incremental step over surge", strategy.Incremental{StepPercent: 40, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}},
		{"canary weight", strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(101)}, MaxSurgePercent: 10}},
		{"canary empty step", strategy.Canary{Steps: []strategy.CanaryStep{{}}, MaxSurgePercent: 10}},
		{"canary no surge", strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(10)}}},
		{"blue-green options", strategy.BlueGreen{Options: strategy.Options{PollInterval: metav1.Duration{Duration: -1}, AbortRamp: "Sideways"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.strat.Validate()
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			want := strategy.Decision{State: *s.DeepCopy()}
			for i := range want.State.Conditions {
				if c := &want.State.Conditions[i]; c.Type == strategy.ConditionDegraded {
					c.Status, c.Reason, c.Message = metav1.ConditionTrue, strategy.ReasonInvalidOptions, err.Error()
					c.LastTransitionTime = metav1.NewTime(t4)
				}
			}
			got := stepChecked(t, tt.strat, s, t4)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// A fresh state gets the condition added, and stays unstarted.
			fresh := strategy.NewState("v1", "v2")
			got = stepChecked(t, tt.strat, fresh, t4)
			want = strategy.Decision{State: fresh}
			want.State.Conditions = []metav1.Condition{{
				Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: strategy.ReasonInvalidOptions,
				Message: err.Error(), LastTransitionTime: metav1.NewTime(t4),
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fresh state (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStepFixed: without a CapacitySetter only weights move, bounded by what
// each side reports ready.
func TestStepFixed(t *testing.T) {
	fixed := strategy.Options{Capacity: strategy.CapacityFixed}
	strats := map[string]strategy.Strategy{
		"incremental": strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, Options: fixed},
		"canary":      strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(30), strategy.Pause(time.Minute)}, Options: fixed},
		"blue-green":  strategy.BlueGreen{Options: fixed},
	}
	for name, strat := range strats {
		t.Run(name, func(t *testing.T) {
			tl, err := strategy.Plan(strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tl.Entries {
				if e.Allocation.StableCapacity != 100 || e.Allocation.CanaryCapacity != 0 {
					t.Errorf("%v %s: capacities moved: %+v", e.Offset, e.What, e.Allocation)
				}
				if len(e.What) > 8 && e.What[:8] == "capacity" || len(e.What) > 6 && (e.What[:6] == "stable" || e.What[:6] == "canary") {
					t.Errorf("%v: a capacity hop in the Fixed mode: %s", e.Offset, e.What)
				}
			}
			if tl.Final.Phase != strategy.PhaseSucceeded {
				t.Errorf("final phase %s", tl.Final.Phase)
			}
		})
	}
	// Ready capacity still bounds the weight: a canary side reporting 30
	// ready takes 30, not the 50 asked.
	c := strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(50)}, Options: fixed}
	s := strategy.NewState("v1", "v2")
	s.Observed.Canary = strategy.SideObservation{Capacity: 100, Ready: 30, Settled: true}
	d := stepChecked(t, c, s, t0)
	if diff := cmp.Diff(hopsOf{Weight: set(30), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	s = d.State
	observe(&s, strategy.Decision{Weight: set(30)}, t0)
	d = stepChecked(t, c, s, t1)
	if diff := cmp.Diff(hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Errorf("waiting for ready capacity (-want +got):\n%s", diff)
	}
	s = d.State
	s.Observed.Canary.Ready = 100
	d = stepChecked(t, c, s, t2)
	if diff := cmp.Diff(set(50), d.Weight); diff != "" {
		t.Errorf("once ready (-want +got):\n%s", diff)
	}
}

// TestStepReplicas: without a TrafficRouter, Decision.Weight is never set and
// capacities move like a rolling update within MaxSurge and MaxUnavailable.
func TestStepReplicas(t *testing.T) {
	replicas := func(mu int32) strategy.Options {
		return strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: mu}
	}
	tests := []struct {
		name     string
		strat    strategy.Strategy
		surge    int32
		mu       int32
		wantCaps string
	}{
		{"incremental surge", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 25, Options: replicas(0)}, 25, 0,
			// The stable side shrinks as soon as each weight is in force:
			// the canary moves by whole steps.
			"(100,0) -> (100,20) -> (80,20) -> (80,40) -> (60,40) -> (60,60) -> (40,60) -> (40,80) -> (20,80) -> (20,100) -> (0,100)"},
		{"incremental unavailable", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, Options: replicas(25)}, 0, 25,
			"(100,0) -> (75,0) -> (75,20) -> (75,25) -> (50,25) -> (50,45) -> (50,50) -> (25,50) -> (25,70) -> (25,75) -> (0,75) -> (0,95) -> (0,100)"},
		{"canary", strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(30), strategy.Pause(time.Minute)}, MaxSurgePercent: 10, Options: replicas(10)}, 10, 10,
			"(100,0) -> (100,10) -> (80,10) -> (80,30) -> (70,30) -> (70,40) -> (50,40) -> (50,60) -> (30,60) -> (30,80) -> (10,80) -> (10,100) -> (0,100)"},
		{"blue-green", strategy.BlueGreen{Options: replicas(0)}, 100, 0, "(100,0) -> (100,100) -> (0,100)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := strategy.Plan(tt.strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantCaps, tl.Capacities()); diff != "" {
				t.Errorf("capacities (-want +got):\n%s", diff)
			}
			for _, e := range tl.Entries {
				a := e.Allocation
				if len(e.What) > 6 && e.What[:6] == "weight" {
					t.Errorf("%v: a weight hop in the Replicas mode: %s", e.Offset, e.What)
				}
				if sum := a.StableCapacity + a.CanaryCapacity; sum > 100+tt.surge || sum < 100-tt.mu {
					t.Errorf("%v %s: capacities %+v outside [%d, %d]", e.Offset, e.What, a, 100-tt.mu, 100+tt.surge)
				}
			}
			if tl.Final.Phase != strategy.PhaseSucceeded {
				t.Errorf("final phase %s", tl.Final.Phase)
			}
		})
	}
	// Driven by hand: Decision.Weight stays unset, Desired.Weight mirrors the
	// canary capacity, and a scale-down waits for the other side to be ready.
	in := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, Options: replicas(25)}
	s := strategy.NewState("v1", "v2")
	d := stepChecked(t, in, s, t0)
	if diff := cmp.Diff(hopsOf{Stable: set(75), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Fatalf("first hop (-want +got):\n%s", diff)
	}
	s = d.State
	observe(&s, d, t0)
	d = stepChecked(t, in, s, t0)
	if diff := cmp.Diff(hopsOf{Canary: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" || d.State.Desired.Weight != 20 {
		t.Fatalf("second hop, Desired.Weight %d (-want +got):\n%s", d.State.Desired.Weight, diff)
	}
	s = d.State
	s.Observed.Canary = strategy.SideObservation{Capacity: 20, Ready: 20, Settled: true}
	s.Observed.Stable.Ready = 75
	d = stepChecked(t, in, s, t1)
	if diff := cmp.Diff(hopsOf{RequeueAfter: 5 * tick, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Fatalf("interval (-want +got):\n%s", diff)
	}
}

// halfUp is a side of n replicas that Ray Serve rounds half up: the ready
// share of a settled side at capacity c.
func halfUp(n, c int32) int32 {
	if c <= 0 {
		return 0
	}
	k := max((n*c+50)/100, 1)
	return min(k, n) * 100 / n
}

// TestStepRounding: three replicas at 40 percent settle at one ready replica,
// 33 percent. Traffic may not pass 33, and the walk still finishes.
func TestStepRounding(t *testing.T) {
	strats := map[string]strategy.Strategy{
		"canary 40":    strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(40), strategy.Pause(time.Minute)}, MaxSurgePercent: 100},
		"canary 40/34": strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(40), strategy.Pause(time.Minute)}, MaxSurgePercent: 34},
		"incremental":  strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40},
		"blue-green":   strategy.BlueGreen{},
	}
	for name, strat := range strats {
		t.Run(name, func(t *testing.T) {
			const n = 3
			s := strategy.NewState("v1", "v2")
			now := t0
			sawHeld := false
			for i := 0; ; i++ {
				if i == 200 {
					t.Fatalf("no end after 200 steps: %+v", s)
				}
				d := stepChecked(t, strat, s, now)
				if d.Weight.Set && d.Weight.Value > s.Observed.Canary.Ready {
					t.Fatalf("weight %d above canary ready %d", d.Weight.Value, s.Observed.Canary.Ready)
				}
				if d.Weight.Set && d.Weight.Value < s.Desired.Weight && 100-d.Weight.Value > s.Observed.Stable.Ready {
					t.Fatalf("weight %d above stable ready %d", 100-d.Weight.Value, s.Observed.Stable.Ready)
				}
				if d.Weight.Set && d.Weight.Value == 33 {
					sawHeld = true
				}
				s = d.State
				if s.Phase.Terminal() {
					break
				}
				o := &s.Observed
				o.At = mt(now)
				if d.Weight.Set {
					o.Weight, o.WeightApplied = d.Weight.Value, true
				}
				if c := d.StableCapacity; c.Set {
					o.Stable = strategy.SideObservation{Capacity: c.Value, Ready: halfUp(n, c.Value), Settled: true}
				}
				if c := d.CanaryCapacity; c.Set {
					o.Canary = strategy.SideObservation{Capacity: c.Value, Ready: halfUp(n, c.Value), Settled: true}
				}
				if !d.HasHops() {
					now = now.Add(d.RequeueAfter)
				}
			}
			if s.Phase != strategy.PhaseSucceeded {
				t.Errorf("ended %s", s.Phase)
			}
			if _, ok := strat.(strategy.Canary); ok && !sawHeld {
				t.Errorf("the weight never stopped at the ready 33")
			}
		})
	}
	// The table case: capacity 40 settled at 33.
	c := strats["canary 40"]
	s := strategy.NewState("v1", "v2")
	s.Desired.CanaryCapacity = 40
	s.Observed.Canary = strategy.SideObservation{Capacity: 40, Ready: 33, Settled: true}
	d := stepChecked(t, c, s, t0)
	if diff := cmp.Diff(hopsOf{Weight: set(33), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	s = d.State
	observe(&s, strategy.Decision{Weight: set(33)}, t0)
	d = stepChecked(t, c, s, t1)
	if !d.CanaryCapacity.Set || d.CanaryCapacity.Value <= 40 || d.Weight.Set {
		t.Errorf("held at 33 by a settled side: want more canary capacity, got %+v", hopsIn(d))
	}
}

// TestStepCompletion: all traffic observed on the canary -> the stable side
// scaled to 0 after ScaleDownDelay (to the instant) and the canary returned
// to its steady state -> Succeeded, the roles swapped.
func TestStepCompletion(t *testing.T) {
	bg := strategy.BlueGreen{Options: strategy.Options{ScaleDownDelay: metav1.Duration{Duration: 5 * tick}}}
	s, _ := walk(t, bg, strategy.NewState("v1", "v2"), t0, phaseIs(strategy.PhaseCompleting))
	if want := mt(t0); !s.ReachedAt.Equal(&want) {
		t.Fatalf("ReachedAt = %v, want %v", s.ReachedAt, want)
	}
	tests := []struct {
		name string
		now  time.Time
		want hopsOf
	}{
		{"delay", t1, hopsOf{RequeueAfter: 4 * tick, Phase: strategy.PhaseCompleting}},
		{"a nanosecond early", t5.Add(-time.Nanosecond), hopsOf{RequeueAfter: time.Nanosecond, Phase: strategy.PhaseCompleting}},
		{"to the instant", t5, hopsOf{Stable: set(0), Canary: strategy.Target{Set: true, Value: 100, Steady: true}, RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseCompleting}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, hopsIn(stepChecked(t, bg, s, tt.now))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// A Pause holds the scale-down.
	if diff := cmp.Diff(hopsOf{Phase: strategy.PhaseCompleting}, hopsIn(stepChecked(t, bg, s.Pause(t1), t9))); diff != "" {
		t.Errorf("paused (-want +got):\n%s", diff)
	}
	d := stepChecked(t, bg, s, t5)
	s = d.State
	observe(&s, d, t5)
	d = stepChecked(t, bg, s, t6)
	want := hopsOf{Phase: strategy.PhaseSucceeded}
	if diff := cmp.Diff(want, hopsIn(d)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	got := d.State
	if got.StableRevision != "v2" || got.CanaryRevision != "v2" || got.StableSide != strategy.SideB ||
		got.Desired != (strategy.Allocation{StableCapacity: 100}) || !got.FinishedAt.Equal(ptr(mt(t6))) {
		t.Errorf("succeeded state: stable %s canary %s side %s desired %+v finished %v",
			got.StableRevision, got.CanaryRevision, got.StableSide, got.Desired, got.FinishedAt)
	}
	if c := cond(&got, strategy.ConditionProgressing); c.Status != metav1.ConditionFalse || c.Reason != strategy.ReasonSucceeded {
		t.Errorf("Progressing = %+v", c)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBug_RetryAfterAbortWhileCompletingSkipsSteady: an abort that arrives
// after completion asked the canary for its steady state (State.SteadyRequested)
// leaves Released set through the walk back and Retry, so the retried
// rollout never returns the winner to its steady state (PhaseCompleting:
// the canary is asked to return to its steady state).
func TestRetryAfterAbortWhileCompletingAsksSteadyAgain(t *testing.T) {
	bg := strategy.BlueGreen{}
	s, now := walk(t, bg, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.SteadyRequested })
	if s.Phase != strategy.PhaseCompleting {
		t.Fatalf("fixture: phase %s", s.Phase)
	}
	s, now = walk(t, bg, s.Abort("late alarm", now), now, phaseIs(strategy.PhaseAborted))
	s = s.Retry(now)
	steady := false
	for range 50 {
		d := stepChecked(t, bg, s, now)
		steady = steady || d.CanaryCapacity.Steady
		s = d.State
		observe(&s, d, now)
		if s.Phase.Terminal() {
			break
		}
		now = now.Add(d.RequeueAfter)
	}
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("retried rollout ended %s", s.Phase)
	}
	if !steady {
		t.Errorf("the retried rollout succeeded without asking the canary for its steady state (Released carried over from the aborted completion)")
	}
}

// TestBug_CorruptStateAsksHopOutOfRange: a State decoded from a corrupt
// status (Desired outside 0..100) makes Step ask the adapters for weights
// and capacities outside 0..100 (Allocation: weights and capacities are
// percents, 0..100). FuzzStepJSON's range check finds these; Step now treats
// such a state as invalid (State.Validate) and asks for nothing.
func TestCorruptStateNeverAsksAHopOutOfRange(t *testing.T) {
	in := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	corrupt := func(desired strategy.Allocation, stableReady, canaryReady int32) strategy.State {
		s := strategy.NewState("v1", "v2")
		s.Phase = strategy.PhaseProgressing
		s.Desired = desired
		s.Observed.Weight = desired.Weight
		s.Observed.Stable = strategy.SideObservation{Capacity: desired.StableCapacity, Ready: stableReady, Settled: true}
		s.Observed.Canary = strategy.SideObservation{Capacity: desired.CanaryCapacity, Ready: canaryReady, Settled: true}
		return s
	}
	tests := []struct {
		name string
		s    strategy.State
		want string // the out-of-range hop it asks for today
	}{
		{"negative weight", corrupt(strategy.Allocation{Weight: -64, StableCapacity: 18, CanaryCapacity: 135}, 73, 51), "weight -54"},
		{"weight over 100", corrupt(strategy.Allocation{Weight: 126, StableCapacity: 117, CanaryCapacity: 171}, 40, 18), "weight 116"},
		{"negative stable capacity", corrupt(strategy.Allocation{Weight: 109, StableCapacity: -93, CanaryCapacity: 192}, 98, 26), "stable -62"},
		{"negative canary capacity", corrupt(strategy.Allocation{Weight: 10, StableCapacity: 181, CanaryCapacity: -99}, 77, 69), "canary -51"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := stepChecked(t, in, tt.s, t0)
			for name, tg := range map[string]strategy.Target{"weight": d.Weight, "stable": d.StableCapacity, "canary": d.CanaryCapacity} {
				if tg.Set && (tg.Value < 0 || tg.Value > 100) {
					t.Errorf("Desired %+v: asks %s %d, outside 0..100 (known: %s)", tt.s.Desired, name, tg.Value, tt.want)
				}
			}
		})
	}
}

// TestEmergencyAbortNeverRepairsAnInvalidSplitUpward: a rollout whose route
// holds an invalid split (the canary's real share unknown) and whose
// progress deadline aborts it with the Emergency ramp sends all traffic to
// the stable side; it does not write the old desired weight back onto a
// canary with nothing ready. (Found by the gateway store fuzz target.)
func TestEmergencyAbortNeverRepairsAnInvalidSplitUpward(t *testing.T) {
	strat := strategy.BlueGreen{Options: strategy.Options{AbortRamp: strategy.AbortEmergency, AbortOnProgressDeadline: true}}
	s := strategy.NewState("v1", "v2")
	s.Phase = strategy.PhaseProgressing
	s.StartedAt = mt(t0)
	s.Desired = strategy.Allocation{Weight: 81, StableCapacity: 100, CanaryCapacity: 100}
	now := t0.Add(strategy.DefaultProgressDeadline + time.Minute)
	s.Observed = strategy.Observation{At: mt(now), Weight: 100, WeightInvalid: true,
		Stable: strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true},
		Canary: strategy.SideObservation{Capacity: 100, Ready: 0, Settled: true}}
	d := stepChecked(t, strat, s, now)
	if d.State.Phase != strategy.PhaseAborting || d.State.Aborted == nil || !d.State.Aborted.Emergency {
		t.Fatalf("phase %s abort %+v: want an emergency abort", d.State.Phase, d.State.Aborted)
	}
	if diff := cmp.Diff(strategy.Target{Set: true, Value: 0}, d.Weight); diff != "" {
		t.Fatalf("weight (-want +got):\n%s", diff)
	}
}

// TestIdleStatesPlanNothing: the zero state, a zero state that adopted a
// revision and NewState(v, v) roll nothing out, in Plan as in Step.
func TestIdleStatesPlanNothing(t *testing.T) {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	for name, s := range map[string]strategy.State{
		"zero":          {},
		"unobserved":    strategy.State{}.Retarget("v1", t0),
		"NewState(v,v)": strategy.NewState("v1", "v1"),
	} {
		tl, err := strategy.Plan(inc, strategy.PlanOptions{Start: t0, State: &s})
		if err != nil || tl.Hops != 0 || len(tl.Entries) != 0 || !tl.Final.Idle() && !tl.Final.Unobserved {
			t.Errorf("%s: Plan = %d hops, %d events, idle %v, err %v", name, tl.Hops, len(tl.Entries), tl.Final.Idle(), err)
		}
		for _, strat := range []strategy.Strategy{inc, fixtureCanary, strategy.BlueGreen{}} {
			// An unobserved state adopts the world (the idle state here)
			// and asks for the next Step soon.
			if d := stepChecked(t, strat, s, t1); d.HasHops() || d.RequeueAfter != 0 && !s.Unobserved || !d.State.Idle() {
				t.Errorf("%s: Step asks %+v, requeue %s", name, d, d.RequeueAfter)
			}
		}
	}
}

// TestEmergencyAbortFinishesWhenTheStableSideIsAlreadyUp: a Runner that
// applied an emergency's stable scale-up but failed the weight write in the
// same reconcile stores the state from before both hops, so the stable side
// is observed above the capacity the state recorded. The walk back records
// what the side holds and finishes; it used to wait for that side to come
// back down, for ever.
func TestEmergencyAbortFinishesWhenTheStableSideIsAlreadyUp(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20,
		Options: strategy.Options{AbortRamp: strategy.AbortEmergency}}
	s := strategy.NewState("v1", "v2")
	s.Phase = strategy.PhaseAborting
	s.StartedAt = mt(t0)
	s.Aborted = &strategy.AbortStatus{Reason: "test", At: mt(t0), Emergency: true}
	s.Desired = strategy.Allocation{Weight: 30, StableCapacity: 80, CanaryCapacity: 30}
	obs := strategy.Observation{Weight: 30, WeightApplied: true,
		Stable: strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true},
		Canary: strategy.SideObservation{Capacity: 30, Ready: 30, Settled: true}}
	now := t1
	for i := 0; i < 10 && s.Phase != strategy.PhaseAborted; i++ {
		obs.At = mt(now)
		s.Observed = obs
		d := stepChecked(t, strat, s, now)
		s = d.State
		if d.Weight.Set { // an instant world
			obs.Weight = d.Weight.Value
		}
		if d.StableCapacity.Set {
			obs.Stable = strategy.SideObservation{Capacity: d.StableCapacity.Value, Ready: d.StableCapacity.Value, Settled: true}
		}
		if d.CanaryCapacity.Set {
			obs.Canary = strategy.SideObservation{Capacity: d.CanaryCapacity.Value, Ready: d.CanaryCapacity.Value, Settled: true}
		}
		now = now.Add(tick)
	}
	if s.Phase != strategy.PhaseAborted {
		t.Fatalf("still %s after 10 steps: %s (desired %+v)", s.Phase, s.Message, s.Desired)
	}
}
