package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TraefikServiceGVK is the kind of the TraefikService a
// MirrorTraefikService mirror goes through.
var TraefikServiceGVK = schema.GroupVersionKind{Group: traefikGroup, Version: "v1alpha1", Kind: traefikServiceKind}

// defaultMirrorMaxBodySize is what a MirrorMaxBodySize of 0 means.
const defaultMirrorMaxBodySize = 1 << 20

// readError turns a failed read of a Gateway, GatewayClass or
// TraefikService into an error naming what was read and, when refused,
// the permission it needs.
func readError(ref RouteRef, what string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return rollout.Permanent(fmt.Errorf("gateway: %s: %s: forbidden (the Router needs RBAC on it for traffic extras): %w", ref, what, err))
	case meta.IsNoMatchError(err):
		return rollout.Permanent(&UnsupportedError{Route: ref, Extra: "mirror", Reason: fmt.Sprintf("%s: the API server does not serve this kind: %v", what, err)})
	}
	return fmt.Errorf("gateway: %s: %s: %w", ref, what, err)
}

// checkTraefikMirror checks what a TraefikService mirror needs.
func (r *Router) checkTraefikMirror(ref RouteRef) error {
	if r.objs == nil {
		return &UnsupportedError{Route: ref, Extra: "mirror", Reason: "Config.Mirror TraefikService needs a Router built with NewRouter (a controller-runtime client)"}
	}
	if ref.kind() != KindHTTPRoute {
		return nil // refused by the rules, with its own reason
	}
	for _, b := range []Backend{r.cfg.A, r.cfg.B} {
		if b.Group != "" || (b.Kind != "" && b.Kind != "Service") {
			return &UnsupportedError{Route: ref, Extra: "mirror", Reason: fmt.Sprintf("a TraefikService mirrors Services only, not %s", b)}
		}
	}
	return nil
}

// mirrorRoutes returns one route per namespace of the managed routes:
// the TraefikService is shared by the routes of a namespace.
func (r *Router) mirrorRoutes() []RouteRef {
	var out []RouteRef
	var seen []string
	for _, ref := range r.cfg.Routes {
		if ref.kind() != KindHTTPRoute || slices.Contains(seen, ref.Namespace) {
			continue
		}
		seen = append(seen, ref.Namespace)
		out = append(out, ref)
	}
	return out
}

// mirrorSpec is the spec of the TraefikService that serves the stable
// side and copies percent of its requests to the canary.
func (r *Router) mirrorSpec(ns string, canary strategy.Side, percent int32) map[string]any {
	stable, can := &r.cfg.A, &r.cfg.B
	if canary == strategy.SideA {
		stable, can = can, stable
	}
	svc := func(b *Backend) map[string]any {
		m := map[string]any{"name": b.Name}
		if b.Port != 0 {
			m["port"] = int64(b.Port)
		}
		if b.Namespace != "" && b.Namespace != ns {
			m["namespace"] = b.Namespace
		}
		return m
	}
	body := r.cfg.MirrorMaxBodySize
	if body == 0 {
		body = defaultMirrorMaxBodySize
	}
	mirroring := svc(stable)
	mirroring["maxBodySize"] = body
	mirror := svc(can)
	mirror["percent"] = int64(percent)
	mirroring["mirrors"] = []any{mirror}
	return map[string]any{"mirroring": mirroring}
}

func sameSpec(a, b any) bool {
	ja, ea := json.Marshal(a)
	jb, eb := json.Marshal(b)
	return ea == nil && eb == nil && string(ja) == string(jb)
}

func (r *Router) getMirror(ctx context.Context, ref RouteRef) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(TraefikServiceGVK)
	name := MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B)
	return u, r.objs.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: name}, u)
}

// ours reports whether a TraefikService carries the Router's label.
func ours(u *unstructured.Unstructured) bool { return u.GetLabels()[ManagedByLabel] == "upshift" }

