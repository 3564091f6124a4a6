package strategy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

// rollbackCond is s's RollbackInProgress condition, nil when absent.
func rollbackCond(s *State) *metav1.Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == ConditionRollbackInProgress {
			return &s.Conditions[i]
		}
	}
	return nil
}

// checkRollbackCondition checks RollbackInProgress after a Step that
// brought the conditions in line with the state (a rollout that has
// observed the world, under valid options): present iff the state is
// rolling back (State.RollingBack), then True with reason
// DesiredRevisionChanged and its message saying where the spec went;
// never present on a finished rollout; at most once.
func checkRollbackCondition(t TB, strat Strategy, in *State, d *Decision) {
	t.Helper()
	opts, _ := optionsOf(strat)
	if in.Idle() || in.Unobserved || !in.check(opts.Capacity, nil) || strat.Validate() != nil {
		return
	}
	n := 0
	for _, c := range d.State.Conditions {
		if c.Type == ConditionRollbackInProgress {
			n++
		}
	}
	c := rollbackCond(&d.State)
	switch {
	case n > 1:
		t.Fatalf("RollbackInProgress %d times: %+v", n, d.State.Conditions)
	case c != nil && d.State.Phase.Terminal():
		t.Fatalf("RollbackInProgress on a finished rollout (%s): %+v", d.State.Phase, *c)
	case (c != nil) != d.State.RollingBack():
		t.Fatalf("RollbackInProgress %+v, but rolling back is %v (phase %s, pending %q, abort %+v)",
			c, d.State.RollingBack(), d.State.Phase, d.State.PendingRevision, d.State.Aborted)
	case c == nil:
		return
	}
	want := msgRollbackToThird
	switch {
	case d.State.PendingRevision == d.State.StableRevision:
		want = msgRollbackToStable
	case d.State.suspending():
		want = msgRollbackThirdHeld
	case d.State.Aborted != nil && d.State.Aborted.Reason != ReasonRetarget:
		want = msgRollbackThirdAborted
	}
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonDesiredRevisionChanged || c.Message != want {
		t.Fatalf("RollbackInProgress %+v, want True %s %q", *c, ReasonDesiredRevisionChanged, want)
	}
}

// TestRollbackInProgress: the condition through each rollback of the
// matrix, Step by Step on an instant world, at fixed instants.
func TestRollbackInProgress(t *testing.T) {
	strat := Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40,
		Options: Options{AbortRamp: AbortGradual}}
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	type act struct {
		step int    // before this Step
		cmd  string // a revision to retarget to, or "abort", "retry"
	}
	cases := []struct {
		name   string
		acts   []act
		seen   []string // each change of the condition: its message, or "removed"
		phase  Phase
		canary string
	}{
		{"A-B-A", []act{{6, "A"}}, []string{msgRollbackToStable, "removed"}, PhaseRolledBack, "A"},
		{"A-B-A-B", []act{{6, "A"}, {8, "B"}}, []string{msgRollbackToStable, "removed"}, PhaseSucceeded, "B"},
		{"A-B-A-C", []act{{6, "A"}, {8, "C"}}, []string{msgRollbackToStable, msgRollbackToThird, "removed"}, PhaseSucceeded, "C"},
		{"A-B-C", []act{{6, "C"}}, []string{msgRollbackToThird, "removed"}, PhaseSucceeded, "C"},
		{"A-B-C-abort", []act{{6, "C"}, {8, "abort"}}, []string{msgRollbackToThird, msgRollbackThirdAborted, "removed"}, PhaseAborted, "C"},
		{"A-B-C-abort-retry", []act{{6, "C"}, {8, "abort"}, {9, "retry"}},
			[]string{msgRollbackToThird, msgRollbackThirdAborted, msgRollbackToThird, "removed"}, PhaseSucceeded, "C"},
		{"A-B-C-B", []act{{6, "C"}, {8, "B"}}, []string{msgRollbackToThird, "removed"}, PhaseSucceeded, "B"},
		// An abort's walk back that the spec then sends back to A: it now
		// ends RolledBack, and rolls back.
		{"abort-then-A", []act{{6, "abort"}, {8, "A"}}, []string{msgRollbackToStable, "removed"}, PhaseRolledBack, "A"},
		// An abort's walk back is no rollback: nothing is set.
		{"abort", []act{{6, "abort"}}, nil, PhaseAborted, "B"},
		{"no-change", nil, nil, PhaseSucceeded, "B"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState("A", "B")
			w := newWorld(strat.Options.Capacity, &s)
			now := start
			var seen []string
			last := ""
			acts := tc.acts
			for i := 0; i < 500 && !(s.Phase.Terminal() && len(acts) == 0); i++ {
				for len(acts) > 0 && acts[0].step == i {
					switch a := acts[0].cmd; a {
					case "abort":
						s = s.Abort("test", now)
					case "retry":
						s = s.Retry(now)
					default:
						s = s.Retarget(a, now)
					}
					acts = acts[1:]
				}
				s.Observed = w.observe(now)
				d := checkStep(t, strat, s, now)
				if d.State.StableSide != s.StableSide {
					w.swap()
				}
				s = d.State
				w.apply(&d, 0)
				w.settle()
				got := "removed"
				if c := rollbackCond(&s); c != nil {
					got = c.Message
					if want := seconds(now); len(seen) == 0 || last == "removed" {
						if !c.LastTransitionTime.Equal(&want) {
							t.Errorf("step %d: set at %v, want %v", i, c.LastTransitionTime, want)
						}
					}
				}
				if got != last && (got != "removed" || last != "") {
					seen = append(seen, got)
				}
				last = got
				now = now.Add(10 * time.Second)
			}
			if diff := cmp.Diff(tc.seen, seen); diff != "" {
				t.Errorf("RollbackInProgress changes (-want +got):\n%s", diff)
			}
			if s.Phase != tc.phase || s.CanaryRevision != tc.canary {
				t.Errorf("ended %s with canary %q, want %s with %q", s.Phase, s.CanaryRevision, tc.phase, tc.canary)
			}
		})
	}
}

