package strategy

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

// The safety properties of the package documentation (# Invariants), from any stored state
// (corrupt ones included) against a world that loses ready capacity on
// either side at random, rewrites the route, rejects it and fails to answer.

// checkedActions counts the actions the safety properties checked in this
// run; TestSafetyVolume holds it to its floor.
var checkedActions atomic.Int64

// minCheckedActions is the least number of actions the safety properties
// check per run.
const minCheckedActions = 100_000

// genPercentish draws a number that is mostly a percentage, sometimes not.
func genPercentish(t *rapid.T, label string) int32 {
	if rapid.IntRange(0, 9).Draw(t, label+"Wild") == 0 {
		return rapid.Int32Range(-200, 600).Draw(t, label)
	}
	return rapid.Int32Range(0, 100).Draw(t, label)
}

func genTime(t *rapid.T, label string) metav1.MicroTime {
	if rapid.Bool().Draw(t, label+"Zero") {
		return metav1.MicroTime{}
	}
	return micro(t0.Add(time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, label))))
}

// genState draws any state a store could hand back: most are plausible
// rollouts in some phase, some are corrupt in one or more fields.
func genState(t *rapid.T) State {
	phases := []Phase{"", PhaseProgressing, PhasePaused, PhaseAborting, PhaseAborted, PhaseRolledBack,
		PhaseCompleting, PhaseSucceeded, "Bogus"}
	s := State{
		StableRevision: rapid.SampledFrom([]string{"", "a"}).Draw(t, "stableRev"),
		CanaryRevision: rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, "canaryRev"),
		StableSide:     rapid.SampledFrom([]Side{"", SideA, SideB, "C"}).Draw(t, "side"),
		Phase:          rapid.SampledFrom(phases).Draw(t, "phase"),
		StepIndex:      rapid.Int32Range(-2, 8).Draw(t, "stepIndex"),
		Desired: Allocation{
			Weight:         genPercentish(t, "dWeight"),
			StableCapacity: genPercentish(t, "dStable"),
			CanaryCapacity: genPercentish(t, "dCanary"),
		},
		Observed: Observation{
			At:            genTime(t, "obsAt"),
			Weight:        genPercentish(t, "oWeight"),
			WeightApplied: rapid.Bool().Draw(t, "oApplied"),
		},
		StartedAt:       genTime(t, "startedAt"),
		HopAt:           genTime(t, "hopAt"),
		WeightChangedAt: genTime(t, "weightChangedAt"),
		StepStartedAt:   genTime(t, "stepStartedAt"),
		ReachedAt:       genTime(t, "reachedAt"),
		AwaitingResume:  rapid.Bool().Draw(t, "paused"),
		PauseReason:     rapid.SampledFrom([]string{"", ReasonManualPause, ReasonPauseStep, ReasonGateInconclusive, ReasonUnhealthy}).Draw(t, "pauseReason"),
		SteadyRequested: rapid.Bool().Draw(t, "released"),
		UnhealthyCount:  rapid.Int32Range(-1, 5).Draw(t, "unhealthyCount"),
		FailingSince:    genTime(t, "failingSince"),
	}
	if s.Observed.WeightApplied {
		// Derived from draws already made, so that the cases saved under
		// testdata/rapid replay as they were: sometimes within the
		// interval since the hop, sometimes before it or far after it.
		s.WeightAppliedAt = s.Observed.At
	} else {
		s.WeightPendingAt = s.Observed.At
	}
	if rapid.Bool().Draw(t, "aborted") {
		s.Aborted = &AbortStatus{Reason: "stored", At: genTime(t, "abortedAt"), Emergency: rapid.Bool().Draw(t, "emergency")}
	}
	if rapid.Bool().Draw(t, "pending") {
		s.PendingRevision = rapid.SampledFrom([]string{"a", "c"}).Draw(t, "pendingRev")
	}
	return s
}

// genWorld draws a physical world, independent of any state: the route and
// both sides as they are, safe or not.
func genWorld(t *rapid.T, mode CapacityMode, maxUnavailable int32) *world {
	w := &world{mode: mode, accepted: rapid.Bool().Draw(t, "wAccepted")}
	w.weight = rapid.Int32Range(0, 100).Draw(t, "wWeight")
	w.askedWeight = w.weight
	for _, sd := range []*side{&w.stable, &w.canary} {
		sd.replicas = rapid.Int32Range(0, 12).Draw(t, "wReplicas")
		sd.asked = rapid.Int32Range(0, 100).Draw(t, "wCapacity")
		if mode == CapacityFixed {
			sd.asked = 100
		}
		sd.current = sd.asked
		sd.ready = sd.readyFor(sd.asked)
	}
	w.unsafeStart = !w.trafficFits(maxUnavailable)
	return w
}

