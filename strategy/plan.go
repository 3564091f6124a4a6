package strategy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// PlanOptions tune a dry run. The zero value plans from the zero instant with
// a fresh state, resumes every indefinite pause at once and passes every gate.
type PlanOptions struct {
	// Start is the instant the plan begins; the zero value means the Unix
	// epoch (Step needs a real instant: a zero time reads as "never").
	Start time.Time
	// State is where the plan starts; nil means NewState("stable", "canary").
	State *State
	// ResumeAfter is how long a human takes to resume an indefinite pause or
	// an inconclusive gate.
	ResumeAfter time.Duration
	// Verdicts gives gate verdicts by name; a gate not listed passes.
	Verdicts map[string]Verdict
	// MaxSteps bounds the simulation; 0 means 100000.
	MaxSteps int
	// ReadyDelay is how long a side takes to become ready after it is asked
	// to grow (pods scheduled and started, replicas placed); RouteDelay how
	// long the data plane takes to serve a route change (a weight, extras)
	// and report it accepted. Zero means at once; a side asked to shrink
	// shrinks at once. With delays the plan is what a rollout notified of
	// every change does with adapters that slow, and its SurgeCost what it
	// spends on them.
	ReadyDelay time.Duration
	RouteDelay time.Duration
}

// PlanEntry is one moment of a plan: a hop, the start or end of a pause, or the
// end of the rollout.
type PlanEntry struct {
	// Offset is the time since PlanOptions.Start.
	Offset time.Duration
	// What happened: "deploy canary", "weight 20", "canary capacity 30",
	// "stable capacity 0", "pause 1m0s", "resume", "Succeeded"...
	What  string
	Phase Phase
	// Allocation is the allocation in force after the event, in the roles
	// of the rollout being planned (before the swap at success).
	Allocation Allocation
	// Extras are the header route, mirror and sticky sessions in force
	// after the event; CanaryLoad their load on the canary with the
	// allocation's weight (TrafficExtras.CanaryLoad), in percent.
	Extras     TrafficExtras
	CanaryLoad int32
}

// Timeline is the result of Plan.
type Timeline struct {
	Start time.Time
	// Initial is the allocation before the first event.
	Initial Allocation
	Entries []PlanEntry
	// Duration is the time from Start to the terminal phase.
	Duration time.Duration
	// Hops counts the adapter changes (a decision moving weight and a
	// capacity at once counts twice).
	Hops int
	// PeakCapacity is the largest stable + canary capacity asked for.
	PeakCapacity int32
	// SurgeCost is the surge the plan spends: the capacity provisioned
	// above full (stable + canary - 100, from each scale-up until its
	// release) integrated over time, in seconds of full capacity. 10
	// percent above full for 5 s costs 500ms; times the full replica count
	// of a side, it is pod-seconds. Adapters that apply every hop at once
	// spend only what a plan holds through its waits; PlanOptions.ReadyDelay
	// and RouteDelay add what a real rollout spends waiting for them.
	SurgeCost time.Duration
	// Ramp is the time from the first canary weight above 0 in force to
	// weight 100 in force: the strategy's waits, plus the data plane's and
	// the sides' delays where they are not overlapped with them.
	Ramp time.Duration
	// Final is the state at the end.
	Final State
}

// ErrPlanStuck is returned when a plan cannot finish: an indefinite wait
// that the planner cannot end, or MaxSteps exceeded.
var ErrPlanStuck = errors.New("strategy: plan does not finish")

