package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// counting is a Source that counts its calls and answers with answer.
type counting struct {
	n      atomic.Int32
	answer func(ctx context.Context) (analysis.Measurement, error)
}

func (c *counting) Measure(ctx context.Context, _ *analysis.Check, _ analysis.Vars, _, _ string, _ time.Time) (analysis.Measurement, error) {
	c.n.Add(1)
	return c.answer(ctx)
}

// twoChecks is an Analysis of two checks (a success rate and a latency),
// five evaluations each (Count 1 + 1 + 2 + 1): ten measurements a
// judgement, on clk.
func twoChecks(src analysis.Source, clk *fake.Clock) *analysis.Analysis {
	a := newAnalysis(src, clk)
	a.Checks = []analysis.Check{analysis.SuccessRate(0.95), analysis.LatencyQuantile(0.9, 300*time.Millisecond)}
	return a
}

func health(t *testing.T, a *analysis.Analysis) (strategy.Health, string) {
	t.Helper()
	h, msg, err := a.Health(rollout.WithState(context.Background(), progressing()))
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	return h, msg
}

// TestUnavailableSourceEndsTheJudgement: the first measurement that finds
// the source unavailable ends the judgement (the other nine are not sent),
// a judgement before the next evaluation instant sends nothing, and one at
// the next instant tries again, once. The verdict names the error. An
// error of the query itself does not stop the others.
func TestUnavailableSourceEndsTheJudgement(t *testing.T) {
	refused := fmt.Errorf("prometheus: query: %w: dial tcp 10.0.0.9:9090: connect: connection refused", analysis.ErrUnavailable)
	src := &counting{answer: func(context.Context) (analysis.Measurement, error) { return analysis.Measurement{}, refused }}
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := twoChecks(src, clk)
	for _, tc := range []struct {
		advance time.Duration
		sent    int32 // in all, after this judgement
	}{
		{0, 1},               // t0+5s: the newest instant is t0
		{3 * time.Second, 1}, // t0+8s: still t0, remembered
		{0, 1},
		{4 * time.Second, 2}, // t0+12s: t0+10s, once more
		{5 * time.Second, 2}, // t0+17s: still t0+10s
	} {
		clk.Advance(tc.advance)
		h, msg := health(t, a)
		if h != strategy.HealthInconclusive || !strings.Contains(msg, "connection refused") {
			t.Fatalf("at %v: Health = %s (%s); want Inconclusive naming the error", clk.Now().Sub(t0), h, msg)
		}
		if got := src.n.Load(); got != tc.sent {
			t.Fatalf("at %v: %d measurements sent in all, want %d (%s)", clk.Now().Sub(t0), got, tc.sent, msg)
		}
	}

	bad := &counting{answer: func(context.Context) (analysis.Measurement, error) {
		return analysis.Measurement{}, errors.New("prometheus: query: bad_data: parse error")
	}}
	if h, _ := health(t, twoChecks(bad, fake.NewClock(t0.Add(5*time.Second)))); h != strategy.HealthInconclusive || bad.n.Load() != 10 {
		t.Fatalf("query errors: Health %s after %d measurements; want Inconclusive after all 10", h, bad.n.Load())
	}
}

// TestUnavailableKeepsWhatWasMeasured: evaluations measured before the
// source went away still count (from the cache); the newest, not measured,
// is a query error set aside within ConsecutiveErrorLimit.
func TestUnavailableKeepsWhatWasMeasured(t *testing.T) {
	var down atomic.Bool
	src := &counting{answer: func(context.Context) (analysis.Measurement, error) {
		if down.Load() {
			return analysis.Measurement{}, fmt.Errorf("%w: connection reset", analysis.ErrUnavailable)
		}
		return analysis.Measurement{Value: 0.99, Requests: 100}, nil
	}}
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := newAnalysis(src, clk)
	if h, msg := health(t, a); h != strategy.HealthHealthy {
		t.Fatalf("Health = %s (%s)", h, msg)
	}
	down.Store(true)
	clk.Advance(10 * time.Second)
	n := src.n.Load()
	h, msg := health(t, a)
	if h != strategy.HealthHealthy || !strings.Contains(msg, "set aside") || !strings.Contains(msg, "connection reset") {
		t.Fatalf("Health = %s (%s); want Healthy with the newest error set aside and named", h, msg)
	}
	if got := src.n.Load() - n; got != 1 {
		t.Fatalf("%d measurements for the one new instant, want 1", got)
	}
}

