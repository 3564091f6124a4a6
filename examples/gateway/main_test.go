package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// The tests run against a whole cluster: the real Deployment and
// ReplicaSet controllers and scheduler, and simulated nodes that make pods
// Ready; only the gateway controller is played by the tests.
func TestMain(m *testing.M) {
	os.Exit(kubetest.MainWith(m, kubetest.Options{Cluster: &kubetest.ClusterOptions{}}))
}

// syncBuffer is a bytes.Buffer safe for the program and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUpgradeBehindARoute runs the program against a cluster with a route
// the "user" created; the test plays the gateway controller. Without -image
// the program only moves the route's weights (the canary backend is
// deployed by the user); with it, the test also creates the backends'
// Deployments, which the cluster's controllers run, and the program deploys
// the canary image on the canary Deployment while the route sends it
// weight 0, and moves the first weight only once every pod runs it.
func TestUpgradeBehindARoute(t *testing.T) {
	t.Run("deployed by the user", func(t *testing.T) { testUpgrade(t, false) })
	t.Run("deploys the canary revision", func(t *testing.T) { testUpgrade(t, true) })
}

const (
	testReplicas = 3
	// waitTimeout bounds the test's waits on the cluster: generous, for
	// a loaded machine.
	waitTimeout = 90 * time.Second
	// canaryReadyAfter is how long each canary pod runs before it is
	// Ready. The canary Deployment replaces its pods one at a time (at
	// most one surge pod, none unavailable), so its rollout lasts at
	// least three times this: long enough for the test to see it in
	// progress.
	canaryReadyAfter = 2 * time.Second
)

