package rayupgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/gatewaytest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

var (
	backendA = gateway.Backend{Name: "ray-a-serve", Port: 8000}
	backendB = gateway.Backend{Name: "ray-b-serve", Port: 8000}
)

// playerDelay is how long the played gateway controller takes to accept a
// new generation of the route: Traefik writes the status some 40-80 ms
// after a route changes (gateway.Config's SettleDelay).
const playerDelay = 50 * time.Millisecond

// pace is how many polls cluster A (the old one) and cluster B (the new
// one) take to build an application, start a replica and stop one, as in
// serve/ray's upgrade tests.
var pace = [2]raytest.Options{
	{BuildPolls: 1, StartPolls: 2, StopPolls: 1},
	{BuildPolls: 2, StartPolls: 3, StopPolls: 2},
}

// serveConfigs are the revisions' Serve configs: one application of four
// deployments, three fixed and one autoscaling, that differ in an
// environment variable.
func serveConfigs() map[string]json.RawMessage {
	shop := func(version string) json.RawMessage {
		return json.RawMessage(`{"proxy_location": "EveryNode", "applications": [{"name": "shop", "route_prefix": "/",
		  "import_path": "shop.app:build", "runtime_env": {"env_vars": {"VERSION": "` + version + `"}},
		  "deployments": [
		    {"name": "Ingress", "num_replicas": 10},
		    {"name": "Ranker", "num_replicas": 5},
		    {"name": "Model", "num_replicas": 3},
		    {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}]}]}`)
	}
	return map[string]json.RawMessage{"v1": shop("1"), "v2": shop("2")}
}

// newStore is the Runner's Store: the state in an annotation of the
// managed route, written with each weight hop in one update of the route
// (the Router's AnnotationStore, a rollout.HopStore).
func newStore(router *gateway.Router, ref gateway.RouteRef) (rollout.Store, error) {
	return router.AnnotationStore(ref)
}

// apiCounter counts the requests through a rest.Config it wraps, and
// records the weights of every route PUT that lands.
type apiCounter struct {
	route string // the route's path, to tell its PUTs from others

	mu        sync.Mutex
	on        bool
	writes    map[string]int // "PUT httproutes", "PATCH httproutes/status"...
	gets      int
	lists     int
	watches   int
	conflicts int
	failed    int
	routePuts int
	// moves are the instants new weights landed, with the weights.
	moves   []move
	weights map[string]int32 // the route's weights as last written, by backend
}

type move struct {
	at      time.Time
	weights map[string]int32
}

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Method == http.MethodPut && req.URL.Path == c.route && req.Body != nil {
			b, err := io.ReadAll(req.Body)
			req.Body.Close()
			if err != nil {
				return nil, err
			}
			body = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.on {
			return resp, err
		}
		res, named := resource(req.URL.Path)
		switch {
		case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
			c.watches++
		case req.Method == http.MethodGet && !named:
			c.lists++
		case req.Method == http.MethodGet:
			c.gets++
		default:
			c.writes[req.Method+" "+res]++
			if req.Method == http.MethodPut && req.URL.Path == c.route {
				c.routePuts++
			}
		}
		if err != nil {
			c.failed++
			return resp, err
		}
		if resp.StatusCode == http.StatusConflict {
			c.conflicts++
		}
		if body != nil && resp.StatusCode == http.StatusOK {
			c.landed(body)
		}
		return resp, err
	})
}

// landed records the weights of a route PUT that the API server took, as
// a move when they differ from the last ones. c.mu is held.
func (c *apiCounter) landed(body []byte) {
	var rt gwv1.HTTPRoute
	if json.Unmarshal(body, &rt) != nil || len(rt.Spec.Rules) == 0 {
		return
	}
	w := map[string]int32{}
	for _, ref := range rt.Spec.Rules[0].BackendRefs {
		if ref.Weight != nil {
			w[string(ref.Name)] = *ref.Weight
		}
	}
	if !maps.Equal(w, c.weights) {
		c.weights = w
		c.moves = append(c.moves, move{at: time.Now(), weights: w})
	}
}

