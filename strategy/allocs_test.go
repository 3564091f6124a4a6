package strategy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// An allocation trace: whole rollouts, step by step, on instant adapters,
// with the waits a real world adds (a hop not yet observed, an interval, a
// timed pause, a manual pause, a gate, the scale-down delay, a walk back),
// recording every (strategy, state, now) that Step is called with, labelled
// by the phase it is called in.

type traced struct {
	label string // the phase, and what the Step waits for
	strat strategy.Strategy
	s     strategy.State
	now   time.Time
}

// allocWorld is a rollout to trace: the strategy, and what the caller does
// along the way.
type allocWorld struct {
	name  string
	strat strategy.Strategy
	// act may change the state before a Step (a command, a gate verdict,
	// an observation); it is called before every Step with its index.
	act func(i int, s *strategy.State, now time.Time)
}

// provisioned is the fixed capacity mode's world: both sides serve in full.
func provisioned(i int, s *strategy.State, now time.Time) {
	if i == 0 {
		full := strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true}
		s.Observed.Stable, s.Observed.Canary = full, full
	}
}

func allocWorlds() []allocWorld {
	gated := strategy.Canary{MaxSurgePercent: 40, Options: strategy.Options{ScaleDownDelay: metav1.Duration{Duration: 30 * time.Second}}, Steps: []strategy.CanaryStep{
		strategy.SetWeight(20), strategy.Pause(time.Minute), strategy.SetWeight(40), strategy.PauseUntilResumed(),
		strategy.SetWeight(60), strategy.Gate("p99"), strategy.SetWeight(80)}}
	return []allocWorld{
		{"Incremental", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40}, nil},
		{"Incremental-fixed", strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute},
			Options: strategy.Options{Capacity: strategy.CapacityFixed}}, provisioned},
		{"Incremental-replicas", strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 25,
			Options: strategy.Options{Capacity: strategy.CapacityReplicas}}, nil},
		{"BlueGreen", strategy.BlueGreen{Options: strategy.Options{ScaleDownDelay: metav1.Duration{Duration: time.Minute}}}, nil},
		{"Canary", gated, func(i int, s *strategy.State, now time.Time) {
			if s.Phase == strategy.PhasePaused && s.PauseReason == strategy.ReasonPauseStep && now.Sub(s.PausedAt.Time) > 3*time.Minute {
				*s = s.Resume(now)
			}
			if s.Gate == "p99" && now.Sub(s.StepStartedAt.Time) > time.Minute {
				s.Observed.Gates = []strategy.GateResult{{Name: "p99", Verdict: strategy.VerdictPass, At: strategy.Micro(now)}}
			}
		}},
		{"Incremental-adapters-fail", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40},
			func(i int, s *strategy.State, now time.Time) {
				s.Observed.Error = ""
				if i >= 8 && i < 30 {
					s.Observed.Error = "router: read weights: connection refused"
				}
			}},
		{"Incremental-readiness-lost", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40},
			func(i int, s *strategy.State, now time.Time) {
				for _, side := range []*strategy.SideObservation{&s.Observed.Stable, &s.Observed.Canary} {
					side.Ready, side.Settled = side.Capacity, true
					if i >= 12 && i < 30 && side.Capacity >= 30 {
						side.Ready, side.Settled = side.Capacity-25, false // pods crash on both sides
					}
				}
			}},
		{"Incremental-abort", strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 40,
			Options: strategy.Options{AbortRamp: strategy.AbortGradual}},
			func(i int, s *strategy.State, now time.Time) {
				if s.Phase == strategy.PhaseProgressing && s.Desired.Weight == 60 && s.Aborted == nil {
					*s = s.Abort("p99 latency", now)
				}
			}},
	}
}

// trace walks w to a terminal phase. After each hop it steps once more
// before the hop shows (waiting for the world), then observes it; it steps
// once in the terminal phase too.
func trace(t *testing.T, w allocWorld) []traced {
	t.Helper()
	var out []traced
	s, now := strategy.NewState("v1", "v2"), t0
	for i := 0; i < 2000; i++ {
		if w.act != nil {
			w.act(i, &s, now)
		}
		label := string(s.Phase)
		if label == "" {
			label = "start"
		}
		label += ": " + s.Message
		out = append(out, traced{label, w.strat, s, now})
		if s.Phase.Terminal() {
			return out
		}
		d := w.strat.Step(s, now)
		if !d.HasHops() {
			s = d.State
			if d.RequeueAfter <= 0 && !s.Phase.Terminal() && !s.AwaitingResume {
				t.Fatalf("%s: stuck in %s (%s)", w.name, s.Phase, s.Message)
			}
			now = now.Add(max(d.RequeueAfter, time.Second))
			s.Observed.At = strategy.Micro(now)
			continue
		}
		// The hop is asked; the world shows it a poll later.
		s = d.State
		now = now.Add(d.RequeueAfter)
		s.Observed.At = strategy.Micro(now)
		out = append(out, traced{string(s.Phase) + ": " + s.Message + " (hop not observed yet)", w.strat, s, now})
		s = w.strat.Step(s, now).State
		observe(&s, d, now)
	}
	t.Fatalf("%s: no end", w.name)
	return nil
}

