package replicas_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// The end-to-end test of revisions on two Deployments behind an HTTPRoute,
// in the managed capacity mode: the Runner scales each Deployment with a
// Setter, deploys each revision's image with a Deployer, and moves the
// route's weights with the gateway Router. The cluster's Deployment and
// ReplicaSet controllers run the pods (on kwok's simulated nodes); the
// test plays the gateway controller (gatewaytest.Accept), and watches the
// Deployments.

const fullReplicas = 10

// podsOf is the Deployment controller's side of a test: the real
// controllers run the pods, step waits until they have answered the
// Runner's last writes, serving reads the pods.
type podsOf struct {
	cs kubernetes.Interface
	ns string
}

func templateRevision(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[replicas.RevisionAnnotation]
}

// step waits until the controller has rolled both Deployments out: every
// pod asked for runs the current template and is ready, no other is left.
func (c *podsOf) step(t testing.TB) {
	t.Helper()
	for _, name := range []string{"web-a", "web-b"} {
		waitRolledOut(t, c.cs, c.ns, name)
	}
}

// serving reports the ready pods of Deployment name (a pod being deleted
// is not counted), whether all of them run revision (the RevisionAnnotation
// their template gave them), and the pods for a failure message.
func (c *podsOf) serving(t testing.TB, name, revision string) (ready int, allOn bool, pods string) {
	t.Helper()
	l, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	allOn = true
	var b strings.Builder
	for _, p := range l.Items {
		r := podReady(&p) && p.DeletionTimestamp == nil
		fmt.Fprintf(&b, "%s(%q ready %v) ", p.Name, p.Annotations[replicas.RevisionAnnotation], r)
		if r {
			ready++
			allOn = allOn && p.Annotations[replicas.RevisionAnnotation] == revision
		}
	}
	return ready, allOn, b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// templateWatch records, from a watch of the test's Deployments, every
// change of a pod template and the Deployment's replicas before and after.
type templateWatch struct {
	mu      sync.Mutex
	last    map[string]*appsv1.Deployment
	changes []string // `web-b: "v2" -> "v3" (spec.replicas 0 -> 0, status.replicas 0)`
	bad     []string // template changes with replicas asked or running
	done    chan struct{}
}

func watchTemplates(t *testing.T, cs kubernetes.Interface, ns string) *templateWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	tw := &templateWatch{last: map[string]*appsv1.Deployment{}, done: make(chan struct{})}
	for i := range list.Items {
		tw.last[list.Items[i].Name] = &list.Items[i]
	}
	t.Cleanup(func() { cancel(); w.Stop(); <-tw.done })
	go func() {
		defer close(tw.done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			tw.mu.Lock()
			if prev := tw.last[d.Name]; prev != nil && !apiequality.Semantic.DeepEqual(prev.Spec.Template, d.Spec.Template) {
				line := fmt.Sprintf("%s: %q -> %q (spec.replicas %d -> %d, status.replicas %d)", d.Name,
					templateRevision(prev), templateRevision(d), *prev.Spec.Replicas, *d.Spec.Replicas, prev.Status.Replicas)
				tw.changes = append(tw.changes, line)
				if *prev.Spec.Replicas != 0 || *d.Spec.Replicas != 0 || prev.Status.Replicas != 0 {
					tw.bad = append(tw.bad, line)
				}
			}
			tw.last[d.Name] = d
			tw.mu.Unlock()
		}
	}()
	return tw
}

