package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
)

// RetryMode says how a Router attaches a retry to the rules it moves
// (Retry.Mode).
type RetryMode string

const (
	// RetryTraefikMiddleware adds to each moved rule an ExtensionRef
	// filter naming the Traefik Middleware Retry.Middleware in the route's
	// namespace (build it with TraefikRetryMiddleware). Traefik ignores
	// rules[].retry; it resolves the filter with its kubernetesCRD
	// provider enabled.
	RetryTraefikMiddleware RetryMode = "TraefikMiddleware"
	// RetryGatewayAPI sets rules[].retry, a field of Gateway API's
	// experimental channel only: with the standard CRDs the API server
	// drops it, which SetWeights and SetRoutes report as a
	// *RetryPrunedError.
	RetryGatewayAPI RetryMode = "GatewayAPI"
)

// Retry is a retry in the data plane, attached by a Router (Config.Retry)
// to the rules it moves, in the same update as their weights; the extra
// rules of SetRoutes copy it. It covers a backend that dies before its
// endpoint is withdrawn: a request the data plane could not send, or that
// got one of Codes, is sent again, possibly to another endpoint.
//
// Only idempotent requests are retried on a status code unless
// NonIdempotent. Traefik's Middleware has a method switch
// (retryNonIdempotentMethod); Gateway API's retry has none, so without
// NonIdempotent a RetryGatewayAPI retry goes only on rules whose every
// match restricts the method to GET, HEAD, PUT, DELETE, OPTIONS or TRACE
// (else a *RetryUnsafeError): a POST answered 503 after it took effect
// must not run twice. See docs/design/gateway.md (Retry) for the figures.
type Retry struct {
	// Mode is RetryTraefikMiddleware or RetryGatewayAPI; required.
	Mode RetryMode `json:"mode"`
	// Middleware names the Traefik Middleware (RetryTraefikMiddleware
	// only; required there), which the Router reads before it writes
	// (get on middlewares.traefik.io, a Router built with NewRouter).
	Middleware string `json:"middleware,omitempty"`
	// Attempts counts every try, the first included (Traefik's attempts;
	// Gateway API's attempts, which counts retries, gets Attempts-1); 0
	// means 3, else 2..50.
	Attempts int `json:"attempts,omitempty"`
	// Codes are the status codes retried, in 400..599; none: only
	// requests the data plane could not send.
	Codes []int `json:"codes,omitempty"`
	// Backoff is the first wait between tries, in whole milliseconds; 0:
	// none (Traefik) or the data plane's default (Gateway API).
	Backoff time.Duration `json:"backoff,omitempty"`
	// NonIdempotent allows status retries of POST, PATCH and LOCK (Traefik)
	// and RetryGatewayAPI on rules that may carry them.
	NonIdempotent bool `json:"nonIdempotent,omitempty"`
}

const (
	defaultRetryAttempts = 3
	maxRetryAttempts     = 50
	maxRuleFilters       = 16 // Gateway API's limit on a rule's filters
)

// Validate names every problem with r; the fields are prefixed with
// "retry.".
func (r *Retry) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: retry.%s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	switch r.Mode {
	case RetryTraefikMiddleware:
		if msgs := validation.IsDNS1123Subdomain(r.Middleware); len(msgs) > 0 {
			bad("middleware", "%q is not a Middleware name: %v", r.Middleware, msgs)
		}
	case RetryGatewayAPI:
		if r.Middleware != "" {
			bad("middleware", "set only with mode %s", RetryTraefikMiddleware)
		}
	default:
		bad("mode", "%q is not %s or %s", r.Mode, RetryTraefikMiddleware, RetryGatewayAPI)
	}
	if r.Attempts != 0 && (r.Attempts < 2 || r.Attempts > maxRetryAttempts) {
		bad("attempts", "%d: want 0 (%d) or 2..%d", r.Attempts, defaultRetryAttempts, maxRetryAttempts)
	}
	seen := map[int]bool{}
	for i, c := range r.Codes {
		switch {
		case c < 400 || c > 599:
			bad(fmt.Sprintf("codes[%d]", i), "%d is not in 400..599", c)
		case seen[c]:
			bad(fmt.Sprintf("codes[%d]", i), "%d is listed twice", c)
		}
		seen[c] = true
	}
	if r.Backoff < 0 || r.Backoff%time.Millisecond != 0 || r.Backoff > 99999*time.Millisecond {
		bad("backoff", "%v: want whole milliseconds in 0..99999ms", r.Backoff)
	}
	return errors.Join(errs...)
}

