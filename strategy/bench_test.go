package strategy_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// benchCase is a strategy and a mid-walk state on which Step emits a hop
// and finds its conditions already in place.
type benchCase struct {
	name  string
	strat strategy.Strategy
	s     strategy.State
	now   time.Time
	want  func(d strategy.Decision) bool // the hop expected
}

func benchCases(t tb) []benchCase {
	t.Helper()
	in := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	// Weight 40 at (60,50), the canary grown for the next weight, the
	// interval over: the next hop is weight 50.
	inc, _ := walk(t, in, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool {
		return s.Desired.Weight == 40 && s.Desired.CanaryCapacity == 50
	})
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(time.Minute), strategy.SetWeight(80), strategy.Pause(time.Minute)},
		MaxSurgePercent: 25,
	}
	// Walking from 20 to 80 within a 25 surge, at weight 45 on (80,45): the
	// next hop scales the stable side down to 55.
	can, _ := walk(t, c, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.Desired.Weight == 45 })
	bg := strategy.BlueGreen{}
	// The whole canary provisioned: the next hop moves all traffic.
	blue, _ := walk(t, bg, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.Desired.CanaryCapacity == 100 })
	return []benchCase{
		{"Incremental", in, inc, t0.Add(time.Hour), func(d strategy.Decision) bool { return d.Weight == set(50) }},
		{"Canary", c, can, t0.Add(time.Hour), func(d strategy.Decision) bool { return d.StableCapacity == set(55) }},
		{"BlueGreen", bg, blue, t0.Add(time.Hour), func(d strategy.Decision) bool { return d.Weight == set(100) }},
	}
}

func benchmarkStep(b *testing.B, name string) {
	for _, bc := range benchCases(b) {
		if bc.name != name {
			continue
		}
		if d := bc.strat.Step(bc.s, bc.now); !bc.want(d) {
			b.Fatalf("unexpected decision %+v", hopsIn(d))
		}
		b.ReportAllocs()
		for b.Loop() {
			sink = bc.strat.Step(bc.s, bc.now)
		}
		return
	}
	b.Fatalf("no case %s", name)
}

var sink strategy.Decision

func BenchmarkStepIncremental(b *testing.B) { benchmarkStep(b, "Incremental") }
func BenchmarkStepCanary(b *testing.B)      { benchmarkStep(b, "Canary") }
func BenchmarkStepBlueGreen(b *testing.B)   { benchmarkStep(b, "BlueGreen") }

// TestStepAllocs: a Step that emits a hop on a state whose conditions are in
// place allocates nothing.
func TestStepAllocs(t *testing.T) {
	for _, bc := range benchCases(t) {
		t.Run(bc.name, func(t *testing.T) {
			d := bc.strat.Step(bc.s, bc.now)
			if !bc.want(d) {
				t.Fatalf("unexpected decision %+v", hopsIn(d))
			}
			if n := len(d.State.Conditions); n != 4 {
				t.Fatalf("%d conditions, want the 4 in place", n)
			}
			if allocs := testing.AllocsPerRun(100, func() { sink = bc.strat.Step(bc.s, bc.now) }); allocs != 0 {
				t.Errorf("Step allocates %v times, want 0", allocs)
			}
		})
	}
}

// planBench is an Incremental plan of 152 hops: a deploy, then for each of
// the 50 weights a canary hop before it and a stable hop after it (the
// last being the stable side's drain at the end), and the canary's return
// to its steady state.
var planBench = strategy.Incremental{StepPercent: 2, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 4}

func TestPlanBenchHops(t *testing.T) {
	tl, err := strategy.Plan(planBench, strategy.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Hops != 152 {
		t.Errorf("%d hops, want 152", tl.Hops)
	}
}

func BenchmarkPlan(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		tl, err := strategy.Plan(planBench, strategy.PlanOptions{})
		if err != nil || tl.Hops != 152 {
			b.Fatalf("%d hops, %v", tl.Hops, err)
		}
	}
}
