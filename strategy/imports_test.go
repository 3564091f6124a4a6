package strategy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports holds the package to its dependency rule: the standard
// library without I/O, clocks or logging, and apimachinery for types. (The
// apimachinery types themselves pull in more, transitively; the rule is
// about what this package's code can reach for.)
func TestImports(t *testing.T) {
	allowed := func(p string) bool {
		switch p {
		case "net/http", "os", "log", "log/slog", "io", "io/fs", "net", "math/rand", "math/rand/v2", "sync", "syscall":
			return false
		}
		return !strings.Contains(p, ".") || strings.HasPrefix(p, "k8s.io/apimachinery/")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); !allowed(p) {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

// TestSingleGoroutine holds the package, its tests included, to one
// goroutine: no go statement and no t.Parallel. Step is a pure function of
// its arguments, and the tests call it one at a time, so the race detector
// has nothing to watch here; test.sh relies on this to run this package's
// property tests without -race, at full strength, in a fraction of the
// time (every other package runs with -race).
func TestSingleGoroutine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if n.Sel.Name == "Parallel" {
					t.Errorf("%s: Parallel", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}
