package traefik_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
)

// killable is one endpoint of the stable Service: an HTTP server on
// loopback answering with nameStable that can die abruptly (kill: its
// listener and every connection closed at once, requests in flight cut, no
// draining) while its endpoint stays listed, and come back on its port.
// A GET or POST to /status/NNN is answered NNN; a request to /flaky is
// answered 503 every second time (per endpoint).
type killable struct {
	host  string
	port  int
	hits  atomic.Int64
	flaky atomic.Int64
	mu    sync.Mutex
	srv   *http.Server
}

func startKillable(t *testing.T, name string) *killable {
	t.Helper()
	k := &killable{host: name + "." + backendDomain}
	k.start(t)
	t.Cleanup(k.kill)
	return k
}

func (k *killable) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	// The port of a killed server can be taken again at once (SO_REUSEADDR);
	// retry briefly in case the kernel still holds it.
	for i := 0; i < 100; i++ {
		ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(k.port))
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%s: listen: %v", k.host, err)
	}
	k.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set(headerBackend, k.host)
		if c, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			if code, err := strconv.Atoi(c); err == nil && code >= 200 && code <= 599 {
				w.WriteHeader(code)
			}
		} else if r.URL.Path == "/flaky" && k.flaky.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, nameStable)
	})}
	k.mu.Lock()
	k.srv = srv
	k.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// kill closes the listener and every connection, idle or in flight.
func (k *killable) kill() {
	k.mu.Lock()
	srv := k.srv
	k.srv = nil
	k.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// tally is the outcome of a burst of requests.
type tally struct {
	sent, failed int64
	examples     []string
}

// burst sends n requests (method to url, concurrently on clients
// connections) through Traefik; a request fails unless it is answered 200
// with nameStable. After the killAt-th answer (0: never), kill runs once,
// while the other requests are in flight.
func burst(t *testing.T, method, url string, n, clients int, killAt int64, kill func()) tally {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, done, failed atomic.Int64
	var mu sync.Mutex
	var examples []string
	var once sync.Once
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				err := send(hc, method, url)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if len(examples) < 5 {
						examples = append(examples, err.Error())
					}
					mu.Unlock()
				}
				if done.Add(1) == killAt {
					once.Do(kill)
				}
			}
		}()
	}
	wg.Wait()
	return tally{sent: done.Load(), failed: failed.Load(), examples: examples}
}

func send(hc *http.Client, method, url string) error {
	req, err := http.NewRequest(method, url, strings.NewReader("order"))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != nameStable {
		return fmt.Errorf("status %d: %q", resp.StatusCode, body)
	}
	return nil
}

