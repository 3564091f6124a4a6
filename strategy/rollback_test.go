package strategy

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRollbackMatrix retargets a rollout from A to B at three moments (early:
// after the first hop; mid-way: at weight >= 50; late: while completing),
// once or twice, and checks every Step's invariants and how it ends.
func TestRollbackMatrix(t *testing.T) {
	strategies := map[string]Strategy{
		"incremental": Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30},
		"canary": Canary{MaxSurgePercent: 25, Steps: []CanaryStep{
			SetWeight(20), Pause(time.Minute), SetWeight(60), Pause(time.Minute), SetWeight(80),
		}},
		"canary-fixed": Canary{Steps: []CanaryStep{SetWeight(30), SetWeight(70)}, Options: Options{Capacity: CapacityFixed}},
		"incremental-replicas": Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20,
			Options: Options{Capacity: CapacityReplicas, MaxUnavailablePercent: 10}},
		"bluegreen-gradual": BlueGreen{Options: Options{AbortRamp: AbortGradual, ScaleDownDelay: metav1.Duration{Duration: time.Minute}}},
	}
	triggers := map[string]func(s *State, hops int) bool{
		"early": func(s *State, hops int) bool { return hops >= 1 },
		"mid":   func(s *State, hops int) bool { return s.Desired.Weight >= 50 },
		"late":  func(s *State, hops int) bool { return s.Phase == PhaseCompleting || s.Desired.Weight == 100 },
	}
	cases := []struct {
		name      string
		retargets []string // after A->B
		phase     Phase
		stable    string
	}{
		{"A-B-A", []string{"A"}, PhaseRolledBack, "A"},
		{"A-B-A-B", []string{"A", "B"}, PhaseSucceeded, "B"},
		{"A-B-A-C", []string{"A", "C"}, PhaseSucceeded, "C"},
	}
	for sname, strat := range strategies {
		for tname, trigger := range triggers {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", sname, tname, tc.name), func(t *testing.T) {
					opts, _ := optionsOf(strat)
					s := NewState("A", "B")
					w := newWorld(opts.Capacity, &s)
					now := t0
					hops, next := 0, 0
					sinceRetarget := 0
					for i := 0; i < 5000; i++ {
						// The first retarget fires at its trigger, a second one
						// two hops later (mid-way through the walk back).
						if next < len(tc.retargets) && (next == 0 && trigger(&s, hops) || next > 0 && sinceRetarget >= 2) {
							s = s.Retarget(tc.retargets[next], now)
							next++
							sinceRetarget = 0
						}
						s.Observed = w.observe(now)
						d := checkStep(t, strat, s, now)
						if d.State.StableSide != s.StableSide {
							w.swap()
						}
						s = d.State
						if d.HasHops() {
							hops++
							sinceRetarget++
							w.apply(&d, 1)
							w.checkRevisions(t, &s)
							w.settle()
							w.checkRevisions(t, &s)
							if !w.trafficFits(opts.MaxUnavailablePercent) {
								t.Fatalf("traffic exceeds ready capacity: weight %d ready %d/%d", w.weight, w.stable.ready, w.canary.ready)
							}
							continue
						}
						if s.Phase.Terminal() {
							if next < len(tc.retargets) {
								// The trigger was never met (or the walk finished
								// first): retarget the finished rollout.
								s = s.Retarget(tc.retargets[next], now)
								next++
								continue
							}
							break
						}
						if s.AwaitingResume {
							s = s.Resume(now)
							continue
						}
						now = now.Add(d.RequeueAfter)
					}
					if s.Phase != tc.phase || s.StableRevision != tc.stable {
						t.Fatalf("ended %s with stable %s, want %s with stable %s", s.Phase, s.StableRevision, tc.phase, tc.stable)
					}
					if s.PendingRevision != "" || s.Aborted != nil {
						t.Fatalf("leftovers: pending %q abort %+v", s.PendingRevision, s.Aborted)
					}
					// The canary side keeps what it last ran (the abandoned
					// revision after a rollback, the old stable one after a
					// success), and the state records it.
					want := Allocation{Weight: 0, StableCapacity: 100, CanaryCapacity: 0, CanaryRevision: w.canary.rev}
					if opts.Capacity == CapacityFixed {
						want.StableCapacity, want.CanaryCapacity = s.Desired.StableCapacity, s.Desired.CanaryCapacity
					}
					if s.Desired != want {
						t.Fatalf("ended at %+v, want %+v", s.Desired, want)
					}
					if w.stable.rev != s.StableRevision || !w.stable.updated {
						t.Fatalf("the stable side runs %q (updated %v), the stable revision is %q", w.stable.rev, w.stable.updated, s.StableRevision)
					}
					if s.Desired.Weight != 0 || w.weight != 0 && opts.Capacity != CapacityReplicas && s.Phase == PhaseRolledBack {
						t.Fatalf("weight left on the canary role: desired %d world %d", s.Desired.Weight, w.weight)
					}
				})
			}
		}
	}
}