// worldAction changes the world the way real backends do: crashes, crash
// loops, another writer, a rejecting parent, adapters that stop answering,
// a deploy that never rolls out, a side redeployed by someone else.
func worldAction(t *rapid.T, w *world) {
	sd := &w.stable
	if rapid.Bool().Draw(t, "canarySide") {
		sd = &w.canary
	}
	// The range grows within the same bit length (0..5 was drawn from three
	// bits too), so the cases saved under testdata/rapid replay as they were.
	switch rapid.IntRange(0, 7).Draw(t, "worldAction") {
	case 0, 1:
		sd.crash(rapid.Int32Range(1, 100).Draw(t, "crash"))
	case 2:
		sd.loop = !sd.loop
	case 3:
		w.accepted = !w.accepted
	case 4:
		if w.mode != CapacityReplicas {
			w.invalid = !w.invalid
		}
	case 5:
		w.failing = !w.failing
	case 6:
		sd.stuck = !sd.stuck // a deploy on it never rolls out
	default:
		if rapid.Bool().Draw(t, "scaleOther") {
			// Someone else scales the side (an autoscaler, a person).
			w.scale(sd, rapid.Int32Range(0, 100).Draw(t, "scaleTo"), rapid.IntRange(0, 3).Draw(t, "scaleLag"))
			return
		}
		// Someone else redeploys the side (or restarts it).
		w.redeploy(sd, rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "redeploy"), rapid.IntRange(0, 3).Draw(t, "redeployLag"))
	}
}

// lostState replaces the state as a controller whose status was lost
// would see it: wiped (the zero State and a Retarget to the revision the
// spec asks for, the one s names last), or restored from an older save
// (one of history, through JSON, then the spec's Retarget). The world
// follows the roles of the new state; a side that carries traffic while it
// does not run the revision its role in the restored state names, and a
// stable side that does not run it at all, is the world's doing (foreign)
// until the engine has reacted.
func lostState(t *rapid.T, w *world, s State, history []State, now time.Time) State {
	spec := specRevision(&s)
	if spec == "" {
		spec = "a"
	}
	if len(history) == 0 || rapid.Bool().Draw(t, "wipe") {
		t.Logf("status wiped at %s: spec %s", now.Format("15:04:05"), spec)
		return w.wipe(&s, spec, now)
	}
	old := roundTrip(t, history[rapid.IntRange(0, len(history)-1).Draw(t, "save")])
	w.follow(&s, &old)
	for _, r := range []struct {
		sd  *side
		rev string
	}{{&w.stable, old.StableRevision}, {&w.canary, old.CanaryRevision}} {
		// The engine never deploys on the stable side, and a walk back
		// returns traffic to it whatever it runs (DeployTarget's doc): a stable side that does not run the restored state's
		// stable revision is the world's doing even while it carries no
		// traffic yet.
		routed, asked := w.carries(r.sd)
		if (routed || asked || r.sd == &w.stable) && r.sd.rev != r.rev {
			r.sd.foreign = true
		}
	}
	t.Logf("an older save restored at %s: %s %s/%s/%s, then the spec's %s", now.Format("15:04:05"), old.Phase,
		old.StableRevision, old.CanaryRevision, old.PendingRevision, spec)
	return old.Retarget(spec, now)
}

// observeWorld is what a Runner writes into the state before a Step: the
// world, or the stored observation with an error when the adapters fail.
func observeWorld(s *State, w *world, now time.Time) {
	if w.failing {
		s.Observed.Error = "router: read weights: not found"
		return
	}
	s.Observed = w.observe(now)
}

// TestNeverUnsafe: from any stored state, against a world that loses ready
// capacity, rewrites and rejects the route, stops answering, never rolls a
// deploy out and has its sides redeployed by someone else, with random
// commands, restarts, lost writes and clocks that jump back, no hop ever
// puts traffic above observed ready capacity (but the documented emergency),
// no side is scaled below the traffic it may carry, a corrupt state asks for
// nothing, Step never turns a valid state into an invalid one, and the
// revisions hold (checkRevisionHops, world.checkRevisions; what a random
// world routes when the run begins is the world's doing, see world.adopt).
func TestNeverUnsafe(t *testing.T) { rounds(t, 4, neverUnsafe) }