// poll calls ok until it returns true, failing t after propagationBudget
// times four (a loaded 2-core machine).
func poll(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(4 * propagationBudget)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, 4*propagationBudget, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRetryDeadBackend: the stable Service has two endpoints; one dies
// abruptly while thousands of GETs go through Traefik, and its endpoint
// stays listed (as until the EndpointSlice is updated). Without a retry,
// the requests Traefik sends to the dead endpoint fail; with the Router's
// Traefik retry (an ExtensionRef filter to the Middleware that
// gateway.TraefikRetryMiddleware builds), none does. POSTs answered 503
// are not retried by default, and are with NonIdempotent.
func TestRetryDeadBackend(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	s1, s2 := startKillable(t, "stable-1"), startKillable(t, "stable-2")
	can := startBackend(t, nameCanary)
	p := startTraefik(t, env, &backend{name: "stable-1"}, &backend{name: "stable-2"}, can)

	class := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "traefik-" + ns},
		Spec: gwv1.GatewayClassSpec{ControllerName: controllerName}}
	create(t, c, class)
	t.Cleanup(func() { _ = c.Delete(context.Background(), class) })
	gw, err := gateway.BuildGateway(ns, "gw", class.Name, gateway.Listener{Name: "web", Port: int32(p.port)})
	if err != nil {
		t.Fatal(err)
	}
	create(t, c, gw)
	serveStable(t, c, ns, s1, s2)
	serveBackends(t, c, ns, can)
	stable := gateway.Backend{Name: nameStable, Port: servicePort}
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw", A: stable, B: backendRef(can)})
	if err != nil {
		t.Fatal(err)
	}
	create(t, c, rt)
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	waitAccepted(t, c, ref)
	bothServe := func() {
		t.Helper()
		h1, h2 := s1.hits.Load(), s2.hits.Load()
		poll(t, "both stable endpoints serve", func() (bool, string) {
			_ = send(http.DefaultClient, http.MethodGet, p.url+"/")
			return s1.hits.Load() > h1 && s2.hits.Load() > h2, fmt.Sprintf("hits %d %d", s1.hits.Load(), s2.hits.Load())
		})
	}
	bothServe()

	const n, clients, killAt = 6000, 16, 1000
	restart := func() {
		t.Helper()
		s1.start(t)
		bothServe()
	}

	// Without a retry.
	without := burst(t, http.MethodGet, p.url+"/", n, clients, killAt, s1.kill)
	t.Logf("without retry: %d GETs, %d failed (endpoint 1 of 2 killed after %d answers); e.g. %v", without.sent, without.failed, killAt, without.examples)
	if without.failed == 0 {
		t.Errorf("no GET failed without a retry: the test does not show what the retry fixes")
	}
	restart()

	// Why the Router reads the Middleware first: a filter naming a missing
	// one leaves the route Accepted while Traefik serves none of the
	// rule's requests.
	missingMiddleware(t, c, ref, p.url)

	// The Router attaches the retry in the same update as the weights.
	// Each try goes to the endpoint Traefik's round robin picks next, the
	// dead one about half the time: 30 tries leave a GET sent to it a
	// 2^-29 chance of failing. Traefik answers 500 (not 502) for some
	// connections cut mid-request, so 500 is retried too.
	retry := gateway.Retry{Mode: gateway.RetryTraefikMiddleware, Middleware: "upshift-retry",
		Attempts: 30, Codes: []int{500, 502, 503, 504}}
	mw, err := gateway.TraefikRetryMiddleware(ns, retry)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, mw); err != nil {
		t.Fatal(err)
	}
	router, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: backendRef(can), Retry: &retry})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.SetWeights(ctx, rollout.Weights{A: 100, B: 0}); err != nil {
		t.Fatal(err)
	}
	if got := router.Counts().Writes; got != 1 {
		t.Errorf("SetWeights made %d writes, want 1", got)
	}
	waitAccepted(t, c, ref)
	retryActive(t, p.url, retry.Attempts, s1, s2)

	with := burst(t, http.MethodGet, p.url+"/", n, clients, killAt, s1.kill)
	t.Logf("with the Router's Traefik retry (attempts %d, status %v): %d GETs, %d failed (endpoint 1 of 2 killed after %d answers); e.g. %v",
		retry.Attempts, retry.Codes, with.sent, with.failed, killAt, with.examples)
	if with.failed != 0 {
		t.Errorf("%d of %d GETs failed with the retry, want 0", with.failed, with.sent)
	}
	restart()

	// POSTs answered 503: passed on by default, retried with NonIdempotent.
	const posts = 400
	h := s1.hits.Load() + s2.hits.Load()
	def := burst(t, http.MethodPost, p.url+"/flaky", posts, 4, 0, nil)
	hits := s1.hits.Load() + s2.hits.Load() - h
	t.Logf("POST /flaky, default: %d POSTs, %d failed, %d backend hits (no status retry)", def.sent, def.failed, hits)
	if def.failed == 0 || hits != posts {
		t.Errorf("default: %d POSTs failed and the backends saw %d, want some failed and %d (no retry)", def.failed, hits, posts)
	}
	retry.NonIdempotent = true
	mw2, err := gateway.TraefikRetryMiddleware(ns, retry)
	if err != nil {
		t.Fatal(err)
	}
	mw2.SetResourceVersion(mw.GetResourceVersion())
	if err := c.Update(ctx, mw2); err != nil {
		t.Fatal(err)
	}
	poll(t, "POSTs status-retried", func() (bool, string) {
		h := s1.hits.Load() + s2.hits.Load()
		_ = send(http.DefaultClient, http.MethodPost, p.url+"/status/503")
		got := s1.hits.Load() + s2.hits.Load() - h
		return got == int64(retry.Attempts), fmt.Sprintf("a POST answered 503 reached the backends %d times", got)
	})
	non := burst(t, http.MethodPost, p.url+"/flaky", posts, 4, 0, nil)
	t.Logf("POST /flaky, NonIdempotent: %d POSTs, %d failed", non.sent, non.failed)
	if non.failed != 0 {
		t.Errorf("NonIdempotent: %d of %d POSTs failed, want 0; e.g. %v", non.failed, non.sent, non.examples)
	}

	// Dropping the option takes the filter and the record back.
	plain, err := gateway.NewRouter(c, gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: backendRef(can)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SetWeights(ctx, rollout.Weights{A: 100, B: 0}); err != nil {
		t.Fatal(err)
	}
	var back gwv1.HTTPRoute
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &back); err != nil {
		t.Fatal(err)
	}
	if f := back.Spec.Rules[0].Filters; len(f) != 0 {
		t.Errorf("filters after the retry was dropped: %+v", f)
	}
	if _, ok := back.Annotations[gateway.RetryAnnotation(ns, stable, backendRef(can))]; ok {
		t.Errorf("retry record left after the retry was dropped")
	}
}

