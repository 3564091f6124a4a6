package strategy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStallRaisesTheProgressDeadline: a walk that cannot go on (3 replicas
// rounded half-up settle below what every step of a 5 percent surge budget
// asks) stops with all hops applied. The progress deadline covers that
// wait too: Degraded after ProgressDeadline without a hop, then an abort.
func TestStallRaisesTheProgressDeadline(t *testing.T) {
	strat := Canary{Steps: []CanaryStep{SetWeight(40)}, MaxSurgePercent: 5,
		Options: Options{ProgressDeadline: metav1.Duration{Duration: time.Minute}, AbortOnProgressDeadline: true}}
	s := NewState("a", "b")
	w := newWorld(CapacityManaged, &s)
	w.stable.replicas, w.canary.replicas = 3, 3
	w.stable.halfUp, w.canary.halfUp = true, true
	now := t0
	var lastHop time.Time
	for i := 0; i < 200 && s.Phase != PhaseAborting; i++ {
		s.Observed = w.observe(now)
		d := checkStep(t, strat, s, now)
		s = d.State
		if s.Phase == PhaseAborting {
			if !d.HasHops() {
				t.Fatalf("the abort did not start walking back at once")
			}
			break
		}
		if d.HasHops() {
			lastHop = now
			w.apply(&d, 0)
			w.settle()
			continue
		}
		if degraded(s) && now.Sub(lastHop) < time.Minute {
			t.Fatalf("Degraded %s after the last hop, before the deadline", now.Sub(lastHop))
		}
		now = now.Add(d.RequeueAfter)
	}
	if s.Phase != PhaseAborting || s.Aborted == nil || s.Aborted.Reason != ReasonProgressDeadlineExceeded {
		t.Fatalf("phase %s abort %+v: want an abort for the progress deadline", s.Phase, s.Aborted)
	}
	if got := now.Sub(lastHop); got != time.Minute {
		t.Fatalf("aborted %s after the last hop, want exactly the deadline", got)
	}
}

func degraded(s State) bool {
	for _, c := range s.Conditions {
		if c.Type == ConditionDegraded {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
