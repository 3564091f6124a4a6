package fake_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/strategy"
)

// printTB prints what AssertSafe reports, for the examples; a test passes
// its *testing.T.
type printTB struct{}

func (printTB) Helper() {}

func (printTB) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// A rollout from v1 to v2 in a World: side A runs v1 and serves every
// request, the Runner deploys v2 on side B, moves traffic and capacity over
// in steps of 25 percent, and AssertSafe checks every observation on the
// way (a test passes its *testing.T).
func ExampleWorld() {
	w, err := fake.NewWorld(fake.WorldOptions{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 25},
		Revision: "v1",
		SideLag:  fake.Lag{Duration: 5 * time.Second}, // replicas and deploys take 5s
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Start("v2")
	end, err := w.RunUntil(context.Background(), strategy.PhaseSucceeded)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.AssertSafe(printTB{})
	st := w.Traffic().Stats()
	fmt.Printf("%s: side %s runs %s\n", end.Phase, end.StableSide, end.StableRevision)
	fmt.Printf("served %d requests, overloaded %d, dropped %d, peak capacity %d\n", st.Served, st.Overloaded, st.Dropped, st.PeakCapacity)
	// Output:
	// Succeeded: side B runs v2
	// served 1981000 requests, overloaded 0, dropped 0, peak capacity 125
}

// A world whose stable side was never given its revision: side A runs
// another one than the state's stable revision, so the rollout holds
// (Degraded, StableRevisionMismatch) until RunUntil's deadline, and
// AssertSafe says what it saw.
func ExampleWorld_AssertSafe() {
	w, err := fake.NewWorld(fake.WorldOptions{
		Strategy: strategy.BlueGreen{},
		Revision: "v1",
		Deadline: 10 * time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Side(strategy.SideA).SetRevision("v0") // someone else's revision
	w.Start("v2")
	_, err = w.RunUntil(context.Background(), strategy.PhaseSucceeded)
	fmt.Println(err)
	w.AssertSafe(printTB{})
	// Output:
	// fake world: phase Succeeded not reached after 10m0s: still Progressing at the deadline (message "stable side A runs v0, want v1: holding")
	// FAIL: fake world: traffic to the wrong revision at 00:00:00.000 (+0s), phase not started: side A receives 100% of requests and runs "v0", but as the stable side it must run "v1" [6307 observations broke this rule, the last at +10m0s]
	// FAIL: fake world: Degraded hold at 00:00:00.000 (+0s), phase Progressing: Degraded (StableRevisionMismatch) after a reconcile: stable side A runs v0, want v1: holding [6306 observations broke this rule, the last at +10m0s]
}
