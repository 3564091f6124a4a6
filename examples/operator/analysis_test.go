package main_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/kubetest/promtest"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// traffic serves, on 127.0.0.1, the request counters Traefik exports for
// the route's two backends (traefik_service_requests_total, with the
// service label of Traefik's Gateway API provider): every 100 ms, 20
// requests split between the backends as the route's weights are, of which
// side B answers canaryFailures percent with a 500. A real Prometheus
// scrapes it.
type traffic struct {
	addr           string
	canaryFailures atomic.Int32
}

func serveTraffic(t *testing.T, w *world, canaryFailures int32) *traffic {
	t.Helper()
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "traefik_service_requests_total",
		Help: "How many HTTP requests processed on a service, partitioned by status code, protocol, and method."},
		[]string{"code", "method", "protocol", "service"})
	reg.MustRegister(requests)
	// The label as Traefik writes it for a backendRef of an HTTPRoute.
	n := analysis.TraefikName(w.ns)
	service := func(backend string) string {
		return fmt.Sprintf("httproute-%s-web-gw-%s-gw-ep-web-0-1c0cf64bde37d9d19ab7-svc-%s-%s-80@kubernetesgateway", n, n, n, backend)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tr := &traffic{addr: l.Addr().String()}
	tr.canaryFailures.Store(canaryFailures)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var a, b float64
			if h := w.history(); len(h) > 0 {
				if _, err := fmt.Sscanf(h[len(h)-1], "%f/%f", &a, &b); err != nil {
					t.Errorf("route split %q: %v", h[len(h)-1], err)
					return
				}
			}
			if a+b == 0 {
				continue
			}
			toB := 20 * b / (a + b)
			failed := float64(tr.canaryFailures.Load()) / 100 * toB
			requests.WithLabelValues("200", "GET", "http", service("web-a")).Add(20 - toB)
			requests.WithLabelValues("200", "GET", "http", service("web-b")).Add(toB - failed)
			requests.WithLabelValues("500", "GET", "http", service("web-b")).Add(failed)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; _ = srv.Close() })
	return tr
}

// analysisWorld is a world with Traefik's counters scraped by a real
// Prometheus every 500 ms.
func analysisWorld(t *testing.T, canaryFailures int32) (*world, *promtest.Server) {
	t.Helper()
	w := newWorld(t)
	tr := serveTraffic(t, w, canaryFailures)
	prom := promtest.Start(t, promtest.Config{
		Jobs:           []promtest.Job{{Name: "traefik", Targets: []string{tr.addr}}},
		ScrapeInterval: 500 * time.Millisecond,
	})
	return w, prom
}

// declared is spec.analysis: one evaluation a second over the last 3 s
// (6 scrapes), trailing the clock by 1 s, at least 10 requests.
func declared(address string) *analysis.Spec {
	return &analysis.Spec{
		Prometheus: &analysis.PrometheusSpec{Address: address},
		Policy: analysis.PolicySpec{Interval: metav1.Duration{Duration: time.Second}, Window: metav1.Duration{Duration: 3 * time.Second},
			Lag: metav1.Duration{Duration: time.Second}, MinRequests: 10},
	}
}

func canaryOf(steps ...strategy.CanaryStep) v1alpha1.ReleaseStrategy {
	return v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{MaxSurgePercent: 50, Steps: steps,
		Options: strategy.Options{UnhealthyThreshold: 1, PollInterval: metav1.Duration{Duration: time.Second}}}}
}

