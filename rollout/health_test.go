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

// healthScript answers the health from the clock, and records the state
// the Runner gives it.
type healthScript struct {
	health func() strategy.Health
	seen   []strategy.State
}

func (h *healthScript) Health(ctx context.Context) (strategy.Health, string, error) {
	s, ok := rollout.StateFrom(ctx)
	if !ok {
		return strategy.HealthUnknown, "", nil
	}
	h.seen = append(h.seen, s)
	return h.health(), "scripted", nil
}

// TestRunnerInconclusiveHealthHolds: while the HealthChecker says
// Inconclusive (a metrics source that is down) the rollout keeps its weight
// and neither aborts nor goes on; once the health is back it goes on and
// completes. The HealthChecker gets the state it observes for.
func TestRunnerInconclusiveHealthHolds(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 25,
		Options: strategy.Options{UnhealthyThreshold: 1}}
	g := newRig(strat, fake.Lag{})
	down := t0.Add(15 * time.Second)
	up := down.Add(5 * time.Minute)
	h := &healthScript{health: func() strategy.Health {
		if now := g.clock.Now(); !now.Before(down) && now.Before(up) {
			return strategy.HealthInconclusive
		}
		return strategy.HealthHealthy
	}}
	g.runner.Health = h
	s := strategy.NewState("v1", "v2")
	var heldAt int32 = -1
	for i := 0; i < 500 && !s.Phase.Terminal(); i++ {
		next, requeue, err := g.runner.Reconcile(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		now := g.clock.Now()
		if !now.Before(down) && now.Before(up) {
			if heldAt < 0 {
				heldAt = s.Desired.Weight
			}
			if next.Desired.Weight != heldAt || next.Phase != strategy.PhaseProgressing {
				t.Fatalf("at %v, inconclusive: weight %d -> %d, phase %s (%s)", now.Sub(t0), heldAt, next.Desired.Weight, next.Phase, next.Message)
			}
		}
		s = next
		g.traffic.Tick()
		g.clock.Advance(requeue)
	}
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", s.Phase, s.Message)
	}
	if heldAt <= 0 {
		t.Fatalf("held at weight %d: the test wants the hold with traffic on the canary", heldAt)
	}
	if !g.clock.Now().After(up) {
		t.Fatalf("finished at %v, before the health was back", g.clock.Now().Sub(t0))
	}
	if len(h.seen) == 0 || h.seen[len(h.seen)-1].StableSide != strategy.SideA || h.seen[len(h.seen)-1].StartedAt.IsZero() {
		t.Fatalf("the HealthChecker saw no rollout state: %d calls", len(h.seen))
	}
}