// rounds runs a property n times, as subtests, each with its own seed.
func rounds(t *testing.T, n int, prop func(*rapid.T)) {
	for round := 0; round < n; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) { rapid.Check(t, prop) })
	}
}

func neverUnsafe(t *rapid.T) { unsafeWith(t, genStrategy, nil) }

// unsafeWith is neverUnsafe for the strategies gen draws; check, when set,
// checks each decision Step made from state s as well, and the world may
// also drop the route's extras (another writer re-applying the route
// without them).
func unsafeWith(t *rapid.T, gen func(*rapid.T, CapacityMode) Strategy, check func(t *rapid.T, s State, d *Decision)) {
	mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
	strat := gen(t, mode)
	opts, _ := optionsOf(strat)
	var s State
	if rapid.Bool().Draw(t, "fresh") {
		s = NewState("a", "b")
	} else {
		s = genState(t)
	}
	w := genWorld(t, mode, opts.MaxUnavailablePercent)
	w.adopt(&s)
	now := t0
	emergencySeen := false
	var history []State // the states stored so far, for an older save
	steps := rapid.IntRange(1, 300).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		checkedActions.Add(1)
		switch rapid.IntRange(0, 9).Draw(t, "action") {
		case 0, 1, 2, 3:
			observeWorld(&s, w, now)
			valid := s.check(mode, nil)
			d := checkStep(t, strat, s, now)
			t.Logf("step at %s: %s desired %+v observed w%d applied %v invalid %v err %q stable %+v canary %+v -> %s %+v hops %s (%s)",
				now.Format("15:04:05"), s.Phase, s.Desired, s.Observed.Weight, s.Observed.WeightApplied, s.Observed.WeightInvalid,
				s.Observed.Error, s.Observed.Stable, s.Observed.Canary, d.State.Phase, d.State.Desired, hopString(&d), d.State.Message)
			if !valid && d.HasHops() {
				t.Fatalf("a hop from an invalid state: %+v", d)
			}
			if valid && !d.State.check(mode, nil) {
				t.Fatalf("Step made a valid state invalid: %v\nin %+v\nout %+v", d.State.Validate(mode), s, d.State)
			}
			if check != nil && valid {
				check(t, s, &d)
			}
			emergencySeen = emergencySeen || d.State.Aborted != nil && d.State.Aborted.Emergency
			w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
			if d.State.stableSide() != s.stableSide() && (d.State.Phase == PhaseSucceeded || s.Unobserved) {
				w.swap()
			}
			s = d.State
			if valid && len(history) < 64 {
				history = append(history, s)
			}
		case 4, 5:
			w.tick()
			if !emergencySeen && !w.overloadExplained(opts.MaxUnavailablePercent) {
				t.Fatalf("world: weight %d, ready stable %d canary %d, with no crash to explain it", w.weight, w.stable.ready, w.canary.ready)
			}
		case 6:
			if check != nil && rapid.IntRange(0, 3).Draw(t, "dropExtras") == 0 {
				w.askedExtras, w.extras = TrafficExtras{}, TrafficExtras{} // the route re-applied without them
				break
			}
			worldAction(t, w)
		case 7:
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(10*time.Minute)).Draw(t, "advance")))
		case 8:
			valid := s.check(mode, nil)
			stable, pending := s.StableRevision, s.PendingRevision
			switch c := rapid.IntRange(0, 8).Draw(t, "command"); c {
			case 0, 1, 2, 3, 4, 5, 6:
				s, _ = applyCommand(t, c, s, now)
			case 7:
				if rapid.IntRange(0, 2).Draw(t, "lost") == 0 {
					s = lostState(t, w, s, history, now)
					break
				}
				s = roundTrip(t, s) // a restarted controller
			default:
				now = now.Add(-time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "back")))
			}
			if valid && !s.check(mode, nil) {
				t.Fatalf("a command made a valid state invalid: %v", s.Validate(mode))
			}
			w.pendingReplaced(pending, &s)
			if stable == "" && s.StableRevision != "" {
				// The first revision a state names is the one the caller
				// created the workload with (DeployTarget's doc): the stable
				// side runs it.
				w.stable.rev, w.stable.updated = s.StableRevision, true
			}
		default:
			// A reconcile whose state is never stored: the world moves,
			// the state does not.
			observeWorld(&s, w, now)
			t.Logf("lost step at %s: %+v", now.Format("15:04:05"), s)
			d := checkStep(t, strat, s, now)
			emergencySeen = emergencySeen || d.State.Aborted != nil && d.State.Aborted.Emergency
			w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lostLag"))
		}
		w.checkRevisions(t, &s)
	}
}

