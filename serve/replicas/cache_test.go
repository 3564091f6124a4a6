package replicas_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// TestReadOnceShared: with either client, the Setter and the Deployer of
// one workload read it once per reconcile (a context from
// rollout.WithReads), once each outside one, and a write reads afresh.
func TestReadOnceShared(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 2)
		var gets atomic.Int32
		cfg := rest.CopyConfig(env.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/deployments/web") {
					gets.Add(1)
				}
				return rt.RoundTrip(req)
			})
		})
		s := k.For(cfg).Deployment(ns, "web", 2)
		d := deployer(t, s)
		observe := func(ctx context.Context) {
			t.Helper()
			if _, err := s.Capacity(ctx); err != nil {
				t.Fatal(err)
			}
			if rs, err := d.Revision(ctx, "web"); err != nil || rs.Revision != "web" {
				t.Fatalf("Revision: %+v, %v", rs, err)
			}
		}
		for _, step := range []struct {
			what string
			do   func()
			want int32
		}{
			{"one reconcile", func() { observe(rollout.WithReads(ctx)) }, 1},
			{"the next reconcile", func() { observe(rollout.WithReads(ctx)) }, 1},
			{"outside a reconcile", func() { observe(ctx) }, 2},
			{"a write in a reconcile", func() {
				rctx := rollout.WithReads(ctx)
				observe(rctx)
				if err := s.SetCapacity(rctx, rollout.CapacityRequest{Percent: 50}); err != nil {
					t.Fatal(err)
				}
			}, 2},
		} {
			gets.Store(0)
			step.do()
			if got := gets.Load(); got != step.want {
				t.Errorf("%s: %d GETs of the Deployment, want %d", step.what, got, step.want)
			}
		}
	})
}

// lagging is a client.Reader that stands for an informer cache the test
// holds back: while frozen, Get answers with each object as it was when
// last read before the freeze.
type lagging struct {
	live   client.Reader
	mu     sync.Mutex
	frozen bool
	snap   map[string]client.Object
}

func (l *lagging) freeze(on bool) {
	l.mu.Lock()
	l.frozen = on
	l.mu.Unlock()
}

func (l *lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := fmt.Sprintf("%T %s", obj, key)
	if o, ok := l.snap[id]; ok && l.frozen {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
		return nil
	}
	if err := l.live.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if l.snap == nil {
		l.snap = map[string]client.Object{}
	}
	l.snap[id] = obj.DeepCopyObject().(client.Object)
	return nil
}

func (l *lagging) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.live.List(ctx, list, opts...)
}

// TestCacheLagsOwnWrites: with a client whose cache has not yet seen the
// Setter's writes, Capacity and Revision report what was written, setting
// the same capacity again writes nothing, and Deploy after the Setter's own
// scale to 0 goes through; the same for a kind scaled through /scale
// (unstructured, read from the cache too). A Deploy that a stale read
// would refuse is not refused: the refusal is confirmed with the API
// server, which answers a conflict, and once the cache catches up the
// Deploy goes through.
//
// The workload is a StatefulSet, whose status the test writes (no
// StatefulSet controller runs): the test holds the cache back for good,
// as if nobody else wrote. A Deployment's controller answers every write
// with one of its own (each is a new generation), so behind such a cache
// the Setter's next write conflicts, again on every retry, until the cache
// has seen that answer (rollout.ErrConflict: the Runner tries again);
// TestCachedClientUpgrade runs Deployments through a live cache.
func TestCacheLagsOwnWrites(t *testing.T) {
	env := kubetest.Get(t)
	ctx := context.Background()
	for _, kind := range []string{"typed", "scalable"} {
		t.Run(kind, func(t *testing.T) {
			ns := env.Namespace(t)
			lag := &lagging{live: env.Client}
			// The Setter's writes are counted.
			var puts atomic.Int32
			cfg := rest.CopyConfig(env.Config)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
				return roundTripper(func(req *http.Request) (*http.Response, error) {
					if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/web") {
						puts.Add(1)
					}
					return rt.RoundTrip(req)
				})
			})
			c, err := client.New(cfg, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: lag, Unstructured: true}})
			if err != nil {
				t.Fatal(err)
			}
			statefulSet(t, env.Kube, ns, "web", 4)
			var obj client.Object = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
			if kind == "scalable" {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("apps/v1")
				u.SetKind("StatefulSet")
				u.SetNamespace(ns)
				u.SetName("web")
				obj = u
			}
			replicasOf := func() int32 { return *getStatefulSet(t, env.Kube, ns, "web").Spec.Replicas }
			s, err := replicas.ForClient(c, obj, 4)
			if err != nil {
				t.Fatal(err)
			}
			capacity := func() rollout.CapacityStatus {
				t.Helper()
				st, err := s.Capacity(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			if st := capacity(); st.Capacity != 100 || !st.Settled {
				t.Fatalf("before: %+v", st)
			}
			lag.freeze(true)
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
				t.Fatal(err)
			}
			if got := replicasOf(); got != 2 {
				t.Fatalf("50%%: %d replicas", got)
			}
			if st := capacity(); st.Capacity != 50 || st.Settled {
				t.Fatalf("the cache has not seen the write: Capacity reports %+v, want 50, not settled", st)
			}
			wrote := puts.Load()
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
				t.Fatal(err)
			}
			if got := puts.Load(); got != wrote {
				t.Fatal("setting the capacity just written, from a stale cache, wrote the StatefulSet again")
			}
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
				t.Fatal(err)
			}
			if st := capacity(); st.Capacity != 0 {
				t.Fatalf("after 0: %+v", st)
			}
			if kind == "typed" {
				d := deployer(t, s)
				if err := d.Deploy(ctx, "v2"); err != nil {
					t.Fatalf("deploy after the Setter's own scale to 0, the cache behind: %v", err)
				}
				if img := getStatefulSet(t, env.Kube, ns, "web").Spec.Template.Spec.Containers[0].Image; img != "example.com/app:v2" {
					t.Fatalf("image %q", img)
				}
				if rs := revisionOf(t, d); rs.Revision != "v2" {
					t.Fatalf("the cache behind the deploy: %+v", rs)
				}
			}
			lag.freeze(false)
			statefulSetObserved(t, env.Kube, ns, "web")
			if st := waitCapacity(t, s, "the cache caught up", func(st rollout.CapacityStatus) bool { return st.Settled }); st != (rollout.CapacityStatus{Capacity: 0, Ready: 0, Settled: true}) {
				t.Fatalf("the cache caught up: %+v", st)
			}
			if kind != "typed" {
				return
			}

			// Someone else scales to 2, the cache sees it, then to 0,
			// which the cache has not seen yet.
			d := deployer(t, s)
			scale := func(n int32) {
				t.Helper()
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					ss := getStatefulSet(t, env.Kube, ns, "web")
					ss.Spec.Replicas = &n
					_, err := env.Kube.AppsV1().StatefulSets(ns).Update(ctx, ss, metav1.UpdateOptions{})
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			scale(2)
			capacity()
			lag.freeze(true)
			scale(0)
			err = d.Deploy(ctx, "v3")
			if !errors.Is(err, rollout.ErrConflict) || rollout.IsPermanent(err) || errors.Is(err, replicas.ErrDeployRefused) {
				t.Fatalf("deploy on a stale read of 2 replicas: %v; want a conflict, not a permanent refusal", err)
			}
			lag.freeze(false)
			if err := d.Deploy(ctx, "v3"); err != nil {
				t.Fatalf("the cache caught up: %v", err)
			}
		})
	}
}

