package main_test

import (
	"context"
	"encoding/json"
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
				"metadata": map[string]any{"namespace": ns, "name": "r" + string(rune('a'+i))},
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
