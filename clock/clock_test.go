package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/fake"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// waitForTimer waits until c has a pending timer: a goroutine is waiting.
func waitForTimer(t *testing.T, c *fake.Clock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no timer was set")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReal(t *testing.T) {
	if clock.OrReal(nil) != clock.Real {
		t.Fatal("OrReal(nil) is not Real")
	}
	m := fake.NewClock(t0)
	if clock.OrReal(m) != clock.Clock(m) {
		t.Fatal("OrReal(c) is not c")
	}
	before := time.Now()
	if now := clock.Real.Now(); now.Before(before) || time.Since(now) > time.Minute {
		t.Fatalf("Real.Now() = %v, want about %v", now, before)
	}
	fired := make(chan struct{})
	clock.Real.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("Real.AfterFunc did not fire")
	}
	stop := clock.Real.AfterFunc(time.Hour, func() { t.Error("a stopped timer fired") })
	if !stop() {
		t.Fatal("stop of a pending timer reported false")
	}
	if stop() {
		t.Fatal("a second stop reported true")
	}
}

func TestAfter(t *testing.T) {
	m := fake.NewClock(t0)
	ch := clock.After(m, time.Second)
	m.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	m.Advance(time.Millisecond)
	select {
	case got := <-ch:
		if !got.Equal(t0.Add(time.Second)) {
			t.Fatalf("delivered %v, want %v", got, t0.Add(time.Second))
		}
	default:
		t.Fatal("did not fire once the time had passed")
	}
	for _, c := range []clock.Clock{nil, clock.Real} {
		select {
		case <-clock.After(c, time.Millisecond):
		case <-time.After(10 * time.Second):
			t.Fatalf("After(%v, 1ms) did not fire", c)
		}
	}
}

func TestSleep(t *testing.T) {
	ctx := context.Background()
	t.Run("waits on the clock", func(t *testing.T) {
		m := fake.NewClock(t0)
		done := make(chan error, 1)
		go func() { done <- clock.Sleep(ctx, m, time.Minute) }()
		waitForTimer(t, m)
		m.Advance(59 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("returned %v before the minute passed", err)
		case <-time.After(10 * time.Millisecond):
		}
		m.Advance(time.Second)
		if err := <-done; err != nil {
			t.Fatalf("Sleep = %v, want nil", err)
		}
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		m := fake.NewClock(t0)
		cause := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(ctx)
		done := make(chan error, 1)
		go func() { done <- clock.Sleep(ctx, m, time.Minute) }()
		waitForTimer(t, m)
		cancel(cause)
		if err := <-done; !errors.Is(err, cause) {
			t.Fatalf("Sleep = %v, want the cause %v", err, cause)
		}
		if m.Waiters() != 0 {
			t.Fatal("the timer was not stopped")
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		for _, d := range []time.Duration{-time.Second, 0, time.Minute} {
			m := fake.NewClock(t0)
			if err := clock.Sleep(ctx, m, d); !errors.Is(err, context.Canceled) {
				t.Fatalf("Sleep(%v) = %v, want context.Canceled", d, err)
			}
			if m.Waiters() != 0 {
				t.Fatalf("Sleep(%v) set a timer on an ended context", d)
			}
		}
	})
	t.Run("no wait", func(t *testing.T) {
		m := fake.NewClock(t0)
		for _, d := range []time.Duration{-time.Second, 0} {
			if err := clock.Sleep(ctx, m, d); err != nil {
				t.Fatalf("Sleep(%v) = %v", d, err)
			}
		}
		if m.Waiters() != 0 {
			t.Fatal("a wait of 0 or less set a timer")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		if err := clock.Sleep(ctx, nil, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("real", func(t *testing.T) {
		start := time.Now()
		if err := clock.Sleep(ctx, nil, 5*time.Millisecond); err != nil || time.Since(start) < 5*time.Millisecond {
			t.Fatalf("Sleep = %v after %v", err, time.Since(start))
		}
	})
}
