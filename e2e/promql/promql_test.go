package promql_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/kubetest/promtest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
	"github.com/upshift-dev/upshift/strategy"
)

// The route and its backends: names Kubernetes accepts, as Traefik's
// Gateway API provider labels them (the route's dots become dashes).
const (
	namespace = "shop-prod"
	route     = "web.v2"
	stable    = "web-v2-stable"
	canary    = "web-v2-canary"
	port      = 8080
)

// gatewayLabel is the service label Traefik gives backendRefs[idx] of the
// route's first rule, through Gateway gw's entry point web.
func gatewayLabel(service string, idx int) string {
	return fmt.Sprintf("httproute-%s-%s-gw-%s-gw-ep-web-0-0123456789abcdef0123-svc-%s-%s-%d@kubernetesgateway",
		namespace, analysis.TraefikName(route), namespace, namespace, service, idx)
}

// ingressLabel is the service label of Traefik's Kubernetes Ingress and
// CRD providers: <namespace>-<service>-<port>@kubernetes.
func ingressLabel(service string) string {
	return fmt.Sprintf("%s-%s-%d@kubernetes", namespace, service, port)
}

// backend is one service label's traffic: ok and failed (5xx) requests per
// second, every one answered within 100 ms.
type backend struct {
	label      string
	ok, failed float64
}

// exporter exposes the backends' Traefik metrics, counters growing with the
// time since start.
type exporter struct {
	start    time.Time
	backends []backend
	addr     string
}

func startExporter(t *testing.T, backends ...backend) *exporter {
	t.Helper()
	e := &exporter{start: time.Now(), backends: backends}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	e.addr = strings.TrimPrefix(srv.URL, "http://")
	return e
}

func (e *exporter) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	secs := time.Since(e.start).Seconds()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	b.WriteString("# TYPE traefik_service_requests_total counter\n")
	for _, be := range e.backends {
		for _, c := range []struct {
			code string
			rate float64
		}{{"200", be.ok}, {"500", be.failed}} {
			fmt.Fprintf(&b, "traefik_service_requests_total{code=%q,method=\"GET\",protocol=\"http\",service=%q} %g\n", c.code, be.label, c.rate*secs)
		}
	}
	b.WriteString("# TYPE traefik_service_request_duration_seconds histogram\n")
	for _, be := range e.backends {
		n := (be.ok + be.failed) * secs
		for _, le := range []string{"0.1", "0.3", "1.2", "+Inf"} {
			fmt.Fprintf(&b, "traefik_service_request_duration_seconds_bucket{code=\"200\",method=\"GET\",protocol=\"http\",service=%q,le=%q} %g\n", be.label, le, n)
		}
		fmt.Fprintf(&b, "traefik_service_request_duration_seconds_sum{code=\"200\",method=\"GET\",protocol=\"http\",service=%q} %g\n", be.label, 0.05*n)
		fmt.Fprintf(&b, "traefik_service_request_duration_seconds_count{code=\"200\",method=\"GET\",protocol=\"http\",service=%q} %g\n", be.label, n)
	}
	_, _ = w.Write([]byte(b.String()))
}

// setup starts the exporter (a healthy canary, a stable side failing half
// its requests, both under the Gateway API and the Ingress labels) and a
// Prometheus scraping it.
func setup(t *testing.T) (*promtest.Server, *exporter) {
	t.Helper()
	exp := startExporter(t,
		backend{label: gatewayLabel(canary, 1), ok: 40},
		backend{label: gatewayLabel(stable, 0), ok: 20, failed: 20},
		backend{label: ingressLabel(canary), ok: 40},
		backend{label: ingressLabel(stable), ok: 20, failed: 20},
	)
	prom := promtest.Start(t, promtest.Config{
		Jobs:           []promtest.Job{{Name: "traefik", Targets: []string{exp.addr}}},
		ScrapeInterval: 250 * time.Millisecond,
	})
	return prom, exp
}