// Plan simulates a whole rollout with adapters that apply every hop at once
// and returns its exact timeline. Because Step is pure, the timeline is what
// a real rollout does when its adapters are fast; slow adapters only add
// their own delays. From a PlanOptions.State whose latest weight hop is not
// recorded in force (State.WeightAppliedAt), that hop counts as applied
// when it was decided. It returns the strategy's *InvalidError for bad
// options.
func Plan(s Strategy, o PlanOptions) (Timeline, error) {
	if err := s.Validate(); err != nil {
		return Timeline{}, err
	}
	st := NewState("stable", "canary")
	if o.State != nil {
		st = *o.State.DeepCopy()
		if st.WeightAppliedAt.Before(&st.WeightChangedAt) {
			// The adapters apply every hop at once: the latest weight hop
			// was in force when it was decided, so the interval counts
			// from then (as it does when nothing records it).
			st.WeightAppliedAt = st.WeightChangedAt
		}
	} else {
		// The sides report their revisions: the plan shows the deploy.
		st.Observed.Revisions = true
		st.Observed.Stable.Revision, st.Observed.Stable.Updated = st.StableRevision, true
		if s.Shared().Capacity == CapacityFixed {
			// Fixed capacity: both sides are provisioned in full.
			st.Observed.Canary = SideObservation{Capacity: 100, Ready: 100, Settled: true}
		}
	}
	if st.Idle() || st.Unobserved {
		// Nothing to roll out (or nothing known before an observation): an
		// empty timeline.
		start := o.Start
		if start.IsZero() {
			start = time.Unix(0, 0).UTC()
		}
		return Timeline{Start: start, Initial: st.Desired, Final: st}, nil
	}
	limit := o.MaxSteps
	if limit == 0 {
		limit = 100000
	}
	if o.Start.IsZero() {
		o.Start = time.Unix(0, 0).UTC()
	}
	tl := Timeline{Start: o.Start, Initial: st.Desired}
	now := o.Start
	var gates []GateResult
	for _, name := range s.Gates() {
		v, ok := o.Verdicts[name]
		if !ok {
			v = VerdictPass
		}
		gates = append(gates, GateResult{Name: name, Verdict: v})
	}
	paused := false
	w := planWorld{readyDelay: o.ReadyDelay, routeDelay: o.RouteDelay}
	var rampFrom time.Time
	for i := 0; i < limit; i++ {
		w.land(&st, now)
		if st.Observed.WeightApplied && !st.Observed.WeightInvalid {
			if st.Observed.Weight > 0 && rampFrom.IsZero() {
				rampFrom = now
			}
			if st.Observed.Weight == 100 && tl.Ramp == 0 && !rampFrom.IsZero() && st.Phase != PhaseSucceeded {
				tl.Ramp = now.Sub(rampFrom)
			}
		}
		st.Observed.Gates = gates
		st.Observed.At = micro(now)
		d := s.Step(st, now)
		st = d.State
		add := func(what string) {
			tl.Entries = append(tl.Entries, PlanEntry{Offset: now.Sub(o.Start), What: what, Phase: st.Phase, Allocation: st.Desired,
				Extras: st.DesiredExtras, CanaryLoad: st.DesiredExtras.CanaryLoad(st.Desired.Weight)})
		}
		if d.HasHops() {
			w.apply(&st, &d, now)
			if d.Weight.Set {
				tl.Hops++
				add(fmt.Sprintf("weight %d", d.Weight.Value))
			}
			if d.Extras {
				tl.Hops++
				add(st.DesiredExtras.String())
			}
			if d.StableCapacity.Set {
				tl.Hops++
				add(fmt.Sprintf("stable capacity %d", d.StableCapacity.Value))
			}
			if d.Deploy.Set {
				tl.Hops++
				add("deploy " + d.Deploy.Revision)
			}
			if d.CanaryCapacity.Set {
				tl.Hops++
				what := fmt.Sprintf("canary capacity %d", d.CanaryCapacity.Value)
				if d.CanaryCapacity.Steady {
					what = "canary capacity steady"
				}
				add(what)
			}
			tl.PeakCapacity = max(tl.PeakCapacity, st.Desired.StableCapacity+st.Desired.CanaryCapacity)
			paused = false
			continue
		}
		if st.Phase.Terminal() {
			end := st
			if st.Phase == PhaseSucceeded { // report the allocation before the swap
				end.Desired = Allocation{Weight: 100, StableCapacity: st.Desired.CanaryCapacity, CanaryCapacity: st.Desired.StableCapacity}
			}
			tl.Entries = append(tl.Entries, PlanEntry{Offset: now.Sub(o.Start), What: string(st.Phase), Phase: st.Phase, Allocation: end.Desired,
				CanaryLoad: end.Desired.Weight})
			tl.Duration = now.Sub(o.Start)
			tl.SurgeCost = w.surgeCost()
			tl.Final = st
			return tl, nil
		}
		if st.AwaitingResume {
			add("pause until resumed")
			now = now.Add(o.ResumeAfter)
			st = st.Resume(now)
			add("resume")
			continue
		}
		wait := d.RequeueAfter
		if due, ok := w.next(); ok {
			// A caller notified of every change wakes when a hop lands.
			wait = min(d.WatchedRequeueAfter, due.Sub(now))
			if d.WatchedRequeueAfter <= 0 {
				wait = due.Sub(now)
			}
		}
		if wait <= 0 {
			return tl, fmt.Errorf("%w: nothing to wait for in phase %s (%s)", ErrPlanStuck, st.Phase, st.Message)
		}
		if st.Phase == PhasePaused && !paused {
			add("pause " + wait.String())
			paused = true
		}
		w.pass(&st, wait)
		now = now.Add(wait)
	}
	return tl, fmt.Errorf("%w: more than %d steps", ErrPlanStuck, limit)
}

// planWorld is what Plan's adapters hold: the hops on their way (a route
// change until it is served, a side's growth until it is ready) and the
// surge spent so far.
type planWorld struct {
	readyDelay, routeDelay time.Duration
	// When the route, the stable side and the canary side land what they
	// were last asked; zero when nothing is on its way.
	route, stable, canary time.Time
	surge                 time.Duration // percent-of-full seconds, as a Duration times 100
}

