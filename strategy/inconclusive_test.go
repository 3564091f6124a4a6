package strategy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/strategy"
)

// TestStepInconclusiveDeadline: an inconclusive health holds a canary that
// has traffic, and the hold counts toward the progress deadline from when
// the rollout would have moved on without it (the end of the step interval
// or of the timed pause): Degraded once the deadline passes, an abort with
// AbortOnProgressDeadline, nothing with NoProgressDeadline. A hold inside
// the interval or the pause costs none of the deadline.
func TestStepInconclusiveDeadline(t *testing.T) {
	minute := metav1.Duration{Duration: time.Minute}
	inc := func(o strategy.Options) strategy.Strategy {
		s := incremental // weight hops of 10, 30 s apart
		s.Options = o
		return s
	}
	pausing := func(o strategy.Options) strategy.Strategy {
		return strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(5 * time.Minute), strategy.SetWeight(60)},
			MaxSurgePercent: 100, Options: o}
	}
	approval := func(o strategy.Options) strategy.Strategy {
		return strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.PauseUntilResumed(), strategy.SetWeight(60)},
			MaxSurgePercent: 100, Options: o}
	}
	abortAfterMinute := strategy.Options{ProgressDeadline: minute, AbortOnProgressDeadline: true}
	// Incremental at weight 10 from t0: the interval ends at t3, so the
	// deadline (1 minute) at t9. The pausing Canary reaches weight 20 at
	// t0 and pauses 5 minutes: the deadline is at t0 + 6m.
	atWeight10 := func(s *strategy.State) bool { return s.Desired.Weight == 10 && s.Observed.Weight == 10 }
	inPause := func(s *strategy.State) bool { return s.StepIndex == 1 }
	// Weight 20 applied but the pause step not entered yet: the hold
	// begins before the Step that would enter it.
	at20 := func(s *strategy.State) bool { return s.Observed.Weight == 20 }
	for _, tc := range []struct {
		name       string
		strat      func(strategy.Options) strategy.Strategy
		opts       strategy.Options
		walkTo     func(*strategy.State) bool
		at         time.Time
		want       hopsOf
		degraded   bool
		wantAbort  string
		wantReason string // of Degraded, when degraded
	}{
		{"inside the interval", inc, abortAfterMinute, atWeight10, t1,
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the interval over", inc, abortAfterMinute, atWeight10, t3,
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"a second before the deadline: the requeue meets it", inc, abortAfterMinute, atWeight10, t9.Add(-time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"at the deadline: abort", inc, abortAfterMinute, atWeight10, t9,
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadlineExceeded, strategy.ReasonAborted},
		{"an hour on: abort", inc, abortAfterMinute, atWeight10, t0.Add(time.Hour),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadlineExceeded, strategy.ReasonAborted},
		{"at the deadline, no abort asked: Degraded, held", inc, strategy.Options{ProgressDeadline: minute}, atWeight10, t9,
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, true, "", strategy.ReasonProgressDeadlineExceeded},
		{"the default deadline (10m), a second before", inc, strategy.Options{AbortOnProgressDeadline: true}, atWeight10, t3.Add(10*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the default deadline (10m)", inc, strategy.Options{AbortOnProgressDeadline: true}, atWeight10, t3.Add(10 * time.Minute),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadlineExceeded, strategy.ReasonAborted},
		{"no progress deadline: held for ever", inc, strategy.Options{NoProgressDeadline: true}, atWeight10, t0.Add(24 * time.Hour),
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"in the pause", pausing, abortAfterMinute, inPause, t0.Add(4 * time.Minute),
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the pause over, within the deadline", pausing, abortAfterMinute, inPause, t0.Add(6*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		// In the pause the stable side was shrunk to its traffic (80): the
		// walk back grows it first.
		{"the pause over, at the deadline: abort", pausing, abortAfterMinute, inPause, t0.Add(6 * time.Minute),
			hopsOf{Stable: set(100), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadlineExceeded, strategy.ReasonAborted},
		{"the pause not entered yet counts as ahead", pausing, abortAfterMinute, at20, t0.Add(6*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the pause not entered yet, at the deadline: abort", pausing, abortAfterMinute, at20, t0.Add(6 * time.Minute),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadlineExceeded, strategy.ReasonAborted},
		// Weight 20 reached, a pause until resumed ahead: the rollout would
		// not move on by itself, so the hold has no deadline, as the
		// pause has none.
		{"a pause until resumed ahead: held, no deadline", approval, abortAfterMinute, at20, t0.Add(time.Hour),
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			strat := tc.strat(tc.opts)
			s, _ := walk(t, strat, strategy.NewState("v1", "v2"), t0, tc.walkTo)
			s.Observed.Health, s.Observed.At = strategy.HealthInconclusive, mt(tc.at)
			d := stepChecked(t, strat, s, tc.at)
			if diff := cmp.Diff(tc.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			dg := cond(&d.State, strategy.ConditionDegraded)
			if got := dg.Status == metav1.ConditionTrue; got != tc.degraded || (tc.degraded && dg.Reason != tc.wantReason) {
				t.Errorf("Degraded %s (%s: %s), want degraded=%v (%s)", dg.Status, dg.Reason, dg.Message, tc.degraded, tc.wantReason)
			}
			var gotAbort string
			if d.State.Aborted != nil {
				gotAbort = d.State.Aborted.Reason
			}
			if gotAbort != tc.wantAbort {
				t.Errorf("abort %q, want %q", gotAbort, tc.wantAbort)
			}
			if tc.wantAbort == "" && d.State.Message != "canary health inconclusive: holding" {
				t.Errorf("message %q, want the inconclusive hold", d.State.Message)
			}
		})
	}
}

// TestInconclusiveHoldIsBounded: whatever the strategy, once the canary has
// traffic and its health stays inconclusive, the rollout holds (no hop)
// and then aborts for the progress deadline with AbortOnProgressDeadline:
// never before the deadline has passed since the last hop, never later
// than the deadline past the timed waits the strategy would have made (its
// pauses or one step interval). Adapters apply every hop at once; the
// rollout is stepped at each requeue.
func TestInconclusiveHoldIsBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		deadline := time.Duration(rapid.IntRange(1, 20).Draw(t, "deadlineMinutes")) * time.Minute
		opts := strategy.Options{ProgressDeadline: metav1.Duration{Duration: deadline}, AbortOnProgressDeadline: true}
		var strat strategy.Strategy
		var timed time.Duration // the most the strategy waits by its own clock after the first weight hop
		if rapid.Bool().Draw(t, "canary") {
			var steps []strategy.CanaryStep
			w := int32(0)
			for i, n := 0, rapid.IntRange(1, 5).Draw(t, "steps"); i < n; i++ {
				if rapid.Bool().Draw(t, "pause") {
					d := time.Duration(rapid.IntRange(1, 600).Draw(t, "pauseSeconds")) * time.Second
					steps = append(steps, strategy.Pause(d))
					timed += d
					continue
				}
				w = min(100, w+int32(rapid.IntRange(1, 60).Draw(t, "weightStep")))
				steps = append(steps, strategy.SetWeight(w))
			}
			strat = strategy.Canary{Steps: steps, MaxSurgePercent: 100, Options: opts}
		} else {
			interval := time.Duration(rapid.IntRange(0, 300).Draw(t, "intervalSeconds")) * time.Second
			strat = strategy.Incremental{StepPercent: int32(rapid.IntRange(1, 50).Draw(t, "stepPercent")),
				Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: 100, Options: opts}
			timed = interval
		}
		if err := strat.Validate(); err != nil {
			t.Skip(err)
		}
		s, now := strategy.NewState("v1", "v2"), t0
		var lastHop, holdFrom time.Time
		for i := 0; ; i++ {
			if i > 10000 {
				t.Fatalf("no end after %d steps: %+v", i, s)
			}
			if s.Observed.Weight > 0 {
				s.Observed.Health = strategy.HealthInconclusive
				if holdFrom.IsZero() {
					holdFrom = now
				}
			}
			s.Observed.At = mt(now)
			d := strat.Step(s, now)
			if d.State.Phase == strategy.PhaseAborting {
				if d.State.Aborted == nil || d.State.Aborted.Reason != strategy.ReasonProgressDeadlineExceeded {
					t.Fatalf("aborted %+v, want for the progress deadline", d.State.Aborted)
				}
				if holdFrom.IsZero() {
					t.Fatalf("aborted before the canary had traffic")
				}
				if got := now.Sub(lastHop); got < deadline {
					t.Fatalf("aborted %v after the last hop, before the deadline %v", got, deadline)
				}
				if bound := lastHop.Add(timed + deadline); now.After(bound) {
					t.Fatalf("aborted at %v, after the bound %v (last hop %v, timed waits %v, deadline %v)", now, bound, lastHop, timed, deadline)
				}
				return
			}
			if d.State.Phase.Terminal() || d.State.Phase == strategy.PhaseCompleting {
				if !holdFrom.IsZero() {
					t.Fatalf("phase %s with an inconclusive canary that had traffic", d.State.Phase)
				}
				return // the first weight hop went straight to 100: nothing to hold
			}
			if d.HasHops() {
				if !holdFrom.IsZero() {
					t.Fatalf("a hop %+v while inconclusive with traffic", d)
				}
				lastHop = now
			}
			s = d.State
			observe(&s, d, now)
			if !d.HasHops() {
				if d.RequeueAfter <= 0 {
					t.Fatalf("no requeue in phase %s (%s)", s.Phase, s.Message)
				}
				now = now.Add(d.RequeueAfter)
			}
		}
	})
}
