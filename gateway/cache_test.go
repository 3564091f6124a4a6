package gateway_test

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// laggingCache is a client.Client over a fake API server whose Get stands
// for an informer cache: for lag reads after each Update through it, Get
// answers with the route as the cache last showed it, and while frozen it
// always does. Everything else goes to the API server.
type laggingCache struct {
	client.Client
	mu     sync.Mutex
	lag    int
	left   int  // reads still behind
	frozen bool // every read behind
	shown  map[types.NamespacedName]client.Object
	stale  int // reads answered behind
}

func (l *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.shown[key]; ok && (l.frozen || l.left > 0) {
		if l.left > 0 {
			l.left--
		}
		l.stale++
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(old.DeepCopyObject()).Elem())
		return nil
	}
	if err := l.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if l.shown == nil {
		l.shown = map[types.NamespacedName]client.Object{}
	}
	l.shown[key] = obj.DeepCopyObject().(client.Object)
	return nil
}

func (l *laggingCache) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := l.Client.Update(ctx, obj, opts...)
	if err == nil {
		l.mu.Lock()
		l.left = l.lag
		l.mu.Unlock()
	}
	return err
}

func (l *laggingCache) freeze(on bool) {
	l.mu.Lock()
	l.frozen = on
	l.mu.Unlock()
}

// catchUp ends the lag: the next read shows the API server's route.
func (l *laggingCache) catchUp() {
	l.mu.Lock()
	l.frozen, l.left = false, 0
	l.mu.Unlock()
}

// countingReader counts the reads of the API server.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	reads int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// cacheWorld is a fake API server holding the route web, a lagging cache
// over it, and a Router that reads the routes through the cache.
type cacheWorld struct {
	server client.Client
	cache  *laggingCache
	api    *countingReader
	router *gateway.Router
}

func newCacheWorld(t *testing.T, lag int, apiReader bool) *cacheWorld {
	t.Helper()
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: "shop", Name: "web", Gateway: "gw", A: stable, B: canary, Hostnames: []string{"shop.example"}})
	if err != nil {
		t.Fatal(err)
	}
	server := fakeclient.NewClientBuilder().WithScheme(fuzzScheme).
		WithTypeConverters(managedfields.NewDeducedTypeConverter()).
		WithObjects(rt).WithStatusSubresource(&gwv1.HTTPRoute{}).Build()
	w := &cacheWorld{server: server, cache: &laggingCache{Client: server, lag: lag}, api: &countingReader{Reader: server}}
	cfg := gateway.Config{Routes: []gateway.RouteRef{webRef}, A: stable, B: canary}
	if apiReader {
		cfg.APIReader = w.api
	}
	if w.router, err = gateway.NewRouter(w.cache, cfg); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *cacheWorld) setWeights(t *testing.T, canaryWeight int32) {
	t.Helper()
	if err := w.router.SetWeights(context.Background(), rollout.Weights{A: 100 - canaryWeight, B: canaryWeight}); err != nil {
		t.Fatal(err)
	}
}

