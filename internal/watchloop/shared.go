package watchloop

import (
	"context"
	"sync"
)

// Shared is one loop watching one object for every subscriber of an
// adapter (a Setter and its Deployers; every Notify of a Router): the first
// Subscribe starts it, every wake goes to every live subscriber, and it
// ends when the last subscription's ctx has ended. Its Cache holds what
// the watch delivered, while the loop runs.
//
// A subscription ends when its ctx ends: its ended (Subscribe's argument,
// typically rollout.TrackNotify(ctx)) is called once its wake will be
// called no more and, for the last one, once the loop's goroutine has
// returned. So a Runner's Run that subscribes several adapters sharing one
// loop returns after the loop.
//
// Safe for concurrent use; the zero value is ready. A Shared must not be
// copied after first use.
type Shared struct {
	// Cache is fed by the loop while it runs.
	Cache Cache

	mu    sync.Mutex
	subs  map[*member]struct{}
	stop  context.CancelFunc // ends the running loop; nil: none runs
	ended chan struct{}      // closed when the running loop has ended
}

// member is one subscription.
type member struct {
	mu   sync.Mutex
	wake func()
	gone bool // wake is not called any more
}

// Subscribe adds a subscriber whose wake is called on every change the
// loop reports, until ctx ends; then ended (nil: nothing) is called, as
// said above. The first subscriber (and the first after the last one
// ended) starts the loop with Start(name, start, stats, opt), whose error
// it returns (nothing is subscribed then, and ended has been called);
// opt.Ended and opt.Observe are the Shared's own (the Cache's). A later
// subscriber joins the running loop and is not woken by the events
// delivered before.
func (s *Shared) Subscribe(ctx context.Context, name string, start Func, wake func(), ended func(), stats *Stats, opt Options) error {
	done := ended
	if done == nil {
		done = func() {}
	}
	m := &member{wake: wake}
	s.mu.Lock()
	if s.stop == nil {
		// The loop outlives the subscriber that starts it, while others
		// remain; its ctx keeps ctx's values, not its end.
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		ended := make(chan struct{})
		observe, unfeed := s.Cache.Feed()
		opt.Observe = observe
		opt.Ended = func() {
			unfeed()
			close(ended)
		}
		if err := Start(lctx, name, start, s.fanout, stats, opt); err != nil {
			stop()
			s.mu.Unlock()
			done()
			return err
		}
		s.stop, s.ended = stop, ended
	}
	if s.subs == nil {
		s.subs = map[*member]struct{}{}
	}
	s.subs[m] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.gone = true // after a wake in progress, if any
		m.mu.Unlock()
		s.mu.Lock()
		delete(s.subs, m)
		var wait chan struct{}
		if len(s.subs) == 0 && s.stop != nil {
			s.stop()
			wait = s.ended
			s.stop, s.ended = nil, nil
		}
		s.mu.Unlock()
		if wait != nil {
			<-wait
		}
		done()
	})
	return nil
}

// Subscribers returns the number of live subscriptions.
func (s *Shared) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// fanout wakes every live subscriber.
func (s *Shared) fanout() {
	s.mu.Lock()
	ms := make([]*member, 0, len(s.subs))
	for m := range s.subs {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	for _, m := range ms {
		m.mu.Lock()
		if !m.gone {
			m.wake()
		}
		m.mu.Unlock()
	}
}