// checks are the built-in checks and custom ones through the template
// functions, on both kinds of labels.
func checks() []analysis.Check {
	min := 0.99
	return []analysis.Check{
		analysis.SuccessRate(0.99),
		analysis.LatencyQuantile(0.9, 300*time.Millisecond),
		{Name: "ingress-str", Kind: analysis.KindQuery, Min: &min,
			Query: `sum(rate(traefik_service_requests_total{service="{{str .Canary.Namespace}}-{{str .Canary.Name}}-{{.Canary.Port}}@kubernetes",code!~"5.."}[{{.Window}}]))` +
				` / sum(rate(traefik_service_requests_total{service="{{str .Canary.Namespace}}-{{str .Canary.Name}}-{{.Canary.Port}}@kubernetes"}[{{.Window}}]))`},
		{Name: "ingress-re", Kind: analysis.KindQuery, Min: &min,
			Query: `sum(rate(traefik_service_requests_total{service=~"{{re .Canary.Namespace}}-{{re .Canary.Name}}-[0-9]+@kubernetes",code!~"5.."}[{{.Window}}]))` +
				` / sum(rate(traefik_service_requests_total{service=~"{{re .Canary.Namespace}}-{{re .Canary.Name}}-[0-9]+@kubernetes"}[{{.Window}}]))`},
		{Name: "route-traefik", Kind: analysis.KindQuery, Min: &min,
			Query: `sum(rate(traefik_service_requests_total{service=~"httproute-{{re (traefik .Namespace)}}-{{re (traefik .Route)}}-gw-.*-svc-{{re .Canary.Namespace}}-{{re .Canary.Name}}-[0-9]+@kubernetesgateway",code!~"5.."}[{{.Window}}]))` +
				` / sum(rate(traefik_service_requests_total{service=~"httproute-{{re (traefik .Namespace)}}-{{re (traefik .Route)}}-gw-.*-svc-{{re .Canary.Namespace}}-{{re .Canary.Name}}-[0-9]+@kubernetesgateway"}[{{.Window}}]))`},
	}
}

// judgeUntil judges the health of a rollout started when the exporter
// started, with the canary on canarySide, until it is want or a minute has
// passed, and returns the last verdict.
func judgeUntil(t *testing.T, a *analysis.Analysis, exp *exporter, stableSide strategy.Side, want strategy.Health) (strategy.Health, string) {
	t.Helper()
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt, s.StableSide = strategy.PhaseProgressing, metav1.NewMicroTime(exp.start), stableSide
	ctx := rollout.WithState(context.Background(), s)
	var h strategy.Health
	var msg string
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var err error
		h, msg, err = a.Health(ctx)
		if err != nil {
			t.Fatalf("Health: %v", err)
		}
		if h == want {
			break
		}
	}
	return h, msg
}

