package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// tick is the simulated time between two batches of requests.
const tick = 100 * time.Millisecond

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simulation is two sides and a route, shared by consecutive rollouts: after
// a rollout succeeds, the canary side holds the stable role of the next one.
type simulation struct {
	cfg    Config
	out    io.Writer
	clock  *fake.Clock
	router *fake.Router
	a, b   *fake.Capacity
	side   strategy.Side // the physical side holding the stable role
	faults faultCounts
}

type faultCounts struct{ conflicts, errors int }

// sample is the allocation at one instant of a rollout, in role terms.
type sample struct {
	at                     time.Duration
	weight, stable, canary int32
	paused                 bool
}

type result struct {
	name      string
	phase     strategy.Phase
	took      time.Duration
	plan      strategy.Timeline
	hops      int
	stats     fake.TrafficStats
	surge     int32
	samples   []sample
	ok        bool
	emergency bool
}

func newSimulation(cfg Config, out io.Writer) (*simulation, error) {
	if cfg.Replicas < 1 {
		return nil, fmt.Errorf("-replicas %d: want at least 1", cfg.Replicas)
	}
	if cfg.Speed < 0 {
		return nil, fmt.Errorf("-speed %v: want 0 or more", cfg.Speed)
	}
	sim := &simulation{cfg: cfg, out: out, clock: fake.NewClock(start), side: strategy.SideA}
	sim.router = fake.NewRouter(sim.clock)
	sim.a = fake.NewCapacity(sim.clock, int32(cfg.Replicas), 100)
	sim.b = fake.NewCapacity(sim.clock, int32(cfg.Replicas), 0)
	// Realistic lag: a data plane takes a moment to program a route; new
	// replicas take a while to become ready.
	sim.router.SetLag(fake.Lag{Duration: 300 * time.Millisecond})
	for _, c := range []*fake.Capacity{sim.a, sim.b} {
		c.SetLag(fake.Lag{Duration: 1500 * time.Millisecond})
		if cfg.Faults {
			c.SetLag(fake.Lag{Duration: 2500 * time.Millisecond})
			c.SetPartial(true)
		}
	}
	return sim, nil
}

func (sim *simulation) strategy(name string) (strategy.Strategy, error) {
	opts := strategy.Options{AbortRamp: strategy.AbortImmediate, PollInterval: 500 * time.Millisecond}
	switch sim.cfg.AbortRamp {
	case "immediate":
	case "gradual":
		opts.AbortRamp = strategy.AbortGradual
	case "emergency":
		opts.AbortRamp = strategy.AbortEmergency
	default:
		return nil, fmt.Errorf("-abort-ramp %q: want immediate, gradual or emergency", sim.cfg.AbortRamp)
	}
	var s strategy.Strategy
	switch name {
	case "incremental":
		s = strategy.Incremental{StepPercent: int32(sim.cfg.Step), Interval: sim.cfg.Interval, MaxSurgePercent: int32(sim.cfg.Surge), Options: opts}
	case "canary":
		s = strategy.Canary{MaxSurgePercent: int32(sim.cfg.Surge), Options: opts, Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), strategy.Pause(sim.cfg.Pause),
			strategy.SetWeight(50), strategy.PauseUntilResumed(),
			strategy.SetWeight(80),
		}}
	default:
		s = strategy.BlueGreen{Options: opts}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func (sim *simulation) sides() (stable, canary *fake.Capacity) {
	if sim.side == strategy.SideB {
		return sim.b, sim.a
	}
	return sim.a, sim.b
}

// runner builds the Runner, with fault injection when asked.
func (sim *simulation) runner(strat strategy.Strategy, hops *[]string) *rollout.Runner {
	var router rollout.TrafficRouter = sim.router
	var a, b rollout.CapacitySetter = sim.a, sim.b
	if sim.cfg.Faults {
		writes := 0
		router = fake.InterceptRouter(sim.router, fake.RouterFuncs{
			SetWeights: func(ctx context.Context, next rollout.TrafficRouter, w rollout.Weights) error {
				writes++
				if writes%3 == 0 { // every third write loses a race with another writer
					sim.faults.conflicts++
					return fmt.Errorf("route update: %w", rollout.ErrConflict)
				}
				return next.SetWeights(ctx, w)
			},
		})
		flaky := func(c *fake.Capacity) rollout.CapacitySetter {
			calls := 0
			return fake.InterceptCapacity(c, fake.CapacityFuncs{
				SetCapacity: func(ctx context.Context, next rollout.CapacitySetter, r rollout.CapacityRequest) error {
					calls++
					if calls%4 == 0 {
						sim.faults.errors++
						return errors.New("backend answered 503")
					}
					return next.SetCapacity(ctx, r)
				},
			})
		}
		a, b = flaky(sim.a), flaky(sim.b)
	}
	return &rollout.Runner{
		Strategy: strat, Router: router, A: a, B: b, Clock: sim.clock,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			for _, h := range e.Applied {
				*hops = append(*hops, h.String())
			}
		}),
	}
}

