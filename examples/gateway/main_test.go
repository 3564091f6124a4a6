package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

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

// TestUpgradeBehindARoute runs the program against a real API server with a
// route the "user" created; the test plays the gateway controller. Without
// -image the program only moves the route's weights (the canary backend
// is deployed by the user); with it, the test also creates the backends'
// Deployments and plays their controller, and the program deploys the
// canary image on the canary Deployment while the route sends it weight 0.
func TestUpgradeBehindARoute(t *testing.T) {
	t.Run("deployed by the user", func(t *testing.T) { testUpgrade(t, false) })
	t.Run("deploys the canary revision", func(t *testing.T) { testUpgrade(t, true) })
}

const testReplicas = 3

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
		Strategy: "canary", Steps: "25,pause,75", Poll: strategy.MinPollInterval, Deadline: time.Minute}
	var ctl *deploymentController
	if deploy {
		// The user's Deployments: the stable one runs v1's image, the
		// canary one an older image; both are provisioned.
		cfg.Image, cfg.Container = "registry.example/app:{revision}", "app"
		ctl = newDeploymentController(t, env, ns)
		ctl.create("web-v1", "registry.example/app:v1")
		ctl.create("web-v2", "registry.example/app:v0")
	}
	var out syncBuffer
	in, inW := ioPipe(t)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
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
				ctl.check(out.String())
			} else if strings.Contains(out.String(), "deploy") {
				t.Error("without -image the program deployed")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		gatewaytest.Accept(t, env.Client, gateway.KindHTTPRoute, ns, "web")
		if ctl != nil {
			ctl.step()
		}
		if !resumed && strings.Contains(out.String(), "Paused") {
			resumed = true
			if _, err := inW.Write([]byte("resume\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// deploymentController plays the Deployment controller for the two
// backends, one step at a time: a Deployment whose generation it has not
// seen (its pod template changed) rolls out over rolloutSteps steps, with
// a surge pod and part of the replicas updated, before its status reports
// every replica updated and available. It also checks, at every step
// until the canary Deployment is rolled out, that the route sends the
// canary backend no traffic.
type deploymentController struct {
	t       *testing.T
	env     *kubetest.Env
	ns      string
	rolling map[string]int // steps left in the rollout of a new template
	// deployedAt is the canary weight in the route when the controller
	// first saw the canary's new template (-1: not yet); rollingSteps
	// counts the steps it spent rolling it out, each with the route's
	// canary weight checked.
	deployedAt   int32
	rollingSteps int
	rolledOut    bool
}

const rolloutSteps = 3

func newDeploymentController(t *testing.T, env *kubetest.Env, ns string) *deploymentController {
	return &deploymentController{t: t, env: env, ns: ns, rolling: map[string]int{}, deployedAt: -1}
}

func (c *deploymentController) create(name, image string) {
	c.t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(testReplicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
	d, err := c.env.Kube.AppsV1().Deployments(c.ns).Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: testReplicas,
		UpdatedReplicas: testReplicas, ReadyReplicas: testReplicas, AvailableReplicas: testReplicas}
	if _, err := c.env.Kube.AppsV1().Deployments(c.ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deploymentController) step() {
	c.t.Helper()
	ctx := context.Background()
	for _, name := range []string{"web-v1", "web-v2"} {
		d, err := c.env.Kube.AppsV1().Deployments(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if d.Status.ObservedGeneration == d.Generation && c.rolling[name] == 0 {
			continue // nothing new
		}
		if d.Status.ObservedGeneration != d.Generation {
			c.rolling[name] = rolloutSteps
		}
		if name == "web-v2" {
			w := c.canaryWeight()
			if c.deployedAt < 0 {
				c.deployedAt = w
			}
			if w != 0 {
				c.t.Errorf("the route sends the canary weight %d while its new template rolls out", w)
			}
			c.rollingSteps++
		}
		c.rolling[name]--
		n := *d.Spec.Replicas
		st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n + 1,
			UpdatedReplicas: n * int32(rolloutSteps-c.rolling[name]) / rolloutSteps, ReadyReplicas: n, AvailableReplicas: n}
		if c.rolling[name] == 0 {
			st.Replicas, st.UpdatedReplicas = n, n
			if name == "web-v2" {
				c.rolledOut = true
			}
		}
		d.Status = st
		if _, err := c.env.Kube.AppsV1().Deployments(c.ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			c.t.Fatalf("controller: %s: %v", name, err)
		}
	}
}

// canaryWeight reads the weight of the canary backend in the route's
// spec.
func (c *deploymentController) canaryWeight() int32 {
	c.t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.env.Client.Get(context.Background(), types.NamespacedName{Namespace: c.ns, Name: "web"}, &rt); err != nil {
		c.t.Fatal(err)
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

// check checks, after a successful run, that the canary Deployment got
// v2's image while the route gave it weight 0, that the program waited
// for it to roll out, and that the stable Deployment was left alone.
func (c *deploymentController) check(out string) {
	c.t.Helper()
	if c.deployedAt != 0 || !c.rolledOut || c.rollingSteps != rolloutSteps {
		c.t.Errorf("canary template: seen at weight %d, rolled out %v in %d steps (want weight 0, rolled out in %d)",
			c.deployedAt, c.rolledOut, c.rollingSteps, rolloutSteps)
	}
	for name, want := range map[string]struct{ image, revision string }{
		"web-v1": {"registry.example/app:v1", ""},
		"web-v2": {"registry.example/app:v2", "v2"},
	} {
		d, err := c.env.Kube.AppsV1().Deployments(c.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != want.image ||
			d.Annotations[replicas.RevisionAnnotation] != want.revision || d.Spec.Template.Annotations[replicas.RevisionAnnotation] != want.revision {
			c.t.Errorf("%s runs %s, revision annotations %q and %q: want %s and %q", name, img,
				d.Annotations[replicas.RevisionAnnotation], d.Spec.Template.Annotations[replicas.RevisionAnnotation], want.image, want.revision)
		}
		if *d.Spec.Replicas != testReplicas {
			c.t.Errorf("%s scaled to %d", name, *d.Spec.Replicas)
		}
	}
	deployed, rolled, weighted := strings.Index(out, "deploy v2 on side B"), strings.Index(out, "v2 rolled out on side B (Deployment web-v2)"), strings.Index(out, "weight 25")
	if deployed < 0 || rolled < deployed || weighted < rolled || strings.Count(out, "deploy v2 on side B") != 1 {
		c.t.Errorf("want the deploy hop, then v2 rolled out, then the first weight hop")
	}
	if !strings.Contains(out, "(image registry.example/app:v2 on Deployment web-v2, which the route sends weight 0)") {
		c.t.Error("the deploy hop does not name the image and the Deployment")
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
	ctl := newDeploymentController(t, env, ns)
	ctl.create("app-blue", "registry.example/app:v0")
	ctl.create("app-green", "registry.example/app:v0")
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
