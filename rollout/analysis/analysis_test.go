package analysis_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// script is a Source whose answers are a function of the instant.
type script struct {
	mu      sync.Mutex
	answer  func(at time.Time) (analysis.Measurement, error)
	queries []string
	ats     []time.Time
}

func (s *script) Measure(_ context.Context, _ *analysis.Check, _ analysis.Vars, q, _ string, at time.Time) (analysis.Measurement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries = append(s.queries, q)
	s.ats = append(s.ats, at)
	return s.answer(at)
}

func rate(v float64) func(time.Time) (analysis.Measurement, error) {
	return func(time.Time) (analysis.Measurement, error) {
		return analysis.Measurement{Value: v, Requests: 100}, nil
	}
}

// progressing is a rollout started at t0 - 10m with side A stable.
func progressing() strategy.State {
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt, s.StableSide = strategy.PhaseProgressing, metav1.NewMicroTime(t0.Add(-10*time.Minute)), strategy.SideA
	return s
}

func newAnalysis(src analysis.Source, clk *fake.Clock) *analysis.Analysis {
	return &analysis.Analysis{
		Source: src, Namespace: "shop", Route: "web",
		A: analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80}, B: analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80},
		Checks: []analysis.Check{analysis.SuccessRate(0.95)},
		Gates:  map[string][]analysis.Check{"smoke": {analysis.SuccessRate(0.95)}},
		Policy: analysis.Policy{Interval: 10 * time.Second, Window: 30 * time.Second, FailureLimit: 1, MinRequests: 10, Lag: 2 * time.Second},
		Clock:  clk,
	}
}

func TestHealth(t *testing.T) {
	down := func(time.Time) (analysis.Measurement, error) {
		return analysis.Measurement{}, errors.New("connection refused")
	}
	for _, tc := range []struct {
		name   string
		answer func(time.Time) (analysis.Measurement, error)
		want   strategy.Health
	}{
		{"healthy", rate(0.99), strategy.HealthHealthy},
		{"failing", rate(0.5), strategy.HealthUnhealthy},
		{"one failure in the limit, the newest", func(at time.Time) (analysis.Measurement, error) {
			if at.Equal(t0) {
				return analysis.Measurement{Value: 0.5, Requests: 100}, nil
			}
			return analysis.Measurement{Value: 0.99, Requests: 100}, nil
		}, strategy.HealthInconclusive},
		{"no data", func(time.Time) (analysis.Measurement, error) { return analysis.Measurement{NoData: true}, nil }, strategy.HealthInconclusive},
		{"too few requests", func(time.Time) (analysis.Measurement, error) {
			return analysis.Measurement{Value: 0.2, Requests: 3}, nil
		}, strategy.HealthInconclusive},
		{"source down", down, strategy.HealthInconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &script{answer: tc.answer}
			a := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second)))
			if err := a.Validate(); err != nil {
				t.Fatal(err)
			}
			h, msg, err := a.Health(rollout.WithState(context.Background(), progressing()))
			if err != nil || h != tc.want {
				t.Fatalf("Health = %s (%s), %v; want %s", h, msg, err, tc.want)
			}
			// Evaluations at aligned instants trailing the clock by the lag,
			// newest first; the canary is side B.
			if want := t0.Add(0); !src.ats[0].Equal(want) {
				t.Errorf("newest evaluation at %v, want %v", src.ats[0], want)
			}
			if q := src.queries[0]; !strings.Contains(q, "web-b") || strings.Contains(q, "web-a") {
				t.Errorf("the query does not select the canary side's backend (web-b) alone: %s", q)
			}
			// Again: from the cache, no query; a new Analysis (a restart)
			// judges the same.
			n := len(src.queries)
			h2, _, _ := a.Health(rollout.WithState(context.Background(), progressing()))
			if tc.want != strategy.HealthInconclusive || tc.name != "source down" {
				if len(src.queries) != n {
					t.Errorf("%d more queries for a judgement already made", len(src.queries)-n)
				}
			}
			h3, _, _ := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second))).Health(rollout.WithState(context.Background(), progressing()))
			if h2 != h || h3 != h {
				t.Errorf("judged %s, then %s, then after a restart %s", h, h2, h3)
			}
		})
	}
}

// TestHealthOnlyInsideTheRollout: evaluations whose window starts before
// the rollout are not made; at the start there are none, so the health is
// inconclusive (and the strategy treats it as unknown at weight 0).
func TestHealthOnlyInsideTheRollout(t *testing.T) {
	src := &script{answer: rate(0.5)}
	s := progressing()
	s.StartedAt = metav1.NewMicroTime(t0.Add(-25 * time.Second))
	a := newAnalysis(src, fake.NewClock(t0.Add(2*time.Second)))
	h, msg, err := a.Health(rollout.WithState(context.Background(), s))
	if err != nil || h != strategy.HealthInconclusive {
		t.Fatalf("Health = %s (%s), %v", h, msg, err)
	}
	if len(src.ats) != 0 {
		t.Fatalf("evaluated at %v, before the rollout's window", src.ats)
	}
	a.Clock = fake.NewClock(t0.Add(12 * time.Second))
	h, _, _ = a.Health(rollout.WithState(context.Background(), s))
	if h != strategy.HealthInconclusive || len(src.ats) != 1 || !src.ats[0].Equal(t0.Add(10*time.Second)) {
		t.Fatalf("Health %s, evaluations %v: want one, at t0+10s (failure 1 of limit 1)", h, src.ats)
	}
}

