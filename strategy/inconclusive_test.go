package strategy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadline, strategy.ReasonAborted},
		{"an hour on: abort", inc, abortAfterMinute, atWeight10, t0.Add(time.Hour),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadline, strategy.ReasonAborted},
		{"at the deadline, no abort asked: Degraded, held", inc, strategy.Options{ProgressDeadline: minute}, atWeight10, t9,
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, true, "", strategy.ReasonProgressDeadline},
		{"the default deadline (10m), a second before", inc, strategy.Options{AbortOnProgressDeadline: true}, atWeight10, t3.Add(10*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the default deadline (10m)", inc, strategy.Options{AbortOnProgressDeadline: true}, atWeight10, t3.Add(10 * time.Minute),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadline, strategy.ReasonAborted},
		{"no progress deadline: held for ever", inc, strategy.Options{NoProgressDeadline: true}, atWeight10, t0.Add(24 * time.Hour),
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"in the pause", pausing, abortAfterMinute, inPause, t0.Add(4 * time.Minute),
			hopsOf{RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the pause over, within the deadline", pausing, abortAfterMinute, inPause, t0.Add(6*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the pause over, at the deadline: abort", pausing, abortAfterMinute, inPause, t0.Add(6 * time.Minute),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadline, strategy.ReasonAborted},
		{"the pause not entered yet counts as ahead", pausing, abortAfterMinute, at20, t0.Add(6*time.Minute - time.Second),
			hopsOf{RequeueAfter: time.Second, Phase: strategy.PhaseProgressing}, false, "", ""},
		{"the pause not entered yet, at the deadline: abort", pausing, abortAfterMinute, at20, t0.Add(6 * time.Minute),
			hopsOf{Weight: set(0), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseAborting}, true, strategy.ReasonProgressDeadline, strategy.ReasonAborted},
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