func testUpgrade(t *testing.T, deploy bool) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw",
		A: gateway.Backend{Name: "web-v1", Port: 80}, B: gateway.Backend{Name: "web-v2", Port: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	// An existing route: its gateway has accepted it, all traffic on the
	// stable backend.
	gatewaytest.Accept(t, env.Client, gateway.KindHTTPRoute, ns, "web")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kubeconfig: kubeconfig, Namespace: ns, Route: "web", Kind: gateway.KindHTTPRoute,
		Stable: "web-v1", Canary: "web-v2", Port: 80, StableRev: "v1", CanaryRev: "v2",
		Strategy: "canary", Steps: "25,pause,75", Poll: strategy.MinPollInterval, Deadline: 2 * time.Minute}
	var obs *observer
	if deploy {
		// The user's Deployments, rolled out: the stable one runs v1's
		// image, the canary one an older image; both are provisioned.
		cfg.Image, cfg.Container = "registry.example/app:{revision}", "app"
		createDeployment(t, env, ns, "web-v1", "registry.example/app:v1", nil)
		createDeployment(t, env, ns, "web-v2", "registry.example/app:v0",
			map[string]string{kubetest.AnnotationReadyAfter: canaryReadyAfter.String()})
		waitRolledOut(t, env, ns, "web-v1", "registry.example/app:v1")
		waitRolledOut(t, env, ns, "web-v2", "registry.example/app:v0")
		obs = newObserver(t, env, ns)
	}
	var out syncBuffer
	in, inW := ioPipe(t)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	go func() { done <- run(ctx, cfg, in, &out) }()
	resumed := false
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			t.Logf("program output:\n%s", out.String())
			if !strings.Contains(out.String(), "Succeeded: v2 is now the stable revision") {
				t.Fatalf("output:\n%s", out.String())
			}
			if deploy {
				obs.observe()
				obs.check(out.String())
			} else if strings.Contains(out.String(), "deploy") {
				t.Error("without -image the program deployed")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		gatewaytest.Accept(t, env.Client, gateway.KindHTTPRoute, ns, "web")
		if obs != nil {
			obs.observe()
		}
		if !resumed && strings.Contains(out.String(), "Paused") {
			resumed = true
			if _, err := inW.Write([]byte("resume\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// createDeployment creates a Deployment of testReplicas pods of image,
// labelled app=name, with podAnnotations on its pod template. It replaces
// its pods one at a time: one surge pod, none unavailable.
func createDeployment(t *testing.T, env *kubetest.Env, ns, name, image string, podAnnotations map[string]string) {
	t.Helper()
	labels := map[string]string{"app": name}
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(testReplicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
	if _, err := env.Kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// snapshot is what the test sees of a Deployment and its pods at one
// moment.
type snapshot struct {
	generation int64
	image      string // of the pod template
	status     appsv1.DeploymentStatus
	// ready counts the pods (not terminating) that run image and are
	// Ready; others the pods (not terminating) that do not, or are not
	// Ready yet. Terminating pods are on their way out and count in
	// neither.
	ready, others int
	uids          []types.UID // of the pods not terminating, sorted
}

// rolledOut reports that the Deployment's controller has rolled its
// template out to every replica and that the pods say so too: exactly
// testReplicas pods, all running the template's image and Ready.
func (r snapshot) rolledOut() bool {
	s := r.status
	return s.ObservedGeneration == r.generation && s.Replicas == testReplicas && s.UpdatedReplicas == testReplicas &&
		s.AvailableReplicas == testReplicas && r.ready == testReplicas && r.others == 0
}

func (r snapshot) String() string {
	return fmt.Sprintf("generation %d, image %s, %d pods of it ready, %d others; status observedGeneration %d, replicas %d, updated %d, ready %d, available %d",
		r.generation, r.image, r.ready, r.others, r.status.ObservedGeneration, r.status.Replicas,
		r.status.UpdatedReplicas, r.status.ReadyReplicas, r.status.AvailableReplicas)
}

// readSnapshot reads the Deployment name, then its pods.
func readSnapshot(ctx context.Context, env *kubetest.Env, ns, name string) (snapshot, error) {
	d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return snapshot{}, err
	}
	pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return snapshot{}, err
	}
	r := snapshot{generation: d.Generation, image: d.Spec.Template.Spec.Containers[0].Image, status: d.Status}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		r.uids = append(r.uids, p.UID)
		if p.Spec.Containers[0].Image == r.image && podReady(&p) {
			r.ready++
		} else {
			r.others++
		}
	}
	slices.Sort(r.uids)
	return r, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitRolledOut waits until the Deployment name runs image on every pod.
func waitRolledOut(t *testing.T, env *kubetest.Env, ns, name, image string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		r, err := readSnapshot(ctx, env, ns, name)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = r.String()
		return r.image == image && r.rolledOut(), nil
	})
	if err != nil {
		t.Fatalf("%s did not roll out %s: %v (last: %s)", name, image, err, last)
	}
}

// observer watches the route and the two Deployments while the program
// runs, and checks at each look that the route sends the canary backend
// traffic only once its Deployment has rolled the canary image out, and
// that the stable Deployment keeps its pods.
type observer struct {
	t      *testing.T
	env    *kubetest.Env
	ns     string
	stable snapshot // the stable Deployment before the run
	// rolling counts the looks that found the canary Deployment's new
	// template rolling out with some of its pods Ready and some not yet
	// replaced, the route sending it no traffic.
	rolling int
	// weighted: a look found the route sending the canary traffic.
	weighted bool
	// early and changed count the looks that found the route weighting
	// the canary before it rolled out, and the stable Deployment changed
	// (each reported at its first look).
	early, changed int
}

func newObserver(t *testing.T, env *kubetest.Env, ns string) *observer {
	t.Helper()
	stable, err := readSnapshot(context.Background(), env, ns, "web-v1")
	if err != nil {
		t.Fatal(err)
	}
	return &observer{t: t, env: env, ns: ns, stable: stable}
}

// observe looks once. It reads the route before the Deployments: a weight
// the program moved is then at least as old as the pods it is checked
// against, and a Deployment rolled out stays so until the next revision.
func (o *observer) observe() {
	o.t.Helper()
	ctx := context.Background()
	w := o.canaryWeight()
	canary, err := readSnapshot(ctx, o.env, o.ns, "web-v2")
	if err != nil {
		o.t.Fatal(err)
	}
	stable, err := readSnapshot(ctx, o.env, o.ns, "web-v1")
	if err != nil {
		o.t.Fatal(err)
	}
	if w != 0 {
		o.weighted = true
		if canary.image != "registry.example/app:v2" || !canary.rolledOut() {
			if o.early++; o.early == 1 {
				o.t.Errorf("the route sends the canary weight %d before it has rolled out v2: %s", w, canary)
			}
		}
	} else if canary.image == "registry.example/app:v2" && canary.ready > 0 && canary.others > 0 {
		o.rolling++
	}
	if stable.generation != o.stable.generation || !stable.rolledOut() || !slices.Equal(stable.uids, o.stable.uids) {
		if o.changed++; o.changed > 1 {
			return
		}
		o.t.Errorf("the stable Deployment changed: %s, pods %v (before the run: %s, pods %v)", stable, stable.uids, o.stable, o.stable.uids)
	}
}

// canaryWeight reads the weight of the canary backend in the route's
// spec.
func (o *observer) canaryWeight() int32 {
	o.t.Helper()
	var rt gwv1.HTTPRoute
	if err := o.env.Client.Get(context.Background(), types.NamespacedName{Namespace: o.ns, Name: "web"}, &rt); err != nil {
		o.t.Fatal(err)
	}
	var w int32
	for _, r := range rt.Spec.Rules {
		for _, b := range r.BackendRefs {
			if b.Name == "web-v2" && b.Weight != nil {
				w += *b.Weight
			}
		}
	}
	return w
}

// check checks, after a successful run, that the test saw the canary
// Deployment roll v2's image out while the route gave it weight 0, and
// the route give it traffic afterwards; that the cluster replaced the
// canary's pods through a new ReplicaSet; and that the program neither
// scaled the Deployments nor touched the stable one.
func (o *observer) check(out string) {
	o.t.Helper()
	ctx := context.Background()
	if o.rolling == 0 || !o.weighted {
		o.t.Errorf("saw the canary rolling out at weight 0 %d times, and the route weighting it: %v (want both)", o.rolling, o.weighted)
	}
	if o.early > 1 || o.changed > 1 {
		o.t.Errorf("the route weighted the canary early at %d looks, the stable Deployment was changed at %d", o.early, o.changed)
	}
	o.t.Logf("saw the canary Deployment part rolled out, at weight 0, %d times", o.rolling)
	for name, want := range map[string]struct {
		image, revision string
		replicaSets     map[string]int32 // image: replicas
	}{
		"web-v1": {"registry.example/app:v1", "", map[string]int32{"registry.example/app:v1": testReplicas}},
		"web-v2": {"registry.example/app:v2", "v2", map[string]int32{"registry.example/app:v0": 0, "registry.example/app:v2": testReplicas}},
	} {
		d, err := o.env.Kube.AppsV1().Deployments(o.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			o.t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != want.image ||
			d.Annotations[replicas.RevisionAnnotation] != want.revision || d.Spec.Template.Annotations[replicas.RevisionAnnotation] != want.revision {
			o.t.Errorf("%s runs %s, revision annotations %q and %q: want %s and %q", name, img,
				d.Annotations[replicas.RevisionAnnotation], d.Spec.Template.Annotations[replicas.RevisionAnnotation], want.image, want.revision)
		}
		if *d.Spec.Replicas != testReplicas {
			o.t.Errorf("%s scaled to %d", name, *d.Spec.Replicas)
		}
		rss, err := o.env.Kube.AppsV1().ReplicaSets(o.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			o.t.Fatal(err)
		}
		got := map[string]int32{}
		for _, rs := range rss.Items {
			got[rs.Spec.Template.Spec.Containers[0].Image] = *rs.Spec.Replicas
		}
		if diff := cmp.Diff(want.replicaSets, got); diff != "" {
			o.t.Errorf("%s's ReplicaSets, replicas by image (-want +got):\n%s", name, diff)
		}
	}
	deployed, rolled, weighted := strings.Index(out, "deploy v2 on side B"), strings.Index(out, "v2 rolled out on side B (Deployment web-v2)"), strings.Index(out, "weight 25")
	if deployed < 0 || rolled < deployed || weighted < rolled || strings.Count(out, "deploy v2 on side B") != 1 {
		o.t.Errorf("want the deploy hop, then v2 rolled out, then the first weight hop")
	}
	if !strings.Contains(out, "(image registry.example/app:v2 on Deployment web-v2, which the route sends weight 0)") {
		o.t.Error("the deploy hop does not name the image and the Deployment")
	}
}

// TestRefusesAStableDeploymentOnAnotherRevision: with -image, a new
// rollout needs the stable Deployment to run the stable revision's image.
func TestRefusesAStableDeploymentOnAnotherRevision(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw",
		A: gateway.Backend{Name: "web-v1", Port: 80}, B: gateway.Backend{Name: "web-v2", Port: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	createDeployment(t, env, ns, "app-blue", "registry.example/app:v0", nil)
	createDeployment(t, env, ns, "app-green", "registry.example/app:v0", nil)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kubeconfig: kubeconfig, Namespace: ns, Route: "web", Kind: gateway.KindHTTPRoute,
		Stable: "web-v1", Canary: "web-v2", StableDeployment: "app-blue", CanaryDeployment: "app-green", Port: 80,
		StableRev: "v1", CanaryRev: "v2", Strategy: "bluegreen", Poll: strategy.MinPollInterval, Deadline: time.Minute,
		Image: "registry.example/app:{revision}", Container: "app"}
	err = run(context.Background(), cfg, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "app-blue does not run the stable revision v1 (image registry.example/app:v1") {
		t.Fatalf("got %v", err)
	}
	if d, _ := env.Kube.AppsV1().Deployments(ns).Get(context.Background(), "app-green", metav1.GetOptions{}); d.Generation != 1 {
		t.Error("the canary Deployment was written")
	}
}

func TestParseSteps(t *testing.T) {
	steps, err := parseSteps("10, pause:1m ,50,pause,100")
	if err != nil || len(steps) != 5 || *steps[0].SetWeight != 10 || steps[1].Pause.Duration.Duration != time.Minute || steps[3].Pause.Duration != nil {
		t.Fatalf("steps %+v err %v", steps, err)
	}
	for _, bad := range []string{"x", "pause:forever"} {
		if _, err := parseSteps(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	if _, err := strategyFor(Config{Strategy: "sideways"}); err == nil {
		t.Error("unknown strategy accepted")
	}
	if _, err := strategyFor(Config{Strategy: "incremental", Step: 0, Interval: time.Second}); err == nil {
		t.Error("step 0 accepted")
	}
	if f, err := imageFor(Config{Image: "registry.example/app:{revision}", Container: "app"}); err != nil || f("v2") != "registry.example/app:v2" {
		t.Errorf("-image with {revision}: %v", err)
	}
	if f, err := imageFor(Config{}); f != nil || err != nil {
		t.Errorf("no -image: %v", err)
	}
	for _, bad := range []Config{{Image: "registry.example/app:latest", Container: "app"}, {Image: "registry.example/app:{revision}"}} {
		if _, err := imageFor(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func ioPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}
