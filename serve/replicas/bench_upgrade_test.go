package replicas_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// BenchmarkUpgradeOnKube runs whole upgrades (v1 on side A to v2 on side
// B, the deploy hop included) through rollout.Runner.Run on the real clock
// against a whole cluster (kubetest.ClusterOptions): the gateway Router on
// an HTTPRoute, a Setter and a Deployer per Deployment (10 replicas each,
// the managed capacity mode), the state on the route in the Router's
// AnnotationStore (a rollout.HopStore: each weight hop writes the state
// with it). The real Deployment and ReplicaSet controllers and scheduler
// run the pods on kwok's simulated nodes, each pod ready benchReadyDelay
// (50 ms) after it starts (kubetest.AnnotationReadyAfter); the benchmark
// plays the gateway controller (gatewaytest.Accept on every new
// generation of the route, seen by a watch). Plan assumes adapters that
// apply every hop at once: the ratio with notifications shows what the API
// round trips, the watches, the controllers' work and the 50 ms of
// readiness per scale-up add.
//
// Each sub-benchmark runs three variants in the same run:
//   - notify: the adapters as they are; Run subscribes to their
//     notifications (the Router's watch of the route, the Setters' and
//     Deployers' watches of the Deployments);
//   - poll2s: every adapter wrapped so that it does not implement
//     rollout.Notifier (the wrappers forward only the methods of
//     TrafficRouter, CapacitySetter and Deployer), and the strategy's
//     InitialPollInterval equal to its PollInterval (2 s): a fixed 2 s
//     poll;
//   - backoff: notifications hidden, the default InitialPollInterval (polls
//     that start fast after a hop and double up to 2 s).
//
// It reports, per variant, the duration against strategy.Plan ("-ratio";
// seconds, "-s", for a plan of 0 s), the API requests of the adapters and
// the Store per upgrade, counted by a RoundTripper on their client: reads
// (GET), writes (PUT, PATCH, POST, DELETE) and watches (a GET with
// watch=true), and the state writes (Store.Save) per hop applied; it logs
// the reconciles and the writes refused with a conflict (the Deployment
// controller writes the Deployments the Setters scale and the Deployers
// deploy: their status, and its revision annotation on a new template).
//
// Each upgrade has a namespace of its own, and poll2s runs beside the
// other two, so that one iteration takes about as long as poll2s (40 s for
// Incremental 10 / 1s / surge 30):
//
//	go test -run X -bench UpgradeOnKube -benchtime 1x ./serve/replicas
func BenchmarkUpgradeOnKube(b *testing.B) {
	ctrllog.SetLogger(logr.Discard()) // the Router's client would otherwise warn, with a stack, after 30s
	env := kubetest.Get(b)
	for _, bc := range []struct {
		name  string
		strat func(strategy.Options) strategy.Strategy
	}{
		{"Incremental-10-1s-30", func(o strategy.Options) strategy.Strategy {
			return strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30, Options: o}
		}},
		{"Incremental-50-2s-50", func(o strategy.Options) strategy.Strategy {
			return strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: 2 * time.Second}, MaxSurgePercent: 50, Options: o}
		}},
		{"BlueGreen", func(o strategy.Options) strategy.Strategy { return strategy.BlueGreen{Options: o} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			plan, err := strategy.Plan(bc.strat(strategy.Options{}), strategy.PlanOptions{Start: t0})
			if err != nil {
				b.Fatal(err)
			}
			var res [len(benchVariants)]upgradeResult
			for b.Loop() {
				// poll2s, the longest and the lightest on the API
				// server, runs beside notify and then backoff.
				var failed goFailures
				var wg sync.WaitGroup
				for _, lane := range [][]int{{0, 2}, {1}} {
					wg.Go(func() {
						for _, i := range lane {
							v := benchVariants[i]
							res[i] = upgradeOnKube(goTB{TB: b, f: &failed}, env, bc.strat(v.opts), v.notify)
						}
					})
				}
				wg.Wait()
				if err := failed.err(); err != nil {
					b.Fatal(err)
				}
			}
			for i, v := range benchVariants {
				r := res[i]
				if plan.Duration == 0 {
					b.ReportMetric(r.took.Seconds(), v.name+"-s")
				} else {
					b.ReportMetric(float64(r.took)/float64(plan.Duration), v.name+"-ratio")
				}
				b.ReportMetric(float64(r.reads), v.name+"-reads")
				b.ReportMetric(float64(r.adapterReads), v.name+"-adapter-reads")
				b.ReportMetric(float64(r.writes), v.name+"-writes")
				b.ReportMetric(float64(r.watches), v.name+"-watches")
				b.ReportMetric(float64(r.saves)/float64(r.hops), v.name+"-saves/hop")
				b.Logf("%s: %v (plan %v, %d hops planned): %d reconciles, %d hops, %d saves, %d reads (%d of them the adapters'), %d writes (%d of them the store's, %d refused with a conflict), %d watches",
					v.name, r.took.Round(time.Millisecond), plan.Duration, plan.Hops, r.reconciles, r.hops, r.saves, r.reads, r.adapterReads, r.writes, r.saves, r.conflicts, r.watches)
			}
		})
	}
}

