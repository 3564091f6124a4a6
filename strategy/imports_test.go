package strategy

import (
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
