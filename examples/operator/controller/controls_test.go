package controller

import (
	"testing"
	"time"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestCommandsOnce: each change of the controls commands the rollout
// once; the same controls applied again command nothing.
func TestCommandsOnce(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := strategy.State{}.Retarget("v1", now).Retarget("v2", now)
	s.Phase = strategy.PhaseProgressing
	apply := func(spec, applied v1alpha1.Controls) (strategy.State, v1alpha1.Controls, int) {
		cmds, next := Commands(spec, applied)
		st := s
		for _, c := range cmds {
			st = c(st, now)
		}
		return st, next, len(cmds)
	}
	for _, tc := range []struct {
		name          string
		spec, applied v1alpha1.Controls
		cmds          int
		check         func(strategy.State) bool
	}{
		{"nothing", v1alpha1.Controls{}, v1alpha1.Controls{}, 0, nil},
		{"pause", v1alpha1.Controls{Paused: true}, v1alpha1.Controls{}, 1, func(s strategy.State) bool { return s.Paused }},
		{"pause applied", v1alpha1.Controls{Paused: true}, v1alpha1.Controls{Paused: true}, 0, nil},
		{"resume", v1alpha1.Controls{}, v1alpha1.Controls{Paused: true}, 1, nil},
		{"promote", v1alpha1.Controls{Promote: 3}, v1alpha1.Controls{Promote: 2}, 1, func(s strategy.State) bool { return s.PromoteRequested }},
		{"promote applied", v1alpha1.Controls{Promote: 3}, v1alpha1.Controls{Promote: 3}, 0, nil},
		{"promote lowered", v1alpha1.Controls{Promote: 1}, v1alpha1.Controls{Promote: 3}, 0, nil},
		{"promote full", v1alpha1.Controls{PromoteFull: 1}, v1alpha1.Controls{}, 1, func(s strategy.State) bool { return s.PromoteFullRequested }},
		{"abort", v1alpha1.Controls{Abort: true}, v1alpha1.Controls{}, 1, func(s strategy.State) bool { return s.Aborted != nil }},
		{"abort applied", v1alpha1.Controls{Abort: true}, v1alpha1.Controls{Abort: true}, 0, nil},
		{"retry", v1alpha1.Controls{}, v1alpha1.Controls{Abort: true}, 1, nil},
	} {
		st, next, n := apply(tc.spec, tc.applied)
		if n != tc.cmds || next != tc.spec || tc.check != nil && !tc.check(st) {
			t.Errorf("%s: %d commands (want %d), recorded %+v, state paused %v promote %v/%v aborted %v",
				tc.name, n, tc.cmds, next, st.Paused, st.PromoteRequested, st.PromoteFullRequested, st.Aborted)
		}
		if cmds, _ := Commands(next, next); len(cmds) != 0 {
			t.Errorf("%s: the recorded controls command again", tc.name)
		}
	}
}
