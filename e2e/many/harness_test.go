package many

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
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

// apiCounter counts the requests through a rest.Config it wraps (cfg.Wrap):
// reads (get, list), writes (everything but GET) and watches (GET with
// watch=true), the answers 409 (conflict) and 429 (the API server's
// priority and fairness refusing), and the latency until the response
// headers of reads and writes.
type apiCounter struct {
	reads, writes, watches, conflicts, tooMany, failed atomic.Int64

	mu                sync.Mutex
	readLat, writeLat []time.Duration
}

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		watch := req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true"
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		took := time.Since(start)
		switch {
		case watch:
			c.watches.Add(1)
		case req.Method == http.MethodGet:
			c.reads.Add(1)
		default:
			c.writes.Add(1)
		}
		if err != nil {
			c.failed.Add(1)
			return resp, err
		}
		switch resp.StatusCode {
		case http.StatusConflict:
			c.conflicts.Add(1)
		case http.StatusTooManyRequests:
			c.tooMany.Add(1)
		}
		if !watch {
			c.mu.Lock()
			if req.Method == http.MethodGet {
				c.readLat = append(c.readLat, took)
			} else {
				c.writeLat = append(c.writeLat, took)
			}
			c.mu.Unlock()
		}
		return resp, err
	})
}

// apiCounts is a snapshot of an apiCounter.
type apiCounts struct {
	reads, writes, watches, conflicts, tooMany, failed int64
}

func (c *apiCounter) snapshot() apiCounts {
	return apiCounts{c.reads.Load(), c.writes.Load(), c.watches.Load(), c.conflicts.Load(), c.tooMany.Load(), c.failed.Load()}
}

func (a apiCounts) minus(b apiCounts) apiCounts {
	return apiCounts{a.reads - b.reads, a.writes - b.writes, a.watches - b.watches, a.conflicts - b.conflicts, a.tooMany - b.tooMany, a.failed - b.failed}
}

// latencies returns the read and write latencies recorded since mark.
func (c *apiCounter) latencies(mark [2]int) (reads, writes []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.readLat[mark[0]:]), slices.Clone(c.writeLat[mark[1]:])
}

func (c *apiCounter) mark() [2]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [2]int{len(c.readLat), len(c.writeLat)}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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
	counter *apiCounter
	limiter *timedLimiter
}

// newSharedClient builds a Gateway API clientset over a copy of base with
// the raised rate limits, a timed limiter and a counting RoundTripper.
func newSharedClient(tb testing.TB, base *rest.Config) *sharedClient {
	tb.Helper()
	cfg := rest.CopyConfig(base)
	sc := &sharedClient{
		counter: &apiCounter{},
		limiter: &timedLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(clientQPS, clientBurst)},
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cfg.RateLimiter = sc.limiter
	cfg.Wrap(sc.counter.wrap)
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	sc.cs = cs
	return sc
}

// gatewayPlayer plays the gateway controller for every HTTPRoute of a
// namespace: one informer (one list, one watch) and a work queue whose
// workers write Accepted and ResolvedRefs True for each route's current
// generation, as kubetest/gatewaytest.Accept does, from the informer's copy
// (a conflict requeues the route; the informer soon holds the newer one).
type gatewayPlayer struct {
	client  *sharedClient
	lister  gwlisters.HTTPRouteLister
	queue   workqueue.TypedRateLimitingInterface[string]
	cancel  context.CancelFunc
	done    sync.WaitGroup
	mu      sync.Mutex
	seen    map[string]time.Time // key -> when the informer first showed the pending generation
	lags    []time.Duration      // from seen to the status written
	written atomic.Int64
	// conflicts counts the status writes refused (most often a
	// conflict with a rollout's own write).
	conflicts atomic.Int64
}

// playerWorkers write statuses in parallel, enough that the player keeps
// up with hundreds of hops a second.
const playerWorkers = 32

