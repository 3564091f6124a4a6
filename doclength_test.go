package upshift_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxDocLines is the most lines a doc comment may take: enough to
// say what a thing is or does, why, and what its caller must know (errors,
// concurrency, idempotence, units, preconditions). Design narratives,
// measured figures and long how-it-works explanations belong in
// docs/design/, which a comment may point to in one line.
const maxDocLines = 30

// TestDocLength holds every doc comment of every module's non-test Go files
// (package, declaration, type and value spec, struct field and interface
// method docs) to maxDocLines lines. It skips testdata, hidden and
// underscore directories (the go command ignores them too) and generated
// zz_generated files.
func TestDocLength(t *testing.T) {
	fset := token.NewFileSet()
	long := map[string]string{} // "file identifier" -> "file:line identifier: n lines"
	var order []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		file := filepath.ToSlash(path)
		check := func(cg *ast.CommentGroup, name string) {
			if cg == nil {
				return
			}
			start := fset.Position(cg.Pos()).Line
			n := fset.Position(cg.End()).Line - start + 1
			if n <= maxDocLines {
				return
			}
			key := file + " " + name
			if _, dup := long[key]; !dup {
				order = append(order, key)
			}
			long[key] = fmt.Sprintf("%s:%d %s: doc comment of %d lines, more than %d", file, start, name, n, maxDocLines)
		}
		check(f.Doc, "package")
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			switch n := n.(type) {
			case *ast.FuncDecl:
				name := n.Name.Name
				if n.Recv != nil && len(n.Recv.List) == 1 {
					name = recvName(n.Recv.List[0].Type) + "." + name
				}
				check(n.Doc, name)
			case *ast.GenDecl:
				check(n.Doc, genName(n))
			case *ast.TypeSpec:
				check(n.Doc, n.Name.Name)
			case *ast.ValueSpec:
				check(n.Doc, n.Names[0].Name)
			case *ast.Field:
				if len(stack) >= 2 {
					if _, ok := stack[len(stack)-2].(*ast.StructType); ok {
						check(n.Doc, owner(stack)+"."+fieldName(n))
					}
					if _, ok := stack[len(stack)-2].(*ast.InterfaceType); ok {
						check(n.Doc, owner(stack)+"."+fieldName(n))
					}
				}
			}
			stack = append(stack, n)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range order {
		t.Error(long[key])
	}
}

// genName names a declaration group by its first spec ("const", "var" or
// "type" when it has none).
func genName(d *ast.GenDecl) string {
	if len(d.Specs) > 0 {
		switch s := d.Specs[0].(type) {
		case *ast.TypeSpec:
			return s.Name.Name
		case *ast.ValueSpec:
			return s.Names[0].Name
		}
	}
	return d.Tok.String()
}

// owner names the innermost type or function enclosing the node at the top
// of stack.
func owner(stack []ast.Node) string {
	for i := len(stack) - 1; i >= 0; i-- {
		switch n := stack[i].(type) {
		case *ast.TypeSpec:
			return n.Name.Name
		case *ast.FuncDecl:
			return n.Name.Name
		}
	}
	return "?"
}

func fieldName(f *ast.Field) string {
	if len(f.Names) > 0 {
		return f.Names[0].Name
	}
	return types(f.Type) // an embedded field
}

func recvName(e ast.Expr) string { return types(e) }

// types names a receiver or embedded type, without pointer or type arguments.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return types(e.X)
	case *ast.IndexExpr:
		return types(e.X)
	case *ast.IndexListExpr:
		return types(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return "?"
}