// upsertMirror writes the TraefikService of ref's namespace.
func (r *Router) upsertMirror(ctx context.Context, ref RouteRef, canary strategy.Side, percent int32) error {
	spec := r.mirrorSpec(ref.Namespace, canary, percent)
	u, err := r.getMirror(ctx, ref)
	what := "TraefikService " + ref.Namespace + "/" + MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B)
	switch {
	case apierrors.IsNotFound(err):
		u = &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(TraefikServiceGVK)
		u.SetNamespace(ref.Namespace)
		u.SetName(MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B))
		u.SetLabels(map[string]string{ManagedByLabel: "upshift"})
		if err := r.objs.Create(ctx, u); err != nil {
			return readError(ref, what, err)
		}
		return nil
	case err != nil:
		return readError(ref, what, err)
	case !ours(u):
		return rollout.Permanent(&ExtraRuleConflictError{Route: ref, Rule: -1, Name: what})
	case sameSpec(u.Object["spec"], spec):
		return nil
	}
	u.Object["spec"] = spec
	if err := r.objs.Update(ctx, u); err != nil {
		return readError(ref, what, err)
	}
	return nil
}

// deleteMirror deletes the TraefikService of ref's namespace, if it is
// the Router's.
func (r *Router) deleteMirror(ctx context.Context, ref RouteRef) error {
	u, err := r.getMirror(ctx, ref)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil
	case err != nil:
		return readError(ref, "TraefikService "+ref.Namespace+"/"+MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B), err)
	case !ours(u):
		return nil
	}
	if err := r.objs.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		return readError(ref, "TraefikService "+ref.Namespace+"/"+u.GetName(), err)
	}
	return nil
}

// mirrorPresent reports whether the TraefikService of ref's namespace is
// the Router's, with the spec for canary and percent.
func (r *Router) mirrorPresent(ctx context.Context, ref RouteRef, canary strategy.Side, percent int32) (bool, error) {
	if r.objs == nil {
		return false, nil
	}
	u, err := r.getMirror(ctx, ref)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, readError(ref, "TraefikService "+ref.Namespace+"/"+MirrorServiceName(ref.Namespace, r.cfg.A, r.cfg.B), err)
	}
	return ours(u) && sameSpec(u.Object["spec"], r.mirrorSpec(ref.Namespace, canary, percent)), nil
}

// sweepMirrors deletes the Router's TraefikService of each namespace
// once no managed route there (as read, in read) points at it and each is
// accepted, and settled, for its current generation; until then, or when
// a deletion fails, it tries again on the next call.
func (r *Router) sweepMirrors(ctx context.Context, read map[RouteRef]route) error {
	r.mu.Lock()
	pending := r.sweep
	r.mu.Unlock()
	if !pending || r.objs == nil || r.cfg.Mirror != MirrorTraefikService {
		return nil
	}
	done := true
	for _, m := range r.mirrorRoutes() {
		name := MirrorServiceName(m.Namespace, r.cfg.A, r.cfg.B)
		inUse, applied := false, true
		for _, ref := range r.cfg.Routes {
			if ref.kind() != KindHTTPRoute || ref.Namespace != m.Namespace {
				continue
			}
			rt, ok := read[ref.key()]
			if !ok {
				applied = false
				continue
			}
			inUse = inUse || pointsAtService(rt.http, name)
			if ok, _, _ := r.accepted(ref, rt); !ok {
				applied = false
			}
		}
		switch {
		case inUse: // a mirror in force: SetRoutes asks again when it goes
		case !applied:
			done = false
		default:
			if err := r.deleteMirror(ctx, m); err != nil {
				return err
			}
		}
	}
	if done {
		r.mu.Lock()
		r.sweep = false
		r.mu.Unlock()
	}
	return nil
}

// pointsAtService reports whether a backendRef of rt names the
// TraefikService name of rt's namespace.
func pointsAtService(rt *gwv1.HTTPRoute, name string) bool {
	if rt == nil {
		return false
	}
	for i := range rt.Spec.Rules {
		for _, b := range rt.Spec.Rules[i].BackendRefs {
			if b.Group != nil && string(*b.Group) == traefikGroup && b.Kind != nil && string(*b.Kind) == traefikServiceKind &&
				string(b.Name) == name && (b.Namespace == nil || string(*b.Namespace) == rt.Namespace) {
				return true
			}
		}
	}
	return false
}
