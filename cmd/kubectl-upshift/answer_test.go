package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

// widgetCRD is a CRD of a rollout object whose schema is older than the
// plugin: %[1]s is its plural, %[2]s the schema of spec.control (the
// object has no such field when it is empty).
const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[1]s.prune.upshift.dev}
spec:
  group: prune.upshift.dev
  scope: Namespaced
  names: {plural: %[1]s, singular: %[3]s, kind: %[4]s, listKind: %[4]sList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              revision: {type: string}
%[2]s
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

// installWidgetCRD installs a CRD as widgetCRD describes it and waits until
// it is served.
func installWidgetCRD(t *testing.T, env *kubetest.Env, plural, kind, control string) schema.GroupVersionResource {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(fmt.Appendf(nil, widgetCRD, plural, control, strings.ToLower(kind), kind), &u.Object); err != nil {
		t.Fatal(err)
	}
	dc := dynamic.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dc.Resource(crds).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "prune.upshift.dev", Version: "v1", Resource: plural}
	// Served once an object can be listed (discovery follows).
	for {
		if _, err := dc.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s never served", plural)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return gvr
}

// TestControlPrunedBySchema: on a CRD whose schema lacks spec.control (or
// a field of it), every control command fails at once with exit 1 naming
// the CRD and the field, and reports nothing requested; nothing is
// stored. The same commands on the Release CRD (whose schema has the
// control) are TestEveryCommandOnARelease's.
func TestControlPrunedBySchema(t *testing.T) {
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	noControl := installWidgetCRD(t, env, "widgets", "Widget", "")
	oldControl := installWidgetCRD(t, env, "oldwidgets", "OldWidget", `              control:
                type: object
                properties:
                  paused: {type: boolean}
                  abort: {type: string}`)
	for _, gvr := range []schema.GroupVersionResource{noControl, oldControl} {
		st, _ := stepInstantly(strategy.Canary{MaxSurgePercent: 25, Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.PauseUntilResumed()}},
			strategy.NewState("v1", "v2"), time.Now())
		b, _ := json.Marshal(st)
		var status map[string]any
		if err := json.Unmarshal(b, &status); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": map[string]string{"widgets": "Widget", "oldwidgets": "OldWidget"}[gvr.Resource],
			"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"revision": "v2"}}}
		ri := dc.Resource(gvr).Namespace(p.ns)
		u, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Object["status"] = map[string]any{"rollout": status}
		if _, err := ri.UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		obj, cmd string
		want     []string
	}{
		{"widget/web", "pause", []string{"widget/web: the API server did not keep .spec.control.paused = true",
			"the schema of CustomResourceDefinition widgets.prune.upshift.dev has no field .spec.control", `unknown field "spec.control"`,
			"add strategy.Control to the schema at .spec.control (or point --control-path at a field it has)"}},
		{"widget/web", "abort", []string{"widget/web: the API server did not keep .spec.control.abort = ",
			"the schema of CustomResourceDefinition widgets.prune.upshift.dev has no field .spec.control"}},
		{"widget/web", "promote", []string{"no field .spec.control"}},
		{"widget/web", "resume", []string{"no field .spec.control"}},
		{"oldwidget/web", "promote-full", []string{"oldwidget/web: the API server did not keep .spec.control.promoteFull = ",
			"the schema of CustomResourceDefinition oldwidgets.prune.upshift.dev has no field .spec.control.promoteFull",
			`unknown field "spec.control.promoteFull"`, "its .spec.control is older than strategy.Control: regenerate the schema"}},
		{"oldwidget/web", "retry", []string{"has no field .spec.control.retry"}},
		{"widget/web", "suspend", []string{"widget/web: the API server did not keep .spec.control.suspended = true",
			"the schema of CustomResourceDefinition widgets.prune.upshift.dev has no field .spec.control"}},
		{"oldwidget/web", "suspend", []string{"oldwidget/web: the API server did not keep .spec.control.suspended = true",
			"has no field .spec.control.suspended", `unknown field "spec.control.suspended"`, "its .spec.control is older than strategy.Control"}},
	}
	for _, c := range cases {
		t.Run(c.obj+" "+c.cmd, func(t *testing.T) {
			// A long --timeout: the answer to the write is the error, not
			// the wait.
			start := time.Now()
			code, out, errOut := p.run(context.Background(), c.cmd, c.obj, "--timeout", "10m")
			if code != exitError {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitError, out, errOut)
			}
			if el := time.Since(start); el > 5*time.Minute {
				t.Errorf("it took %s: it waited for the rollout", el)
			}
			t.Logf("stderr: %s", errOut)
			mustContain(t, "stderr", errOut, c.want...)
			if strings.Contains(out, "requested") || strings.Contains(out, "applied") || strings.Contains(errOut, "controller running") {
				t.Errorf("stdout reports a request that was never stored:\n%s\nstderr:\n%s", out, errOut)
			}
		})
	}
	// Nothing of the control was stored.
	for _, gvr := range []schema.GroupVersionResource{noControl, oldControl} {
		u, err := dc.Resource(gvr).Namespace(p.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := object.Control(u, object.Path{"spec", "control"})
		if c.PromoteFull != "" || c.Retry != "" || (gvr == noControl && c != (strategy.Control{})) {
			t.Errorf("%s: control %+v stored", gvr.Resource, c)
		}
	}
}

