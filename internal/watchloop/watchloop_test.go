package watchloop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// TestBackoffHonoursContext: a watch that keeps failing is retried with a
// growing backoff, and ctx stops the loop in the middle of one.
func TestBackoffHonoursContext(t *testing.T) {
	var calls atomic.Int64
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		calls.Add(1)
		return nil, errors.New("connection refused")
	}
	var st Stats
	ctx, cancel := context.WithCancel(context.Background())
	if err := Start(ctx, "web", start, func() {}, &st, Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: time.Hour}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // 10+20+40+80 ms: about 5 attempts
	if n := calls.Load(); n < 3 || n > 7 {
		t.Fatalf("%d attempts in 200ms with a backoff from 10ms doubling", n)
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for st.Running.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the loop outlived its context")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResumesAndRestarts: a watch resumes from the last resourceVersion
// seen, and starts afresh after the server says it expired.
func TestResumesAndRestarts(t *testing.T) {
	var rvs []string
	var ws []*watch.FakeWatcher
	opened := make(chan struct{}, 10)
	start := func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.FieldSelector != "metadata.name=web" {
			t.Errorf("field selector %q", o.FieldSelector)
		}
		rvs = append(rvs, o.ResourceVersion)
		w := watch.NewFakeWithChanSize(4, false)
		ws = append(ws, w)
		opened <- struct{}{}
		return w, nil
	}
	var st Stats
	var wakes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Start(ctx, "web", start, func() { wakes.Add(1) }, &st, Options{MinBackoff: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	<-opened
	pod := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: rv}}
	}
	ws[0].Add(pod("5"))
	ws[0].Modify(pod("7"))
	ws[0].Stop() // the server closes it
	<-opened
	ws[1].Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	<-opened
	cancel()
	if want := []string{"", "7", ""}; len(rvs) != 3 || rvs[0] != want[0] || rvs[1] != want[1] || rvs[2] != want[2] {
		t.Fatalf("resourceVersions %q, want %q", rvs, want)
	}
	if wakes.Load() != 2 {
		t.Fatalf("%d wakes, want 2", wakes.Load())
	}
}

// TestRefused: a Forbidden first watch is returned, and nothing runs.
func TestRefused(t *testing.T) {
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "httproutes"}, "", errors.New("no"))
	}
	var st Stats
	if err := Start(context.Background(), "web", start, func() {}, &st, Options{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%v, want Forbidden", err)
	}
	if st.Running.Load() != 0 {
		t.Fatal("a loop runs after a refusal")
	}
}