func startGatewayPlayer(tb testing.TB, client *sharedClient, ns string) *gatewayPlayer {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &gatewayPlayer{
		client: client,
		cancel: cancel,
		seen:   map[string]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second)),
	}
	f := externalversions.NewSharedInformerFactoryWithOptions(client.cs, 0, externalversions.WithNamespace(ns))
	inf := f.Gateway().V1().HTTPRoutes()
	p.lister = inf.Lister()
	enqueue := func(obj any) {
		rt, ok := obj.(*gwv1.HTTPRoute)
		if !ok || accepted(rt) {
			return
		}
		key, err := cache.MetaNamespaceKeyFunc(rt)
		if err != nil {
			return
		}
		p.mu.Lock()
		if _, ok := p.seen[key]; !ok {
			p.seen[key] = time.Now()
		}
		p.mu.Unlock()
		p.queue.Add(key)
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		tb.Fatal(err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			tb.Fatalf("gateway player: informer %v did not sync", typ)
		}
	}
	for range playerWorkers {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			for p.work(ctx) {
			}
		}()
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		<-ctx.Done()
		p.queue.ShutDown()
		f.Shutdown()
	}()
	return p
}

// accepted reports whether every parent has Accepted and ResolvedRefs for
// rt's current generation.
func accepted(rt *gwv1.HTTPRoute) bool {
	if len(rt.Status.Parents) != len(rt.Spec.ParentRefs) {
		return false
	}
	for _, ps := range rt.Status.Parents {
		for _, ct := range []string{"Accepted", "ResolvedRefs"} {
			c := meta.FindStatusCondition(ps.Conditions, ct)
			if c == nil || c.ObservedGeneration != rt.Generation || c.Status != metav1.ConditionTrue {
				return false
			}
		}
	}
	return true
}

func (p *gatewayPlayer) work(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	cur, err := p.lister.HTTPRoutes(ns).Get(name)
	if err != nil || accepted(cur) {
		p.queue.Forget(key)
		return true
	}
	rt := cur.DeepCopy()
	rt.Status.Parents = nil
	for _, ref := range rt.Spec.ParentRefs {
		ps := gwv1.RouteParentStatus{ParentRef: ref, ControllerName: "example.com/gateway"}
		for _, ct := range []string{"Accepted", "ResolvedRefs"} {
			ps.Conditions = append(ps.Conditions, metav1.Condition{Type: ct, Status: metav1.ConditionTrue, Reason: ct,
				ObservedGeneration: rt.Generation, LastTransitionTime: metav1.Now()})
		}
		rt.Status.Parents = append(rt.Status.Parents, ps)
	}
	_, err = p.client.cs.GatewayV1().HTTPRoutes(ns).UpdateStatus(ctx, rt, metav1.UpdateOptions{})
	switch {
	case err == nil:
		p.queue.Forget(key)
		p.written.Add(1)
		p.mu.Lock()
		if t, ok := p.seen[key]; ok {
			p.lags = append(p.lags, time.Since(t))
			delete(p.seen, key)
		}
		p.mu.Unlock()
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), ctx.Err() != nil:
		// A conflict means the informer has a newer copy coming: its
		// event enqueues the route again (or already has, and the
		// queue runs it once this one is done).
		p.queue.Forget(key)
		p.conflicts.Add(1)
	default:
		p.queue.AddRateLimited(key)
	}
	return true
}

