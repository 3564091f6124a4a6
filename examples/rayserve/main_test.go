package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/strategy"
)

// TestRun runs the program's logic against two in-process emulators.
func TestRun(t *testing.T) {
	var out strings.Builder
	cfg := Config{Step: 10, Surge: 30, Interval: 100 * time.Millisecond, Poll: strategy.MinPollInterval, Timeout: time.Minute}
	rep, err := run(context.Background(), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Final.Phase != strategy.PhaseSucceeded || rep.Final.StableSide != strategy.SideB {
		t.Fatalf("ended %s with stable side %s", rep.Final.Phase, rep.Final.StableSide)
	}
	if tc, _ := rep.EmulatorB.TargetCapacity(); tc != nil {
		t.Errorf("new cluster at target_capacity %v, want null", *tc)
	}
	if tc, _ := rep.EmulatorA.TargetCapacity(); tc == nil || *tc != 0 {
		t.Errorf("old cluster at target_capacity %v, want 0", tc)
	}
	if rep.Violations != 0 || rep.Hops == 0 {
		t.Errorf("%d violations, %d hops", rep.Violations, rep.Hops)
	}
	if !strings.Contains(out.String(), "cluster B: target_capacity null, ready 100%") {
		t.Error("the summary does not show cluster B steady and ready")
	}
}
