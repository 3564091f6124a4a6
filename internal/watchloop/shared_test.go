package watchloop_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

// counter is a wake that counts and signals.
type counter struct {
	mu sync.Mutex
	n  int
	ch chan struct{}
}

func newCounter() *counter { return &counter{ch: make(chan struct{}, 100)} }

func (c *counter) wake() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.ch <- struct{}{}
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake after %s", what)
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShared: two subscriptions share one watch; each change wakes both;
// the Cache reports what the watch delivered; once the first has ended
// only the second is woken; the last one ends after the loop has returned,
// and the Cache misses; a new subscription opens a new watch.
func TestShared(t *testing.T) {
	var mu sync.Mutex
	var watches []*watch.FakeWatcher
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		fw := watch.NewFakeWithChanSize(10, false)
		watches = append(watches, fw)
		return fw, nil
	}
	current := func() *watch.FakeWatcher {
		mu.Lock()
		defer mu.Unlock()
		return watches[len(watches)-1]
	}
	var sh watchloop.Shared
	var stats watchloop.Stats
	opts := watchloop.Options{Namespace: "prod"}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w1, w2 := newCounter(), newCounter()
	ended1, ended2 := make(chan struct{}), make(chan struct{})
	if err := sh.Subscribe(ctx1, "web", start, w1.wake, func() { close(ended1) }, &stats, opts); err != nil {
		t.Fatal(err)
	}
	if err := sh.Subscribe(ctx2, "web", start, w2.wake, func() { close(ended2) }, &stats, opts); err != nil {
		t.Fatal(err)
	}
	if n := stats.Watches.Load(); n != 1 {
		t.Fatalf("%d watches for two subscriptions, want 1", n)
	}
	if _, ok := sh.Cache.Get(); ok {
		t.Fatal("the Cache answered before the watch delivered the object")
	}
	current().Add(named("prod", "web", "4", 2))
	w1.await(t, "the first event (1)")
	w2.await(t, "the first event (2)")
	if obj, ok := sh.Cache.Get(); !ok || rvOf(obj) != "4" {
		t.Fatalf("Cache: %v %v, want version 4", obj, ok)
	}
	cancel1()
	<-ended1
	if n := sh.Subscribers(); n != 1 {
		t.Fatalf("%d subscribers after the first ended, want 1", n)
	}
	before := w1.count()
	current().Modify(named("prod", "web", "5", 3))
	w2.await(t, "a change after the first subscription ended")
	if w1.count() != before {
		t.Fatal("an ended subscription was woken")
	}
	if obj, ok := sh.Cache.Get(); !ok || rvOf(obj) != "5" {
		t.Fatalf("Cache: %v %v, want version 5", obj, ok)
	}
	cancel2()
	<-ended2
	if n := stats.Running.Load(); n != 0 {
		t.Fatalf("the last subscription ended with %d loops running", n)
	}
	if _, ok := sh.Cache.Get(); ok {
		t.Fatal("the Cache answered after every subscription ended")
	}
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	w3 := newCounter()
	if err := sh.Subscribe(ctx3, "web", start, w3.wake, nil, &stats, opts); err != nil {
		t.Fatal(err)
	}
	if n := stats.Watches.Load(); n != 2 {
		t.Fatalf("%d watches after a new subscription, want 2", n)
	}
	current().Add(named("prod", "web", "6", 3))
	w3.await(t, "the new watch's first event")
	if obj, ok := sh.Cache.Get(); !ok || rvOf(obj) != "6" {
		t.Fatalf("Cache: %v %v, want version 6", obj, ok)
	}
}

// TestSharedRefused: a first subscription whose watch is refused returns
// the error and subscribes nothing.
func TestSharedRefused(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "deployments"}, "web", errors.New("no"))
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) { return nil, forbidden }
	var sh watchloop.Shared
	var stats watchloop.Stats
	err := sh.Subscribe(context.Background(), "web", start, func() {}, nil, &stats, watchloop.Options{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Subscribe: %v, want Forbidden", err)
	}
	if n := sh.Subscribers(); n != 0 {
		t.Fatalf("%d subscribers after a refusal", n)
	}
	if n := stats.Running.Load(); n != 0 {
		t.Fatalf("%d loops running after a refusal", n)
	}
}

// TestObserve: Options.Observe hears, in order, a watch opened afresh, the
// object, the watch's end, a watch that resumes, an expired resourceVersion
// ending it, and a watch opened afresh again.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var watches []*watch.FakeWatcher
	var rvs []string
	start := func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		fw := watch.NewFakeWithChanSize(10, false)
		watches = append(watches, fw)
		rvs = append(rvs, opts.ResourceVersion)
		return fw, nil
	}
	nth := func(i int) *watch.FakeWatcher {
		t.Helper()
		eventually(t, "watch "+strconv.Itoa(i)+" opened", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(watches) > i
		})
		mu.Lock()
		defer mu.Unlock()
		return watches[i]
	}
	var kinds []watchloop.ObservationKind
	var kmu sync.Mutex
	seen := func() []watchloop.ObservationKind {
		kmu.Lock()
		defer kmu.Unlock()
		return append([]watchloop.ObservationKind(nil), kinds...)
	}
	opts := watchloop.Options{MinBackoff: time.Millisecond, Observe: func(o watchloop.Observation) {
		kmu.Lock()
		defer kmu.Unlock()
		kinds = append(kinds, o.Kind)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats watchloop.Stats
	if err := watchloop.Start(ctx, "web", start, func() {}, &stats, opts); err != nil {
		t.Fatal(err)
	}
	nth(0).Add(named("", "web", "7", 1))
	nth(0).Stop() // the server ends the watch
	gone := apierrors.NewResourceExpired("too old")
	nth(1).Error(&gone.ErrStatus)
	nth(2)
	want := []watchloop.ObservationKind{watchloop.KindOpenedAfresh, watchloop.KindObject, watchloop.KindClosed,
		watchloop.KindOpened, watchloop.KindClosed, watchloop.KindOpenedAfresh}
	eventually(t, "six observations", func() bool { return len(seen()) >= len(want) })
	if diff := cmp.Diff(want, seen()); diff != "" {
		t.Fatalf("observations (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"", "7", ""}, rvs); diff != "" {
		t.Fatalf("resourceVersions asked (-want +got):\n%s", diff)
	}
}