func (r *Retry) attempts() int {
	if r.Attempts == 0 {
		return defaultRetryAttempts
	}
	return r.Attempts
}

// gatewayRetry is r as rules[].retry.
func (r *Retry) gatewayRetry() *gwv1.HTTPRouteRetry {
	out := &gwv1.HTTPRouteRetry{}
	n := r.attempts() - 1
	out.Attempts = &n
	for _, c := range r.Codes {
		out.Codes = append(out.Codes, gwv1.HTTPRouteRetryStatusCode(c))
	}
	if r.Backoff > 0 {
		d := gwv1.Duration(strconv.FormatInt(r.Backoff.Milliseconds(), 10) + "ms")
		out.Backoff = &d
	}
	return out
}

// TraefikRetryMiddleware returns the Traefik Middleware (traefik.io/v1alpha1)
// that a RetryTraefikMiddleware retry names, in namespace ns (the route's:
// Traefik resolves the name there), for the user to apply: spec.retry with
// attempts, initialInterval (Backoff; Traefik doubles it at most), status
// (Codes) and retryNonIdempotentMethod (NonIdempotent). Traefik retries a
// request it could not send whatever its method; a status retry skips
// POST, PATCH and LOCK unless retryNonIdempotentMethod. It buffers up to
// 2 MiB of a body to replay it (maxRequestBodyBytes); a larger body is not
// status-retried.
func TraefikRetryMiddleware(ns string, r Retry) (*unstructured.Unstructured, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Mode != RetryTraefikMiddleware {
		return nil, fmt.Errorf("%w: retry.mode: %q; a Middleware is built for %s", ErrInvalid, r.Mode, RetryTraefikMiddleware)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return nil, fmt.Errorf("%w: namespace: %q: %v", ErrInvalid, ns, msgs)
	}
	spec := map[string]any{"attempts": int64(r.attempts())}
	if r.Backoff > 0 {
		spec["initialInterval"] = strconv.FormatInt(r.Backoff.Milliseconds(), 10) + "ms"
	}
	if len(r.Codes) > 0 {
		codes := make([]any, len(r.Codes))
		for i, c := range r.Codes {
			codes[i] = strconv.Itoa(c)
		}
		spec["status"] = codes
	}
	if r.NonIdempotent {
		spec["retryNonIdempotentMethod"] = true
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1",
		"kind":       "Middleware",
		"metadata": map[string]any{
			"namespace": ns,
			"name":      r.Middleware,
			"labels":    map[string]any{ManagedByLabel: "upshift"},
		},
		"spec": map[string]any{"retry": spec},
	}}
	return u, nil
}

// RetryAnnotationPrefix starts the annotation in which a Router records
// the retry it attached to a route (RetryAnnotation). A GitOps tool that
// applies the route should ignore it, with the retry it records.
const RetryAnnotationPrefix = "upshift.dev/retry-"

// RetryAnnotation returns the annotation key in which the Router for
// backends a and b records its retry in a route of namespace ns:
// RetryAnnotationPrefix and the 16 hex digits of ClaimAnnotation. Its
// value is JSON: {"mode", "middleware"} or {"mode", "retry": the
// rules[].retry written}. The Router takes back only what it records.
func RetryAnnotation(ns string, a, b Backend) string {
	return RetryAnnotationPrefix + extrasID(ns, a, b)
}

// retryRecord is what a Router attached: the value of RetryAnnotation.
type retryRecord struct {
	Mode       RetryMode            `json:"mode"`
	Middleware string               `json:"middleware,omitempty"`
	Retry      *gwv1.HTTPRouteRetry `json:"retry,omitempty"`
}

// record is what r attaches; nil for no retry.
func (r *Retry) record() *retryRecord {
	if r == nil {
		return nil
	}
	if r.Mode == RetryTraefikMiddleware {
		return &retryRecord{Mode: r.Mode, Middleware: r.Middleware}
	}
	return &retryRecord{Mode: r.Mode, Retry: r.gatewayRetry()}
}

// decodeRetryRecord reads a RetryAnnotation value.
func decodeRetryRecord(key, raw string) (*retryRecord, error) {
	var rec retryRecord
	err := json.Unmarshal([]byte(raw), &rec)
	switch {
	case err != nil:
	case rec.Mode == RetryTraefikMiddleware && rec.Middleware != "" && rec.Retry == nil:
		return &rec, nil
	case rec.Mode == RetryGatewayAPI && rec.Middleware == "" && rec.Retry != nil:
		return &rec, nil
	}
	return nil, fmt.Errorf("%w: annotation %s: %q is not a retry record; remove it and the retry it attached", ErrInvalid, key, raw)
}

