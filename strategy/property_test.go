package strategy

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

// TB is the part of testing.TB the checks need, so they run under rapid too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func roundTrip(t TB, s State) State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

// naiveApplied is the reference reading of the mover's rule 4 (package doc): the previous hop
// is observed applied.
func naiveApplied(s *State, mode CapacityMode) bool {
	o, d := s.Observed, s.Desired
	weightOK := mode == CapacityReplicas || (o.WeightApplied && o.Weight == d.Weight)
	capOK := mode == CapacityFixed ||
		(o.Stable.Settled && o.Canary.Settled && o.Stable.Capacity == d.StableCapacity && o.Canary.Capacity == d.CanaryCapacity)
	return weightOK && capOK
}

// checkStep checks every invariant of one Step that does not need history:
// Step is pure (checked by stepping again), and checkDecision holds.
func checkStep(t TB, strat Strategy, in State, now time.Time) Decision {
	t.Helper()
	before := *in.DeepCopy()
	d := strat.Step(in, now)
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("Step modified its input (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(d, strat.Step(in, now)); diff != "" {
		t.Fatalf("Step is not deterministic (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(d, strat.Step(roundTrip(t, in), now)); diff != "" {
		t.Fatalf("a JSON round trip of the state changed the decision (-direct +roundtrip):\n%s", diff)
	}
	if latest := clock(&in, time.Time{}); latest.After(now) || latest.Equal(now) {
		// now is at or before a recorded instant: any earlier now decides the
		// same, but that beyond MaxClockSkew it reports Degraded (ClockSkew).
		earlier := latest.Add(-time.Hour)
		if latest.Sub(now) <= MaxClockSkew {
			earlier = latest.Add(-MaxClockSkew)
		}
		skewed := strat.Step(in, latest.Add(-time.Hour))
		if diff := cmp.Diff(d, strat.Step(in, earlier)); diff != "" {
			t.Fatalf("time running backwards changed the decision (-at now +earlier):\n%s", diff)
		}
		if c := degradedReason(&skewed.State); !in.Idle() && c != ReasonInvalidState && c != ReasonInvalidOptions &&
			(c != ReasonClockSkew || !errors.Is(in.CheckClock(latest.Add(-time.Hour)), ErrClockSkew)) {
			t.Fatalf("an hour behind the state's latest instant: Degraded %q, CheckClock %v", c, in.CheckClock(latest.Add(-time.Hour)))
		}
		if diff := cmp.Diff(withoutDegraded(d), withoutDegraded(skewed)); diff != "" && latest.Sub(now) <= MaxClockSkew {
			t.Fatalf("a clock an hour behind changed more than the Degraded condition (-at now +an hour earlier):\n%s", diff)
		}
	}
	return checkDecision(t, strat, in, d)
}

// degradedReason is the reason of s's Degraded condition when it is true.
func degradedReason(s *State) string {
	for _, c := range s.Conditions {
		if c.Type == ConditionDegraded && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// withoutDegraded is d without its Degraded condition.
func withoutDegraded(d Decision) Decision {
	var cs []metav1.Condition
	for _, c := range d.State.Conditions {
		if c.Type != ConditionDegraded {
			cs = append(cs, c)
		}
	}
	d.State.Conditions = cs
	return d
}

// checkDecision checks what checkStep checks of the decision d that Step
// took from in, but that Step is pure: every invariant of one Step that
// needs neither history nor Step again. It returns d.
func checkDecision(t TB, strat Strategy, in State, d Decision) Decision {
	t.Helper()
	opts, surge := optionsOf(strat)
	mode := opts.Capacity
	a := d.State.Desired
	for _, v := range []int32{a.Weight, a.StableCapacity, a.CanaryCapacity} {
		if (v < 0 || v > 100) && (d.HasHops() || in.check(mode, nil)) {
			t.Fatalf("allocation out of range: %+v", a)
		}
	}
	// Surge: what is asked stays within the budget, unless the sides already
	// hold more than that (a hop recording what a side already has is not
	// provisioning more).
	grows := d.StableCapacity.Set && d.StableCapacity.Value > max(in.Desired.StableCapacity, in.Observed.Stable.Capacity) ||
		d.CanaryCapacity.Set && d.CanaryCapacity.Value > max(in.Desired.CanaryCapacity, in.Observed.Canary.Capacity)
	recorded := d.StableCapacity.Set && d.StableCapacity.Value > in.Desired.StableCapacity && !grows ||
		d.CanaryCapacity.Set && d.CanaryCapacity.Value > in.Desired.CanaryCapacity && !grows
	// An adoption records what the world holds (State.Unobserved).
	if mode != CapacityFixed && a.StableCapacity+a.CanaryCapacity > 100+surge && !in.Unobserved &&
		(in.Desired.StableCapacity+in.Desired.CanaryCapacity <= 100+surge && !recorded || grows) {
		t.Fatalf("surge %d exceeds MaxSurge %d: %+v", a.Surge(), surge, a)
	}
	if d.RequeueAfter < 0 {
		t.Fatalf("negative requeue %v", d.RequeueAfter)
	}
	checkReleased(t, mode, &in, &d)
	checkRollbackCondition(t, strat, &in, &d)
	// The requeue of a caller without notifications is the decided one, or
	// a shorter poll after a hop: never longer, never zero when the decided
	// one is not, and never shorter than the first poll (or the decided
	// requeue, when that is shorter still).
	if w, r := d.WatchedRequeueAfter, d.RequeueAfter; r > w || (r == 0) != (w == 0) || r < min(w, opts.initialPollInterval()) {
		t.Fatalf("requeue %v against %v decided (first poll %v)", r, w, opts.initialPollInterval())
	}
	if mode == CapacityReplicas && d.Weight.Set {
		t.Fatalf("replicas mode set a weight: %+v", d.Weight)
	}
	emergency := d.State.Aborted != nil && d.State.Aborted.Emergency && d.Weight.Set && d.Weight.Value == 0
	checkRevisionHops(t, mode, &in, &d)
	if !d.HasHops() || d.Deploy.Set {
		return d // a deploy is asked alone, at zero (checked above)
	}
	checkSafeHops(t, mode, &in, &d, emergency)
	// A walk back may take a route that already sends less to the canary as
	// its next hop, when the stable side is ready for that traffic.
	if d.State.Phase == PhaseAborting && mode != CapacityReplicas && in.Observed.WeightApplied && !in.Observed.WeightInvalid &&
		in.Observed.Weight < in.Desired.Weight && d.Weight.Set && d.Weight.Value == in.Observed.Weight &&
		!d.StableCapacity.Set && !d.CanaryCapacity.Set {
		return d
	}
	// A repair re-asks for the desired allocation and changes nothing else.
	// (An abort begun in this Step clears Released; the repair is the same.
	// A walk back may first record the lower capacity the canary already
	// holds; the weight mirrors it in the Replicas mode.)
	kept := in.Desired
	if d.State.Phase == PhaseAborting && in.Observed.Canary.Capacity < in.Desired.CanaryCapacity {
		kept.CanaryCapacity = in.Observed.Canary.Capacity
		if mode == CapacityReplicas {
			kept.Weight = kept.CanaryCapacity
		}
	}
	want := d.State.Desired
	repair := (want == in.Desired || want == kept) && (d.State.SteadyRequested == in.SteadyRequested || d.State.Phase == PhaseAborting) &&
		(!d.Weight.Set || d.Weight.Value == want.Weight) &&
		(!d.StableCapacity.Set || d.StableCapacity.Value == want.StableCapacity) &&
		(!d.CanaryCapacity.Set || d.CanaryCapacity.Value == want.CanaryCapacity) &&
		d.State.DesiredExtras.Equal(in.DesiredExtras)
	if repair && !emergency {
		if naiveApplied(&in, mode) && in.DesiredExtras.Equal(in.Observed.Extras) {
			t.Fatalf("a repair while everything is applied: %+v", d)
		}
		return d
	}
	// A walk back goes on once the route holds the desired weight, without
	// waiting for capacity that may never settle, nor for a data plane that
	// rejects the route or never reports on it: each of its weight hops is
	// bounded by the stable side's ready capacity (checked below).
	// A walk back also keeps a canary that already holds less capacity than
	// asked (it records what the side holds, and may lower it further), and
	// counts a stable side that holds more than asked as held.
	keeps := kept != in.Desired && d.State.Desired.CanaryCapacity <= in.Observed.Canary.Capacity
	inPlace := (mode == CapacityReplicas || in.Observed.Weight == in.Desired.Weight) &&
		(mode == CapacityFixed || in.Observed.Stable.Capacity >= in.Desired.StableCapacity &&
			(in.Observed.Canary.Capacity == in.Desired.CanaryCapacity || keeps))
	walkBack := d.State.Phase == PhaseAborting && inPlace
	// A walk back that ended in this Step on a pending revision starts the
	// rollout toward it at once, from the stable allocation it observed
	// (nothing on the canary): the first hop of that rollout follows.
	restarted := in.Phase == PhaseAborting && d.State.Phase == PhaseProgressing && in.PendingRevision != "" &&
		d.State.CanaryRevision == in.PendingRevision &&
		(mode == CapacityReplicas || in.Observed.Weight == 0 && in.Observed.WeightApplied) &&
		(mode == CapacityFixed || in.Observed.Canary.Capacity == 0)
	if !emergency && !walkBack && !restarted && !naiveApplied(&in, mode) {
		t.Fatalf("a hop before the previous one was observed applied:\nin.Desired=%+v\nin.Observed=%+v\nhops=%+v %+v %+v",
			in.Desired, in.Observed, d.Weight, d.StableCapacity, d.CanaryCapacity)
	}
	if d.Weight.Set && !emergency {
		w, old := d.Weight.Value, in.Desired.Weight
		if w > old && w > in.Observed.Canary.Ready {
			t.Fatalf("weight %d -> %d exceeds canary ready %d", old, w, in.Observed.Canary.Ready)
		}
		if w < old && 100-w > in.Observed.Stable.Ready {
			t.Fatalf("weight %d -> %d sends %d to a stable side with ready %d", old, w, 100-w, in.Observed.Stable.Ready)
		}
	}
	if mode == CapacityManaged {
		if c := d.StableCapacity; c.Set && c.Value < in.Desired.StableCapacity && c.Value < 100-a.Weight {
			t.Fatalf("stable scaled down to %d below its traffic %d", c.Value, 100-a.Weight)
		}
		if c := d.CanaryCapacity; c.Set && c.Value < in.Desired.CanaryCapacity && c.Value < a.Weight {
			t.Fatalf("canary scaled down to %d below its traffic %d", c.Value, a.Weight)
		}
		if d.Weight.Set && (d.StableCapacity.Set || d.CanaryCapacity.Set) && !emergency {
			t.Fatalf("weight and capacity in one decision outside an emergency: %+v", d)
		}
	}
	return d
}

// nonDecreasing reports whether a strategy only ever moves the weight up
// when nothing commands it back.
func nonDecreasing(s Strategy) bool {
	c, ok := s.(Canary)
	if !ok {
		return true
	}
	last := int32(0)
	for _, st := range c.Steps {
		if st.SetWeight != nil {
			if *st.SetWeight < last {
				return false
			}
			last = *st.SetWeight
		}
	}
	return true
}

// TestStepInvariants drives random strategies against a lagging world with
// random commands, health, gate verdicts, restarts, clock jumps, deploys
// that never roll out and sides redeployed by someone else, checking every
// Step, the world after every tick, and the revisions the world routes
// traffic to after every action.
func TestStepInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		opts, _ := optionsOf(strat)
		// Half-up rounding (Ray Serve) can leave a scaled-down side below its
		// traffic; the world-level check then only holds with ceil rounding.
		halfUp := rapid.Bool().Draw(t, "halfUp")
		s := NewState("a", "b")
		w := newWorld(mode, &s)
		w.stable.replicas = rapid.Int32Range(0, 12).Draw(t, "stableReplicas")
		w.canary.replicas = rapid.Int32Range(0, 12).Draw(t, "canaryReplicas")
		w.canary.halfUp = halfUp
		w.stable.halfUp = halfUp
		w.stable.ready = w.stable.readyFor(w.stable.asked)
		now := t0
		commanded := false // a command or an abort may move the weight back
		emergencySeen := false
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1, 2, 3:
				s.Observed = w.observe(now)
				d := checkStep(t, strat, s, now)
				t.Logf("step at %s: %s desired %+v observed w%d applied %v stable %+v canary %+v -> %s %+v hops %s",
					now.Format("15:04:05"), s.Phase, s.Desired, s.Observed.Weight, s.Observed.WeightApplied,
					s.Observed.Stable, s.Observed.Canary, d.State.Phase, d.State.Desired, hopString(&d))
				if nonDecreasing(strat) && !commanded && s.Aborted == nil && d.State.Aborted == nil &&
					d.State.Phase != PhaseSucceeded && d.State.Desired.Weight < s.Desired.Weight {
					t.Fatalf("weight went back from %d to %d without a command", s.Desired.Weight, d.State.Desired.Weight)
				}
				if d.State.Aborted != nil {
					commanded = true
					emergencySeen = emergencySeen || d.State.Aborted.Emergency
				}
				w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
				if d.State.stableSide() != s.stableSide() {
					w.swap() // the canary side now holds the stable role
				}
				s = d.State
			case 4, 5:
				w.tick()
				if !halfUp && !emergencySeen && !w.overloadExplained(opts.MaxUnavailablePercent) {
					t.Fatalf("world: weight %d, ready stable %d canary %d", w.weight, w.stable.ready, w.canary.ready)
				}
			case 6:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(10*time.Minute)).Draw(t, "advance")))
			case 7:
				switch c := rapid.IntRange(0, 8).Draw(t, "command"); c {
				case 0, 1, 2, 3, 4, 5, 6:
					var back bool
					s, back = applyCommand(t, c, s, now)
					commanded = commanded || back
				case 7:
					if rapid.Bool().Draw(t, "lost") {
						// A reconcile whose state is never stored: the world
						// moves, the state does not.
						s.Observed = w.observe(now)
						d := checkStep(t, strat, s, now)
						emergencySeen = emergencySeen || d.State.Aborted != nil && d.State.Aborted.Emergency
						// Roles stay as the stored state has them: the world
						// is in role terms, as a Runner maps it.
						w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lostLag"))
					} else {
						s = roundTrip(t, s) // a restarted controller
					}
				default:
					now = now.Add(-time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "back")))
				}
			case 8:
				// (Ranges grow within the same bit length, so the cases
				// saved under testdata/rapid replay as they were.)
				switch rapid.IntRange(0, 3).Draw(t, "fault") {
				case 0:
					w.accepted = !w.accepted // a parent stops (or resumes) accepting the route
				case 1:
					sd := &w.stable
					if rapid.Bool().Draw(t, "canaryCrash") {
						sd = &w.canary
					}
					if rapid.Bool().Draw(t, "loop") {
						sd.loop = !sd.loop
					} else {
						sd.crash(rapid.Int32Range(1, 100).Draw(t, "crash"))
					}
				case 2:
					w.health = rapid.SampledFrom([]Health{HealthUnknown, HealthHealthy, HealthUnhealthy, HealthInconclusive}).Draw(t, "health")
				default:
					revisionFault(t, w)
				}
			default:
				w.gates = []GateResult{{
					Name:    rapid.SampledFrom([]string{"latency", "errors"}).Draw(t, "gate"),
					Verdict: rapid.SampledFrom([]Verdict{VerdictPending, VerdictPass, VerdictFail, VerdictInconclusive}).Draw(t, "verdict"),
					At:      micro(now),
				}}
			}
			w.checkRevisions(t, &s)
		}
	})
}

