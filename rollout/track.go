package rollout

import (
	"context"
	"sync"
)

// trackKey is the context key of the subscriptions Run waits for.
type trackKey struct{}

// tracker counts the subscriptions of one Run that have not ended yet.
type tracker struct {
	mu     sync.Mutex
	live   int
	closed bool          // Run has stopped waiting: later calls track nothing
	idle   chan struct{} // closed when live drops to 0 after close
}

// withTracker returns a context whose Notify calls TrackNotify counts, and
// the tracker.
func withTracker(ctx context.Context) (context.Context, *tracker) {
	t := &tracker{idle: make(chan struct{})}
	return context.WithValue(ctx, trackKey{}, t), t
}

// TrackNotify lets a Notifier tell the caller of Notify when a subscription
// set up with ctx has ended. A Notify that starts goroutines (a watch, a
// poller) or keeps the subscription in a list calls TrackNotify(ctx) before
// it returns, once per such goroutine or list entry, and calls the
// returned done once that goroutine has returned (or the entry is removed)
// and it will call wake no more; done may be called more than once, and
// from any goroutine. Run passes such a context and, before it returns,
// ends the context and waits until every done has been called: so once Run
// has returned, no subscription it made is live.
//
// With a ctx that does not come from Run (an operator's own call, a test),
// or once Run has stopped waiting, TrackNotify does nothing and returns a
// done that does nothing. Safe for concurrent use.
func TrackNotify(ctx context.Context) (done func()) {
	t, _ := ctx.Value(trackKey{}).(*tracker)
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return func() {}
	}
	t.live++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.live--; t.live == 0 && t.closed {
				close(t.idle)
			}
		})
	}
}

// wait blocks until every tracked subscription has ended (the caller has
// ended their context first).
func (t *tracker) wait() {
	t.mu.Lock()
	t.closed = true
	if t.live == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
	<-t.idle
}