// retryActive waits until Traefik retries a GET answered 503: it reaches
// the backends attempts times.
func retryActive(t *testing.T, url string, attempts int, ks ...*killable) {
	t.Helper()
	total := func() int64 {
		var s int64
		for _, k := range ks {
			s += k.hits.Load()
		}
		return s
	}
	poll(t, "the retry middleware in effect", func() (bool, string) {
		h := total()
		_ = send(http.DefaultClient, http.MethodGet, url+"/status/503")
		got := total() - h
		return got == int64(attempts), fmt.Sprintf("a GET answered 503 reached the backends %d times", got)
	})
}

// serveStable creates the headless Service nameStable with one FQDN
// EndpointSlice per endpoint (each its own port).
func serveStable(t *testing.T, c client.Client, ns string, ks ...*killable) {
	t.Helper()
	create(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nameStable},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: servicePortName, Port: servicePort,
				TargetPort: intstr.FromInt32(servicePort), Protocol: corev1.ProtocolTCP}}},
	})
	ready := true
	for i, k := range ks {
		create(t, c, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", nameStable, i+1),
				Labels: map[string]string{discoveryv1.LabelServiceName: nameStable}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{k.host},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr(servicePortName), Port: ptr(int32(k.port)),
				Protocol: ptr(corev1.ProtocolTCP)}},
		})
	}
}

// missingMiddleware writes, by hand, an ExtensionRef filter to a Middleware
// that does not exist on the route's rule, shows that Traefik keeps the
// route Accepted and fails every request, then takes the filter out and
// waits until the requests pass again.
func missingMiddleware(t *testing.T, c client.Client, ref gateway.RouteRef, url string) {
	t.Helper()
	ctx := context.Background()
	edit := func(f func(*gwv1.HTTPRoute)) {
		t.Helper()
		var rt gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
			t.Fatal(err)
		}
		f(&rt)
		if err := c.Update(ctx, &rt); err != nil {
			t.Fatal(err)
		}
	}
	edit(func(rt *gwv1.HTTPRoute) {
		rt.Spec.Rules[0].Filters = append(rt.Spec.Rules[0].Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterExtensionRef,
			ExtensionRef: &gwv1.LocalObjectReference{Group: "traefik.io", Kind: "Middleware", Name: "not-applied"}})
	})
	waitAccepted(t, c, ref)
	var last error
	poll(t, "requests fail with a missing Middleware", func() (bool, string) {
		last = send(http.DefaultClient, http.MethodGet, url+"/")
		return last != nil, "GETs still answered"
	})
	// Every request fails now, not one by chance.
	failed := 0
	for range 20 {
		if send(http.DefaultClient, http.MethodGet, url+"/") != nil {
			failed++
		}
	}
	t.Logf("a filter naming a missing Middleware: route Accepted, %d of 20 GETs failed (%v)", failed, last)
	if failed != 20 {
		t.Errorf("%d of 20 GETs failed with a missing Middleware, want 20", failed)
	}
	edit(func(rt *gwv1.HTTPRoute) { rt.Spec.Rules[0].Filters = nil })
	waitAccepted(t, c, ref)
	poll(t, "requests pass again", func() (bool, string) {
		for range 20 {
			if err := send(http.DefaultClient, http.MethodGet, url+"/"); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}