// TestChecksWithHostileNames: every check judges the canary, and only the
// canary, of the route web.v2 through a real Prometheus: Healthy with the
// healthy backend as the canary, Unhealthy with the failing one; no query
// error on the way (Prometheus parses every rendered query).
func TestChecksWithHostileNames(t *testing.T) {
	prom, exp := setup(t)
	src, err := prometheus.New(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &analysis.Analysis{
		Source: src, Namespace: namespace, Route: route,
		A:      analysis.ServiceRef{Namespace: namespace, Name: stable, Port: port},
		B:      analysis.ServiceRef{Namespace: namespace, Name: canary, Port: port},
		Checks: checks(),
		Policy: analysis.Policy{Interval: time.Second, Window: 2 * time.Second, Lag: time.Second, MinRequests: 10, ConsecutiveErrorLimit: analysis.NoConsecutiveErrors},
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	h, msg := judgeUntil(t, a, exp, strategy.SideA, strategy.HealthHealthy)
	if h != strategy.HealthHealthy {
		t.Fatalf("the healthy canary: Health = %s (%s)", h, msg)
	}
	for _, c := range checks() {
		if !strings.Contains(msg, c.Name+" Pass") {
			t.Errorf("check %s did not pass: %s", c.Name, msg)
		}
	}
	t.Logf("healthy canary: %s", msg)

	// The failing backend as the canary (side A): only it is read.
	h, msg = judgeUntil(t, a, exp, strategy.SideB, strategy.HealthUnhealthy)
	if h != strategy.HealthUnhealthy {
		t.Fatalf("the failing canary: Health = %s (%s)", h, msg)
	}
	for _, name := range []string{"success-rate", "ingress-str", "ingress-re", "route-traefik"} {
		if !strings.Contains(msg, name+" Fail") {
			t.Errorf("check %s did not fail: %s", name, msg)
		}
	}
	if !strings.Contains(msg, "latency-p90 Pass") {
		t.Errorf("latency (within 100 ms on both backends) did not pass: %s", msg)
	}
	if strings.Contains(msg, "queries in a row failed") || strings.Contains(msg, "set aside") {
		t.Errorf("a query failed: %s", msg)
	}
	t.Logf("failing canary: %s", msg)
}

// TestRegexpEscapingAlone: what the built-in checks sent before their
// names were escaped for a PromQL string (regexp.QuoteMeta alone: a
// backslash before the dot) is a query Prometheus refuses; the same
// regular expression with its backslash escaped for the string is
// accepted and matches the name literally.
func TestRegexpEscapingAlone(t *testing.T) {
	prom, _ := setup(t)
	ctx := context.Background()
	bad := `sum(traefik_service_requests_total{service=~"` + regexp.QuoteMeta(route) + `"})`
	if _, err := prom.Query(ctx, bad); err == nil || !strings.Contains(err.Error(), "unknown escape sequence") {
		t.Fatalf("Query(%s) = %v, want Prometheus' unknown escape sequence", bad, err)
	}
	good := `count(traefik_service_requests_total{service=~"` + analysis.PromQLRegexp(ingressLabel(canary)) + `"}) or vector(0)`
	var got []promtest.Sample
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var err error
		if got, err = prom.Query(ctx, good); err != nil {
			t.Fatalf("Query(%s): %v", good, err)
		}
		if len(got) == 1 && got[0].Value == 2 {
			break
		}
	}
	if len(got) != 1 || got[0].Value != 2 {
		t.Fatalf("Query(%s) = %+v, want the 2 series (200 and 500) of %s", good, got, ingressLabel(canary))
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestPrometheusStopped: with Prometheus stopped, a judgement sends one
// query (connection refused: the source is unavailable) and no other, a
// second one at the same evaluation instant sends none, and once Prometheus
// is back the canary is judged healthy again. The Analysis runs on a fake
// clock set from the wall clock, so the test chooses when an evaluation
// instant passes.
func TestPrometheusStopped(t *testing.T) {
	prom, exp := setup(t)
	rt := &countingTransport{}
	src, err := prometheus.New(prom.URL, rt)
	if err != nil {
		t.Fatal(err)
	}
	clk := fake.NewClock(time.Now())
	a := &analysis.Analysis{
		Source: src, Namespace: namespace, Route: route,
		A:      analysis.ServiceRef{Namespace: namespace, Name: stable, Port: port},
		B:      analysis.ServiceRef{Namespace: namespace, Name: canary, Port: port},
		Checks: checks(),
		Policy: analysis.Policy{Interval: time.Second, Window: 2 * time.Second, Lag: time.Second, MinRequests: 10, ConsecutiveErrorLimit: analysis.NoConsecutiveErrors},
		Clock:  clk,
	}
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt, s.StableSide = strategy.PhaseProgressing, metav1.NewMicroTime(exp.start), strategy.SideA
	ctx := rollout.WithState(context.Background(), s)
	healthy := func() (strategy.Health, string) {
		var h strategy.Health
		var msg string
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			clk.Set(time.Now())
			if h, msg, err = a.Health(ctx); err != nil {
				t.Fatalf("Health: %v", err)
			}
			if h == strategy.HealthHealthy {
				break
			}
		}
		return h, msg
	}
	if h, msg := healthy(); h != strategy.HealthHealthy {
		t.Fatalf("before the stop: Health = %s (%s)", h, msg)
	}
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // the next evaluation instant
	n := rt.n.Load()
	h, msg, err := a.Health(ctx)
	if err != nil || h != strategy.HealthInconclusive || !strings.Contains(msg, "connection refused") {
		t.Fatalf("Prometheus stopped: Health = %s (%s), %v; want Inconclusive naming the refused connection", h, msg, err)
	}
	if got := rt.n.Load() - n; got != 1 {
		t.Fatalf("Prometheus stopped: %d requests for a judgement, want 1", got)
	}
	n = rt.n.Load()
	if h, _, _ := a.Health(ctx); h != strategy.HealthInconclusive || rt.n.Load() != n {
		t.Fatalf("again at the same instant: Health %s, %d requests; want Inconclusive and none", h, rt.n.Load()-n)
	}
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	if h, msg := healthy(); h != strategy.HealthHealthy {
		t.Fatalf("Prometheus back: Health = %s (%s)", h, msg)
	}
}
