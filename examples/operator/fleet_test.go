package main_test

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/kubetest/measure"
	"github.com/upshift-dev/upshift/strategy"
)

// A fleet is N Releases in one namespace, each with its own HTTPRoute and
// two Deployments, reconciled by one operator process (the binary that
// main.go builds, run as its ServiceAccount with the generated role). The
// cluster is real but for the gateway: the Deployment and ReplicaSet
// controllers, the scheduler and simulated nodes run every Deployment's
// pods (ready PodReadyDelay after they start); the test process plays the
// gateway (gatewaytest.Player). The operator reaches the API server through a
// TLS proxy in the test process whose transport counts every request
// (measure.Counter), so its requests are counted as a RoundTripper on its own
// rest.Config would count them, without changing the binary.

// fleetReplicas is each Release's spec.replicas: one pod per 10% step.
const fleetReplicas = 10

// countedConfig returns a copy of base without client-side rate limits,
// its requests counted by c.
func countedConfig(base *rest.Config, c *measure.Counter) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Wrap(c.Wrap)
	return cfg
}

// countingProxy forwards HTTPS (HTTP/2) requests to the API server and
// counts them. Authentication passes through: the operator's bearer token
// reaches the API server as it is.
type countingProxy struct {
	srv     *httptest.Server
	counter *measure.Counter
	caPEM   []byte
}

func startProxy(tb testing.TB, upstream *rest.Config) *countingProxy {
	tb.Helper()
	target, err := url.Parse(upstream.Host)
	if err != nil {
		tb.Fatal(err)
	}
	rt, err := rest.TransportFor(&rest.Config{Host: upstream.Host, TLSClientConfig: rest.TLSClientConfig{
		CAData: upstream.CAData, CAFile: upstream.CAFile, ServerName: upstream.ServerName}})
	if err != nil {
		tb.Fatal(err)
	}
	p := &countingProxy{counter: &measure.Counter{}}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     p.counter.Wrap(rt),
		FlushInterval: -1, // watches stream
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p.srv = httptest.NewUnstartedServer(rp)
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	tb.Cleanup(p.srv.Close)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return p
}

// playerWorkers is the gateway player's workers.
const playerWorkers = 64

// fleetResult is what one run of a fleet measured.
type fleetResult struct {
	n        int
	shard    int // this operator's shard, of shards
	shards   int
	workers  int // the operator's -max-concurrent-reconciles
	plan     strategy.Timeline
	interval time.Duration
	// durations is, per Release, the time from the edit of spec.revision
	// to Released observed; the run's timeout for one that did not finish.
	durations []time.Duration
	succeeded int
	within    int // succeeded within 1.05x the plan
	api       measure.Counts
	apiBy     map[string]int64 // the operator's requests by verb and resource
	players   measure.Counts   // the gateway player's
	// The latencies of the operator's reads and writes, and of the
	// gateway player's writes.
	readLat, writeLat, playerLat []time.Duration
	harness                      measure.Counts // the test's own edits and its watch of Releases
	// From the operator's metrics: reconciles of Releases and their
	// errors, hops applied, and quantiles of the reconcile time and of the
	// time a request waits in the work queue.
	reconciles, recErrors, hops float64
	recP50, recP99, queueP99    time.Duration
	// CPU seconds of each process over the run, and the machine's busy
	// CPU seconds (all processes) and capacity (cores x wall time).
	cpu     map[string]float64
	busy    float64
	capa    float64
	rssIdle int64 // the operator's VmRSS (bytes) before any object exists
	rssEnd  int64 // its VmRSS at the end of the run
	rssPeak int64 // its VmHWM
	heapEnd float64
	heapIdl float64
	load    string // /proc/loadavg at the start of the run
	elapsed time.Duration
	setup   time.Duration
}