func (a *retryRecord) equal(b *retryRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Mode == b.Mode && a.Middleware == b.Middleware && equality.Semantic.DeepEqual(a.Retry, b.Retry)
}

// middlewareFilter is the ExtensionRef filter naming Traefik Middleware name.
func middlewareFilter(name string) gwv1.HTTPRouteFilter {
	return gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gwv1.LocalObjectReference{
		Group: "traefik.io", Kind: "Middleware", Name: gwv1.ObjectName(name)}}
}

func hasFilter(fs []gwv1.HTTPRouteFilter, f gwv1.HTTPRouteFilter) bool {
	for i := range fs {
		if equality.Semantic.DeepEqual(fs[i], f) {
			return true
		}
	}
	return false
}

// idempotentMethods are the methods RFC 9110 calls idempotent that Gateway
// API can match on.
var idempotentMethods = map[gwv1.HTTPMethod]bool{
	gwv1.HTTPMethodGet: true, gwv1.HTTPMethodHead: true, gwv1.HTTPMethodPut: true,
	gwv1.HTTPMethodDelete: true, gwv1.HTTPMethodOptions: true, gwv1.HTTPMethodTrace: true,
}

// idempotentOnly reports whether every match restricts the method to an
// idempotent one (no matches means every request).
func idempotentOnly(ms []gwv1.HTTPRouteMatch) bool {
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if m.Method == nil || !idempotentMethods[*m.Method] {
			return false
		}
	}
	return true
}

// movedRules are the indexes of the user's rules of rt that hold both
// backends: those whose weights the Router writes.
func (r *Router) movedRules(ref RouteRef, rt route) []int {
	refs := r.userRules(ref, rt)
	var out []int
	for i := range refs {
		if holdsBoth(refs[i], &r.cfg.A, &r.cfg.B, ref.Namespace) {
			out = append(out, i)
		}
	}
	return out
}