// apply makes the observation show the hops of d: at once where the world
// has no delay, else on their way (see land).
func (w *planWorld) apply(st *State, d *Decision, now time.Time) {
	if w.readyDelay == 0 && w.routeDelay == 0 {
		applyInstantly(st, d)
		return
	}
	o := &st.Observed
	if d.Weight.Set || d.Extras {
		if d.Weight.Set {
			o.Weight = d.Weight.Value
		}
		if d.Extras {
			o.Extras = *st.DesiredExtras.DeepCopy()
		}
		o.WeightApplied = w.routeDelay == 0
		w.route = now.Add(w.routeDelay)
	}
	grow := func(side *SideObservation, t Target, due *time.Time) {
		if !t.Set {
			return
		}
		if t.Value <= side.Capacity || w.readyDelay == 0 {
			side.Capacity, side.Ready, side.Settled = t.Value, t.Value, true
			*due = time.Time{}
			return
		}
		side.Capacity, side.Ready, side.Settled = t.Value, min(side.Ready, t.Value), false
		*due = now.Add(w.readyDelay)
	}
	grow(&o.Stable, d.StableCapacity, &w.stable)
	grow(&o.Canary, d.CanaryCapacity, &w.canary)
	if d.Deploy.Set {
		o.Canary.Revision, o.Canary.Updated = d.Deploy.Revision, true
	}
}

// land makes what is due by now applied.
func (w *planWorld) land(st *State, now time.Time) {
	o := &st.Observed
	if !w.route.IsZero() && !w.route.After(now) {
		o.WeightApplied, w.route = true, time.Time{}
	}
	for _, x := range [...]struct {
		side *SideObservation
		due  *time.Time
	}{{&o.Stable, &w.stable}, {&o.Canary, &w.canary}} {
		if !x.due.IsZero() && !x.due.After(now) {
			x.side.Ready, x.side.Settled, *x.due = x.side.Capacity, true, time.Time{}
		}
	}
}

// next is the earliest instant something on its way lands.
func (w *planWorld) next() (time.Time, bool) {
	var t time.Time
	for _, due := range [...]time.Time{w.route, w.stable, w.canary} {
		if !due.IsZero() && (t.IsZero() || due.Before(t)) {
			t = due
		}
	}
	return t, !t.IsZero()
}

// pass counts the surge the observed capacities hold for d.
func (w *planWorld) pass(st *State, d time.Duration) {
	if s := st.Observed.Stable.Capacity + st.Observed.Canary.Capacity - 100; s > 0 {
		w.surge += time.Duration(s) * d
	}
}

func (w *planWorld) surgeCost() time.Duration { return w.surge / 100 }

// applyInstantly makes the observation show every hop of d applied and ready.
func applyInstantly(st *State, d *Decision) {
	o := &st.Observed
	if d.Weight.Set {
		o.Weight, o.WeightApplied = d.Weight.Value, true
	}
	if d.Extras {
		o.Extras = *st.DesiredExtras.DeepCopy()
	}
	if d.StableCapacity.Set {
		rev, updated := o.Stable.Revision, o.Stable.Updated
		o.Stable = SideObservation{Capacity: d.StableCapacity.Value, Ready: d.StableCapacity.Value, Settled: true,
			Revision: rev, Updated: updated}
	}
	if d.CanaryCapacity.Set {
		rev, updated := o.Canary.Revision, o.Canary.Updated
		o.Canary = SideObservation{Capacity: d.CanaryCapacity.Value, Ready: d.CanaryCapacity.Value, Settled: true,
			Revision: rev, Updated: updated}
	}
	if d.Deploy.Set {
		o.Canary.Revision, o.Canary.Updated = d.Deploy.Revision, true
	}
}

// String renders the timeline one event a line:
// "+1m0s weight 20 (100,20) w20".
func (t Timeline) String() string {
	var b strings.Builder
	for _, e := range t.Entries {
		fmt.Fprintf(&b, "+%s %s (%d,%d) w%d\n", e.Offset, e.What,
			e.Allocation.StableCapacity, e.Allocation.CanaryCapacity, e.Allocation.Weight)
	}
	fmt.Fprintf(&b, "total %s, %d hops, peak capacity %d", t.Duration, t.Hops, t.PeakCapacity)
	if t.SurgeCost > 0 {
		fmt.Fprintf(&b, ", surge cost %s", t.SurgeCost)
	}
	return b.String()
}

// Capacities renders the sequence of (stable,canary) capacities on one line:
// "(100,0) -> (100,30) -> ... -> (0,100)".
func (t Timeline) Capacities() string {
	var b strings.Builder
	last := t.Initial
	fmt.Fprintf(&b, "(%d,%d)", last.StableCapacity, last.CanaryCapacity)
	for _, e := range t.Entries {
		a := e.Allocation
		if a.StableCapacity != last.StableCapacity || a.CanaryCapacity != last.CanaryCapacity {
			fmt.Fprintf(&b, " -> (%d,%d)", a.StableCapacity, a.CanaryCapacity)
			last = a
		}
	}
	return b.String()
}
