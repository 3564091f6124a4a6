package traefik_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
)

const (
	traefikVersion    = "v3.7.13"
	traefikBuild      = "hack/traefik.sh"
	controllerName    = "traefik.io/gateway-controller"
	backendDomain     = "upshift.test" // resolved by the private hosts file only
	servicePort       = 80
	servicePortName   = "http"
	nameStable        = "stable"
	nameCanary        = "canary"
	propagationBudget = 30 * time.Second
	// Every backend answer names the backend and the path it received, and
	// sets the cookie appCookie=<backend name>.
	headerBackend = "X-Upshift-Backend"
	headerPath    = "X-Upshift-Path"
	appCookie     = "app"
)

// traefikBinary returns the cached Traefik binary, or skips t (fails it when
// kubetest.Required) with a message naming hack/traefik.sh.
func traefikBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("UPSHIFT_TRAEFIK_BIN")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "upshift", "traefik", traefikVersion, "traefik")
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("traefik %s not found at %s: run %s (or set UPSHIFT_TRAEFIK_BIN)", traefikVersion, bin, traefikBuild)
		if kubetest.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		msg := "the Traefik e2e tests need root (a private mount namespace for Traefik's /etc/hosts)"
		if kubetest.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// backend is a real HTTP server on loopback answering with its name, with
// status 200, or with the status code NNN for a request to /status/NNN.
// Every answer carries the headers headerBackend and headerPath and sets
// the cookie appCookie.
type backend struct {
	name string
	port int
	hits atomic.Int64
}

func startBackend(t testing.TB, name string) *backend { return startFaultyBackend(t, name, nil) }

// faults make a backend misbehave: every failEvery-th request answered
// with a 500, and every request delayed.
type faults struct {
	failEvery atomic.Int64
	delay     atomic.Int64 // nanoseconds
	n         atomic.Int64
}

// startFaultyBackend is startBackend with faults (nil: none).
func startFaultyBackend(t testing.TB, name string, f *faults) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		f = &faults{}
	}
	b := &backend{name: name, port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if d := f.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		w.Header().Set("Content-Type", "text/plain")
		// Who answered and the path it saw (after any URLRewrite), and a
		// cookie of the application's own, which whatever the route adds
		// must leave intact.
		w.Header().Set(headerBackend, b.name)
		w.Header().Set(headerPath, r.URL.Path)
		http.SetCookie(w, &http.Cookie{Name: appCookie, Value: b.name, Path: "/"})
		if c, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			if code, err := strconv.Atoi(c); err == nil && code >= 200 && code <= 599 {
				w.WriteHeader(code)
			}
		} else if every := f.failEvery.Load(); every > 0 && f.n.Add(1)%every == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = io.WriteString(w, b.name)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

func (b *backend) host() string { return b.name + "." + backendDomain }

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proxy is a running Traefik.
type proxy struct {
	port int
	url  string
	log  string
	// metricsAddr (host:port) serves Traefik's Prometheus metrics at
	// metricsURL, on an entry point of its own that no Gateway listener
	// uses.
	metricsAddr string
	metricsURL  string
}

// latencyBuckets are the upper bounds of Traefik's request duration
// histograms (traefik_*_request_duration_seconds): finer than Traefik's
// default (0.1, 0.3, 1.2, 5), which puts every request on loopback in the
// first bucket.
const latencyBuckets = "0.001,0.0025,0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5"

