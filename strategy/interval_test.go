package strategy_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// fixedSteps is an Incremental strategy on fixed capacity: only the route
// moves, 10 percent every 30 s, so the tests below see weight hops alone.
var fixedSteps = strategy.Incremental{
	StepPercent: 10,
	Interval:    metav1.Duration{Duration: 3 * tick},
	Options:     strategy.Options{Capacity: strategy.CapacityFixed},
}

// routeSeen is an observation at instant at of a route holding weight
// (accepted by the data plane if applied) in front of two fully
// provisioned sides.
func routeSeen(at time.Time, weight int32, applied bool) strategy.Observation {
	full := strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true}
	return strategy.Observation{At: mt(at), Weight: weight, WeightApplied: applied, Stable: full, Canary: full}
}

// firstHop returns fixedSteps's state right after it decided weight 10 at
// t0, the route still at 0.
func firstHop(t *testing.T) strategy.State {
	t.Helper()
	s := strategy.NewState("v1", "v2")
	for range 10 {
		s.Observed = routeSeen(t0, 0, true)
		d := stepChecked(t, fixedSteps, s, t0)
		s = d.State
		if d.Weight.Set {
			if d.Weight.Value != 10 || !s.WeightChangedAt.Equal(ptr(mt(t0))) || !s.WeightAppliedAt.IsZero() {
				t.Fatalf("first hop: weight %d, weightChangedAt %v, weightAppliedAt %v; want 10, %v, zero",
					d.Weight.Value, s.WeightChangedAt, s.WeightAppliedAt, t0)
			}
			return s
		}
	}
	t.Fatalf("no weight hop at t0: %+v", s)
	return s
}

// reconcile is one Step of the tables below: at t0+at the route is seen at
// weight (accepted if applied), after a command if one is named.
type reconcile struct {
	at      time.Duration
	weight  int32
	applied bool
	command string // "", "promote" or "abort"
}

// outcome is what a table compares of each Step: the weight asked for (-1:
// none), the wait for the step interval (0: not waiting for it) and the
// recorded instant the weight was seen in force, as an offset from t0 (-1:
// none).
type outcome struct {
	Weight    int32
	Interval  time.Duration
	AppliedAt time.Duration
}