// TestCachedClientUpgrade: a replica-mode upgrade through a client that
// reads from a controller-runtime informer cache, as a manager's does,
// acting as a ServiceAccount with exactly the permissions the package
// documents (get, list and watch on Deployments in the namespace, for the
// cache; update on the two Deployments). Each reconcile comes after the
// cache has seen the Deployment controller's answer, as a reconcile that
// the manager's watch triggers does. Notify, with a client that cannot
// watch, says so, and the caller polls.
func TestCachedClientUpgrade(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa := env.ServiceAccount(t, ns, "upshift-cached")
	env.Grant(t, ns, sa.Subject,
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"v1", "v2"}, Verbs: []string{"update"}},
	)
	informers, err := cache.New(sa.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := informers.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	c, err := client.New(sa.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	k := kinds{t: t, env: env, flavour: "cached", c: c, synced: func(t testing.TB, ns, name string) {
		t.Helper()
		want := getDeployment(t, env.Kube, ns, name).ResourceVersion
		deadline := time.Now().Add(5 * time.Second)
		for {
			var d appsv1.Deployment
			if err := informers.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err == nil && d.ResourceVersion == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cache has not seen Deployment %s/%s at %s within 5s", ns, name, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}}
	strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 20,
		Options: strategy.Options{Capacity: strategy.CapacityReplicas}}
	end, n := upgradeReplicas(t, env, k, ns, strat, false)
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s after %d reconciles: %s", end.Phase, n, end.Message)
	}
	a, b := getDeployment(t, env.Kube, ns, "v1"), getDeployment(t, env.Kube, ns, "v2")
	if *a.Spec.Replicas != 0 || *b.Spec.Replicas != 10 {
		t.Fatalf("ended with v1=%d v2=%d", *a.Spec.Replicas, *b.Spec.Replicas)
	}
	t.Logf("through the cache: %d reconciles", n)

	err = k.Deployment(ns, "v1", 10).Notify(ctx, func() {})
	if !errors.Is(err, watchloop.ErrUnsupported) || !strings.Contains(err.Error(), "client.WithWatch") {
		t.Fatalf("Notify with a cache-backed client.Client: %v; want the error that it cannot watch", err)
	}
	// Without list and watch, the cache cannot serve the kind.
	other := env.ServiceAccount(t, ns, "upshift-no-list")
	env.Grant(t, ns, other.Subject, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"v1", "v2"},
		Verbs: []string{"get", "update", "watch"}})
	noList, err := cache.New(other.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = noList.Start(ctx) }()
	nc, err := client.New(other.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: noList}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := replicas.ForClient(nc, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1"}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	_, err = s.Capacity(short)
	if err == nil {
		t.Fatal("a cache without list and watch on Deployments served a read")
	}
	t.Logf("without list and watch: %v", err)
}