// routed returns the percent of the traffic the route as last written
// sends to backend.
func (c *apiCounter) routed(backend string) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int32
	for _, w := range c.weights {
		total += w
	}
	if total == 0 {
		return 0
	}
	return c.weights[backend] * 100 / total
}

// start resets the counts and starts counting, from the route's weights as
// they are.
func (c *apiCounter) start(weights map[string]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = true
	c.writes = map[string]int{}
	c.gets, c.lists, c.watches, c.conflicts, c.failed, c.routePuts = 0, 0, 0, 0, 0, 0
	c.moves = nil
	c.weights = weights
}

func (c *apiCounter) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
}

// resource returns the resource (and subresource) an API path names,
// "httproutes" or "httproutes/status", and whether it names an object
// rather than a collection.
func resource(path string) (res string, named bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	rest := parts
	if i := slices.Index(parts, "namespaces"); i >= 0 && len(parts) > i+2 {
		rest = parts[i+2:]
	} else if len(parts) > 0 && parts[0] == "apis" {
		rest = parts[min(3, len(parts)):] // apis, group, version
	} else {
		rest = parts[min(2, len(parts)):] // api, version
	}
	if len(rest) == 0 {
		return path, false
	}
	res = rest[0]
	if len(rest) > 2 {
		res += "/" + strings.Join(rest[2:], "/")
	}
	return res, len(rest) > 1
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// watched checks, at every observation of a side's capacity, that the
// side is ready for the traffic the route (as last written) sends it, and
// keeps the adapter's notifications.
type watched struct {
	*ray.Ray
	backend string
	api     *apiCounter

	mu         sync.Mutex
	reads      int
	violations []string
}

func (w *watched) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	st, err := w.Ray.Capacity(ctx)
	if err != nil {
		return st, err
	}
	routed := w.api.routed(w.backend)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	if st.Ready < routed {
		w.violations = append(w.violations, fmt.Sprintf("read %d of %s: ready %d < routed %d (%+v)", w.reads, w.backend, st.Ready, routed, st))
	}
	return st, nil
}

// cluster is one emulated Ray cluster, its adapter and its Deployer.
type cluster struct {
	rs  *raytest.Server
	cap *watched
	dep *ray.Deployer
	// runGets counts the GETs of the applications sent with Run's
	// context.
	runGets atomic.Int64
}

func newCluster(tb testing.TB, opts raytest.Options, backend string, api *apiCounter) *cluster {
	tb.Helper()
	opts.GuardRedeploys = true
	rs := raytest.New(opts)
	rs.KeepHistory(false)
	srv := httptest.NewServer(rs)
	tb.Cleanup(srv.Close)
	c := &cluster{rs: rs}
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && req.Context().Value(runKey{}) != nil {
			c.runGets.Add(1)
		}
		return srv.Client().Transport.RoundTrip(req)
	})}
	r, err := ray.New(ray.Config{Dashboard: srv.URL, Revisions: ray.RevisionMap(serveConfigs()), HTTPClient: client})
	if err != nil {
		tb.Fatal(err)
	}
	dep, err := r.Deployer()
	if err != nil {
		tb.Fatal(err)
	}
	c.cap, c.dep = &watched{Ray: r, backend: backend, api: api}, dep
	return c
}

// runKey marks the context of Run: the dashboard reads sent under it are
// the Runner's own (its observations, and the reads before its writes);
// the others are the adapters' polls for notifications.
type runKey struct{}

// result is what one upgrade measured.
type result struct {
	interval  time.Duration
	end       strategy.State
	took      time.Duration // trigger to done
	moves     []move
	ramp      time.Duration // first to last weight move landing
	writes    map[string]int
	routePuts int
	gets      int
	lists     int
	watches   int
	conflicts int
	failed    int
	dashboard [2]int // GETs of cluster A, B
	runGets   int    // of which Run's own; the rest are the adapters' polls
	dashPuts  [2]int
	hops      map[rollout.HopKind]int
	// reconciles counts Run's reconciles.
	reconciles int
	player     struct{ written, conflicts int }
	// violations are the safety checks that failed: a side observed with
	// less ready capacity than routed, or a redeploy of a serving cluster.
	violations []string
}

