package prometheus_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
	"github.com/upshift-dev/upshift/strategy"
)

// A rollout's health from Prometheus: the canary's success rate through
// Traefik at or above 99%, its p90 latency at or below 300 ms, and a custom
// query (the canary's pods restarting) at 0. Here a stand-in answers the
// HTTP API; in a cluster the address is the Prometheus service's
// ("http://prometheus-operated.monitoring:9090", say).
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.FormValue("query")
		v := "0.995" // success rate
		switch {
		case strings.HasPrefix(q, "sum(increase(traefik_service_requests_total"):
			v = "1200" // requests in the window
		case strings.HasPrefix(q, "histogram_quantile(0.9,"):
			v = "0.21" // seconds
		case strings.Contains(q, "kube_pod_container_status_restarts_total"):
			v = "0"
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[%s,%q]}]}}`, r.FormValue("time"), v)
	}))
	defer srv.Close()

	src, err := prometheus.New(srv.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	zero := 0.0
	restarts := analysis.Check{
		Name:  "restarts",
		Kind:  analysis.KindQuery,
		Query: `sum(increase(kube_pod_container_status_restarts_total{namespace="{{str .Namespace}}",pod=~"{{re .Canary.Name}}-.*"}[{{.Window}}]))`,
		Max:   &zero,
	}
	a := &analysis.Analysis{
		Source:    src,
		Namespace: "shop", Route: "web",
		A:      analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80},
		B:      analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80},
		Checks: []analysis.Check{analysis.SuccessRate(0.99), analysis.LatencyQuantile(0.9, 300*time.Millisecond), restarts},
		Policy: analysis.Policy{Interval: 10 * time.Second, FailureLimit: 1, MinRequests: 20},
		Clock:  fake.NewClock(time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)), // the Runner's clock
	}
	if err := a.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	// The analysis is the Runner's health and its gates' analyzer.
	runner := &rollout.Runner{Health: a, Analyzer: a /* Strategy, Router, A, B, Clock, ... */}
	_ = runner

	// The Runner hands it the rollout's state; with one, Health judges.
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt = strategy.PhaseProgressing, metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	h, why, err := a.Health(rollout.WithState(context.Background(), s))
	fmt.Println(h, err)
	for _, c := range strings.Split(why, "; ") {
		fmt.Println(c)
	}
	// Output:
	// Healthy <nil>
	// success-rate Pass (1 evaluations in a row passed, the last at 0.995)
	// latency-p90 Pass (1 evaluations in a row passed, the last at 0.21)
	// restarts Pass (1 evaluations in a row passed, the last at 0)
}
