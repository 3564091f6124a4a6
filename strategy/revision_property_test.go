package strategy

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Revisions on sides (DeployTarget's doc, and invariants 6 to 8 of the package
// doc's "# Invariants"):
// the checks every property that steps the engine makes of a Step, and a
// property of chains of commands over several revisions.

// checkRevisionHops checks what invariants 6 to 8 of the package doc
// ("# Invariants", explained on DeployTarget) ask of one Step
// while the sides report revisions, on the observation the Step was given:
//   - a deploy is asked alone, for the canary revision, only while the
//     canary side is observed at zero: weight 0 asked and accepted on the
//     route (with a router), capacity 0 asked, observed, settled, nothing
//     ready (with capacity setters);
//   - no weight moves onto the canary side and no capacity is added to it
//     unless it is observed running the canary revision (fully rolled out,
//     when it had nothing yet);
//   - progress adds no capacity to the stable side and moves no weight
//     onto it unless it is observed running the stable revision;
//   - a canary side observed running another revision while it carries
//     traffic or capacity is walked back (an abort) at once, in any phase.
func checkRevisionHops(t TB, mode CapacityMode, in *State, d *Decision) {
	t.Helper()
	o := &in.Observed
	t = phaseTB{t, in, &d.State}
	if !o.Revisions || o.Error != "" || in.Idle() || in.Unobserved || !in.check(mode, nil) {
		return
	}
	st := &d.State
	router, setters := mode != CapacityReplicas, mode != CapacityFixed
	// At zero as observed, and as the Step leaves the allocation asked for
	// (a walk back records a canary that already holds less than asked).
	routeAtZero := !router || o.Weight == 0 && o.WeightApplied && !o.WeightInvalid && st.Desired.Weight == 0
	sideAtZero := !setters || o.Canary.Capacity == 0 && o.Canary.Ready == 0 && o.Canary.Settled && st.Desired.CanaryCapacity == 0
	if d.Deploy.Set {
		switch {
		case d.Weight.Set || d.StableCapacity.Set || d.CanaryCapacity.Set:
			t.Fatalf("deploy %s asked with another hop: %s", d.Deploy.Revision, hopString(d))
		case d.Deploy.Revision != st.CanaryRevision:
			t.Fatalf("deploy %s, the canary revision is %s", d.Deploy.Revision, st.CanaryRevision)
		case !routeAtZero || !sideAtZero:
			t.Fatalf("deploy %s on a canary side not at zero: desired %+v observed weight %d applied %v invalid %v canary %+v",
				d.Deploy.Revision, in.Desired, o.Weight, o.WeightApplied, o.WeightInvalid, o.Canary)
		}
	}
	canaryOK := func(fromZero bool) bool {
		return o.Canary.Revision == st.CanaryRevision && (o.Canary.Updated || !fromZero)
	}
	// Weight from nothing needs the revision rolled out where no capacity
	// was added first (the fixed mode); elsewhere the capacity did.
	if w := d.Weight; w.Set && w.Value > o.Weight && !canaryOK(!setters && in.Desired.Weight == 0 && o.Weight == 0) {
		t.Fatalf("weight %d (route %d) moves onto a canary side observed running %q (updated %v), the canary revision is %q",
			w.Value, o.Weight, o.Canary.Revision, o.Canary.Updated, st.CanaryRevision)
	}
	// A repair asks again for the canary capacity asked while the side was
	// observed rolled out: it needs the canary revision, not a rollout
	// finished again (a restart may have begun since), unless the side is
	// at 0 (scaled down by someone), where a rollout finishes at once.
	if c := d.CanaryCapacity; c.Set && c.Value > o.Canary.Capacity && !canaryOK(o.Canary.Capacity == 0) {
		t.Fatalf("canary capacity %d (observed %d) added to a side running %q (updated %v), the canary revision is %q",
			c.Value, o.Canary.Capacity, o.Canary.Revision, o.Canary.Updated, st.CanaryRevision)
	}
	// Progress holds while the stable side runs another revision
	// (Degraded, StableRevisionMismatch): nothing moves onto it. A walk
	// back still returns traffic to it, and a repair (which asks again for
	// the allocation already desired) is not held either.
	if o.Stable.Revision != st.StableRevision && st.Phase != PhaseAborting && st.Desired != in.Desired {
		if c := d.StableCapacity; c.Set && c.Value > o.Stable.Capacity {
			t.Fatalf("stable capacity %d (observed %d) added to a side running %q, the stable revision is %q",
				c.Value, o.Stable.Capacity, o.Stable.Revision, st.StableRevision)
		}
		if w := d.Weight; w.Set && router && (w.Value < o.Weight || o.WeightInvalid) && w.Value < 100 {
			t.Fatalf("weight %d (route %d) moves onto a stable side running %q, the stable revision is %q",
				w.Value, o.Weight, o.Stable.Revision, st.StableRevision)
		}
	}
	// The reaction to a canary side redeployed under traffic or capacity,
	// in any phase but a walk back (which is already taking them away).
	if in.Phase == PhaseAborting || in.Phase.Terminal() {
		return
	}
	// (The route's spec weight says what the canary may receive, even in a
	// split that is not a valid one: 0 there is nothing.)
	carries := router && (o.Weight > 0 || in.Desired.Weight > 0) ||
		setters && (o.Canary.Capacity > 0 || o.Canary.Ready > 0 || in.Desired.CanaryCapacity > 0)
	// A walk back that finds no traffic left to take away ends in this Step.
	walkedBack := st.Phase == PhaseAborted && !(router && (o.Weight > 0 || o.WeightInvalid))
	if o.Canary.Revision != in.CanaryRevision && carries && st.Phase != PhaseAborting && !walkedBack {
		t.Fatalf("the canary side runs %q, not the canary revision %q, under traffic or capacity (desired %+v, canary %+v), and the rollout goes on: %s, %s",
			o.Canary.Revision, in.CanaryRevision, in.Desired, o.Canary, st.Phase, st.Message)
	}
}

// revisionFault is a fault of revisions on sides: a deploy on the canary
// side that never rolls out (or that rolls out again), or someone else
// redeploying either side, with another revision or the one it runs.
func revisionFault(t *rapid.T, w *world) {
	if rapid.Bool().Draw(t, "stuck") {
		w.canary.stuck = !w.canary.stuck
		return
	}
	sd := &w.stable
	if rapid.Bool().Draw(t, "redeployCanary") {
		sd = &w.canary
	}
	w.redeploy(sd, rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "redeploy"), rapid.IntRange(0, 3).Draw(t, "redeployLag"))
}