// benchVariants are the ways BenchmarkUpgradeOnKube runs each upgrade.
var benchVariants = [...]struct {
	name   string
	notify bool
	opts   strategy.Options
}{
	{"notify", true, strategy.Options{}},
	{"poll2s", false, strategy.Options{PollInterval: metav1.Duration{Duration: 2 * time.Second}, InitialPollInterval: metav1.Duration{Duration: 2 * time.Second}}},
	{"backoff", false, strategy.Options{}},
}

// benchReadyDelay is how long the benchmark's pods take to become ready
// once started.
const benchReadyDelay = 50 * time.Millisecond

type upgradeResult struct {
	took                    time.Duration
	reads, writes, watches  int64
	adapterReads            int64 // the Router's and the Setters' (and Deployers') reads
	conflicts               int64
	saves, hops, reconciles int
}

// upgradeOnKube runs one upgrade in a new namespace and returns what it
// took; it fails b unless the upgrade succeeds with v2 serving all traffic
// at full replicas.
func upgradeOnKube(b testing.TB, env *kubetest.Env, strat strategy.Strategy, notify bool) upgradeResult {
	b.Helper()
	ns := env.Namespace(b)
	ctx := context.Background()
	createSides(b, env, ns, map[string]string{kubetest.AnnotationReadyAfter: benchReadyDelay.String()})
	var hops, reconciles int
	rig := newKubeRig(b, env, ns, strat, notify, rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		reconciles++
		hops += len(e.Applied)
	}))

	bg, stop := context.WithCancel(ctx)
	var failed goFailures
	var wg sync.WaitGroup
	wg.Go(func() { runGatewayController(bg, goTB{TB: b, f: &failed}, env, ns, "web") })
	defer func() { stop(); wg.Wait() }()

	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	s := strategy.State{}.Retarget("v1", start).Retarget("v2", start)
	s, err := rig.runner.Run(runCtx, s, nil)
	took := time.Since(start)
	adapterReads := rig.adapterReads()
	stop()
	wg.Wait()
	if ferr := failed.err(); ferr != nil {
		b.Fatalf("the simulated gateway controller failed: %v", ferr)
	}
	rig.checkUpgraded(b, s, err, took)
	r := upgradeResult{took: took, reads: rig.counts.reads.Load(), adapterReads: adapterReads, writes: rig.counts.writes.Load(), watches: rig.counts.watches.Load(),
		conflicts: rig.counts.conflicts.Load(),
		saves:     int(rig.store.saves.Load()), hops: hops, reconciles: reconciles}
	if r.hops == 0 {
		b.Fatal("no hop applied")
	}
	return r
}

// kubeRig is the Runner of one upgrade on the whole cluster, in a namespace
// where createSides made the Deployments and the route: the gateway Router
// on the route "web", a Setter and a Deployer per Deployment (the managed
// capacity mode), the state on the route in the Router's AnnotationStore
// (a rollout.HopStore: each weight hop writes the state with it). The
// adapters and the Store talk through a client whose API requests counts
// counts (from the start of the upgrade); the test's own clients, the
// simulated gateway controller's included, are the administrator's, not
// counted.
type kubeRig struct {
	ns     string
	notify bool // the adapters notify Run; else Run polls them
	counts *requestCounts
	router *gateway.Router
	a, b   *replicas.Setter
	store  *countingStore
	runner *rollout.Runner
	pods   *podsOf
	warm   int // the adapters' reads before the upgrade
}

