// Package clock is the one source of time for upshift's packages: the
// rollout Runner, the Gateway API router, the drain controller and the
// retrying transport all read the time and set their timers through a
// Clock, so that one manual clock (fake.Clock, or a test's own) drives any
// of them.
//
// The package imports nothing outside the standard library, so that a
// server that imports only serve/drain or serve/retry is not dragged into
// Kubernetes dependencies.
//
// A nil Clock means the wall clock: every package that takes a Clock
// treats nil as Real, and so do After, Sleep and OrReal here.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and calls a function once a duration has passed.
//
// Implementations must be safe for concurrent use. AfterFunc calls f at
// most once, after d has passed on the clock (at once, in its own
// goroutine, for d <= 0), either in its own goroutine or in the goroutine
// that advances a manual clock, and never while holding a lock that f
// might need: callers may hold their own locks when they call AfterFunc,
// and f may take them. The returned stop function cancels the call and
// reports whether it prevented it (false once f has been called or stop
// has already been called).
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Real is the wall clock: time.Now and time.AfterFunc.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// OrReal returns c, or Real when c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// After returns a channel that receives c's time once d has passed on c,
// like time.After (nil c: Real). Nothing stops the timer: a caller that
// may stop waiting early and cares about the pending timer uses
// c.AfterFunc and its stop function instead. On Real it is time.After,
// whose timer is released as soon as the channel is no longer referenced.
func After(c Clock, d time.Duration) <-chan time.Time {
	c = OrReal(c)
	if _, ok := c.(realClock); ok {
		return time.After(d)
	}
	ch := make(chan time.Time, 1)
	c.AfterFunc(d, func() { ch <- c.Now() })
	return ch
}

// Sleep waits until d has passed on c (nil c: Real) or until ctx ends,
// whichever comes first, and returns context.Cause(ctx) in the second case,
// nil in the first. A ctx that has already ended returns its cause at
// once, whatever d; otherwise a d <= 0 returns nil at once.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	done := make(chan struct{})
	stop := OrReal(c).AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		return context.Cause(ctx)
	}
}
