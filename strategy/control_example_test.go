package strategy_test

import (
	"fmt"
	"time"

	"github.com/upshift-dev/upshift/strategy"
)

// ExampleState_Control steers a canary from its spec, as a controller does
// on every reconcile: State.Control with the spec as it is now, then Step,
// at the same instant. The spec is edited along the way: paused while the
// rollout waits at its PauseUntilResumed step, a promote requested while
// paused (held), then un-paused, which lets the promote pass the step. A
// request acts once, however many reconciles see it.
func ExampleState_Control() {
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(50), strategy.PauseUntilResumed()},
		MaxSurgePercent: 100,
	}
	// observe plays adapters that apply every hop of d at once.
	observe := func(s *strategy.State, d strategy.Decision, now time.Time) {
		o := &s.Observed
		o.At = strategy.Micro(now)
		if d.Weight.Set {
			o.Weight, o.WeightApplied = d.Weight.Value, true
		}
		if d.StableCapacity.Set {
			v := d.StableCapacity.Value
			o.Stable = strategy.SideObservation{Capacity: v, Ready: v, Settled: true}
		}
		if d.CanaryCapacity.Set {
			v := d.CanaryCapacity.Value
			o.Canary = strategy.SideObservation{Capacity: v, Ready: v, Settled: true}
		}
	}
	edits := map[int]func(*strategy.Control){
		3: func(c *strategy.Control) { c.Paused = true },
		4: func(c *strategy.Control) { c.Promote = "2026-01-01T12:04:00Z" },
		6: func(c *strategy.Control) { c.Paused = false },
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var spec strategy.Control
	s := strategy.NewState("v1", "v2")
	for i := range 12 {
		now := t0.Add(time.Duration(i) * time.Minute)
		if edit := edits[i]; edit != nil {
			edit(&spec)
		}
		var applied []strategy.Applied
		s, applied = s.Control(spec, now)
		d := c.Step(s, now)
		s = d.State
		observe(&s, d, now)
		fmt.Printf("+%s %s %s", now.Sub(t0), s.Phase, hops(d))
		for _, a := range applied {
			fmt.Printf(" applied %s", a.Command)
			if a.Token != "" {
				fmt.Printf(" %s", a.Token)
			}
		}
		if s.AwaitingResume {
			fmt.Printf(" (paused: %s)", s.PauseReason)
		}
		fmt.Println()
		if s.Phase.Terminal() {
			break
		}
	}
	// Output:
	// +0s Progressing [canary=50]
	// +1m0s Progressing [weight=50]
	// +2m0s Paused [stable=50] (paused: PauseStep)
	// +3m0s Paused [] applied Pause (paused: ControlPause)
	// +4m0s Paused [] applied Promote 2026-01-01T12:04:00Z (paused: ControlPause)
	// +5m0s Paused [] (paused: ControlPause)
	// +6m0s Progressing [canary=100] applied Resume
	// +7m0s Progressing [weight=100]
	// +8m0s Completing [stable=0 canary=steady]
	// +9m0s Succeeded []
}
