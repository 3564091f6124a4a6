package upshift_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/upshift-dev/upshift"

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
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
// importing examples.
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
		"fake":               {"rollout", "strategy", "clock"},
		"gateway":            {"rollout", "strategy", "clock", "internal/conflict", "internal/watchloop"},
		"serve/ray":          {"rollout", "strategy", "clock"},
		"serve/replicas":     {"rollout", "strategy", "clock", "internal/conflict", "internal/watchloop"},
		"internal/conflict":  {"rollout"},
		"internal/watchloop": {},
	}
	// What each package may import from outside the standard library and
	// the module, by prefix; absent means anything.
	outside := map[string][]string{
		"strategy":    {"k8s.io/apimachinery/"},
		"clock":       {},
		"rollout":     {"k8s.io/apimachinery/", "github.com/go-logr/logr"},
		"serve":       {},
		"serve/drain": {},
		"serve/retry": {},
		"fake":        {"k8s.io/apimachinery/"},
		"serve/ray":   {"k8s.io/apimachinery/"},
	}
	pkgs := listPackages(t)
	for name, p := range pkgs {
		for _, imp := range p.Imports {
			if rel, ok := local(imp); ok {
				if strings.HasPrefix(rel, "examples") && !strings.HasPrefix(name, "examples") {
					t.Errorf("%s imports %s: only examples import examples", name, rel)
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
	// Gateway API or controller-runtime code, however indirectly.
	for _, name := range []string{"strategy", "rollout", "fake", "clock", "serve/drain", "serve/retry"} {
		p, ok := pkgs[name]
		if !ok {
			continue // not (yet) in the module
		}
		for _, dep := range p.Deps {
			if strings.Contains(dep, "k8s.io/client-go") || strings.Contains(dep, "sigs.k8s.io/gateway-api") ||
				strings.Contains(dep, "sigs.k8s.io/controller-runtime") {
				t.Errorf("%s depends on %s", name, dep)
			}
		}
	}
	for _, name := range []string{"strategy", "rollout", "fake", "gateway", "serve/ray", "serve/replicas", "serve/drain", "serve/retry"} {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("package %s not found: the rules above name it", name)
		}
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
