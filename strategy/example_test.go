package strategy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// ExamplePlan dry-runs KubeRay's incremental upgrade: the weight rises by 10
// once a minute; the canary grows to what each weight needs just before the
// minute ends, and the stable side shrinks as soon as the weight is in
// force, so the 30 percent of surge allowed is never all spent.
func ExamplePlan() {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	tl, err := strategy.Plan(inc, strategy.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl.Capacities())
	fmt.Println("total", tl.Duration)
	// Output:
	// (100,0) -> (100,10) -> (90,10) -> (90,20) -> (80,20) -> (80,30) -> (70,30) -> (70,40) -> (60,40) -> (60,50) -> (50,50) -> (50,60) -> (40,60) -> (40,70) -> (30,70) -> (30,80) -> (20,80) -> (20,90) -> (10,90) -> (10,100) -> (0,100)
	// total 9m0s
}

// ExampleIncremental prints every hop of an incremental upgrade: offset,
// hop, (stable,canary) capacities afterwards and the canary weight.
func ExampleIncremental() {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	tl, err := strategy.Plan(inc, strategy.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl)
	// Output:
	// +0s deploy canary (100,0) w0
	// +0s canary capacity 10 (100,10) w0
	// +0s weight 10 (100,10) w10
	// +0s stable capacity 90 (90,10) w10
	// +1m0s canary capacity 20 (90,20) w10
	// +1m0s weight 20 (90,20) w20
	// +1m0s stable capacity 80 (80,20) w20
	// +2m0s canary capacity 30 (80,30) w20
	// +2m0s weight 30 (80,30) w30
	// +2m0s stable capacity 70 (70,30) w30
	// +3m0s canary capacity 40 (70,40) w30
	// +3m0s weight 40 (70,40) w40
	// +3m0s stable capacity 60 (60,40) w40
	// +4m0s canary capacity 50 (60,50) w40
	// +4m0s weight 50 (60,50) w50
	// +4m0s stable capacity 50 (50,50) w50
	// +5m0s canary capacity 60 (50,60) w50
	// +5m0s weight 60 (50,60) w60
	// +5m0s stable capacity 40 (40,60) w60
	// +6m0s canary capacity 70 (40,70) w60
	// +6m0s weight 70 (40,70) w70
	// +6m0s stable capacity 30 (30,70) w70
	// +7m0s canary capacity 80 (30,80) w70
	// +7m0s weight 80 (30,80) w80
	// +7m0s stable capacity 20 (20,80) w80
	// +8m0s canary capacity 90 (20,90) w80
	// +8m0s weight 90 (20,90) w90
	// +8m0s stable capacity 10 (10,90) w90
	// +9m0s canary capacity 100 (10,100) w90
	// +9m0s weight 100 (10,100) w100
	// +9m0s stable capacity 0 (0,100) w100
	// +9m0s canary capacity steady (0,100) w100
	// +9m0s Succeeded (0,100) w100
	// total 9m0s, 32 hops, peak capacity 110
}

// ExampleCanary is the canary 20% / pause 60s / 80% / pause 120s. Each pause
// counts from the moment the previous step is observed complete, and a final
// implicit step promotes to 100.
func ExampleCanary() {
	c := strategy.Canary{
		Steps: []strategy.CanaryStep{
			strategy.SetWeight(20),
			strategy.Pause(60 * time.Second),
			strategy.SetWeight(80),
			strategy.Pause(120 * time.Second),
		},
		MaxSurgePercent: 100,
	}
	tl, err := strategy.Plan(c, strategy.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl)
	// Output:
	// +0s deploy canary (100,0) w0
	// +0s canary capacity 20 (100,20) w0
	// +0s weight 20 (100,20) w20
	// +0s stable capacity 80 (80,20) w20
	// +0s pause 1m0s (80,20) w20
	// +1m0s canary capacity 80 (80,80) w20
	// +1m0s weight 80 (80,80) w80
	// +1m0s stable capacity 20 (20,80) w80
	// +1m0s pause 2m0s (20,80) w80
	// +3m0s canary capacity 100 (20,100) w80
	// +3m0s weight 100 (20,100) w100
	// +3m0s stable capacity 0 (0,100) w100
	// +3m0s canary capacity steady (0,100) w100
	// +3m0s Succeeded (0,100) w100
	// total 3m0s, 11 hops, peak capacity 160
}

