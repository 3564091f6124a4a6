package replicas_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) {
	os.Exit(kubetest.MainWith(m, kubetest.Options{Cluster: &kubetest.ClusterOptions{}}))
}

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func TestReplicaMath(t *testing.T) {
	cases := []struct{ full, capacity, want int32 }{
		{3, 40, 2}, {3, 33, 1}, {3, 34, 2}, {10, 25, 3}, {10, 20, 2}, {1, 1, 1}, {5, 0, 0}, {5, 100, 5}, {0, 50, 0},
	}
	for _, c := range cases {
		if got := replicas.Replicas(c.full, c.capacity); got != c.want {
			t.Errorf("Replicas(%d, %d) = %d, want %d", c.full, c.capacity, got, c.want)
		}
	}
}

func deployment(t *testing.T, cs kubernetes.Interface, ns, name string, n int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:" + name}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	playDeployment(t, cs, ns, name, -1)
}

// playDeployment acts as the Deployment controller: the status catches up
// with the spec at once, except that no more than readyCap replicas become
// available (-1: no limit).
func playDeployment(t testing.TB, cs kubernetes.Interface, ns, name string, readyCap int32) {
	t.Helper()
	ctx := context.Background()
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := *d.Spec.Replicas
	avail := n
	if readyCap >= 0 && avail > readyCap {
		avail = readyCap
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: avail, AvailableReplicas: avail}
	if _, err := cs.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestDeploymentCapacity(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 3)
		s := k.Deployment(ns, "web", 0) // full count read from the spec: 3
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The controller has not acted yet: all 3 pods still run and are ready.
		if diff := cmp.Diff(rollout.CapacityStatus{Capacity: 40, Ready: 100, Settled: false}, st); diff != "" {
			t.Fatalf("before the controller caught up (-want +got):\n%s", diff)
		}
		playDeployment(t, env.Kube, ns, "web", -1)
		if st, _ = s.Capacity(ctx); st != (rollout.CapacityStatus{Capacity: 40, Ready: 66, Settled: true}) {
			t.Fatalf("after: %+v", st)
		}
		d, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if *d.Spec.Replicas != 2 {
			t.Fatalf("40%% of 3 replicas: %d replicas, want 2", *d.Spec.Replicas)
		}
		rv := d.ResourceVersion
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
			t.Fatal(err)
		}
		if d, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); d.ResourceVersion != rv {
			t.Fatal("setting the capacity already in place wrote the Deployment")
		}
		// A restarted controller (a new setter) reads the full count back.
		s2 := k.Deployment(ns, "web", 0)
		if st, _ := s2.Capacity(ctx); st.Capacity != 40 || st.Ready != 66 {
			t.Fatalf("a new setter reads %+v", st)
		}
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
			t.Fatal(err)
		}
		playDeployment(t, env.Kube, ns, "web", -1)
		if st, _ = s.Capacity(ctx); !st.Steady || st.Capacity != 100 || st.Ready != 100 || !st.Settled {
			t.Fatalf("steady: %+v", st)
		}
		if err := k.Deployment(ns, "missing", 3).SetCapacity(ctx, rollout.CapacityRequest{Percent: 10}); err == nil {
			t.Fatal("a missing Deployment: no error")
		}
	})
}

func TestScalableThroughTheScaleSubresource(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 4)
		s := k.Scalable(ns, "web", 4)
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
			t.Fatal(err)
		}
		playDeployment(t, env.Kube, ns, "web", -1)
		st, err := s.Capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st != (rollout.CapacityStatus{Capacity: 50, Ready: 50, Settled: true}) {
			t.Fatalf("%+v", st)
		}
	})
}

// upgradeReplicas runs a replica-mode rollout between two Deployments,
// playing the Deployment controller; canaryReadyCap limits the canary's
// available pods (-1: none).
func upgradeReplicas(t *testing.T, env *kubetest.Env, k kinds, ns string, strat strategy.Strategy, canaryReadyCap int32) (strategy.State, int) {
	t.Helper()
	ctx := context.Background()
	deployment(t, env.Kube, ns, "v1", 10)
	deployment(t, env.Kube, ns, "v2", 0)
	clock := fake.NewClock(t0)
	r := &rollout.Runner{Strategy: strat, Clock: clock,
		A: k.Deployment(ns, "v1", 10), B: k.Deployment(ns, "v2", 10)}
	opts := strat.Shared()
	s := strategy.NewState("v1", "v2")
	n := 0
	for ; n < 300 && !s.Phase.Terminal(); n++ {
		next, requeue, err := r.Reconcile(ctx, s)
		if err != nil {
			t.Fatalf("reconcile %d: %v", n, err)
		}
		s = next
		playDeployment(t, env.Kube, ns, "v1", -1)
		playDeployment(t, env.Kube, ns, "v2", canaryReadyCap)
		if k.synced != nil {
			k.synced(t, ns, "v1")
			k.synced(t, ns, "v2")
		}
		a, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "v1", metav1.GetOptions{})
		b, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "v2", metav1.GetOptions{})
		if total := *a.Spec.Replicas + *b.Spec.Replicas; total > 12 {
			t.Fatalf("reconcile %d: %d replicas, above 100%% + MaxSurge 20%% of 10", n, total)
		}
		if ready := a.Status.AvailableReplicas + b.Status.AvailableReplicas; canaryReadyCap < 0 && ready < 10-opts.MaxUnavailablePercent/10 {
			t.Fatalf("reconcile %d: %d replicas available, below 100%% - MaxUnavailable", n, ready)
		}
		if requeue <= 0 {
			requeue = time.Second
		}
		clock.Advance(requeue)
	}
	return s, n
}

