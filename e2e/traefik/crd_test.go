package traefik_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/upshift-dev/upshift/kubetest"
)

const (
	// traefikModule is the module whose zip ships the traefik.io CRDs of the
	// Traefik the tests run (hack/traefik.sh builds the binary from it, so
	// the module is in the module cache once the binary exists).
	traefikModule = "github.com/traefik/traefik/v3"
	// traefikCRDFile holds every traefik.io CustomResourceDefinition, as
	// Traefik publishes it for installation.
	traefikCRDFile = "docs/content/reference/dynamic-configuration/kubernetes-crd-definition-v1.yml"
	crdTimeout     = time.Minute
)

var traefikServiceGVK = schema.GroupVersionKind{Group: "traefik.io", Version: "v1alpha1", Kind: "TraefikService"}

// The traefik.io CRDs are installed once per test binary (one control plane
// per package).
var traefikCRDs struct {
	once sync.Once
	err  error
}

// installTraefikCRDs installs the traefik.io CRDs of Traefik v3.7.13 on env's
// API server, once, and fails t if that is not possible.
func installTraefikCRDs(t testing.TB, env *kubetest.Env) {
	t.Helper()
	traefikCRDs.once.Do(func() {
		start := time.Now()
		file, err := locateTraefikCRDs()
		if err != nil {
			traefikCRDs.err = err
			return
		}
		crds, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
			Paths: []string{file}, ErrorIfPathMissing: true, MaxTime: crdTimeout,
		})
		if err != nil {
			traefikCRDs.err = fmt.Errorf("installing the traefik.io CRDs from %s: %w", file, err)
			return
		}
		if len(crds) == 0 {
			traefikCRDs.err = fmt.Errorf("no CRD in %s", file)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), crdTimeout)
		defer cancel()
		// The CRDs are served once a list of their kind succeeds.
		for {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(traefikServiceGVK.GroupVersion().WithKind("TraefikServiceList"))
			err = env.Client.List(ctx, l)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				traefikCRDs.err = fmt.Errorf("traefik.io CRDs not served: %w", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("traefik.io: %d CRDs from %s installed in %v", len(crds), file, time.Since(start).Round(time.Millisecond))
	})
	if traefikCRDs.err != nil {
		t.Fatal(traefikCRDs.err)
	}
}

// locateTraefikCRDs returns the path of traefikCRDFile in the Traefik module
// of traefikVersion: `go mod download -json` reports the module's directory
// (downloading it, through GOPROXY, when the module cache lacks it).
func locateTraefikCRDs() (string, error) {
	dir, err := os.MkdirTemp("", "upshift-traefik-crds")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	mod := traefikModule + "@" + traefikVersion
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = dir // outside any module: only the named module is resolved
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = jerr
	}
	if info.Error != "" {
		err = errors.New(info.Error)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("locating %s (go mod download -json; %s downloads it too): %w", mod, traefikBuild, err)
	}
	file := filepath.Join(info.Dir, filepath.FromSlash(traefikCRDFile))
	if _, err := os.Stat(file); err != nil {
		return "", fmt.Errorf("the traefik.io CRDs of %s: %w", mod, err)
	}
	return file, nil
}

// traefikService is a TraefikService (traefik.io/v1alpha1) as unstructured
// content: upshift's tests carry no Traefik Go dependency.
func traefikService(namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(traefikServiceGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}
