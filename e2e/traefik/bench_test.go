package traefik_test

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// moveWindow is the number of requests, centred on a request, whose canary
// share decides whether the traffic has moved at that request. Traefik's
// weighted round robin is deterministic, so a window's share is the weight
// to within a request or two, before and after a move.
const moveWindow = 200

// benchWorld is newWorld for any testing.TB: one Traefik, two backends and a
// route with all traffic on stable, served.
func benchWorld(tb testing.TB) *world {
	tb.Helper()
	traefikBinary(tb)
	env := kubetest.Get(tb)
	ns := env.Namespace(tb)
	w := &world{env: env, stable: startBackend(tb, nameStable), canary: startBackend(tb, nameCanary)}
	w.proxy = startTraefik(tb, env, w.stable, w.canary)
	w.route = setup(tb, env, ns, w.proxy, w.stable, w.canary)
	waitAccepted(tb, env.Client, w.route)
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	for _, err := get(hc, w.proxy.url); err != nil; _, err = get(hc, w.proxy.url) {
		if time.Since(start) > propagationBudget {
			tb.Fatalf("traefik does not serve the route: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return w
}

// apiCounter counts the requests a client makes on HTTPRoutes: GETs of a
// route, watch requests and updates.
type apiCounter struct {
	gets, watches, updates atomic.Int64
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *apiCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "/httproutes") {
			switch q := r.URL.Query().Get("watch"); {
			case r.Method == http.MethodGet && (q == "true" || q == "1"):
				c.watches.Add(1)
			case r.Method == http.MethodGet:
				c.gets.Add(1)
			case r.Method == http.MethodPut:
				c.updates.Add(1)
			}
		}
		return next.RoundTrip(r)
	})
}

// countedRouter returns a gateway Router on a watching client whose API
// requests on routes are counted by the returned apiCounter.
func countedRouter(tb testing.TB, w *world, settle time.Duration) (*gateway.Router, *apiCounter) {
	tb.Helper()
	c := &apiCounter{}
	cfg := rest.CopyConfig(w.env.Config)
	cfg.Wrap(c.wrap)
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: w.env.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := gateway.NewRouter(wc, gateway.Config{Routes: []gateway.RouteRef{w.route},
		A: backendRef(w.stable), B: backendRef(w.canary), SettleDelay: settle})
	if err != nil {
		tb.Fatal(err)
	}
	return r, c
}

// writeRecorder records when each new canary weight is written; it keeps
// the Router's Notify (a *gateway.Router is embedded).
type writeRecorder struct {
	*gateway.Router
	writeLog
}

func (r *writeRecorder) SetWeights(ctx context.Context, w rollout.Weights) error {
	return r.record(w, func() error { return r.Router.SetWeights(ctx, w) })
}

// pollOnly forwards only the rollout.TrafficRouter methods: the Runner
// cannot see a Notifier and polls.
type pollOnly struct{ r rollout.TrafficRouter }

func (p pollOnly) SetWeights(ctx context.Context, w rollout.Weights) error {
	return p.r.SetWeights(ctx, w)
}

func (p pollOnly) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return p.r.Weights(ctx)
}

// findMove returns the first request at or after the write from which the
// canary share of the window centred on it is closer to the new weight than
// to the old one; ok is false when no full window after the write shows it.
// samples are sorted by start; prefix[i] counts the canary answers of
// samples[:i].
func findMove(samples []sample, prefix []int, wr weightWrite, prev int32) (time.Time, bool) {
	oldF, newF := float64(prev)/100, float64(wr.canary)/100
	first := sort.Search(len(samples), func(k int) bool { return !samples[k].start.Before(wr.at) })
	for k := max(first, moveWindow/2); k+moveWindow/2 <= len(samples); k++ {
		lo, hi := k-moveWindow/2, k+moveWindow/2
		f := float64(prefix[hi]-prefix[lo]) / float64(hi-lo)
		if math.Abs(f-newF) < math.Abs(f-oldF) {
			return samples[k].start, true
		}
	}
	return time.Time{}, false
}

func canaryPrefix(samples []sample) []int {
	p := make([]int, len(samples)+1)
	for i, s := range samples {
		p[i+1] = p[i]
		if s.canary {
			p[i+1]++
		}
	}
	return p
}