func TestReplicaModeUpgrade(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 20,
			Options: strategy.Options{Capacity: strategy.CapacityReplicas}}
		end, n := upgradeReplicas(t, env, k, ns, strat, -1)
		if end.Phase != strategy.PhaseSucceeded {
			t.Fatalf("ended %s after %d reconciles: %s", end.Phase, n, end.Message)
		}
		ctx := context.Background()
		a, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "v1", metav1.GetOptions{})
		b, _ := env.Kube.AppsV1().Deployments(ns).Get(ctx, "v2", metav1.GetOptions{})
		if *a.Spec.Replicas != 0 || *b.Spec.Replicas != 10 || b.Annotations[replicas.CapacityAnnotation] != "steady" {
			t.Fatalf("ended with v1=%d v2=%d (%q)", *a.Spec.Replicas, *b.Spec.Replicas, b.Annotations[replicas.CapacityAnnotation])
		}
		t.Logf("replica mode: %d reconciles", n)
	})
}

// TestStalledCanaryEndsDegraded: canary pods never become ready; the
// progress deadline marks the rollout Degraded and aborts it.
func TestStalledCanaryEndsDegraded(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		strat := strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 20,
			Options: strategy.Options{Capacity: strategy.CapacityReplicas, ProgressDeadline: metav1.Duration{Duration: 2 * time.Minute}, AbortOnProgressDeadline: true}}
		end, n := upgradeReplicas(t, env, k, ns, strat, 0)
		if end.Phase != strategy.PhaseAborted || end.Aborted == nil || end.Aborted.Reason != strategy.ReasonProgressDeadlineExceeded {
			t.Fatalf("ended %s (%+v) after %d reconciles", end.Phase, end.Aborted, n)
		}
		degraded := false
		for _, c := range end.Conditions {
			degraded = degraded || c.Type == strategy.ConditionDegraded && c.Status == metav1.ConditionTrue
		}
		if !degraded {
			t.Fatalf("not Degraded: %+v", end.Conditions)
		}
	})
}

// TestConflicts: on the real API server, a write that keeps losing races
// (a 409 Conflict answer) is retried from a fresh read MaxConflictRetries
// times, then reported as rollout.ErrConflict (not permanent: the Runner
// tries the hop again); a ctx that ends stops the retries.
func TestConflicts(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		newSetter := func(name string, conflicts int32, onPut func()) (*replicas.Setter, *atomic.Int32) {
			deployment(t, env.Kube, ns, name, 4)
			cfg, puts := conflicting(env.Config, name, conflicts, onPut)
			s := k.For(cfg).Deployment(ns, name, 4)
			s.MaxConflictRetries = 3
			return s, puts
		}
		s, puts := newSetter("two", 2, nil)
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil || puts.Load() != 3 {
			t.Fatalf("two conflicts: err %v after %d writes; want nil after 3", err, puts.Load())
		}
		if d := getDeployment(t, env.Kube, ns, "two"); *d.Spec.Replicas != 2 {
			t.Fatalf("after the retries: %d replicas, want 2", *d.Spec.Replicas)
		}
		s, puts = newSetter("endless", -1, nil)
		err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50})
		if !errors.Is(err, rollout.ErrConflict) || !apierrors.IsConflict(err) || rollout.IsPermanent(err) || puts.Load() != 4 {
			t.Fatalf("endless conflicts: err %v after %d writes; want rollout.ErrConflict, not permanent, after 4", err, puts.Load())
		}
		cctx, cancel := context.WithCancel(ctx)
		s, puts = newSetter("cancelled", -1, cancel)
		if err := s.SetCapacity(cctx, rollout.CapacityRequest{Percent: 50}); !errors.Is(err, context.Canceled) || puts.Load() != 1 {
			t.Fatalf("ctx cancelled at the first write: err %v after %d writes; want context.Canceled after 1", err, puts.Load())
		}
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 101}); !errors.Is(err, replicas.ErrInvalid) ||
			!errors.Is(err, rollout.ErrInvalid) || !rollout.IsPermanent(err) {
			t.Fatalf("Percent 101: %v; want a permanent error matching replicas.ErrInvalid and rollout.ErrInvalid", err)
		}
	})
}

// conflicting returns a copy of cfg whose PUTs of the Deployment name the
// API server never sees while conflicts lasts (-1: forever): each is
// answered 409 Conflict, as a write that lost a race. It counts the PUTs,
// and calls onPut (if not nil) before answering each.
func conflicting(cfg *rest.Config, name string, conflicts int32, onPut func()) (*rest.Config, *atomic.Int32) {
	var puts atomic.Int32
	left := conflicts
	var mu sync.Mutex
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/deployments/"+name) {
				return rt.RoundTrip(req)
			}
			puts.Add(1)
			if onPut != nil {
				onPut()
			}
			mu.Lock()
			lose := left != 0
			if left > 0 {
				left--
			}
			mu.Unlock()
			if !lose {
				return rt.RoundTrip(req)
			}
			body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",`+
				`"message":"Operation cannot be fulfilled on deployments.apps %q: the object has been modified","reason":"Conflict",`+
				`"details":{"name":%q,"group":"apps","kind":"deployments"},"code":409}`, name, name)
			return &http.Response{StatusCode: http.StatusConflict, Status: "409 Conflict", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
				ContentLength: int64(len(body)), Request: req}, nil
		})
	})
	return cfg, &puts
}
