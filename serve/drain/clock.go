package drain

import "time"

// Clock is the source of time for a [Controller]: the instant Begin is
// called and the timers that end each phase. Production code leaves
// [Config.Clock] nil and gets the wall clock; tests supply a clock they
// advance by hand, or run under testing/synctest with the wall clock.
//
// Implementations must be safe for concurrent use. AfterFunc must call f
// at most once, in its own goroutine or in the goroutine that advances
// the clock, and never while holding a lock that f might need; the
// returned stop function reports whether it prevented the call.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// wallClock is the Clock used when Config.Clock is nil.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
