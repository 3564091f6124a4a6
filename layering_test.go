package upshift_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/upshift-dev/upshift"

// pkg is what `go list -json` says of one package of upshift's modules.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Module     struct{ Path string }
}

// modules returns the directories of upshift's modules, as go.work lists
// them: the root module ("."), which holds the core, and the modules of the
// Kubernetes adapters, their test helpers, examples and end-to-end tests.
func modules(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "work", "edit", "-json", "go.work").Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatalf("go.work: %v", err)
	}
	var dirs []string
	for _, u := range work.Use {
		dirs = append(dirs, filepath.Clean(u.DiskPath))
	}
	return dirs
}

// goCmd runs the go command in dir on that module alone (each module is
// built and tested against its own go.mod).
func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return out
}

// listPackages lists the packages of every module, by module-relative
// import path ("" for the root package).
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	pkgs := map[string]pkg{}
	for _, dir := range modules(t) {
		dec := json.NewDecoder(bytes.NewReader(goCmd(t, dir, "list", "-json", "./...")))
		for dec.More() {
			var p pkg
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("go list output: %v", err)
			}
			pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
		}
	}
	return pkgs
}

// local reports the module-relative path of an import of the module ("" for
// the root), and whether it is one.
func local(imp string) (string, bool) {
	if imp == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(imp, module+"/")
	return rel, ok
}

func isStdlib(imp string) bool { return !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") }

// TestLayering holds every package to the dependency rules the package
// documentation states: strategy at the bottom, rollout above it, adapters
// above rollout and never importing one another or the fakes, the serving
// helpers and the clock free of Kubernetes, and nothing but examples
// importing examples. It covers the packages of every module in go.work.
func TestLayering(t *testing.T) {
	adapters := map[string]bool{"gateway": true, "serve/ray": true, "serve/replicas": true}
	// What each package may import from the module; absent means anything
	// but examples.
	within := map[string][]string{
		"strategy":           {},
		"clock":              {},
		"rollout":            {"strategy", "clock"},
		"serve":              {},
		"serve/drain":        {"clock"},
		"serve/retry":        {"clock"},
		"rollout/analysis":   {"rollout", "strategy", "clock"},
		"fake":               {"rollout", "rollout/analysis", "strategy", "clock"},
		"gateway":            {"rollout", "strategy", "clock", "internal/conflict", "internal/watchloop", "internal/ownwrite"},
		"serve/ray":          {"rollout", "strategy", "clock"},
		"serve/ray/raytest":  {"fake"}, // never serve/ray, which it checks: the two must not share a mistake
		"serve/replicas":     {"rollout", "strategy", "clock", "internal/conflict", "internal/watchloop"},
		"internal/conflict":  {"rollout"},
		"internal/watchloop": {"clock"},
		"internal/ownwrite":  {},
		// The test harnesses are a module of their own that a copied
		// operator imports: nothing of upshift but the OS thread helper.
		"kubetest":             {"internal/osthread"},
		"kubetest/gatewaytest": {},
		"kubetest/promtest":    {"internal/osthread"},
	}
	// What each package may import from outside the standard library and
	// the module, by prefix; absent means anything.
	outside := map[string][]string{
		"strategy":         {"k8s.io/apimachinery/"},
		"clock":            {},
		"rollout":          {"k8s.io/apimachinery/", "github.com/go-logr/logr"},
		"serve":            {},
		"serve/drain":      {},
		"serve/retry":      {},
		"rollout/analysis": {"k8s.io/apimachinery/"}, // its Spec embeds in a CRD (metav1.Duration, field paths)
		"fake":             {"k8s.io/apimachinery/"},
		"serve/ray":        {"k8s.io/apimachinery/"},

		"serve/ray/raytest": {},
	}
	pkgs := listPackages(t)
	for name, p := range pkgs {
		for _, imp := range p.Imports {
			if rel, ok := local(imp); ok {
				if strings.HasPrefix(rel, "examples") && !strings.HasPrefix(name, "examples") {
					t.Errorf("%s imports %s: only examples import examples", name, rel)
				}
				if (rel == "kubetest" || strings.HasPrefix(rel, "kubetest/")) && name != "kubetest" && !strings.HasPrefix(name, "kubetest/") {
					t.Errorf("%s imports %s: only tests import the test harnesses", name, rel)
				}
				if adapters[name] && adapters[rel] {
					t.Errorf("%s imports %s: adapters never import one another", name, rel)
				}
				if allowed, ok := within[name]; ok && !slices.Contains(allowed, rel) {
					t.Errorf("%s imports %s; it may import only %v from the module", name, rel, allowed)
				}
				continue
			}
			if isStdlib(imp) {
				continue
			}
			if allowed, ok := outside[name]; ok && !hasPrefix(allowed, imp) {
				t.Errorf("%s imports %s; outside the standard library it may import only %v", name, imp, allowed)
			}
		}
	}
	// A user who imports only the core or the fakes gets no Kubernetes client,
	// Gateway API or controller-runtime code, however indirectly: nothing in
	// the root module depends on them (TestRootModuleGraph keeps them out of
	// its go.mod too).
	for name, p := range pkgs {
		if p.Module.Path != module {
			continue
		}
		for _, dep := range p.Deps {
			if heavy(dep) {
				t.Errorf("%s depends on %s", name, dep)
			}
		}
	}
	for _, name := range []string{"strategy", "rollout", "fake", "gateway", "serve/ray", "serve/ray/raytest", "serve/replicas", "serve/drain", "serve/retry", "kubetest", "kubetest/gatewaytest", "kubetest/promtest"} {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("package %s not found: the rules above name it", name)
		}
	}
	// The core, the fakes, the serving helpers and the main command are in
	// the root module; each Kubernetes adapter is a module of its own.
	for name, mod := range map[string]string{
		"strategy": module, "rollout": module, "fake": module, "clock": module,
		"serve/drain": module, "serve/retry": module, "serve/ray": module, "serve/ray/raytest": module, "examples/simulate": module,
		"gateway": module + "/gateway", "serve/replicas": module + "/serve/replicas",
		"kubetest": module + "/kubetest", "kubetest/gatewaytest": module + "/kubetest", "kubetest/promtest": module + "/kubetest",
	} {
		if p, ok := pkgs[name]; ok && p.Module.Path != mod {
			t.Errorf("package %s is in module %s, want %s", name, p.Module.Path, mod)
		}
	}
}