// phaseTB adds the phases and message of a Step to what fails it.
type phaseTB struct {
	TB
	in, out *State
}

func (p phaseTB) Fatalf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Fatalf(format+" (%s -> %s: %s)", append(args, p.in.Phase, p.out.Phase, p.out.Message)...)
}

// chainRevisions are the revisions the chains move between.
var chainRevisions = []string{"v1", "v2", "v3", "v4", "v5"}

// TestRevisionChains: random chains of Retarget, Abort, Retry, Promote and
// PromoteFull over five revisions (back to earlier ones included), in every
// capacity mode and strategy, against a world that lags, crashes, rejects
// the route, stops answering, restarts the controller, never rolls a deploy
// out and has its sides redeployed by someone else. Every Step and every
// change of the world keeps invariants 6 to 8 of the package doc's
// "# Invariants" (checkStep, world.checkRevisions). At the end of a chain
// the faults are lifted and the rollout is left to run (retried when
// something aborted it): all traffic ends on the last revision asked for,
// on a stable side running it.
func TestRevisionChains(t *testing.T) {
	rounds(t, 3, func(t *rapid.T) { revisionChain(t, false) })
}

// revisionChain is one chain; lost adds reconciles whose state is never
// stored to the world's faults.
func revisionChain(t *rapid.T, lost bool) {
	mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
	strat := genStrategy(t, mode)
	opts, _ := optionsOf(strat)
	now := t0
	// The workload is created with v1 on side A; side B runs nothing yet,
	// or v1 too when it was made from the same template.
	s := State{}.Retarget("v1", now)
	w := newWorld(mode, &s)
	w.stable.replicas = rapid.Int32Range(0, 12).Draw(t, "stableReplicas")
	w.canary.replicas = rapid.Int32Range(0, 12).Draw(t, "canaryReplicas")
	w.stable.ready, w.canary.ready = w.stable.readyFor(w.stable.asked), w.canary.readyFor(w.canary.asked)
	if rapid.Bool().Draw(t, "sameTemplate") {
		w.canary.rev = "v1"
	}
	for _, name := range strat.Gates() {
		w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
	}
	// A chain begins with a rollout to another revision.
	last := rapid.SampledFrom(chainRevisions[1:]).Draw(t, "first") // the last revision asked for
	s = s.Retarget(last, now)
	emergencySeen := false
	successes := 0
	// step observes the world, steps the engine and applies what it asks;
	// a lost step's state is never stored. Within stretches and at the end
	// of the chain (most Steps) only the decision is checked: that Step is
	// pure, the other properties check at length.
	step := func(lost, pure bool) Decision {
		observeWorld(&s, w, now)
		var d Decision
		if pure {
			d = checkStep(t, strat, s, now)
		} else {
			d = checkDecision(t, strat, s, strat.Step(s, now))
		}
		t.Logf("step at %s (lost %v): %s %s/%s/%s desired %+v observed w%d applied %v stable %+v canary %+v err %q -> %s %+v hops %s deploy %q (%s)",
			now.Format("15:04:05"), lost, s.Phase, s.StableRevision, s.CanaryRevision, s.PendingRevision, s.Desired,
			s.Observed.Weight, s.Observed.WeightApplied, s.Observed.Stable, s.Observed.Canary, s.Observed.Error,
			d.State.Phase, d.State.Desired, hopString(&d), d.Deploy.Revision, d.State.Message)
		emergencySeen = emergencySeen || d.State.Aborted != nil && d.State.Aborted.Emergency
		w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
		if !lost {
			if d.State.stableSide() != s.stableSide() {
				w.swap() // the canary side now holds the stable role
				successes++
			}
			s = d.State
		}
		return d
	}
	tick := func() {
		w.tick()
		if !emergencySeen && !w.overloadExplained(opts.MaxUnavailablePercent) {
			t.Fatalf("world: weight %d, ready stable %d canary %d", w.weight, w.stable.ready, w.canary.ready)
		}
	}
	actions := 10 + rapid.IntRange(0, 200).Draw(t, "actions")
	for i := 0; i < actions; i++ {
		switch rapid.IntRange(0, 9).Draw(t, "action") {
		case 0, 1:
			step(false, true)
		case 2, 3:
			// A stretch of reconciles as a controller runs them: the
			// world moves between them, time passes as the engine asks,
			// a person resumes what pauses.
			n := 20 + rapid.IntRange(0, 300).Draw(t, "stretch")
			for j := 0; j < n && !s.Idle() && !s.Phase.Terminal(); j++ {
				d := step(false, false)
				w.checkRevisions(t, &s)
				tick()
				w.checkRevisions(t, &s)
				if s.AwaitingResume {
					s = s.Resume(now)
				}
				if next := d.RequeueAfter; !d.HasHops() && next > 0 {
					now = now.Add(next)
				} else if !d.HasHops() {
					now = now.Add(opts.pollInterval())
				}
			}
		case 4:
			tick()
		case 5:
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(5*time.Minute)).Draw(t, "advance")))
		case 6, 7:
			valid := s.check(mode, nil)
			pending := s.PendingRevision
			switch rapid.IntRange(0, 5).Draw(t, "command") {
			case 0, 1:
				last = rapid.SampledFrom(chainRevisions).Draw(t, "retarget")
				s = s.Retarget(last, now)
			case 2:
				s = s.Abort("test", now)
			case 3:
				s = s.Retry(now)
			case 4:
				s = s.Promote(now)
			default:
				s = s.PromoteFull(now)
			}
			t.Logf("command at %s: %s %s/%s/%s", now.Format("15:04:05"), s.Phase, s.StableRevision, s.CanaryRevision, s.PendingRevision)
			w.pendingReplaced(pending, &s)
			if valid && !s.check(mode, nil) {
				t.Fatalf("a command made a valid state invalid: %v", s.Validate(mode))
			}
		case 8:
			chainFault(t, w, strat)
		default:
			if lost && rapid.Bool().Draw(t, "lost") {
				step(true, true) // a reconcile whose state is never stored
			} else {
				s = roundTrip(t, s) // a restarted controller
			}
		}
		w.checkRevisions(t, &s)
	}

	// The end of the chain: no more commands, the faults are lifted (and a
	// person puts the stable revision back on a stable side someone else
	// redeployed), and the rollout is left to run, retried when something
	// aborted it.
	w.accepted, w.invalid, w.failing, w.health = true, false, false, HealthHealthy
	w.gates = nil
	for _, name := range strat.Gates() {
		w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
	}
	for _, sd := range []*side{&w.stable, &w.canary} {
		sd.stuck, sd.loop = false, false
	}
	if w.stable.rev != s.StableRevision {
		w.redeploy(&w.stable, s.StableRevision, 0)
	}
	w.settle()
	w.checkRevisions(t, &s)
	t.Logf("the chain ends on %s, after %d rollouts succeeded", last, successes)
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatalf("not finished: %s %s/%s/%s %s", s.Phase, s.StableRevision, s.CanaryRevision, s.PendingRevision, s.Message)
		}
		d := step(false, false)
		if d.HasHops() {
			w.settle()
			w.checkRevisions(t, &s)
			continue
		}
		w.checkRevisions(t, &s)
		if s.Phase == PhaseAborted {
			if s = s.Retry(now); s.Phase == PhaseAborted {
				t.Fatalf("Retry left the rollout Aborted")
			}
			continue
		}
		if s.Idle() || s.Phase.Terminal() {
			break
		}
		if s.AwaitingResume {
			s = s.Resume(now)
			continue
		}
		next := d.RequeueAfter
		if next <= 0 {
			next = opts.pollInterval()
		}
		now = now.Add(next)
	}
	if s.StableRevision != last || s.CanaryRevision != last || s.PendingRevision != "" || s.Aborted != nil {
		t.Fatalf("ended %s with stable %q canary %q pending %q aborted %+v, the last revision asked for is %q",
			s.Phase, s.StableRevision, s.CanaryRevision, s.PendingRevision, s.Aborted, last)
	}
	if routed, _ := w.carries(&w.canary); routed {
		t.Fatalf("the canary side (running %q) still carries traffic: weight %d, ready %d", w.canary.rev, w.weight, w.canary.ready)
	}
	if w.stable.rev != last || !w.stable.updated {
		t.Fatalf("the stable side runs %q (updated %v), not %q", w.stable.rev, w.stable.updated, last)
	}
	if want := (Allocation{StableCapacity: 100, CanaryRevision: s.Desired.CanaryRevision}); mode != CapacityFixed && s.Desired != want {
		t.Fatalf("ended at %+v, want %+v", s.Desired, want)
	}
}

