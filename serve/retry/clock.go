package retry

import (
	"context"
	"time"
)

// Clock is the time source of a [Transport]: when a call started, and
// how it waits between attempts. Production code leaves Transport.Clock
// nil and gets the wall clock; tests supply one that records the waits
// and advances instantly. Implementations must be safe for concurrent
// use.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, whichever comes first, and
	// returns context.Cause(ctx) in the second case. It returns at once
	// for d <= 0 (with the cause if ctx has already ended).
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