// heavy reports whether a package belongs to the Kubernetes client,
// controller-runtime or the Gateway API.
func heavy(path string) bool {
	return strings.HasPrefix(path, "k8s.io/client-go/") || strings.HasPrefix(path, "sigs.k8s.io/gateway-api/") ||
		strings.HasPrefix(path, "sigs.k8s.io/controller-runtime/") || strings.HasPrefix(path, "k8s.io/api/")
}

// TestRootModuleGraph holds the root module's go.mod to the dependency
// policy: its module graph (what every importer of the core inherits through
// minimal version selection) holds no Kubernetes client, controller-runtime
// or Gateway API at all, and hack/consumer.sh checks that its k8s.io
// minimums drag no operator on controller-runtime v0.22 / k8s.io v0.34.
func TestRootModuleGraph(t *testing.T) {
	sc := bufio.NewScanner(bytes.NewReader(goCmd(t, ".", "list", "-m", "all")))
	for sc.Scan() {
		mod, _, _ := strings.Cut(sc.Text(), " ")
		switch mod {
		case "k8s.io/client-go", "k8s.io/api", "sigs.k8s.io/controller-runtime", "sigs.k8s.io/gateway-api":
			t.Errorf("the root module's graph holds %s: it belongs in an adapter module", sc.Text())
		}
	}
}

// TestEveryModuleInWorkspace checks that go.work lists every module of the
// repository but the stand-ins under hack/, so that ./test.sh and .ci/run,
// which go through go.work's list, test, vet and check them all.
func TestEveryModuleInWorkspace(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range modules(t) {
		used[dir] = true
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "hack" || path == ".git" || strings.HasPrefix(d.Name(), "_") || path != "." && strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" && !used[filepath.Dir(path)] {
			t.Errorf("%s: a module that go.work does not use", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasPrefix(prefixes []string, s string) bool {
	for _, p := range prefixes {
		if s == strings.TrimSuffix(p, "/") || strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