// weights are the canary weights the Router reports and the API server
// holds.
func (w *cacheWorld) weights(t *testing.T) (reported, held int32) {
	t.Helper()
	st, err := w.router.Weights(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Weights.B, weightsIn(getHTTPRoute(t, w.server, webRef)).B
}

// otherWriter changes the route on the API server: an annotation, and
// the weights when canaryWeight >= 0.
func (w *cacheWorld) otherWriter(t *testing.T, canaryWeight int32) {
	t.Helper()
	rt := getHTTPRoute(t, w.server, webRef)
	if rt.Annotations == nil {
		rt.Annotations = map[string]string{}
	}
	rt.Annotations["other"] = "wrote"
	if canaryWeight >= 0 {
		for i := range rt.Spec.Rules {
			for j := range rt.Spec.Rules[i].BackendRefs {
				ref := &rt.Spec.Rules[i].BackendRefs[j]
				weight := 100 - canaryWeight
				if string(ref.Name) == canary.Name {
					weight = canaryWeight
				}
				ref.Weight = &weight
			}
		}
	}
	if err := w.server.Update(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
}

// TestCacheBackedClient: a Router over a client whose reads come from a
// cache that lags its writes, with Config.APIReader set, reports its own
// writes at once and writes on them with no conflict and no read of the
// API server; sees another writer's change once the cache shows it; and
// after a conflict (another writer in between, the cache still behind)
// reads the route once from APIReader, and the retry goes through. Without
// APIReader, the same lag is reported as it is and makes writes conflict.
func TestCacheBackedClient(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		lag       int
		apiReader bool
		run       func(t *testing.T, w *cacheWorld)
		// conflicts and apiReads are what the run costs.
		conflicts, apiReads int
	}{
		{"own writes behind the cache", 3, true, func(t *testing.T, w *cacheWorld) {
			w.setWeights(t, 20)
			if got, held := w.weights(t); got != 20 || held != 20 {
				t.Fatalf("reported canary weight %d, held %d; want 20", got, held)
			}
			w.setWeights(t, 50) // on the substituted read, while the cache lags
			if got, held := w.weights(t); got != 50 || held != 50 {
				t.Fatalf("reported canary weight %d, held %d; want 50", got, held)
			}
			w.setWeights(t, 50) // already in place: no write
			if c := w.router.Counts(); c.Writes != 2 {
				t.Fatalf("%d writes, want 2", c.Writes)
			}
			if w.cache.stale == 0 {
				t.Fatal("the cache never answered behind")
			}
			w.cache.catchUp()
			if got, _ := w.weights(t); got != 50 {
				t.Fatalf("reported canary weight %d once the cache caught up, want 50", got)
			}
		}, 0, 0},
		{"another writer after the Router", 2, true, func(t *testing.T, w *cacheWorld) {
			w.setWeights(t, 20)
			w.otherWriter(t, 30)
			if got, _ := w.weights(t); got != 20 {
				t.Fatalf("reported canary weight %d while the cache lags, want the own write's 20", got)
			}
			w.cache.catchUp()
			if got, _ := w.weights(t); got != 30 {
				t.Fatalf("reported canary weight %d once the cache shows the other write, want 30", got)
			}
			w.setWeights(t, 50)
			rt := getHTTPRoute(t, w.server, webRef)
			if weightsIn(rt).B != 50 || rt.Annotations["other"] != "wrote" {
				t.Fatalf("held canary weight %d, annotations %v; want 50 and the other writer's", weightsIn(rt).B, rt.Annotations)
			}
		}, 0, 0},
		{"a conflict reads APIReader once", 0, true, func(t *testing.T, w *cacheWorld) {
			w.setWeights(t, 20)
			w.cache.freeze(true) // the cache shows the route before 20 for good
			w.otherWriter(t, -1)
			w.setWeights(t, 50) // on 20 as the Router wrote it: conflicts, retried from APIReader
			rt := getHTTPRoute(t, w.server, webRef)
			if weightsIn(rt).B != 50 || rt.Annotations["other"] != "wrote" {
				t.Fatalf("held canary weight %d, annotations %v; want 50 and the other writer's", weightsIn(rt).B, rt.Annotations)
			}
			if got, _ := w.weights(t); got != 50 {
				t.Fatalf("reported canary weight %d with the cache frozen, want 50", got)
			}
			w.setWeights(t, 70) // known versions only: no more reads of the API server
			w.cache.catchUp()
			if got, _ := w.weights(t); got != 70 {
				t.Fatalf("reported canary weight %d, want 70", got)
			}
		}, 1, 1},
		{"the Router's AnnotationStore", 2, true, func(t *testing.T, w *cacheWorld) {
			store, err := w.router.AnnotationStore(webRef)
			if err != nil {
				t.Fatal(err)
			}
			w.setWeights(t, 20)
			st := strategy.NewState("v1", "v2")
			if err := store.Save(ctx, st); err != nil {
				t.Fatal(err)
			}
			got, err := store.Load(ctx)
			if err != nil || got.CanaryRevision != "v2" {
				t.Fatalf("Load while the cache lags: %+v, %v", got, err)
			}
			if w, _ := w.weights(t); w != 20 {
				t.Fatalf("reported canary weight %d, want 20", w)
			}
		}, 0, 0},
		{"without APIReader the lag shows", 3, false, func(t *testing.T, w *cacheWorld) {
			w.setWeights(t, 20)
			if got, held := w.weights(t); got != 0 || held != 20 {
				t.Fatalf("reported canary weight %d, held %d; want the cache's 0 and 20", got, held)
			}
			w.setWeights(t, 50) // on the cache's stale read: conflicts until it catches up
			if _, held := w.weights(t); held != 50 {
				t.Fatalf("held canary weight %d, want 50", held)
			}
		}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newCacheWorld(t, tc.lag, tc.apiReader)
			tc.run(t, w)
			if c := w.router.Counts(); c.Conflicts != tc.conflicts {
				t.Errorf("%d conflicts, want %d", c.Conflicts, tc.conflicts)
			}
			if got := w.api.count(); got != tc.apiReads {
				t.Errorf("%d reads of APIReader, want %d", got, tc.apiReads)
			}
		})
	}
}