// drive runs a rollout to a terminal phase against a world with the given
// lag, resuming indefinite pauses at once, and returns every hop it asked
// for. It fails if the rollout needs more than maxSteps Steps.
func drive(t TB, strat Strategy, s State, w *world, lag int, now time.Time, maxSteps int) ([]string, State, time.Time) {
	t.Helper()
	var hops []string
	for _, name := range strat.Gates() { // every gate passes
		w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
	}
	for i := 0; i < maxSteps; i++ {
		s.Observed = w.observe(now)
		d := checkStep(t, strat, s, now)
		if d.State.stableSide() != s.stableSide() {
			w.swap() // the canary side now holds the stable role
		}
		s = d.State
		if d.HasHops() {
			if d.Weight.Set {
				hops = append(hops, fmt.Sprintf("weight %d", d.Weight.Value))
			}
			if d.Extras {
				hops = append(hops, d.State.DesiredExtras.String())
			}
			if d.StableCapacity.Set {
				hops = append(hops, fmt.Sprintf("stable capacity %d", d.StableCapacity.Value))
			}
			if d.Deploy.Set {
				hops = append(hops, "deploy "+d.Deploy.Revision)
			}
			if d.CanaryCapacity.Set {
				what := fmt.Sprintf("canary capacity %d", d.CanaryCapacity.Value)
				if d.CanaryCapacity.Steady {
					what = "canary capacity steady"
				}
				hops = append(hops, what)
			}
			w.apply(&d, lag)
			w.checkRevisions(t, &s)
			w.settle()
			w.checkRevisions(t, &s)
			continue
		}
		if s.Phase.Terminal() {
			return hops, s, now
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
	t.Fatalf("not finished after %d steps: phase %s, %s, desired %+v observed %+v", maxSteps, s.Phase, s.Message, s.Desired, s.Observed)
	return nil, s, now
}

// hopBound is the most hops a rollout from 0 to 100 may take. Capacity moves
// in chunks of at most the surge budget, each costing a canary and a stable
// capacity hop; an Incremental's weight moves in hops of at most
// StepPercent (one more per chunk where a chunk ends between two steps),
// and each weight hop may cost a canary hop before it and a stable hop
// after it (capacity asked for the next weight only).
func hopBound(strat Strategy) int {
	_, surge := optionsOf(strat)
	s := int(max(surge, 1))
	chunks := (100 + s - 1) / s
	switch v := strat.(type) {
	case Incremental:
		step := int(v.StepPercent)
		weights := (100+step-1)/step + chunks
		return 3*weights + 2*chunks + 3
	case Canary:
		return (len(v.Steps) + 1) * (3*chunks + 3)
	}
	return 3*chunks + 3
}

// TestTerminationAndPlanAgreement: with adapters that apply what they are
// asked (after any lag) and no faults, every valid strategy finishes within
// the hop bound, and asks for exactly the hops Plan predicted, the deploy of
// the canary revision at zero included (both sides report revisions).
func TestTerminationAndPlanAgreement(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		tl, planned := plannedHops(t, strat)
		if b := hopBound(strat); tl.Hops > b {
			t.Fatalf("%d hops exceed the bound %d", tl.Hops, b)
		}
		// The revisions Plan rolls out by default: its deploy hop is named
		// after them.
		s := NewState("stable", "canary")
		w := newWorld(mode, &s)
		lag := rapid.IntRange(0, 4).Draw(t, "lag")
		hops, end, _ := drive(t, strat, s, w, lag, t0, 20000)
		if end.Phase != PhaseSucceeded {
			t.Fatalf("ended %s", end.Phase)
		}
		if diff := cmp.Diff(planned, hops); diff != "" {
			t.Fatalf("hops differ from the plan (-plan +run):\n%s", diff)
		}
	})
}

