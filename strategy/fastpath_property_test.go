package strategy

import (
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"pgregory.net/rapid"
)

// The allocation-free fast paths of validation (optionsLookValid, the
// strategies' lookValid, State.valid without a reporter) restate the rules
// of the full validators. These properties hold each to its full
// counterpart on inputs of which a good share (at least 15 in 100) are
// valid, every field drawn near the bounds the validators test. Run them
// long with go test ./strategy -run FastPath -rapid.checks=20000.

// fpInt32 draws a value of [lo, hi] most of the time; otherwise one at a
// bound (lo, hi or one of bounds), one below or one above it, or any int32.
func fpInt32(t *rapid.T, label string, lo, hi int32, bounds ...int32) int32 {
	switch rapid.IntRange(0, 15).Draw(t, label+"Kind") { // rapid draws small kinds most
	case 15:
		return rapid.Int32().Draw(t, label+"Any")
	case 13, 14:
		b := rapid.SampledFrom(append([]int32{lo, hi, math.MinInt32, math.MaxInt32}, bounds...)).Draw(t, label+"Bound")
		off := rapid.Int32Range(-1, 1).Draw(t, label+"Off")
		if b == math.MinInt32 && off < 0 || b == math.MaxInt32 && off > 0 {
			off = 0
		}
		return b + off
	}
	return rapid.Int32Range(lo, hi).Draw(t, label)
}

// fpDuration is fpInt32 for durations, at nanosecond steps around bounds.
func fpDuration(t *rapid.T, label string, lo, hi time.Duration, bounds ...time.Duration) time.Duration {
	switch rapid.IntRange(0, 15).Draw(t, label+"Kind") {
	case 15:
		return time.Duration(rapid.Int64().Draw(t, label+"Any"))
	case 13, 14:
		b := rapid.SampledFrom(append([]time.Duration{lo, hi}, bounds...)).Draw(t, label+"Bound")
		return b + time.Duration(rapid.Int64Range(-1, 1).Draw(t, label+"Off"))
	}
	return time.Duration(rapid.Int64Range(int64(lo), int64(hi)).Draw(t, label))
}

// fpPick draws one of valid, or now and then bogus.
func fpPick[T any](t *rapid.T, label string, bogus T, valid ...T) T {
	if rapid.IntRange(0, 9).Draw(t, label+"Bogus") == 9 {
		return bogus
	}
	return rapid.SampledFrom(valid).Draw(t, label)
}

// fpAffinity draws no session affinity most of the time, else one whose
// fields are each valid or not.
func fpAffinity(t *rapid.T) *SessionAffinity {
	if rapid.IntRange(0, 2).Draw(t, "affinity") != 2 {
		return nil
	}
	a := &SessionAffinity{
		CookieName: rapid.SampledFrom([]string{"", "s", "bad name", strings.Repeat("c", 64), strings.Repeat("c", 65)}).Draw(t, "cookieName"),
		Path:       rapid.SampledFrom([]string{"", "/", "/app", "app", "/a b"}).Draw(t, "path"),
		Domain:     rapid.SampledFrom([]string{"", "example.com", "a;b"}).Draw(t, "domain"),
		Secure:     rapid.Bool().Draw(t, "secure"),
		SameSite:   rapid.SampledFrom([]string{"", "Lax", "Strict", "None", "none"}).Draw(t, "sameSite"),
	}
	if rapid.Bool().Draw(t, "maxAgeSet") {
		a.MaxAge = &metav1.Duration{Duration: fpDuration(t, "maxAge", time.Second, 48*time.Hour)}
	}
	return a
}

