package watchloop_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

func deployment(rv string, replicas int32, ready int32, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: rv, Annotations: annotations},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas},
		Status:     appsv1.DeploymentStatus{ReadyReplicas: ready},
	}
}

func TestSpecOrStatusChanged(t *testing.T) {
	base := deployment("1", 3, 3, nil)
	u := func(spec, status any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": status, "metadata": map[string]any{"resourceVersion": "9"}}}
	}
	tests := []struct {
		name       string
		prev, next runtime.Object
		want       bool
	}{
		{"same", base, deployment("2", 3, 3, nil), false},
		{"annotations only", base, deployment("2", 3, 3, map[string]string{"a": "b"}), false},
		{"spec", base, deployment("2", 4, 3, nil), true},
		{"status", base, deployment("2", 3, 2, nil), true},
		{"unstructured same", u(map[string]any{"replicas": int64(3)}, nil), u(map[string]any{"replicas": int64(3)}, nil), false},
		{"unstructured spec", u(map[string]any{"replicas": int64(3)}, nil), u(map[string]any{"replicas": int64(4)}, nil), true},
		{"unstructured status", u(nil, map[string]any{"ready": int64(1)}), u(nil, map[string]any{"ready": int64(2)}), true},
		{"different kinds", base, u(nil, nil), true},
	}
	for _, tt := range tests {
		if got := watchloop.SpecOrStatusChanged(tt.prev, tt.next); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if !watchloop.AnnotationsChanged(base, deployment("2", 3, 3, map[string]string{"a": "b"})) ||
		watchloop.AnnotationsChanged(base, deployment("2", 4, 3, nil)) {
		t.Error("AnnotationsChanged")
	}
}

// TestWakesOnChangesOnly: the first event wakes; then an event wakes only
// when Changed says so, and never for one of the adapter's own writes in
// the middle of a watch; a deletion always wakes.
func TestWakesOnChangesOnly(t *testing.T) {
	fw := watch.NewFake()
	var own watchloop.Own
	wakes := make(chan struct{}, 16)
	start := func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) { return fw, nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats watchloop.Stats
	opts := watchloop.Options{Own: &own, Changed: watchloop.SpecOrStatusChanged}
	if err := watchloop.Start(ctx, "web", start, func() { wakes <- struct{}{} }, &stats, opts); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-wakes:
			if !want {
				t.Fatalf("%s: woke", what)
			}
		case <-time.After(200 * time.Millisecond):
			if want {
				t.Fatalf("%s: no wake", what)
			}
		}
	}
	fw.Add(deployment("1", 3, 3, nil))
	expect("the first event", true)
	fw.Modify(deployment("2", 3, 3, map[string]string{"state": "x"}))
	expect("an annotation only", false)
	end := own.Begin()
	go func() { // the write's answer arrives after its event
		time.Sleep(50 * time.Millisecond)
		end("3")
	}()
	fw.Modify(deployment("3", 4, 3, nil))
	expect("the adapter's own write", false)
	own.Begin()("") // a write that failed
	fw.Modify(deployment("3b", 4, 3, map[string]string{"x": "y"}))
	expect("an annotation after a failed write", false)
	fw.Modify(deployment("4", 4, 4, nil))
	expect("the status answering it", true)
	fw.Modify(deployment("5", 5, 4, nil))
	expect("another writer's spec", true)
	fw.Delete(deployment("6", 5, 4, nil))
	expect("a deletion", true)
}