// ExampleBlueGreen provisions the whole canary, moves all traffic in one hop
// and scales the old side down.
func ExampleBlueGreen() {
	tl, err := strategy.Plan(strategy.BlueGreen{}, strategy.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl)
	// Output:
	// +0s deploy canary (100,0) w0
	// +0s canary capacity 100 (100,100) w0
	// +0s weight 100 (100,100) w100
	// +0s stable capacity 0 (0,100) w100
	// +0s canary capacity steady (0,100) w100
	// +0s Succeeded (0,100) w100
	// total 0s, 5 hops, peak capacity 200
}

// ExampleIncremental_Validate shows that every problem is reported at once,
// each with the path of its field.
func ExampleIncremental_Validate() {
	err := strategy.Incremental{}.Validate()
	fmt.Println(errors.Is(err, strategy.ErrInvalid))
	var invalid *strategy.InvalidError
	if errors.As(err, &invalid) {
		for _, fe := range invalid.Errors {
			fmt.Printf("%s: %s\n", fe.Field, fe.Detail)
		}
	}
	// Output:
	// true
	// incremental.stepPercent: must be between 1 and 100
	// incremental.interval: must be positive
	// incremental.maxSurgePercent: must be between 1 and 100
}

// ExampleState_Resume drives Step by hand, once a minute, with adapters that
// apply every hop at once. The rollout holds at weight 50 until Resume.
func ExampleState_Resume() {
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(50), strategy.PauseUntilResumed()},
		MaxSurgePercent: 100,
	}
	// observe plays adapters that apply every hop of d at once.
	observe := func(s *strategy.State, d strategy.Decision, now time.Time) {
		o := &s.Observed
		o.At.Time = now
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
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := strategy.NewState("v1", "v2")
	for i := range 10 {
		now := t0.Add(time.Duration(i) * time.Minute)
		if i == 4 {
			s = s.Resume(now)
			fmt.Println("+"+now.Sub(t0).String(), "Resume")
		}
		d := c.Step(s, now)
		s = d.State
		observe(&s, d, now)
		fmt.Printf("+%s %s %s requeue %s\n", now.Sub(t0), s.Phase, hops(d), d.RequeueAfter)
		if s.Phase.Terminal() {
			break
		}
	}
	// Output:
	// +0s Progressing [canary=50] requeue 100ms
	// +1m0s Progressing [weight=50] requeue 100ms
	// +2m0s Paused [stable=50] requeue 100ms
	// +3m0s Paused [] requeue 0s
	// +4m0s Resume
	// +4m0s Progressing [canary=100] requeue 100ms
	// +5m0s Progressing [weight=100] requeue 100ms
	// +6m0s Completing [stable=0 canary=steady] requeue 100ms
	// +7m0s Succeeded [] requeue 0s
}

