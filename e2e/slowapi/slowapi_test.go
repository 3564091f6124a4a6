package slowapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
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
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// interval is the Incremental strategy's interval.
const interval = time.Second

// holds are how long the proxy holds the weight-changing writes, by their
// index, cycled: every other write is slow, one of them slower than the
// interval. The Runner records when each weight write returned
// (strategy.State.WeightAppliedAt) and the interval counts from there, so
// however long a write is held, the next one waits a whole interval after
// it.
var holds = []time.Duration{1300 * time.Millisecond, 0, 400 * time.Millisecond, 0, 700 * time.Millisecond, 0}

var (
	stableBackend = gateway.Backend{Name: "web-a", Port: 8080}
	canaryBackend = gateway.Backend{Name: "web-b", Port: 8080}
)

// landed is a weight-changing route write the API server accepted.
type landed struct {
	weights   []int32
	held      time.Duration
	forwarded time.Time // when the proxy sent it on, after holding it
	answered  time.Time // when the API server's answer came back
}

// slowWrites is the proxy's transport: it holds the weight-changing PUTs of
// one route (see holds) and records each one that succeeded; everything
// else passes through as it is.
type slowWrites struct {
	base http.RoundTripper
	path string // the route's URL path

	mu     sync.Mutex
	last   []int32 // the weights of the latest write that landed
	writes []landed
	puts   int // every PUT of the route, weights or not
	failed int // those the API server refused (409 Conflict: retried)
}

