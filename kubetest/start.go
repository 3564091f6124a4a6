package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"github.com/upshift-dev/upshift/internal/osthread"
)

// gatewayModule is the module whose zip ships the CRDs under crdSubdir.
const (
	gatewayModule = "sigs.k8s.io/gateway-api"
	crdSubdir     = "config/crd/standard"
)

// Generous limits: under go test -race ./... several packages start their
// control planes at once on a small machine.
const (
	startTimeout = time.Minute // per attempt; envtest makes up to five
	stopTimeout  = 30 * time.Second
	crdTimeout   = time.Minute
)

// start runs kube-apiserver and etcd from dir, installs the Gateway API
// standard CRDs and waits until they are established; with cluster, it then
// starts the rest of the cluster (startCluster).
func start(dir string, cluster *ClusterOptions) (*Env, error) {
	begin := time.Now()
	crdDir, err := gatewayCRDDir()
	if err != nil {
		return nil, err
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("kubetest: scheme: %w", err)
	}
	apiserver, etcd, cleanup, err := wrapBinaries(dir)
	if err != nil {
		return nil, fmt.Errorf("kubetest: preparing to start the control plane: %w", err)
	}
	useExisting := false
	te := &envtest.Environment{
		// Never a cluster named by USE_EXISTING_CLUSTER, and always these
		// binaries, whatever KUBEBUILDER_ASSETS or TEST_ASSET_* say.
		UseExistingCluster:    &useExisting,
		BinaryAssetsDirectory: dir,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: apiserver},
			Etcd:      &envtest.Etcd{Path: etcd},
		},
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{crdDir},
		ErrorIfCRDPathMissing:    true,
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: crdTimeout},
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	if cluster != nil {
		// Pods on a lost node are evicted after EvictAfter (the
		// DefaultTolerationSeconds admission plugin adds the tolerations).
		secs := strconv.Itoa(int(cluster.EvictAfter / time.Second))
		args := te.ControlPlane.GetAPIServer().Configure()
		args.Set("default-not-ready-toleration-seconds", secs)
		args.Set("default-unreachable-toleration-seconds", secs)
	}
	thread := osthread.New()
	var cfg *rest.Config
	thread.Run(func() { cfg, err = te.Start() })
	abort := func() {
		_ = te.Stop()
		thread.Close()
		cleanup()
	}
	if err != nil {
		// Start can fail after the processes run (CRDs); do not leak them.
		abort()
		return nil, fmt.Errorf("kubetest: starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	env, err := finishStart(te, cfg, scheme)
	if err != nil {
		abort()
		return nil, err
	}
	env.stop = func() error {
		err := te.Stop()
		thread.Close()
		cleanup()
		return err
	}
	if cluster != nil {
		c, err := startCluster(env, dir, *cluster)
		if err != nil {
			abort()
			return nil, err
		}
		env.Cluster = c
		stopAPIServer := env.stop
		env.stop = func() error {
			// The components first: they would only log the API
			// server's absence.
			return errors.Join(c.stop(), stopAPIServer())
		}
	}
	env.StartTime = time.Since(begin)
	return env, nil
}

func finishStart(te *envtest.Environment, cfg *rest.Config, scheme *runtime.Scheme) (*Env, error) {
	admin, err := newClients(cfg, scheme)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	env := &Env{Clients: *admin, Scheme: scheme, KubeConfig: te.KubeConfig, te: te}
	for _, crd := range te.CRDs {
		if v := crd.Annotations[consts.BundleVersionAnnotation]; v != consts.BundleVersion {
			return nil, fmt.Errorf("kubetest: CRD %s is from Gateway API %q, the clients from %s", crd.Name, v, consts.BundleVersion)
		}
		env.CRDs = append(env.CRDs, crd.Name)
	}
	if len(env.CRDs) == 0 {
		return nil, fmt.Errorf("kubetest: no CRDs found in the %s module", gatewayModule)
	}
	ctx, cancel := context.WithTimeout(context.Background(), crdTimeout)
	defer cancel()
	if err := waitEstablished(ctx, admin.Client, env.CRDs); err != nil {
		return nil, err
	}
	return env, nil
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// waitEstablished waits until every named CRD has the conditions Established
// and NamesAccepted True. envtest itself only waits for discovery.
func waitEstablished(ctx context.Context, c client.Client, names []string) error {
	pending := append([]string(nil), names...)
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for len(pending) > 0 {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(crdGVK)
			if err := c.Get(ctx, client.ObjectKey{Name: pending[0]}, u); err != nil {
				last = err.Error()
				return false, nil
			}
			if ok, why := crdReady(u); !ok {
				last = pending[0] + ": " + why
				return false, nil
			}
			pending = pending[1:]
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kubetest: Gateway API CRDs not established (%s): %w", last, err)
	}
	return nil
}

func crdReady(u *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	status := map[string]string{}
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		status[t] = s
	}
	for _, t := range []string{"Established", "NamesAccepted"} {
		if status[t] != "True" {
			return false, t + " is not True"
		}
	}
	return true, ""
}

// gatewayCRDDir finds config/crd/standard in the sigs.k8s.io/gateway-api
// module this test binary was built with: the module cache entry for the
// compiled-in consts.BundleVersion, else (a replaced or vendored module) the
// directory go list reports. Test binaries carry no dependency versions in
// their build information, so that cannot be used.
func gatewayCRDDir() (string, error) {
	if cache := modCache(); cache != "" {
		dir := filepath.Join(cache, escapeModulePath(gatewayModule)+"@"+consts.BundleVersion, filepath.FromSlash(crdSubdir))
		if isDir(dir) {
			return dir, nil
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", gatewayModule).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("kubetest: locating the %s module (%s): go list: %w", gatewayModule, consts.BundleVersion, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(crdSubdir))
	if !isDir(dir) {
		return "", fmt.Errorf("kubetest: %s not found (is the %s module downloaded? go mod download)", dir, gatewayModule)
	}
	return dir, nil
}

// modCache returns the module cache directory, or "" if unknown.
func modCache() string {
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); d != "" {
			return d
		}
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		return filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, "go", "pkg", "mod")
	}
	return ""
}

// escapeModulePath applies the module cache's case encoding: an upper-case
// letter becomes '!' and its lower-case form.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
