package strategy_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// fuzzStrategies are stepped on every decoded state: each mode, each abort
// ramp, pauses and gates.
var fuzzStrategies = []strategy.Strategy{
	strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30},
	strategy.Incremental{StepPercent: 7, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 7, Options: strategy.Options{
		AbortRamp: strategy.AbortGradual, ProgressDeadline: metav1.Duration{Duration: time.Minute}, AbortOnProgressDeadline: true, UnhealthyThreshold: 1}},
	strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, Options: strategy.Options{Capacity: strategy.CapacityFixed, AbortRamp: strategy.AbortEmergency}},
	strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 0, Options: strategy.Options{
		Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 25, AbortRamp: strategy.AbortGradual}},
	strategy.Canary{
		Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), strategy.Pause(time.Minute), strategy.Gate("g"), strategy.SetWeight(80),
			strategy.PauseUntilResumed(), strategy.SetWeight(50), strategy.Gate("h"),
		},
		MaxSurgePercent: 25,
		Options:         strategy.Options{AbortRamp: strategy.AbortGradual, UnhealthyAction: strategy.UnhealthyPause, ScaleDownDelay: metav1.Duration{Duration: time.Minute}},
	},
	strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(40), strategy.Gate("g")},
		MaxSurgePercent: 100,
		Options:         strategy.Options{AbortRamp: strategy.AbortEmergency, ProgressDeadline: metav1.Duration{Duration: time.Second}},
	},
	strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(30), strategy.Pause(time.Minute)},
		MaxSurgePercent: 10,
		Options:         strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 10},
	},
	strategy.Canary{Options: strategy.Options{Capacity: strategy.CapacityFixed}},
	strategy.BlueGreen{},
	strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityReplicas}},
	strategy.Incremental{}, // invalid
}

// fuzzSeeds are the JSON of every state the fuzz strategies pass through on
// a happy run, an abort and a retarget.
func fuzzSeeds(t tb) [][]byte {
	var seeds [][]byte
	add := func(s strategy.State) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		seeds = append(seeds, b)
	}
	for i, strat := range fuzzStrategies {
		if strat.Validate() != nil {
			continue
		}
		s := strategy.NewState("v1", "v2")
		now := t0
		for n := 0; n < 60 && !s.Phase.Terminal(); n++ {
			s.Observed.Gates = []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass}, {Name: "h", Verdict: strategy.VerdictInconclusive}}
			d := strat.Step(s, now)
			s = d.State
			observe(&s, d, now)
			if n%3 == 0 {
				add(s)
			}
			switch {
			case n == 7 && i%3 == 0:
				s = s.Abort("fuzz", now)
			case n == 7 && i%3 == 1:
				s = s.Retarget("v3", now)
			case s.AwaitingResume:
				s = s.Resume(now)
			}
			if !d.HasHops() {
				now = now.Add(max(d.RequeueAfter, time.Second))
			}
		}
		add(s)
	}
	add(populated())
	return seeds
}

// checkDecision fails on a hop outside 0..100.
func checkDecision(t *testing.T, d strategy.Decision) {
	t.Helper()
	for name, tg := range map[string]strategy.Target{"weight": d.Weight, "stable": d.StableCapacity, "canary": d.CanaryCapacity} {
		if tg.Set && (tg.Value < 0 || tg.Value > 100) {
			t.Fatalf("%s hop %d outside 0..100", name, tg.Value)
		}
	}
	if d.RequeueAfter < 0 {
		t.Fatalf("negative RequeueAfter %v", d.RequeueAfter)
	}
}

// FuzzStepJSON decodes arbitrary bytes into a State and steps it with every
// fuzz strategy at a few instants, before and after each command: Step must
// never panic, never modify its input and never ask for a value outside
// 0..100.
func FuzzStepJSON(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	for _, b := range []string{`{}`, `null`, `{"stepIndex":-3,"phase":"Progressing"}`, `{"stepIndex":2147483647,"phase":"Paused","paused":true}`,
		`{"phase":"Aborting","aborted":{"reason":"x","emergency":true},"desired":{"weight":50,"stableCapacity":50,"canaryCapacity":50}}`} {
		f.Add([]byte(b))
	}
	instants := []time.Time{{}, t0, t5, t0.Add(-time.Hour), t0.Add(1000 * time.Hour), time.Unix(0, 0)}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s strategy.State
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		before := *s.DeepCopy()
		states := []strategy.State{
			s, s.Pause(t5), s.Resume(t5), s.Abort("fuzz", t5), s.Promote(t5), s.PromoteFull(t5), s.Retry(t5), s.Suspend(t5),
			s.Retarget("v9", t5), s.Retarget(s.StableRevision, t5),
		}
		for _, strat := range fuzzStrategies {
			for _, in := range states {
				for _, now := range instants {
					d := strat.Step(in, now)
					checkDecision(t, d)
					// Step again on the result: a second decision, never a panic.
					checkDecision(t, strat.Step(d.State, now.Add(time.Minute)))
				}
			}
		}
		if !reflect.DeepEqual(before, s) {
			t.Fatalf("the state was modified")
		}
	})
}

