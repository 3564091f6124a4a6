package rollout_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/strategy"
)

// TestRunObservesEveryHopWithinOneNotification: for random Incremental
// upgrades on fakes whose every change shows after a random lag, Run with
// the fakes' notifications takes at most its plan plus one lag per hop
// (each hop is observed at the notification that ends its lag); with
// notifications subscribed but never delivered (a broken watch), the plan
// plus one poll per hop; and with adapters that cannot notify, at most its
// plan plus the backoff bound per hop: polls after
// a hop double from InitialPollInterval, so a hop that shows after a lag
// is seen within twice that lag (at least the first poll); with a fixed
// poll (InitialPollInterval = PollInterval), within one poll.
// The bound is exact, with no slack: the lockstep harness moves the clock
// only while Run is blocked with nothing pending (Run arms its requeue
// timer only then), so a notification on its way is never overtaken by
// Run's poll.
func TestRunObservesEveryHopWithinOneNotification(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		surge := rapid.Int32Range(10, 100).Draw(t, "surge")
		strat := strategy.Incremental{
			StepPercent:     rapid.Int32Range(10, surge).Draw(t, "step"),
			Interval:        metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 30).Draw(t, "intervalSec")) * time.Second},
			MaxSurgePercent: surge,
		}
		lag := time.Duration(rapid.IntRange(0, 1000).Draw(t, "lagMs")) * time.Millisecond
		how := rapid.SampledFrom([]delivery{notified, dropped, unsupported}).Draw(t, "delivery")
		fixedPoll := how == unsupported && rapid.Bool().Draw(t, "fixedPoll")
		if fixedPoll {
			strat.InitialPollInterval = metav1.Duration{Duration: strategy.DefaultPollInterval}
		}
		plan, err := strategy.Plan(strat, strategy.PlanOptions{Start: t0})
		if err != nil {
			t.Fatal(err)
		}
		l := newLockstep(strat, fake.Lag{Duration: lag}, how)
		l.start(nil)
		res := l.finish(t, 100000)
		l.cancel()
		if res.err != nil || res.s.Phase != strategy.PhaseSucceeded {
			t.Fatalf("Run ended %s (%s): %v", res.s.Phase, res.s.Message, res.err)
		}
		took := l.clock.Now().Sub(t0)
		var per time.Duration
		switch {
		case how == notified:
			per = lag
		case how == dropped || fixedPoll:
			per = strategy.DefaultPollInterval // Run believes it is notified: it polls at the interval
		default: // lag < PollInterval here
			per = max(2*lag, strategy.DefaultInitialPollInterval)
		}
		if bound := plan.Duration + time.Duration(plan.Hops)*per; took > bound {
			t.Fatalf("%v, fixed poll %v, lag %v: took %v, more than the plan %v + %d hops x %v = %v",
				how, fixedPoll, lag, took, plan.Duration, plan.Hops, per, bound)
		}
	})
}
