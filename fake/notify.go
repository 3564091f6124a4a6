package fake

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/rollout"
)

// Change notifications: what wakes a subscriber is in Router.Notify's doc.

// notifier is the subscribers of one fake and the lag ends it schedules.
// Lock order: the fake's lock, then mu, then the Clock's.
type notifier struct {
	mu      sync.Mutex
	clock   *Clock
	subs    []*subscription
	drop    bool
	changed bool        // a change not notified yet
	dues    []time.Time // ends of lags, not yet passed
	timers  []dueTimer  // armed wakes at dues, while someone listens
}

type subscription struct {
	ctx  context.Context
	wake func()
}

type dueTimer struct {
	at   time.Time
	stop func() bool
}

// subscribe adds wake until ctx ends.
func (n *notifier) subscribe(ctx context.Context, clock *Clock, wake func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sub := &subscription{ctx: ctx, wake: wake}
	end := rollout.TrackNotify(ctx)
	n.mu.Lock()
	if clock != nil {
		n.clock = clock
	}
	n.subs = append(n.subs, sub)
	n.arm()
	n.mu.Unlock()
	context.AfterFunc(ctx, func() {
		defer end()
		n.mu.Lock()
		defer n.mu.Unlock()
		n.subs = slices.DeleteFunc(n.subs, func(s *subscription) bool { return s == sub })
		if len(n.subs) == 0 {
			n.disarm()
		}
	})
	return nil
}

// live returns the number of subscriptions whose ctx has not ended, or
// has ended so recently that they are not dropped yet.
func (n *notifier) live() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.subs)
}

// change records that what the fake reports may have changed; the caller
// holds the fake's lock and calls flush once it has released it.
func (n *notifier) change() {
	n.mu.Lock()
	n.changed = true
	n.mu.Unlock()
}

// due records that a lag ends at t (on clock); the end wakes the
// subscribers. The caller holds the fake's lock.
func (n *notifier) due(clock *Clock, t time.Time) {
	if clock == nil || t.IsZero() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.clock = clock
	if slices.ContainsFunc(n.dues, t.Equal) {
		return
	}
	n.dues = append(n.dues, t)
	n.arm()
}

// listening reports that a wake would reach someone. n.mu is held.
func (n *notifier) listening() bool { return !n.drop && len(n.subs) > 0 }

// arm schedules a wake at every future due that has none. n.mu is held.
func (n *notifier) arm() {
	if n.clock == nil {
		return
	}
	now := n.clock.Now()
	n.dues = slices.DeleteFunc(n.dues, func(t time.Time) bool { return !t.After(now) })
	if !n.listening() {
		return
	}
	for _, t := range n.dues {
		if slices.ContainsFunc(n.timers, func(d dueTimer) bool { return d.at.Equal(t) }) {
			continue
		}
		at := t
		stop := n.clock.AfterFunc(at.Sub(now), func() { n.fire(at) })
		n.timers = append(n.timers, dueTimer{at: at, stop: stop})
	}
}

// disarm stops every scheduled wake; the dues are kept. n.mu is held.
func (n *notifier) disarm() {
	for _, d := range n.timers {
		d.stop()
	}
	n.timers = nil
}

// fire is a lag's end: it wakes the subscribers.
func (n *notifier) fire(at time.Time) {
	n.mu.Lock()
	n.timers = slices.DeleteFunc(n.timers, func(d dueTimer) bool { return d.at.Equal(at) })
	n.dues = slices.DeleteFunc(n.dues, func(t time.Time) bool { return !t.After(at) })
	n.changed = true
	n.mu.Unlock()
	n.flush()
}

// flush wakes the subscribers if a change is pending. It is called without
// the fake's lock.
func (n *notifier) flush() {
	n.mu.Lock()
	if !n.changed {
		n.mu.Unlock()
		return
	}
	n.changed = false
	var subs []*subscription
	if !n.drop {
		subs = slices.Clone(n.subs)
	}
	n.mu.Unlock()
	for _, s := range subs {
		if s.ctx.Err() == nil {
			s.wake()
		}
	}
}

// setDrop turns the delivery of wakes off (on) or back on. Wakes are
// dropped, not delayed; turning delivery back on wakes the subscribers
// once, as a watch that reconnects lists what it missed.
func (n *notifier) setDrop(on bool) {
	n.mu.Lock()
	if on == n.drop {
		n.mu.Unlock()
		return
	}
	n.drop = on
	if on {
		n.changed = false
		n.disarm()
	} else {
		n.changed = true
		n.arm()
	}
	n.mu.Unlock()
	n.flush()
}
