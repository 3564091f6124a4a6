package analysis_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// An Analysis as the health of a rollout: the canary's success rate through
// Traefik must stay at or above 99%, its p90 latency at or below 300 ms, and
// a custom query (here: the canary's pods restarting) at 0. One failed
// evaluation is tolerated; fewer than 20 requests in the window is no data.
// The Source here answers from a table; in a cluster it is the Prometheus
// one (module rollout/analysis/prometheus).
func Example() {
	zero := 0.0
	restarts := analysis.Check{
		Name:  "restarts",
		Kind:  analysis.KindQuery,
		Query: `sum(increase(kube_pod_container_status_restarts_total{namespace="{{str .Namespace}}",pod=~"{{re .Canary.Name}}-.*"}[{{.Window}}]))`,
		Max:   &zero,
	}
	a := &analysis.Analysis{
		Source: analysis.SourceFunc(func(_ context.Context, c *analysis.Check, _ analysis.Vars, _, _ string, at time.Time) (analysis.Measurement, error) {
			switch c.Kind {
			case analysis.KindSuccessRate:
				return analysis.Measurement{Value: 0.9, Requests: 400}, nil // 10% of the canary's requests fail
			case analysis.KindLatency:
				return analysis.Measurement{Value: 0.12, Requests: 400}, nil
			}
			return analysis.Measurement{Value: 0}, nil
		}),
		Namespace: "shop", Route: "web",
		A:      analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80},
		B:      analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80},
		Checks: []analysis.Check{analysis.SuccessRate(0.99), analysis.LatencyQuantile(0.9, 300*time.Millisecond), restarts},
		Policy: analysis.Policy{Interval: 10 * time.Second, FailureLimit: 1, MinRequests: 20},
		Clock:  fake.NewClock(time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)),
	}
	if err := a.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	// The Runner gives it the rollout's state; with one, Health tells.
	runner := &rollout.Runner{Health: a, Analyzer: a /* Strategy, Router, A, B, ... */}
	_ = runner
	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt = strategy.PhaseProgressing, metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	h, why, _ := a.Health(rollout.WithState(context.Background(), s))
	fmt.Println(h)
	fmt.Println(why)
	// Output:
	// Unhealthy
	// success-rate Fail (3 of 3 evaluations failed (limit 1): 0.9, 0.9, 0.9); latency-p90 Pass (1 evaluations in a row passed, the last at 0.12); restarts Pass (1 evaluations in a row passed, the last at 0)
}