// fpOptions draws Options with every field set or not, valid or not, and
// each cross-field rule kept or broken.
func fpOptions(t *rapid.T) Options {
	o := Options{
		Capacity:                fpPick(t, "capacity", "Bogus", CapacityManaged, CapacityFixed, CapacityReplicas),
		AbortRamp:               fpPick(t, "abortRamp", "Bogus", AbortImmediate, AbortGradual, AbortEmergency),
		UnhealthyThreshold:      fpInt32(t, "unhealthyThreshold", 0, 10),
		UnhealthyAction:         fpPick(t, "unhealthyAction", "Bogus", UnhealthyAbort, UnhealthyPause),
		AbortOnProgressDeadline: rapid.IntRange(0, 3).Draw(t, "abortOnProgressDeadline") == 3,
		NoProgressDeadline:      rapid.IntRange(0, 4).Draw(t, "noProgressDeadline") == 4,
	}
	if o.Capacity == CapacityReplicas || rapid.IntRange(0, 7).Draw(t, "maxUnavailableSet") == 7 {
		o.MaxUnavailablePercent = fpInt32(t, "maxUnavailable", 0, 100)
	}
	if rapid.Bool().Draw(t, "progressDeadlineSet") {
		o.ProgressDeadline.Duration = fpDuration(t, "progressDeadline", 0, time.Hour, DefaultProgressDeadline)
	}
	if rapid.Bool().Draw(t, "scaleDownDelaySet") {
		o.ScaleDownDelay.Duration = fpDuration(t, "scaleDownDelay", 0, time.Hour)
	}
	if rapid.Bool().Draw(t, "pollIntervalSet") {
		o.PollInterval.Duration = fpDuration(t, "pollInterval", MinPollInterval, time.Minute, 0, DefaultPollInterval)
	}
	if rapid.Bool().Draw(t, "initialPollIntervalSet") {
		o.InitialPollInterval.Duration = fpDuration(t, "initialPollInterval", MinPollInterval, max(MinPollInterval, o.pollInterval()),
			0, DefaultInitialPollInterval, DefaultPollInterval, o.PollInterval.Duration)
	}
	o.SessionAffinity = fpAffinity(t)
	return o
}

// fpSurge draws a MaxSurgePercent.
func fpSurge(t *rapid.T) int32 { return fpInt32(t, "maxSurge", 0, 100, 1) }

// fpStep draws a canary step of any kind, with none, one or several fields
// set, valid or not.
func fpStep(t *rapid.T) CanaryStep {
	switch k := rapid.IntRange(0, 15).Draw(t, "stepKind"); {
	case k < 6:
		return SetWeight(fpInt32(t, "setWeight", 0, 100))
	case k < 8:
		return PauseUntilResumed()
	case k < 10:
		return Pause(fpDuration(t, "pause", time.Second, time.Hour, 0))
	case k < 12:
		return Gate(fpPick(t, "gate", "", "latency", "errors"))
	case k == 12:
		expected := fpInt32(t, "expected", -1, 100)
		matches := rapid.SliceOfN(rapid.SampledFrom([]HeaderMatch{
			{Name: "x-beta", Value: "1"}, {Type: HeaderCookie, Name: "beta", Value: "yes"},
			{Type: HeaderRegularExpression, Name: "x-re", Value: "a.*"}, {Type: HeaderRegularExpression, Name: "x-bad", Value: "("},
			{Name: "", Value: "1"}, {Name: "x-beta", Value: ""}, {Type: "Bogus", Name: "x-t", Value: "1"},
		}), 0, 3).Draw(t, "matches")
		return SetHeaderRoute(expected, matches...)
	case k == 13:
		return SetMirror(fpInt32(t, "mirror", 0, 100))
	case k == 14:
		return CanaryStep{} // none set
	}
	// Several set, each drawn on its own.
	var st CanaryStep
	if rapid.Bool().Draw(t, "manyWeight") {
		st.SetWeight = SetWeight(fpInt32(t, "manyWeightValue", 0, 100)).SetWeight
	}
	if rapid.Bool().Draw(t, "manyPause") {
		st.Pause = &PauseStep{}
	}
	if rapid.Bool().Draw(t, "manyGate") {
		st.Gate = &GateStep{Name: "g"}
	}
	if rapid.Bool().Draw(t, "manyHeaderRoute") {
		st.SetHeaderRoute = &HeaderRoute{Matches: []HeaderMatch{{Name: "x-beta", Value: "1"}}}
	}
	if rapid.Bool().Draw(t, "manyMirror") {
		st.SetMirror = &MirrorStep{Percent: 10}
	}
	return st
}