// TestJudgementDeadline: a source that accepts and never answers holds a
// judgement until Policy.Timeout passes on the Analysis' clock, then the
// judgement ends with the other measurements not sent, and the next
// reconcile before the next instant sends nothing.
func TestJudgementDeadline(t *testing.T) {
	started := make(chan struct{}, 16)
	src := &counting{answer: func(ctx context.Context) (analysis.Measurement, error) {
		started <- struct{}{}
		<-ctx.Done() // never answers
		return analysis.Measurement{}, fmt.Errorf("prometheus: query: %w", ctx.Err())
	}}
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := twoChecks(src, clk)
	a.Policy.Timeout = 3 * time.Second
	type answer struct {
		h   strategy.Health
		msg string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		h, msg, err := a.Health(rollout.WithState(context.Background(), progressing()))
		done <- answer{h, msg, err}
	}()
	<-started
	waitTimer(t, clk)
	clk.Advance(3 * time.Second)
	got := <-done
	if got.err != nil || got.h != strategy.HealthInconclusive || !strings.HasPrefix(got.msg, "success-rate Inconclusive (5 queries in a row failed (ConsecutiveErrorLimit 2): metrics source unavailable: Policy.Timeout 3s") {
		t.Fatalf("Health = %s (%s), %v; want Inconclusive naming Policy.Timeout", got.h, got.msg, got.err)
	}
	if n := src.n.Load(); n != 1 {
		t.Fatalf("%d measurements sent, want 1", n)
	}
	if h, msg := health(t, a); h != strategy.HealthInconclusive || src.n.Load() != 1 {
		t.Fatalf("again at the same instant: Health %s (%s) after %d measurements in all; want none more", h, msg, src.n.Load())
	}
	if clk.Waiters() != 0 {
		t.Errorf("%d timers left after the judgements", clk.Waiters())
	}
}

// TestJudgementCallerCanceled: a caller that gives up gets its context's
// error and no verdict, and nothing is remembered against the source.
func TestJudgementCallerCanceled(t *testing.T) {
	var mu sync.Mutex
	cancelNext := true
	var cancel context.CancelFunc
	src := &counting{answer: func(ctx context.Context) (analysis.Measurement, error) {
		mu.Lock()
		defer mu.Unlock()
		if cancelNext {
			cancelNext = false
			cancel()
			return analysis.Measurement{}, ctx.Err()
		}
		return analysis.Measurement{Value: 0.99, Requests: 100}, nil
	}}
	a := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second)))
	var ctx context.Context
	ctx, cancel = context.WithCancel(rollout.WithState(context.Background(), progressing()))
	defer cancel()
	if _, _, err := a.Health(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Health with its context canceled = %v, want context.Canceled", err)
	}
	if h, msg := health(t, a); h != strategy.HealthHealthy {
		t.Fatalf("then Health = %s (%s); want Healthy: a canceled caller says nothing of the source", h, msg)
	}
}

// TestConsecutiveErrorLimitNone: -1 sets no query error aside, through an
// Analysis (its Policy defaulted once): the newest evaluation failing is
// inconclusive, naming the error, though the older ones passed.
func TestConsecutiveErrorLimitNone(t *testing.T) {
	src := &script{answer: func(at time.Time) (analysis.Measurement, error) {
		if at.Equal(t0) {
			return analysis.Measurement{}, errors.New("execution: too many samples")
		}
		return analysis.Measurement{Value: 0.99, Requests: 100}, nil
	}}
	for _, tc := range []struct {
		limit int
		want  strategy.Health
		why   string
	}{
		{-1, strategy.HealthInconclusive, "1 queries in a row failed (ConsecutiveErrorLimit -1): execution: too many samples"},
		{0, strategy.HealthHealthy, "set aside (ConsecutiveErrorLimit 2): execution: too many samples"},
		{1, strategy.HealthHealthy, "set aside (ConsecutiveErrorLimit 1): execution: too many samples"},
	} {
		a := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second)))
		a.Policy.ConsecutiveErrorLimit = tc.limit
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
		if h, msg := health(t, a); h != tc.want || !strings.Contains(msg, tc.why) {
			t.Errorf("ConsecutiveErrorLimit %d: Health = %s (%s); want %s (%s)", tc.limit, h, msg, tc.want, tc.why)
		}
	}
}

// TestAllErrorsNamed: a rollout whose only evaluation so far failed to
// query, within the limit: the verdict names the error rather than saying
// that nothing was evaluated.
func TestAllErrorsNamed(t *testing.T) {
	src := &script{answer: func(time.Time) (analysis.Measurement, error) {
		return analysis.Measurement{}, errors.New("execution: too many samples")
	}}
	s := progressing()
	s.StartedAt.Time = t0.Add(-30 * time.Second) // one instant inside: t0
	a := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second)))
	h, msg, err := a.Health(rollout.WithState(context.Background(), s))
	if err != nil || h != strategy.HealthInconclusive || !strings.Contains(msg, "execution: too many samples") {
		t.Fatalf("Health = %s (%s), %v; want Inconclusive naming the error", h, msg, err)
	}
}

// waitTimer waits until a timer is set on c (the judgement's deadline).
func waitTimer(t *testing.T, c *fake.Clock) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no timer was set")
		}
		time.Sleep(time.Millisecond)
	}
}