func TestGate(t *testing.T) {
	s := progressing()
	s.Gate = "smoke"
	s.StepStartedAt = metav1.NewMicroTime(t0.Add(-40 * time.Second))
	ctx := rollout.WithState(context.Background(), s)
	// Count defaults to 1 + 1 + 2 + 1 = 5: at t0+2s the gate's evaluations
	// are those at t0 and t0-10s (whose 30s windows start after the step),
	// too few for an inconclusive verdict; at t0+32s there are 5.
	nodata := &script{answer: func(time.Time) (analysis.Measurement, error) { return analysis.Measurement{NoData: true}, nil }}
	if v, err := newAnalysis(nodata, fake.NewClock(t0.Add(2*time.Second))).Analyze(ctx, "smoke"); err != nil || v != strategy.VerdictPending {
		t.Fatalf("no data early in the gate: %s, %v; want Pending", v, err)
	}
	if v, _ := newAnalysis(nodata, fake.NewClock(t0.Add(32*time.Second))).Analyze(ctx, "smoke"); v != strategy.VerdictInconclusive {
		t.Fatalf("no data through Count evaluations: %s; want Inconclusive", v)
	}
	if v, _ := newAnalysis(&script{answer: rate(0.99)}, fake.NewClock(t0.Add(2*time.Second))).Analyze(ctx, "smoke"); v != strategy.VerdictPass {
		t.Fatalf("passing: %s", v)
	}
	if v, _ := newAnalysis(&script{answer: rate(0.1)}, fake.NewClock(t0.Add(2*time.Second))).Analyze(ctx, "smoke"); v != strategy.VerdictFail {
		t.Fatalf("failing: %s", v)
	}
	if _, err := newAnalysis(&script{answer: rate(0.99)}, fake.NewClock(t0)).Analyze(ctx, "smoek"); err == nil {
		t.Fatal("a gate without checks passed")
	}
}

func TestValidate(t *testing.T) {
	lo := 0.5
	for _, tc := range []struct {
		name  string
		edit  func(*analysis.Analysis)
		field string
	}{
		{"no source", func(a *analysis.Analysis) { a.Source = nil }, "Source"},
		{"no checks", func(a *analysis.Analysis) { a.Checks, a.Gates = nil, nil }, "Checks"},
		{"empty query", func(a *analysis.Analysis) { a.Checks = []analysis.Check{{Min: &lo}} }, "Checks[0].Query"},
		{"bad template", func(a *analysis.Analysis) { a.Checks = []analysis.Check{{Query: "{{.Nope", Min: &lo}} }, "Checks[0].Query"},
		{"no range", func(a *analysis.Analysis) { a.Checks = []analysis.Check{{Query: "up"}} }, "Checks[0].Max"},
		{"bad quantile", func(a *analysis.Analysis) {
			c := analysis.LatencyQuantile(0.9, time.Second)
			c.Quantile = 1
			a.Gates = map[string][]analysis.Check{"g": {c}}
		}, "Gates[g][0].Quantile"},
		{"negative interval", func(a *analysis.Analysis) { a.Policy.Interval = -1 }, "Policy.Interval"},
		{"count too small", func(a *analysis.Analysis) { a.Policy.Count, a.Policy.FailureLimit = 2, 2 }, "Policy.Count"},
		{"error limit below -1", func(a *analysis.Analysis) { a.Policy.ConsecutiveErrorLimit = -2 }, "Policy.ConsecutiveErrorLimit"},
		{"negative lag", func(a *analysis.Analysis) { a.Policy.Lag = -time.Second }, "Policy.Lag"},
		{"negative timeout", func(a *analysis.Analysis) { a.Policy.Timeout = -time.Second }, "Policy.Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAnalysis(&script{answer: rate(1)}, fake.NewClock(t0))
			tc.edit(a)
			var fe *analysis.FieldError
			if err := a.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate = %v, want a FieldError naming %s", err, tc.field)
			}
		})
	}
}

func TestBuiltinQueries(t *testing.T) {
	src := &script{answer: rate(1)}
	a := newAnalysis(src, fake.NewClock(t0.Add(5*time.Second)))
	a.Checks = []analysis.Check{analysis.LatencyQuantile(0.99, 250*time.Millisecond)}
	s := progressing()
	s.StableSide = strategy.SideB // the canary is side A now
	if _, _, err := a.Health(rollout.WithState(context.Background(), s)); err != nil {
		t.Fatal(err)
	}
	want := `histogram_quantile(0.99, sum by (le) (rate(traefik_service_request_duration_seconds_bucket{service=~"httproute-shop-web-gw-.*-svc-shop-web-a-[0-9]+@kubernetesgateway"}[30s])))`
	if got := src.queries[0]; got != want {
		t.Errorf("query\n got %s\nwant %s", got, want)
	}
	if c := analysis.LatencyQuantile(0.99, 250*time.Millisecond); c.Name != "latency-p99" || *c.Max != 0.25 || math.IsNaN(*c.Max) {
		t.Errorf("LatencyQuantile = %+v", c)
	}
}
