package strategy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

func TestChanged(t *testing.T) {
	base := NewState("v1", "v2")
	base.Observed.At = micro(t0)
	base.HealthCheckedAt = micro(t0)
	base.Observed.Gates = []GateResult{{Name: "errors", Verdict: VerdictPending, At: micro(t0)}}
	later := micro(t0.Add(time.Second))
	tests := []struct {
		name string
		edit func(s *State)
		want bool
	}{
		{"nothing", func(*State) {}, false},
		{"observation instant", func(s *State) { s.Observed.At = later }, false},
		{"health checked", func(s *State) { s.HealthCheckedAt = later }, false},
		{"gate verdict instant", func(s *State) {
			s.Observed.Gates = []GateResult{{Name: "errors", Verdict: VerdictPending, At: later}}
		}, false},
		{"gate verdict", func(s *State) {
			s.Observed.Gates = []GateResult{{Name: "errors", Verdict: VerdictPass, At: later}}
		}, false},
		{"observed weight", func(s *State) { s.Observed.Weight = 10 }, false},
		{"observed revision", func(s *State) { s.Observed.Canary.Revision = "v2" }, false},
		{"message", func(s *State) { s.Message = "waiting" }, false},
		{"unhealthy count", func(s *State) { s.UnhealthyCount = 1 }, true},
		{"gate asked", func(s *State) { s.Gate = "errors" }, true},
		{"condition", func(s *State) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue})
		}, true},
		{"failing since", func(s *State) { s.FailingSince = later }, true},
		{"hop", func(s *State) { s.Desired.CanaryCapacity = 30; s.HopAt = later }, true},
		{"phase", func(s *State) { s.Phase = PhaseProgressing }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := *base.DeepCopy()
			tt.edit(&next)
			if got := Changed(&base, &next); got != tt.want {
				t.Errorf("Changed = %v, want %v", got, tt.want)
			}
			if base.Observed.At != micro(t0) || base.Observed.Gates[0].At != micro(t0) {
				t.Fatal("Changed modified its argument")
			}
		})
	}
	if Changed(nil, &State{}) || !Changed(nil, &base) {
		t.Error("nil is the zero State")
	}
}

// TestChangedProperty: Changed ignores exactly the volatile fields. Any
// change to the observation, the message or HealthCheckedAt is not a
// change; any change to a counted field is; and Changed is symmetric.
func TestChangedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := NewState("v1", "v2")
		a.Phase = rapid.SampledFrom([]Phase{"", PhaseProgressing, PhasePaused, PhaseAborting}).Draw(t, "phase")
		a.Desired.Weight = rapid.Int32Range(0, 100).Draw(t, "weight")
		b := *a.DeepCopy()
		b.Observed.Weight = rapid.Int32Range(0, 100).Draw(t, "obsWeight")
		b.Observed.At = micro(t0.Add(time.Duration(rapid.IntRange(0, 1000).Draw(t, "atSec")) * time.Second))
		b.Observed.Canary.Revision = rapid.SampledFrom([]string{"", "v1", "v2"}).Draw(t, "canaryRev")
		b.HealthCheckedAt = b.Observed.At
		b.Message = rapid.SampledFrom([]string{"", "waiting", "deploying"}).Draw(t, "message")
		if Changed(&a, &b) || Changed(&b, &a) {
			t.Fatal("a change of volatile fields counts as a change")
		}
		switch rapid.IntRange(0, 3).Draw(t, "field") {
		case 0:
			b.Desired.Weight = (a.Desired.Weight + 1) % 101
		case 1:
			b.UnhealthyCount++
		case 2:
			b.HopAt = micro(t0.Add(time.Hour))
		default:
			b.Desired.CanaryRevision = "v9"
		}
		if !Changed(&a, &b) || !Changed(&b, &a) {
			t.Fatal("a change of a counted field is not a change")
		}
	})
}