// TestRollbackInProgressKeepsCallerState: setting and removing the
// condition never writes to the conditions of the state Step was given.
func TestRollbackInProgressKeepsCallerState(t *testing.T) {
	strat := BlueGreen{}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := NewState("A", "B")
	s.Phase = PhaseAborting
	s.Aborted = &AbortStatus{Reason: ReasonRetarget, At: micro(now)}
	s.PendingRevision = "A"
	s.Desired = Allocation{Weight: 100, StableCapacity: 100, CanaryCapacity: 100}
	s.Conditions = make([]metav1.Condition, 0, 8) // room to append in place
	d := strat.Step(s, now)
	if c := rollbackCond(&d.State); c == nil || c.Message != msgRollbackToStable {
		t.Fatalf("RollbackInProgress %+v", c)
	}
	if len(s.Conditions) != 0 {
		t.Fatalf("the caller's conditions changed: %+v", s.Conditions)
	}
	in := d.State
	in.Conditions = append(make([]metav1.Condition, 0, 8), in.Conditions...)
	before := append([]metav1.Condition(nil), in.Conditions...)
	in = in.Retarget("B", now.Add(time.Second)) // cancelled
	d = strat.Step(in, now.Add(time.Second))
	if c := rollbackCond(&d.State); c != nil {
		t.Fatalf("RollbackInProgress after the cancel: %+v", *c)
	}
	if diff := cmp.Diff(before, in.Conditions); diff != "" {
		t.Fatalf("the caller's conditions changed (-before +after):\n%s", diff)
	}
}

// TestRollbackInProgressProperty: on random rollouts with random retargets
// (to the stable revision, the canary, a third one), aborts, retries,
// suspensions, resumes and faults (a crashing canary among them), every
// Step leaves
// RollbackInProgress True iff the state is rolling back (see
// checkRollbackCondition), and a Retarget that changes the revision
// mid-rollout is a rollback at the next Step unless the walk back ends in
// that Step.
func TestRollbackInProgressProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		s := NewState("a", "b")
		w := newWorld(mode, &s)
		w.stable.replicas = rapid.Int32Range(1, 12).Draw(t, "stableReplicas")
		w.canary.replicas = rapid.Int32Range(1, 12).Draw(t, "canaryReplicas")
		w.stable.ready = w.stable.readyFor(w.stable.asked)
		now := t0
		for i, n := 0, rapid.IntRange(1, 150).Draw(t, "steps"); i < n; i++ {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1, 2, 3:
				s.Observed = w.observe(now)
				d := checkStep(t, strat, s, now)
				w.apply(&d, rapid.IntRange(0, 2).Draw(t, "lag"))
				if d.State.stableSide() != s.stableSide() {
					w.swap()
				}
				s = d.State
			case 4:
				w.tick()
			case 5:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(2*time.Minute)).Draw(t, "advance")))
			case 6, 7:
				rev := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "revision")
				before := s
				s = s.Retarget(rev, now)
				mid := !before.Idle() && !before.Unobserved && !before.Phase.Terminal() && before.Phase != "" &&
					rev != before.CanaryRevision
				if mid && !s.RollingBack() {
					t.Fatalf("Retarget %q mid-rollout (%s, canary %q) is not rolling back: %s pending %q",
						rev, before.Phase, before.CanaryRevision, s.Phase, s.PendingRevision)
				}
				if rev == before.CanaryRevision && before.PendingRevision != "" && s.RollingBack() {
					t.Fatalf("Retarget back to the canary %q did not cancel the rollback", rev)
				}
			case 8:
				switch rapid.IntRange(0, 3).Draw(t, "command") {
				case 0:
					s = s.Abort("test", now)
				case 1:
					s = s.Retry(now)
				case 2:
					s = s.Suspend(now)
				default:
					s = s.Resume(now)
				}
			default:
				sd := &w.canary
				if rapid.Bool().Draw(t, "stableCrash") {
					sd = &w.stable
				}
				if rapid.Bool().Draw(t, "loop") {
					sd.loop = !sd.loop
				} else {
					sd.crash(rapid.Int32Range(1, 100).Draw(t, "crash"))
				}
			}
		}
	})
}