// newKubeRig builds the rig of strat, with observer as the Runner's; with
// notify false every adapter is wrapped so that it does not implement
// rollout.Notifier.
func newKubeRig(tb testing.TB, env *kubetest.Env, ns string, strat strategy.Strategy, notify bool, observer rollout.Observer) *kubeRig {
	tb.Helper()
	ctx := context.Background()
	counts := &requestCounts{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			res, err := rt.RoundTrip(req)
			counts.count(req, res)
			return res, err
		})
	})
	cl := env.ClientsFor(tb, cfg)
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	wc, err := client.NewWithWatch(cl.Config, client.Options{Scheme: env.Scheme}) // the Router's Notify watches
	if err != nil {
		tb.Fatal(err)
	}
	router, err := gateway.NewRouter(wc, gateway.Config{Routes: []gateway.RouteRef{ref}, A: backendA, B: backendB})
	if err != nil {
		tb.Fatal(err)
	}
	a := replicas.ForDeployment(cl.Kube, replicas.Workload{Namespace: ns, Name: "web-a", FullReplicas: fullReplicas})
	bs := replicas.ForDeployment(cl.Kube, replicas.Workload{Namespace: ns, Name: "web-b", FullReplicas: fullReplicas})
	hs, err := router.AnnotationStore(ref) // each weight hop writes the state with it
	if err != nil {
		tb.Fatal(err)
	}
	store := &countingStore{Store: hs}
	runner := &rollout.Runner{Strategy: strat, Router: router, A: a, B: bs,
		RevisionA: deployer(tb, a), RevisionB: deployer(tb, bs), Store: store, Observer: observer}
	if !notify {
		runner.Router = pollRouter{router}
		runner.A, runner.B = pollSetter{a}, pollSetter{bs}
		runner.RevisionA, runner.RevisionB = pollDeployer{runner.RevisionA.(rollout.Deployer)}, pollDeployer{runner.RevisionB.(rollout.Deployer)}
	}
	if err := runner.Validate(); err != nil {
		tb.Fatal(err)
	}
	// Warm the counting clients up (discovery, the REST mapping of
	// HTTPRoutes) before counting.
	if _, err := router.Weights(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := a.Capacity(ctx); err != nil {
		tb.Fatal(err)
	}
	counts.reset()
	return &kubeRig{ns: ns, notify: notify, counts: counts, router: router, a: a, b: bs, store: store, runner: runner,
		pods: &podsOf{cs: env.Kube, ns: ns},
		warm: router.Counts().Reads + a.Counts().Reads + bs.Counts().Reads}
}

// adapterReads returns the adapters' own reads of their objects since the
// rig was built (the rest of counts' reads are the Store's).
func (r *kubeRig) adapterReads() int64 {
	return int64(r.router.Counts().Reads + r.a.Counts().Reads + r.b.Counts().Reads - r.warm)
}

// checkUpgraded fails tb unless Run, which returned s and err after took,
// left v2 serving all traffic from web-b at full replicas, and no watch
// loop of the Setters running.
func (r *kubeRig) checkUpgraded(tb testing.TB, s strategy.State, err error, took time.Duration) {
	tb.Helper()
	for _, side := range []*replicas.Setter{r.a, r.b} {
		// Run returns after the watch its Setter and Deployer shared.
		if running, _ := replicas.Watching(side); running != 0 {
			tb.Fatalf("%d watch loops still running after Run returned", running)
		}
	}
	if err != nil || s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" || s.StableSide != strategy.SideB {
		tb.Fatalf("Run ended %s on %s (side %s) after %v: %s: %v", s.Phase, s.StableRevision, s.StableSide, took, s.Message, err)
	}
	// The end: all traffic on web-b, at full replicas, all running v2.
	w, err := r.router.Weights(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if w.Weights != (rollout.Weights{A: 0, B: 100}) {
		tb.Fatalf("route weights %+v at the end, want all on B", w.Weights)
	}
	if ready, allOn, list := r.pods.serving(tb, "web-b", "v2"); ready != fullReplicas || !allOn {
		tb.Fatalf("web-b has %d ready pods (all on v2: %v), want %d: %s", ready, allOn, fullReplicas, list)
	}
	if ready, _, list := r.pods.serving(tb, "web-a", "v1"); ready != 0 {
		tb.Fatalf("web-a still has %d ready pods: %s", ready, list)
	}
	if r.notify && r.counts.watches.Load() < 3 {
		tb.Fatalf("%d watches: some adapter of the route and the two Deployments could not notify", r.counts.watches.Load())
	}
}

// requestCounts counts the API requests of a client, by kind. Requests
// outside a namespace (discovery) are not counted.
type requestCounts struct {
	reads, writes, watches atomic.Int64
	conflicts              atomic.Int64 // writes refused with 409 Conflict
}

