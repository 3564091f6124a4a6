// Package kubetest runs tests against a real kube-apiserver and etcd, with
// the Gateway API standard-channel CRDs installed: upshift's adapter tests,
// and those of an operator built on upshift (examples/operator and its
// copies). It starts them through controller-runtime's envtest.
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		env := kubetest.Get(t) // skips or fails t when the binaries are missing
//		ns := env.Namespace(t)
//		...
//	}
//
// The control plane starts lazily, once per test package, on the first
// [Get], and [Main] stops it when the tests are done. It runs the binaries
// of [KubeVersion] in [AssetsDir] ($UPSHIFT_KUBE_ASSETS, else a cache that
// upshift's hack/kube-binaries.sh fills), never what KUBEBUILDER_ASSETS,
// TEST_ASSET_* or USE_EXISTING_CLUSTER name. When a binary is missing, Main
// fails the package if [Required] (CI=true, UPSHIFT_REQUIRE_KUBE=1, or
// [MainRequired] without UPSHIFT_REQUIRE_KUBE=0), else every test that
// calls Get is skipped with a message saying how to get them. A control
// plane that fails to start always fails the tests.
//
// By default the environment is a bare API server: no controllers,
// scheduler, kubelet or gateway controller run, so nothing writes status
// unless the test does. [MainWith] with [Options].Cluster gives a whole
// cluster ([ClusterOptions], [Env.Cluster]): the real controller manager
// and scheduler, and nodes simulated by kwok whose pods become Ready
// without running. The [Env] clients act as system:masters. See
// docs/design/kubetest.md for what each environment does and does not run.
package kubetest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// KubeVersion is the Kubernetes release that hack/kube-binaries.sh builds and
// that the API server reports.
const KubeVersion = "v1.37.2"

// BuildCommand is the command, relative to the root of a checkout of
// upshift, that builds the binaries into [AssetsDir].
const BuildCommand = "hack/kube-binaries.sh"

// ErrNoBinaries reports that a binary the package needs is missing from
// [AssetsDir].
var ErrNoBinaries = errors.New("kubetest: Kubernetes binaries not found")

// AssetsDir returns the directory that holds the kube-apiserver and etcd
// binaries: $UPSHIFT_KUBE_ASSETS when set, else
// $HOME/.cache/upshift/kube/<KubeVersion>. hack/kube-binaries.sh uses the same
// rule.
func AssetsDir() string {
	if d := os.Getenv("UPSHIFT_KUBE_ASSETS"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.Getenv("HOME")
	}
	return filepath.Join(home, ".cache", "upshift", "kube", KubeVersion)
}

// Required reports whether missing binaries must fail the tests rather than
// skip them: CI=true or UPSHIFT_REQUIRE_KUBE=1 (any value strconv.ParseBool
// reads as true), or [MainRequired] runs the package's tests and
// UPSHIFT_REQUIRE_KUBE is not set to a false value (0, false).
func Required() bool {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return requiredLocked()
}

// requiredLocked is Required; shared.mu is held.
func requiredLocked() bool {
	if envTrue("CI") || envTrue("UPSHIFT_REQUIRE_KUBE") {
		return true
	}
	return shared.required && !envFalse("UPSHIFT_REQUIRE_KUBE")
}

func envTrue(name string) bool {
	b, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && b
}

func envFalse(name string) bool {
	b, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && !b
}

func clusterOptions() *ClusterOptions {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.cluster
}

