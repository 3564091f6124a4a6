package rollout_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/strategy"
)

// BenchmarkRunVsPlan runs whole upgrades through Run on fakes that apply
// every hop at once, in lockstep with a fake clock, and reports how long
// each took on that clock against its Plan: "plan-ratio" with the fakes'
// notifications, "poll2s-ratio" with them dropped (Run, subscribed, then
// waits for the strategy's 2 s poll after every hop: a fixed 2 s poll), and
// "backoff-ratio" with adapters that cannot notify (Run polls fast after
// every hop, from InitialPollInterval). For BlueGreen, whose plan takes no
// time, it reports the durations in seconds instead.
func BenchmarkRunVsPlan(b *testing.B) {
	for _, bc := range []struct {
		name  string
		strat strategy.Strategy
	}{
		{"Incremental-10-1s-30", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}},
		{"Incremental-10-1m-30", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}},
		{"Incremental-50-10s-50", strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50}},
		{"Incremental-1-1s-1", strategy.Incremental{StepPercent: 1, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 1}},
		{"BlueGreen", strategy.BlueGreen{}},
		{"Canary-pauses", strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), strategy.Pause(30 * time.Second), strategy.SetWeight(60), strategy.Pause(time.Minute)}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			plan, err := strategy.Plan(bc.strat, strategy.PlanOptions{Start: t0})
			if err != nil {
				b.Fatal(err)
			}
			var took [3]time.Duration
			for b.Loop() {
				for i, how := range []delivery{notified, dropped, unsupported} {
					l := newLockstep(bc.strat, fake.Lag{}, how)
					l.start(nil)
					res := l.finish(b, 100000)
					l.cancel()
					if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
						b.Fatalf("%v: Run ended %s (%s): %v", how, res.s.Phase, res.s.Message, res.err)
					}
					took[i] = l.clock.Now().Sub(t0)
				}
			}
			if plan.Duration == 0 {
				b.ReportMetric(took[0].Seconds(), "notify-s")
				b.ReportMetric(took[1].Seconds(), "poll2s-s")
				b.ReportMetric(took[2].Seconds(), "backoff-s")
				return
			}
			b.ReportMetric(float64(took[0])/float64(plan.Duration), "plan-ratio")
			b.ReportMetric(float64(took[1])/float64(plan.Duration), "poll2s-ratio")
			b.ReportMetric(float64(took[2])/float64(plan.Duration), "backoff-ratio")
		})
	}
}
