package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
)

// ErrNotKept is matched by a *NotKeptError: the API server answered a
// write of the plugin with an object that does not hold what was written.
var ErrNotKept = errors.New("kubectl-upshift: the API server did not keep the request")

// NotKeptError: the answer to a write of Field (".spec.control.abort", or
// an annotation) does not hold the value written (Want); Got is what it
// holds there (nil when nothing). Pruned is the part of the path the
// server dropped because the schema of the object's resource has no such
// field (".spec.control": the whole control), "" when the answer does not
// say so; Schema names that schema ("CustomResourceDefinition
// releases.operator.upshift.dev"); Control is the path of the control
// (".spec.control", "" for an annotation). Warnings are the API server's
// warnings about the write. Nothing was requested of the rollout: the
// request is not stored.
type NotKeptError struct {
	Object   string
	Field    string
	Control  string
	Want     any
	Got      any
	Pruned   string
	Schema   string
	Warnings []string
}

func (e *NotKeptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the API server did not keep %s = %s", e.Object, e.Field, jsonText(e.Want))
	switch {
	case e.Pruned != "" && len(e.Pruned) > len(e.Control) && e.Control != "":
		fmt.Fprintf(&b, ": the schema of %s has no field %s, so the server pruned it and nothing was requested;"+
			" its %s is older than strategy.Control: regenerate the schema (controller-gen) with every field of strategy.Control",
			e.Schema, e.Pruned, e.Control)
	case e.Pruned != "":
		fmt.Fprintf(&b, ": the schema of %s has no field %s, so the server pruned it and nothing was requested;"+
			" add strategy.Control to the schema at %s (or point --control-path at a field it has)", e.Schema, e.Pruned, e.Control)
	default:
		fmt.Fprintf(&b, ": its answer holds %s there, so nothing was requested (a mutating webhook or a policy changed the write?)", jsonText(e.Got))
	}
	if len(e.Warnings) > 0 {
		fmt.Fprintf(&b, " (server warnings: %s)", strings.Join(e.Warnings, "; "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotKept) true.
func (e *NotKeptError) Is(target error) bool { return target == ErrNotKept }

func jsonText(v any) string {
	if v == nil {
		return "nothing"
	}
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// warningHandler receives the API server's warnings (rest.Config
// WarningHandlerWithContext): a request made with a context from
// collectWarnings keeps them for its caller; any other prints them on out,
// as kubectl does. It is safe for concurrent use.
type warningHandler struct {
	mu  sync.Mutex
	out io.Writer
}

func (h *warningHandler) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	if w, ok := ctx.Value(warningsKey{}).(*warnings); ok {
		w.add(text)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(h.out, "Warning: %s\n", text)
}

type warningsKey struct{}

// warnings are the warnings of the requests made with one context.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) add(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// collectWarnings returns a context whose requests' warnings are kept in
// the returned warnings instead of printed.
func collectWarnings(ctx context.Context) (context.Context, *warnings) {
	w := &warnings{}
	return context.WithValue(ctx, warningsKey{}, w), w
}

// checkKept checks the API server's answer u to a merge patch that set
// fields of the control at p: each must hold the value written (a false
// one may be absent, which is what a merge patch of false can store). A
// field the answer lacks because the server pruned it is reported with
// the part of p that was pruned and schema naming the schema that lacks
// it.
func checkKept(object string, u *unstructured.Unstructured, p object.Path, fields map[string]any, warns []string, schema func() string) error {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		want := fields[k]
		fp := p.Append(k)
		got, found, _ := unstructured.NestedFieldNoCopy(u.Object, fp...)
		if !found {
			got = nil
		}
		if reflect.DeepEqual(got, want) || want == false && (got == nil || got == false) {
			continue
		}
		e := &NotKeptError{Object: object, Field: fp.String(), Control: p.String(), Want: want, Got: got, Warnings: warns}
		if got == nil {
			e.Pruned = prunedPrefix(u.Object, fp, warns)
			if e.Pruned != "" {
				e.Schema = schema()
			}
		}
		return e
	}
	return nil
}

// prunedPrefix returns the shortest prefix of p that the answer obj lacks
// when a warning of the server says it dropped it as an unknown field
// (`unknown field "spec.control"`), "" otherwise.
func prunedPrefix(obj map[string]any, p object.Path, warns []string) string {
	for i := 1; i <= len(p); i++ {
		if _, found, _ := unstructured.NestedFieldNoCopy(obj, p[:i]...); found {
			continue
		}
		missing := strings.Join(p[:i], ".")
		for _, w := range warns {
			if strings.Contains(w, `unknown field "`+missing+`"`) {
				return "." + missing
			}
		}
		return ""
	}
	return ""
}

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// schemaName names the schema of t's resource: its CustomResourceDefinition
// when it has one (and the plugin may read it), else the resource.
func (t *target) schemaName(ctx context.Context) string {
	gr := t.gvr.GroupResource().String()
	if t.dc != nil && t.gvr.Group != "" {
		if _, err := t.dc.Resource(crds).Get(ctx, gr, metav1.GetOptions{}); err == nil {
			return "CustomResourceDefinition " + gr
		}
	}
	return "resource " + gr + " (version " + t.gvr.Version + ")"
}