// caughtUp waits until the watch has delivered the current version of
// every Deployment.
func (tw *templateWatch) caughtUp(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, name := range []string{"web-a", "web-b"} {
		rv := getDeployment(t, cs, ns, name).ResourceVersion
		for {
			tw.mu.Lock()
			seen := tw.last[name] != nil && tw.last[name].ResourceVersion == rv
			tw.mu.Unlock()
			if seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watch never delivered %s at resourceVersion %s", name, rv)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// e2e is one test's world: two Deployments, an HTTPRoute, the Runner.
type e2e struct {
	env    *kubetest.Env
	ns     string
	clock  *fake.Clock
	runner *rollout.Runner
	ctrl   *podsOf
	watch  *templateWatch
	// weights is every distinct split of the route seen, with the
	// revision each side ran.
	weights []string
	n       int
	// settle, when set, runs after the controller's step.
	settle func()
}

var (
	backendA = gateway.Backend{Name: "web-a", Port: 80}
	backendB = gateway.Backend{Name: "web-b", Port: 80}
)

// createSides creates the two Deployments and the route of a test in ns:
// side A runs the first revision, created with it; side B starts empty,
// running nothing upshift recognises. The route is accepted, and side A
// rolled out. podAnnotations go on both pod templates.
func createSides(tb testing.TB, env *kubetest.Env, ns string, podAnnotations ...map[string]string) {
	tb.Helper()
	ctx := context.Background()
	for _, side := range []struct {
		name, revision string
		replicas       int32
	}{{"web-a", "v1", fullReplicas}, {"web-b", "", 0}} {
		labels := map[string]string{"app": side.name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: side.name},
			Spec: appsv1.DeploymentSpec{
				Replicas: new(side.replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:none"}}},
				},
			},
		}
		for _, ann := range podAnnotations {
			for k, v := range ann {
				if d.Spec.Template.Annotations == nil {
					d.Spec.Template.Annotations = map[string]string{}
				}
				d.Spec.Template.Annotations[k] = v
			}
		}
		if side.revision != "" {
			d.Annotations = map[string]string{replicas.RevisionAnnotation: side.revision}
			if d.Spec.Template.Annotations == nil {
				d.Spec.Template.Annotations = map[string]string{}
			}
			d.Spec.Template.Annotations[replicas.RevisionAnnotation] = side.revision
			d.Spec.Template.Spec.Containers[0].Image = "example.com/app:" + side.revision
		}
		if _, err := env.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw", A: backendA, B: backendB})
	if err != nil {
		tb.Fatal(err)
	}
	if err := env.Client.Create(ctx, rt); err != nil {
		tb.Fatal(err)
	}
	gatewaytest.Accept(tb, env.Client, gateway.KindHTTPRoute, ns, "web")
	for _, name := range []string{"web-a", "web-b"} {
		waitRolledOut(tb, env.Kube, ns, name)
	}
}

func newE2E(t *testing.T, strat strategy.Strategy) *e2e {
	t.Helper()
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	createSides(t, env, ns)
	router, err := gateway.NewRouter(env.Client, gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}}, A: backendA, B: backendB})
	if err != nil {
		t.Fatal(err)
	}
	a := replicas.ForDeployment(env.Kube, replicas.Workload{Namespace: ns, Name: "web-a", FullReplicas: fullReplicas})
	b := replicas.ForDeployment(env.Kube, replicas.Workload{Namespace: ns, Name: "web-b", FullReplicas: fullReplicas})
	clock := fake.NewClock(t0)
	g := &e2e{env: env, ns: ns, clock: clock,
		runner: &rollout.Runner{Strategy: strat, Router: router, A: a, B: b,
			RevisionA: deployer(t, a), RevisionB: deployer(t, b), Clock: clock},
		ctrl: &podsOf{cs: env.Kube, ns: ns},
	}
	if err := g.runner.Validate(); err != nil {
		t.Fatal(err)
	}
	g.watch = watchTemplates(t, env.Kube, ns)
	return g
}