// moveTimes returns, for each write, how long after it the traffic moved
// (by findMove, starting from the canary weight prev); -1 when it did not.
func moveTimes(samples []sample, writes []weightWrite, prev int32) []time.Duration {
	sort.Slice(samples, func(i, j int) bool { return samples[i].start.Before(samples[j].start) })
	prefix := canaryPrefix(samples)
	out := make([]time.Duration, len(writes))
	for i, wr := range writes {
		out[i] = -1
		if at, ok := findMove(samples, prefix, wr, prev); ok {
			out[i] = at.Sub(wr.at)
		}
		prev = wr.canary
	}
	return out
}

// quantile returns the q-quantile (nearest rank) of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// liveSampler sends requests through Traefik from several clients and keeps
// every answer where the benchmark can read it while the clients run.
type liveSampler struct {
	mu      sync.Mutex
	samples []sample
	failed  atomic.Int64
	errs    []string
}

func (s *liveSampler) run(ctx context.Context, url string, clients int) *sync.WaitGroup {
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				name, err := get(hc, url)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					s.failed.Add(1)
					s.mu.Lock()
					if len(s.errs) < 10 {
						s.errs = append(s.errs, err.Error())
					}
					s.mu.Unlock()
					continue
				}
				s.mu.Lock()
				s.samples = append(s.samples, sample{start: start, end: time.Now(), canary: name == nameCanary})
				s.mu.Unlock()
			}
		}()
	}
	return &wg
}

