package gateway

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/rollout"
)

// serverRoutes is an API server of one HTTPRoute with integer
// resourceVersions and optimistic concurrency, whose watch delivers
// nothing until the test sends it (a watch as late as the test wants).
type serverRoutes struct {
	mu      sync.Mutex
	rt      *gwv1.HTTPRoute // nil: deleted
	gets    int
	watches []*watch.FakeWatcher
}

func (s *serverRoutes) get(context.Context, RouteRef) (route, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if s.rt == nil {
		return route{}, apierrors.NewNotFound(schema.GroupResource{Group: gwv1.GroupName, Resource: "httproutes"}, "web")
	}
	return route{http: s.rt.DeepCopy()}, nil
}

func (s *serverRoutes) update(_ context.Context, rt route) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt == nil || rt.http.ResourceVersion != s.rt.ResourceVersion {
		return apierrors.NewConflict(schema.GroupResource{Group: gwv1.GroupName, Resource: "httproutes"}, "web", errors.New("modified"))
	}
	s.bump(rt.http)
	*rt.http = *s.rt.DeepCopy()
	return nil
}

// bump stores next as the route's next version; s.mu is held.
func (s *serverRoutes) bump(next *gwv1.HTTPRoute) {
	rv, _ := strconv.Atoi(s.rt.ResourceVersion)
	s.rt = next.DeepCopy()
	s.rt.ResourceVersion = strconv.Itoa(rv + 1)
}

func (s *serverRoutes) watch(context.Context, RouteRef, metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fw := watch.NewFakeWithChanSize(20, false)
	s.watches = append(s.watches, fw)
	return fw, nil
}

// current is the route as the server has it.
func (s *serverRoutes) current() *gwv1.HTTPRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rt.DeepCopy()
}

// other writes change to the route as another writer and returns the
// version written.
func (s *serverRoutes) other(change func(*gwv1.HTTPRoute)) *gwv1.HTTPRoute {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.rt.DeepCopy()
	change(next)
	s.bump(next)
	return s.rt.DeepCopy()
}

func (s *serverRoutes) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

func (s *serverRoutes) lastWatch() *watch.FakeWatcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[len(s.watches)-1]
}

