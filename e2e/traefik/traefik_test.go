package traefik_test

import (
	"context"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the Router's client would otherwise warn, with a stack, after 30s
	os.Exit(kubetest.Main(m))
}

// world is one Traefik, two backends and a route, ready for traffic.
type world struct {
	env            *kubetest.Env
	proxy          *proxy
	stable, canary *backend
	route          gateway.RouteRef
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldWith(t, startBackend(t, nameStable), startBackend(t, nameCanary))
}

// newWorldWith is newWorld with the given backends.
func newWorldWith(t *testing.T, stable, canary *backend) *world {
	t.Helper()
	traefikBinary(t) // skip early, before the control plane starts
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	w := &world{env: env, stable: stable, canary: canary}
	w.proxy = startTraefik(t, env, w.stable, w.canary)
	w.route = setup(t, env, ns, w.proxy, w.stable, w.canary)
	created := time.Now()
	waitAccepted(t, env.Client, w.route)
	accepted := time.Now()
	// Traefik writes the route status before its data plane serves the route
	// (the first requests after Accepted get 404): wait for a 200.
	hc := &http.Client{Timeout: 5 * time.Second}
	var err error
	for _, err = get(hc, w.proxy.url); err != nil; _, err = get(hc, w.proxy.url) {
		if time.Since(created) > propagationBudget {
			t.Fatalf("traefik does not serve the route: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("new route: status accepted %v after creation, served %v after creation",
		accepted.Sub(created).Round(time.Millisecond), time.Since(created).Round(time.Millisecond))
	return w
}

func (w *world) router(t *testing.T, settle time.Duration) *gateway.Router {
	t.Helper()
	r, err := gateway.NewRouter(w.env.Client, gateway.Config{Routes: []gateway.RouteRef{w.route},
		A: backendRef(w.stable), B: backendRef(w.canary), SettleDelay: settle})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// countCanary sends n sequential requests and counts those the canary answered.
func countCanary(t *testing.T, hc *http.Client, url string, n int) int {
	t.Helper()
	c := 0
	for i := 0; i < n; i++ {
		name, err := get(hc, url)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if name == nameCanary {
			c++
		}
	}
	return c
}

// TestTraefikProgramsTheRoute: Traefik accepts the route (status written for
// the current generation), and the requests it proxies follow the weights
// that the Router writes, exactly as weighted round robin counts them.
func TestTraefikProgramsTheRoute(t *testing.T) {
	w := newWorld(t)
	hc := &http.Client{Timeout: 5 * time.Second}
	if c := countCanary(t, hc, w.proxy.url, 50); c != 0 {
		t.Fatalf("weights (100,0): canary answered %d of 50", c)
	}
	router := w.router(t, 0)
	for _, canary := range []int32{30, 75, 100, 0} {
		start := time.Now()
		accepted := setAndWait(t, router, canary, 10*time.Millisecond)
		// Traffic moves once Traefik has rebuilt its handlers: wait for a
		// window of 100 requests that matches, then check a window of 1000.
		for c := countCanary(t, hc, w.proxy.url, 100); absDiff(c, int(canary)) > 1; c = countCanary(t, hc, w.proxy.url, 100) {
			if time.Since(start) > propagationBudget {
				t.Fatalf("weight %d: canary answers %d of 100", canary, c)
			}
		}
		moved := time.Since(start)
		c := countCanary(t, hc, w.proxy.url, 1000)
		t.Logf("weight %3d: status accepted after %v, traffic matched after %v; canary answered %d of 1000 sequential requests",
			canary, accepted.Round(time.Millisecond), moved.Round(time.Millisecond), c)
		if absDiff(c, int(canary)*10) > 2 {
			t.Errorf("weight %d: canary answered %d of 1000, want %d±2", canary, c, canary*10)
		}
	}
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}

// recordingRouter records when each new weight is written.
type recordingRouter struct {
	rollout.TrafficRouter
	writeLog
}

type weightWrite struct {
	at     time.Time
	canary int32
}

func (r *recordingRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	return r.record(w, func() error { return r.TrafficRouter.SetWeights(ctx, w) })
}

// writeLog records the weight writes that change the canary weight, with
// the instant each began.
type writeLog struct {
	mu     sync.Mutex
	writes []weightWrite
}

// record runs write, and records w if it succeeded.
func (l *writeLog) record(w rollout.Weights, write func() error) error {
	at := time.Now()
	err := write()
	if err == nil {
		l.mu.Lock()
		if n := len(l.writes); n == 0 || l.writes[n-1].canary != w.B {
			l.writes = append(l.writes, weightWrite{at: at, canary: w.B})
		}
		l.mu.Unlock()
	}
	return err
}

// TestIncrementalUpgradeThroughTraefik drives a whole incremental upgrade with
// the Runner, the gateway Router and fake capacities while 8 clients send
// requests through Traefik the whole time: no request may fail, each hop's
// observed split must match its weights, and the time from each write to the
// traffic moving is reported.
func TestIncrementalUpgradeThroughTraefik(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	w := newWorld(t)
	const (
		clients     = 8
		minRequests = 100_000
		settle      = 500 * time.Millisecond
	)
	l := &load{}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	began := time.Now()
	wg := l.run(loadCtx, w.proxy.url, clients)
	time.Sleep(2 * time.Second) // traffic flowing on (100,0) before the first hop

	// The ten weight hops are paced so that the upgrade itself carries
	// minRequests at the throughput measured so far (slower under -race).
	rate := float64(l.total.Load()) / time.Since(began).Seconds()
	interval := time.Duration(1.2 * minRequests / rate / 10 * float64(time.Second))
	interval = min(max(interval, 1500*time.Millisecond), 15*time.Second).Round(100 * time.Millisecond)
	t.Logf("throughput %.0f requests/s through traefik: step interval %v", rate, interval)

	rec := &recordingRouter{TrafficRouter: w.router(t, settle)}
	a, b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: 30}
	runner := &rollout.Runner{Strategy: strat, Router: rec, A: a, B: b}
	if err := runner.Validate(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := strategy.NewState("v1", "v2")
	upgradeStart := time.Now()
	for s.Phase != strategy.PhaseSucceeded {
		next, requeue, err := runner.Reconcile(ctx, s)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		s = next
		if ctx.Err() != nil {
			t.Fatalf("upgrade did not finish: phase %s weight %d", s.Phase, s.Desired.Weight)
		}
		time.Sleep(min(max(requeue, time.Millisecond), 20*time.Millisecond))
	}
	upgradeEnd := time.Now()
	duringUpgrade := l.total.Load()
	// Keep the clients going, on the final weights, up to the request count.
	for l.total.Load() < minRequests && time.Since(upgradeEnd) < 3*time.Minute {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	wg.Wait()
	total, failed := l.total.Load(), l.failed.Load()
	t.Logf("upgrade took %v (%d weight writes); %d clients sent %d requests through traefik in %v (%d during the upgrade), %d failed",
		upgradeEnd.Sub(upgradeStart).Round(time.Millisecond), len(rec.writes), clients, total,
		time.Since(began).Round(time.Millisecond), duringUpgrade, failed)
	for _, f := range l.failures {
		t.Logf("failure: %s", f)
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed", failed, total)
	}
	if total < minRequests {
		t.Errorf("only %d requests, want >= %d", total, minRequests)
	}
	analyse(t, l.samples, rec.writes, settle)
}

// analyse reports, per weight write, when the traffic moved and the observed
// split while that weight held.
func analyse(t *testing.T, samples []sample, writes []weightWrite, settle time.Duration) {
	t.Helper()
	sort.Slice(samples, func(i, j int) bool { return samples[i].start.Before(samples[j].start) })
	const window = 200
	frac := func(lo, hi int) float64 {
		lo, hi = max(lo, 0), min(hi, len(samples))
		if hi <= lo {
			return math.NaN()
		}
		c := 0
		for _, s := range samples[lo:hi] {
			if s.canary {
				c++
			}
		}
		return float64(c) / float64(hi-lo)
	}
	var moves []time.Duration
	moveAt := make([]time.Time, len(writes))
	prev := int32(0)
	for i, wr := range writes {
		oldF, newF := float64(prev)/100, float64(wr.canary)/100
		first := sort.Search(len(samples), func(k int) bool { return !samples[k].start.Before(wr.at) })
		moved := -1
		for k := first; k < len(samples); k++ {
			f := frac(k-window/2, k+window/2)
			if math.Abs(f-newF) < math.Abs(f-oldF) {
				moved = k
				break
			}
		}
		if moved < 0 {
			t.Errorf("write %d (canary %d): traffic never moved", i, wr.canary)
			moveAt[i] = wr.at
		} else {
			moveAt[i] = samples[moved].start
			moves = append(moves, moveAt[i].Sub(wr.at))
		}
		prev = wr.canary
	}
	// Split per hop: from the move (plus a margin for the window) to the next write.
	for i, wr := range writes {
		from := moveAt[i].Add(100 * time.Millisecond)
		to := time.Now()
		if i+1 < len(writes) {
			to = writes[i+1].at
		}
		n, c := 0, 0
		for _, s := range samples {
			if !s.start.Before(from) && s.end.Before(to) {
				n++
				if s.canary {
					c++
				}
			}
		}
		if n == 0 {
			t.Logf("hop %2d canary %3d%%: no requests", i+1, wr.canary)
			continue
		}
		want := float64(n) * float64(wr.canary) / 100
		got := 100 * float64(c) / float64(n)
		move := moveAt[i].Sub(wr.at)
		t.Logf("hop %2d canary %3d%%: moved %7v after the write; %6d requests, %6d canary = %6.2f%% (expected %.1f, off by %.1f)",
			i+1, wr.canary, move.Round(time.Millisecond), n, c, got, want, float64(c)-want)
		if math.Abs(got-float64(wr.canary)) > 1 {
			t.Errorf("hop %d: canary share %.2f%%, weight %d%%", i+1, got, wr.canary)
		}
		// The Runner writes the next weight only once this one is applied:
		// the traffic must have moved by then.
		if i+1 < len(writes) && moveAt[i].After(writes[i+1].at) {
			t.Errorf("hop %d: traffic moved %v after the write, after the next write", i+1, move)
		}
		if move > settle {
			t.Logf("hop %d: traffic moved %v after the write, later than the settle delay %v", i+1, move, settle)
		}
	}
	if len(moves) > 0 {
		slices.Sort(moves)
		t.Logf("write to traffic moving over %d hops: median %v, max %v", len(moves),
			moves[len(moves)/2].Round(time.Millisecond), moves[len(moves)-1].Round(time.Millisecond))
	}
}

// TestSettleDelayWaitsForTraffic shows why the Router has a SettleDelay:
// Traefik writes Accepted before its data plane has moved. Flipping all the
// traffic between the two sides, requests sent right after the Router first
// reports the weights applied still reach the old side without a settle
// delay, and never with one.
func TestSettleDelayWaitsForTraffic(t *testing.T) {
	w := newWorld(t)
	hc := &http.Client{Timeout: 5 * time.Second}
	const flips, probe = 6, 50
	stale := map[time.Duration]int{}
	for _, settle := range []time.Duration{0, time.Second} {
		router := w.router(t, settle)
		for i := 0; i < flips; i++ {
			canary := int32(100 * ((i + 1) % 2))
			accepted := setAndWait(t, router, canary, 2*time.Millisecond)
			c := countCanary(t, hc, w.proxy.url, probe)
			wrong := c
			if canary == 100 {
				wrong = probe - c
			}
			stale[settle] += wrong
			t.Logf("settle %v: canary %3d reported applied %v after the write; then %d of %d requests reached the old side",
				settle, canary, accepted.Round(time.Millisecond), wrong, probe)
			time.Sleep(300 * time.Millisecond) // let the data plane settle before the next flip
		}
	}
	if stale[time.Second] != 0 {
		t.Errorf("with a 1s settle delay, %d requests reached the old side after the weights were reported applied", stale[time.Second])
	}
	if stale[0] == 0 {
		t.Errorf("without a settle delay no request reached the old side: status no longer precedes traffic, revisit this test")
	}
}

// TestCanaryAbortThroughTraefik drives a canary to 50% and aborts it while 8
// clients send requests through Traefik: the abort walks the traffic back to
// the stable side with no failed request, and every hop's split matches.
func TestCanaryAbortThroughTraefik(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	w := newWorld(t)
	const (
		clients = 8
		settle  = 500 * time.Millisecond
		hold    = 3 * time.Second
	)
	l := &load{}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	began := time.Now()
	wg := l.run(loadCtx, w.proxy.url, clients)
	time.Sleep(time.Second)

	rec := &recordingRouter{TrafficRouter: w.router(t, settle)}
	a, b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	strat := strategy.Canary{MaxSurgePercent: 50, Steps: []strategy.CanaryStep{
		strategy.SetWeight(10), strategy.Pause(hold), strategy.SetWeight(30), strategy.Pause(hold),
		strategy.SetWeight(50), strategy.PauseUntilResumed(),
	}}
	runner := &rollout.Runner{Strategy: strat, Router: rec, A: a, B: b}
	if err := runner.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	drive := func(s strategy.State, done func(strategy.State) bool) strategy.State {
		for !done(s) {
			next, requeue, err := runner.Reconcile(ctx, s)
			if err != nil {
				t.Logf("reconcile: %v", err)
			}
			s = next
			if ctx.Err() != nil {
				t.Fatalf("stuck: phase %s weight %d", s.Phase, s.Desired.Weight)
			}
			time.Sleep(min(max(requeue, time.Millisecond), 20*time.Millisecond))
		}
		return s
	}
	s := drive(strategy.NewState("v1", "v2"), func(s strategy.State) bool { return s.Phase == strategy.PhasePaused && s.Desired.Weight == 50 })
	time.Sleep(hold)
	s = s.Abort("e2e: abort at 50%", time.Now())
	if s = drive(s, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted }); s.Desired.Weight != 0 {
		t.Fatalf("aborted with weight %d on the canary", s.Desired.Weight)
	}
	time.Sleep(hold)
	stopLoad()
	wg.Wait()
	total, failed := l.total.Load(), l.failed.Load()
	t.Logf("canary to 50%% and abort: %d weight writes %v; %d clients sent %d requests through traefik in %v, %d failed",
		len(rec.writes), canaryWeights(rec.writes), clients, total, time.Since(began).Round(time.Millisecond), failed)
	for _, f := range l.failures {
		t.Logf("failure: %s", f)
	}
	if failed != 0 {
		t.Errorf("%d of %d requests failed", failed, total)
	}
	if n := len(rec.writes); n == 0 || rec.writes[n-1].canary != 0 {
		t.Errorf("abort did not return the traffic to the stable side: writes %v", canaryWeights(rec.writes))
	}
	analyse(t, l.samples, rec.writes, settle)
}

func canaryWeights(ws []weightWrite) []int32 {
	out := make([]int32, len(ws))
	for i, w := range ws {
		out[i] = w.canary
	}
	return out
}

// setAndWait writes the canary weight through the Router and polls, every
// poll, until the Router reports it accepted; it returns how long that took.
func setAndWait(t *testing.T, router *gateway.Router, canary int32, poll time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if err := router.SetWeights(ctx, rollout.Weights{A: 100 - canary, B: canary}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := router.Weights(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Accepted {
			return time.Since(start)
		}
		if time.Since(start) > propagationBudget {
			t.Fatalf("weight %d not accepted: %s", canary, st.Message)
		}
		time.Sleep(poll)
	}
}
