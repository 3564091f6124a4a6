package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

var httproutes = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

// routeRunner plays rollout.Runner.Run with a gateway.AnnotationStore for a
// route: on every change of the route it applies the control annotation
// to the state annotation (strategy.State.Control) and steps the strategy
// with every hop applied at once. (gateway's TestControlAnnotation runs the
// real Runner on a route; here the plugin's side is tested.)
func routeRunner(ctx context.Context, t *testing.T, ri dynamic.ResourceInterface, name string, strat strategy.Strategy) {
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Errorf("route runner: %v", err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			continue
		}
		var (
			st strategy.State
			c  strategy.Control
		)
		ann := u.GetAnnotations()
		if err := json.Unmarshal([]byte(ann[gateway.StateAnnotation]), &st); err != nil {
			t.Errorf("route runner: state: %v", err)
			return
		}
		if raw := ann[gateway.ControlAnnotation]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &c); err != nil {
				t.Errorf("route runner: control: %v", err)
				return
			}
		}
		now := time.Now()
		next, applied := st.Control(c, now)
		if len(applied) == 0 {
			continue
		}
		next, _ = stepInstantly(strat, next, now)
		b, _ := json.Marshal(next)
		ann[gateway.StateAnnotation] = string(b)
		u.SetAnnotations(ann)
		if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
			t.Errorf("route runner: %v", err)
			return
		}
	}
}

// TestRouteAnnotations: get, pause, resume and abort on a route whose
// state a standalone rollout keeps in an annotation.
func TestRouteAnnotations(t *testing.T) {
	p, ri := startRoute(t)

	out := p.mustRun("get", "httproute/web")
	mustContain(t, "get", out, fmt.Sprintf("HTTPRoute %s/web", p.ns), "Phase:        Paused",
		"B     canary  v2        20", "promote or resume: a pause step without end")

	out = p.mustRun("pause", "httproute/web")
	mustContain(t, "pause", out, "Pause applied; now Paused")
	out = p.mustRun("abort", "httproute/web")
	mustContain(t, "abort", out, "Abort seen by the rollout; now Aborted, canary weight 0")

	u, err := ri.Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var c strategy.Control
	if err := json.Unmarshal([]byte(u.GetAnnotations()[gateway.ControlAnnotation]), &c); err != nil {
		t.Fatal(err)
	}
	if !c.Paused || c.Abort == "" {
		t.Fatalf("control annotation after pause and abort: %+v", c)
	}
	// Retry: the rollout starts again, held by the annotation's pause;
	// resume clears it, then passes the pause step the rollout reaches.
	out = p.mustRun("retry", "httproute/web")
	mustContain(t, "retry", out, "Retry seen by the rollout; now Paused, canary weight 0, paused (ControlPause)")
	out = p.mustRun("resume", "httproute/web")
	mustContain(t, "resume", out, "control.paused cleared", "Resume seen by the rollout; now Succeeded")
}

// startRoute creates the route web, its rollout of v2 (a canary with a
// pause step at weight 20) stepped to that pause step, and runs its
// routeRunner.
func startRoute(t *testing.T) (*plugin, dynamic.ResourceInterface) {
	p, env := newPlugin(t)
	ri := dynamic.NewForConfigOrDie(env.Config).Resource(httproutes).Namespace(p.ns)
	strat := strategy.Canary{MaxSurgePercent: 25, Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.PauseUntilResumed(), strategy.SetWeight(60)}}
	st, _ := stepInstantly(strat, strategy.NewState("v1", "v2"), time.Now())
	b, _ := json.Marshal(st)
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "web", "annotations": map[string]any{gateway.StateAnnotation: string(b)}},
		"spec": map[string]any{"parentRefs": []any{map[string]any{"name": "gw"}}, "rules": []any{map[string]any{"backendRefs": []any{
			map[string]any{"name": "web-a", "port": int64(80), "weight": int64(80)},
			map[string]any{"name": "web-b", "port": int64(80), "weight": int64(20)}}}}},
	}}
	if _, err := ri.Create(context.Background(), route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); routeRunner(ctx, t, ri, "web", strat) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, ri
}

// TestRouteSuspend: suspend and resume on a route: the control
// annotation says suspended, then no longer holds the field at all.
func TestRouteSuspend(t *testing.T) {
	p, ri := startRoute(t)
	out := p.mustRun("suspend", "httproute/web")
	mustContain(t, "suspend", out, "Suspend applied; now Suspended, canary weight 0", "(resume continues from weight 20)")
	control := func() map[string]any {
		u, err := ri.Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(u.GetAnnotations()[gateway.ControlAnnotation]), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := control(); c["suspended"] != true {
		t.Fatalf("control annotation after suspend: %v", c)
	}
	out = p.mustRun("get", "httproute/web")
	mustContain(t, "get", out, "Phase:        Suspended", "resume: suspended (resume continues from weight 20)",
		"spec.control.suspended is true (resume clears it)")
	out = p.mustRun("resume", "httproute/web")
	mustContain(t, "resume", out, "control.suspended cleared", "Resume applied; now Paused, canary weight 20, paused (PauseStep)")
	if c := control(); len(c) != 0 {
		t.Errorf("control annotation after resume: %v, want {}", c)
	}
}
