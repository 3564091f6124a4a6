package fake_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// A Router's Store keeps the state on the fake route: Run writes each
// weight hop with the state that records it, in one update.
func ExampleRouter_Store() {
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	router := fake.NewRouter(clock)
	store := router.Store()
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Minute},
			Options: strategy.Options{Capacity: strategy.CapacityFixed}},
		Router: router, Clock: clock, Store: store, // the fixed capacity mode: weights only
	}
	done := make(chan strategy.State, 1)
	go func() {
		s, err := r.Run(context.Background(), strategy.NewState("v1", "v2"), nil)
		if err != nil {
			fmt.Println(err)
		}
		done <- s
	}()
	var end strategy.State
	clock.AdvanceUntil(func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	}, time.Minute)
	fmt.Println(end.Phase)
	fmt.Println("writes of the route:", router.Writes())
	fmt.Println("writes that carried the state:", store.Saves())
	// Output:
	// Succeeded
	// writes of the route: 4
	// writes that carried the state: 5
}
