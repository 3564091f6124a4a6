package rollout_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// slowRouter is a fake Router whose writes take a while: each SetWeights
// moves the clock by the next of holds (cycled) before it returns, as a
// slow API server would.
type slowRouter struct {
	*fake.Router
	clock    *fake.Clock
	holds    []time.Duration
	readHold time.Duration // each Weights read moves the clock this much
	n        int
	returned []time.Time // when each weight write returned
}

func (s *slowRouter) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	s.clock.Advance(s.readHold)
	return s.Router.Weights(ctx)
}

func (s *slowRouter) Routes(ctx context.Context) (rollout.RoutesStatus, error) {
	s.clock.Advance(s.readHold)
	return s.Router.Routes(ctx)
}

func (s *slowRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	s.clock.Advance(s.holds[s.n%len(s.holds)])
	s.n++
	err := s.Router.SetWeights(ctx, w)
	s.returned = append(s.returned, s.clock.Now())
	return err
}

// TestIntervalCountsFromTheWriteReturned: the Runner records when each
// weight write returned (strategy.State.WeightAppliedAt), so the next
// weight hop is decided no sooner than an interval after it, however long
// the write took (here up to 1.5 intervals) and however long the
// reconcile's reads took before it (the landing counts from the
// reconcile's start, not from the write's); a state whose stamp is lost
// still never waits more than twice the interval after the hop.
func TestIntervalCountsFromTheWriteReturned(t *testing.T) {
	interval := 10 * time.Second
	strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: 100}
	for _, tc := range []struct {
		forget   bool
		readHold time.Duration
	}{{false, 0}, {true, 0}, {false, 3 * time.Second}} {
		forget := tc.forget
		g := newRig(strat, fake.Lag{})
		sr := &slowRouter{Router: g.router, clock: g.clock, holds: []time.Duration{15 * time.Second, 0, 4 * time.Second, 0}, readHold: tc.readHold}
		g.runner.Router = sr
		var decided []time.Time
		g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			for _, h := range e.Applied {
				if h.Kind == rollout.HopWeight {
					decided = append(decided, e.Time)
				}
			}
		})
		ctx := context.Background()
		s := strategy.NewState("v1", "v2")
		for i := 0; i < 500 && !s.Phase.Terminal(); i++ {
			next, requeue, err := g.runner.Reconcile(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			s = next
			if forget {
				s.WeightAppliedAt, s.WeightPendingAt = metav1.MicroTime{}, metav1.MicroTime{} // a caller that drops volatile fields
			}
			// Look again at least every second: a hop allowed too early
			// is then decided too early.
			if requeue <= 0 || requeue > time.Second {
				requeue = time.Second
			}
			g.clock.Advance(requeue)
		}
		if s.Phase != strategy.PhaseSucceeded || len(decided) != 5 {
			t.Fatalf("forget %v: ended %s after %d weight hops", forget, s.Phase, len(decided))
		}
		for k := 1; k < len(decided); k++ {
			gap := decided[k].Sub(sr.returned[k-1])
			hop := decided[k].Sub(decided[k-1])
			switch {
			case !forget && gap < interval:
				t.Errorf("reads held %v: weight hop %d decided %s after the previous write returned, less than the interval %s", tc.readHold, k+1, gap, interval)
			case forget && hop > 2*interval+sr.holds[(k-1)%len(sr.holds)]:
				t.Errorf("forgetful caller: weight hop %d decided %s after the previous, more than twice the interval and the write", k+1, hop)
			}
		}
	}
}
