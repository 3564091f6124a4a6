package many

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/kubetest/measure"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Client-side rate limits of the shared clients: high enough that
// client-go's token bucket is not what limits the rollouts (the throttling
// it still causes is measured by timedLimiter).
const (
	clientQPS   = 5000
	clientBurst = 10000
)

var (
	stableBackend = gateway.Backend{Name: "web-a", Port: 8080}
	canaryBackend = gateway.Backend{Name: "web-b", Port: 8080}
)

// timedLimiter is client-go's token bucket, timing how long requests wait
// in it: client-side throttling.
type timedLimiter struct {
	flowcontrol.RateLimiter
	waited  atomic.Int64 // total, in nanoseconds
	delayed atomic.Int64 // waits longer than a millisecond
}

func (l *timedLimiter) Wait(ctx context.Context) error {
	start := time.Now()
	err := l.RateLimiter.Wait(ctx)
	d := time.Since(start)
	l.waited.Add(int64(d))
	if d > time.Millisecond {
		l.delayed.Add(1)
	}
	return err
}

// sharedClient is one identity's clientset, counted and rate-timed.
type sharedClient struct {
	cs      versioned.Interface
	counter *measure.Counter
	limiter *timedLimiter
}

// newSharedClient builds a Gateway API clientset over a copy of base with
// the raised rate limits, a timed limiter and a counting RoundTripper.
func newSharedClient(tb testing.TB, base *rest.Config) *sharedClient {
	tb.Helper()
	cfg := rest.CopyConfig(base)
	sc := &sharedClient{
		counter: &measure.Counter{},
		limiter: &timedLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(clientQPS, clientBurst)},
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cfg.RateLimiter = sc.limiter
	cfg.Wrap(sc.counter.Wrap)
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	sc.cs = cs
	return sc
}

// pollOnly hides the Router's Notify: Run polls it.
type pollOnly struct{ r *gateway.Router }

func (p pollOnly) Weights(ctx context.Context) (rollout.RouteStatus, error) { return p.r.Weights(ctx) }
func (p pollOnly) SetWeights(ctx context.Context, w rollout.Weights) error {
	return p.r.SetWeights(ctx, w)
}

// variant is how the rollouts learn that the world changed.
type variant struct {
	name   string
	notify bool
}

var (
	notifyVariant = variant{name: "notify", notify: true}
	poll1sVariant = variant{name: "poll1s"}
)

// strategyFor returns the strategy of a variant: notify keeps the default
// polls (Run waits on the Router's watch), poll1s polls every second.
func strategyFor(v variant, step int32, interval time.Duration) strategy.Incremental {
	s := strategy.Incremental{StepPercent: step, Interval: metav1.Duration{Duration: interval}, Options: strategy.Options{Capacity: strategy.CapacityFixed}}
	if !v.notify {
		s.PollInterval = metav1.Duration{Duration: time.Second}
		s.InitialPollInterval = metav1.Duration{Duration: time.Second}
	}
	return s
}

// result is what one run of n rollouts measured.
type result struct {
	n         int
	plan      time.Duration
	durations []time.Duration // per rollout; the timeout for one that did not finish
	succeeded int
	within    int // succeeded within 1.2x the plan
	within105 int // succeeded within 1.05x the plan
	hops      int64
	// heapMid is the Go heap in use after a GC halfway through the plan,
	// minus that before the rollouts started.
	heapMid int64
	// cpu is the CPU seconds of this process ("test": the rollouts and
	// the gateway player), kube-apiserver and etcd over the run.
	cpu        map[string]float64
	reconciles []time.Duration
	adapterErr int64
	api        measure.Counts
	readLat    []time.Duration
	writeLat   []time.Duration
	throttled  time.Duration // total client-side wait
	delayed    int64         // requests delayed over 1 ms by the client
	player     measure.Counts
	playerLags []time.Duration
	playerConf int64
	cpuAll     float64 // cores busy on the machine, on average
	cpuOurs    float64 // of which this test, kube-apiserver and etcd
	elapsed    time.Duration
}