// TestAnalysisAbortsBadCanary: a Release whose spec.analysis checks the
// canary's success rate in Prometheus; v2 answers 30% of its requests with
// a 500, so once the canary has traffic (before, it has no requests: no
// data) the check fails, the canary is unhealthy and the rollout is
// aborted: all traffic back on v1, and the Aborted Event says what the
// analysis measured.
func TestAnalysisAbortsBadCanary(t *testing.T) {
	t.Parallel()
	w, prom := analysisWorld(t, 30)
	w.start("operator")
	rel := w.release("v1", canaryOf(strategy.SetWeight(25), strategy.Pause(time.Hour), strategy.SetWeight(100)))
	rel.Spec.Analysis = declared(prom.URL)
	rel.Spec.Analysis.Checks = []analysis.CheckSpec{{Name: "success-rate", SuccessRate: &analysis.SuccessRateSpec{Min: "0.95"}}}
	create(t, w.c, rel)
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	got := w.waitFor("v2 aborted", 90*time.Second, func(rel *v1alpha1.Release) bool {
		return rel.Status.Rollout.Phase == strategy.PhaseAborted
	})
	s := got.Status.Rollout
	if s.Aborted == nil || s.Aborted.Reason != strategy.ReasonUnhealthy || s.StableRevision != id("v1") || s.StableSide != strategy.SideA {
		t.Fatalf("aborted %+v, stable %s on side %s", s.Aborted, s.StableRevision, s.StableSide)
	}
	hist := w.history()
	if strings.Join(hist, " ") != "100/0 75/25 100/0" {
		t.Errorf("route %v: want the canary at 25, then all traffic back on side A", hist)
	}
	// The Event names the check, its verdict and the values measured.
	var note string
	for _, n := range w.eventNotes() {
		if strings.HasPrefix(n, "Aborted: ") {
			note = n
		}
	}
	t.Logf("route %v; %s", hist, note)
	for _, want := range []string{"Aborted: " + id("v1") + " to " + id("v2") + " aborted: Unhealthy: success-rate Fail (",
		"evaluations failed (limit 0): 0.7"} {
		if !strings.Contains(note, want) {
			t.Errorf("the Aborted Event %q does not say %q", note, want)
		}
	}
}

// TestAnalysisGate: a gate step judged by spec.analysis: the canary
// answers every request, so the gate passes without a promote and v2 is
// released.
func TestAnalysisGate(t *testing.T) {
	t.Parallel()
	w, prom := analysisWorld(t, 0)
	w.start("operator")
	rel := w.release("v1", canaryOf(strategy.SetWeight(50), strategy.Gate("smoke"), strategy.SetWeight(100)))
	rel.Spec.Analysis = declared(prom.URL)
	rel.Spec.Analysis.Gates = []analysis.GateSpec{{Name: "smoke", Checks: []analysis.CheckSpec{
		{Name: "success-rate", SuccessRate: &analysis.SuccessRateSpec{Min: "0.99"}},
		{Name: "requests", Query: &analysis.QuerySpec{
			Query: `sum(increase(traefik_service_requests_total{service=~"` + analysis.TraefikService + `"}[{{.Window}}]))`,
			Min:   new(analysis.Decimal("10"))}},
	}}}
	create(t, w.c, rel)
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("at the gate", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Gate == "smoke" })
	got := w.waitFor("v2 released", 90*time.Second, released)
	if s := got.Status.Rollout; s.StableRevision != id("v2") || s.StableSide != strategy.SideB || s.Aborted != nil {
		t.Fatalf("ended with stable %s on side %s, aborted %+v", s.StableRevision, s.StableSide, s.Aborted)
	}
	hist := w.history()
	checkForward(t, hist, "B", 50)
	if !strings.Contains(strings.Join(hist, " "), "50/50") {
		t.Errorf("route %v: want 50/50 at the gate", hist)
	}
	if rel := w.get(); rel.Status.Rollout.Handled.Promote != "" {
		t.Errorf("promoted by %q: want the gate passed by the analysis", rel.Status.Rollout.Handled.Promote)
	}
}

// TestUndeclaredGateRefused: a gate step naming a gate that spec.analysis
// does not declare could only pass by a promote: the Release is refused
// with Degraded (InvalidSpec) and a Warning Event naming the step, and
// nothing moves.
func TestUndeclaredGateRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	rel := w.release("v1", canaryOf(strategy.SetWeight(50), strategy.Gate("smoke")))
	rel.Spec.Analysis = declared("http://127.0.0.1:1")
	rel.Spec.Analysis.Gates = []analysis.GateSpec{{Name: "smok", Checks: []analysis.CheckSpec{
		{Name: "success-rate", SuccessRate: &analysis.SuccessRateSpec{Min: "0.99"}}}}}
	create(t, w.c, rel)
	const msg = `spec.strategy.canary.steps[1].gate.name: gate "smoke" is not declared in spec.analysis.gates`
	w.waitFor("refused", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return condition(rel, strategy.ConditionDegraded, metav1.ConditionTrue) && strings.Contains(degraded(rel), msg)
	})
	containsAll(t, "events", w.eventNotes(), "InvalidSpec: "+msg)
	if got := w.history(); len(got) > 1 {
		t.Errorf("route %v: the refused Release moved traffic", got)
	}
}

func degraded(rel *v1alpha1.Release) string {
	for _, c := range rel.Status.Conditions {
		if c.Type == strategy.ConditionDegraded {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}