func (g *e2e) route(t *testing.T) rollout.Weights {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := g.env.Client.Get(context.Background(), types.NamespacedName{Namespace: g.ns, Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	return routeWeights(&rt)
}

// routeWeights reads the weights of the two sides in the spec of a route
// createSides made (one rule, whose backends are the two sides).
func routeWeights(rt *gwv1.HTTPRoute) rollout.Weights {
	var w rollout.Weights
	for _, ref := range rt.Spec.Rules[0].BackendRefs {
		switch string(ref.Name) {
		case backendA.Name:
			w.A = *ref.Weight
		case backendB.Name:
			w.B = *ref.Weight
		}
	}
	return w
}

// check holds the route to the pods: a side with weight has ready pods,
// every one of them running the revision of the side's role in s.
func (g *e2e) check(t *testing.T, s strategy.State, when string) {
	t.Helper()
	w := g.route(t)
	if w.A+w.B != 100 {
		t.Fatalf("reconcile %d (%s): route weights %+v", g.n, when, w)
	}
	stableSide := s.StableSide
	if stableSide == "" {
		stableSide = strategy.SideA
	}
	var line []string
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		name, role := "web-a", s.CanaryRevision
		if side == strategy.SideB {
			name = "web-b"
		}
		if side == stableSide {
			role = s.StableRevision
		}
		if w.Of(side) == 0 {
			continue
		}
		ready, allOn, pods := g.ctrl.serving(t, name, role)
		if ready == 0 || !allOn {
			t.Fatalf("reconcile %d (%s): side %s has weight %d with %d ready pods, all on %s (its role's revision): %v; pods %s",
				g.n, when, side, w.Of(side), ready, role, allOn, pods)
		}
		line = append(line, fmt.Sprintf("%s=%d(%s)", side, w.Of(side), role))
	}
	l := strings.Join(line, " ")
	if len(g.weights) == 0 || g.weights[len(g.weights)-1] != l {
		g.weights = append(g.weights, l)
	}
}

// run reconciles until stop says so or the rollout ends; after every
// reconcile it waits until the Deployment controller has answered, and
// plays the gateway controller.
func (g *e2e) run(t *testing.T, s strategy.State, stop func(strategy.State) bool) strategy.State {
	t.Helper()
	ctx := context.Background()
	for i := 0; !s.Phase.Terminal() && (stop == nil || !stop(s)); i++ {
		if i > 1000 {
			t.Fatalf("no end after %d reconciles: %s %s", i, s.Phase, s.Message)
		}
		next, requeue, err := g.runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatalf("reconcile %d: %v", g.n, err)
		}
		s = next
		g.n++
		g.check(t, s, "after the reconcile")
		g.ctrl.step(t)
		if g.settle != nil {
			g.settle()
		}
		g.check(t, s, "after the controller")
		a, b := getDeployment(t, g.env.Kube, g.ns, "web-a"), getDeployment(t, g.env.Kube, g.ns, "web-b")
		if total := *a.Spec.Replicas + *b.Spec.Replicas; total > fullReplicas+2 {
			t.Fatalf("reconcile %d: %d replicas, above 100%% + MaxSurge 20%% of %d", g.n, total, fullReplicas)
		}
		gatewaytest.Accept(t, g.env.Client, gateway.KindHTTPRoute, g.ns, "web")
		if requeue <= 0 {
			requeue = time.Second
		}
		g.clock.Advance(requeue)
	}
	return s
}