// run drives n rollouts of strat in a fresh namespace, their starts spread
// evenly over spread, each until it ends or timeout passes.
func run(tb testing.TB, n int, v variant, strat strategy.Incremental, spread, timeout time.Duration) result {
	tb.Helper()
	env := kubetest.Get(tb)
	ns := env.Namespace(tb)
	setup, cancelSetup := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelSetup()

	plan, err := strategy.Plan(strat, strategy.PlanOptions{})
	if err != nil {
		tb.Fatal(err)
	}

	// The operator: get, update and watch on routes, one clientset for all.
	op := env.ServiceAccount(tb, ns, "operator")
	env.Grant(tb, ns, op.Subject, rbacv1.PolicyRule{
		APIGroups: []string{gwv1.GroupName}, Resources: []string{"httproutes"}, Verbs: []string{"get", "update", "watch"},
	})
	ops := newSharedClient(tb, op.Config)
	// The gateway controller: list and watch routes, write their status.
	gw := env.ServiceAccount(tb, ns, "gateway")
	env.Grant(tb, ns, gw.Subject,
		rbacv1.PolicyRule{APIGroups: []string{gwv1.GroupName}, Resources: []string{"httproutes"}, Verbs: []string{"list", "watch", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{gwv1.GroupName}, Resources: []string{"httproutes/status"}, Verbs: []string{"update"}},
	)
	gws := newSharedClient(tb, gw.Config)

	// The routes, created by the administrator.
	admin := newSharedClient(tb, env.Config)
	names := make([]string, n)
	var createErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range names {
		names[i] = fmt.Sprintf("web-%04d", i)
		rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: names[i], Gateway: "gw",
			A: stableBackend, B: canaryBackend, Hostnames: []string{names[i] + ".example"}})
		if err != nil {
			tb.Fatal(err)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := admin.cs.GatewayV1().HTTPRoutes(ns).Create(setup, rt, metav1.CreateOptions{}); err != nil {
				createErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err := createErr.Load(); err != nil {
		tb.Fatalf("creating routes: %v", err)
	}
	defer func() {
		// Keep etcd and the watch cache small for the next run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.cs.GatewayV1().HTTPRoutes(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			tb.Errorf("deleting the routes: %v", err)
		}
	}()

	player := gatewaytest.Play(tb, gws.cs, ns, gatewaytest.PlayerOptions{})
	defer player.Stop()
	// Accept the routes' first generation before any rollout starts.
	deadline := time.Now().Add(time.Minute)
	for player.Written() < int64(n) {
		if time.Now().After(deadline) {
			tb.Fatalf("the gateway player accepted %d of %d new routes", player.Written(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	routers := make([]*rollout.Runner, n)
	var (
		recMu      sync.Mutex
		reconciles []time.Duration
		adapterErr atomic.Int64
		hops       atomic.Int64
	)
	observer := rollout.ObserverFunc(func(_ context.Context, ev rollout.Event) {
		hops.Add(int64(len(ev.Applied)))
		// ev.Time is the instant Run passed to ReconcileAt, just before
		// it; the Observer is called at its end, after the hops.
		d := time.Since(ev.Time)
		recMu.Lock()
		reconciles = append(reconciles, d)
		recMu.Unlock()
		if ev.Err != nil {
			adapterErr.Add(1)
		}
	})
	for i, name := range names {
		ref := gateway.RouteRef{Namespace: ns, Name: name}
		router, err := gateway.NewRouterForClientset(ops.cs, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stableBackend, B: canaryBackend})
		if err != nil {
			tb.Fatal(err)
		}
		var tr rollout.TrafficRouter = router
		if !v.notify {
			tr = pollOnly{router}
		}
		store, err := router.AnnotationStore(ref) // each weight hop writes the state with it
		if err != nil {
			tb.Fatal(err)
		}
		routers[i] = &rollout.Runner{Strategy: strat, Router: tr, Store: routerStore{store}, Observer: observer}
	}

	apiBefore, playerBefore := ops.counter.Counts(), gws.counter.Counts()
	latMark := ops.counter.Mark()
	player.ResetLags()
	waitedBefore, delayedBefore := ops.limiter.waited.Load(), ops.limiter.delayed.Load()

	res := result{n: n, plan: plan.Duration, durations: make([]time.Duration, n), cpu: map[string]float64{}}
	phases := make([]strategy.Phase, n)
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	heapBase := int64(mem.HeapInuse)
	cpuBefore := measure.SampleCPU(nil)
	start := time.Now()
	heapMid := make(chan int64, 1)
	midway := time.AfterFunc(spread+plan.Duration/2, func() {
		runtime.GC()
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		heapMid <- int64(mem.HeapInuse) - heapBase
	})
	for i, r := range routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(spread * time.Duration(i) / time.Duration(n))))
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel() // ends the Router's watch
			began := time.Now()
			end, err := r.Run(ctx, strategy.NewState("v1", "v2"), nil)
			res.durations[i] = time.Since(began)
			if err != nil {
				res.durations[i] = timeout
			}
			phases[i] = end.Phase
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if !midway.Stop() {
		res.heapMid = <-heapMid
	} // else the rollouts ended before halfway: not measured
	cpuAfter := measure.SampleCPU(nil)
	res.cpuAll, res.cpuOurs = measure.CPUUse(cpuBefore, cpuAfter)
	for name, ticks := range cpuAfter.Procs {
		res.cpu[name] = float64(ticks-cpuBefore.Procs[name]) / measure.TicksPerSecond
	}
	res.hops = hops.Load()

	for i, d := range res.durations {
		if phases[i] == strategy.PhaseSucceeded {
			res.succeeded++
			if float64(d) <= 1.2*float64(plan.Duration) {
				res.within++
			}
			if float64(d) <= 1.05*float64(plan.Duration) {
				res.within105++
			}
		}
	}
	res.api = ops.counter.Counts().Minus(apiBefore)
	res.player = gws.counter.Counts().Minus(playerBefore)
	res.readLat, res.writeLat = ops.counter.Latencies(latMark)
	res.throttled = time.Duration(ops.limiter.waited.Load() - waitedBefore)
	res.delayed = ops.limiter.delayed.Load() - delayedBefore
	recMu.Lock()
	res.reconciles = reconciles
	recMu.Unlock()
	res.adapterErr = adapterErr.Load()
	res.playerLags = player.Lags()
	res.playerConf = player.Refused()
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio returns the q-quantile of duration / plan.
func (r result) ratio(q float64) float64 {
	return float64(measure.Quantile(r.durations, q)) / float64(r.plan)
}

func (r result) fractionWithin() float64 { return float64(r.within) / float64(r.n) }

func (r result) perRollout(x int64) float64 { return float64(x) / float64(r.n) }

// summary is one line for the log: the row of docs/performance.md's table and more.
func (r result) summary(v variant) string {
	return fmt.Sprintf("| %s | %d | %.3f | %.3f | %.3f | %.1f / %.1f / %.1f | %.0f | %.0f / %.0f | %.0f ms (%d delayed) | %d |"+
		" succeeded %d (%d within 1.05x), hops %d, conflicts %d, 429s %d, transport errors %d, adapter errors %d, player writes %d (p50 / p99 lag %.0f / %.0f ms, %d refused), cores busy %.2f (this test %.2f: kube-apiserver %.2f, etcd %.2f, this process %.2f), Go heap halfway %.1f KiB per rollout, wall %s",
		v.name, r.n, r.fractionWithin(), r.ratio(0.5), r.ratio(0.99),
		r.perRollout(r.api.Reads), r.perRollout(r.api.Writes), r.perRollout(r.api.Watches),
		ms(measure.Quantile(r.reconciles, 0.99)), ms(measure.Quantile(r.readLat, 0.99)), ms(measure.Quantile(r.writeLat, 0.99)),
		ms(r.throttled), r.delayed, len(r.reconciles),
		r.succeeded, r.within105, r.hops, r.api.Conflicts, r.api.TooMany, r.api.Failed, r.adapterErr, r.player.Writes,
		ms(measure.Quantile(r.playerLags, 0.5)), ms(measure.Quantile(r.playerLags, 0.99)), r.playerConf, r.cpuAll, r.cpuOurs,
		r.cpu["kube-apiserver"]/r.elapsed.Seconds(), r.cpu["etcd"]/r.elapsed.Seconds(), r.cpu["test"]/r.elapsed.Seconds(),
		float64(r.heapMid)/1024/float64(r.n), r.elapsed.Round(time.Millisecond))
}

// routerStore is the Router's AnnotationStore, which also moves the Router
// behind pollOnly: both variants write each weight hop with its state.
type routerStore struct{ *gateway.AnnotationStore }

func (s routerStore) Moves(r rollout.TrafficRouter) bool {
	if p, ok := r.(pollOnly); ok {
		r = p.r
	}
	return s.AnnotationStore.Moves(r)
}