func (r result) totalWrites() int {
	n := 0
	for _, v := range r.writes {
		n += v
	}
	return n
}

// pollEvery is the poll the dashboard reads compare with: the Ray
// adapters' ReadMaxAge, which defaults to their NotifyMaxInterval.
const pollEvery = ray.DefaultNotifyMaxInterval

// pollReads is how many GETs a poll of both clusters every pollEvery
// makes over the upgrade, one at its start included.
func (r result) pollReads() int {
	return 2 * (int(r.took/pollEvery) + 1)
}

// minRamp is the least the ramp can take: the interval between each two
// weight moves.
func (r result) minRamp() time.Duration {
	return time.Duration(max(len(r.moves)-1, 0)) * r.interval
}

func (r result) rampRatio() float64 {
	if r.minRamp() == 0 {
		return 0
	}
	return float64(r.ramp) / float64(r.minRamp())
}

func (r result) putsPerMove() float64 {
	if len(r.moves) == 0 {
		return 0
	}
	return float64(r.routePuts) / float64(len(r.moves))
}

// table renders the figures as the rows of a markdown table.
func (r result) table() string {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "| %s | %s |\n", name, fmt.Sprintf(format, args...))
	}
	b.WriteString("| figure | upshift |\n|---|---|\n")
	row("trigger to done", "%.2f s", r.took.Seconds())
	row(fmt.Sprintf("first to last weight move (minimum %.0f s)", r.minRamp().Seconds()), "%.2f s (%.3fx)", r.ramp.Seconds(), r.rampRatio())
	var ws []string
	for _, k := range slices.Sorted(maps.Keys(r.writes)) {
		ws = append(ws, fmt.Sprintf("%s %d", k, r.writes[k]))
	}
	row("API writes in the upgrade", "%d (%s)", r.totalWrites(), strings.Join(ws, ", "))
	row("HTTPRoute PUTs per weight move (all)", "%.2f (%d PUTs, %d moves)", r.putsPerMove(), r.routePuts, len(r.moves))
	row("API reads in the upgrade", "%d (%d GETs, %d LISTs; %d watches)", r.gets+r.lists, r.gets, r.lists, r.watches)
	d := r.dashboard[0] + r.dashboard[1]
	row("dashboard reads", "%d (A %d, B %d; Run's %d, polls for notifications %d; PUTs A %d, B %d; a %v poll of both clusters: %d)",
		d, r.dashboard[0], r.dashboard[1], r.runGets, d-r.runGets, r.dashPuts[0], r.dashPuts[1], pollEvery, r.pollReads())
	row("409 conflicts", "%d (gateway status writes: %d, %d refused)", r.conflicts, r.player.written, r.player.conflicts)
	var hs []string
	for _, k := range slices.Sorted(maps.Keys(r.hops)) {
		hs = append(hs, fmt.Sprintf("%v %d", k, r.hops[k]))
	}
	row("hops", "%s", strings.Join(hs, ", "))
	row("reconciles", "%d (%.1f dashboard reads of Run's each)", r.reconciles, float64(r.runGets)/float64(max(r.reconciles, 1)))
	return b.String()
}

