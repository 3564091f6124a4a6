package strategy_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// populated returns a State with every field set to a non-zero value that a
// JSON round trip preserves (times in UTC microseconds, condition times in
// seconds).
// extras sets every field of TrafficExtras, each pointer and slice its own.
func extras(pct int32) strategy.TrafficExtras {
	return strategy.TrafficExtras{
		HeaderRoute: &strategy.HeaderRoute{
			Matches:         []strategy.HeaderMatch{{Type: strategy.HeaderCookie, Name: "beta", Value: "1"}},
			ExpectedPercent: &pct,
		},
		MirrorPercent: pct,
		Sticky: &strategy.Sticky{Run: "0badf00d", Grid: []int32{pct, 50, 100}, Cookie: strategy.SessionAffinity{
			CookieName: "s", MaxAge: &metav1.Duration{Duration: time.Hour}, Path: "/", Domain: "example.com", Secure: true, SameSite: "Strict",
		}},
	}
}

func populated() strategy.State {
	at := func(n int) metav1.MicroTime {
		return mt(t0.Add(time.Duration(n)*time.Second + 123456*time.Microsecond))
	}
	return strategy.State{
		StableRevision:  "v1",
		CanaryRevision:  "v2",
		PendingRevision: "v3",
		Unobserved:      true,
		StableSide:      strategy.SideB,
		Phase:           strategy.PhaseAborting,
		StepIndex:       2,
		StepsHash:       "0123456789abcdef",
		Desired:         strategy.Allocation{Weight: 20, StableCapacity: 90, CanaryCapacity: 30, CanaryRevision: "v2"},
		DesiredExtras:   extras(5),
		Observed: strategy.Observation{
			Extras:        extras(7),
			At:            at(1),
			Weight:        10,
			WeightApplied: true,
			WeightInvalid: true,
			Error:         "router: read weights: not found",
			Claimed:       true,
			Revisions:     true,
			Stable:        strategy.SideObservation{Capacity: 90, Ready: 88, Settled: true, Revision: "v1", Updated: true},
			Canary:        strategy.SideObservation{Capacity: 30, Ready: 33, Settled: true, Revision: "v2", Updated: true},
			Health:        strategy.HealthUnhealthy,
			HealthMessage: "5xx",
			Gates: []strategy.GateResult{
				{Name: "latency", Verdict: strategy.VerdictPass, Message: "p99 fine", At: at(2)},
				{Name: "errors", Verdict: strategy.VerdictInconclusive, Message: "few samples", At: at(3)},
			},
		},
		StartedAt: at(4),
		HopAt:     at(5),
		Pace: strategy.Pace{StableSettle: metav1.Duration{Duration: time.Second}, CanarySettle: metav1.Duration{Duration: 2 * time.Second},
			StableAskedAt: at(17), CanaryAskedAt: at(18)},
		WeightChangedAt:      at(6),
		WeightAppliedAt:      at(15),
		WeightPendingAt:      at(16),
		StepStartedAt:        at(7),
		ReachedAt:            at(8),
		FinishedAt:           at(9),
		AwaitingResume:       true,
		PauseReason:          strategy.ReasonManualPause,
		PausedAt:             at(10),
		PromoteRequested:     true,
		PromoteFullRequested: true,
		Resumed:              true,
		SteadyRequested:      true,
		Aborted:              &strategy.AbortStatus{Reason: "p99", At: at(11), Emergency: true},
		ResumeWeight:         40,
		UnhealthyCount:       2,
		HealthCheckedAt:      at(12),
		Gate:                 "errors",
		Message:              "walking",
		Handled:              strategy.Requests{Abort: "a1", Retry: "r1", Promote: "p1", PromoteFull: "f1", Resume: "s1"},
		Ignored:              strategy.Requests{Abort: "a0", Retry: "r0", Promote: "p0", PromoteFull: "f0", Resume: "s0"},
		LastCommandAt:        at(13),
		FailingSince:         at(14),
		Conditions: []metav1.Condition{
			{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, ObservedGeneration: 3,
				LastTransitionTime: metav1.NewTime(t1), Reason: strategy.ReasonAborting, Message: "walking"},
			{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, ObservedGeneration: 3,
				LastTransitionTime: metav1.NewTime(t2), Reason: strategy.ReasonAborted, Message: "p99"},
		},
	}
}