// end checks the final picture: all traffic on the side that runs
// revision, at full replicas, and the template changes the watch saw.
func (g *e2e) end(t *testing.T, s strategy.State, revision string, changes []string) {
	t.Helper()
	side := s.StableSide
	name := "web-a"
	if side == strategy.SideB {
		name = "web-b"
	}
	if w := g.route(t); w.Of(side) != 100 {
		t.Errorf("route %+v: want all traffic on side %s", w, side)
	}
	d := getDeployment(t, g.env.Kube, g.ns, name)
	if d.Annotations[replicas.RevisionAnnotation] != revision || d.Spec.Template.Spec.Containers[0].Image != "example.com/app:"+revision ||
		d.Status.AvailableReplicas != fullReplicas {
		t.Errorf("%s runs %q (%s), %d available; want %s at %d", name, d.Annotations[replicas.RevisionAnnotation],
			d.Spec.Template.Spec.Containers[0].Image, d.Status.AvailableReplicas, revision, fullReplicas)
	}
	g.watch.caughtUp(t, g.env.Kube, g.ns)
	g.watch.mu.Lock()
	defer g.watch.mu.Unlock()
	if len(g.watch.bad) > 0 {
		t.Errorf("templates changed with replicas asked or running: %q", g.watch.bad)
	}
	var got []string
	for _, c := range g.watch.changes {
		got = append(got, c[:strings.Index(c, " (")])
	}
	if strings.Join(got, "; ") != strings.Join(changes, "; ") {
		t.Errorf("template changes %q, want %q", g.watch.changes, changes)
	}
	t.Logf("%d reconciles, %s simulated; template changes: %s; route: %s", g.n, g.clock.Now().Sub(t0),
		strings.Join(g.watch.changes, "; "), strings.Join(g.weights, " | "))
}

func upgradeStrategy() strategy.Strategy {
	return strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 20}
}

// TestUpgradeRevisionsRollBackMidWalk: v1 -> v2 on side B; then v3 on side
// A, and mid-walk, with v3 serving, a Retarget back to v2 walks v3 out:
// all traffic ends on v2, each revision deployed once, at 0 replicas.
func TestUpgradeRevisionsRollBackMidWalk(t *testing.T) {
	g := newE2E(t, upgradeStrategy())
	s := strategy.State{}.Retarget("v1", g.clock.Now())
	s = s.Retarget("v2", g.clock.Now())
	s = g.run(t, s, nil)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" || s.StableSide != strategy.SideB {
		t.Fatalf("v1 -> v2 ended %s on %s (side %s): %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	s = s.Retarget("v3", g.clock.Now())
	s = g.run(t, s, func(s strategy.State) bool { return s.Observed.Weight >= 40 })
	if s.Phase.Terminal() {
		t.Fatalf("v2 -> v3 ended %s before the Retarget: %s", s.Phase, s.Message)
	}
	s = s.Retarget("v2", g.clock.Now())
	s = g.run(t, s, nil)
	if s.Phase != strategy.PhaseRolledBack || s.StableRevision != "v2" {
		t.Fatalf("back to v2 ended %s on %s: %s", s.Phase, s.StableRevision, s.Message)
	}
	g.end(t, s, "v2", []string{`web-b: "" -> "v2"`, `web-a: "v1" -> "v3"`})
}

// TestUpgradeRevisionsRetargetMidWalk: v1 -> v2 on side B is retargeted to
// v3 mid-walk, with v2 serving: v2 is walked out of side B, v3 deployed
// there at 0 replicas and ramped; then v3 -> v2 deploys v2 on side A. All
// traffic ends on v2.
func TestUpgradeRevisionsRetargetMidWalk(t *testing.T) {
	g := newE2E(t, upgradeStrategy())
	s := strategy.State{}.Retarget("v1", g.clock.Now())
	s = s.Retarget("v2", g.clock.Now())
	s = g.run(t, s, func(s strategy.State) bool { return s.Observed.Weight >= 40 })
	if s.Phase.Terminal() {
		t.Fatalf("v1 -> v2 ended %s before the Retarget: %s", s.Phase, s.Message)
	}
	s = s.Retarget("v3", g.clock.Now())
	s = g.run(t, s, nil)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v3" || s.StableSide != strategy.SideB {
		t.Fatalf("to v3 ended %s on %s (side %s): %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	s = s.Retarget("v2", g.clock.Now())
	s = g.run(t, s, nil)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" || s.StableSide != strategy.SideA {
		t.Fatalf("v3 -> v2 ended %s on %s (side %s): %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	g.end(t, s, "v2", []string{`web-b: "" -> "v2"`, `web-b: "v2" -> "v3"`, `web-a: "v1" -> "v2"`})
}