// checkBinaries returns nil when the binaries are present and executable in
// dir (kube-apiserver and etcd, and for a cluster kube-controller-manager,
// kube-scheduler and kwok), else an error wrapping ErrNoBinaries that names
// the build command.
func checkBinaries(dir string, cluster bool) error {
	var missing []string
	names := []string{"kube-apiserver", "etcd"}
	if cluster {
		names = append(names, clusterBinaries...)
	}
	for _, name := range names {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %v missing from %s; build them (Go module proxy only, several minutes once, then cached) with %s from a checkout of upshift (upshift's ./test.sh runs it), or set UPSHIFT_KUBE_ASSETS to a directory holding the %s binaries (see the kubetest package doc)",
		ErrNoBinaries, missing, dir, BuildCommand, KubeVersion)
}

// Clients are the ways a test talks to the API server as one identity. All
// of them share Config. The zero value is not usable; get Clients from an
// [Env] ([Env.Clients], [Env.User], [Env.ServiceAccount], [Env.ClientsFor]).
// Safe for concurrent use.
type Clients struct {
	// Config authenticates as the identity. Copy it (rest.CopyConfig)
	// before changing it.
	Config *rest.Config
	// Client is a controller-runtime client (no cache) whose scheme has the
	// Kubernetes built-in types and Gateway API v1 and v1beta1.
	Client client.Client
	// Gateway is the Gateway API typed clientset.
	Gateway gatewayclient.Interface
	// Kube is the client-go clientset.
	Kube kubernetes.Interface
	// Subject names the identity in a RoleBinding (see [Env.Grant]); it is
	// the zero Subject for the administrator and for ClientsFor.
	Subject rbacv1.Subject
}

// Env is a running control plane with the Gateway API CRDs installed. Its
// embedded Clients act as a cluster administrator (group system:masters).
// Get an Env from [Get]; the zero value is not usable. Safe for concurrent
// use by parallel tests.
type Env struct {
	Clients

	// Scheme is the scheme of every Clients.Client: Kubernetes built-in
	// types plus Gateway API v1 and v1beta1. Shared: do not add to it.
	Scheme *runtime.Scheme
	// KubeConfig is a kubeconfig file's content for the administrator, for
	// code under test that reads KUBECONFIG.
	KubeConfig []byte
	// CRDs names the CustomResourceDefinitions installed from the
	// sigs.k8s.io/gateway-api module (the standard channel).
	CRDs []string
	// StartTime is how long starting the control plane and establishing the
	// CRDs took.
	StartTime time.Duration

	// Cluster is the controller manager, scheduler and simulated nodes
	// beside the API server, when the package's TestMain asked for them
	// ([MainWith] with [Options].Cluster); nil otherwise.
	Cluster *Cluster

	te     *envtest.Environment
	stop   func() error
	userMu sync.Mutex // envtest's AddUser is not documented as concurrency-safe
}

// The package's one environment. Each test package is a separate binary, so
// this is one control plane per test package.
var shared struct {
	mu       sync.Mutex
	inMain   bool
	required bool            // MainRequired
	cluster  *ClusterOptions // MainWith, defaults filled in
	started  bool
	env      *Env
	err      error
}

// Main runs the tests of a package that uses [Get] and returns the exit code
// for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
//
// When the binaries are missing and [Required] is true, it prints why and
// returns 1 without running the tests. After the tests it stops the control
// plane if one was started. It also stops it on SIGINT/SIGTERM and shortly
// before -test.timeout fires, and on Linux the kernel kills kube-apiserver
// and etcd if the test binary dies anyway (SIGKILL, a crash), so that no run
// leaves them behind.
//
// Call Main first in TestMain: the test binary doubles as the launcher of
// kube-apiserver and etcd, and Main is where it turns into them.
func Main(m *testing.M) int {
	return MainWith(m, Options{})
}

// MainRequired is [Main] for a package whose tests must never pass without
// the API server: missing binaries fail the package, with a message saying
// how to get them, unless UPSHIFT_REQUIRE_KUBE is set to a false value (0,
// false), which makes the tests that call [Get] skip instead.
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.MainRequired(m)) }
func MainRequired(m *testing.M) int {
	return MainWith(m, Options{Required: true})
}

// Options say what [MainWith] runs the package's tests against.
type Options struct {
	// Required is MainRequired's rule: the tests must never pass without
	// the binaries, unless UPSHIFT_REQUIRE_KUBE is set to a false value.
	Required bool
	// Cluster, when set, makes the environment a whole cluster (see
	// [ClusterOptions]): kube-controller-manager, kube-scheduler and
	// simulated nodes beside the API server, from [Env.Cluster].
	Cluster *ClusterOptions
}

// MainWith is [Main] with options: a required package, or a whole
// cluster rather than a bare API server.
//
//	func TestMain(m *testing.M) {
//		os.Exit(kubetest.MainWith(m, kubetest.Options{Required: true, Cluster: &kubetest.ClusterOptions{}}))
//	}
func MainWith(m *testing.M, o Options) int {
	var cluster *ClusterOptions
	if o.Cluster != nil {
		c := o.Cluster.withDefaults()
		cluster = &c
	}
	shared.mu.Lock()
	shared.cluster = cluster
	shared.mu.Unlock()
	return run(m, o.Required)
}