// fpSteps draws a few steps, or about 64 (the most a Canary may have).
func fpSteps(t *rapid.T) []CanaryStep {
	if rapid.IntRange(0, 19).Draw(t, "manySteps") == 19 {
		// One step repeated, one of them perhaps another.
		steps := make([]CanaryStep, rapid.IntRange(63, 65).Draw(t, "stepsNearMax"))
		st := fpStep(t)
		for i := range steps {
			steps[i] = st
		}
		if rapid.Bool().Draw(t, "oneOther") {
			steps[rapid.IntRange(0, len(steps)-1).Draw(t, "other")] = fpStep(t)
		}
		return steps
	}
	steps := make([]CanaryStep, rapid.IntRange(0, 4).Draw(t, "steps"))
	for i := range steps {
		steps[i] = fpStep(t)
	}
	return steps
}

// noExtras reports whether the steps have no header route or mirror (the
// fast path leaves those to the full validator).
func noExtras(steps []CanaryStep) bool {
	for _, st := range steps {
		if st.SetHeaderRoute != nil || st.SetMirror != nil {
			return false
		}
	}
	return true
}

// fpOutcomes counts the draws the fast path found valid and not, so that a
// property whose draws all land on one side fails rather than holds (over
// 100 draws or more, the default: each side has at least 15 in 100).
type fpOutcomes struct{ valid, invalid int }

func (c *fpOutcomes) add(ok bool) {
	if ok {
		c.valid++
	} else {
		c.invalid++
	}
}

func (c *fpOutcomes) check(t *testing.T) {
	t.Helper()
	t.Logf("the fast path found %d draws valid, %d invalid", c.valid, c.invalid)
	if !t.Failed() && c.valid+c.invalid >= 100 && (c.valid == 0 || c.invalid == 0) {
		t.Errorf("draws found valid %d times, invalid %d times: the generator misses one side", c.valid, c.invalid)
	}
}

// TestFastPathOptions: optionsLookValid(o, surge) is the fast path of
// Options.validate together with validateSurge's lower bound for the mode,
// the two checks of o and surge every strategy makes (validateSurge's upper
// bound its callers check themselves, or they pass 100). For every o and
// surge, optionsLookValid true implies Options.validate finds nothing; for
// surge in 0..100 and o without SessionAffinity (which the fast path leaves
// to the full one), optionsLookValid is true if and only if both find
// nothing.
func TestFastPathOptions(t *testing.T) {
	var n fpOutcomes
	rapid.Check(t, func(t *rapid.T) {
		o := fpOptions(t)
		surge := fpSurge(t)
		fast := optionsLookValid(&o, surge)
		errs := o.validate("x", surge)
		n.add(fast)
		if fast && errs != nil {
			t.Fatalf("fast path says valid, Options.validate: %v", errs.ToAggregate())
		}
		if o.SessionAffinity != nil || surge < 0 || surge > 100 {
			return
		}
		full := append(errs, validateSurge("x", surge, o.Capacity)...)
		if fast != (len(full) == 0) {
			t.Fatalf("fast path says valid=%v, full validation finds %v", fast, full.ToAggregate())
		}
	})
	n.check(t)
}

// lookValidFor checks that a strategy's validate is its lookValid
// (fast) in front of its validateAll (full): fast true implies full finds
// nothing, so validate returns what validateAll does; and where the fast
// path claims to decide (exact), fast is true if and only if full finds
// nothing, so the common valid case allocates nothing.
func lookValidFor(t *rapid.T, fast bool, full field.ErrorList, exact bool) {
	if fast && full != nil {
		t.Fatalf("fast path says valid, full validation: %v", full.ToAggregate())
	}
	if exact && !fast && full == nil {
		t.Fatal("fast path says invalid, full validation finds nothing")
	}
}

// TestFastPathIncremental: Incremental.lookValid true implies validateAll
// finds nothing; without SessionAffinity, it is true if and only if
// validateAll finds nothing.
func TestFastPathIncremental(t *testing.T) {
	var n fpOutcomes
	rapid.Check(t, func(t *rapid.T) {
		in := Incremental{MaxSurgePercent: fpSurge(t), Options: fpOptions(t)}
		in.StepPercent = fpInt32(t, "stepPercent", 1, max(1, in.MaxSurgePercent), in.MaxSurgePercent+1, 7, 100)
		in.Interval.Duration = fpDuration(t, "interval", time.Second, time.Hour, 0)
		fast := in.lookValid()
		n.add(fast)
		lookValidFor(t, fast, in.validateAll(), in.SessionAffinity == nil)
	})
	n.check(t)
}

