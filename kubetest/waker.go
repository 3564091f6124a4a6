package kubetest

import (
	"testing"
	"time"
)

// WakeBound is how long a notification may take after the write that
// causes it, in the notification tests of the adapters.
const WakeBound = 3 * time.Second

// Waker counts the wakes of a rollout.Notifier on a channel that never
// blocks the notifier.
type Waker chan struct{}

// NewWaker returns a Waker that holds up to 1024 wakes.
func NewWaker() Waker { return make(Waker, 1024) }

// Wake is the func to pass to Notify.
func (w Waker) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Drain forgets the wakes so far (the one of a watch's start included),
// once nothing has arrived for 100 ms.
func (w Waker) Drain() {
	for {
		select {
		case <-w:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

// After runs write and returns how long the first wake took from the start
// of the write, failing t when none came within WakeBound.
func (w Waker) After(t testing.TB, what string, write func()) time.Duration {
	t.Helper()
	w.Drain()
	start := time.Now()
	write()
	wrote := time.Now()
	select {
	case <-w:
		d := time.Since(start)
		t.Logf("%s: woken %v after the write started, %v after it returned", what,
			d.Round(100*time.Microsecond), time.Since(wrote).Round(100*time.Microsecond))
		return d
	case <-time.After(WakeBound):
		t.Fatalf("%s: no wake within %v", what, WakeBound)
		return 0
	}
}

// QuietBound is how long a write that must wake nobody is watched for a
// wake, in the notification tests of the adapters.
const QuietBound = 500 * time.Millisecond

// Quiet runs write and fails t when it wakes the notifier within
// QuietBound.
func (w Waker) Quiet(t testing.TB, what string, write func()) {
	t.Helper()
	w.Drain()
	write()
	select {
	case <-w:
		t.Fatalf("%s: woke the subscriber, and should not", what)
	case <-time.After(QuietBound):
	}
}