// ExampleState_Abort aborts an incremental upgrade mid-way, at weight 60 with
// the stable side already scaled down to 40. The stable side is scaled back
// up before any traffic returns to it, hop by hop, within the surge budget.
func ExampleState_Abort() {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	observe := func(s *strategy.State, d strategy.Decision, now time.Time) {
		o := &s.Observed
		o.At.Time = now
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
	// A controller steps again after d.RequeueAfter: a first poll 100ms
	// after a hop (doubling up to the 2s poll interval while the hop is not
	// observed; here every hop is observed at once), the rest of the step
	// interval otherwise.
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := strategy.NewState("v1", "v2")
	now := t0
	for s.Desired.Weight != 60 || s.Desired.StableCapacity != 40 {
		d := inc.Step(s, now)
		s = d.State
		observe(&s, d, now)
		now = now.Add(d.RequeueAfter)
	}
	fmt.Printf("+%s %s (%d,%d) w%d\n", now.Sub(t0), s.Phase,
		s.Desired.StableCapacity, s.Desired.CanaryCapacity, s.Desired.Weight)

	s = s.Abort("p99 latency", now)
	for !s.Phase.Terminal() {
		d := inc.Step(s, now)
		s = d.State
		observe(&s, d, now)
		fmt.Printf("+%s %s %s -> (%d,%d) w%d\n", now.Sub(t0), s.Phase, hops(d),
			s.Desired.StableCapacity, s.Desired.CanaryCapacity, s.Desired.Weight)
		now = now.Add(d.RequeueAfter)
	}
	fmt.Println("reason:", s.Aborted.Reason)
	// Output:
	// +5m0.8s Progressing (40,60) w60
	// +5m0.8s Aborting [stable=70] -> (70,60) w60
	// +5m0.9s Aborting [weight=30] -> (70,60) w30
	// +5m1s Aborting [canary=30] -> (70,30) w30
	// +5m1.1s Aborting [stable=100] -> (100,30) w30
	// +5m1.2s Aborting [weight=0] -> (100,30) w0
	// +5m1.3s Aborting [canary=0] -> (100,0) w0
	// +5m1.4s Aborted [] -> (100,0) w0
	// reason: p99 latency
}

// hops renders the hops of a decision.
func hops(d strategy.Decision) string {
	var h []string
	if d.StableCapacity.Set {
		h = append(h, fmt.Sprintf("stable=%d", d.StableCapacity.Value))
	}
	if d.CanaryCapacity.Set {
		if d.CanaryCapacity.Steady {
			h = append(h, "canary=steady")
		} else {
			h = append(h, fmt.Sprintf("canary=%d", d.CanaryCapacity.Value))
		}
	}
	if d.Weight.Set {
		h = append(h, fmt.Sprintf("weight=%d", d.Weight.Value))
	}
	return "[" + strings.Join(h, " ") + "]"
}

// ExampleState_Retarget starts a brand-new object: its zero state adopts the
// revision the spec names (nothing is rolled out), and a later revision
// starts a rollout from it.
func ExampleState_Retarget() {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	inc := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 50}

	var s strategy.State // a new object's status
	s = s.Retarget("v1", now)
	fmt.Println("unobserved:", s.Unobserved, "idle:", s.Idle())
	// The Runner observes the world into s.Observed; here the sides report
	// all traffic on side A, which runs v1.
	s.Observed = strategy.Observation{At: strategy.Micro(now), WeightApplied: true, Revisions: true,
		Stable: strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true, Revision: "v1", Updated: true},
		Canary: strategy.SideObservation{Settled: true}}
	d := inc.Step(s, now)
	fmt.Println("adopted, idle:", d.State.Idle(), "on side", d.State.StableSide, "hops:", d.HasHops())

	s = d.State.Retarget("v2", now)
	tl, err := strategy.Plan(inc, strategy.PlanOptions{Start: now, State: &s})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl.Capacities(), "in", tl.Duration)
	fmt.Println("stable now", tl.Final.StableRevision)
	// Output:
	// unobserved: true idle: false
	// adopted, idle: true on side A hops: false
	// (100,0) -> (100,50) -> (50,50) -> (50,100) -> (0,100) in 1m0s
	// stable now v2
}