// TestFastPathBlueGreen: BlueGreen's fast path, optionsLookValid at surge
// 100, is true only if validateAll finds nothing; without SessionAffinity,
// if and only if.
func TestFastPathBlueGreen(t *testing.T) {
	var n fpOutcomes
	rapid.Check(t, func(t *rapid.T) {
		b := BlueGreen{Options: fpOptions(t)}
		fast := optionsLookValid(&b.Options, 100)
		n.add(fast)
		lookValidFor(t, fast, b.validateAll(), b.SessionAffinity == nil)
	})
	n.check(t)
}

// TestFastPathCanary: Canary.lookValid (stepsLookValid, the surge's range
// and optionsLookValid) true implies validateAll finds nothing; without
// SessionAffinity and without header route or mirror steps, it is true if
// and only if validateAll finds nothing.
func TestFastPathCanary(t *testing.T) {
	var n fpOutcomes
	rapid.Check(t, func(t *rapid.T) {
		c := Canary{Steps: fpSteps(t), MaxSurgePercent: fpSurge(t), Options: fpOptions(t)}
		fast := c.lookValid()
		n.add(fast)
		lookValidFor(t, fast, c.validateAll(), c.SessionAffinity == nil && noExtras(c.Steps))
	})
	n.check(t)
}

// fpGrid draws a sticky grid: a valid one (ascending in 1..100, ending in
// 100, at most 16), one of 17 values, or any values.
func fpGrid(t *rapid.T) []int32 {
	switch rapid.IntRange(0, 7).Draw(t, "gridKind") {
	case 0:
		return rapid.SliceOfN(rapid.Int32Range(-1, 101), 0, 18).Draw(t, "gridAny")
	case 1:
		g := make([]int32, 17)
		for i := range g {
			g[i] = int32(100 - 16 + i)
		}
		return g
	}
	vs := rapid.SliceOfNDistinct(rapid.Int32Range(1, 99), 0, 15, rapid.ID[int32]).Draw(t, "gridValues")
	g := append(vs, 100)
	for i := 1; i < len(g); i++ { // insertion sort, small
		for j := i; j > 0 && g[j] < g[j-1]; j-- {
			g[j], g[j-1] = g[j-1], g[j]
		}
	}
	return g
}

// fpState draws a state for the fast-path property: every field State.valid
// reads, at and around its bounds, allocations that keep or break each
// capacity mode's rules by one, idle and unobserved states; the other
// fields set or not.
func fpState(t *rapid.T) State {
	revs := []string{"", "a", "b"}
	s := State{
		StableRevision:  rapid.SampledFrom(revs).Draw(t, "stableRevision"),
		CanaryRevision:  rapid.SampledFrom(revs).Draw(t, "canaryRevision"),
		PendingRevision: rapid.SampledFrom(revs).Draw(t, "pendingRevision"),
		Unobserved:      rapid.IntRange(0, 3).Draw(t, "unobserved") == 3,
		StableSide:      fpPick(t, "stableSide", "C", "", SideA, SideB),
		Phase: fpPick(t, "phase", "Bogus", "", PhaseProgressing, PhasePaused, PhaseAborting, PhaseAborted, PhaseRolledBack,
			PhaseCompleting, PhaseSucceeded),
		StepIndex:       fpInt32(t, "stepIndex", 0, 8),
		StepsHash:       rapid.SampledFrom([]string{"", "0123456789abcdef"}).Draw(t, "stepsHash"),
		UnhealthyCount:  fpInt32(t, "unhealthyCount", 0, 5),
		AwaitingResume:  rapid.Bool().Draw(t, "awaitingResume"),
		PauseReason:     rapid.SampledFrom([]string{"", ReasonManualPause, ReasonPauseStep}).Draw(t, "pauseReason"),
		Gate:            rapid.SampledFrom([]string{"", "latency"}).Draw(t, "gate"),
		StartedAt:       genTime(t, "startedAt"),
		HopAt:           genTime(t, "hopAt"),
		WeightChangedAt: genTime(t, "weightChangedAt"),
	}
	w := fpInt32(t, "desiredWeight", 0, 100)
	s.Desired = Allocation{
		Weight: w,
		// Mostly what the weight needs; else one below or above, or any.
		CanaryCapacity: fpPick(t, "desiredCanary", fpInt32(t, "canaryCapacity", 0, 100), w, w, w-1, w+1),
		StableCapacity: fpPick(t, "desiredStable", fpInt32(t, "stableCapacity", 0, 100), 100-w, 100-w, 99-w, 101-w),
	}
	s.Observed = Observation{
		At:     genTime(t, "observedAt"),
		Weight: fpInt32(t, "observedWeight", 0, 100),
		Stable: SideObservation{Capacity: fpInt32(t, "stableCapacity", 0, 100), Ready: fpInt32(t, "stableReady", 0, 100),
			Settled: rapid.Bool().Draw(t, "stableSettled")},
		Canary: SideObservation{Capacity: fpInt32(t, "canaryCapacity", 0, 100), Ready: fpInt32(t, "canaryReady", 0, 100),
			Settled: rapid.Bool().Draw(t, "canarySettled")},
	}
	if rapid.Bool().Draw(t, "extras") {
		s.DesiredExtras.MirrorPercent = fpInt32(t, "mirror", 0, 100)
		switch rapid.IntRange(0, 2).Draw(t, "headerRoute") {
		case 1:
			s.DesiredExtras.HeaderRoute = &HeaderRoute{Matches: []HeaderMatch{{Name: "x-beta", Value: "1"}}}
		case 2:
			e := fpInt32(t, "expected", 0, 100)
			s.DesiredExtras.HeaderRoute = &HeaderRoute{Matches: []HeaderMatch{{Name: "x-beta", Value: "1"}}, ExpectedPercent: &e}
		}
		if rapid.Bool().Draw(t, "sticky") {
			s.DesiredExtras.Sticky = &Sticky{Run: fpPick(t, "run", "", "0badf00d"), Grid: fpGrid(t)}
		}
	}
	if rapid.Bool().Draw(t, "aborted") {
		s.Aborted = &AbortStatus{Reason: "p99", At: genTime(t, "abortedAt"), Emergency: rapid.Bool().Draw(t, "emergency")}
	}
	return s
}