func routerWeights(t *testing.T, r *Router) rollout.Weights {
	t.Helper()
	st, err := r.Weights(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Weights
}

func setWeight(rt *gwv1.HTTPRoute, a, b int32) {
	refs := rt.Spec.Rules[0].BackendRefs
	refs[0].Weight, refs[1].Weight = &a, &b
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestReadsFromTheWatch: while a Notify subscription is live, the Router
// reads the route from what the watch delivered; its own write is reported
// until the watch delivers it, and the older versions the watch delivers
// meanwhile do not replace it; a write based on a version the watch has
// not replaced yet conflicts and is retried from a GET; a deleted route is
// not found; a watch that is down, or no subscription, means GETs.
func TestReadsFromTheWatch(t *testing.T) {
	a, b := Backend{Name: "web", Port: 80}, Backend{Name: "web-canary", Port: 80}
	rt, err := BuildHTTPRoute(RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: a, B: b})
	if err != nil {
		t.Fatal(err)
	}
	rt.ResourceVersion = "10"
	srv := &serverRoutes{rt: rt}
	r, err := newRouter(srv, Config{Routes: []RouteRef{{Namespace: "shop", Name: "web"}}, A: a, B: b})
	if err != nil {
		t.Fatal(err)
	}
	// A watch that ends stays down (the backoff outlasts the test).
	r.watchOpts = watchloop.Options{MinBackoff: time.Hour, MaxBackoff: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan struct{}, 100)
	if err := r.Notify(ctx, func() { woke <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	cache := &r.shared[RouteRef{Namespace: "shop", Name: "web"}.key()].Cache

	// Until the watch delivers the route, reads are GETs.
	if w := routerWeights(t, r); w != (rollout.Weights{A: 100, B: 0}) {
		t.Fatalf("weights %+v", w)
	}
	if srv.reads() != 1 {
		t.Fatalf("%d GETs before the watch delivered the route, want 1", srv.reads())
	}
	fw := srv.lastWatch()
	fw.Add(srv.current())
	waitFor(t, "the route delivered", cache.Fed)
	for range 5 {
		routerWeights(t, r)
	}
	if srv.reads() != 1 || r.Counts().Reads != 1 || r.Counts().CachedReads < 5 {
		t.Fatalf("%d GETs (%+v) after 5 reads from the watch, want 1", srv.reads(), r.Counts())
	}

	// An own write is read back at once, with no GET, and the older
	// versions the watch delivers after it do not replace it.
	if err := r.SetWeights(ctx, rollout.Weights{A: 90, B: 10}); err != nil {
		t.Fatal(err)
	}
	own := srv.current()
	if w := routerWeights(t, r); w != (rollout.Weights{A: 90, B: 10}) {
		t.Fatalf("weights %+v right after the write of 90/10", w)
	}
	fw.Modify(rt) // a replayed older version
	waitFor(t, "an old version delivered", func() bool { return len(fw.ResultChan()) == 0 })
	if w := routerWeights(t, r); w != (rollout.Weights{A: 90, B: 10}) {
		t.Fatalf("weights %+v after the watch delivered an older version, want the own write's", w)
	}
	fw.Modify(own)

	// Another writer's change is seen once the watch delivers it.
	theirs := srv.other(func(rt *gwv1.HTTPRoute) { setWeight(rt, 70, 30) })
	fw.Modify(theirs)
	waitFor(t, "the other writer's weights read", func() bool { return routerWeights(t, r) == rollout.Weights{A: 70, B: 30} })
	if srv.reads() != 1 {
		t.Fatalf("%d GETs, want 1", srv.reads())
	}

	// A write based on a version the watch has not replaced yet
	// conflicts, and the retry reads the API server and lands.
	srv.other(func(rt *gwv1.HTTPRoute) { rt.Annotations = map[string]string{"note": "theirs"} })
	if err := r.SetWeights(ctx, rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	if c := r.Counts(); c.Conflicts != 1 || c.Reads != 2 || srv.reads() != 2 {
		t.Fatalf("after a write from a stale read: %+v (server GETs %d), want 1 conflict and 1 more GET", c, srv.reads())
	}
	if got := srv.current(); got.Annotations["note"] != "theirs" || *got.Spec.Rules[0].BackendRefs[1].Weight != 50 {
		t.Fatalf("the route after the retry: %v, weights %v", got.Annotations, got.Spec.Rules[0].BackendRefs)
	}
	if w := routerWeights(t, r); w != (rollout.Weights{A: 50, B: 50}) {
		t.Fatalf("weights %+v after the retried write of 50/50", w)
	}

	// A deleted route is not found, from the watch.
	fw.Delete(srv.current())
	waitFor(t, "the deletion read", func() bool {
		_, err := r.Weights(ctx)
		return errors.Is(err, rollout.ErrNotFound)
	})
	if srv.reads() != 2 {
		t.Fatalf("%d GETs, want 2", srv.reads())
	}
	fw.Add(srv.current())
	waitFor(t, "the route back", func() bool { _, err := r.Weights(ctx); return err == nil })

	// A watch that is down: GETs.
	fw.Stop()
	waitFor(t, "the watch down", func() bool { return !cache.Fed() })
	routerWeights(t, r)
	if srv.reads() != 3 {
		t.Fatalf("%d GETs with the watch down, want 3", srv.reads())
	}

	// No subscription: GETs.
	cancel()
	waitFor(t, "the loop ended", func() bool { return r.watches.Running.Load() == 0 })
	routerWeights(t, r)
	if srv.reads() != 4 {
		t.Fatalf("%d GETs with no subscription, want 4", srv.reads())
	}
}

func (s *serverRoutes) list(context.Context, string, string) ([]route, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt == nil {
		return nil, nil
	}
	return []route{{http: s.rt.DeepCopy()}}, nil
}
