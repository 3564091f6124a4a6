package strategy

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestStickyRunSurvivesWipes: a status wiped (or an object deleted and
// re-created) at any point of a rollout with sticky sessions is adopted
// from the route, which reports the run in force: the router is never
// asked for another run while the rollout goes forward, so no session is
// handed a new ticket and none flips sides, and the weight asked never
// falls.
func TestStickyRunSurvivesWipes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		switch v := strat.(type) {
		case Incremental:
			v.SessionAffinity = &SessionAffinity{}
			strat = v
		case BlueGreen:
			v.SessionAffinity = &SessionAffinity{}
			strat = v
		case Canary:
			v.SessionAffinity = &SessionAffinity{}
			strat = v
		}
		if strat.Validate() != nil || !nonDecreasing(strat) {
			t.Skip("no sticky grid fits this strategy, or its steps go back")
		}
		wipes := map[int]bool{}
		for n := rapid.IntRange(1, 4).Draw(t, "wipes"); n > 0; n-- {
			wipes[rapid.IntRange(1, 400).Draw(t, "wipeAt")] = true
		}
		s := NewState("stable", "canary")
		w := newWorld(mode, &s)
		for _, name := range strat.Gates() {
			w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
		}
		now := t0
		run := ""
		high := int32(0) // the highest weight asked of the router
		for i := 0; i < 20000; i++ {
			if wipes[i] && !s.Phase.Terminal() {
				t.Logf("status wiped at step %d (%s, weight %d, run %q)", i, s.Phase, w.askedWeight, run)
				s = w.wipe(&s, specRevision(&s), now)
			}
			s.Observed = w.observe(now)
			d := checkStep(t, strat, s, now)
			if d.State.stableSide() != s.stableSide() {
				w.swap()
				high = 100 - high
			}
			if (d.State.Phase == PhaseAborting || d.State.Phase == PhaseAborted) && w.askedWeight > 0 {
				t.Fatalf("step %d: the rollout walks back from weight %d (%s): %s", i, w.askedWeight, d.State.Phase, d.State.Message)
			}
			s = d.State
			if d.Extras {
				if k := s.DesiredExtras.Sticky; k != nil {
					if run != "" && k.Run != run {
						t.Fatalf("step %d: the router is asked for run %q while run %q is in force at weight %d", i, k.Run, run, w.askedWeight)
					}
					run = k.Run
				} else if !s.Phase.Terminal() && s.Phase != PhaseCompleting {
					t.Fatalf("step %d: sticky sessions dropped in phase %s at weight %d", i, s.Phase, s.Desired.Weight)
				}
			}
			if d.Weight.Set {
				if d.Weight.Value < high {
					t.Fatalf("step %d: weight %d asked after %d: sessions would flip back", i, d.Weight.Value, high)
				}
				high = d.Weight.Value
			}
			if d.HasHops() {
				w.apply(&d, 1)
				w.checkRevisions(t, &s)
				w.settle()
				w.checkRevisions(t, &s)
				continue
			}
			if s.Idle() {
				return // wiped with all traffic on the new revision: adopted as done
			}
			if s.Phase.Terminal() {
				if s.Phase != PhaseSucceeded {
					t.Fatalf("ended %s: %s", s.Phase, s.Message)
				}
				return
			}
			if s.AwaitingResume {
				s = s.Resume(now)
				continue
			}
			if d.RequeueAfter <= 0 {
				t.Fatalf("stuck in %s: %s", s.Phase, s.Message)
			}
			now = now.Add(d.RequeueAfter)
		}
		t.Fatalf("not finished: %s %s", s.Phase, s.Message)
	})
}

// TestStickyRunAdoptedFromTheRoute: the run the route reports is the run
// of the adopted rollout, for every weight of a rollout wiped there.
func TestStickyRunAdoptedFromTheRoute(t *testing.T) {
	strat := Canary{MaxSurgePercent: 100, Options: Options{SessionAffinity: &SessionAffinity{}},
		Steps: []CanaryStep{SetWeight(10), PauseUntilResumed(), SetWeight(30), PauseUntilResumed(), SetWeight(60), PauseUntilResumed()}}
	for _, pauses := range []int{1, 2, 3} {
		s := NewState("v1", "v2")
		w := newWorld(CapacityManaged, &s)
		now := t0
		for p := 0; p < pauses; p++ {
			for i := 0; i < 200; i++ {
				s.Observed = w.observe(now)
				d := checkStep(t, strat, s, now)
				s = d.State
				if d.HasHops() {
					w.apply(&d, 0)
					w.settle()
					continue
				}
				if s.AwaitingResume {
					break
				}
				now = now.Add(max(d.RequeueAfter, time.Second))
			}
			if p < pauses-1 {
				s = s.Resume(now)
			}
		}
		before := w.askedExtras.Sticky
		if before == nil {
			t.Fatalf("pause %d: no sticky sessions programmed", pauses)
		}
		weight := w.askedWeight
		now = now.Add(time.Hour)
		s = w.wipe(&s, "v2", now)
		for i := 0; i < 5; i++ {
			s.Observed = w.observe(now)
			d := checkStep(t, strat, s, now)
			s = d.State
			if d.HasHops() {
				w.apply(&d, 0)
				w.settle()
			}
			now = now.Add(time.Second)
		}
		if s.Phase != PhasePaused || w.askedWeight != weight {
			t.Errorf("wiped at weight %d: adopted as %s at weight %d (%s)", weight, s.Phase, w.askedWeight, s.Message)
		}
		if got := s.DesiredExtras.Sticky; got == nil || got.Run != before.Run || w.askedExtras.Sticky.Run != before.Run {
			t.Errorf("wiped at weight %d: run %+v after the adoption, want %q", weight, got, before.Run)
		}
	}
}
