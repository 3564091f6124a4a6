package fake_test

import (
	"context"
	"fmt"
	"time"

	"github.com/upshift-dev/upshift/fake"
)

// A goroutine sets a timer right before it blocks; BlockUntil tells the
// test that it waits, so that advancing the clock is sure to wake it.
func ExampleClock_BlockUntil() {
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	woke := make(chan time.Time)
	go func() { woke <- <-clock.After(time.Minute) }()
	if err := clock.BlockUntil(context.Background(), 1); err != nil {
		fmt.Println(err)
		return
	}
	clock.Advance(time.Minute)
	fmt.Println((<-woke).Format(time.TimeOnly))
	// Output: 09:01:00
}