func run(m *testing.M, required bool) int {
	// First: in a launcher process this execs kube-apiserver or etcd.
	execIfWrapper()
	flag.Parse() // for -test.timeout; testing.M.Run does not parse again
	shared.mu.Lock()
	shared.required = required
	shared.mu.Unlock()
	if err := checkBinaries(AssetsDir(), clusterOptions() != nil); err != nil && Required() {
		why := "CI=true or UPSHIFT_REQUIRE_KUBE=1"
		if required {
			why = "the package's TestMain calls kubetest.MainRequired; UPSHIFT_REQUIRE_KUBE=0 skips the tests that need them instead"
		}
		fmt.Fprintf(os.Stderr, "FAIL: %v\n(required: %s)\n", err, why)
		return 1
	}

	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sig:
			fmt.Fprintf(os.Stderr, "kubetest: %v: stopping the control plane\n", s)
			_ = stop()
			os.Exit(1)
		case <-done:
		}
	}()
	defer func() {
		signal.Stop(sig)
		close(done)
	}()

	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > 10*time.Second {
			// testing panics at the timeout; leave the processes no
			// chance to outlive it.
			t := time.AfterFunc(d-3*time.Second, func() {
				fmt.Fprintln(os.Stderr, "kubetest: -test.timeout is near: stopping the control plane")
				_ = stop()
			})
			defer t.Stop()
		}
	}

	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kubetest: stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stop stops the shared control plane, if running; later Get calls fail.
func stop() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.env == nil {
		return nil
	}
	stopEnv := shared.env.stop
	shared.env = nil
	if shared.err == nil {
		shared.err = errors.New("kubetest: the control plane has been stopped")
	}
	return stopEnv()
}

// TB is the part of testing.TB that the helpers use; *testing.T,
// *testing.B and *rapid.T satisfy it.
type TB interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Get returns the package's environment, starting it on the first call
// (typically a few seconds). When the binaries are missing it skips tb, or
// fails it when [Required]; when the control plane fails to start it fails
// tb. It also fails tb when the package's TestMain does not call [Main],
// which is what stops the control plane.
//
// Call Get with the *testing.T of the test, not inside rapid.Check: a skip
// there would discard examples instead of skipping the test.
func Get(tb TB) *Env {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		tb.Fatalf("kubetest.Get: the package's TestMain must call kubetest.Main or kubetest.MainRequired (it stops the control plane): func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }")
		return nil
	}
	if !shared.started {
		shared.started = true
		dir := AssetsDir()
		if err := checkBinaries(dir, shared.cluster != nil); err != nil {
			shared.err = err
		} else {
			shared.env, shared.err = start(dir, shared.cluster)
			switch {
			case shared.err != nil:
			case shared.env.Cluster != nil:
				tb.Logf("kubetest: a cluster of Kubernetes %s (kube-apiserver with %d Gateway API CRDs, kube-controller-manager, kube-scheduler, %d kwok nodes) started in %v (assets %s)",
					KubeVersion, len(shared.env.CRDs), len(shared.env.Cluster.Nodes), shared.env.StartTime.Round(time.Millisecond), dir)
			default:
				tb.Logf("kubetest: kube-apiserver %s with %d Gateway API CRDs started in %v (assets %s)",
					KubeVersion, len(shared.env.CRDs), shared.env.StartTime.Round(time.Millisecond), dir)
			}
		}
	}
	switch {
	case shared.err == nil:
		return shared.env
	case errors.Is(shared.err, ErrNoBinaries) && !requiredLocked():
		tb.Skipf("%v", shared.err)
	default:
		tb.Fatalf("%v", shared.err)
	}
	return nil
}

// newScheme returns the scheme of every client: Kubernetes built-in types
// and Gateway API v1 and v1beta1.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		gatewayv1.Install,
		gatewayv1beta1.Install,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ClientsFor returns Clients for cfg, for identities the other helpers do not
// make (for example a rest.Config with impersonation). Subject is left zero.
func (e *Env) ClientsFor(tb TB, cfg *rest.Config) *Clients {
	tb.Helper()
	c, err := newClients(cfg, e.Scheme)
	if err != nil {
		tb.Fatalf("kubetest: clients: %v", err)
	}
	return c
}

func newClients(cfg *rest.Config, scheme *runtime.Scheme) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("controller-runtime client: %w", err)
	}
	gw, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway clientset: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes clientset: %w", err)
	}
	return &Clients{Config: cfg, Client: cl, Gateway: gw, Kube: kube}, nil
}
