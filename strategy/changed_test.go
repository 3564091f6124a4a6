package strategy

import (
	"testing"
	"time"
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
		}, true},
		{"gate gone", func(s *State) { s.Observed.Gates = nil }, true},
		{"observed weight", func(s *State) { s.Observed.Weight = 10 }, true},
		{"observed revision", func(s *State) { s.Observed.Canary.Revision = "v2" }, true},
		{"message", func(s *State) { s.Message = "waiting" }, true},
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
