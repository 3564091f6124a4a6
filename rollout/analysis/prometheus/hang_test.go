package prometheus_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
	"github.com/upshift-dev/upshift/strategy"
)

// hangingServer accepts connections and reads requests but never answers
// one (until the client gives up or the test ends). It counts the requests.
type hangingServer struct {
	*httptest.Server
	requests atomic.Int32
	arrived  chan struct{}
}

func newHangingServer(t *testing.T) *hangingServer {
	t.Helper()
	h := &hangingServer{arrived: make(chan struct{}, 64)}
	release := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		h.arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(h.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handlers
	return h
}

// hungAnalysis is the analysis of docs/getting-started.md (a success rate, a latency and a
// custom query; Count 5) against src, on clk.
func hungAnalysis(src analysis.Source, clk *fake.Clock) *analysis.Analysis {
	zero := 0.0
	return &analysis.Analysis{
		Source: src, Namespace: "shop", Route: "web",
		A: analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80},
		B: analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80},
		Checks: []analysis.Check{
			analysis.SuccessRate(0.99),
			analysis.LatencyQuantile(0.9, 300*time.Millisecond),
			{Name: "restarts", Kind: analysis.KindQuery, Max: &zero,
				Query: `sum(increase(kube_pod_container_status_restarts_total{namespace="{{str .Namespace}}",pod=~"{{re .Canary.Name}}-.*"}[{{.Window}}]))`},
		},
		Policy: analysis.Policy{Interval: 10 * time.Second, FailureLimit: 1, MinRequests: 50},
		Clock:  clk,
	}
}

func hungState() strategy.State {
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt, s.StableSide = strategy.PhaseProgressing, metav1.NewMicroTime(t0.Add(-10*time.Minute)), strategy.SideA
	return s
}

// TestAnalysisHangingServer: against a Prometheus that accepts and never
// answers, a judgement sends one query, which times out (Source.Timeout),
// and no other; a reconcile before the next evaluation instant sends none;
// the next instant sends one again. (Before, every query waited for its
// own timeout: 5 instants x 3 checks, the requests queries too.)
func TestAnalysisHangingServer(t *testing.T) {
	srv := newHangingServer(t)
	src := newSource(t, srv.URL)
	src.Timeout = 100 * time.Millisecond
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := hungAnalysis(src, clk)
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		advance time.Duration
		sent    int32 // in all, after this reconcile
	}{
		{0, 1},
		{2 * time.Second, 1}, // the same evaluation instant
		{0, 1},
		{10 * time.Second, 2}, // the next one
	} {
		clk.Advance(tc.advance)
		h, msg, err := a.Health(rollout.WithState(context.Background(), hungState()))
		if err != nil || h != strategy.HealthInconclusive || !strings.Contains(msg, "deadline exceeded") {
			t.Fatalf("at %v: Health = %s (%s), %v; want Inconclusive naming the timeout", clk.Now().Sub(t0), h, msg, err)
		}
		if got := srv.requests.Load(); got != tc.sent {
			t.Fatalf("at %v: the server received %d queries in all, want %d", clk.Now().Sub(t0), got, tc.sent)
		}
	}
}

// TestAnalysisHangingServerDeadline: Policy.Timeout bounds a judgement
// on the Analysis' clock, whatever the Source's own timeout: the fake
// clock passing it ends the hung query, and nothing else is sent.
func TestAnalysisHangingServerDeadline(t *testing.T) {
	srv := newHangingServer(t)
	src := newSource(t, srv.URL)
	src.Timeout = time.Hour
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := hungAnalysis(src, clk)
	a.Policy.Timeout = 4 * time.Second
	type result struct {
		h   strategy.Health
		msg string
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, msg, err := a.Health(rollout.WithState(context.Background(), hungState()))
		done <- result{h, msg, err}
	}()
	<-srv.arrived
	clk.Advance(4 * time.Second)
	r := <-done
	if r.err != nil || r.h != strategy.HealthInconclusive || !strings.Contains(r.msg, "Policy.Timeout 4s") {
		t.Fatalf("Health = %s (%s), %v; want Inconclusive naming Policy.Timeout", r.h, r.msg, r.err)
	}
	if got := srv.requests.Load(); got != 1 {
		t.Fatalf("the server received %d queries, want 1", got)
	}
	// A gate at the same instant sends nothing either.
	s := hungState()
	s.Gate, s.StepStartedAt = "smoke", s.StartedAt
	a.Gates = map[string][]analysis.Check{"smoke": {analysis.SuccessRate(0.99)}}
	if v, err := a.Analyze(rollout.WithState(context.Background(), s), "smoke"); err != nil || v != strategy.VerdictInconclusive {
		t.Fatalf("Analyze = %s, %v; want Inconclusive", v, err)
	}
	if got := srv.requests.Load(); got != 1 {
		t.Fatalf("the server received %d queries after the gate, want still 1", got)
	}
}

// BenchmarkHangingServer reports how long a reconcile's Health takes
// against a Prometheus that never answers, with the default Policy.Timeout
// and a Source.Timeout of 50 ms: one query, then none until the next
// instant (the fake clock moves one interval per iteration).
func BenchmarkHangingServer(b *testing.B) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	src, err := prometheus.New(srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	src.Timeout = 50 * time.Millisecond
	clk := fake.NewClock(t0.Add(5 * time.Second))
	a := hungAnalysis(src, clk)
	ctx := rollout.WithState(context.Background(), hungState())
	b.ResetTimer()
	for b.Loop() {
		if h, _, _ := a.Health(ctx); h != strategy.HealthInconclusive {
			b.Fatalf("Health = %s", h)
		}
		clk.Advance(5 * time.Second) // every other reconcile meets a new instant
	}
}
