// Package object reads a rollout out of any Kubernetes object: its
// strategy.State at a field path of the status (or in a route's state
// annotation), its strategy and its strategy.Control at field paths of the
// spec. Paths are written as kubectl prints them: ".status.rollout".
package object

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/upshift-dev/upshift/strategy"
)

// Sentinel errors, wrapped with %w.
var (
	// ErrInvalidPath: a field path is malformed.
	ErrInvalidPath = errors.New("object: invalid field path")
	// ErrDecode: the value at a path is not what it should be.
	ErrDecode = errors.New("object: cannot decode")
	// ErrNoStrategy: the object holds no strategy at the path.
	ErrNoStrategy = errors.New("object: no strategy")
)

// Path is a parsed field path: the field names from the root. The zero
// value (no fields) is the root of the object.
type Path []string

// ParsePath parses a field path such as ".status.rollout" (the leading dot
// is optional). flag names the option the path came from, for the error.
func ParsePath(flag, p string) (Path, error) {
	q := strings.TrimPrefix(strings.TrimSpace(p), ".")
	if q == "" {
		return nil, fmt.Errorf("%w: %s %q: name at least one field, e.g. .status.rollout", ErrInvalidPath, flag, p)
	}
	fields := strings.Split(q, ".")
	for _, f := range fields {
		if f == "" || strings.ContainsAny(f, "[]{}* ") {
			return nil, fmt.Errorf("%w: %s %q: field %q: use dot-separated field names", ErrInvalidPath, flag, p, f)
		}
	}
	return Path(fields), nil
}

// String renders the path as ParsePath reads it.
func (p Path) String() string { return "." + strings.Join(p, ".") }

// Append returns the path with more fields.
func (p Path) Append(fields ...string) Path {
	return append(append(Path(nil), p...), fields...)
}

// value returns what u holds at p; found is false when a field is missing.
func value(u map[string]any, p Path) (any, bool, error) {
	var cur any = u
	for i, f := range p {
		m, ok := cur.(map[string]any)
		if !ok {
			if cur == nil {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("%w: %s is a %T, not an object", ErrDecode, p[:i], cur)
		}
		if cur, ok = m[f]; !ok {
			return nil, false, nil
		}
	}
	return cur, cur != nil, nil
}

// decode converts the JSON value v into out.
func decode(v any, p Path, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDecode, p, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrDecode, p, err)
	}
	return nil
}

// State returns the strategy.State at p of u; found is false when there is
// none (a new object: the zero State is returned).
func State(u *unstructured.Unstructured, p Path) (s strategy.State, found bool, err error) {
	v, found, err := value(u.Object, p)
	if err != nil || !found {
		return s, false, err
	}
	return s, true, decode(v, p, &s)
}

// Control returns the strategy.Control at p of u (the zero Control when
// there is none).
func Control(u *unstructured.Unstructured, p Path) (strategy.Control, error) {
	var c strategy.Control
	v, found, err := value(u.Object, p)
	if err != nil || !found {
		return c, err
	}
	return c, decode(v, p, &c)
}

// Strategy returns the strategy at p of u: an object with exactly one of
// the fields incremental, canary and blueGreen, each holding that strategy
// (as the example operator's spec.strategy does). It returns an error
// matching ErrNoStrategy when there is nothing at p.
func Strategy(u map[string]any, p Path) (strategy.Strategy, error) {
	v, found, err := value(u, p)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w at %s", ErrNoStrategy, p)
	}
	return decodeStrategy(v, p)
}

// decodeStrategy decodes a strategy wrapper.
func decodeStrategy(v any, p Path) (strategy.Strategy, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is a %T, not an object", ErrDecode, p, v)
	}
	var (
		out  strategy.Strategy
		set  []string
		errs []error
	)
	for _, k := range []string{"incremental", "canary", "blueGreen"} {
		raw, ok := m[k]
		if !ok || raw == nil {
			continue
		}
		set = append(set, k)
		var err error
		switch k {
		case "incremental":
			var in strategy.Incremental
			err = decode(raw, p.Append(k), &in)
			out = in
		case "canary":
			var c strategy.Canary
			err = decode(raw, p.Append(k), &c)
			out = c
		case "blueGreen":
			var b strategy.BlueGreen
			err = decode(raw, p.Append(k), &b)
			out = b
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(set) != 1 {
		return nil, fmt.Errorf("%w: %s: set exactly one of incremental, canary and blueGreen (found %d)", ErrDecode, p, len(set))
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Append(set[0]), err)
	}
	return out, nil
}

// Manifest returns the strategy of a document: either an object with kind
// and the strategy at p (a Release), or a bare strategy wrapper (an object
// with one of incremental, canary and blueGreen).
func Manifest(doc map[string]any, p Path) (strategy.Strategy, error) {
	if _, ok := doc["kind"]; ok {
		return Strategy(doc, p)
	}
	return decodeStrategy(doc, Path{})
}

// MergePatch returns a JSON merge patch that sets the fields of value at p.
func MergePatch(p Path, value map[string]any) ([]byte, error) {
	var v any = value
	for i := len(p) - 1; i >= 0; i-- {
		v = map[string]any{p[i]: v}
	}
	return json.Marshal(v)
}
