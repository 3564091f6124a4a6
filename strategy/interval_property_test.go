package strategy

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIntervalFromTheWorld holds invariant 16 of the package doc: against a
// world that applies each write after a random lag (and rejects routes,
// stops answering, crashes), a caller that keeps the state in memory
// between Steps as Runner.Run does never has a weight hop decided sooner
// than the interval after the previous hop's weight was first observed in
// force, if that was within the interval since the hop or since a Step saw
// it pending (else sooner than the interval after the hop), a promote and
// a walk back excepted.
// For any caller, the wait for the interval never ends later than twice the
// interval after the hop (or after the latest pending observation the
// state holds), so nothing is postponed indefinitely; a caller
// that stores the state only when Changed says so, and reads it back on
// every reconcile, is held to that bound and to the old one (the interval
// from the decision).
func TestIntervalFromTheWorld(t *testing.T) { rounds(t, 2, intervalFromTheWorld) }

// genIncremental draws an Incremental strategy in the given mode, with the
// options genStrategy draws.
func genIncremental(t *rapid.T, mode CapacityMode) Incremental {
	strat := genStrategy(t, mode)
	if in, ok := strat.(Incremental); ok {
		return in
	}
	opts, surge := optionsOf(strat)
	if mode == CapacityManaged {
		surge = max(surge, 1)
	}
	step := rapid.Int32Range(1, max(1, surge)).Draw(t, "incStep")
	if mode == CapacityFixed {
		step = rapid.Int32Range(1, 100).Draw(t, "incStepFixed")
	}
	return Incremental{
		StepPercent:     step,
		Interval:        metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 120).Draw(t, "incIntervalSec")) * time.Second},
		MaxSurgePercent: surge,
		Options:         *opts,
	}
}

// inForce reports whether the observation in s shows the weight s asks for
// in force, as invariant 16 defines it: the route holds it and the extras,
// accepted (modes with a router); the canary settled at its capacity (the
// Replicas mode).
func inForce(s *State, mode CapacityMode) bool {
	o := &s.Observed
	if o.Error != "" {
		return false
	}
	if mode == CapacityReplicas {
		return o.Canary.Settled && o.Canary.Capacity == s.Desired.CanaryCapacity
	}
	return o.WeightApplied && !o.WeightInvalid && o.Weight == s.Desired.Weight && s.DesiredExtras.Equal(o.Extras)
}

func intervalFromTheWorld(t *rapid.T) {
	mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
	strat := genIncremental(t, mode)
	if err := strat.Validate(); err != nil {
		t.Fatalf("drawn an invalid strategy: %v", err)
	}
	iv := strat.Interval.Duration
	forgetful := rapid.Bool().Draw(t, "forgetful")
	s := NewState("a", "b")
	w := newWorld(mode, &s)
	w.stable.replicas = rapid.Int32Range(0, 12).Draw(t, "stableReplicas")
	w.canary.replicas = rapid.Int32Range(0, 12).Draw(t, "canaryReplicas")
	w.stable.ready = w.stable.readyFor(w.stable.asked)
	stored := s // what a forgetful caller reads back
	now := t0
	// The latest weight hop: when it was decided, when a Step last saw its
	// weight pending and when its weight was first observed in force (zero
	// until then), to the microsecond, as the state records them.
	var hopAt, pendingAt, seenAt time.Time
	for i := 0; i < 300; i++ {
		checkedActions.Add(1)
		switch a := rapid.IntRange(0, 31).Draw(t, "intervalAction"); {
		case a < 8:
			w.tick()
		case a == 8:
			worldAction(t, w)
		case a == 9:
			c := rapid.IntRange(0, 4).Draw(t, "command") // Pause, Resume, Abort, Promote, PromoteFull
			s, _ = applyCommand(t, c, s, now)
			stored = s // a command is stored
		case a < 13:
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(2*iv)).Draw(t, "advance")))
		default:
			if forgetful {
				s = stored
			}
			observeWorld(&s, w, now)
			if !hopAt.IsZero() && seenAt.IsZero() && s.Observed.Error == "" {
				if inForce(&s, mode) {
					seenAt = micro(now).Time // as the state records instants: to the microsecond
				} else if s.Phase != PhaseAborting {
					pendingAt = micro(now).Time
				}
			}
			d := checkStep(t, strat, s, now)
			if d.State.Message == msgWaitingInterval {
				// Bounded for any caller: twice the interval after the hop,
				// or after the latest pending observation the state holds.
				from := s.WeightChangedAt.Time
				if p := s.WeightPendingAt.Time; p.After(from) {
					from = p
				}
				if end, latest := now.Add(d.WatchedRequeueAfter), from.Add(2*iv); end.After(latest) {
					t.Fatalf("the interval since the hop at %s ends at %s, after twice the interval (%s)", s.WeightChangedAt.Format("15:04:05.000"),
						end.Format("15:04:05.000"), latest.Format("15:04:05.000"))
				}
			}
			if hop := !d.State.WeightChangedAt.Equal(&s.WeightChangedAt); hop {
				exempt := s.PromoteRequested || s.PromoteFullRequested || s.Phase == PhaseAborting || d.State.Phase == PhaseAborting
				if !hopAt.IsZero() && !exempt {
					start, limit := hopAt, hopAt.Add(iv)
					if !pendingAt.IsZero() && pendingAt.Add(iv).After(limit) {
						limit = pendingAt.Add(iv)
					}
					if !forgetful && !seenAt.IsZero() && seenAt.Before(limit) {
						start = seenAt
					}
					if now.Before(start.Add(iv)) {
						t.Fatalf("weight hop to %d at %s: the previous hop was decided at %s and first seen in force at %s; interval %s",
							d.State.Desired.Weight, now.Format("15:04:05.000"), hopAt.Format("15:04:05.000"), seenAt.Format("15:04:05.000"), iv)
					}
				}
				hopAt, pendingAt, seenAt = micro(now).Time, time.Time{}, time.Time{}
			}
			t.Logf("step at %s: %s desired %+v observed w%d applied %v -> %s %s (%s)", now.Format("15:04:05.000"), s.Phase, s.Desired,
				s.Observed.Weight, s.Observed.WeightApplied, d.State.Phase, hopString(&d), d.State.Message)
			w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
			if d.State.stableSide() != s.stableSide() {
				w.swap()
			}
			if !forgetful || Changed(&stored, &d.State) {
				stored = d.State
			}
			s = d.State
			if s.Phase.Terminal() {
				return
			}
			if rapid.Bool().Draw(t, "onTime") {
				now = now.Add(d.RequeueAfter) // the requeue asked for; else another event wakes the caller first
			}
		}
	}
}
