package fake

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/clock"
)

// Clock is a manual clock for tests: time moves only when Advance or Set is
// called. It implements clock.Clock, so it drives a rollout.Runner, a
// gateway.Router, a drain.Controller or a retry.Transport. The zero value
// starts at the zero time; use NewClock. Safe for concurrent use.
//
// Timers (AfterFunc, After) fire inside Set and Advance, on the caller's
// goroutine, once the clock reads the new time, in deadline order (ties in
// the order they were set), with no lock held. A timer set for d <= 0 fires
// at once, in its own goroutine, as time.AfterFunc does.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // pending, in the order they were set
	// added is closed (and dropped) when a timer is set: BlockUntil waits
	// on it.
	added chan struct{}
}

type timer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f once the clock has been advanced by d or more (at
// once, in its own goroutine, for d <= 0). stop cancels the call and
// reports whether it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	t := &timer{f: f}
	if d <= 0 {
		go func() {
			if c.take(t) {
				f()
			}
		}()
		return func() bool { return c.take(t) }
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at = c.now.Add(d)
	c.timers = append(c.timers, t)
	if c.added != nil {
		close(c.added)
		c.added = nil
	}
	return func() bool { return c.take(t) }
}

// take marks t done and drops it from the pending timers, and reports
// whether it was pending: only the first of firing and stopping wins.
func (c *Clock) take(t *timer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	c.timers = slices.DeleteFunc(c.timers, func(w *timer) bool { return w == t })
	return true
}

// After returns a channel that receives the clock's time once the clock
// has been advanced by d or more. A non-positive d fires at once.
func (c *Clock) After(d time.Duration) <-chan time.Time { return clock.After(c, d) }

// Advance moves the clock forward by d (backward for a negative d, which
// fires nothing) and fires the timers whose time has come.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t and fires the timers whose time has come.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	var due []*timer
	c.timers = slices.DeleteFunc(c.timers, func(w *timer) bool {
		if w.at.After(t) {
			return false
		}
		w.done = true
		due = append(due, w)
		return true
	})
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *timer) int { return a.at.Compare(b.at) })
	for _, w := range due {
		w.f()
	}
}

// Waiters returns the number of pending timers (After and AfterFunc calls
// that have not fired nor been stopped); tests use it to know that a
// goroutine is waiting before they advance the clock.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending (After, AfterFunc
// and clock.Sleep calls on the clock that have neither fired nor been
// stopped), or until ctx ends, and returns ctx's error then. A goroutine
// that sets a timer right before it blocks (a rollout.Runner's Run, a
// watch loop's backoff) is then known to be waiting, without reading the
// wall clock or goroutine stacks. Safe for concurrent use.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			c.mu.Unlock()
			return nil
		}
		if c.added == nil {
			c.added = make(chan struct{})
		}
		added := c.added
		c.mu.Unlock()
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NextWake returns the earliest time a timer is due, and false if none is.
func (c *Clock) NextWake() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t time.Time
	for i, w := range c.timers {
		if i == 0 || w.at.Before(t) {
			t = w.at
		}
	}
	return t, len(c.timers) > 0
}

// AdvanceUntil drives a goroutine that waits on the clock: whenever a timer
// is pending it jumps to the earliest one, until cond holds. It gives up
// after wallTimeout of real time and reports whether cond held.
func (c *Clock) AdvanceUntil(cond func() bool, wallTimeout time.Duration) bool {
	deadline := time.Now().Add(wallTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		if at, ok := c.NextWake(); ok {
			c.Set(at)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	return true
}