// TestNeverStuckSilently: whatever the world does (lag, a data plane that
// never accepts, crash loops on either side, invalid splits, adapters that
// stop answering, gates that never answer, deploys that never roll out,
// sides redeployed by someone else), a rollout left alone either
// reaches a terminal phase, waits visibly for a person (paused), or reports
// Degraded with a reason once its progress deadline has passed.
func TestNeverStuckSilently(t *testing.T) { rounds(t, 2, neverStuckSilently) }

func neverStuckSilently(t *rapid.T) {
	mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
	strat := genStrategy(t, mode)
	opts, _ := optionsOf(strat)
	s := NewState("a", "b")
	w := newWorld(mode, &s)
	w.stable.replicas = rapid.Int32Range(0, 12).Draw(t, "stableReplicas")
	w.canary.replicas = rapid.Int32Range(0, 12).Draw(t, "canaryReplicas")
	w.stable.ready = w.stable.readyFor(w.stable.asked)
	// Slack: the longest a healthy rollout may wait without progress.
	slack := opts.pollInterval()
	switch v := strat.(type) {
	case Incremental:
		slack += v.Interval.Duration
	case Canary:
		for _, st := range v.Steps {
			if st.Pause != nil && st.Pause.Duration != nil {
				slack = max(slack, st.Pause.Duration.Duration+opts.pollInterval())
			}
		}
	}
	slack += opts.ScaleDownDelay.Duration
	deadline := opts.progressDeadline()
	now := t0
	since := now // the start of the current stretch without progress
	for i := 0; i < 400; i++ {
		checkedActions.Add(1)
		switch rapid.IntRange(0, 29).Draw(t, "worldActs") {
		case 0, 1, 2:
			worldAction(t, w)
		case 3:
			// The status is wiped: the adoption starts a new wait, which
			// must end or report Degraded within the deadline too.
			s = w.wipe(&s, specRevision(&s), now)
			since = now
		}
		observeWorld(&s, w, now)
		t.Logf("step at %s: %s desired %+v observed %+v", now.Format("15:04:05"), s.Phase, s.Desired, s.Observed)
		d := checkStep(t, strat, s, now)
		if d.HasHops() || d.State.Phase != s.Phase || d.State.StepIndex != s.StepIndex || d.State.AwaitingResume ||
			!d.State.WeightAppliedAt.Equal(&s.WeightAppliedAt) {
			// A weight seen in force for the first time is progress too:
			// the interval counts from there (invariant 16).
			since = now
		}
		w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
		if d.State.stableSide() != s.stableSide() {
			w.swap()
		}
		s = d.State
		w.checkRevisions(t, &s)
		if s.Phase.Terminal() || s.Idle() {
			return // ended (an adopted world already released is idle)
		}
		if deadline > 0 && now.Sub(since) > deadline+slack && !degradedNow(&s) {
			t.Fatalf("no progress for %s (deadline %s) and not Degraded: %s: %s", now.Sub(since), deadline, s.Phase, s.Message)
		}
		w.tick()
		w.checkRevisions(t, &s)
		next := d.RequeueAfter
		if next <= 0 {
			next = opts.pollInterval()
		}
		now = now.Add(next)
	}
}

func degradedNow(s *State) bool {
	for _, c := range s.Conditions {
		if c.Type == ConditionDegraded {
			return c.Status == metav1.ConditionTrue && c.Reason != ""
		}
	}
	return false
}

// TestSafetyVolume holds the safety properties to at least
// minCheckedActions checked actions per run: it runs after them (Go runs a
// file's tests in source order) and checks more until the floor is reached.
//
// A run is what was checked since the last TestSafetyVolume ended, so that
// with -count=N every repetition checks its own floor (the counter is the
// package's, and would otherwise be past the floor after the first).
func TestSafetyVolume(t *testing.T) {
	floor := volumeEnd.Load() + minCheckedActions
	for round := 0; checkedActions.Load() < floor; round++ {
		if round == 100 {
			t.Fatalf("only %d actions checked after %d rounds", checkedActions.Load()-volumeEnd.Load(), round)
		}
		rapid.Check(t, neverUnsafe)
	}
	t.Logf("%d actions checked", checkedActions.Load()-volumeEnd.Load())
	volumeEnd.Store(checkedActions.Load())
}

// volumeEnd is checkedActions when TestSafetyVolume last ended.
var volumeEnd atomic.Int64