// since returns a sorted copy of the samples started after t.
func (s *liveSampler) since(t time.Time) []sample {
	s.mu.Lock()
	var out []sample
	for i := len(s.samples) - 1; i >= 0 && s.samples[i].end.After(t); i-- {
		if s.samples[i].start.After(t) {
			out = append(out, s.samples[i])
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// BenchmarkHopToTraffic measures the real data plane: the gateway Router
// (no settle delay) writes a weight, and 8 clients sending requests through
// Traefik show when the traffic follows it (the centre of the first window
// of moveWindow requests whose canary share is closer to the new weight).
// Each iteration walks 10, 20, ... 100 and back to 0 twice (22 hops). It reports
// the write-to-traffic time per hop (p50, p90, max) and, for reference, the
// time until the route's status accepts the write (accept-ms-p50).
func BenchmarkHopToTraffic(b *testing.B) {
	w := benchWorld(b)
	router, _ := countedRouter(b, w, 0)
	s := &liveSampler{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	wg := s.run(ctx, w.proxy.url, 8)
	time.Sleep(500 * time.Millisecond)

	var moves, accepts []time.Duration
	walk := []int32{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 0}
	for b.Loop() {
		prev := int32(0)
		for _, canary := range slices.Concat(walk, walk) {
			wr := weightWrite{at: time.Now(), canary: canary}
			if err := router.SetWeights(ctx, rollout.Weights{A: 100 - canary, B: canary}); err != nil {
				b.Fatal(err)
			}
			for {
				st, err := router.Weights(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if st.Accepted {
					accepts = append(accepts, time.Since(wr.at))
					break
				}
				if time.Since(wr.at) > propagationBudget {
					b.Fatalf("weight %d not accepted: %s", canary, st.Message)
				}
				time.Sleep(2 * time.Millisecond)
			}
			for {
				got := s.since(wr.at.Add(-time.Second))
				if at, ok := findMove(got, canaryPrefix(got), wr, prev); ok {
					moves = append(moves, at.Sub(wr.at))
					break
				}
				if time.Since(wr.at) > propagationBudget {
					b.Fatalf("weight %d: the traffic did not follow within %v", canary, propagationBudget)
				}
				time.Sleep(20 * time.Millisecond)
			}
			prev = canary
			time.Sleep(100 * time.Millisecond) // a window of requests on this weight
		}
	}
	b.StopTimer()
	stop()
	wg.Wait()
	if n := s.failed.Load(); n != 0 {
		b.Fatalf("%d requests failed: %v", n, s.errs)
	}
	slices.Sort(moves)
	slices.Sort(accepts)
	b.Logf("%d hops, %d requests: write to traffic %v; write to status accepted %v", len(moves), len(s.samples),
		roundAll(moves), roundAll(accepts))
	b.ReportMetric(ms(quantile(moves, 0.5)), "hop-ms-p50")
	b.ReportMetric(ms(quantile(moves, 0.9)), "hop-ms-p90")
	b.ReportMetric(ms(moves[len(moves)-1]), "hop-ms-max")
	b.ReportMetric(ms(quantile(accepts, 0.5)), "accept-ms-p50")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// upgradeResult is one upgrade through Run.
type upgradeResult struct {
	took           time.Duration
	start          time.Time
	writes         []weightWrite
	moves          []time.Duration // write to traffic, per write
	gets, watches  int64
	reconciles     int64
	requests, fail int64
}

// reconcileCounter counts the Runner's reconciles.
type reconcileCounter struct{ n atomic.Int64 }

func (c *reconcileCounter) Reconciled(context.Context, rollout.Event) { c.n.Add(1) }

// BenchmarkUpgradeThroughTraefik runs whole upgrades through
// rollout.Runner.Run on the real clock, with the gateway Router (fixed
// capacity mode, SettleDelay 500 ms as in the e2e tests) moving the weights
// of a route that Traefik serves, while 8 clients send requests through
// Traefik; no request may fail. Each strategy runs in two variants:
// "notify", where Run is woken by the Router's watches, and "poll2s", where
// the Router is hidden behind its TrafficRouter methods and the strategy
// polls every 2 s (InitialPollInterval = PollInterval = 2 s).
//
// It reports, per variant, the duration against the strategy's Plan
// (x-ratio), the time each hop adds to the plan ((duration - plan) / weight
// writes, x-over-ms), and the route GETs per upgrade (x-gets, counted on the
// wire); and the write-to-traffic time measured during the same upgrades
// (hop-ms-p50), which is what a hop costs the data plane.
func BenchmarkUpgradeThroughTraefik(b *testing.B) {
	w := benchWorld(b)
	const settle = 500 * time.Millisecond
	poll := func(o strategy.Options) strategy.Options {
		o.PollInterval, o.InitialPollInterval = metav1.Duration{Duration: 2 * time.Second}, metav1.Duration{Duration: 2 * time.Second}
		return o
	}
	fixed := strategy.Options{Capacity: strategy.CapacityFixed}
	for _, bc := range []struct {
		name  string
		strat func(strategy.Options) strategy.Strategy
	}{
		{"Incremental-10-1s", func(o strategy.Options) strategy.Strategy {
			return strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, Options: o}
		}},
		{"Incremental-25-2s", func(o strategy.Options) strategy.Strategy {
			return strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: 2 * time.Second}, Options: o}
		}},
		{"Canary-20-pause2s-60-pause2s", func(o strategy.Options) strategy.Strategy {
			return strategy.Canary{Options: o, Steps: []strategy.CanaryStep{
				strategy.SetWeight(20), strategy.Pause(2 * time.Second), strategy.SetWeight(60), strategy.Pause(2 * time.Second)}}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			variants := []struct {
				name   string
				strat  strategy.Strategy
				notify bool
			}{
				{"notify", bc.strat(fixed), true},
				{"poll2s", bc.strat(poll(fixed)), false},
			}
			plan, err := strategy.Plan(variants[0].strat, strategy.PlanOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if p2, err := strategy.Plan(variants[1].strat, strategy.PlanOptions{}); err != nil || p2.Duration != plan.Duration {
				b.Fatalf("the variants' plans differ: %v and %v (%v)", plan.Duration, p2.Duration, err)
			}
			var (
				took          [2]time.Duration
				over          [2]time.Duration
				gets, watches [2]int64
				moves         []time.Duration
				runs          int
				requests      int64
			)
			for b.Loop() {
				runs++
				for i, v := range variants {
					r := upgrade(b, w, v.strat, settle, v.notify)
					took[i] += r.took
					over[i] += (r.took - plan.Duration) / time.Duration(len(r.writes))
					gets[i] += r.gets
					watches[i] += r.watches
					requests += r.requests
					for _, m := range r.moves {
						if m < 0 {
							b.Fatalf("%s: the traffic did not follow a write: %v", v.name, r.moves)
						}
						moves = append(moves, m)
					}
					b.Logf("%s: took %v (plan %v, %d weight writes %v), %d reconciles, route GETs %d, watches %d; %d requests through traefik, %d failed; write to traffic %v",
						v.name, r.took.Round(time.Millisecond), plan.Duration, len(r.writes), canaryWeights(r.writes),
						r.reconciles, r.gets, r.watches, r.requests, r.fail, roundAll(r.moves))
					b.Logf("%s: from the start to each write, then to the end: %v", v.name, roundAll(writeGaps(r)))
				}
			}
			b.StopTimer()
			slices.Sort(moves)
			n := float64(runs)
			b.ReportMetric(plan.Duration.Seconds(), "plan-s")
			for i, v := range variants {
				b.ReportMetric(float64(took[i])/n/float64(plan.Duration), v.name+"-ratio")
				b.ReportMetric(ms(over[i])/n, v.name+"-over-ms")
				b.ReportMetric(float64(gets[i])/n, v.name+"-gets")
			}
			b.ReportMetric(ms(quantile(moves, 0.5)), "hop-ms-p50")
			b.ReportMetric(ms(quantile(moves, 0.9)), "hop-ms-p90")
			b.ReportMetric(0, "failed-reqs")
			b.ReportMetric(float64(requests)/n, "reqs")
		})
	}
}

// upgrade resets the route to all-stable, then runs one upgrade through Run
// while 8 clients send requests through Traefik; it fails b on any failed
// request.
func upgrade(b *testing.B, w *world, strat strategy.Strategy, settle time.Duration, notify bool) upgradeResult {
	b.Helper()
	resetStable(b, w)
	gr, calls := countedRouter(b, w, settle)
	rec := &writeRecorder{Router: gr}
	var router rollout.TrafficRouter = rec
	if !notify {
		router = pollOnly{rec}
	}
	reconciles := &reconcileCounter{}
	runner := &rollout.Runner{Strategy: strat, Router: router, Store: &fake.Store{}, Observer: reconciles}
	if err := runner.Validate(); err != nil {
		b.Fatal(err)
	}

	l := &load{}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	wg := l.run(loadCtx, w.proxy.url, 8)
	time.Sleep(500 * time.Millisecond) // requests on (100, 0) before the first write

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
	took := time.Since(start)
	if err != nil || s.Phase != strategy.PhaseSucceeded {
		b.Fatalf("Run ended %s (%s): %v", s.Phase, s.Message, err)
	}
	time.Sleep(500 * time.Millisecond) // requests on the final weights, for the last move
	stopLoad()
	wg.Wait()
	if n := l.failed.Load(); n != 0 {
		b.Fatalf("%d of %d requests failed: %v", n, l.total.Load(), l.failures)
	}
	r := upgradeResult{took: took, start: start, writes: rec.writes, gets: calls.gets.Load(), watches: calls.watches.Load(),
		reconciles: reconciles.n.Load(), requests: l.total.Load(), fail: l.failed.Load()}
	if len(r.writes) == 0 {
		b.Fatal("Run wrote no weight")
	}
	r.moves = moveTimes(l.samples, r.writes, 0)
	return r
}

// writeGaps returns the time from Run's start to the first write, between
// consecutive writes, and from the last write to Run's return.
func writeGaps(r upgradeResult) []time.Duration {
	prev := r.start
	var out []time.Duration
	for _, w := range r.writes {
		out = append(out, w.at.Sub(prev))
		prev = w.at
	}
	return append(out, r.start.Add(r.took).Sub(prev))
}

// resetStable writes all the weight on stable and waits until Traefik sends
// every request there.
func resetStable(b *testing.B, w *world) {
	b.Helper()
	r, _ := countedRouter(b, w, 0)
	ctx := context.Background()
	if err := r.SetWeights(ctx, rollout.Weights{A: 100, B: 0}); err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	for run := 0; run < 50; {
		name, err := get(hc, w.proxy.url)
		if err != nil {
			b.Fatal(err)
		}
		if name == nameStable {
			run++
		} else {
			run = 0
			time.Sleep(10 * time.Millisecond)
		}
		if time.Since(start) > propagationBudget {
			b.Fatalf("the traffic did not return to stable within %v", propagationBudget)
		}
	}
}