// chainFault is one fault of the world in a chain: a deploy that never rolls
// out, a side redeployed by someone else, a parent that rejects the route,
// a crash, an unhealthy canary, adapters that stop answering, a gate
// verdict.
func chainFault(t *rapid.T, w *world, strat Strategy) {
	sd := &w.stable
	if rapid.Bool().Draw(t, "canarySide") {
		sd = &w.canary
	}
	switch rapid.IntRange(0, 7).Draw(t, "fault") {
	case 0:
		sd.stuck = !sd.stuck
	case 1, 2:
		revs := append([]string{"x"}, chainRevisions...)
		w.redeploy(sd, rapid.SampledFrom(revs).Draw(t, "redeploy"), rapid.IntRange(0, 3).Draw(t, "redeployLag"))
	case 3:
		w.accepted = !w.accepted
	case 4:
		sd.crash(rapid.Int32Range(1, 100).Draw(t, "crash"))
	case 5:
		w.health = rapid.SampledFrom([]Health{HealthHealthy, HealthUnhealthy, HealthInconclusive}).Draw(t, "health")
	case 6:
		w.failing = !w.failing
	default:
		if gates := strat.Gates(); len(gates) > 0 {
			w.gates = []GateResult{{
				Name:    rapid.SampledFrom(gates).Draw(t, "gate"),
				Verdict: rapid.SampledFrom([]Verdict{VerdictPass, VerdictFail, VerdictInconclusive}).Draw(t, "verdict"),
			}}
		}
	}
}