// TestCheckKept: the answer to a control write, read field by field.
func TestCheckKept(t *testing.T) {
	p := object.Path{"spec", "control"}
	schemaName := func() string { return "CustomResourceDefinition releases.operator.upshift.dev" }
	obj := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	}
	cases := []struct {
		name   string
		answer *unstructured.Unstructured
		fields map[string]any
		warns  []string
		want   *NotKeptError
	}{
		{"kept", obj(map[string]any{"control": map[string]any{"abort": "t1", "paused": true}}),
			map[string]any{"abort": "t1", "paused": true}, nil, nil},
		{"false stored as absent", obj(map[string]any{"control": map[string]any{}}),
			map[string]any{"paused": false}, nil, nil},
		{"the control pruned", obj(map[string]any{"revision": "v2"}), map[string]any{"abort": "t1"}, []string{`unknown field "spec.control"`},
			&NotKeptError{Object: "widget/web", Control: ".spec.control", Field: ".spec.control.abort", Want: "t1", Pruned: ".spec.control",
				Schema: "CustomResourceDefinition releases.operator.upshift.dev", Warnings: []string{`unknown field "spec.control"`}}},
		{"one field pruned", obj(map[string]any{"control": map[string]any{"abort": "t0"}}), map[string]any{"promoteFull": "t1"},
			[]string{`unknown field "spec.control.promoteFull"`},
			&NotKeptError{Object: "widget/web", Control: ".spec.control", Field: ".spec.control.promoteFull", Want: "t1", Pruned: ".spec.control.promoteFull",
				Schema: "CustomResourceDefinition releases.operator.upshift.dev", Warnings: []string{`unknown field "spec.control.promoteFull"`}}},
		{"missing without a warning", obj(map[string]any{}), map[string]any{"paused": true}, nil,
			&NotKeptError{Object: "widget/web", Control: ".spec.control", Field: ".spec.control.paused", Want: true}},
		{"changed on the way", obj(map[string]any{"control": map[string]any{"abort": "other"}}), map[string]any{"abort": "t1"}, nil,
			&NotKeptError{Object: "widget/web", Control: ".spec.control", Field: ".spec.control.abort", Want: "t1", Got: "other"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkKept("widget/web", c.answer, p, c.fields, c.warns, schemaName)
			var got *NotKeptError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("error %v is not a *NotKeptError", err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err != nil && !errors.Is(err, ErrNotKept) {
				t.Errorf("%v does not match ErrNotKept", err)
			}
		})
	}
}