// plannedHops plans strat from t0, which must succeed, and returns the
// timeline and the hops it lists (pauses, resumes and the end left out).
func plannedHops(t TB, strat Strategy) (Timeline, []string) {
	t.Helper()
	tl, err := Plan(strat, PlanOptions{Start: t0})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if tl.Final.Phase != PhaseSucceeded {
		t.Fatalf("plan ended %s", tl.Final.Phase)
	}
	var planned []string
	for _, e := range tl.Entries {
		if e.What != "pause until resumed" && e.What != "resume" && e.What != string(PhaseSucceeded) && !isPause(e.What) {
			planned = append(planned, e.What)
		}
	}
	return tl, planned
}

func isPause(what string) bool { return len(what) > 6 && what[:6] == "pause " }

// checkSafeHops checks the safety of every hop of d, repairs included,
// against the world as observed in in: no weight puts more traffic on a side
// than its observed ready capacity (unless it lowers that side's share, or is
// the documented emergency), and no capacity hop shrinks a side below the
// traffic the route may send it (managed mode), nor at all while the route's
// weights are invalid.
func checkSafeHops(t TB, mode CapacityMode, in *State, d *Decision, emergency bool) {
	t.Helper()
	o := &in.Observed
	// The canary's load at a weight, with the extras in force (the larger
	// of those asked and those observed): the weight itself without any.
	x := facts{hdr: max(d.State.DesiredExtras.headerShare(), o.Extras.headerShare()),
		mirror: min(max(d.State.DesiredExtras.MirrorPercent, o.Extras.MirrorPercent, 0), 100)}
	if d.Weight.Set && !emergency {
		w := d.Weight.Value
		// With an invalid split the real shares are unknown: only a walk
		// back may write a valid split that sends the canary less than the
		// last desired weight (a repair re-asking that weight may not).
		walkBackInvalid := d.State.Phase == PhaseAborting && w < in.Desired.Weight && w <= o.Weight
		if x.load(w) > o.Canary.Ready && (o.WeightInvalid && !walkBackInvalid || !o.WeightInvalid && w > o.Weight) {
			t.Fatalf("weight %d (load %d) puts more on the canary than its ready %d (route holds %d, invalid %v)", w, x.load(w), o.Canary.Ready, o.Weight, o.WeightInvalid)
		}
		if 100-w > o.Stable.Ready && (o.WeightInvalid || w < o.Weight) {
			t.Fatalf("weight %d puts %d on the stable side, ready %d (route holds %d, invalid %v)", w, 100-w, o.Stable.Ready, o.Weight, o.WeightInvalid)
		}
	}
	if mode != CapacityManaged {
		return
	}
	a := d.State.Desired
	if c := d.CanaryCapacity; c.Set && c.Value < o.Canary.Capacity {
		if o.WeightInvalid || c.Value < x.load(max(o.Weight, a.Weight)) {
			t.Fatalf("canary scaled down to %d below the traffic it may carry (route %d, desired %d, invalid %v)", c.Value, o.Weight, a.Weight, o.WeightInvalid)
		}
	}
	if c := d.StableCapacity; c.Set && c.Value < o.Stable.Capacity {
		if o.WeightInvalid || c.Value < 100-min(o.Weight, a.Weight) {
			t.Fatalf("stable scaled down to %d below the traffic it may carry (route %d, desired %d, invalid %v)", c.Value, o.Weight, a.Weight, o.WeightInvalid)
		}
	}
}