// TestStepAllocsEveryStep: along whole rollouts of every strategy and
// capacity mode, through every phase (start, progressing, waiting for a
// hop, for an interval, paused, at a gate, completing, aborting, terminal),
// a Step that leaves the conditions and the message as they were allocates
// nothing: adapters that keep failing, sides that stay short of ready
// capacity and deadlines that stay passed included. A Step that changes a
// condition allocates once: the new conditions slice (Step never writes into
// the caller's), about once per phase change; a new message that embeds
// observed values (an adapter's error, ready capacities) once more; a
// Canary that starts or re-places its steps allocates the steps' hash.
func TestStepAllocsEveryStep(t *testing.T) {
	for _, w := range allocWorlds() {
		t.Run(w.name, func(t *testing.T) {
			steps, transitions := 0, 0
			phases := map[string]bool{}
			for _, c := range trace(t, w) {
				d := c.strat.Step(c.s, c.now)
				changed := !cmp.Equal(c.s.Conditions, d.State.Conditions)
				budget := 0.0
				if changed {
					budget++
					transitions++
				}
				if d.State.StepsHash != c.s.StepsHash {
					budget++
				}
				if d.State.Message != c.s.Message {
					budget++ // a new message may embed observed values
				}
				got := testing.AllocsPerRun(20, func() { sink = c.strat.Step(c.s, c.now) })
				if got > budget {
					t.Errorf("%s at +%v: %v allocations, want at most %v (conditions changed: %v)",
						c.label, c.now.Sub(t0), got, budget, changed)
				}
				steps++
				phases[string(d.State.Phase)] = true
				// The same situation a moment later, nothing new observed
				// (waiting for a hop, an interval, a pause, a gate...).
				again, now := d.State, c.now.Add(time.Millisecond)
				d2 := c.strat.Step(again, now)
				if cmp.Equal(again.Conditions, d2.State.Conditions) && again.Message == d2.State.Message {
					if got := testing.AllocsPerRun(20, func() { sink = c.strat.Step(again, now) }); got != 0 {
						t.Errorf("%s, a moment later (%s: %s): %v allocations, want 0", c.label, d2.State.Phase, d2.State.Message, got)
					}
				}
			}
			t.Logf("%d Steps, %d of them change a condition; phases %v", steps, transitions, keys(phases))
			if !phases[string(strategy.PhaseSucceeded)] && !phases[string(strategy.PhaseAborted)] {
				t.Errorf("the trace never ended")
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// BenchmarkStepPhases measures Step in every situation of every strategy's
// rollout (each phase, and within it each thing it waits for), on states
// taken from a whole rollout whose conditions and message are in place (the
// Step before was in the same situation): what a controller pays per
// reconcile while a rollout is there, 0 allocs/op. The "start" cases are
// the first Step of a new rollout, which creates the conditions (and, for a
// Canary, the steps' hash).
func BenchmarkStepPhases(b *testing.B) {
	t := &testing.T{}
	for _, w := range allocWorlds() {
		seen := map[string]bool{}
		for _, c := range trace(t, w) {
			if c.s.Phase == "" {
				b.Run(w.name+"/start", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						sink = c.strat.Step(c.s, c.now)
					}
				})
				continue
			}
			// The same situation a moment later: the Step's own state,
			// stepped again with nothing new observed.
			s := c.strat.Step(c.s, c.now).State
			now := c.now.Add(time.Millisecond)
			d := c.strat.Step(s, now)
			name := string(d.State.Phase) + "/" + slug(d.State.Message)
			if seen[name] || !cmp.Equal(s.Conditions, d.State.Conditions) || s.Message != d.State.Message {
				continue // seen, or a transition
			}
			seen[name] = true
			b.Run(w.name+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sink = c.strat.Step(s, now)
				}
			})
		}
	}
}

// slug shortens a message to a benchmark name: its first five words.
func slug(msg string) string {
	words := strings.Fields(msg)
	if len(words) > 5 {
		words = words[:5]
	}
	return strings.Join(words, "-")
}
