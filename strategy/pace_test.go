package strategy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/strategy"
)

// TestStepIntervalPrepares: during an interval the stable side shrinks to the
// traffic of the weight in force at once, and the canary grows to what the
// next weight needs as late as the canary's observed pace allows: ready when
// the interval ends. Without a pace it grows as soon as it may; with a pace
// longer than what is left of the interval, at once.
func TestStepIntervalPrepares(t *testing.T) {
	// Weight 10 asked at t0 on (100,10), the interval ending at t3.
	s, _ := walk(t, incremental, strategy.NewState("v1", "v2"), t0, func(s *strategy.State) bool { return s.Desired.Weight == 10 })
	unapplied := s
	unapplied.Observed.WeightApplied = false
	if d := stepChecked(t, incremental, unapplied, t0); d.StableCapacity.Set {
		t.Fatalf("the stable side shrank before the weight was in force: %+v", hopsIn(d))
	}
	d := stepChecked(t, incremental, s, t0)
	if diff := cmp.Diff(hopsOf{Stable: set(90), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}, hopsIn(d)); diff != "" {
		t.Fatalf("the weight in force (-want +got):\n%s", diff)
	}
	shrunk := d.State
	observe(&shrunk, d, t0)
	paced := func(p time.Duration) strategy.State {
		s := shrunk
		s.Pace.CanarySettle = metav1.Duration{Duration: p}
		return s
	}
	waiting := func(d time.Duration) hopsOf { return hopsOf{RequeueAfter: d, Phase: strategy.PhaseProgressing} }
	grow := hopsOf{Canary: set(20), RequeueAfter: strategy.DefaultPollInterval, Phase: strategy.PhaseProgressing}
	for _, tc := range []struct {
		name string
		s    strategy.State
		now  time.Time
		want hopsOf
	}{
		{"a 5s pace: wait until 5s before the end", paced(5 * time.Second), t1, waiting(tick + 5*time.Second)},
		{"a nanosecond before", paced(5 * time.Second), t3.Add(-5*time.Second - time.Nanosecond), waiting(time.Nanosecond)},
		{"5s before the end: grow", paced(5 * time.Second), t3.Add(-5 * time.Second), grow},
		{"the end: grow", paced(5 * time.Second), t3, grow},
		{"ready at once: grow at the end", paced(time.Microsecond), t3.Add(-time.Microsecond), waiting(time.Microsecond)},
		{"ready at once, the end", paced(time.Microsecond), t3, grow},
		{"no pace yet: grow at once", paced(0), t0, grow},
		{"a pace longer than the interval: grow at once", paced(time.Hour), t0, grow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := stepChecked(t, incremental, tc.s, tc.now)
			if diff := cmp.Diff(tc.want, hopsIn(d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPaceLearned: a scale-up's time to ready is recorded from the hop to the
// first observation of its side settled at the capacity asked, and the
// timing starts again at the next scale-up.
func TestPaceLearned(t *testing.T) {
	s := strategy.NewState("v1", "v2")
	d := stepChecked(t, incremental, s, t0)
	if diff := cmp.Diff(set(10), d.CanaryCapacity); diff != "" {
		t.Fatalf("first hop (-want +got):\n%s", diff)
	}
	s = d.State
	if want := mt(t0); !s.Pace.CanaryAskedAt.Equal(&want) {
		t.Fatalf("CanaryAskedAt %v, want %v", s.Pace.CanaryAskedAt, want)
	}
	// Still starting 2 s later: nothing learned.
	s.Observed.Canary = strategy.SideObservation{Capacity: 10, Ready: 0}
	s.Observed.At = mt(t0.Add(2 * time.Second))
	d = stepChecked(t, incremental, s, t0.Add(2*time.Second))
	if d.State.Pace.CanarySettle.Duration != 0 {
		t.Fatalf("pace learned from an unsettled side: %v", d.State.Pace.CanarySettle)
	}
	// Observed settled 3.5 s after the hop, stepped a little later.
	s = d.State
	s.Observed.Canary = strategy.SideObservation{Capacity: 10, Ready: 10, Settled: true}
	s.Observed.At = mt(t0.Add(3500 * time.Millisecond))
	d = stepChecked(t, incremental, s, t0.Add(4*time.Second))
	if got, want := d.State.Pace.CanarySettle.Duration, 3500*time.Millisecond; got != want {
		t.Fatalf("CanaryReady %v, want %v", got, want)
	}
	if !d.State.Pace.CanaryAskedAt.IsZero() {
		t.Fatalf("still timing a scale-up that is done: %v", d.State.Pace.CanaryAskedAt)
	}
	if !d.Weight.Set || strategy.Changed(&s, &d.State) == false {
		t.Fatalf("want the weight hop: %+v", hopsIn(d))
	}
	// Pace alone is no change worth storing.
	a, b := d.State, d.State
	b.Pace = strategy.Pace{}
	if strategy.Changed(&a, &b) {
		t.Error("Changed reports a state that differs only in its pace")
	}
}

// TestOverlapReachesTheMinimum: with sides that become ready a fixed delay
// after a scale-up and a data plane that serves a route change a fixed delay
// after it is written, every wait at least as long as the ready delay, a
// rollout whose weight hops each fit the surge budget moves its weight
// exactly as a rollout with instant capacity would (its ramp is its waits
// plus one route delay per weight hop after the first) and spends exactly
// one ready delay plus one route delay of surge per weight hop: each hop's
// share of full capacity, and the shares add up to 100, so the whole
// rollout spends (ready delay + route delay) of full capacity, and at most
// one wait of one hop's share more before the stable side's pace is
// observed. The canary is never asked for more than the next weight hop
// needs. The surge
// asked for never exceeds MaxSurgePercent.
func TestOverlapReachesTheMinimum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ms := func(label string, lo, hi int64) time.Duration {
			return time.Duration(rapid.Int64Range(lo, hi).Draw(t, label)) * time.Millisecond
		}
		ready, route := ms("readyMs", 0, 5000), ms("routeMs", 0, 2000)
		surge := rapid.Int32Range(1, 100).Draw(t, "surge")
		var strat strategy.Strategy
		var waits, longest time.Duration
		var hops int
		var widest int32
		if rapid.Bool().Draw(t, "canary") {
			if surge < 4 {
				surge = 4
			}
			var steps []strategy.CanaryStep
			w := int32(0)
			for w < 100 {
				// At most 64 steps: hops of at least 4 where the budget allows.
				next := min(100, w+rapid.Int32Range(min(surge, 4), surge).Draw(t, "step"))
				widest, w = max(widest, next-w), next
				steps = append(steps, strategy.SetWeight(w))
				hops++
				if w < 100 { // a pause at 100 would hold the stable side for a walk back
					p := ready + ms("pauseMs", 1, 10000)
					steps = append(steps, strategy.Pause(p))
					waits += p
					longest = max(longest, p)
				}
			}
			strat = strategy.Canary{Steps: steps, MaxSurgePercent: surge}
		} else {
			step := rapid.Int32Range(1, surge).Draw(t, "step")
			// Longer than the route delay too: an interval counts from the
			// weight in force only when it lands within the interval (see
			// State.WeightAppliedAt).
			interval := max(ready, route) + ms("intervalMs", 1, 10000)
			hops = int((100 + step - 1) / step)
			waits = time.Duration(hops-1) * interval
			widest, longest = step, interval
			strat = strategy.Incremental{StepPercent: step, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: surge}
		}
		tl, err := strategy.Plan(strat, strategy.PlanOptions{Start: t0, ReadyDelay: ready, RouteDelay: route})
		if err != nil {
			t.Fatal(err)
		}
		if want := waits + time.Duration(hops-1)*route; tl.Ramp != want {
			t.Fatalf("ramp %v, want %v (waits %v, %d weight hops):\n%s", tl.Ramp, want, waits, hops, tl)
		}
		// Before the stable side's pace is observed, its first shrink may
		// wait for the canary's growth, in one decision with it: at most
		// one wait of one hop's share more.
		if least, most := ready+route, ready+route+longest*time.Duration(widest)/100; tl.SurgeCost < least || tl.SurgeCost > most {
			t.Fatalf("surge cost %v, want %v (at most %v):\n%s", tl.SurgeCost, least, most, tl)
		}
		for _, e := range tl.Entries {
			// The canary holds what the weight in force needs, and at most
			// the next weight hop's share more.
			if a := e.Allocation; a.CanaryCapacity-a.Weight > widest {
				t.Fatalf("+%s %s: canary capacity %d at weight %d, more than one hop (%d) ahead:\n%s", e.Offset, e.What, a.CanaryCapacity, a.Weight, widest, tl)
			}
		}
		if tl.PeakCapacity > 100+surge {
			t.Fatalf("peak capacity %d above 100 + %d", tl.PeakCapacity, surge)
		}
	})
}