func (p *slowWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.URL.Path != p.path {
		return p.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	var rt gwv1.HTTPRoute
	if err := json.Unmarshal(body, &rt); err != nil {
		return nil, fmt.Errorf("slowapi: decoding a route write: %w", err)
	}
	w := weightsOf(&rt)
	p.mu.Lock()
	p.puts++
	changing, k := !slices.Equal(w, p.last), len(p.writes)
	p.mu.Unlock()
	if !changing {
		resp, err := p.base.RoundTrip(req)
		p.count(resp, err)
		return resp, err
	}
	hold := holds[k%len(holds)]
	select {
	case <-time.After(hold):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	forwarded := time.Now()
	resp, err := p.base.RoundTrip(req)
	answered := time.Now()
	p.count(resp, err)
	if err == nil && resp.StatusCode/100 == 2 {
		p.mu.Lock()
		p.writes = append(p.writes, landed{weights: w, held: hold, forwarded: forwarded, answered: answered})
		p.last = w
		p.mu.Unlock()
	}
	return resp, err
}

func (p *slowWrites) count(resp *http.Response, err error) {
	if err == nil && resp.StatusCode/100 == 2 {
		return
	}
	p.mu.Lock()
	p.failed++
	p.mu.Unlock()
}

func (p *slowWrites) landed() (ws []landed, puts, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.writes), p.puts, p.failed
}

// weightsOf lists the weights of every backendRef of the route, rule by
// rule (-1 for one without a weight).
func weightsOf(rt *gwv1.HTTPRoute) []int32 {
	var w []int32
	for _, r := range rt.Spec.Rules {
		for _, b := range r.BackendRefs {
			v := int32(-1)
			if b.Weight != nil {
				v = *b.Weight
			}
			w = append(w, v)
		}
	}
	return w
}

// errorsOnly turns the Fatalf of gatewaytest.Accept, called from the
// player's goroutine, into an Errorf.
type errorsOnly struct{ t *testing.T }

func (errorsOnly) Helper()                             {}
func (e errorsOnly) Fatalf(format string, args ...any) { e.t.Errorf(format, args...) }

// accepted reports whether every parent accepted the route's current
// generation.
func accepted(rt *gwv1.HTTPRoute) bool {
	if len(rt.Status.Parents) == 0 {
		return false
	}
	for _, p := range rt.Status.Parents {
		ok := false
		for _, c := range p.Conditions {
			if c.Type == "Accepted" && c.Status == metav1.ConditionTrue && c.ObservedGeneration == rt.Generation {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// playGateway writes Accepted and ResolvedRefs for every new generation of
// the route, as a gateway controller does, until ctx ends; the returned
// channel closes when it has stopped.
func playGateway(ctx context.Context, t *testing.T, env *kubetest.Env, ns, name string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				if rt, ok := ev.Object.(*gwv1.HTTPRoute); ok && !accepted(rt) {
					gatewaytest.Accept(errorsOnly{t}, env.Client, "HTTPRoute", ns, name)
				}
			}
			w.Stop()
		}
	}()
	return done
}

// decisionCounted is the Incremental strategy as upshift was before
// State.WeightAppliedAt: its interval counts from the instant each weight
// hop was decided. (A state whose weightAppliedAt equals its
// weightChangedAt counts from the decision, and Step records nothing new
// on it.)
type decisionCounted struct{ strategy.Incremental }

func (d decisionCounted) Step(s strategy.State, now time.Time) strategy.Decision {
	s.WeightAppliedAt = s.WeightChangedAt
	return d.Incremental.Step(s, now)
}

// rollOut runs one Incremental upgrade (10% every interval, fixed
// capacity) of a new route through Run, with the Router and the
// AnnotationStore talking to the API server through the slow proxy, and
// returns the weight writes that landed.
func rollOut(t *testing.T, strat strategy.Strategy) []landed {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	name := "web"
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: name, Gateway: "gw",
		A: stableBackend, B: canaryBackend, Hostnames: []string{"web.example"}})
	if err != nil {
		t.Fatal(err)
	}
	setup, cancelSetup := context.WithTimeout(context.Background(), time.Minute)
	defer cancelSetup()
	created, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Create(setup, rt, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the route: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	playerCtx, stopPlayer := context.WithCancel(ctx)
	played := playGateway(playerCtx, t, env, ns, name)
	defer func() { stopPlayer(); <-played }()
	for {
		got, err := env.Gateway.GatewayV1().HTTPRoutes(ns).Get(setup, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the route: %v", err)
		}
		if accepted(got) {
			break
		}
		select {
		case <-setup.Done():
			t.Fatal("the gateway player never accepted the new route")
		case <-time.After(20 * time.Millisecond):
		}
	}

	// The proxy, on loopback, in front of the API server: it authenticates
	// as the administrator; the Runner's client talks plain HTTP to it.
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	base, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowWrites{base: base, path: "/apis/gateway.networking.k8s.io/v1/namespaces/" + ns + "/httproutes/" + name,
		last: weightsOf(created)}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     slow,
		FlushInterval: -1, // watches stream
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(proxy)
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	cs, err := versioned.NewForConfig(&rest.Config{Host: srv.URL, QPS: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}

	ref := gateway.RouteRef{Namespace: ns, Name: name}
	router, err := gateway.NewRouterForClientset(cs, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stableBackend, B: canaryBackend})
	if err != nil {
		t.Fatal(err)
	}
	store, err := router.AnnotationStore(ref) // each weight hop writes the state with it
	if err != nil {
		t.Fatal(err)
	}
	runner := &rollout.Runner{Strategy: strat, Router: router, Store: store}
	end, err := runner.Run(ctx, strategy.NewState("v1", "v2"), nil)
	if err != nil {
		t.Fatalf("Run: %v (phase %s: %s)", err, end.Phase, end.Message)
	}
	if end.Phase != strategy.PhaseSucceeded {
		t.Fatalf("Run ended in phase %s: %s", end.Phase, end.Message)
	}
	ws, puts, failed := slow.landed()
	t.Logf("%d route PUTs in the upgrade (weights and state): %d refused and retried, %d weight writes", puts, failed, len(ws))
	if len(ws) != 10 {
		t.Fatalf("%d weight writes landed, want 10 (10%% steps): %+v", len(ws), ws)
	}
	if want := []int32{0, 100}; !slices.Equal(ws[len(ws)-1].weights, want) {
		t.Fatalf("the last weight write holds %v, want %v", ws[len(ws)-1].weights, want)
	}
	return ws
}

// gaps returns, for each pair of consecutive weight writes, the time from
// the API server's answer to the earlier (which it landed before) to the
// forwarding of the later (which it landed after): a lower bound of the
// time between the two landing. It logs them, one write a line.
func gaps(t *testing.T, ws []landed) []time.Duration {
	var out []time.Duration
	var b strings.Builder
	for k, w := range ws {
		fmt.Fprintf(&b, "\n  write %d %v held %-6s forwarded +%-8s answered +%-8s", k, w.weights, w.held,
			w.forwarded.Sub(ws[0].forwarded).Round(time.Millisecond), w.answered.Sub(ws[0].forwarded).Round(time.Millisecond))
		if k > 0 {
			g := w.forwarded.Sub(ws[k-1].answered)
			out = append(out, g)
			fmt.Fprintf(&b, " gap after the previous %s", g.Round(time.Millisecond))
		}
	}
	t.Log(b.String())
	return out
}

// TestSlowWritesKeepTheInterval: at a 1 s interval, with every other weight
// write held 400-600 ms on its way to the API server, no two weight
// writes land closer than the interval: forwarded(k+1) - answered(k) >=
// 1 s for every k. The subtest "decision" runs the same upgrade with the
// interval counted from each hop's decision (the behaviour before
// State.WeightAppliedAt) and logs how it lands writes closer than that; it
// checks only that the upgrade succeeds.
func TestSlowWritesKeepTheInterval(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: interval},
		Options: strategy.Options{Capacity: strategy.CapacityFixed}}
	t.Run("world", func(t *testing.T) {
		gs := gaps(t, rollOut(t, strat))
		least := slices.Min(gs)
		t.Logf("the interval counted from the instant each weight write returned: least gap between weight writes landing %s (interval %s)",
			least.Round(time.Millisecond), interval)
		for k, g := range gs {
			if g < interval {
				t.Errorf("weight write %d was forwarded %s after the API server answered write %d: closer than the interval %s",
					k+1, g, k, interval)
			}
		}
	})
	t.Run("decision", func(t *testing.T) {
		gs := gaps(t, rollOut(t, decisionCounted{strat}))
		short := 0
		for _, g := range gs {
			if g < interval {
				short++
			}
		}
		t.Logf("the interval counted from the decision (before weightAppliedAt): %d of %d gaps between weight writes landing are shorter than the interval %s; least %s",
			short, len(gs), interval, slices.Min(gs).Round(time.Millisecond))
	})
}
