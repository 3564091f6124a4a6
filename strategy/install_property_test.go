package strategy

import (
	"testing"

	"pgregory.net/rapid"
)

// TestInstallEndsReleased: upshift installed on an application that
// already serves (genServingWorld): a fresh state (the zero State and a
// Retarget to the spec's revision "b") over all traffic on one side running
// the old revision ("a", or one its reader does not recognise), the other
// side idle running nothing, the spec's revision, the old one or something
// else, with random strategies in every capacity mode and a world that
// answers after random lags. The rollout always ends Succeeded with all
// traffic on a side running "b", and every Step holds the invariants of
// the package doc: nothing asked before the world is observed, hops safe
// against observed ready capacity, surge within MaxSurge, traffic only on
// a side running its role's revision, no deploy under traffic or capacity,
// nothing reported released before it is.
func TestInstallEndsReleased(t *testing.T) { rounds(t, 2, installEndsReleased) }

func installEndsReleased(t *rapid.T) {
	mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
	strat := keepGoing(genStrategy(t, mode))
	opts, _ := optionsOf(strat)
	serving := rapid.SampledFrom([]string{"a", ""}).Draw(t, "serving")
	idle := rapid.SampledFrom([]string{"", "b", "c", serving}).Draw(t, "idle")
	w := genServingWorld(t, mode, serving, idle, rapid.Bool().Draw(t, "servingOnB"))
	for _, name := range strat.Gates() { // every gate passes
		w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
	}
	now := t0
	s := State{}.Retarget("b", now)
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatalf("not finished after %d steps: %s: %s (desired %+v, observed %+v)", i, s.Phase, s.Message, s.Desired, s.Observed)
		}
		s.Observed = w.observe(now)
		d := checkStep(t, strat, s, now)
		checkReleased(t, mode, &s, &d)
		checkSafeHops(t, mode, &s, &d, false)
		if i == 0 && d.State.Unobserved {
			t.Fatalf("not adopted: %s", d.State.Message)
		}
		if d.State.Aborted != nil && d.State.Aborted.Reason != ReasonRetarget {
			t.Fatalf("aborted (%s): %s", d.State.Aborted.Reason, d.State.Message)
		}
		t.Logf("step at %s: %s -> %s stable %q canary %q pending %q desired %+v hops %s deploy %v (%s)", now.Format("15:04:05"),
			s.Phase, d.State.Phase, d.State.StableRevision, d.State.CanaryRevision, d.State.PendingRevision, d.State.Desired, hopString(&d), d.Deploy, d.State.Message)
		w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
		if d.State.stableSide() != s.stableSide() && (d.State.Phase == PhaseSucceeded || s.Unobserved) {
			w.swap()
		}
		s = d.State
		w.checkRevisions(t, &s)
		if s.Phase.Terminal() {
			break
		}
		if s.AwaitingResume {
			s = s.Resume(now)
		}
		for n := rapid.IntRange(0, 2).Draw(t, "ticks"); n > 0; n-- {
			w.tick()
			if !w.overloadExplained(opts.MaxUnavailablePercent) {
				t.Fatalf("world: weight %d, ready stable %d canary %d, with no crash to explain it", w.weight, w.stable.ready, w.canary.ready)
			}
			w.checkRevisions(t, &s)
		}
		next := d.RequeueAfter
		if next <= 0 {
			next = opts.pollInterval()
		}
		now = now.Add(next)
	}
	if s.Phase != PhaseSucceeded || s.StableRevision != "b" {
		t.Fatalf("ended %s with stable revision %q: %s", s.Phase, s.StableRevision, s.Message)
	}
	w.settle()
	if w.stable.rev != "b" || !w.stable.updated || mode != CapacityReplicas && w.weight != 0 ||
		mode == CapacityReplicas && w.canary.ready != 0 {
		t.Fatalf("Succeeded with the stable side running %q (updated %v), weight %d off it, canary ready %d",
			w.stable.rev, w.stable.updated, w.weight, w.canary.ready)
	}
	if w.breach != "" {
		t.Fatal(w.breach)
	}
}

// keepGoing is strat with a progress deadline that only reports: a world
// that answers after its lags has nothing to abort for, and a deadline
// shorter than a lag (genStrategy draws from 1s) would abort the rollout
// for a reason that is not the install's.
func keepGoing(strat Strategy) Strategy {
	switch v := strat.(type) {
	case Incremental:
		v.AbortOnProgressDeadline = false
		return v
	case Canary:
		v.AbortOnProgressDeadline = false
		return v
	case BlueGreen:
		v.AbortOnProgressDeadline = false
		return v
	}
	return strat
}
