package strategy

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInstallOnServingApplication: a fresh rollout (the zero State and a
// Retarget to v2) over an application that serves all traffic from side A,
// running v1 (recognised, or "" for a revision its reader does not
// recognise), side B idle (at zero, or holding capacity with no traffic),
// running nothing, v2 already, or something else. The first Step adopts it
// asking for nothing; then v2 is deployed on B only at weight 0 and
// capacity 0, no traffic reaches B before it is observed running v2, traffic
// never exceeds ready capacity, and the rollout ends Succeeded with all
// traffic on B running v2, in every capacity mode. The world answers after
// a fixed lag; the instants are fixed.
func TestInstallOnServingApplication(t *testing.T) {
	for _, mode := range []CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas} {
		for _, idle := range []int32{0, 40} {
			if mode != CapacityManaged && idle != 0 {
				continue // fixed: both sides stay provisioned; replicas: a side with capacity serves
			}
			for _, serving := range []string{"v1", ""} {
				others := []string{"", "v2", "v0"}
				if serving != "" {
					others = append(others, serving) // both sides were made from one template
				}
				for _, other := range others {
					m := string(mode)
					if m == "" {
						m = "Managed"
					}
					name := fmt.Sprintf("%s/B at %d/A runs %q/B runs %q", m, idle, serving, other)
					t.Run(name, func(t *testing.T) { installRun(t, mode, idle, serving, other) })
				}
			}
		}
	}
}

func installRun(t *testing.T, mode CapacityMode, idle int32, serving, other string) {
	strat := Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 50,
		Options: Options{Capacity: mode}}
	w := &world{mode: mode, accepted: true}
	w.stable = side{asked: 100, current: 100, ready: 100, replicas: 4, rev: serving, updated: true}
	w.canary = side{asked: idle, current: idle, replicas: 4, rev: other, updated: true}
	if mode == CapacityFixed {
		w.canary.asked, w.canary.current = 100, 100
	}
	w.canary.ready = w.canary.readyFor(w.canary.asked)
	s := State{}.Retarget("v2", t0)
	now := t0
	var firstWeight time.Time
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatalf("not finished after %d steps: %s: %s", i, s.Phase, s.Message)
		}
		s.Observed = w.observe(now)
		d := checkStep(t, strat, s, now)
		checkReleased(t, mode, &s, &d)
		if i == 0 && (d.HasHops() || d.Deploy.Set || d.State.Unobserved) {
			t.Fatalf("the adoption asks for %s (deploy %+v), unobserved %v: %s", hopString(&d), d.Deploy, d.State.Unobserved, d.State.Message)
		}
		if i == 0 && (d.State.StableRevision != serving || d.State.CanaryRevision != "v2" && d.State.PendingRevision != "v2") {
			t.Fatalf("adopted stable %q canary %q pending %q, want the serving side's %q stable and v2 next: %s",
				d.State.StableRevision, d.State.CanaryRevision, d.State.PendingRevision, serving, d.State.Message)
		}
		if d.Weight.Set && d.Weight.Value > 0 && (w.canary.rev != "v2" || !w.canary.updated) {
			t.Fatalf("weight %d asked for a canary side running %q (updated %v)", d.Weight.Value, w.canary.rev, w.canary.updated)
		}
		if d.CanaryCapacity.Set && d.CanaryCapacity.Value > w.canary.asked && (w.canary.rev != "v2" || !w.canary.updated) {
			t.Fatalf("canary capacity %d asked for a side running %q (updated %v)", d.CanaryCapacity.Value, w.canary.rev, w.canary.updated)
		}
		if d.Weight.Set && d.Weight.Value > 0 && firstWeight.IsZero() {
			firstWeight = now
		}
		w.apply(&d, 1)
		if d.State.stableSide() != s.stableSide() {
			w.swap()
		}
		s = d.State
		w.checkRevisions(t, &s)
		if s.Phase.Terminal() {
			break
		}
		w.tick()
		if !w.trafficFits(0) && mode != CapacityReplicas {
			t.Fatalf("traffic above ready capacity: weight %d, ready stable %d canary %d", w.weight, w.stable.ready, w.canary.ready)
		}
		w.checkRevisions(t, &s)
		now = now.Add(max(d.RequeueAfter, time.Second))
	}
	if s.Phase != PhaseSucceeded || s.StableRevision != "v2" || w.stable.rev != "v2" || !w.stable.updated {
		t.Fatalf("ended %s, stable %q, the stable side running %q (updated %v): %s", s.Phase, s.StableRevision, w.stable.rev, w.stable.updated, s.Message)
	}
	if mode != CapacityReplicas && (w.weight != 0 || w.askedWeight != 0) {
		t.Fatalf("ended with weight %d (asked %d) off the new stable side", w.weight, w.askedWeight)
	}
	if w.breach != "" {
		t.Fatal(w.breach)
	}
	// Nothing had moved a weight: the first one waits for capacity and the
	// deploy, not for an interval.
	if mode != CapacityReplicas && firstWeight.Sub(t0) >= strat.Interval.Duration {
		t.Fatalf("the first weight hop came %s after the install, an interval (%s) or more", firstWeight.Sub(t0), strat.Interval.Duration)
	}
}