func (sim *simulation) rollout(ctx context.Context, name, from, to string) (*result, error) {
	strat, err := sim.strategy(name)
	if err != nil {
		return nil, err
	}
	plan, err := strategy.Plan(strat, strategy.PlanOptions{Start: sim.clock.Now(), ResumeAfter: sim.cfg.ResumeAfter})
	if err != nil {
		return nil, err
	}
	var hops []string
	runner := sim.runner(strat, &hops)
	traffic := fake.NewTraffic(sim.router, sim.a, sim.b, 1000)
	s := strategy.NewState(from, to)
	s.StableSide = sim.side
	began := sim.clock.Now()
	res := &result{name: name, plan: plan, surge: int32(sim.cfg.Surge)}
	fmt.Fprintf(sim.out, "== %s %s -> %s (plan: %s, %d hops)\n", name, from, to, plan.Duration, plan.Hops)
	fmt.Fprintf(sim.out, "  %7s %-11s %-10s %-16s %-15s %-22s %s\n", "time", "phase", "weight", "capacity st/ca", "ready st/ca", "canary traffic", "event")
	var resumeAt time.Time
	aborted := false
	applied := 0
	for !s.Phase.Terminal() {
		now := sim.clock.Now()
		if now.Sub(began) > time.Hour {
			return nil, fmt.Errorf("%s: not finished after an hour of simulated time: %s", name, s.Message)
		}
		if sim.cfg.AbortAt > 0 && !aborted && now.Sub(began) >= sim.cfg.AbortAt {
			aborted = true
			s = s.Abort("requested by -abort-at", now)
			sim.line(now.Sub(began), &s, "abort requested")
		}
		if s.Paused && s.PauseReason == strategy.ReasonPauseStep {
			if resumeAt.IsZero() {
				resumeAt = now.Add(sim.cfg.ResumeAfter)
				sim.line(now.Sub(began), &s, fmt.Sprintf("paused until resumed; the operator resumes in %s", sim.cfg.ResumeAfter))
			} else if !now.Before(resumeAt) {
				s = s.Resume(now)
				resumeAt = time.Time{}
				sim.line(now.Sub(began), &s, "resumed")
			}
		}
		prev := s.Phase
		next, requeue, err := runner.ReconcileAt(ctx, s, now)
		s = next
		if s.Aborted != nil && s.Aborted.Emergency {
			res.emergency = true
		}
		hopped := applied < len(hops)
		for ; applied < len(hops); applied++ {
			sim.line(now.Sub(began), &s, "asked: "+hops[applied])
		}
		if err != nil {
			sim.line(now.Sub(began), &s, "! "+err.Error())
		} else if s.Phase != prev && !s.Phase.Terminal() && !hopped {
			sim.line(now.Sub(began), &s, s.Message)
		}
		if s.Phase.Terminal() {
			break
		}
		wait := requeue
		if wait <= 0 {
			wait = tick
		}
		if !resumeAt.IsZero() {
			wait = min(wait, max(resumeAt.Sub(now), time.Nanosecond))
		}
		if sim.cfg.AbortAt > 0 && !aborted {
			wait = min(wait, max(began.Add(sim.cfg.AbortAt).Sub(now), time.Nanosecond))
		}
		sim.wait(wait, traffic, res, began, &s)
	}
	res.phase = s.Phase
	res.took = sim.clock.Now().Sub(began)
	res.hops = len(hops)
	traffic.Tick()
	res.stats = traffic.Stats()
	wantPhase := s.Phase == strategy.PhaseSucceeded || aborted && s.Phase == strategy.PhaseAborted
	clean := res.stats.Dropped == 0 && res.stats.Overloaded == 0 || res.emergency
	res.ok = wantPhase && clean && res.stats.PeakCapacity <= 100+res.surge
	sim.line(res.took, &s, string(s.Phase))
	if s.Phase == strategy.PhaseSucceeded {
		sim.side = s.StableSide // the canary side is the stable side of the next rollout
	}
	fmt.Fprintf(sim.out, "   %s in %s (plan %s), %d hops; peak capacity %d (100 + MaxSurge %d); requests served %d, overloaded %d, dropped %d",
		s.Phase, res.took.Round(time.Millisecond), plan.Duration, res.hops, res.stats.PeakCapacity, res.surge,
		res.stats.Served, res.stats.Overloaded, res.stats.Dropped)
	if sim.cfg.Faults {
		fmt.Fprintf(sim.out, "; faults injected: %d conflicts, %d adapter errors", sim.faults.conflicts, sim.faults.errors)
	}
	fmt.Fprintln(sim.out)
	return res, nil
}

// wait lets simulated time pass in ticks of traffic, pacing with the wall
// clock by cfg.Speed.
func (sim *simulation) wait(d time.Duration, traffic *fake.Traffic, res *result, began time.Time, s *strategy.State) {
	for d > 0 {
		step := min(d, tick)
		sim.clock.Advance(step)
		d -= step
		traffic.Tick()
		stable, canary := sim.sides()
		w := sim.router.Applied()
		res.samples = append(res.samples, sample{
			at:     sim.clock.Now().Sub(began),
			weight: w.Of(sim.side.Other()),
			stable: stable.Status().Capacity, canary: canary.Status().Capacity,
			paused: s.Phase == strategy.PhasePaused || s.Paused,
		})
		if sim.cfg.Speed > 0 {
			time.Sleep(time.Duration(float64(step) / sim.cfg.Speed))
		}
	}
}

// line prints one compact progress line.
func (sim *simulation) line(at time.Duration, s *strategy.State, what string) {
	stable, canary := sim.sides()
	st, cs := stable.Status(), canary.Status()
	w := sim.router.Applied().Of(sim.side.Other())
	fmt.Fprintf(sim.out, "  %7s %-11s %-10d %3d/%-12d %3d/%-11d %s %s\n",
		fmt.Sprintf("+%.1fs", at.Seconds()), s.Phase, w, st.Capacity, cs.Capacity, st.Ready, cs.Ready,
		bar(w), strings.TrimSpace(what))
}

// bar draws the canary weight as a 20-character progress bar.
func bar(w int32) string {
	n := int(w) / 5
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 20-n) + "]"
}
