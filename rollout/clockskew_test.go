package rollout_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/strategy"
)

func degradedOf(s *strategy.State) metav1.Condition {
	for _, c := range s.Conditions {
		if c.Type == strategy.ConditionDegraded {
			return c
		}
	}
	return metav1.Condition{}
}

// TestReconcileClockSkew: a command stamped by another clock than the
// Runner's (time.Now() while the Runner runs on a fake clock, here 98 hours
// ahead) fails loudly: ReconcileAt returns a *strategy.ClockSkewError naming
// the field, logs it, and the state reports Degraded (ClockSkew) without
// losing anything. A small skew (30 s, under strategy.MaxClockSkew) is
// absorbed: no error, not Degraded. Once the Runner's clock reaches the
// stamp, the error ends and the rollout finishes.
func TestReconcileClockSkew(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 100}
	for _, tc := range []struct {
		name   string
		ahead  time.Duration
		skewed bool
	}{
		{"wrong clock, 98h ahead", 98 * time.Hour, true},
		{"just over the tolerance", strategy.MaxClockSkew + time.Microsecond, true},
		{"small skew", 30 * time.Second, false},
		{"at the tolerance", strategy.MaxClockSkew, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(strat, fake.Lag{})
			var lines []string
			ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
			s := strategy.NewState("v1", "v1")                 // v1 runs on side A, idle
			s = s.Retarget("v2", g.runner.Now().Add(tc.ahead)) // the command's clock runs ahead
			next, _, err := g.runner.ReconcileAt(ctx, s, g.runner.Now())
			if next.CanaryRevision != "v2" || next.LastCommandAt != s.LastCommandAt || next.Phase != strategy.PhaseProgressing {
				t.Fatalf("state lost: canary %q, lastCommandAt %v (want %v), phase %s", next.CanaryRevision, next.LastCommandAt, s.LastCommandAt, next.Phase)
			}
			c := degradedOf(&next)
			logged := strings.Contains(strings.Join(lines, "\n"), "ahead of the Runner's clock")
			if !tc.skewed {
				if err != nil || c.Reason == strategy.ReasonClockSkew || logged {
					t.Fatalf("a skew of %s: err %v, Degraded %s %s, logged %v", tc.ahead, err, c.Status, c.Reason, logged)
				}
				return
			}
			var skew *strategy.ClockSkewError
			if !errors.Is(err, strategy.ErrClockSkew) || !errors.As(err, &skew) {
				t.Fatalf("err %v, want a *strategy.ClockSkewError", err)
			}
			if skew.Field != "lastCommandAt" || !skew.At.Equal(s.LastCommandAt.Time) || !skew.Now.Equal(g.clock.Now()) {
				t.Fatalf("error %+v", skew)
			}
			if c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonClockSkew {
				t.Fatalf("Degraded %s %s, want True ClockSkew", c.Status, c.Reason)
			}
			if !logged {
				t.Fatalf("not logged: %q", lines)
			}
			// Hops that wait for no time go on (the stamp counts as now); the
			// error stays until the clock reaches the stamp.
			again, _, err := g.runner.ReconcileAt(ctx, next, g.runner.Now())
			if !errors.Is(err, strategy.ErrClockSkew) || degradedOf(&again).Reason != strategy.ReasonClockSkew {
				t.Fatalf("again: err %v, Degraded %s", err, degradedOf(&again).Reason)
			}
			g.clock.Set(s.LastCommandAt.Time)
			end, _ := g.run(t, again, 1000) // fails on any error
			if end.Phase != strategy.PhaseSucceeded || degradedOf(&end).Reason == strategy.ReasonClockSkew {
				t.Fatalf("ended %s, Degraded %s", end.Phase, degradedOf(&end).Reason)
			}
		})
	}
}

// TestRunClockSkew: Run logs the skew at every reconcile while the state's
// stamps are ahead of its clock (a state stamped by the real clock used to
// wait in silence on a fake one, 98 hours of fake time in one case; here
// ten minutes), finishes once its clock reaches them, and returns
// strategy.ErrClockSkew with a finished state stamped ahead.
func TestRunClockSkew(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 100}
	g := newRig(strat, fake.Lag{})
	g.runner.Store = &fake.Store{}
	var mu sync.Mutex
	skews := 0
	ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) {
		if strings.Contains(args, "ahead of the Runner's clock") {
			mu.Lock()
			skews++
			mu.Unlock()
		}
	}, funcr.Options{}))
	ahead := g.clock.Now().Add(10 * time.Minute)
	s := strategy.NewState("v1", "v1").Retarget("v2", ahead)
	type result struct {
		s   strategy.State
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := g.runner.Run(ctx, s, nil)
		done <- result{s, err}
	}()
	var res result
	waitFor(t, g.clock, func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if res.err != nil || res.s.Phase != strategy.PhaseSucceeded || skews == 0 || g.clock.Now().Before(ahead) {
		t.Fatalf("Run: %v, phase %s, %d skews logged, clock %s before the stamp", res.err, res.s.Phase, skews, ahead.Sub(g.clock.Now()))
	}

	// A finished state stamped ahead: Run says so instead of returning as
	// if nothing were wrong.
	g2 := newRig(strat, fake.Lag{})
	g2.runner.Store = &fake.Store{}
	end := res.s
	end.LastCommandAt = strategy.Micro(g2.clock.Now().Add(time.Hour))
	got, err := g2.runner.Run(context.Background(), end, nil)
	if !errors.Is(err, strategy.ErrClockSkew) || got.Phase != strategy.PhaseSucceeded {
		t.Fatalf("Run on a finished state an hour ahead: %v, phase %s", err, got.Phase)
	}
}