func hopString(d *Decision) string {
	out := ""
	if d.Weight.Set {
		out += fmt.Sprintf(" weight %d", d.Weight.Value)
	}
	if d.StableCapacity.Set {
		out += fmt.Sprintf(" stable %d", d.StableCapacity.Value)
	}
	if d.CanaryCapacity.Set {
		out += fmt.Sprintf(" canary %d", d.CanaryCapacity.Value)
	}
	if out == "" {
		return "none"
	}
	return out[1:]
}

// applyCommand applies command c (0..6: Pause, Resume, Abort, Promote,
// PromoteFull, Retry, and Retarget or Suspend) and reports whether it may
// move the weight back.
func applyCommand(t *rapid.T, c int, s State, now time.Time) (State, bool) {
	switch c {
	case 0:
		return s.Pause(now), false
	case 1:
		return s.Resume(now), false
	case 2:
		return s.Abort("test", now), true
	case 3:
		return s.Promote(now), false
	case 4:
		return s.PromoteFull(now), false
	case 5:
		return s.Retry(now), true
	default:
		if rapid.IntRange(0, 3).Draw(t, "suspend") == 0 {
			return s.Suspend(now), true
		}
		return s.Retarget(rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "revision"), now), true
	}
}

// checkReleased checks what a lost state and a release ask of one Step
// (State.Retarget's doc and invariant 11 of the package doc):
//   - a state that has not observed the world (Unobserved) asks for
//     nothing: it moves no traffic before it is observed;
//   - a Step reports a rollout released (the idle state adopted, or
//     Succeeded reached) only on an observation that shows it: all traffic
//     applied on the side the state names stable, which runs the stable
//     revision (fully rolled out, for an adoption) while the sides report
//     revisions.
func checkReleased(t TB, mode CapacityMode, in *State, d *Decision) {
	t.Helper()
	if in.Unobserved && d.HasHops() {
		t.Fatalf("a state that has not observed the world asks for %s", hopString(d))
	}
	adopted := in.Unobserved && d.State.Idle()
	succeeded := d.State.Phase == PhaseSucceeded && in.Phase != PhaseSucceeded && in.check(mode, nil) && in.Observed.Error == ""
	if !adopted && !succeeded {
		return
	}
	o := &d.State.Observed // in the roles of the released state (swapped at success)
	if mode != CapacityReplicas && (o.Weight != 0 || !o.WeightApplied && adopted) {
		t.Fatalf("released (%s -> %s) on a route that sends %d%% to the other side (applied %v)", in.Phase, d.State.Phase, o.Weight, o.WeightApplied)
	}
	if mode == CapacityReplicas && adopted && (o.Canary.Capacity > 0 || o.Canary.Ready > 0) {
		t.Fatalf("released (adopted) while the other side holds capacity %+v (observed %+v)", o.Canary, in.Observed)
	}
	if o.Revisions && (o.Stable.Revision != d.State.StableRevision || adopted && !o.Stable.Updated) {
		t.Fatalf("released (%s -> %s) on a stable side observed running %q (updated %v), the stable revision is %q",
			in.Phase, d.State.Phase, o.Stable.Revision, o.Stable.Updated, d.State.StableRevision)
	}
}
