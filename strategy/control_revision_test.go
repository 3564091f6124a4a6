package strategy_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/strategy"
)

// TestControlWithNewRevision: every request of a Control written in the
// same spec update as a new revision (the same as the canary, the stable
// one, a third one), on a rollout paused at weight 20 of v1 -> v2 (the
// fixtures' pausedStep), applied as an operator does: Retarget then Control
// before every Step. What each request does, and how the rollout ends, is
// the table of State.Control's doc.
func TestControlWithNewRevision(t *testing.T) {
	paused := fixtures(t)["pausedStep"]
	if paused.Phase != strategy.PhasePaused || paused.Desired.Weight != 20 {
		t.Fatalf("fixture: %s at %d", paused.Phase, paused.Desired.Weight)
	}
	type end struct {
		Phase          strategy.Phase
		Stable, Canary string
		Applied        []strategy.Applied
	}
	requests := map[string]strategy.Control{
		"Abort":       {Abort: "x"},
		"Retry":       {Retry: "x"},
		"Promote":     {Promote: "x"},
		"PromoteFull": {PromoteFull: "x"},
		"Resume":      {Resume: "x"},
		"Paused":      {Paused: true},
	}
	pause := strategy.Applied{Command: strategy.CommandPause}
	for _, tc := range []struct {
		rev, request string
		want         end
	}{
		// The same revision: the requests act on the rollout as it is.
		{"v2", "Abort", end{strategy.PhaseAborted, "v1", "v2", applied(cmd("Abort", "x"))}},
		{"v2", "Retry", end{strategy.PhasePaused, "v1", "v2", applied(ignored("Retry", "x"))}},
		{"v2", "Promote", end{strategy.PhaseSucceeded, "v2", "v2", applied(cmd("Promote", "x"))}},
		{"v2", "PromoteFull", end{strategy.PhaseSucceeded, "v2", "v2", applied(cmd("PromoteFull", "x"))}},
		{"v2", "Resume", end{strategy.PhaseSucceeded, "v2", "v2", applied(cmd("Resume", "x"))}},
		{"v2", "Paused", end{strategy.PhasePaused, "v1", "v2", applied(pause)}},
		// The stable revision: a rollback, which nothing stops or holds.
		{"v1", "Abort", end{strategy.PhaseRolledBack, "v1", "v1", applied(ignored("Abort", "x"))}},
		{"v1", "Retry", end{strategy.PhaseRolledBack, "v1", "v1", applied(ignored("Retry", "x"))}},
		{"v1", "Promote", end{strategy.PhaseRolledBack, "v1", "v1", applied(ignored("Promote", "x"))}},
		{"v1", "PromoteFull", end{strategy.PhaseRolledBack, "v1", "v1", applied(ignored("PromoteFull", "x"))}},
		{"v1", "Resume", end{strategy.PhaseRolledBack, "v1", "v1", applied(ignored("Resume", "x"))}},
		{"v1", "Paused", end{strategy.PhaseRolledBack, "v1", "v1", nil}},
		// A third revision: v2 is walked back first. An Abort stops v3
		// (Aborted, v3 the canary a Retry starts); Paused holds v3 from
		// its first step; the one-shot requests meet the walk back.
		{"v3", "Abort", end{strategy.PhaseAborted, "v1", "v3", applied(cmd("Abort", "x"))}},
		{"v3", "Retry", end{strategy.PhasePaused, "v1", "v3", applied(ignored("Retry", "x"))}},
		{"v3", "Promote", end{strategy.PhasePaused, "v1", "v3", applied(ignored("Promote", "x"))}},
		{"v3", "PromoteFull", end{strategy.PhasePaused, "v1", "v3", applied(ignored("PromoteFull", "x"))}},
		{"v3", "Resume", end{strategy.PhasePaused, "v1", "v3", applied(ignored("Resume", "x"))}},
		{"v3", "Paused", end{strategy.PhasePaused, "v1", "v3", nil}},
	} {
		t.Run(tc.rev+"+"+tc.request, func(t *testing.T) {
			c := requests[tc.request]
			s := paused.Retarget(tc.rev, t9)
			s, as := s.Control(c, t9)
			now := t9
			for i := 0; i == 0 || !s.Phase.Terminal() && !(s.Phase == strategy.PhasePaused && s.CanaryRevision == tc.rev && s.PendingRevision == ""); i++ {
				if i == 1000 {
					t.Fatalf("no end: %s %s", s.Phase, s.Message)
				}
				s = s.Retarget(tc.rev, now)
				s, _ = s.Control(c, now)
				before := s.Desired.Weight
				d := stepChecked(t, fixtureCanary, s, now)
				if d.Weight.Set && d.Weight.Value > before && (tc.request == "Abort" || tc.request == "Paused" && tc.rev == "v3") {
					t.Fatalf("weight raised from %d to %d after %s with %s", before, d.Weight.Value, tc.request, tc.rev)
				}
				s = d.State
				observe(&s, d, now)
				if !d.HasHops() {
					now = now.Add(max(d.RequeueAfter, tick))
				}
			}
			got := end{s.Phase, s.StableRevision, s.CanaryRevision, as}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if tc.rev == "v3" && tc.request == "Abort" {
				// Retry starts v3.
				r, as := s.Control(strategy.Control{Abort: "x", Retry: "r"}, now)
				if diff := cmp.Diff(applied(cmd("Retry", "r")), as); diff != "" {
					t.Fatalf("retry (-want +got):\n%s", diff)
				}
				r, _ = walk(t, fixtureCanary, r, now, phaseIs(strategy.PhasePaused))
				if r.CanaryRevision != "v3" || r.Desired.Weight != 20 {
					t.Fatalf("retried: canary %s at %d", r.CanaryRevision, r.Desired.Weight)
				}
			}
			if tc.rev == "v3" && tc.request == "Paused" && (s.PauseReason != strategy.ReasonControlPause || s.Desired.Weight != 0) {
				t.Fatalf("v3 not held by the spec before any traffic: %s at %d", s.PauseReason, s.Desired.Weight)
			}
		})
	}
}
