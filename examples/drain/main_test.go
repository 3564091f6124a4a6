package main

import (
	"io"
	"strings"
	"testing"
)

// TestRun runs the example's whole program logic and checks its claims.
func TestRun(t *testing.T) {
	var out strings.Builder
	rep, err := run(&out, 4, 60)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Duplicates != 0 {
		t.Errorf("%d client errors, %d duplicated orders; want none", rep.Errors, rep.Duplicates)
	}
	if rep.ByVersion["v1"] == 0 || rep.ByVersion["v2"] == 0 || rep.ByVersion["v1"]+rep.ByVersion["v2"] != rep.Requests {
		t.Errorf("answers by version %v for %d requests: want both versions and every request answered", rep.ByVersion, rep.Requests)
	}
	if rep.Orders != 4*20 {
		t.Errorf("%d orders executed, want 80", rep.Orders)
	}
	if rep.Old.Admitted != rep.Old.Completed || rep.New.Admitted != rep.New.Completed {
		t.Errorf("admitted requests not all completed: v1 %+v, v2 %+v", rep.Old, rep.New)
	}
}

func TestRunQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("second run only without -short")
	}
	rep, err := run(io.Discard, 2, 30)
	if err != nil || rep.Errors != 0 {
		t.Fatalf("run: %v, report %+v", err, rep)
	}
}