func (p *gatewayPlayer) stop() {
	p.cancel()
	p.done.Wait()
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
	api        apiCounts
	readLat    []time.Duration
	writeLat   []time.Duration
	throttled  time.Duration // total client-side wait
	delayed    int64         // requests delayed over 1 ms by the client
	player     apiCounts
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

	player := startGatewayPlayer(tb, gws, ns)
	defer player.stop()
	// Accept the routes' first generation before any rollout starts.
	deadline := time.Now().Add(time.Minute)
	for player.written.Load() < int64(n) {
		if time.Now().After(deadline) {
			tb.Fatalf("the gateway player accepted %d of %d new routes", player.written.Load(), n)
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

	apiBefore, playerBefore := ops.counter.snapshot(), gws.counter.snapshot()
	latMark := ops.counter.mark()
	player.mu.Lock()
	player.lags = nil
	player.mu.Unlock()
	waitedBefore, delayedBefore := ops.limiter.waited.Load(), ops.limiter.delayed.Load()

	res := result{n: n, plan: plan.Duration, durations: make([]time.Duration, n), cpu: map[string]float64{}}
	phases := make([]strategy.Phase, n)
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	heapBase := int64(mem.HeapInuse)
	cpuBefore := sampleCPU()
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
	cpuAfter := sampleCPU()
	res.cpuAll, res.cpuOurs = cpuUse(cpuBefore, cpuAfter)
	for name, ticks := range cpuAfter.procs {
		res.cpu[name] = float64(ticks-cpuBefore.procs[name]) / ticksPerSecond
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
	res.api = ops.counter.snapshot().minus(apiBefore)
	res.player = gws.counter.snapshot().minus(playerBefore)
	res.readLat, res.writeLat = ops.counter.latencies(latMark)
	res.throttled = time.Duration(ops.limiter.waited.Load() - waitedBefore)
	res.delayed = ops.limiter.delayed.Load() - delayedBefore
	recMu.Lock()
	res.reconciles = reconciles
	recMu.Unlock()
	res.adapterErr = adapterErr.Load()
	player.mu.Lock()
	res.playerLags = slices.Clone(player.lags)
	res.playerConf = player.conflicts.Load()
	player.mu.Unlock()
	return res
}

// quantile returns the q-quantile (nearest rank) of ds, 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio returns the q-quantile of duration / plan.
func (r result) ratio(q float64) float64 {
	return float64(quantile(r.durations, q)) / float64(r.plan)
}

func (r result) fractionWithin() float64 { return float64(r.within) / float64(r.n) }

func (r result) perRollout(x int64) float64 { return float64(x) / float64(r.n) }

// summary is one line for the log: the README table's row and more.
func (r result) summary(v variant) string {
	return fmt.Sprintf("| %s | %d | %.3f | %.3f | %.3f | %.1f / %.1f / %.1f | %.0f | %.0f / %.0f | %.0f ms (%d delayed) | %d |"+
		" succeeded %d (%d within 1.05x), hops %d, conflicts %d, 429s %d, transport errors %d, adapter errors %d, player writes %d (p50 / p99 lag %.0f / %.0f ms, %d refused), cores busy %.2f (this test %.2f: kube-apiserver %.2f, etcd %.2f, this process %.2f), Go heap halfway %.1f KiB per rollout, wall %s",
		v.name, r.n, r.fractionWithin(), r.ratio(0.5), r.ratio(0.99),
		r.perRollout(r.api.reads), r.perRollout(r.api.writes), r.perRollout(r.api.watches),
		ms(quantile(r.reconciles, 0.99)), ms(quantile(r.readLat, 0.99)), ms(quantile(r.writeLat, 0.99)),
		ms(r.throttled), r.delayed, len(r.reconciles),
		r.succeeded, r.within105, r.hops, r.api.conflicts, r.api.tooMany, r.api.failed, r.adapterErr, r.player.writes,
		ms(quantile(r.playerLags, 0.5)), ms(quantile(r.playerLags, 0.99)), r.playerConf, r.cpuAll, r.cpuOurs,
		r.cpu["kube-apiserver"]/r.elapsed.Seconds(), r.cpu["etcd"]/r.elapsed.Seconds(), r.cpu["test"]/r.elapsed.Seconds(),
		float64(r.heapMid)/1024/float64(r.n), r.elapsed.Round(time.Millisecond))
}

// cpuSample is the machine's busy CPU time and that of this test process
// and its children (kube-apiserver, etcd), in clock ticks, from /proc: the
// rest is other work on the machine, which skews the figures.
type cpuSample struct {
	busy, ours int64
	procs      map[string]int64 // test (this process), kube-apiserver, etcd
	at         time.Time
}

const ticksPerSecond = 100 // USER_HZ on Linux

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]int64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			s.busy += n
		}
	}
	self := os.Getpid()
	_, _, s.ours = procStat(self)
	s.procs["test"] = s.ours
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if ppid, comm, ticks := procStat(pid); ppid == self {
			s.ours += ticks
			if comm == "kube-apiserver" || comm == "etcd" {
				s.procs[comm] += ticks
			}
		}
	}
	return s
}

// procStat returns a process's parent, its command name and its user +
// system ticks.
func procStat(pid int) (ppid int, comm string, ticks int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", 0
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, "", 0
	}
	comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return 0, "", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, comm, ut + st
}

// cpuUse returns the cores busy on average between a and b: all of them,
// and those of this test (its process, kube-apiserver and etcd).
func cpuUse(a, b cpuSample) (all, ours float64) {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(b.busy-a.busy) / ticksPerSecond / secs, float64(b.ours-a.ours) / ticksPerSecond / secs
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
