package replicas_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// fullReplicasAnnotation is the full count a Setter records on the
// workload with each capacity it sets.
const fullReplicasAnnotation = "upshift.dev/full-replicas"

func TestFullFor(t *testing.T) {
	cases := []struct{ n, p, want int32 }{
		{1, 1, 1}, {1, 100, 1}, {3, 30, 7}, {6, 40, 13}, {9, 60, 14}, {7, 70, 9}, {10, 100, 10}, {20, 100, 20},
		{0, 50, 0}, {5, 0, 0}, {-1, 50, 0},
	}
	for _, c := range cases {
		if got := replicas.FullFor(c.n, c.p); got != c.want {
			t.Errorf("FullFor(%d, %d) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}

// TestFullForProperty: FullFor is the smallest full count whose share p
// asks for at least n replicas, so reading a full count back from what an
// HPA scaled a side to never raises it past what that count needs.
func TestFullForProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int32Range(1, 5000).Draw(t, "n")
		p := rapid.Int32Range(1, 100).Draw(t, "p")
		f := replicas.FullFor(n, p)
		if replicas.Replicas(f, p) < n {
			t.Fatalf("Replicas(FullFor(%d, %d) = %d, %d) = %d < %d", n, p, f, p, replicas.Replicas(f, p), n)
		}
		if f > 1 && replicas.Replicas(f-1, p) >= n {
			t.Fatalf("FullFor(%d, %d) = %d is not the smallest: %d asks for %d", n, p, f, f-1, replicas.Replicas(f-1, p))
		}
		// A full count already large enough is not raised.
		full := rapid.Int32Range(1, 5000).Draw(t, "full")
		if replicas.FullFor(replicas.Replicas(full, p), p) > full {
			t.Fatalf("FullFor(Replicas(%d, %d), %d) > %d", full, p, p, full)
		}
	})
}

// hpaSim acts as the HorizontalPodAutoscaler controller does for the
// test's HPAs, one sync at a time: it reads each HPA and its target's
// scale subresource; a target at 0 replicas is not scaled (scaling is
// disabled); a target outside the HPA's bounds is brought to the nearest
// bound; otherwise the desired count is what a per-pod metric asks for:
// the service's load (in pods' worth) times the share of the traffic the
// target's backend gets, rounded up and clamped to the bounds. It writes
// status.observedGeneration, currentReplicas and desiredReplicas, and
// scales the target through /scale.
type hpaSim struct {
	env  *kubetest.Env
	ns   string
	load int32
}

func (h *hpaSim) sync(t testing.TB, w rollout.Weights) {
	t.Helper()
	ctx := context.Background()
	hpas := h.env.Kube.AutoscalingV2().HorizontalPodAutoscalers(h.ns)
	list, err := hpas.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		// A sync that loses a race (the Deployment controller writes the
		// target's status) is done again from fresh reads, as the
		// controller does at its next sync.
		name := list.Items[i].Name
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return h.syncOne(ctx, name, w) }); err != nil {
			t.Fatalf("hpa %s: %v", name, err)
		}
	}
}

// syncOne is one sync of HPA name.
func (h *hpaSim) syncOne(ctx context.Context, name string, w rollout.Weights) error {
	hpas := h.env.Kube.AutoscalingV2().HorizontalPodAutoscalers(h.ns)
	hpa, err := hpas.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	target := hpa.Spec.ScaleTargetRef.Name
	sc, err := h.env.Kube.AppsV1().Deployments(h.ns).GetScale(ctx, target, metav1.GetOptions{})
	if err != nil {
		return err
	}
	weight := w.A
	if target == "web-b" {
		weight = w.B
	}
	cur, lo, hi := sc.Spec.Replicas, int32(1), hpa.Spec.MaxReplicas
	if hpa.Spec.MinReplicas != nil {
		lo = *hpa.Spec.MinReplicas
	}
	var want int32
	switch {
	case cur == 0 && lo != 0:
		want = 0
	case cur > hi:
		want = hi
	case cur < lo:
		want = lo
	default:
		want = min(hi, max(lo, (h.load*weight+99)/100))
	}
	gen := hpa.Generation
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: &gen, CurrentReplicas: cur, DesiredReplicas: want,
		CurrentMetrics: []autoscalingv2.MetricStatus{}}
	if _, err := hpas.UpdateStatus(ctx, hpa, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if want != cur {
		sc.Spec.Replicas = want
		if _, err := h.env.Kube.AppsV1().Deployments(h.ns).UpdateScale(ctx, target, sc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("scale %s to %d: %w", target, want, err)
		}
	}
	return nil
}