// FuzzValidate builds strategies from random option values: Validate never
// panics, reports ErrInvalid exactly when Step reports InvalidOptions, and a
// valid Incremental or Canary plans to Succeeded within a bounded number of
// hops (no deadlock).
func FuzzValidate(f *testing.F) {
	f.Add(int32(10), int64(time.Minute), int32(30), uint8(0), int32(0), uint8(0), int32(0), []byte{20, 0x81, 80})
	f.Add(int32(1), int64(1), int32(1), uint8(2), int32(1), uint8(1), int32(2), []byte{})
	f.Add(int32(0), int64(0), int32(0), uint8(3), int32(-1), uint8(3), int32(-1), []byte{0xff, 0x40})
	f.Add(int32(5), int64(time.Second), int32(0), uint8(2), int32(5), uint8(2), int32(1), []byte{3, 7, 0x82, 50})
	f.Add(int32(100), int64(time.Hour), int32(100), uint8(1), int32(0), uint8(1), int32(3), []byte{100})
	modes := []strategy.CapacityMode{strategy.CapacityManaged, strategy.CapacityFixed, strategy.CapacityReplicas, "Bogus"}
	ramps := []strategy.AbortRamp{strategy.AbortImmediate, strategy.AbortGradual, strategy.AbortEmergency, "Bogus"}
	f.Fuzz(func(t *testing.T, step int32, interval int64, surge int32, mode uint8, mu int32, ramp uint8, threshold int32, steps []byte) {
		opts := strategy.Options{
			Capacity:              modes[int(mode)%len(modes)],
			MaxUnavailablePercent: mu,
			AbortRamp:             ramps[int(ramp)%len(ramps)],
			UnhealthyThreshold:    threshold,
		}
		if len(steps) > 12 {
			steps = steps[:12]
		}
		// A byte below 0x80 is SetWeight(b), 0x80 a pause until resumed,
		// 0x81 Pause(1m), 0x82 Gate("g"), above an invalid empty step.
		var cs []strategy.CanaryStep
		for _, b := range steps {
			switch {
			case b < 0x80:
				cs = append(cs, strategy.SetWeight(int32(b)))
			case b == 0x80:
				cs = append(cs, strategy.PauseUntilResumed())
			case b == 0x81:
				cs = append(cs, strategy.Pause(time.Minute))
			case b == 0x82:
				cs = append(cs, strategy.Gate("g"))
			default:
				cs = append(cs, strategy.CanaryStep{})
			}
		}
		for _, strat := range []strategy.Strategy{
			strategy.Incremental{StepPercent: step, Interval: metav1.Duration{Duration: time.Duration(interval)}, MaxSurgePercent: surge, Options: opts},
			strategy.Canary{Steps: cs, MaxSurgePercent: surge, Options: opts},
			strategy.BlueGreen{Options: opts},
		} {
			err := strat.Validate()
			if err != nil && !errors.Is(err, strategy.ErrInvalid) {
				t.Fatalf("%T: %v is not ErrInvalid", strat, err)
			}
			d := strat.Step(strategy.NewState("v1", "v2"), t0)
			c := cond(&d.State, strategy.ConditionDegraded)
			if gotInvalid := c.Reason == strategy.ReasonInvalidOptions; gotInvalid != (err != nil) {
				t.Fatalf("%T: Validate() = %v but Step's Degraded condition is %+v", strat, err, c)
			}
			if err != nil {
				if d.HasHops() {
					t.Fatalf("%T: hops on invalid options: %+v", strat, d)
				}
				continue
			}
			tl, perr := strategy.Plan(strat, strategy.PlanOptions{Start: t0, MaxSteps: 5000})
			if perr != nil {
				t.Fatalf("%#v: valid options do not plan: %v", strat, perr)
			}
			if tl.Final.Phase != strategy.PhaseSucceeded {
				t.Fatalf("%#v: plan ended %s", strat, tl.Final.Phase)
			}
		}
	})
}