// TestFastPathState: Step decides on s.valid(mover, nil) and, when false,
// reports s.validate's error (engine.step), so the two must agree exactly:
// for every state and every capacity mode (an unknown one included),
// State.valid without a reporter is true if and only if State.Validate
// returns nil, and with a reporter it returns the same answer, reporting
// something exactly when it is false.
func TestFastPathState(t *testing.T) {
	var n fpOutcomes
	rapid.Check(t, func(t *rapid.T) {
		s := fpState(t)
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas, "Bogus"}).Draw(t, "mode")
		fast := s.check(mode, nil)
		err := s.Validate(mode)
		n.add(fast)
		if fast != (err == nil) {
			t.Fatalf("fast path says valid=%v, State.Validate: %v", fast, err)
		}
		var reported []string
		withReporter := s.check(mode, func(path string, _ any, detail string) { reported = append(reported, path+" "+detail) })
		if withReporter != fast || withReporter != (len(reported) == 0) {
			t.Fatalf("fast path says valid=%v, with a reporter valid=%v and reported %q", fast, withReporter, reported)
		}
	})
	n.check(t)
}

// TestFastPathValidAllocatesNothing: valid strategies the fast path decides
// validate without allocating, a Replicas Incremental without surge among
// them (the full path used to decide it).
func TestFastPathValidAllocatesNothing(t *testing.T) {
	minute := metav1.Duration{Duration: time.Minute}
	for _, tc := range []struct {
		name  string
		strat Strategy
	}{
		{"incremental", Incremental{StepPercent: 20, Interval: minute, MaxSurgePercent: 20}},
		{"incremental fixed", Incremental{StepPercent: 50, Interval: minute, Options: Options{Capacity: CapacityFixed}}},
		{"incremental replicas without surge", Incremental{StepPercent: 25, Interval: minute,
			Options: Options{Capacity: CapacityReplicas, MaxUnavailablePercent: 25}}},
		{"blue-green", BlueGreen{}},
		{"canary", Canary{Steps: []CanaryStep{SetWeight(10), Pause(time.Minute), Gate("p99"), PauseUntilResumed()}, MaxSurgePercent: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.strat.Validate(); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(10, func() { _ = tc.strat.Validate() }); n != 0 {
				t.Errorf("Validate allocates %v times", n)
			}
		})
	}
}
