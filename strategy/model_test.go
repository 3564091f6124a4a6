package strategy

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// naiveIncremental is a deliberately plain model of an incremental upgrade
// with instant adapters, written from the documentation of Incremental and
// Strategy (the mover) without the engine's machinery: once a weight is in
// force the stable side shrinks to the traffic it carries; at the end of
// each interval the canary grows to what the next weight needs (adapters
// that are ready at once are asked just then), and the weight moves by one
// step.
func naiveIncremental(step, surge int32, interval time.Duration) []string {
	s, c, w := int32(100), int32(0), int32(0)
	var at time.Duration
	var out []string
	rec := func(what string) { out = append(out, fmt.Sprintf("+%s %s", at, what)) }
	for w < 100 {
		if s > 100-w {
			s = 100 - w
			rec(fmt.Sprintf("stable capacity %d", s))
		}
		if w > 0 {
			at += interval
		}
		n := min(100, w+step)
		for c < n {
			c = min(n, 100+surge-s)
			rec(fmt.Sprintf("canary capacity %d", c))
		}
		w = n
		rec(fmt.Sprintf("weight %d", w))
	}
	rec("stable capacity 0")
	rec("canary capacity steady")
	return out
}

// naiveFixedCanary models a Canary in the Fixed capacity mode: weights jump
// straight to each step's value; timed pauses add their duration.
func naiveFixedCanary(steps []CanaryStep) ([]string, time.Duration) {
	var at time.Duration
	w := int32(0)
	var out []string
	for _, st := range steps {
		switch {
		case st.SetWeight != nil:
			if *st.SetWeight != w {
				w = *st.SetWeight
				out = append(out, fmt.Sprintf("+%s weight %d", at, w))
			}
		case st.Pause != nil && st.Pause.Duration != nil:
			at += st.Pause.Duration.Duration
		}
	}
	if w != 100 {
		out = append(out, fmt.Sprintf("+%s weight 100", at))
	}
	return out, at
}

func planHops(tl Timeline) []string {
	var out []string
	for _, e := range tl.Entries {
		if isPause(e.What) || e.What == "resume" || e.What == "pause until resumed" || Phase(e.What).Terminal() {
			continue
		}
		out = append(out, fmt.Sprintf("+%s %s", e.Offset, e.What))
	}
	return out
}

func TestModelIncremental(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		surge := rapid.Int32Range(1, 100).Draw(t, "surge")
		step := rapid.Int32Range(1, surge).Draw(t, "step")
		interval := time.Microsecond * time.Duration(rapid.Int64Range(1, int64(time.Hour/time.Microsecond)).Draw(t, "intervalMicros"))
		tl, err := Plan(Incremental{StepPercent: step, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: surge}, PlanOptions{Start: t0})
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		// The canary revision is deployed at zero first.
		want := append([]string{"+0s deploy canary"}, naiveIncremental(step, surge, interval)...)
		if diff := cmp.Diff(want, planHops(tl)); diff != "" {
			t.Fatalf("engine and model disagree (-model +engine):\n%s", diff)
		}
	})
}

func TestModelFixedCanary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "n")
		var steps []CanaryStep
		for i := 0; i < n; i++ {
			if rapid.Bool().Draw(t, "isWeight") {
				steps = append(steps, SetWeight(rapid.Int32Range(0, 100).Draw(t, "w")))
			} else {
				steps = append(steps, Pause(time.Microsecond*time.Duration(rapid.Int64Range(1, int64(time.Hour/time.Microsecond)).Draw(t, "dMicros"))))
			}
		}
		tl, err := Plan(Canary{Steps: steps, Options: Options{Capacity: CapacityFixed}}, PlanOptions{Start: t0})
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		want, total := naiveFixedCanary(steps)
		want = append([]string{"+0s deploy canary"}, want...) // deployed at weight 0 first
		if diff := cmp.Diff(want, planHops(tl)); diff != "" {
			t.Fatalf("engine and model disagree (-model +engine):\n%s", diff)
		}
		if tl.Duration != total {
			t.Fatalf("duration %s, model %s", tl.Duration, total)
		}
	})
}

// TestPauseToTheInstant: a timed pause ends exactly Duration after the
// previous step was observed complete: not a nanosecond earlier, and at that
// instant the rollout moves on.
func TestPauseToTheInstant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Instants are recorded to the microsecond, so durations are drawn in
		// microseconds and the pause is checked to the nanosecond around them.
		d := time.Microsecond * time.Duration(rapid.Int64Range(1, int64(24*time.Hour/time.Microsecond)).Draw(t, "pauseMicros"))
		w := rapid.Int32Range(1, 99).Draw(t, "weight")
		strat := Canary{Steps: []CanaryStep{SetWeight(w), Pause(d), SetWeight(100)}, MaxSurgePercent: 100}
		start := t0.Add(time.Microsecond * time.Duration(rapid.Int64Range(0, int64(time.Hour/time.Microsecond)).Draw(t, "startMicros")))
		s := NewState("a", "b")
		wd := newWorld(CapacityManaged, &s)
		now := start
		var enteredAt time.Time
		for i := 0; i < 20; i++ {
			s.Observed = wd.observe(now)
			dec := checkStep(t, strat, s, now)
			s = dec.State
			if dec.HasHops() {
				wd.apply(&dec, 0)
				wd.settle()
				continue
			}
			if s.StepIndex == 1 {
				enteredAt = now
				break
			}
			t.Fatalf("unexpected wait: %s", s.Message)
		}
		if enteredAt.IsZero() {
			t.Fatalf("pause never began")
		}
		if s.Phase != PhasePaused {
			t.Fatalf("phase %s, want Paused", s.Phase)
		}
		end := s.StepStartedAt.Time.Add(d)
		if end.Sub(enteredAt) > d || enteredAt.Sub(end) > 0 {
			t.Fatalf("pause end %v not within a microsecond of %v + %v", end, enteredAt, d)
		}
		s.Observed = wd.observe(enteredAt)
		if got := strat.Step(s, enteredAt).RequeueAfter; got != end.Sub(enteredAt) {
			t.Fatalf("requeue %v, want %v", got, end.Sub(enteredAt))
		}
		early := checkStep(t, strat, s, end.Add(-time.Nanosecond))
		if early.State.StepIndex != 1 || early.HasHops() || early.RequeueAfter != time.Nanosecond {
			t.Fatalf("a nanosecond early: step %d hops %v requeue %v", early.State.StepIndex, early.HasHops(), early.RequeueAfter)
		}
		onTime := checkStep(t, strat, s, end)
		if onTime.State.StepIndex != 2 || !onTime.HasHops() {
			t.Fatalf("at the instant: step %d, hops %v", onTime.State.StepIndex, onTime.HasHops())
		}
	})
}
