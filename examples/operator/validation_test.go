package main_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/kubetest"
)

// TestInvalidSpecsRejected: the API server, with the generated CRD,
// refuses Releases whose spec the operator could not roll out, and names
// the field; a valid spec of each strategy is accepted.
func TestInvalidSpecsRejected(t *testing.T) {
	t.Parallel()
	env := kubetest.Get(t)
	if err := installAPI(env); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	valid := `{"revision": "v1", "replicas": 4,
		"image": {"container": "app", "template": "example.com/app:{revision}"},
		"a": {"deployment": "web-a", "service": "web-a", "port": 80},
		"b": {"deployment": "web-b", "service": "web-b", "port": 80},
		"route": {"name": "web", "settleDelay": "500ms"},
		"strategy": {"incremental": {"stepPercent": 25, "interval": "1m30s", "maxSurgePercent": 25}},
		"control": {"paused": true, "abort": "2026-12-01T10:00:00Z"}}`
	for i, tc := range []struct {
		name  string
		patch string // merged over valid
		field string // "" when the spec is valid
	}{
		{"valid incremental", `{}`, ""},
		{"valid canary", `{"strategy": {"incremental": null, "canary": {"maxSurgePercent": 50, "steps": [{"setWeight": 20}, {"pause": {"duration": "30s"}}, {"setWeight": 100}]}}}`, ""},
		{"valid blue-green", `{"strategy": {"incremental": null, "blueGreen": {"scaleDownDelay": "5m"}}}`, ""},
		{"no strategy", `{"strategy": {"incremental": null}}`, "spec.strategy"},
		{"two strategies", `{"strategy": {"blueGreen": {}}}`, "spec.strategy"},
		{"not a duration", `{"strategy": {"incremental": {"interval": "90 seconds"}}}`, "spec.strategy.incremental.interval"},
		{"zero interval", `{"strategy": {"incremental": {"interval": "0s"}}}`, "spec.strategy.incremental.interval"},
		{"step above 100", `{"strategy": {"incremental": {"stepPercent": 101}}}`, "spec.strategy.incremental.stepPercent"},
		{"canary weight above 100", `{"strategy": {"incremental": null, "canary": {"steps": [{"setWeight": 150}]}}}`, "spec.strategy.canary.steps[0].setWeight"},
		{"negative settle delay", `{"route": {"settleDelay": "-1s"}}`, "spec.route.settleDelay"},
		{"image without {revision}", `{"image": {"template": "example.com/app:latest"}}`, "spec.image.template"},
		{"no revision", `{"revision": ""}`, "spec.revision"},
		{"no replicas", `{"replicas": 0}`, "spec.replicas"},
		{"abort token too long", `{"control": {"abort": "` + strings.Repeat("x", 254) + `"}}`, "spec.control.abort"},
		{"valid analysis", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "0.99"}}, {"name": "p99", "latency": {"quantile": "0.99", "max": "300ms"}},
			{"name": "q", "query": {"query": "up", "min": "-1", "max": "1e3"}}], "gates": [{"name": "smoke", "checks": [{"name": "ok", "successRate": {"min": "1"}}]}],
			"policy": {"interval": "10s", "window": "1m", "consecutiveErrorLimit": -1, "minRequests": 20}`), ""},
		{"analysis without prometheus", `{"analysis": {"checks": [{"name": "ok", "successRate": {"min": "0.99"}}]}}`, "spec.analysis"},
		{"analysis without checks", withAnalysis(`"policy": {}`), "spec.analysis"},
		{"address not a URL", `{"analysis": {"prometheus": {"address": "prometheus:9090"}, "checks": [{"name": "ok", "successRate": {"min": "0.99"}}]}}`, "spec.analysis.prometheus.address"},
		{"rate above 1", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "1.5"}}]`), "spec.analysis.checks[0].successRate.min"},
		{"rate not quoted", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": 0.99}}]`), "spec.analysis.checks[0].successRate.min"},
		{"rate not a number", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "99%"}}]`), "spec.analysis.checks[0].successRate.min"},
		{"two kinds", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "0.9"}, "latency": {"quantile": "0.9", "max": "1s"}}]`), "spec.analysis.checks[0]"},
		{"quantile 1", withAnalysis(`"checks": [{"name": "p", "latency": {"quantile": "1", "max": "1s"}}]`), "spec.analysis.checks[0].latency.quantile"},
		{"latency not a duration", withAnalysis(`"checks": [{"name": "p", "latency": {"quantile": "0.5", "max": "fast"}}]`), "spec.analysis.checks[0].latency.max"},
		{"min above max", withAnalysis(`"checks": [{"name": "q", "query": {"query": "up", "min": "2", "max": "1"}}]`), "spec.analysis.checks[0].query.min"},
		{"query without range", withAnalysis(`"checks": [{"name": "q", "query": {"query": "up"}}]`), "spec.analysis.checks[0].query.max"},
		{"duplicate check names", withAnalysis(`"checks": [{"name": "q", "query": {"query": "up", "max": "1"}}, {"name": "q", "query": {"query": "up", "max": "1"}}]`), "spec.analysis.checks[1]"},
		{"gate without checks", withAnalysis(`"gates": [{"name": "smoke", "checks": []}]`), "spec.analysis.gates[0].checks"},
		{"error limit -2", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "0.9"}}], "policy": {"consecutiveErrorLimit": -2}`), "spec.analysis.policy.consecutiveErrorLimit"},
		{"negative window", withAnalysis(`"checks": [{"name": "ok", "successRate": {"min": "0.9"}}], "policy": {"window": "-1m"}`), "spec.analysis.policy.window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{}
			if err := json.Unmarshal([]byte(valid), &spec); err != nil {
				t.Fatal(err)
			}
			var patch map[string]any
			if err := json.Unmarshal([]byte(tc.patch), &patch); err != nil {
				t.Fatal(err)
			}
			merge(spec, patch)
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.Kind,
				"metadata": map[string]any{"namespace": ns, "name": "r" + strconv.Itoa(i)},
				"spec":     spec,
			}}
			err := c.Create(context.Background(), obj)
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("a valid spec was refused: %v", err)
			case tc.field == "":
			case err == nil:
				t.Fatalf("accepted; want %s refused", tc.field)
			case !apierrors.IsInvalid(err):
				t.Fatalf("got %v, want Invalid", err)
			case !strings.Contains(err.Error(), tc.field):
				t.Fatalf("the error does not name %s: %v", tc.field, err)
			}
		})
	}
}

// withAnalysis is a patch setting spec.analysis to a Prometheus and the
// fields given.
func withAnalysis(fields string) string {
	return `{"analysis": {"prometheus": {"address": "http://prometheus.monitoring:9090"}, ` + fields + `}}`
}

// merge applies a JSON merge patch (RFC 7386) to doc.
func merge(doc, patch map[string]any) {
	for k, v := range patch {
		switch v := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, ok := doc[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				doc[k] = sub
			}
			merge(sub, v)
		default:
			doc[k] = v
		}
	}
}