// ExampleState_Validate: a corrupt state read back from storage is refused,
// field by field, and Step asks for nothing.
func ExampleState_Validate() {
	var s strategy.State
	_ = json.Unmarshal([]byte(`{"stableRevision":"v1","canaryRevision":"v2","phase":"Bogus","desired":{"weight":500}}`), &s)
	err := s.Validate(strategy.CapacityManaged)
	fmt.Println(errors.Is(err, strategy.ErrInvalidState))
	var se *strategy.StateError
	if errors.As(err, &se) {
		for _, fe := range se.Errors {
			fmt.Println(fe.Field)
		}
	}
	d := strategy.BlueGreen{}.Step(s, time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	fmt.Println("hops:", d.HasHops())
	// Output:
	// true
	// phase
	// desired.weight
	// hops: false
}

// Linear is a strategy of a user's own: n equal weight steps, each held for
// a pause, built on Canary. Because Shared and Gates are part of the
// interface, the Runner and Plan treat it exactly as the strategies of this
// package.
type Linear struct {
	Steps     int32
	Hold      time.Duration
	MaxSurge  int32
	Shareable strategy.Options
}

func (l Linear) canary() strategy.Canary {
	c := strategy.Canary{MaxSurgePercent: l.MaxSurge, Options: l.Shareable}
	for i := int32(1); i < l.Steps; i++ {
		c.Steps = append(c.Steps, strategy.SetWeight(100*i/l.Steps), strategy.Pause(l.Hold))
	}
	return c
}

func (l Linear) Step(s strategy.State, now time.Time) strategy.Decision {
	return l.canary().Step(s, now)
}
func (l Linear) Shared() strategy.Options { return l.Shareable }
func (l Linear) Gates() []string          { return nil }

func (l Linear) Validate() error {
	if l.Steps < 1 || l.Steps > 100 {
		return fmt.Errorf("%w: linear.steps: %d: must be between 1 and 100", strategy.ErrInvalid, l.Steps)
	}
	return l.canary().Validate()
}

// ExampleStrategy plans a rollout with a strategy of the user's own.
func ExampleStrategy() {
	l := Linear{Steps: 4, Hold: time.Minute, MaxSurge: 25, Shareable: strategy.Options{Capacity: strategy.CapacityFixed}}
	tl, err := strategy.Plan(l, strategy.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tl.Duration, tl.Hops, "hops")
	for _, e := range tl.Entries {
		if strings.HasPrefix(e.What, "weight") {
			fmt.Print(e.What, "; ")
		}
	}
	fmt.Println()
	// Output:
	// 3m0s 5 hops
	// weight 25; weight 50; weight 75; weight 100;
}

// ExamplePlan_surgeCost compares what strategies cost before running one:
// with sides that take a second to become ready and a data plane that serves
// a route change half a second after it is written, Plan gives each
// rollout's duration, its ramp (first to last weight move) and the surge it
// spends, here in pod-seconds for Deployments of 10 replicas.
func ExamplePlan_surgeCost() {
	var steps []strategy.CanaryStep
	for w := int32(10); w <= 90; w += 10 {
		steps = append(steps, strategy.SetWeight(w), strategy.Pause(5*time.Second))
	}
	world := strategy.PlanOptions{ReadyDelay: time.Second, RouteDelay: 500 * time.Millisecond}
	for _, c := range []struct {
		name  string
		strat strategy.Strategy
	}{
		{"canary, 10% surge", strategy.Canary{Steps: steps, MaxSurgePercent: 10}},
		{"incremental 10% / 5s", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: 5 * time.Second}, MaxSurgePercent: 10}},
		{"blue-green", strategy.BlueGreen{}},
	} {
		tl, err := strategy.Plan(c.strat, world)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s, ramp %s, %.1f pod-seconds above full\n", c.name, tl.Duration, tl.Ramp, tl.SurgeCost.Seconds()*10)
	}
	// Output:
	// canary, 10% surge: 51s, ramp 49.5s, 15.0 pod-seconds above full
	// incremental 10% / 5s: 51s, ramp 49.5s, 15.0 pod-seconds above full
	// blue-green: 1.5s, ramp 0s, 15.0 pod-seconds above full
}