// startTraefik runs Traefik with its kubernetesGateway and kubernetesCRD
// providers against env's API server (the traefik.io CRDs installed first),
// in a private mount namespace whose /etc/hosts maps the backends' names to
// 127.0.0.1 and whose resolv.conf and nsswitch.conf keep every lookup on
// loopback.
func startTraefik(t testing.TB, env *kubetest.Env, backends ...*backend) *proxy {
	t.Helper()
	bin := traefikBinary(t)
	installTraefikCRDs(t, env)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kubeconfig := write("kubeconfig", string(env.KubeConfig))
	hosts := "127.0.0.1 localhost\n::1 localhost\n"
	for _, b := range backends {
		hosts += "127.0.0.1 " + b.host() + "\n"
	}
	hostsFile := write("hosts", hosts)
	resolvFile := write("resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
	nsswitchFile := write("nsswitch.conf", "hosts: files\n")
	logFile := filepath.Join(dir, "traefik.log")

	port := freePort(t)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{
		"--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
		"--entryPoints.web.address=127.0.0.1:" + strconv.Itoa(port),
		// Prometheus metrics, per entry point, router and service.
		"--entryPoints.metrics.address=" + metricsAddr,
		"--metrics.prometheus=true",
		"--metrics.prometheus.entryPoint=metrics",
		"--metrics.prometheus.addEntryPointsLabels=true",
		"--metrics.prometheus.addRoutersLabels=true",
		"--metrics.prometheus.addServicesLabels=true",
		"--metrics.prometheus.buckets=" + latencyBuckets,
		"--providers.providersThrottleDuration=10ms",
		"--providers.kubernetesGateway=true",
		"--providers.kubernetesGateway.throttleDuration=0s",
		// The kubernetesCRD provider serves the traefik.io resources; with
		// it registered, an HTTPRoute may name a TraefikService backend.
		"--providers.kubernetesCRD=true",
		"--providers.kubernetesCRD.throttleDuration=0s",
		"--log.level=INFO",
		"--log.filePath=" + logFile,
	}
	// unshare gives Traefik its own mount namespace (private propagation), in
	// which the bind mounts hide the host's files from Traefik alone.
	script := `set -e
mount --bind "$1" /etc/hosts
mount --bind "$2" /etc/resolv.conf
mount --bind "$3" /etc/nsswitch.conf
shift 3
exec "$@"`
	cmdArgs := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh",
		hostsFile, resolvFile, nsswitchFile, bin}, args...)
	cmd := exec.Command("unshare", cmdArgs...)
	cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start traefik: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			dumpFile(t, filepath.Join(dir, "stdout"))
			dumpFile(t, logFile)
		}
	})
	p := &proxy{port: port, url: "http://127.0.0.1:" + strconv.Itoa(port), log: logFile,
		metricsAddr: metricsAddr, metricsURL: "http://" + metricsAddr + "/metrics"}
	deadline := time.Now().Add(propagationBudget)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return p
		}
		select {
		case <-exited:
			dumpFile(t, filepath.Join(dir, "stdout"))
			dumpFile(t, logFile)
			t.Fatal("traefik exited during start")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("traefik did not listen on %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dumpFile(t testing.TB, path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	n := 0
	for s.Scan() && n < 200 {
		t.Logf("%s: %s", filepath.Base(path), s.Text())
		n++
	}
}

// setup creates the GatewayClass, the Gateway on Traefik's entry point port,
// the backends' headless Services with FQDN EndpointSlices, and an HTTPRoute
// with all traffic on stable.
func setup(t testing.TB, env *kubetest.Env, ns string, p *proxy, stable, canary *backend) gateway.RouteRef {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	class := &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "traefik-" + ns},
		Spec:       gwv1.GatewayClassSpec{ControllerName: controllerName},
	}
	create(t, c, class)
	t.Cleanup(func() { _ = c.Delete(context.Background(), class) })
	gw, err := gateway.BuildGateway(ns, "gw", class.Name, gateway.Listener{Name: "web", Port: int32(p.port)})
	if err != nil {
		t.Fatal(err)
	}
	create(t, c, gw)
	serveBackends(t, c, ns, stable, canary)
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw",
		A: backendRef(stable), B: backendRef(canary)})
	if err != nil {
		t.Fatal(err)
	}
	create(t, c, rt)
	_ = ctx
	return gateway.RouteRef{Namespace: ns, Name: "web"}
}

// serveBackends creates, for each backend, a headless Service named after
// it with an FQDN EndpointSlice that Traefik resolves to the backend (its
// host is in Traefik's hosts file, see startTraefik).
func serveBackends(t testing.TB, c client.Client, ns string, backends ...*backend) {
	t.Helper()
	for _, b := range backends {
		create(t, c, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b.name},
			Spec: corev1.ServiceSpec{
				ClusterIP: corev1.ClusterIPNone,
				Ports: []corev1.ServicePort{{Name: servicePortName, Port: servicePort,
					TargetPort: intstr.FromInt32(int32(b.port)), Protocol: corev1.ProtocolTCP}},
			},
		})
		ready := true
		create(t, c, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b.name + "-fqdn",
				Labels: map[string]string{discoveryv1.LabelServiceName: b.name}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{b.host()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr(servicePortName), Port: ptr(int32(b.port)),
				Protocol: ptr(corev1.ProtocolTCP)}},
		})
	}
}

