package strategy

import (
	"fmt"
	"time"

	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// world is a small, deterministic stand-in for the adapters, used by the
// property tests: a router and two sides that apply what they are asked after
// a lag, with replica granularity, each side running a revision that rolls
// out after a lag. The world is kept in role terms (stable, canary), as a
// Runner maps the physical sides through State.StableSide: a rollout that
// succeeds swaps them (swap).
type world struct {
	mode CapacityMode
	// control is the spec's control, applied before every Step.
	control Control
	// noRevisions: the sides do not report the revisions they run
	// (Observation.Revisions unset). By default they do.
	noRevisions bool
	// breach records a deploy that landed on a side carrying traffic or
	// capacity (see apply); reported by revisionBreach.
	breach string

	// router
	askedWeight, weight int32
	weightLag           int
	accepted            bool
	// The extras as the route's spec holds them and as the data plane
	// applies them: they land with the weight's lag (one route object).
	askedExtras, extras TrafficExtras

	stable, canary side

	health Health
	gates  []GateResult

	// invalid: another writer left weights that are not a split of 100;
	// the next weight write replaces them. failing: the adapters cannot be
	// read at all.
	invalid bool
	failing bool
	// unsafeStart: the world began with traffic above ready capacity;
	// cleared once traffic fits.
	unsafeStart bool
}

type side struct {
	asked    int32 // capacity asked for
	current  int32 // capacity the side reports it is set to
	ready    int32 // ready share
	replicas int32 // full replica count (granularity)
	halfUp   bool  // round replica counts half-up (Ray Serve) instead of up
	lag      int
	loop     bool // crash-looping: no replica becomes ready
	// crashed: ready capacity was lost here since the side was last whole;
	// traffic above ready capacity is then the world's doing, not a hop's
	// (a hop decided before the crash may still land on it).
	crashed bool

	// rev is the revision the side's workload was last deployed with, as
	// its revision reader reports it at once; updated, that it is fully
	// rolled out, which takes revLag observations after a deploy. While a
	// side with capacity rolls out, half of its ready capacity restarts.
	rev     string
	revLag  int
	updated bool
	// stuck: a deploy that never rolls out (an image that cannot be
	// pulled): updated stays false until the fault is lifted.
	stuck bool
	// restarting: the side rolls out the revision it already ran (a
	// restart): what it runs is that revision throughout.
	restarting bool
	// foreign: the world itself (someone else) redeployed the side, or it
	// carried traffic when the world was made. Traffic on it is then the
	// world's doing, until the engine has reacted (see revisionBreach).
	foreign bool
	// scaled: someone else scaled the side down; traffic above its ready
	// capacity is the world's doing until the engine has asked the side for
	// a capacity again (reasked) and the side is whole at it.
	scaled, reasked bool
}

// deploy rolls revision rev out on the side, visible as updated after lag
// observations. Asking again for the revision the side already runs changes
// nothing (a workload applied with the same spec), unless restart (someone
// restarting it).
func (s *side) deploy(rev string, lag int, restart bool) {
	if s.rev == rev && !restart {
		return
	}
	s.restarting = s.rev == rev && s.updated
	s.rev, s.revLag, s.updated = rev, lag, false
}

// rolling reports that the side is rolling out a revision.
func (s *side) rolling() bool { return !s.updated }

// readyTarget is the ready share the side is heading for: what its capacity
// gives once settled, half of it while it rolls out a revision (replicas of
// the old revision stop before the new ones are ready).
func (s *side) readyTarget() int32 {
	t := s.readyFor(s.asked)
	if s.rolling() {
		t /= 2
	}
	return t
}

// crash takes n percent of ready capacity away at once, as pods that crash
// after becoming ready; the side replaces them (unless loop) like new ones.
func (s *side) crash(n int32) {
	s.ready = max(0, s.ready-n)
	s.crashed = true
}

// readyFor is the ready share a settled side reaches at capacity c.
func (s *side) readyFor(c int32) int32 {
	if c <= 0 {
		return 0
	}
	n := s.replicas
	if n <= 0 {
		return c
	}
	var k int32
	if s.halfUp {
		k = (n*c + 50) / 100
		if k < 1 {
			k = 1
		}
	} else {
		k = (n*c + 99) / 100
	}
	return k * 100 / n
}

func (s *side) settled() bool {
	return s.lag == 0 && s.current == s.asked && s.ready == s.readyFor(s.asked)
}

// tick moves the side one observation closer to what was asked. Scaling down
// takes effect at once (pods stop); scaling up becomes ready after the lag.
// A revision rolls out after its own lag, unless stuck.
func (s *side) tick() {
	if s.current != s.asked {
		s.current = s.asked
	}
	if s.rolling() && !s.stuck {
		if s.revLag > 0 {
			s.revLag--
		} else {
			s.updated, s.restarting = true, false
		}
	}
	target := s.readyTarget()
	switch {
	case target < s.ready:
		if s.rolling() {
			s.crashed = true // replicas restarting on a new revision: the world's doing
		}
		s.ready = target
	case s.lag > 0:
		s.lag--
	case target > s.ready && !s.loop:
		s.ready += (target - s.ready + 1) / 2 // partial: replicas become ready a few at a time
	}
}

// newWorld makes a world that holds what st desires, with the stable side
// running the stable revision and the canary side the revision last
// deployed there (none, for a new state), both rolled out.
func newWorld(mode CapacityMode, st *State) *world {
	w := &world{mode: mode, accepted: true}
	w.askedWeight, w.weight = st.Desired.Weight, st.Desired.Weight
	w.stable = side{asked: st.Desired.StableCapacity, current: st.Desired.StableCapacity, rev: st.StableRevision, updated: true}
	w.canary = side{asked: st.Desired.CanaryCapacity, current: st.Desired.CanaryCapacity, rev: st.Desired.CanaryRevision, updated: true}
	if mode == CapacityFixed {
		w.stable.asked, w.stable.current, w.canary.asked, w.canary.current = 100, 100, 100, 100
	}
	w.stable.ready = w.stable.readyFor(w.stable.asked)
	w.canary.ready = w.canary.readyFor(w.canary.asked)
	return w
}

// apply records what a decision asks for. lag is the number of ticks until
// a change is visible.
//
// A deploy lands on the canary side. It is recorded as a breach of
// invariant 7 of the package doc's "# Invariants" (a deploy only on a
// side at weight 0, and capacity 0 with capacity setters) if that side
// carries traffic or capacity now or is about to (asked for it), as the
// data plane and the side have it, not as observed.
func (w *world) apply(d *Decision, lag int) {
	if d.Deploy.Set {
		if c := &w.canary; w.breach == "" && (w.mode != CapacityReplicas && (w.weight != 0 || w.askedWeight != 0) ||
			w.mode != CapacityFixed && (c.asked != 0 || c.current != 0 || c.ready != 0)) {
			w.breach = fmt.Sprintf("deploy %s on a canary side that carries traffic or capacity: weight %d (asked %d), capacity %d (asked %d), ready %d",
				d.Deploy.Revision, w.weight, w.askedWeight, c.current, c.asked, c.ready)
		}
		w.canary.deploy(d.Deploy.Revision, lag, false)
		w.canary.foreign = false // the engine's own deploy: no longer the world's doing
	}
	// Asking again for what is already asked changes nothing (adapters are
	// idempotent): a change already on its way keeps its lag.
	if d.Weight.Set && w.mode != CapacityReplicas && (d.Weight.Value != w.askedWeight || w.invalid) {
		w.askedWeight = d.Weight.Value
		w.weightLag = lag
		w.invalid = false
	}
	if d.Extras && w.mode != CapacityReplicas && !d.State.DesiredExtras.Equal(w.askedExtras) {
		w.askedExtras = *d.State.DesiredExtras.DeepCopy()
		w.weightLag = lag
	}
	if w.mode == CapacityFixed {
		return
	}
	if d.StableCapacity.Set {
		w.stable.reasked = true
	}
	if d.CanaryCapacity.Set {
		w.canary.reasked = true
	}
	if d.StableCapacity.Set && d.StableCapacity.Value != w.stable.asked {
		w.stable.asked = d.StableCapacity.Value
		w.stable.lag = lag
	}
	if d.CanaryCapacity.Set && d.CanaryCapacity.Value != w.canary.asked {
		w.canary.asked = d.CanaryCapacity.Value
		w.canary.lag = lag
	}
}

func (w *world) tick() {
	if w.weightLag > 0 {
		w.weightLag--
	} else {
		w.weight = w.askedWeight
		w.extras = w.askedExtras
	}
	w.stable.tick()
	w.canary.tick()
}

// swap follows a succeeded rollout: the canary side takes the stable role.
func (w *world) swap() {
	w.stable, w.canary = w.canary, w.stable
	w.weight, w.askedWeight = 100-w.weight, 100-w.askedWeight
}

// settle ticks until nothing moves.
func (w *world) settle() {
	for i := 0; i < 1000 && !(w.weight == w.askedWeight && w.extras.Equal(w.askedExtras) && w.stable.settled() && w.canary.settled() &&
		(w.stable.updated || w.stable.stuck) && (w.canary.updated || w.canary.stuck)); i++ {
		w.tick()
	}
}

// redeploy is someone else deploying rev on a side (or restarting it, with
// the revision it runs): the world's doing, so traffic the side carries
// while it does not run its role's revision is exempt (foreign) until the
// engine has reacted. Ready capacity lost to the restart is the world's
// doing too (tick marks the side crashed).
func (w *world) redeploy(sd *side, rev string, lag int) {
	sd.deploy(rev, lag, true)
	sd.foreign = true
}

// scale is someone else scaling a side to capacity c (an HPA, a person):
// the side heads there as if asked, without the engine knowing. A side
// scaled down below its traffic is the world's doing (scaled) until the
// engine asks it for a capacity again. No-op in the fixed mode (both sides
// stay provisioned).
func (w *world) scale(sd *side, c int32, lag int) {
	if w.mode == CapacityFixed {
		return
	}
	if c < sd.asked {
		sd.scaled, sd.reasked = true, false
	}
	if w.mode == CapacityReplicas && c > 0 {
		sd.foreign = true // ready replicas serve: the traffic is the world's doing
	}
	sd.asked, sd.lag = c, lag
}

// wipe replaces the state by what a controller makes of a status wiped (or
// an object deleted and re-created with the same spec): the zero State and
// a Retarget to the revision the spec asks for (spec). The world is kept in
// the roles of the state (its StableSide), so a state whose stable side was
// B swaps the world's roles: the new state names A stable.
//
// What the sides carry at that moment is the world's doing until the engine
// has reacted (see revisionBreach): the wiped state remembers nothing, so
// the revisions it adopts for the roles may not be what the sides run (a
// canary side running another revision under traffic, a stable side part
// way through someone else's rollout).
func (w *world) wipe(s *State, spec string, now time.Time) State {
	n := State{}.Retarget(spec, now)
	w.follow(s, &n)
	for _, sd := range []*side{&w.stable, &w.canary} {
		if routed, asked := w.carries(sd); routed || asked {
			sd.foreign = true
		}
	}
	return n
}

// follow maps the world's roles from state from to state to, which may name
// another physical side stable (a wiped state, an older save restored).
func (w *world) follow(from, to *State) {
	if from.stableSide() != to.stableSide() {
		w.swap()
	}
}

// pendingReplaced follows a command that replaced the pending revision
// pending (the one a Retarget's walk back was to start) of the state s: a
// reconcile whose state was lost may already have finished that walk back
// and started pending on the canary side, and the spec then named another
// revision (or the walk back was cancelled). The stored state never knew
// the canary side ran it, and the command that makes its traffic a breach
// comes with no Step in between, so what the side carries is the world's
// doing (foreign) until the engine walks it out.
func (w *world) pendingReplaced(pending string, s *State) {
	if pending == "" || s.PendingRevision == pending || w.canary.rev != pending || w.canary.rev == s.CanaryRevision {
		return
	}
	if routed, asked := w.carries(&w.canary); routed || asked {
		w.canary.foreign = true
	}
}

// specRevision is the revision a spec asked for last, as the state names it:
// the pending revision of a Retarget, else the canary one.
func specRevision(s *State) string {
	if s.PendingRevision != "" {
		return s.PendingRevision
	}
	return s.CanaryRevision
}

// carries reports whether the data plane routes traffic to the side now
// (the applied weight with a router; ready replicas without one), and
// whether any is asked for it.
func (w *world) carries(sd *side) (routed, asked bool) {
	if w.mode == CapacityReplicas {
		return sd.ready > 0, sd.asked > 0 || sd.current > 0
	}
	if sd == &w.canary {
		return w.weight > 0, w.askedWeight > 0
	}
	return w.weight < 100, w.askedWeight < 100
}

// revisionBreach returns how the world breaks invariants 6 to 8 of the
// package doc's "# Invariants" for the roles as st names them, or "":
// traffic the data plane routes to a side that is not running its role's
// revision, fully rolled out (the stable role: StableRevision; the canary
// role: CanaryRevision, which during a walk back after a Retarget still
// names the abandoned revision, or the PendingRevision that follows it,
// which a reconcile whose state was lost may already have started), or a
// deploy that landed under traffic (see apply).
//
// A side the world redeployed itself is exempt until the engine has
// reacted: a canary side until it carries no traffic and none is asked for
// it (the engine walks it back); a stable side until it runs the stable
// revision again, as someone must put it back (the engine holds progress,
// but a walk back or a repair still returns traffic to it).
func (w *world) revisionBreach(st *State) string {
	if w.breach != "" {
		return w.breach
	}
	if w.noRevisions || st.Unobserved {
		// The engine cannot know: the caller puts revisions on sides, or
		// the state has not observed the world yet (it asks for nothing).
		return ""
	}
	for _, r := range []struct {
		name      string
		sd        *side
		rev, next string
	}{{"stable", &w.stable, st.StableRevision, ""}, {"canary", &w.canary, st.CanaryRevision, st.PendingRevision}} {
		routed, asked := w.carries(r.sd)
		if r.sd == &w.canary && !routed && !asked || r.sd == &w.stable && r.sd.rev == r.rev && r.sd.updated {
			r.sd.foreign = false
		}
		// A reconcile whose state was lost may already have finished the
		// walk back and started the pending revision.
		runs := r.sd.rev == r.rev || r.next != "" && r.sd.rev == r.next
		if routed && !r.sd.foreign && (!runs || !r.sd.updated && !r.sd.restarting) {
			return fmt.Sprintf("the data plane routes traffic (weight %d) to the %s side running %q (updated %v), its role runs %q",
				w.weight, r.name, r.sd.rev, r.sd.updated, r.rev)
		}
	}
	return ""
}

// checkRevisions fails t on a breach of invariant 6 in the world.
func (w *world) checkRevisions(t TB, st *State) {
	t.Helper()
	if b := w.revisionBreach(st); b != "" {
		t.Fatalf("world: %s (phase %s, stable %q, canary %q, pending %q)", b, st.Phase, st.StableRevision, st.CanaryRevision, st.PendingRevision)
	}
}

// adopt marks what the world carries when a run begins from a state it was
// not made from (a stored state, a random world): revisions follow the
// state's roles, and a side that already carries traffic is the world's
// doing (foreign) until the engine walks it out.
func (w *world) adopt(st *State) {
	w.stable.rev, w.stable.updated = st.StableRevision, true
	w.canary.rev, w.canary.updated = st.CanaryRevision, true
	for _, sd := range []*side{&w.stable, &w.canary} {
		routed, asked := w.carries(sd)
		sd.foreign = routed || asked
	}
}

func (w *world) observe(now time.Time) Observation {
	o := Observation{
		At:            micro(now),
		Weight:        w.askedWeight,                                                                          // the route's spec, as a router reads it; w.weight is what the data plane does
		WeightApplied: w.accepted && w.weight == w.askedWeight && w.extras.Equal(w.askedExtras) && !w.invalid, // accepted: the data plane routes by the spec
		Extras:        *w.askedExtras.DeepCopy(),
		WeightInvalid: w.invalid,
		Stable:        SideObservation{Capacity: w.stable.current, Ready: w.stable.ready, Settled: w.stable.settled()},
		Canary:        SideObservation{Capacity: w.canary.current, Ready: w.canary.ready, Settled: w.canary.settled()},
		Health:        w.health,
		Gates:         w.gates,
	}
	if !w.noRevisions {
		o.Revisions = true
		o.Stable.Revision, o.Stable.Updated = w.stable.rev, w.stable.updated
		o.Canary.Revision, o.Canary.Updated = w.canary.rev, w.canary.updated
	}
	if w.mode == CapacityReplicas {
		o.Weight, o.WeightApplied = 0, false
	}
	return o
}

// trafficFits reports whether the applied weight fits the ready capacity of
// both sides (managed and fixed), or total ready covers demand (replicas).
func (w *world) trafficFits(maxUnavailable int32) bool {
	if w.mode == CapacityReplicas {
		return w.stable.ready+w.canary.ready >= 100-maxUnavailable
	}
	return w.extras.CanaryLoad(w.weight) <= w.canary.ready && 100-w.weight <= w.stable.ready
}

// overloadExplained reports whether traffic fits ready capacity or, where
// it does not, the world is to blame: a crash a side has not recovered from,
// an unsafe start, or an invalid split whose real shares are unknown.
func (w *world) overloadExplained(maxUnavailable int32) bool {
	for _, sd := range []*side{&w.stable, &w.canary} {
		if sd.ready >= sd.readyFor(sd.asked) && !sd.loop && sd.lag == 0 {
			sd.crashed = false // whole again
			if sd.reasked {
				sd.scaled = false // and at what the engine asked
			}
		}
	}
	if w.trafficFits(maxUnavailable) {
		w.unsafeStart = false
		return true
	}
	switch {
	case w.unsafeStart:
		return true
	case w.mode == CapacityReplicas:
		return w.stable.crashed || w.canary.crashed || w.stable.scaled || w.canary.scaled
	case w.invalid:
		return true
	}
	return (w.extras.CanaryLoad(w.weight) <= w.canary.ready || w.canary.crashed || w.canary.scaled) &&
		(100-w.weight <= w.stable.ready || w.stable.crashed || w.stable.scaled)
}

// genStrategy draws a valid strategy of any kind, in the given mode.
func genStrategy(t *rapid.T, mode CapacityMode) Strategy {
	opts := Options{Capacity: mode}
	opts.AbortRamp = rapid.SampledFrom([]AbortRamp{AbortImmediate, AbortGradual, AbortEmergency}).Draw(t, "abortRamp")
	if mode == CapacityReplicas {
		if opts.AbortRamp == AbortEmergency {
			opts.AbortRamp = AbortImmediate
		}
		opts.MaxUnavailablePercent = rapid.Int32Range(0, 50).Draw(t, "maxUnavailable")
	}
	opts.UnhealthyThreshold = rapid.Int32Range(0, 4).Draw(t, "unhealthyThreshold")
	opts.UnhealthyAction = rapid.SampledFrom([]UnhealthyAction{UnhealthyAbort, UnhealthyPause}).Draw(t, "unhealthyAction")
	if rapid.Bool().Draw(t, "deadline") {
		opts.ProgressDeadline = metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 120).Draw(t, "deadlineSec")) * time.Second}
		opts.AbortOnProgressDeadline = rapid.Bool().Draw(t, "abortOnDeadline")
	}
	opts.ScaleDownDelay = metav1.Duration{Duration: time.Duration(rapid.IntRange(0, 60).Draw(t, "scaleDownDelaySec")) * time.Second}
	opts.PollInterval = metav1.Duration{Duration: time.Duration(rapid.IntRange(0, 5).Draw(t, "pollSec")) * time.Second}
	// The first poll after a hop: the default (100ms, doubling) or a fixed
	// poll. Derived from a draw already made rather than drawn, so that the
	// failing cases saved under testdata/rapid replay as they were found.
	if opts.ScaleDownDelay.Duration%(2*time.Second) != 0 && opts.PollInterval.Duration > 0 {
		opts.InitialPollInterval = opts.PollInterval
	}
	minSurge := int32(1)
	if mode != CapacityManaged {
		minSurge = 0
	}
	surge := rapid.Int32Range(minSurge, 100).Draw(t, "maxSurge")
	if mode == CapacityReplicas && surge+opts.MaxUnavailablePercent == 0 {
		surge = 1
	}
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0:
		step := rapid.Int32Range(1, max(1, surge)).Draw(t, "step")
		if mode == CapacityFixed {
			step = rapid.Int32Range(1, 100).Draw(t, "stepFixed")
		}
		return Incremental{
			StepPercent:     step,
			Interval:        metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 300).Draw(t, "intervalSec")) * time.Second},
			MaxSurgePercent: surge,
			Options:         opts,
		}
	case 1:
		return BlueGreen{Options: opts}
	default:
		n := rapid.IntRange(0, 6).Draw(t, "steps")
		steps := make([]CanaryStep, 0, n)
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 3).Draw(t, "stepKind") {
			case 0, 1:
				steps = append(steps, SetWeight(rapid.Int32Range(0, 100).Draw(t, "weight")))
			case 2:
				steps = append(steps, Pause(time.Duration(rapid.IntRange(1, 600).Draw(t, "pauseSec"))*time.Second))
			default:
				if rapid.Bool().Draw(t, "gate") {
					steps = append(steps, Gate(rapid.SampledFrom([]string{"latency", "errors"}).Draw(t, "gateName")))
				} else {
					steps = append(steps, PauseUntilResumed())
				}
			}
		}
		return Canary{Steps: steps, MaxSurgePercent: surge, Options: opts}
	}
}

