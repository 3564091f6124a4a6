package analysis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// A Spec as it comes from a CRD's spec (here JSON; YAML in a manifest):
// validated with the paths of its fields, then built into the Analysis
// that a Runner takes as its HealthChecker and its Analyzer. In a cluster
// the Source is prometheus.New(spec.Prometheus.Address, nil), of the
// module rollout/analysis/prometheus; here it answers from a table.
func ExampleSpec_Build() {
	const manifest = `{
	  "prometheus": {"address": "http://prometheus.monitoring:9090"},
	  "checks": [{"name": "success", "successRate": {"min": "0.99"}}],
	  "gates": [{"name": "smoke", "checks": [{"name": "p90", "latency": {"quantile": "0.9", "max": "300ms"}}]}],
	  "policy": {"interval": "10s", "failureLimit": 1, "minRequests": 20}
	}`
	var spec analysis.Spec
	if err := json.Unmarshal([]byte(manifest), &spec); err != nil {
		fmt.Println(err)
		return
	}

	bad := spec
	bad.Checks = []analysis.CheckSpec{{Name: "success", SuccessRate: &analysis.SuccessRateSpec{Min: "99%"}}}
	fmt.Println(bad.Validate())

	source := analysis.SourceFunc(func(_ context.Context, c *analysis.Check, _ analysis.Vars, _, _ string, _ time.Time) (analysis.Measurement, error) {
		if c.Kind == analysis.KindSuccessRate {
			return analysis.Measurement{Value: 0.9, Requests: 400}, nil // 10% of the canary's requests fail
		}
		return analysis.Measurement{Value: 0.12, Requests: 400}, nil
	})
	a, err := spec.Build(source, analysis.Target{Namespace: "shop", Route: "web",
		A: analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80},
		B: analysis.ServiceRef{Namespace: "shop", Name: "web-b", Port: 80}})
	if err != nil {
		fmt.Println(err)
		return
	}
	a.Clock = fake.NewClock(time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC))
	runner := &rollout.Runner{Health: a, Analyzer: a /* Strategy, Router, A, B, ... */}
	_ = runner

	s := strategy.NewState("v1", "v2")
	s.Phase, s.StartedAt = strategy.PhaseProgressing, metav1.NewMicroTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	ctx := rollout.WithState(context.Background(), s)
	h, why, _ := a.Health(ctx)
	fmt.Println(h, "-", why)
	v, _ := a.Analyze(ctx, "smoke")
	fmt.Println("gate smoke:", v)
	// Output:
	// analysis: invalid spec: checks[0].successRate.min: Invalid value: "99%": "99%" is not a number in decimal notation ("0.99", written as a string)
	// Unhealthy - success Fail (3 of 3 evaluations failed (limit 1): 0.9, 0.9, 0.9)
	// gate smoke: Pass
}
