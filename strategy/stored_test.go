package strategy_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/strategy"
)

// TestStoredNamesKept: a state stored by an earlier version reads back with
// every field, whatever the Go names are now (a manual pause stored as
// paused must still hold after an upgrade), and is written back under the
// same names.
func TestStoredNamesKept(t *testing.T) {
	const stored = `{"stepIndex":0,"phase":"Paused","paused":true,"pauseReason":"ManualPause","released":true,"handled":{"retry":"r1"}}`
	var s strategy.State
	if err := json.Unmarshal([]byte(stored), &s); err != nil {
		t.Fatal(err)
	}
	want := strategy.State{Phase: strategy.PhasePaused, AwaitingResume: true, PauseReason: strategy.ReasonManualPause,
		SteadyRequested: true, Handled: strategy.Requests{Retry: "r1"}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("decoded (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"paused", "released"} {
		if back[k] != true {
			t.Errorf("written back without %s: true: %s", k, b)
		}
	}
}