// TestIntervalCountsFromTheWorld: the Incremental interval counts from the
// instant the weight of the previous hop was first observed in force, not
// from the instant the hop was decided, so a slow write cannot bring two
// weight moves closer than the interval; a promote and an abort skip the
// wait; a caller that does not keep the recorded instant (it stores the
// state only when Changed says so and reads it back each reconcile) counts
// from the decision, never later than twice the interval after it.
func TestIntervalCountsFromTheWorld(t *testing.T) {
	const none = -1
	s := 1 * time.Second
	tests := []struct {
		name string
		// forgetful: the caller keeps only the states Changed tells it to
		// store, as an operator that reads its status back does.
		forgetful bool
		steps     []reconcile
		want      []outcome
	}{{
		name: "a write observed applied at once: the interval counts from then",
		steps: []reconcile{
			{at: 0, weight: 10, applied: true},
			{at: 30 * s, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: none, Interval: 30 * s, AppliedAt: 0},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name: "a slow write: the next hop waits the interval from its first observation in force",
		steps: []reconcile{
			{at: 2 * s, weight: 0, applied: true},   // the write is still on its way: asked again
			{at: 8 * s, weight: 10, applied: false}, // landed, not accepted yet
			{at: 9 * s, weight: 10, applied: true},  // in force
			{at: 30 * s, weight: 10, applied: true}, // the decision's interval is over, the world's is not
			{at: 39*s - time.Microsecond, weight: 10, applied: true},
			{at: 39 * s, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: 10, AppliedAt: none},
			{Weight: none, AppliedAt: none},
			{Weight: none, Interval: 30 * s, AppliedAt: 9 * s},
			{Weight: none, Interval: 9 * s, AppliedAt: 9 * s},
			{Weight: none, Interval: time.Microsecond, AppliedAt: 9 * s},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name: "first seen in force after the interval: counted from the decision, moves at once",
		steps: []reconcile{
			{at: 10 * s, weight: 0, applied: true}, // asked again
			{at: 45 * s, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: 10, AppliedAt: none},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name: "seen pending within the interval, in force only after it: counted from the world",
		steps: []reconcile{
			{at: 25 * s, weight: 10, applied: false}, // landed, not accepted yet
			{at: 40 * s, weight: 10, applied: true},
			{at: 70*s - time.Microsecond, weight: 10, applied: true},
			{at: 70 * s, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: none, AppliedAt: none},
			{Weight: none, Interval: 30 * s, AppliedAt: 40 * s},
			{Weight: none, Interval: time.Microsecond, AppliedAt: 40 * s},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name:      "a forgetful caller loses the pending observation: counted from the decision",
		forgetful: true,
		steps: []reconcile{
			{at: 25 * s, weight: 10, applied: false},
			{at: 40 * s, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: none, AppliedAt: none},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name: "a promote skips the interval counted from the world",
		steps: []reconcile{
			{at: 9 * s, weight: 10, applied: true},
			{at: 12 * s, weight: 10, applied: true, command: "promote"},
		},
		want: []outcome{
			{Weight: none, Interval: 30 * s, AppliedAt: 9 * s},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name: "an abort walks back at once",
		steps: []reconcile{
			{at: 9 * s, weight: 10, applied: true},
			{at: 12 * s, weight: 10, applied: true, command: "abort"},
		},
		want: []outcome{
			{Weight: none, Interval: 30 * s, AppliedAt: 9 * s},
			{Weight: 0, AppliedAt: none},
		},
	}, {
		name:      "a forgetful caller waits no longer than the decision's interval once it is over",
		forgetful: true,
		steps: []reconcile{
			{at: 9 * s, weight: 10, applied: true},  // recorded, not stored
			{at: 20 * s, weight: 10, applied: true}, // recorded again, later
			{at: 30 * s, weight: 10, applied: true}, // the decision's interval is over: counted from it
		},
		want: []outcome{
			{Weight: none, Interval: 30 * s, AppliedAt: 9 * s},
			{Weight: none, Interval: 30 * s, AppliedAt: 20 * s},
			{Weight: 20, AppliedAt: none},
		},
	}, {
		name:      "a forgetful caller that reconciles only when asked moves within twice the interval",
		forgetful: true,
		steps: []reconcile{
			{at: 30*s - time.Microsecond, weight: 10, applied: true},
			{at: 60*s - time.Microsecond, weight: 10, applied: true},
		},
		want: []outcome{
			{Weight: none, Interval: 30 * s, AppliedAt: 30*s - time.Microsecond},
			{Weight: 20, AppliedAt: none},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := firstHop(t)
			stored := st
			var got []outcome
			for _, r := range tt.steps {
				now := t0.Add(r.at)
				if tt.forgetful {
					st = stored
				}
				switch r.command {
				case "promote":
					st = st.Promote(now)
				case "abort":
					st = st.Abort("stop", now)
				}
				st.Observed = routeSeen(now, r.weight, r.applied)
				d := stepChecked(t, fixedSteps, st, now)
				o := outcome{Weight: none, AppliedAt: none}
				if d.Weight.Set {
					o.Weight = d.Weight.Value
				}
				if d.State.Message == "waiting for the step interval" {
					o.Interval = d.WatchedRequeueAfter
				}
				if a := d.State.WeightAppliedAt; !a.IsZero() {
					o.AppliedAt = a.Sub(t0)
				}
				got = append(got, o)
				if strategy.Changed(&stored, &d.State) || !tt.forgetful {
					stored = d.State
				}
				st = d.State
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestWeightAppliedAtRecorded: the instant recorded is the observation's,
// clamped to [weightChangedAt, now]; an instant stored out of range is
// ignored; the field is volatile for Changed and survives a JSON round
// trip; NextWeightHopAt reports where the interval ends.
func TestWeightAppliedAtRecorded(t *testing.T) {
	s := 1 * time.Second
	hop := firstHop(t)
	tests := []struct {
		name   string
		obsAt  metav1.MicroTime // the observation's instant
		now    time.Time
		stored metav1.MicroTime // WeightAppliedAt in the state stepped
		want   metav1.MicroTime
		next   time.Time // NextWeightHopAt after the Step
	}{
		{"the observation's instant", mt(t0.Add(5 * s)), t0.Add(7 * s), metav1.MicroTime{}, mt(t0.Add(5 * s)), t0.Add(35 * s)},
		{"no instant: now", metav1.MicroTime{}, t0.Add(7 * s), metav1.MicroTime{}, mt(t0.Add(7 * s)), t0.Add(37 * s)},
		{"before the hop: the hop's", mt(t0.Add(-5 * s)), t0.Add(7 * s), metav1.MicroTime{}, mt(t0), t0.Add(30 * s)},
		{"after now: now", mt(t0.Add(20 * s)), t0.Add(7 * s), metav1.MicroTime{}, mt(t0.Add(7 * s)), t0.Add(37 * s)},
		{"already recorded: kept", mt(t0.Add(6 * s)), t0.Add(7 * s), mt(t0.Add(3 * s)), mt(t0.Add(3 * s)), t0.Add(33 * s)},
		{"stored from an earlier hop: recorded anew", mt(t0.Add(6 * s)), t0.Add(7 * s), mt(t0.Add(-time.Minute)), mt(t0.Add(6 * s)), t0.Add(36 * s)},
		{"recorded late: kept", mt(t0.Add(40 * s)), t0.Add(40 * s), mt(t0.Add(35 * s)), mt(t0.Add(35 * s)), t0.Add(65 * s)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := hop
			in.WeightAppliedAt = tt.stored
			in.Observed = routeSeen(t0, 10, true)
			in.Observed.At = tt.obsAt
			d := stepChecked(t, fixedSteps, in, tt.now)
			if diff := cmp.Diff(tt.want, d.State.WeightAppliedAt); diff != "" {
				t.Errorf("WeightAppliedAt (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.next, d.State.NextWeightHopAt(fixedSteps.Interval.Duration)); diff != "" {
				t.Errorf("NextWeightHopAt (-want +got):\n%s", diff)
			}
		})
	}

	// Volatile: recording it alone is no change to store; a JSON round
	// trip keeps it.
	in := hop
	in.Observed = routeSeen(t0.Add(5*s), 10, true)
	d := stepChecked(t, fixedSteps, in, t0.Add(5*s))
	if d.State.WeightAppliedAt.IsZero() {
		t.Fatalf("not recorded: %+v", d.State)
	}
	if strategy.Changed(&hop, &d.State) {
		t.Errorf("Changed reports recording weightAppliedAt alone as a change: (-before +after)\n%s", cmp.Diff(hop, d.State))
	}
	b, err := json.Marshal(d.State)
	if err != nil {
		t.Fatal(err)
	}
	var back strategy.State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.State.WeightAppliedAt, back.WeightAppliedAt); diff != "" {
		t.Errorf("after a JSON round trip (-want +got):\n%s", diff)
	}

	// Strategies without an interval record nothing.
	bg := strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed}}
	in.Observed = routeSeen(t0.Add(5*s), 10, true)
	if d := bg.Step(in, t0.Add(5*s)); !d.State.WeightAppliedAt.IsZero() {
		t.Errorf("BlueGreen recorded weightAppliedAt %v", d.State.WeightAppliedAt)
	}

	// No weight hop yet: no next hop instant.
	fresh := strategy.NewState("v1", "v2")
	if got := fresh.NextWeightHopAt(time.Minute); !got.IsZero() {
		t.Errorf("NextWeightHopAt of a new state = %v, want zero", got)
	}
}
