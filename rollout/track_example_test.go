package rollout_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// tickingRouter is a fake router with a Notifier of its own: a goroutine
// that wakes its subscriber on every tick of a channel, as an adapter's
// own watch would.
type tickingRouter struct {
	*fake.Router
	ticks   chan struct{}
	running atomic.Int32
}

// Notify starts the goroutine and reports it to Run with TrackNotify: Run
// ends ctx before it returns, and waits for done.
func (r *tickingRouter) Notify(ctx context.Context, wake func()) error {
	done := rollout.TrackNotify(ctx)
	r.running.Add(1)
	go func() {
		defer done()
		defer r.running.Add(-1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.ticks:
				wake()
			}
		}
	}()
	return nil
}

func ExampleTrackNotify() {
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	router := &tickingRouter{Router: fake.NewRouter(clock), ticks: make(chan struct{})}
	runner := &rollout.Runner{
		Strategy: strategy.BlueGreen{},
		Router:   router,
		A:        fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100}),
		B:        fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0}),
		Store:    &fake.Store{},
		Clock:    clock,
	}
	done := make(chan strategy.State, 1)
	go func() {
		s, _ := runner.Run(context.Background(), strategy.NewState("v1", "v2"), nil)
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
	fmt.Println(end.Phase, "with", router.running.Load(), "notifier goroutines left")
	// Output: Succeeded with 0 notifier goroutines left
}