func backendRef(b *backend) gateway.Backend {
	return gateway.Backend{Name: b.name, Port: servicePort}
}

func create(t testing.TB, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func ptr[T any](v T) *T { return &v }

// waitAccepted waits until Traefik has written Accepted and ResolvedRefs for
// the route's current generation on every parent.
func waitAccepted(t testing.TB, c client.Client, ref gateway.RouteRef) *gwv1.HTTPRoute {
	t.Helper()
	deadline := time.Now().Add(propagationBudget)
	var last string
	for {
		var rt gwv1.HTTPRoute
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rt); err != nil {
			t.Fatal(err)
		}
		ok := len(rt.Status.Parents) > 0
		for _, ps := range rt.Status.Parents {
			if string(ps.ControllerName) != controllerName {
				ok = false
			}
			for _, want := range []string{string(gwv1.RouteConditionAccepted), string(gwv1.RouteConditionResolvedRefs)} {
				cond := meta(ps.Conditions, want)
				if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != rt.Generation {
					ok = false
				}
			}
		}
		if ok {
			return &rt
		}
		last = fmt.Sprintf("generation %d status %+v", rt.Generation, rt.Status.Parents)
		if time.Now().After(deadline) {
			t.Fatalf("route %s not accepted by traefik: %s", ref, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func meta(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// sample is one request through Traefik.
type sample struct {
	start, end time.Time
	canary     bool
}

// load runs n clients sending GETs through Traefik until stop is closed;
// every request that does not return 200 with a backend's name is a failure.
type load struct {
	mu       sync.Mutex
	samples  []sample
	failures []string
	total    atomic.Int64
	failed   atomic.Int64
	// firstFail and lastFail are the start instants (UnixNano) of the
	// first and the last failed request.
	firstFail, lastFail atomic.Int64
}

// firstFailure and lastFailure are the instants of the first and the last
// failed request, zero when none failed.
func (l *load) firstFailure() time.Time { return unixNano(l.firstFail.Load()) }
func (l *load) lastFailure() time.Time  { return unixNano(l.lastFail.Load()) }

// firstCanary is the start of the first request the canary answered (once
// the clients stopped), zero when none.
func (l *load) firstCanary() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, s := range l.samples {
		if s.canary && (first.IsZero() || s.start.Before(first)) {
			first = s.start
		}
	}
	return first
}

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (l *load) run(ctx context.Context, url string, clients int) *sync.WaitGroup {
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]sample, 0, 1<<14)
			flush := func() {
				l.mu.Lock()
				l.samples = append(l.samples, local...)
				l.mu.Unlock()
				local = local[:0]
			}
			defer flush()
			for ctx.Err() == nil {
				start := time.Now()
				name, err := get(hc, url)
				end := time.Now()
				l.total.Add(1)
				if err != nil {
					if ctx.Err() != nil && strings.Contains(err.Error(), "context canceled") {
						l.total.Add(-1)
						return
					}
					l.failed.Add(1)
					l.firstFail.CompareAndSwap(0, start.UnixNano())
					for last := l.lastFail.Load(); last < start.UnixNano() && !l.lastFail.CompareAndSwap(last, start.UnixNano()); last = l.lastFail.Load() {
					}
					l.mu.Lock()
					if len(l.failures) < 20 {
						l.failures = append(l.failures, fmt.Sprintf("%s: %v", start.Format("15:04:05.000"), err))
					}
					l.mu.Unlock()
					continue
				}
				local = append(local, sample{start: start, end: end, canary: name == nameCanary})
				if len(local) == cap(local) {
					flush()
				}
			}
		}()
	}
	return &wg
}

func get(hc *http.Client, url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %q", resp.StatusCode, body)
	}
	switch s := string(body); s {
	case nameStable, nameCanary:
		return s, nil
	default:
		return "", fmt.Errorf("unexpected body %q", s)
	}
}
