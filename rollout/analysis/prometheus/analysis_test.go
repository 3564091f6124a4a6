package prometheus_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// isRequests tells the built-in checks' requests query (an increase over
// the window) from their value query (rates).
func isRequests(query string) bool { return strings.HasPrefix(query, "sum(increase(") }

// canary answers the built-in success-rate check: rate(at) as the success
// rate and requests(at) as the request count ("" is an empty vector).
func canary(rate, requests func(at time.Time) string) func(string, time.Time) reply {
	return func(query string, at time.Time) reply {
		v := rate(at)
		if isRequests(query) {
			v = requests(at)
		}
		if v == "" {
			return vector()
		}
		return vector(v)
	}
}

func always(v string) func(time.Time) string { return func(time.Time) string { return v } }

// TestAnalysis runs an Analysis on this Source against the fake Prometheus.
// The clock is at t0+5s and the lag 1s: the evaluations are at t0, t0-10s,
// ..., t0-40s (Count: 1 failure + 1 success + 2 errors + 1 = 5).
func TestAnalysis(t *testing.T) {
	at := func(instants ...time.Duration) func(time.Time) bool {
		return func(x time.Time) bool {
			for _, d := range instants {
				if x.Equal(t0.Add(d)) {
					return true
				}
			}
			return false
		}
	}
	// rateAt is 0.99 but v at the given instants.
	rateAt := func(v string, when func(time.Time) bool) func(time.Time) string {
		return func(x time.Time) string {
			if when(x) {
				return v
			}
			return "0.99"
		}
	}
	// failingAt answers an error of the query itself (an execution error:
	// Prometheus answered, about this query) at the given instants and a
	// healthy canary else.
	failingAt := func(when func(time.Time) bool) func(string, time.Time) reply {
		ok := canary(always("0.99"), always("100"))
		return func(query string, x time.Time) reply {
			if when(x) {
				return apiError(http.StatusUnprocessableEntity, "execution", "query processing would load too many samples into memory")
			}
			return ok(query, x)
		}
	}
	// unavailable answers 503 without an answer of the API, as a proxy in
	// front of a Prometheus that is down.
	unavailable := func(string, time.Time) reply {
		return reply{status: http.StatusServiceUnavailable, body: "Service Unavailable"}
	}
	for _, tc := range []struct {
		name   string
		answer func(string, time.Time) reply // nil: the server is down
		want   strategy.Health
		why    string // in the message
		sent   int    // the queries the server received; 0: any
	}{
		{"healthy", canary(always("0.99"), always("100")), strategy.HealthHealthy, "passed", 0},
		{"one failure within the limit, earlier", canary(rateAt("0.5", at(-20*time.Second)), always("100")), strategy.HealthHealthy, "passed", 0},
		{"failing at two instants", canary(rateAt("0.5", at(0, -30*time.Second)), always("100")), strategy.HealthUnhealthy, "2 of 5 evaluations failed", 0},
		{"failing throughout", canary(always("0.5"), always("100")), strategy.HealthUnhealthy, "failed", 0},
		{"no data", canary(always(""), always("")), strategy.HealthInconclusive, "no data", 0},
		{"NaN over no requests", canary(always("NaN"), always("")), strategy.HealthInconclusive, "no data", 0},
		{"fewer requests than MinRequests", canary(always("0.2"), always("3")), strategy.HealthInconclusive, "too few requests", 0},
		{"server down", nil, strategy.HealthInconclusive, "5 queries in a row failed", 0},
		{"errors within ConsecutiveErrorLimit", failingAt(at(0, -10*time.Second)), strategy.HealthHealthy, "passed", 0},
		{"more errors than ConsecutiveErrorLimit", failingAt(at(0, -10*time.Second, -20*time.Second)), strategy.HealthInconclusive, "3 queries in a row failed", 0},
		// A 503 says Prometheus cannot answer at all: the first ends the
		// judgement, the other evaluations are not queried.
		{"unavailable: one query, then none", unavailable, strategy.HealthInconclusive, "5 queries in a row failed (ConsecutiveErrorLimit 2): prometheus: query", 1},
		{"a bad query", func(string, time.Time) reply { return apiError(http.StatusBadRequest, "bad_data", "parse error") }, strategy.HealthInconclusive, "bad_data", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := tc.answer
			if answer == nil {
				answer = func(string, time.Time) reply { return vector("1") }
			}
			srv := newPromServer(t, answer)
			src := newSource(t, srv.URL)
			if tc.answer == nil {
				srv.Close()
			}
			a := &analysis.Analysis{
				Source: src, Namespace: "shop", Route: "web",
				A:      analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80},
				B:      analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80},
				Checks: []analysis.Check{analysis.SuccessRate(0.95)},
				Policy: analysis.Policy{Interval: 10 * time.Second, Lag: time.Second, Window: 30 * time.Second, FailureLimit: 1, MinRequests: 10},
				Clock:  fake.NewClock(t0.Add(5 * time.Second)),
			}
			if err := a.Validate(); err != nil {
				t.Fatal(err)
			}
			s := strategy.NewState("v1", "v2")
			s.Phase, s.StartedAt, s.StableSide = strategy.PhaseProgressing, metav1.NewMicroTime(t0.Add(-10*time.Minute)), strategy.SideA
			h, why, err := a.Health(rollout.WithState(context.Background(), s))
			if err != nil || h != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("Health = %s (%s), %v; want %s (%s)", h, why, err, tc.want, tc.why)
			}
			if tc.answer == nil {
				return
			}
			// Every query is about the canary (side B), at the aligned
			// instants.
			rs := srv.received()
			if len(rs) == 0 {
				t.Fatal("no query")
			}
			if tc.sent > 0 && len(rs) != tc.sent {
				t.Errorf("the server received %d queries, want %d", len(rs), tc.sent)
			}
			seen := map[int64]bool{}
			for _, r := range rs {
				if !strings.Contains(r.query, "-svc-shop-web-b-") || strings.Contains(r.query, "web-a") {
					t.Errorf("the query does not select the canary's backend (web-b) alone: %s", r.query)
				}
				at := parseTime(t, r.time)
				seen[at.UnixNano()] = true
				if d := t0.Sub(at); d < 0 || d%(10*time.Second) != 0 {
					t.Errorf("a query at %v: want an instant aligned to 10s, at t0 or before", at)
				}
			}
			if !seen[t0.UnixNano()] {
				t.Errorf("no query at the newest instant %v", t0)
			}
		})
	}
}
