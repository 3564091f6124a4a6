package strategy

import (
	"time"

	"pgregory.net/rapid"
)

// world is a small, deterministic stand-in for the adapters, used by the
// property tests: a router and two sides that apply what they are asked after
// a lag, with replica granularity.
type world struct {
	mode CapacityMode

	// router
	askedWeight, weight int32
	weightLag           int
	accepted            bool

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
func (s *side) tick() {
	if s.current != s.asked {
		s.current = s.asked
	}
	target := s.readyFor(s.asked)
	switch {
	case target < s.ready:
		s.ready = target
	case s.lag > 0:
		s.lag--
	case target > s.ready && !s.loop:
		s.ready += (target - s.ready + 1) / 2 // partial: replicas become ready a few at a time
	}
}

func newWorld(mode CapacityMode, st *State) *world {
	w := &world{mode: mode, accepted: true}
	w.askedWeight, w.weight = st.Desired.Weight, st.Desired.Weight
	w.stable = side{asked: st.Desired.StableCapacity, current: st.Desired.StableCapacity}
	w.canary = side{asked: st.Desired.CanaryCapacity, current: st.Desired.CanaryCapacity}
	if mode == CapacityFixed {
		w.stable.asked, w.stable.current, w.canary.asked, w.canary.current = 100, 100, 100, 100
	}
	w.stable.ready = w.stable.readyFor(w.stable.asked)
	w.canary.ready = w.canary.readyFor(w.canary.asked)
	return w
}

// apply records what a decision asks for. lag is the number of ticks until
// a change is visible.
func (w *world) apply(d *Decision, lag int) {
	// Asking again for what is already asked changes nothing (adapters are
	// idempotent): a change already on its way keeps its lag.
	if d.Weight.Set && w.mode != CapacityReplicas && (d.Weight.Value != w.askedWeight || w.invalid) {
		w.askedWeight = d.Weight.Value
		w.weightLag = lag
		w.invalid = false
	}
	if w.mode == CapacityFixed {
		return
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
	for i := 0; i < 1000 && !(w.weight == w.askedWeight && w.stable.settled() && w.canary.settled()); i++ {
		w.tick()
	}
}

func (w *world) observe(now time.Time) Observation {
	o := Observation{
		At:            micro(now),
		Weight:        w.askedWeight,                                         // the route's spec, as a router reads it; w.weight is what the data plane does
		WeightApplied: w.accepted && w.weight == w.askedWeight && !w.invalid, // accepted: the data plane routes by the spec
		WeightInvalid: w.invalid,
		Stable:        SideObservation{Capacity: w.stable.current, Ready: w.stable.ready, Settled: w.stable.settled()},
		Canary:        SideObservation{Capacity: w.canary.current, Ready: w.canary.ready, Settled: w.canary.settled()},
		Health:        w.health,
		Gates:         w.gates,
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
	return w.weight <= w.canary.ready && 100-w.weight <= w.stable.ready
}

// overloadExplained reports whether traffic fits ready capacity or, where
// it does not, the world is to blame: a crash a side has not recovered from,
// an unsafe start, or an invalid split whose real shares are unknown.
func (w *world) overloadExplained(maxUnavailable int32) bool {
	for _, sd := range []*side{&w.stable, &w.canary} {
		if sd.ready >= sd.readyFor(sd.asked) && !sd.loop && sd.lag == 0 {
			sd.crashed = false // whole again
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
		return w.stable.crashed || w.canary.crashed
	case w.invalid:
		return true
	}
	return (w.weight <= w.canary.ready || w.canary.crashed) && (100-w.weight <= w.stable.ready || w.stable.crashed)
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
		opts.ProgressDeadline = time.Duration(rapid.IntRange(1, 120).Draw(t, "deadlineSec")) * time.Second
		opts.AbortOnProgressDeadline = rapid.Bool().Draw(t, "abortOnDeadline")
	}
	opts.ScaleDownDelay = time.Duration(rapid.IntRange(0, 60).Draw(t, "scaleDownDelaySec")) * time.Second
	opts.PollInterval = time.Duration(rapid.IntRange(0, 5).Draw(t, "pollSec")) * time.Second
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
			Interval:        time.Duration(rapid.IntRange(1, 300).Draw(t, "intervalSec")) * time.Second,
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