func optionsOf(s Strategy) (*Options, int32) {
	o := s.Shared()
	surge := int32(100) // BlueGreen, and any strategy without its own budget
	switch v := s.(type) {
	case Incremental:
		surge = v.MaxSurgePercent
	case Canary:
		surge = v.MaxSurgePercent
	}
	return &o, surge
}

// genServingWorld draws an application that serves before upshift is
// installed: all traffic on one physical side (the stable role's, or the
// canary role's when servingOnCanary, as the roles of a fresh State name
// them), running serving ("" for a revision its reader does not recognise),
// fully rolled out at full capacity; the other side idle (no traffic),
// running idle, at capacity 0 or, with capacity setters and a router,
// holding some that no traffic reaches; the route at 0 or 100, accepted.
// Sides have a random replica granularity, rounded up as a Deployment's.
func genServingWorld(t *rapid.T, mode CapacityMode, serving, idle string, servingOnCanary bool) *world {
	w := &world{mode: mode, accepted: true}
	on, off := &w.stable, &w.canary
	if servingOnCanary {
		on, off = off, on
		w.weight, w.askedWeight = 100, 100
	}
	for _, sd := range []*side{on, off} {
		sd.replicas = rapid.Int32Range(0, 12).Draw(t, "installReplicas")
		sd.updated = true
	}
	on.rev, off.rev = serving, idle
	on.asked = 100
	switch mode {
	case CapacityFixed:
		off.asked = 100
	case CapacityManaged:
		if rapid.Bool().Draw(t, "idleHoldsCapacity") {
			off.asked = rapid.Int32Range(1, 100).Draw(t, "idleCapacity")
		}
	}
	for _, sd := range []*side{on, off} {
		sd.current = sd.asked
		sd.ready = sd.readyFor(sd.asked)
	}
	return w
}