var hpaMin, hpaMax int32 = 2, 20

// createHPA creates the HPA name of Deployment target: minReplicas 2,
// maxReplicas 20, CPU at 60%.
func createHPA(t testing.TB, env *kubetest.Env, ns, name, target string) {
	t.Helper()
	util := int32(60)
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    new(hpaMin),
			MaxReplicas:    hpaMax,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &util}}}},
		},
	}
	if _, err := env.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(context.Background(), h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getHPA(t testing.TB, env *kubetest.Env, ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h, err := env.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hpaWorld is an e2e world whose sides each have an HPA, played by hpaSim
// after every reconcile (the cluster runs no HorizontalPodAutoscaler
// controller, and has no metrics), before the test waits for the
// Deployment controller's answer.
type hpaWorld struct {
	*e2e
	k   kinds
	hpa *hpaSim
	// maxLoad is the largest load the HPAs were fed during the rollout:
	// no more than 100% + MaxSurge of it is ever asked for.
	maxLoad int32
	// exact: no rounding allowance in the surge budget (a full count of
	// 10 and steps of 20%).
	exact   bool
	fulls   []string // every distinct full count upshift recorded
	maxSeen int32    // the largest spec.replicas total
	writes  *replicaWrites
}

// replicaWrites checks every write of a Deployment that the Setters make
// (a PUT of the object): with an HPA on each side, spec.replicas changes
// only from 0 or to 0, and is otherwise the HPA's.
type replicaWrites struct {
	mu      sync.Mutex
	checked int
	bad     []string
}

type hpaRoundTripper func(*http.Request) (*http.Response, error)

func (f hpaRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (g *hpaWorld) checkedConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/json" // bodies the check can read
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return hpaRoundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPut || !strings.Contains(req.URL.Path, "/deployments/") ||
				strings.HasSuffix(req.URL.Path, "/status") || strings.HasSuffix(req.URL.Path, "/scale") || req.Body == nil {
				return rt.RoundTrip(req)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			var d appsv1.Deployment
			if json.Unmarshal(body, &d) == nil && d.Spec.Replicas != nil {
				cur, err := g.env.Kube.AppsV1().Deployments(d.Namespace).Get(req.Context(), d.Name, metav1.GetOptions{})
				if err == nil && cur.ResourceVersion == d.ResourceVersion { // else it conflicts: no write
					g.writes.mu.Lock()
					g.writes.checked++
					if from, to := *cur.Spec.Replicas, *d.Spec.Replicas; from != to && from != 0 && to != 0 {
						g.writes.bad = append(g.writes.bad, fmt.Sprintf("%s: spec.replicas %d -> %d", d.Name, from, to))
					}
					g.writes.mu.Unlock()
				}
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func newHPAWorld(t *testing.T, k kinds, strat strategy.Strategy, load int32) *hpaWorld {
	t.Helper()
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	createSides(t, env, ns)
	createHPA(t, env, ns, "web-a", "web-a")
	createHPA(t, env, ns, "web-b", "web-b")
	clock := fake.NewClock(t0)
	g := &hpaWorld{e2e: &e2e{env: env, ns: ns, clock: clock,
		ctrl: &podsOf{cs: env.Kube, ns: ns}},
		k: k, hpa: &hpaSim{env: env, ns: ns, load: load}, maxLoad: load, writes: &replicaWrites{}}
	g.k = k.For(g.checkedConfig(env.Config))
	g.runner = g.newRunner(t, strat)
	g.hpa.sync(t, rollout.Weights{A: 100})
	g.ctrl.step(t)
	g.watch = watchTemplates(t, env.Kube, ns)
	return g
}

// setters builds the two sides' Setters, linked to their HPAs.
func (g *hpaWorld) setters(t testing.TB) (a, b *replicas.Setter) {
	t.Helper()
	a, b = g.k.Deployment(g.ns, "web-a", 0), g.k.Deployment(g.ns, "web-b", 0)
	var err error
	if g.k.c != nil {
		err = replicas.AutoscaleClient(g.k.c, a, b, replicas.AutoscaleConfig{})
	} else {
		err = replicas.Autoscale(g.k.cs, a, b, replicas.AutoscaleConfig{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// newRunner is a Runner on new Setters and Deployers, as a restarted
// controller builds them.
func (g *hpaWorld) newRunner(t *testing.T, strat strategy.Strategy) *rollout.Runner {
	t.Helper()
	router, err := gateway.NewRouter(g.env.Client, gateway.Config{Routes: []gateway.RouteRef{{Namespace: g.ns, Name: "web"}}, A: backendA, B: backendB})
	if err != nil {
		t.Fatal(err)
	}
	a, b := g.setters(t)
	r := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, RevisionA: deployer(t, a), RevisionB: deployer(t, b), Clock: g.clock}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func fullOf(t testing.TB, ann map[string]string) int32 {
	t.Helper()
	v, ok := ann[fullReplicasAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %q", fullReplicasAnnotation, v)
	}
	return int32(n)
}

// checkBudget holds the sides to the surge budget and the canary's traffic
// to its ready share, at every observation.
func (g *hpaWorld) checkBudget(t *testing.T, s strategy.State, when string) {
	t.Helper()
	g.check(t, s, when)
	a, b := getDeployment(t, g.env.Kube, g.ns, "web-a"), getDeployment(t, g.env.Kube, g.ns, "web-b")
	total := *a.Spec.Replicas + *b.Spec.Replicas
	g.maxSeen = max(g.maxSeen, total)
	surge := int32(20)
	budget := (g.maxLoad*(100+surge) + 99) / 100
	if !g.exact {
		budget++ // each side's share rounds up: the pair by at most one replica
	}
	if total > budget {
		t.Fatalf("reconcile %d (%s): %d + %d = %d replicas, above 100%% + MaxSurge %d%% of the autoscaled count %d (%d)",
			g.n, when, *a.Spec.Replicas, *b.Spec.Replicas, total, surge, g.maxLoad, budget)
	}
	fa, fb := fullOf(t, a.Annotations), fullOf(t, b.Annotations)
	if l := fmt.Sprintf("%d/%d", fa, fb); len(g.fulls) == 0 || g.fulls[len(g.fulls)-1] != l {
		g.fulls = append(g.fulls, l)
	}
	// The canary's traffic is within its ready pods' share of the
	// newest full count that upshift set a capacity against.
	full := max(fa, fb)
	canary, name := strategy.SideB, "web-b"
	if s.StableSide == strategy.SideB {
		canary, name = strategy.SideA, "web-a"
	}
	if w := g.route(t).Of(canary); w > 0 && !s.Phase.Terminal() {
		ready, _, _ := g.ctrl.serving(t, name, s.CanaryRevision)
		if full == 0 { // released to the HPAs: the count is the canary's own
			full = *getDeployment(t, g.env.Kube, g.ns, name).Spec.Replicas
		}
		if full == 0 || int32(ready)*100 < w*full {
			t.Fatalf("reconcile %d (%s): the canary %s has weight %d with %d ready pods of a full count %d",
				g.n, when, name, w, ready, full)
		}
	}
}

// run reconciles until stop says so or the rollout ends, playing the HPA
// controller after every reconcile, then waiting until the Deployment
// controller has answered.
func (g *hpaWorld) run(t *testing.T, s strategy.State, stop func(strategy.State) bool) strategy.State {
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
		g.checkBudget(t, s, "after the reconcile")
		g.hpa.sync(t, g.route(t))
		g.checkBudget(t, s, "after the HPA")
		g.ctrl.step(t)
		g.checkBudget(t, s, "after the Deployment controller")
		gatewaytest.Accept(t, g.env.Client, gateway.KindHTTPRoute, g.ns, "web")
		if requeue <= 0 {
			requeue = time.Second
		}
		g.clock.Advance(requeue)
	}
	return s
}

// released checks that after success the HPAs hold their original bounds
// again, with nothing of upshift's left on them, and that the count
// belongs to the HPA: the stable side steady, and scaled by its HPA to
// the load (a few syncs later), the other side at 0.
func (g *hpaWorld) released(t *testing.T, s strategy.State, load int32) {
	t.Helper()
	if s.Phase != strategy.PhaseSucceeded || s.StableSide != strategy.SideB || s.StableRevision != "v2" {
		t.Fatalf("ended %s on %s (side %s): %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	for _, name := range []string{"web-a", "web-b"} {
		h := getHPA(t, g.env, g.ns, name)
		got := fmt.Sprintf("min %d max %d annotations %v", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations)
		if want := fmt.Sprintf("min %d max %d annotations map[]", hpaMin, hpaMax); got != want {
			t.Errorf("HPA %s after success: %s, want %s", name, got, want)
		}
	}
	for i := 0; i < 3; i++ {
		g.hpa.sync(t, g.route(t))
		g.ctrl.step(t)
	}
	a, b := getDeployment(t, g.env.Kube, g.ns, "web-a"), getDeployment(t, g.env.Kube, g.ns, "web-b")
	type side struct {
		Replicas    int32
		Capacity    string
		HasFull     bool
		Available   int32
		HPADesired  int32
		HPAObserved bool
	}
	read := func(name string, d *appsv1.Deployment) side {
		h := getHPA(t, g.env, g.ns, name)
		_, full := d.Annotations[fullReplicasAnnotation]
		return side{Replicas: *d.Spec.Replicas, Capacity: d.Annotations[replicas.CapacityAnnotation], HasFull: full,
			Available: d.Status.AvailableReplicas, HPADesired: h.Status.DesiredReplicas,
			HPAObserved: h.Status.ObservedGeneration != nil && *h.Status.ObservedGeneration == h.Generation}
	}
	got := map[string]side{"web-a": read("web-a", a), "web-b": read("web-b", b)}
	want := map[string]side{
		"web-a": {Replicas: 0, Capacity: "0", HPAObserved: true},
		"web-b": {Replicas: load, Capacity: "steady", Available: load, HPADesired: load, HPAObserved: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after success and 3 HPA syncs (-want +got):\n%s", diff)
	}
	g.writes.mu.Lock()
	if g.writes.checked == 0 || len(g.writes.bad) > 0 {
		t.Errorf("of %d writes of the Deployments, these changed spec.replicas that was the HPA's: %q", g.writes.checked, g.writes.bad)
	}
	g.writes.mu.Unlock()
	// A capacity asked again of the steady side changes nothing: the HPA
	// keeps the count.
	rv := getHPA(t, g.env, g.ns, "web-b").ResourceVersion
	if err := g.runner.B.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	if h := getHPA(t, g.env, g.ns, "web-b"); h.ResourceVersion != rv {
		t.Errorf("the steady state asked again wrote the HPA: %v", h.Spec)
	}
	t.Logf("%d reconciles, %s simulated; full counts recorded (A/B): %s; most replicas %d; route: %s", g.n, g.clock.Now().Sub(t0),
		strings.Join(g.fulls, " "), g.maxSeen, strings.Join(g.weights, " | "))
}

func hpaStrategy() strategy.Strategy {
	return strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 30 * time.Second}, MaxSurgePercent: 20}
}

// TestAutoscaledUpgrade: v1 -> v2 between two Deployments that each have an
// HPA, with the load constant: capacities are shares of the HPA's count
// (10), within 100% + MaxSurge at every observation, and the HPAs are
// released as they were.
func TestAutoscaledUpgrade(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		g := newHPAWorld(t, k, hpaStrategy(), fullReplicas)
		g.exact = true
		s := strategy.State{}.Retarget("v1", g.clock.Now()).Retarget("v2", g.clock.Now())
		s = g.run(t, s, nil)
		g.released(t, s, fullReplicas)
		if g.maxSeen != 12 {
			t.Errorf("at most %d replicas: want 12 (100%% + 20%% of 10)", g.maxSeen)
		}
	})
}

// TestAutoscaledUpgradeLoadChanges: the load changes mid-rollout. Up: the
// canary's HPA scales it above its share and the full count follows
// (recorded larger), the budget holds against the new count, and after
// success the HPA scales the stable side to the load. Down: the full count
// holds through the rollout (never lowered while capacity moves), and
// after success the HPA scales down.
func TestAutoscaledUpgradeLoadChanges(t *testing.T) {
	for _, c := range []struct {
		name string
		load int32
	}{{"up", 15}, {"down", 6}} {
		t.Run(c.name, func(t *testing.T) {
			g := newHPAWorld(t, newKinds(t, kubetest.Get(t), clientset, kubetest.Get(t).Config), hpaStrategy(), fullReplicas)
			s := strategy.State{}.Retarget("v1", g.clock.Now()).Retarget("v2", g.clock.Now())
			s = g.run(t, s, func(s strategy.State) bool { return s.Observed.Weight >= 40 })
			if s.Phase.Terminal() {
				t.Fatalf("ended %s before the load changed: %s", s.Phase, s.Message)
			}
			g.hpa.load = c.load
			g.maxLoad = max(g.maxLoad, c.load)
			s = g.run(t, s, nil)
			g.released(t, s, c.load)
			grew := false
			for _, f := range g.fulls {
				var a, b int32
				fmt.Sscanf(f, "%d/%d", &a, &b)
				grew = grew || a > fullReplicas || b > fullReplicas
				if c.load < fullReplicas && (a != 0 && a != fullReplicas || b != 0 && b != fullReplicas) {
					t.Errorf("full counts %v: the rollout lowered it", g.fulls)
				}
			}
			if c.load > fullReplicas && !grew {
				t.Errorf("full counts %v: never followed the HPA up", g.fulls)
			}
		})
	}
}

// TestAutoscaledRestart: a restarted controller (new Setters, a new
// Runner) mid-rollout reads everything back from the HPAs' and the
// workloads' annotations: asking again for the capacity in place writes
// nothing, and the rollout ends with the HPAs' original bounds.
func TestAutoscaledRestart(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		g := newHPAWorld(t, k, hpaStrategy(), fullReplicas)
		g.exact = true
		s := strategy.State{}.Retarget("v1", g.clock.Now()).Retarget("v2", g.clock.Now())
		s = g.run(t, s, func(s strategy.State) bool { return s.Observed.Weight >= 40 && s.Observed.Stable.Capacity < 100 })
		if s.Phase.Terminal() {
			t.Fatalf("ended %s before the restart: %s", s.Phase, s.Message)
		}
		ctx := context.Background()
		g.runner = g.newRunner(t, hpaStrategy())
		versions := func() []string {
			var v []string
			for _, name := range []string{"web-a", "web-b"} {
				v = append(v, getHPA(t, g.env, g.ns, name).ResourceVersion, getDeployment(t, g.env.Kube, g.ns, name).ResourceVersion)
			}
			return v
		}
		before := versions()
		for _, side := range []struct {
			set rollout.CapacitySetter
			pct int32
		}{{g.runner.A, s.Desired.StableCapacity}, {g.runner.B, s.Desired.CanaryCapacity}} {
			st, err := side.set.Capacity(ctx)
			if err != nil || st.Capacity != side.pct {
				t.Fatalf("a new Setter reads %+v (%v), want capacity %d", st, err, side.pct)
			}
			if err := side.set.SetCapacity(ctx, rollout.CapacityRequest{Percent: side.pct}); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(before, versions()); diff != "" {
			t.Errorf("a new Setter asked for the capacity in place wrote (-before +after):\n%s", diff)
		}
		for _, name := range []string{"web-a", "web-b"} {
			var b struct {
				Min *int32 `json:"minReplicas"`
				Max int32  `json:"maxReplicas"`
			}
			v := getHPA(t, g.env, g.ns, name).Annotations[replicas.BoundsAnnotation]
			if err := json.Unmarshal([]byte(v), &b); err != nil || b.Min == nil || *b.Min != hpaMin || b.Max != hpaMax {
				t.Errorf("HPA %s mid-rollout: %s %q, want the original bounds", name, replicas.BoundsAnnotation, v)
			}
		}
		s = g.run(t, s, nil)
		g.released(t, s, fullReplicas)
	})
}

// TestAutoscaledAbort: an abort mid-rollout walks the canary back to 0; the
// stable side, alone at 100, is released to its HPA as after a success,
// and both HPAs hold their original bounds.
func TestAutoscaledAbort(t *testing.T) {
	g := newHPAWorld(t, newKinds(t, kubetest.Get(t), clientset, kubetest.Get(t).Config), hpaStrategy(), fullReplicas)
	g.exact = true
	s := strategy.State{}.Retarget("v1", g.clock.Now()).Retarget("v2", g.clock.Now())
	s = g.run(t, s, func(s strategy.State) bool { return s.Observed.Weight >= 40 && s.Observed.Stable.Capacity < 100 })
	if s.Phase.Terminal() {
		t.Fatalf("ended %s before the abort: %s", s.Phase, s.Message)
	}
	s = g.run(t, s.Abort("test", g.clock.Now()), nil)
	if s.Phase != strategy.PhaseAborted || s.StableSide == strategy.SideB {
		t.Fatalf("ended %s (stable side %q): %s", s.Phase, s.StableSide, s.Message)
	}
	for _, name := range []string{"web-a", "web-b"} {
		h := getHPA(t, g.env, g.ns, name)
		if got, want := fmt.Sprintf("min %d max %d annotations %v", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Annotations),
			fmt.Sprintf("min %d max %d annotations map[]", hpaMin, hpaMax); got != want {
			t.Errorf("HPA %s after the abort: %s, want %s", name, got, want)
		}
	}
	a, b := getDeployment(t, g.env.Kube, g.ns, "web-a"), getDeployment(t, g.env.Kube, g.ns, "web-b")
	got := fmt.Sprintf("web-a %d %q, web-b %d %q", *a.Spec.Replicas, a.Annotations[replicas.CapacityAnnotation], *b.Spec.Replicas, b.Annotations[replicas.CapacityAnnotation])
	if want := fmt.Sprintf("web-a %d \"steady\", web-b 0 \"0\"", fullReplicas); got != want {
		t.Errorf("after the abort: %s, want %s", got, want)
	}
}

// TestAutoscaleErrors: configurations the Setters cannot follow fail with
// an *AutoscalerError naming the field, marked Permanent.
func TestAutoscaleErrors(t *testing.T) {
	env := kubetest.Get(t)
	ctx := context.Background()
	k := newKinds(t, env, clientset, env.Config)
	type want struct {
		Workload, HPA, Field string
	}
	cases := []struct {
		name  string
		hpas  [][2]string // HPA name, target
		cfg   replicas.AutoscaleConfig
		bad   string // a BoundsAnnotation on HPA web-a
		do    func(a, b *replicas.Setter) error
		want  want
		field string
	}{
		{name: "one HPA for the stable side only", hpas: [][2]string{{"web-a", "web-a"}},
			do:   func(a, b *replicas.Setter) error { return b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 20}) },
			want: want{Workload: "Deployment %s/web-b", Field: "spec.scaleTargetRef"}},
		{name: "two HPAs on one workload", hpas: [][2]string{{"web-a", "web-a"}, {"web-a-more", "web-a"}, {"web-b", "web-b"}},
			do: func(a, b *replicas.Setter) error {
				_, err := a.Capacity(ctx)
				return err
			},
			want: want{Workload: "Deployment %s/web-a", HPA: "web-a, web-a-more", Field: "spec.scaleTargetRef"}},
		{name: "a named HPA of another workload", hpas: [][2]string{{"web-a", "web-a"}, {"web-b", "web-b"}},
			cfg: replicas.AutoscaleConfig{A: "web-b"},
			do: func(a, b *replicas.Setter) error {
				_, err := a.Capacity(ctx)
				return err
			},
			want: want{Workload: "Deployment %s/web-a", HPA: "web-b", Field: "spec.scaleTargetRef"}},
		{name: "bounds annotation that does not parse", hpas: [][2]string{{"web-a", "web-a"}, {"web-b", "web-b"}},
			bad: `{"maxReplicas":0}`,
			do: func(a, b *replicas.Setter) error {
				return a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true})
			},
			want: want{Workload: "Deployment %s/web-a", HPA: "web-a", Field: "metadata.annotations[upshift.dev/hpa-bounds]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := env.Namespace(t)
			createSides(t, env, ns)
			for _, h := range c.hpas {
				createHPA(t, env, ns, h[0], h[1])
			}
			if c.bad != "" {
				h := getHPA(t, env, ns, "web-a")
				h.Annotations = map[string]string{replicas.BoundsAnnotation: c.bad}
				if _, err := env.Kube.AutoscalingV2().HorizontalPodAutoscalers(ns).Update(ctx, h, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			a, b := k.Deployment(ns, "web-a", 0), k.Deployment(ns, "web-b", 0)
			if err := replicas.Autoscale(env.Kube, a, b, c.cfg); err != nil {
				t.Fatal(err)
			}
			err := c.do(a, b)
			var ae *replicas.AutoscalerError
			if !errors.As(err, &ae) || !errors.Is(err, replicas.ErrInvalid) || !rollout.IsPermanent(err) {
				t.Fatalf("err %v: want a Permanent *AutoscalerError matching ErrInvalid", err)
			}
			w := c.want
			w.Workload = fmt.Sprintf(w.Workload, ns)
			if diff := cmp.Diff(w, want{Workload: ae.Workload, HPA: ae.HPA, Field: ae.Field}); diff != "" {
				t.Errorf("%v (-want +got):\n%s", err, diff)
			}
		})
	}
}

// TestAutoscaleLinkErrors: Autoscale refuses what it cannot link, making
// no request.
func TestAutoscaleLinkErrors(t *testing.T) {
	env := kubetest.Get(t)
	k := newKinds(t, env, clientset, env.Config)
	side := func(name string) *replicas.Setter { return k.Deployment("ns", name, 0) }
	scalable := replicas.ForScalable(k.dyn, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, replicas.Workload{Namespace: "ns", Name: "web-b", FullReplicas: 0})
	linked, other := side("web-a"), side("web-b")
	if err := replicas.Autoscale(env.Kube, linked, other, replicas.AutoscaleConfig{}); err != nil {
		t.Fatal(err)
	}
	same := side("web-a")
	cases := []struct {
		name  string
		err   error
		field string // of an *AutoscalerError, "" for a plain ErrInvalid
	}{
		{"nil clientset", replicas.Autoscale(nil, side("a"), side("b"), replicas.AutoscaleConfig{}), ""},
		{"nil client", replicas.AutoscaleClient(nil, side("a"), side("b"), replicas.AutoscaleConfig{}), ""},
		{"nil Setter", replicas.Autoscale(env.Kube, side("a"), nil, replicas.AutoscaleConfig{}), ""},
		{"one Setter twice", replicas.Autoscale(env.Kube, same, same, replicas.AutoscaleConfig{}), ""},
		{"already linked", replicas.Autoscale(env.Kube, linked, side("c"), replicas.AutoscaleConfig{}), ""},
		{"one HPA for both sides", replicas.Autoscale(env.Kube, side("a"), side("b"), replicas.AutoscaleConfig{A: "web", B: "web"}), "AutoscaleConfig.B"},
		{"a scalable's HPA not named", replicas.Autoscale(env.Kube, side("a"), scalable, replicas.AutoscaleConfig{}), "AutoscaleConfig.B"},
	}
	for _, c := range cases {
		var ae *replicas.AutoscalerError
		switch {
		case !errors.Is(c.err, replicas.ErrInvalid):
			t.Errorf("%s: %v, want an error matching ErrInvalid", c.name, c.err)
		case c.field != "" && (!errors.As(c.err, &ae) || ae.Field != c.field):
			t.Errorf("%s: %v, want an *AutoscalerError naming %s", c.name, c.err, c.field)
		}
	}
}
