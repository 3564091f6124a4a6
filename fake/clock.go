package fake

import (
	"sync"
	"time"
)

// Clock is a manual clock for tests: time moves only when Advance or Set is
// called. It implements rollout.Clock. The zero value starts at the zero
// time; use NewClock. Safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once the clock has been
// advanced by d or more. A non-positive d fires at once.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d (backward for a negative d, which
// fires nothing) and fires the waiters whose time has come.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t and fires the waiters whose time has come.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(t) {
			w.ch <- t
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Waiters returns the number of pending After calls; tests use it to know
// that a goroutine is waiting before they advance the clock.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// NextWake returns the earliest time a waiter is due, and false if none is.
func (c *Clock) NextWake() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t time.Time
	for i, w := range c.waiters {
		if i == 0 || w.at.Before(t) {
			t = w.at
		}
	}
	return t, len(c.waiters) > 0
}

// AdvanceUntil drives a goroutine that waits on the clock: whenever a waiter
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