// runFleet creates shards x n Releases at v1 (each with its route and two
// Deployments), reconciled by shards operator processes (with shards > 1,
// each selects its n Releases by the label shardLabel, its own Lease
// included), waits until all are Released, then changes each to v2, the
// edits spread evenly over spread, and waits until every rollout is
// Released or timeout passes since its edit. It returns each shard's
// figures.
func runFleet(tb testing.TB, shards, n, workers int, strat strategy.Incremental, spread, timeout time.Duration) []fleetResult {
	tb.Helper()
	setupStart := time.Now()
	env := kubetest.Get(tb)
	if err := installAPI(env); err != nil {
		tb.Fatal(err)
	}
	plan, err := strategy.Plan(strat, strategy.PlanOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	res := make([]fleetResult, shards)
	for s := range res {
		res[s] = fleetResult{n: n, shard: s, shards: shards, workers: workers, plan: plan, interval: strat.Interval.Duration,
			durations: make([]time.Duration, n), cpu: map[string]float64{}}
	}
	ns := env.Namespace(tb)
	harness := &measure.Counter{}
	hcfg := countedConfig(env.Config, harness)
	c, err := client.New(hcfg, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	proxies := make([]*countingProxy, shards)
	for s := range proxies {
		proxies[s] = startProxy(tb, env.Config)
	}
	sa := bindOperator(tb, env, c, ns)
	routeCounter := &measure.Counter{}
	gcs, err := versioned.NewForConfig(countedConfig(env.Config, routeCounter))
	if err != nil {
		tb.Fatal(err)
	}
	routes := gatewaytest.Play(tb, gcs, ns, gatewaytest.PlayerOptions{Workers: playerWorkers})
	defer routes.Stop()

	// The test's view of the Releases: one informer, recording when each
	// was first seen Released at v2.
	var (
		mu       sync.Mutex
		released = map[string]time.Time{} // name -> when Released at v2
		adopted  = map[string]bool{}      // Released at v1
	)
	rc, err := cache.New(hcfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf, err := rc.GetInformer(ctx, &v1alpha1.Release{})
	if err != nil {
		tb.Fatal(err)
	}
	see := func(obj any) {
		rel, ok := obj.(*v1alpha1.Release)
		if !ok || !condition(rel, v1alpha1.ConditionReleased, metav1.ConditionTrue) {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch rel.Spec.Revision {
		case "v1":
			adopted[rel.Name] = true
		case "v2":
			if _, ok := released[rel.Name]; !ok {
				released[rel.Name] = now
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = rc.Start(ctx) }()
	rc.WaitForCacheSync(ctx)

	ops := make([]*fleetOperator, shards)
	pids := map[string]int{}
	for s := range ops {
		var args []string
		if shards > 1 {
			args = []string{"-release-selector", shardLabel + "=" + strconv.Itoa(s)}
		}
		kcfg := writeKubeconfig(tb, proxies[s].srv.URL, proxies[s].caPEM, sa.Config.BearerToken, ns)
		ops[s] = startFleetOperator(tb, kcfg, ns, workers, args...)
		defer ops[s].stop()
		pids[shardProc(s)] = ops[s].pid()
	}
	// The operators' memory with their caches synced on an empty namespace.
	time.Sleep(3 * time.Second)
	for s, op := range ops {
		res[s].rssIdle, _ = procMemory(op.pid())
		res[s].heapIdl = sumMetric(op.scrape(tb), "go_memstats_heap_inuse_bytes", "")
	}

	// The objects, created by the administrator, 32 at a time.
	names := make([][]string, shards)
	var createErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for s := range names {
		names[s] = make([]string, n)
		for i := range names[s] {
			names[s][i] = fmt.Sprintf("web-%04d", i)
			if shards > 1 {
				names[s][i] = fmt.Sprintf("web-%d-%04d", s, i)
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				for _, obj := range fleetObjects(ns, names[s][i], strat) {
					if rel, ok := obj.(*v1alpha1.Release); ok && shards > 1 {
						rel.Labels = map[string]string{shardLabel: strconv.Itoa(s)}
					}
					if err := c.Create(ctx, obj); err != nil {
						createErr.Store(fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err))
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if err := createErr.Load(); err != nil {
		tb.Fatalf("creating the fleet: %v", err)
	}
	total := shards * n
	for deadline := time.Now().Add(time.Duration(total)*300*time.Millisecond + 2*time.Minute); ; time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		k := len(adopted)
		mu.Unlock()
		if k == total {
			break
		}
		for _, op := range ops {
			op.exited(tb)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d Releases were Released at v1 by %v", k, total, time.Since(setupStart).Round(time.Second))
		}
	}
	setup := time.Since(setupStart)
	// Let the adoption's last reconciles and requeues pass.
	time.Sleep(min(5*time.Second, spread))

	type mark struct {
		api     measure.Counts
		by      map[string]int64
		lat     measure.Mark
		metrics string
	}
	marks := make([]mark, shards)
	for s := range marks {
		marks[s] = mark{proxies[s].counter.Counts(), proxies[s].counter.ByResource(), proxies[s].counter.Mark(), ops[s].scrape(tb)}
	}
	routeMark := routeCounter.Mark()
	playersBefore := routeCounter.Counts()
	harnessBefore := harness.Counts()
	raw, _ := os.ReadFile("/proc/loadavg")
	load := strings.Join(strings.Fields(string(raw))[:3], " ")
	cpuBefore := measure.SampleCPU(pids)
	start := time.Now()
	edits := make([][]time.Time, shards)
	var editErr atomic.Value
	for s := range edits {
		edits[s] = make([]time.Time, n)
		for i, name := range names[s] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The shards' edits interleave: shard s's i-th at the
				// (i*shards+s)-th of total slots.
				time.Sleep(time.Until(start.Add(spread * time.Duration(i*shards+s) / time.Duration(total))))
				edits[s][i] = time.Now()
				rel := &v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
				// As kubectl patch would: one merge patch of spec.revision.
				if err := c.Patch(ctx, rel, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"revision":"v2"}}`))); err != nil {
					editErr.Store(err)
				}
			}()
		}
	}
	wg.Wait()
	if err := editErr.Load(); err != nil {
		tb.Fatalf("editing spec.revision: %v", err)
	}
	for deadline := start.Add(spread + timeout); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		k := len(released)
		mu.Unlock()
		if k == total || time.Now().After(deadline) {
			break
		}
		for _, op := range ops {
			op.exited(tb)
		}
	}
	elapsed := time.Since(start)
	cpuAfter := measure.SampleCPU(pids)
	players := routeCounter.Counts().Minus(playersBefore)
	harnessCounts := harness.Counts().Minus(harnessBefore)
	_, playerLat := routeCounter.Latencies(routeMark)
	for s := range res {
		r := &res[s]
		r.setup, r.load, r.elapsed = setup, load, elapsed
		r.players, r.harness, r.playerLat = players, harnessCounts, playerLat
		metricsAfter := ops[s].scrape(tb)
		r.api = proxies[s].counter.Counts().Minus(marks[s].api)
		r.apiBy = proxies[s].counter.ByResource()
		for k, v := range marks[s].by {
			if r.apiBy[k] -= v; r.apiBy[k] == 0 {
				delete(r.apiBy, k)
			}
		}
		r.readLat, r.writeLat = proxies[s].counter.Latencies(marks[s].lat)
		r.rssEnd, r.rssPeak = procMemory(ops[s].pid())
		r.heapEnd = sumMetric(metricsAfter, "go_memstats_heap_inuse_bytes", "")
		for name, ticks := range cpuAfter.Procs {
			key := name
			switch {
			case name == shardProc(s):
				key = "operator"
			case strings.HasPrefix(name, "operator"):
				key = "other operators"
			}
			r.cpu[key] += float64(ticks-cpuBefore.Procs[name]) / measure.TicksPerSecond
		}
		r.busy = float64(cpuAfter.Busy-cpuBefore.Busy) / measure.TicksPerSecond
		r.capa = cpuAfter.At.Sub(cpuBefore.At).Seconds() * float64(cpuAfter.Cores)
		mu.Lock()
		for i, name := range names[s] {
			r.durations[i] = timeout
			if at, ok := released[name]; ok {
				r.durations[i] = at.Sub(edits[s][i])
				r.succeeded++
				if float64(r.durations[i]) <= 1.05*float64(plan.Duration) {
					r.within++
				}
			}
		}
		mu.Unlock()
		metricsBefore := marks[s].metrics
		delta := func(name, filter string) float64 {
			return sumMetric(metricsAfter, name, filter) - sumMetric(metricsBefore, name, filter)
		}
		r.reconciles = delta("controller_runtime_reconcile_total", `controller="release"`)
		r.recErrors = delta("controller_runtime_reconcile_errors_total", `controller="release"`)
		r.hops = delta(controller.MetricsPrefix+"_hops_total", "")
		rec := histogramDelta(metricsBefore, metricsAfter, "controller_runtime_reconcile_time_seconds", `controller="release"`)
		r.recP50, r.recP99 = rec.quantile(0.5), rec.quantile(0.99)
		r.queueP99 = histogramDelta(metricsBefore, metricsAfter, "workqueue_queue_duration_seconds", `name="release"`).quantile(0.99)
	}
	return res
}

// shardProc names shard s's operator process in CPU samples.
func shardProc(s int) string { return "operator-" + strconv.Itoa(s) }

// fleetObjects returns the objects of Release name: side A running v1 at
// full capacity, side B at 0 running nothing, the route with all traffic
// on A, and the Release at v1, as a user would create them.
func fleetObjects(ns, name string, strat strategy.Incremental) []client.Object {
	var objs []client.Object
	for _, side := range []struct {
		suffix, image string
		replicas      int32
	}{{"-a", "example.com/app:v1", fleetReplicas}, {"-b", "example.com/app:none", 0}} {
		labels := map[string]string{"app": name + side.suffix}
		objs = append(objs, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + side.suffix},
			Spec: appsv1.DeploymentSpec{
				Replicas: new(side.replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: side.image}}},
				},
			},
		})
	}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: name, Gateway: "gw",
		A: gateway.Backend{Name: name + "-a", Port: 80}, B: gateway.Backend{Name: name + "-b", Port: 80},
		Hostnames: []string{name + ".example"}})
	if err != nil {
		panic(err) // a fixed, valid spec
	}
	objs = append(objs, rt, &v1alpha1.Release{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ReleaseSpec{
			Revision: "v1",
			Image:    v1alpha1.ImageTemplate{Container: "app", Template: "example.com/app:{revision}"},
			Strategy: v1alpha1.ReleaseStrategy{Incremental: &strat},
			Replicas: fleetReplicas,
			A:        v1alpha1.Side{Deployment: name + "-a", Service: name + "-a", Port: 80},
			B:        v1alpha1.Side{Deployment: name + "-b", Service: name + "-b", Port: 80},
			Route:    v1alpha1.RouteRef{Name: name},
		},
	})
	return objs
}

// fleetOperator is the operator process of a fleet.
type fleetOperator struct {
	cmd     *exec.Cmd
	log     string
	metrics string
	done    chan struct{}
}

func startFleetOperator(tb testing.TB, kubeconfig, ns string, workers int, args ...string) *fleetOperator {
	tb.Helper()
	o := &fleetOperator{log: filepath.Join(tb.TempDir(), "operator.log"), metrics: freePort(tb), done: make(chan struct{})}
	f, err := os.Create(o.log)
	if err != nil {
		tb.Fatal(err)
	}
	// As a user runs one replica: info logs, no leader election (with it,
	// an API server saturated by the fleet answers a renewal of the Lease
	// after the renew deadline, and the operator exits: "leader election
	// lost").
	o.cmd = exec.Command(operatorBinary(tb), append([]string{"-namespace", ns, "-metrics-bind-address", o.metrics, "-health-probe-bind-address", "0",
		"-leader-elect=false",
		"-max-concurrent-reconciles", strconv.Itoa(workers)}, args...)...)
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	o.cmd.Stdout, o.cmd.Stderr = f, f
	o.cmd.SysProcAttr = procAttr()
	if err := o.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = o.cmd.Wait(); f.Close(); close(o.done) }()
	tb.Cleanup(func() {
		o.stop()
		if tb.Failed() {
			raw, _ := os.ReadFile(o.log)
			if len(raw) > 6000 {
				raw = raw[len(raw)-6000:]
			}
			tb.Logf("operator log (tail):\n%s", raw)
		}
	})
	// Wait for its metrics endpoint (and so for the manager to run).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, err := http.Get("http://" + o.metrics + "/metrics"); err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("the operator's metrics endpoint never answered")
		}
	}
	return o
}

func (o *fleetOperator) pid() int { return o.cmd.Process.Pid }

// exited fails the test if the operator process has ended.
func (o *fleetOperator) exited(tb testing.TB) {
	tb.Helper()
	select {
	case <-o.done:
		tb.Fatalf("the operator exited: %v", o.cmd.ProcessState)
	default:
	}
}

func (o *fleetOperator) stop() {
	select {
	case <-o.done:
		return
	default:
	}
	_ = o.cmd.Process.Signal(os.Interrupt)
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.done
	}
}

func (o *fleetOperator) scrape(tb testing.TB) string {
	tb.Helper()
	res, err := http.Get("http://" + o.metrics + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(raw)
}

// sumMetric sums the samples of metric name (exactly; no _bucket or
// _count) whose labels contain filter, in Prometheus' text format.
func sumMetric(text, name, filter string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') || !strings.Contains(rest, filter) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// histogram is the cumulative bucket counts of a Prometheus histogram, by
// upper bound.
type histogram struct {
	les    []float64
	counts []float64
}

func histogramOf(text, name, filter string) map[float64]float64 {
	out := map[float64]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+"_bucket{")
		if !ok || !strings.Contains(rest, filter) {
			continue
		}
		_, le, ok := strings.Cut(rest, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[bound] += v
		}
	}
	return out
}

// histogramDelta is the histogram of the observations between two scrapes.
func histogramDelta(before, after, name, filter string) histogram {
	a, b := histogramOf(before, name, filter), histogramOf(after, name, filter)
	var h histogram
	for le := range b {
		h.les = append(h.les, le)
	}
	slices.Sort(h.les)
	for _, le := range h.les {
		h.counts = append(h.counts, b[le]-a[le])
	}
	return h
}

// quantile estimates the q-quantile by linear interpolation within its
// bucket, as Prometheus' histogram_quantile does; 0 when empty.
func (h histogram) quantile(q float64) time.Duration {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return 0
	}
	rank := q * h.counts[len(h.counts)-1]
	lo, prev := 0.0, 0.0
	for i, le := range h.les {
		if h.counts[i] >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(lo * float64(time.Second))
			}
			frac := 0.0
			if h.counts[i] > prev {
				frac = (rank - prev) / (h.counts[i] - prev)
			}
			return time.Duration((lo + (le-lo)*frac) * float64(time.Second))
		}
		lo, prev = le, h.counts[i]
	}
	return time.Duration(lo * float64(time.Second))
}

// procMemory returns a process's resident memory and its peak, in bytes.
func procMemory(pid int) (rss, peak int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

func (r fleetResult) ratio(q float64) float64 {
	return float64(measure.Quantile(r.durations, q)) / float64(r.plan.Duration)
}

func (r fleetResult) perRollout(x int64) float64 { return float64(x) / float64(r.n) }

// cpuPerHop is the operator's CPU seconds per hop applied.
func (r fleetResult) cpuPerHop() float64 {
	if r.hops == 0 {
		return 0
	}
	return r.cpu["operator"] / r.hops
}

// table is the run's figures, for the log.
func (r fleetResult) table() string {
	var b strings.Builder
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + " ms"
	}
	row := func(k, format string, args ...any) { fmt.Fprintf(&b, "| %s | %s |\n", k, fmt.Sprintf(format, args...)) }
	shard := ""
	if r.shards > 1 {
		shard = fmt.Sprintf(" (shard %d of %d, each with its own operator)", r.shard, r.shards)
	}
	fmt.Fprintf(&b, "\n| %d Releases%s, Incremental 10%% every %v (plan %v, %d hops), edits spread over %v, %d workers | |\n|---|---|\n",
		r.n, shard, r.interval, r.plan.Duration, r.plan.Hops, r.interval, r.workers)
	row("load average at the start (1, 5, 15 min)", "%s", r.load)
	row("setup (create, adopt v1)", "%v", r.setup.Round(time.Second))
	row("rollouts Released at v2", "%d of %d", r.succeeded, r.n)
	row("within 1.05x of the plan", "%.1f%%", 100*float64(r.within)/float64(r.n))
	row("duration / plan p50, p99, max", "%.3f, %.3f, %.3f", r.ratio(0.5), r.ratio(0.99), r.ratio(1))
	row("operator API requests per rollout: reads / writes / watches", "%.1f / %.1f / %.2f (409: %d, 429: %d, failed: %d)",
		r.perRollout(r.api.Reads), r.perRollout(r.api.Writes), r.perRollout(r.api.Watches), r.api.Conflicts, r.api.TooMany, r.api.Failed)
	var by []string
	for _, k := range slices.Sorted(maps.Keys(r.apiBy)) {
		if k != "" && !strings.HasPrefix(k, "WATCH") {
			by = append(by, fmt.Sprintf("%s %.1f", k, r.perRollout(r.apiBy[k])))
		}
	}
	row("operator API requests per rollout by verb and resource", "%s", strings.Join(by, ", "))
	row("operator API latency p50 / p99: reads, writes", "%s / %s, %s / %s",
		ms(measure.Quantile(r.readLat, 0.5)), ms(measure.Quantile(r.readLat, 0.99)), ms(measure.Quantile(r.writeLat, 0.5)), ms(measure.Quantile(r.writeLat, 0.99)))
	all := func(x int64) float64 { return float64(x) / float64(r.n*max(1, r.shards)) } // the player serves every shard
	row("gateway player's API requests per rollout: reads / writes (write latency p99)", "%.1f / %.1f (%s)",
		all(r.players.Reads), all(r.players.Writes), ms(measure.Quantile(r.playerLat, 0.99)))
	row("reconciles per rollout (errors)", "%.1f (%.0f)", r.reconciles/float64(r.n), r.recErrors)
	row("hops per rollout", "%.1f", r.hops/float64(r.n))
	row("reconcile time p50, p99", "%s, %s", ms(r.recP50), ms(r.recP99))
	row("work queue wait p99", "%s", ms(r.queueP99))
	row("operator CPU per hop", "%.1f ms", 1000*r.cpuPerHop())
	row("operator RSS: idle, end, peak", "%.0f, %.0f, %.0f MiB", mib(r.rssIdle), mib(r.rssEnd), mib(r.rssPeak))
	row("operator RSS per rollout (end - idle) / N", "%.1f KiB", float64(r.rssEnd-r.rssIdle)/1024/float64(r.n))
	row("operator Go heap in use per rollout (end - idle) / N", "%.1f KiB", (r.heapEnd-r.heapIdl)/1024/float64(r.n))
	secs := r.elapsed.Seconds()
	others := r.busy
	for _, k := range []string{"kube-apiserver", "etcd", "operator", "other operators", "test"} {
		others -= r.cpu[k]
	}
	row("cores busy: kube-apiserver / etcd / operator / the other shards' operators / player+proxy+test / other work (the cluster's controllers and nodes included)", "%.2f / %.2f / %.2f / %.2f / %.2f / %.2f of %.0f",
		r.cpu["kube-apiserver"]/secs, r.cpu["etcd"]/secs, r.cpu["operator"]/secs, r.cpu["other operators"]/secs, r.cpu["test"]/secs, others/secs, r.capa/secs)
	row("wall time of the measured run", "%v", r.elapsed.Round(time.Second))
	return b.String()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func (r fleetResult) report(b *testing.B) {
	b.ReportMetric(float64(r.within)/float64(r.n), "within1.05x")
	b.ReportMetric(r.ratio(0.5), "p50-ratio")
	b.ReportMetric(r.ratio(0.99), "p99-ratio")
	b.ReportMetric(r.perRollout(r.api.Reads), "reads/rollout")
	b.ReportMetric(r.perRollout(r.api.Writes), "writes/rollout")
	b.ReportMetric(r.perRollout(r.api.Watches), "watches/rollout")
	b.ReportMetric(float64(r.recP99)/float64(time.Millisecond), "rec-p99-ms")
	b.ReportMetric(1000*r.cpuPerHop(), "cpu-ms/hop")
	b.ReportMetric(float64(r.rssEnd-r.rssIdle)/1024/float64(r.n), "rss-KiB/rollout")
	b.ReportMetric(r.cpu["operator"]/r.elapsed.Seconds(), "operator-cores")
	b.ReportMetric(r.cpu["kube-apiserver"]/r.elapsed.Seconds(), "apiserver-cores")
	b.ReportMetric(r.cpu["etcd"]/r.elapsed.Seconds(), "etcd-cores")
}