// zeroFields lists the fields of v (recursively, through structs, pointers
// and slice elements) that hold their zero value, so that a field added to
// State later cannot go untested.
func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		var out []string
		for i := range v.Len() {
			out = append(out, zeroFields(v.Index(i), path+"[i]")...)
		}
		return out
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[metav1.MicroTime]() || v.Type() == reflect.TypeFor[metav1.Time]() {
			if v.IsZero() {
				return []string{path}
			}
			return nil
		}
		var out []string
		for i := range v.NumField() {
			out = append(out, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}

func TestPopulatedIsComplete(t *testing.T) {
	if z := zeroFields(reflect.ValueOf(populated()), "State"); len(z) != 0 {
		t.Errorf("populated() leaves fields zero: %v", z)
	}
}

func TestDeepCopy(t *testing.T) {
	orig := populated()
	cp := orig.DeepCopy()
	if diff := cmp.Diff(orig, *cp); diff != "" {
		t.Fatalf("DeepCopy differs (-orig +copy):\n%s", diff)
	}
	if !reflect.DeepEqual(orig, *cp) {
		t.Fatalf("DeepCopy not reflect.DeepEqual")
	}
	// Mutate every slice element and pointer target of the copy.
	cp.Observed.Gates[0].Name = "changed"
	cp.Observed.Gates[0].At = mt(t9)
	cp.Observed.Gates[1].Verdict = strategy.VerdictFail
	cp.Observed.Gates = append(cp.Observed.Gates, strategy.GateResult{Name: "new"})
	cp.Aborted.Reason = "changed"
	cp.Aborted.At = mt(t9)
	cp.Aborted.Emergency = false
	cp.Conditions[0].Reason = "Changed"
	cp.Conditions[0].LastTransitionTime = metav1.NewTime(t9)
	cp.Conditions[1].Status = metav1.ConditionFalse
	cp.Conditions = append(cp.Conditions, metav1.Condition{Type: "New"})
	for _, p := range []*metav1.MicroTime{&cp.StartedAt, &cp.HopAt, &cp.WeightChangedAt, &cp.WeightAppliedAt, &cp.WeightPendingAt, &cp.StepStartedAt, &cp.ReachedAt,
		&cp.FinishedAt, &cp.PausedAt, &cp.HealthCheckedAt, &cp.LastCommandAt, &cp.Observed.At} {
		*p = mt(t9)
	}
	if diff := cmp.Diff(populated(), orig); diff != "" {
		t.Errorf("mutating the copy changed the original (-want +got):\n%s", diff)
	}
	// And the other way round.
	cp = orig.DeepCopy()
	orig.Observed.Gates[0].Name = "changed"
	orig.Aborted.Reason = "changed"
	orig.Conditions[0].Reason = "Changed"
	if diff := cmp.Diff(populated(), *cp); diff != "" {
		t.Errorf("mutating the original changed the copy (-want +got):\n%s", diff)
	}

	// DeepCopyInto overwrites every field of a used target.
	var into strategy.State = populated()
	into.Observed.Gates = nil
	into.Aborted = nil
	src := populated()
	src.DeepCopyInto(&into)
	if diff := cmp.Diff(src, into); diff != "" {
		t.Errorf("DeepCopyInto (-want +got):\n%s", diff)
	}
	into.Aborted.Reason = "x"
	if src.Aborted.Reason != "p99" {
		t.Errorf("DeepCopyInto shares Aborted")
	}

	// nil in, nil out; empty slices stay as they are.
	if (*strategy.State)(nil).DeepCopy() != nil || (*strategy.Observation)(nil).DeepCopy() != nil || (*strategy.AbortStatus)(nil).DeepCopy() != nil {
		t.Errorf("DeepCopy of nil is not nil")
	}
	empty := strategy.State{Conditions: []metav1.Condition{}, Observed: strategy.Observation{Gates: []strategy.GateResult{}}}
	if diff := cmp.Diff(empty, *empty.DeepCopy()); diff != "" {
		t.Errorf("empty slices (-want +got):\n%s", diff)
	}
	if got := *empty.DeepCopy(); got.Conditions == nil || got.Observed.Gates == nil {
		t.Errorf("DeepCopy turned empty slices into nil")
	}
}

func roundTrip(t *testing.T, s strategy.State) strategy.State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out strategy.State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out
}

func TestJSONRoundTrip(t *testing.T) {
	states := map[string]strategy.State{
		"populated": populated(),
		"new":       strategy.NewState("v1", "v2"),
		"zero":      {},
	}
	// Every state a canary with a gate and an abort passes through.
	c := strategy.Canary{
		Steps:           []strategy.CanaryStep{strategy.SetWeight(20), strategy.Gate("g"), strategy.Pause(time.Minute), strategy.SetWeight(60)},
		MaxSurgePercent: 30,
		Options:         strategy.Options{ScaleDownDelay: metav1.Duration{Duration: time.Minute}},
	}
	s := strategy.NewState("v1", "v2")
	now := t0.Add(987654321 * time.Nanosecond) // not on a microsecond
	for i := 0; !s.Phase.Terminal(); i++ {
		if i == 100 {
			t.Fatal("no end")
		}
		s.Observed.Gates = []strategy.GateResult{{Name: "g", Verdict: strategy.VerdictPass, At: mt(now)}}
		d := c.Step(s, now)
		s = d.State
		states["canary step "+string(rune('a'+i%26))+string(rune('a'+i/26))] = *s.DeepCopy()
		observe(&s, d, now)
		if !d.HasHops() {
			now = now.Add(d.RequeueAfter)
		}
	}
	for name, s := range states {
		got := roundTrip(t, s)
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("%s: JSON round trip (-want +got):\n%s", name, diff)
		}
		// And a second round trip is byte-stable.
		b1, _ := json.Marshal(s)
		b2, _ := json.Marshal(got)
		if string(b1) != string(b2) {
			t.Errorf("%s: marshal differs after a round trip:\n%s\n%s", name, b1, b2)
		}
	}
}