// applyRetry attaches Config.Retry to the moved rules of rt, takes back
// what the route's RetryAnnotation records and Config.Retry no longer
// asks, and updates the record. Another writer's retry or filter is never
// taken or changed: one where the Router would put its own is a
// *RetryConflictError. It changes nothing when it returns an error.
func (r *Router) applyRetry(ref RouteRef, rt route) (bool, error) {
	if rt.http == nil {
		return false, nil // Config.Validate refuses a retry on a GRPCRoute
	}
	key := RetryAnnotation(ref.Namespace, r.cfg.A, r.cfg.B)
	var rec *retryRecord
	if raw, ok := rt.meta().Annotations[key]; ok {
		var err error
		if rec, err = decodeRetryRecord(key, raw); err != nil {
			return false, err
		}
	}
	want := r.cfg.Retry.record()
	if want != nil && want.Mode == RetryGatewayAPI && r.retryPrunedOn(ref) {
		want = nil // reported once; the record must not claim it now
	}
	if rec == nil && want == nil {
		return false, nil
	}
	rules := rt.http.Spec.Rules
	moved := r.movedRules(ref, rt)
	for _, i := range moved {
		if err := r.checkRetry(ref, i, &rules[i], rec, want); err != nil {
			return false, err
		}
	}
	changed := false
	for _, i := range moved {
		changed = editRetry(&rules[i], rec, want) || changed
	}
	m := rt.meta()
	switch {
	case want == nil:
		delete(m.Annotations, key)
		changed = true
	case !want.equal(rec):
		b, err := json.Marshal(want)
		if err != nil {
			return false, err
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[key] = string(b)
		changed = true
	}
	return changed, nil
}

// checkRetry refuses what applyRetry must not do to rule i.
func (r *Router) checkRetry(ref RouteRef, i int, rule *gwv1.HTTPRouteRule, rec, want *retryRecord) error {
	if want == nil {
		return nil
	}
	ours := rec != nil && rec.Mode == want.Mode
	switch want.Mode {
	case RetryGatewayAPI:
		if !r.cfg.Retry.NonIdempotent && !idempotentOnly(rule.Matches) {
			return rollout.Permanent(&RetryUnsafeError{Route: ref, Rule: i})
		}
		if rule.Retry != nil && !(ours && equality.Semantic.DeepEqual(rule.Retry, rec.Retry)) {
			return rollout.Permanent(&RetryConflictError{Route: ref, Rule: i, Field: "retry"})
		}
	case RetryTraefikMiddleware:
		f := middlewareFilter(want.Middleware)
		has := hasFilter(rule.Filters, f)
		if has && !(ours && rec.Middleware == want.Middleware) {
			return rollout.Permanent(&RetryConflictError{Route: ref, Rule: i, Field: "filters", Middleware: want.Middleware})
		}
		if !has && len(rule.Filters) >= maxRuleFilters {
			return rollout.Permanent(&RuleLimitError{Route: ref, Field: fmt.Sprintf("spec.rules[%d].filters", i), Need: len(rule.Filters) + 1, Max: maxRuleFilters})
		}
	}
	return nil
}

// editRetry takes rec's retry out of rule when want differs, and puts
// want's in; it reports whether rule changed.
func editRetry(rule *gwv1.HTTPRouteRule, rec, want *retryRecord) bool {
	changed := false
	if rec != nil && !rec.equal(want) {
		switch rec.Mode {
		case RetryGatewayAPI:
			if rule.Retry != nil && equality.Semantic.DeepEqual(rule.Retry, rec.Retry) {
				rule.Retry, changed = nil, true
			}
		case RetryTraefikMiddleware:
			f := middlewareFilter(rec.Middleware)
			kept := rule.Filters[:0:0]
			for _, g := range rule.Filters {
				if equality.Semantic.DeepEqual(g, f) {
					changed = true
					continue
				}
				kept = append(kept, g)
			}
			if changed {
				rule.Filters = kept
				if len(kept) == 0 {
					rule.Filters = nil
				}
			}
		}
	}
	if want == nil {
		return changed
	}
	switch want.Mode {
	case RetryGatewayAPI:
		if rule.Retry == nil {
			rule.Retry, changed = want.Retry.DeepCopy(), true
		}
	case RetryTraefikMiddleware:
		if f := middlewareFilter(want.Middleware); !hasFilter(rule.Filters, f) {
			rule.Filters, changed = append(rule.Filters, f), true
		}
	}
	return changed
}

// checkRetryKept reports the rules[].retry the API server dropped from rt,
// as the update returned it: a cluster with Gateway API's standard CRDs.
// The Router remembers it: from then on it attaches no rules[].retry to
// that route and takes its record back with the next write, so that the
// route does not claim a retry it lacks and a walk back is not refused.
func (r *Router) checkRetryKept(ref RouteRef, rt route) error {
	if r.cfg.Retry == nil || r.cfg.Retry.Mode != RetryGatewayAPI || rt.http == nil || r.retryPrunedOn(ref) {
		return nil
	}
	for _, i := range r.movedRules(ref, rt) {
		if rt.http.Spec.Rules[i].Retry == nil {
			r.mu.Lock()
			if r.retryPruned == nil {
				r.retryPruned = map[RouteRef]bool{}
			}
			r.retryPruned[ref.key()] = true
			r.mu.Unlock()
			return rollout.Permanent(&RetryPrunedError{Route: ref, Rule: i})
		}
	}
	return nil
}

// retryPrunedOn reports whether the API server dropped the Router's
// rules[].retry from ref.
func (r *Router) retryPrunedOn(ref RouteRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retryPruned[ref.key()]
}

// RetryUnsafeError: a RetryGatewayAPI retry without Retry.NonIdempotent
// would go on rule Rule of Route, whose matches do not restrict the
// method to idempotent ones, and Gateway API's retry retries any method.
// Nothing is written. Restrict the rule's matches to GET, HEAD, PUT,
// DELETE, OPTIONS or TRACE, set NonIdempotent if repeating a POST is safe
// for the application, or use RetryTraefikMiddleware, which skips
// non-idempotent methods. It matches ErrInvalid and is rollout.Permanent.
type RetryUnsafeError struct {
	Route RouteRef
	Rule  int
}

func (e *RetryUnsafeError) Error() string {
	return fmt.Sprintf("gateway: %s: spec.rules[%d] may carry POST or PATCH, which a Gateway API retry would repeat; set retry.nonIdempotent to allow it", e.Route, e.Rule)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *RetryUnsafeError) Is(target error) bool { return target == ErrInvalid }

// RetryConflictError: rule Rule of Route already has, in Field ("retry"
// or "filters"), a retry or a filter to Middleware that the Router did not
// record as its own (RetryAnnotation): another writer's, which the Router
// neither takes nor changes. Nothing is written. It matches ErrInvalid and
// is rollout.Permanent.
type RetryConflictError struct {
	Route      RouteRef
	Rule       int
	Field      string
	Middleware string
}

func (e *RetryConflictError) Error() string {
	what := "a retry"
	if e.Middleware != "" {
		what = "an ExtensionRef filter to Middleware " + e.Middleware
	}
	return fmt.Sprintf("gateway: %s: spec.rules[%d].%s already holds %s that upshift did not attach; remove it or drop Config.Retry", e.Route, e.Rule, e.Field, what)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *RetryConflictError) Is(target error) bool { return target == ErrInvalid }

// RetryPrunedError: the route was written with rules[].retry on rule Rule
// and the API server returned it without: its HTTPRoute CRD is Gateway
// API's standard channel, which has no such field. The weights of that
// write were applied; the retry was not. Install the experimental-channel
// CRDs or use RetryTraefikMiddleware. It matches rollout.ErrUnsupported
// and is rollout.Permanent, so a rollout aborts at that hop. It is
// returned once per Router and route: the Router then attaches no
// rules[].retry there (its walk back is not refused) and takes its record
// back with the next write.
type RetryPrunedError struct {
	Route RouteRef
	Rule  int
}

func (e *RetryPrunedError) Error() string {
	return fmt.Sprintf("gateway: %s: the API server dropped spec.rules[%d].retry (Gateway API standard-channel CRDs); the weights were written, the retry was not", e.Route, e.Rule)
}

// Is makes errors.Is(err, rollout.ErrUnsupported) true.
func (e *RetryPrunedError) Is(target error) bool { return target == rollout.ErrUnsupported }

// MiddlewareGVK is the kind of the Traefik Middleware a
// RetryTraefikMiddleware retry names.
var MiddlewareGVK = schema.GroupVersionKind{Group: traefikGroup, Version: "v1alpha1", Kind: "Middleware"}

// checkRetryMiddleware reads the Middleware of a RetryTraefikMiddleware
// retry in the namespace of every managed route, before anything is
// written: Traefik does not check that an ExtensionRef names a Middleware
// that exists, keeps the route Accepted, and serves none of the rule's
// requests while it is missing.
func (r *Router) checkRetryMiddleware(ctx context.Context) error {
	rr := r.cfg.Retry
	if rr == nil || rr.Mode != RetryTraefikMiddleware {
		return nil
	}
	seen := map[string]bool{}
	for _, ref := range r.cfg.Routes {
		if seen[ref.Namespace] {
			continue
		}
		seen[ref.Namespace] = true
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(MiddlewareGVK)
		err := r.objs.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: rr.Middleware}, u)
		e := &RetryMiddlewareError{Route: ref, Middleware: rr.Middleware}
		switch {
		case apierrors.IsNotFound(err):
			e.NotFound, e.Reason = true, "not found; apply it first (TraefikRetryMiddleware builds it)"
			return e // it may be applied in a moment: not Permanent
		case meta.IsNoMatchError(err):
			e.Reason = fmt.Sprintf("the API server does not serve traefik.io Middlewares: %v", err)
			return rollout.Permanent(e)
		case apierrors.IsForbidden(err):
			return rollout.Permanent(fmt.Errorf("gateway: %s: Middleware %s/%s: forbidden (the Router needs get on middlewares.traefik.io for Config.Retry): %w", ref, ref.Namespace, rr.Middleware, err))
		case err != nil:
			return fmt.Errorf("gateway: %s: Middleware %s/%s: %w", ref, ref.Namespace, rr.Middleware, err)
		}
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "retry"); !ok {
			e.Reason = "it has no spec.retry"
			return rollout.Permanent(e)
		}
	}
	return nil
}

// RetryMiddlewareError: the Middleware a RetryTraefikMiddleware retry
// names cannot be used from Route's namespace (Reason: not found, not a
// retry, or the kind not served). Nothing is written. With NotFound it
// matches rollout.ErrNotFound and is not Permanent (the Middleware may be
// applied next); otherwise it matches ErrInvalid and is Permanent.
type RetryMiddlewareError struct {
	Route      RouteRef
	Middleware string
	NotFound   bool
	Reason     string
}

func (e *RetryMiddlewareError) Error() string {
	return fmt.Sprintf("gateway: %s: Middleware %s/%s: %s", e.Route, e.Route.Namespace, e.Middleware, e.Reason)
}

// Is makes errors.Is(err, rollout.ErrNotFound) true with NotFound, and
// errors.Is(err, ErrInvalid) without.
func (e *RetryMiddlewareError) Is(target error) bool {
	if e.NotFound {
		return target == rollout.ErrNotFound
	}
	return target == ErrInvalid
}