func (c *requestCounts) count(req *http.Request, res *http.Response) {
	if !strings.Contains(req.URL.Path, "/namespaces/") {
		return
	}
	if res != nil && res.StatusCode == http.StatusConflict {
		c.conflicts.Add(1)
	}
	switch {
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
		c.watches.Add(1)
	case req.Method == http.MethodGet:
		c.reads.Add(1)
	default:
		c.writes.Add(1)
	}
}

func (c *requestCounts) reset() {
	c.reads.Store(0)
	c.writes.Store(0)
	c.watches.Store(0)
	c.conflicts.Store(0)
}

// countingStore counts the saves of a rollout.Store.
type countingStore struct {
	rollout.Store
	saves atomic.Int64
}

func (s *countingStore) Save(ctx context.Context, st strategy.State) error {
	s.saves.Add(1)
	return s.Store.Save(ctx, st)
}

// SaveWeights, SaveRoutes and Moves forward the rollout.HopStore of the
// Router's AnnotationStore (a weight hop's write carries the state: it is
// no save of its own); Moves sees through pollRouter.
func (s *countingStore) SaveWeights(ctx context.Context, w rollout.Weights, st strategy.State) error {
	return s.Store.(rollout.HopStore).SaveWeights(ctx, w, st)
}

func (s *countingStore) SaveRoutes(ctx context.Context, r rollout.Routes, st strategy.State) error {
	return s.Store.(rollout.HopStore).SaveRoutes(ctx, r, st)
}

func (s *countingStore) Moves(r rollout.TrafficRouter) bool {
	if p, ok := r.(pollRouter); ok {
		r = p.r
	}
	hs, ok := s.Store.(rollout.HopStore)
	return ok && hs.Moves(r)
}

// pollRouter, pollSetter and pollDeployer forward only the methods of the
// adapter interfaces, hiding rollout.Notifier: Run then polls.
type pollRouter struct{ r rollout.TrafficRouter }

func (p pollRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	return p.r.SetWeights(ctx, w)
}

func (p pollRouter) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return p.r.Weights(ctx)
}

type pollSetter struct{ s rollout.CapacitySetter }

func (p pollSetter) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	return p.s.SetCapacity(ctx, r)
}

func (p pollSetter) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	return p.s.Capacity(ctx)
}

type pollDeployer struct{ d rollout.Deployer }

func (p pollDeployer) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return p.d.Revision(ctx, expect)
}

func (p pollDeployer) Deploy(ctx context.Context, revision string) error {
	return p.d.Deploy(ctx, revision)
}

// goFailures collects the failures of helpers that run in goroutines of
// their own, where a benchmark must not call FailNow.
type goFailures struct {
	mu   sync.Mutex
	errs []error
}

func (f *goFailures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// goTB is a testing.TB for such a goroutine: Fatal and Fatalf record the
// failure and end the goroutine (runtime.Goexit), which the benchmark
// reports once Run returns.
type goTB struct {
	testing.TB
	f *goFailures
}

func (g goTB) Helper() {}

func (g goTB) Fatal(args ...any) { g.fail(fmt.Sprint(args...)) }

func (g goTB) Fatalf(format string, args ...any) { g.fail(fmt.Sprintf(format, args...)) }

func (g goTB) fail(msg string) {
	g.f.mu.Lock()
	g.f.errs = append(g.f.errs, errors.New(msg))
	g.f.mu.Unlock()
	runtime.Goexit()
}

// runGatewayController plays the gateway controller until ctx ends: it
// watches the route and accepts every generation it has not accepted yet.
func runGatewayController(ctx context.Context, t goTB, env *kubetest.Env, ns, name string) {
	routes := env.Gateway.GatewayV1().HTTPRoutes(ns)
	for ctx.Err() == nil {
		w, err := routes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			if ctx.Err() == nil {
				t.Fatalf("gateway: watching %s/%s: %v", ns, name, err)
			}
			return
		}
	events:
		for {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					break events
				}
				if rt, isRoute := ev.Object.(*gwv1.HTTPRoute); isRoute && ev.Type != watch.Deleted && !acceptedNow(rt) {
					gatewaytest.Accept(t, env.Client, gateway.KindHTTPRoute, ns, name)
				}
			}
		}
	}
}

// acceptedNow reports whether every parent of rt accepted its current
// generation.
func acceptedNow(rt *gwv1.HTTPRoute) bool {
	if len(rt.Status.Parents) == 0 {
		return false
	}
	for _, p := range rt.Status.Parents {
		ok := false
		for _, c := range p.Conditions {
			if c.Type == "Accepted" && c.ObservedGeneration == rt.Generation {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