// upgrade runs the Ray Serve upgrade v1 -> v2 at interval in a fresh
// namespace and measures it.
func upgrade(tb testing.TB, interval time.Duration, timeout time.Duration) result {
	tb.Helper()
	env := kubetest.Get(tb)
	ns := env.Namespace(tb)
	ctx := context.Background()
	const name = "shop"
	ref := gateway.RouteRef{Namespace: ns, Name: name}

	admin, err := versioned.NewForConfig(env.Config)
	if err != nil {
		tb.Fatal(err)
	}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: name, Gateway: "gw", A: backendA, B: backendB, Hostnames: []string{"shop.example"}})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.GatewayV1().HTTPRoutes(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	player := gatewaytest.Play(tb, admin, ns, gatewaytest.PlayerOptions{Delay: playerDelay})
	defer player.Stop()

	// The upgrade's own clientset, every request counted.
	api := &apiCounter{route: "/apis/gateway.networking.k8s.io/v1/namespaces/" + ns + "/httproutes/" + name}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Wrap(api.wrap)
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	router, err := gateway.NewRouterForClientset(cs, gateway.Config{Routes: []gateway.RouteRef{ref}, A: backendA, B: backendB})
	if err != nil {
		tb.Fatal(err)
	}

	a := newCluster(tb, pace[0], backendA.Name, api)
	b := newCluster(tb, pace[1], backendB.Name, api)
	// Cluster A serves v1, steady and settled; the route is accepted.
	if err := a.dep.Deploy(ctx, "v1"); err != nil {
		tb.Fatal(err)
	}
	if err := a.cap.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		tb.Fatal(err)
	}
	a.rs.Advance(10)
	if st, err := a.cap.Ray.Capacity(ctx); err != nil || st.Ready != 100 || !st.Settled {
		tb.Fatalf("cluster A not ready: %+v %v", st, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := admin.GatewayV1().HTTPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && gatewaytest.Accepted(cur) {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the played gateway did not accept the route: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.rs.ServingFunc(func() int32 { return api.routed(backendA.Name) })
	b.rs.ServingFunc(func() int32 { return api.routed(backendB.Name) })

	res := result{interval: interval, hops: map[rollout.HopKind]int{}}
	var hopMu sync.Mutex
	store, err := newStore(router, ref)
	if err != nil {
		tb.Fatal(err)
	}
	runner := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: 30},
		Router:   router,
		A:        a.cap, B: b.cap,
		RevisionA: a.dep, RevisionB: b.dep,
		Store: store,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			hopMu.Lock()
			defer hopMu.Unlock()
			res.reconciles++
			for _, h := range e.Applied {
				res.hops[h.Kind]++
			}
		}),
	}
	if err := runner.Validate(); err != nil {
		tb.Fatal(err)
	}
	for _, x := range []any{runner.Router, runner.A, runner.B, runner.RevisionA, runner.RevisionB} {
		if _, ok := x.(rollout.Notifier); !ok {
			tb.Fatalf("%T is no rollout.Notifier", x)
		}
	}

	polls := [2]int{a.rs.Polls(), b.rs.Polls()}
	a.runGets.Store(0)
	b.runGets.Store(0)
	puts := [2]int{a.rs.Puts(), b.rs.Puts()}
	written, refused := player.Written(), player.Conflicts()
	api.start(map[string]int32{backendA.Name: 100, backendB.Name: 0})
	runCtx, cancel := context.WithTimeout(context.WithValue(ctx, runKey{}, true), timeout)
	defer cancel()
	start := time.Now()
	end, err := runner.Run(runCtx, strategy.NewState("v1", "v2"), nil)
	res.took = time.Since(start)
	api.stop()
	if err != nil {
		tb.Fatalf("Run after %v: %v; state %s %+v (%s)", res.took, err, end.Phase, end.Desired, end.Message)
	}
	res.end = end

	api.mu.Lock()
	res.writes = api.writes
	res.routePuts, res.gets, res.lists, res.watches = api.routePuts, api.gets, api.lists, api.watches
	res.conflicts, res.failed = api.conflicts, api.failed
	res.moves = api.moves
	api.mu.Unlock()
	if len(res.moves) > 0 {
		res.ramp = res.moves[len(res.moves)-1].at.Sub(res.moves[0].at)
	}
	res.dashboard = [2]int{a.rs.Polls() - polls[0], b.rs.Polls() - polls[1]}
	res.runGets = int(a.runGets.Load() + b.runGets.Load())
	res.dashPuts = [2]int{a.rs.Puts() - puts[0], b.rs.Puts() - puts[1]}
	res.player.written, res.player.conflicts = int(player.Written()-written), int(player.Conflicts()-refused)
	for _, err := range player.Errors() {
		res.violations = append(res.violations, "gateway player: "+err.Error())
	}
	for _, c := range []*cluster{a, b} {
		res.violations = append(res.violations, c.cap.violations...)
		res.violations = append(res.violations, c.rs.Violations()...)
	}
	return res
}
