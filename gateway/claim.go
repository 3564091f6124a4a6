package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/rollout"
)

// ClaimAnnotationPrefix starts the annotation of every claim a Router
// records on a route: ClaimAnnotation(a, b) names the claim of the rule
// that splits traffic between backends a and b, so two rollouts on
// different rules of one route never collide. A GitOps tool that applies
// the route should ignore annotations with this prefix (and
// StateAnnotation).
const ClaimAnnotationPrefix = "upshift.dev/claim-"

// ClaimAnnotation returns the annotation key of the claim on the rule that
// holds a and b in a route of namespace ns (a backend with no namespace is
// in the route's): ClaimAnnotationPrefix and 16 hex digits of a hash of
// the two backends, in either order. Its value is the claim's owner as
// JSON ({"kind", "namespace", "name", "uid"}, the rollout.Owner) plus
// "backends", the two backends as text, for people.
func ClaimAnnotation(ns string, a, b Backend) string {
	keys := []string{backendKey(ns, a), backendKey(ns, b)}
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return ClaimAnnotationPrefix + hex.EncodeToString(sum[:8])
}

// backendKey is a backend with the Gateway API defaults filled in.
func backendKey(ns string, b Backend) string {
	if b.Kind == "" {
		b.Kind = "Service"
	}
	if b.Namespace == "" {
		b.Namespace = ns
	}
	return fmt.Sprintf("%s/%s/%s/%s/%d", b.Group, b.Kind, b.Namespace, b.Name, b.Port)
}

// claimRecord is the value of a claim annotation.
type claimRecord struct {
	rollout.Owner
	Backends string `json:"backends,omitempty"`
}

// holderOf returns the owner of the claim under key in annotations, the
// zero Owner when there is none.
func holderOf(annotations map[string]string, key string) (rollout.Owner, error) {
	raw, ok := annotations[key]
	if !ok {
		return rollout.Owner{}, nil
	}
	var rec claimRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Name == "" || rec.UID == "" {
		return rollout.Owner{}, fmt.Errorf("%w: annotation %s: %q is not a claim (an owner with a name and a uid); remove it to release the claim", ErrInvalid, key, raw)
	}
	return rec.Owner, nil
}

var _ rollout.Claimer = (*Router)(nil)

// claimKey is the claim annotation of the Router's rule in ref.
func (r *Router) claimKey(ref RouteRef) string {
	return ClaimAnnotation(ref.Namespace, r.cfg.A, r.cfg.B)
}

// claimObject names the claimed rule of ref in a ClaimedError.
func (r *Router) claimObject(ref RouteRef) string {
	return fmt.Sprintf("%s rule %s / %s", ref, r.cfg.A, r.cfg.B)
}

// claimedError is the refusal of a write to the rule of ref that holder
// claims: it names the rule, the claim's annotation and the route.
func (r *Router) claimedError(ref RouteRef, holder rollout.Owner) *rollout.ClaimedError {
	return &rollout.ClaimedError{Object: r.claimObject(ref), Owner: holder, Annotation: r.claimKey(ref), On: ref.objectRef()}
}

// objectRef is the route as rollout.ClaimedError names the object that
// carries a claim.
func (r RouteRef) objectRef() rollout.ObjectRef {
	return rollout.ObjectRef{Group: gwv1.GroupName, Kind: r.kind(), Namespace: r.Namespace, Name: r.Name}
}

// readRoute reads ref through rollout.ReadOnce: one GET per reconcile,
// shared by Claim and Weights.
func (r *Router) readRoute(ctx context.Context, ref RouteRef) (route, error) {
	return rollout.ReadOnce(ctx, routeRead{r, ref}, func(ctx context.Context) (route, error) { return r.api.get(ctx, ref) })
}

// routeRead is the ReadOnce key of one route of one Router.
type routeRead struct {
	r   *Router
	ref RouteRef
}

// Claim records owner's claim on the rule that holds the two backends in
// every managed route (see rollout.Claimer and ClaimAnnotation): nothing is
// written to a route whose claim owner already holds, which is checked on
// the read a reconcile shares with Weights. A route whose rule another
// owner claims is refused with a *rollout.ClaimedError naming that owner
// and the rule, unless that owner is replace. The routes are claimed in
// order; one refused leaves those before it claimed, which the owner
// releases (Release) or claims again. Each claim is written with the
// route's resourceVersion, so of two claimants racing for a free rule one
// wins, and the other re-reads and is refused.
func (r *Router) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	if err := claimOwner(owner); err != nil {
		return err
	}
	for _, ref := range r.cfg.Routes {
		key := r.claimKey(ref)
		if rt, err := r.readRoute(ctx, ref); err == nil {
			if h, err := holderOf(rt.meta().Annotations, key); err == nil && h == owner {
				continue // held: nothing to write
			}
		}
		err := updateRoute(ctx, r.api, ref, r.cfg.MaxConflictRetries, func(rt route) (bool, error) {
			m := rt.meta()
			h, err := holderOf(m.Annotations, key)
			switch {
			case err != nil:
				return false, err
			case h == owner:
				return false, nil
			case !h.IsZero() && (replace.IsZero() || h != replace):
				return false, r.claimedError(ref, h)
			}
			b, err := json.Marshal(claimRecord{Owner: owner, Backends: r.cfg.A.String() + ", " + r.cfg.B.String()})
			if err != nil {
				return false, err
			}
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[key] = string(b)
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Release removes owner's claim from every managed route; a route whose
// rule another owner claims, or nobody, is not written, and a route that
// no longer exists counts as released.
func (r *Router) Release(ctx context.Context, owner rollout.Owner) error {
	for _, ref := range r.cfg.Routes {
		key := r.claimKey(ref)
		err := updateRoute(ctx, r.api, ref, r.cfg.MaxConflictRetries, func(rt route) (bool, error) {
			m := rt.meta()
			if h, err := holderOf(m.Annotations, key); err != nil || h != owner {
				return false, nil
			}
			delete(m.Annotations, key)
			return true, nil
		})
		if err != nil && !errors.Is(err, rollout.ErrNotFound) {
			return err
		}
	}
	return nil
}

// checkWriter refuses a write for ctx's owner (rollout.OwnerFrom) to a
// route whose rule another owner claims.
func (r *Router) checkWriter(ctx context.Context, ref RouteRef, rt route) error {
	o, ok := rollout.OwnerFrom(ctx)
	if !ok {
		return nil
	}
	h, err := holderOf(rt.meta().Annotations, r.claimKey(ref))
	if err != nil {
		return err
	}
	if !h.IsZero() && h != o {
		return r.claimedError(ref, h)
	}
	return nil
}

// claimOwner checks the owner of a Claim.
func claimOwner(o rollout.Owner) error {
	if o.IsZero() {
		return rollout.Permanent(fmt.Errorf("%w: claim: owner: required", ErrInvalid))
	}
	if err := o.Validate(); err != nil {
		return rollout.Permanent(fmt.Errorf("%w: claim: %w", ErrInvalid, err))
	}
	return nil
}

// storeWriter refuses a save of the state on a route whose rules other
// owners claim and owner claims none: the state of one rollout is written
// only by its owner. A route nobody claims takes any save.
func storeWriter(route RouteRef, annotations map[string]string, owner rollout.Owner) error {
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, ClaimAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var (
		first    rollout.Owner
		firstKey string
	)
	for _, k := range keys {
		h, err := holderOf(annotations, k)
		if err != nil {
			return err
		}
		if !owner.IsZero() && h == owner {
			return nil
		}
		if first.IsZero() {
			first, firstKey = h, k
		}
	}
	if first.IsZero() {
		return nil
	}
	return &rollout.ClaimedError{Object: fmt.Sprintf("%s annotation %s", route, StateAnnotation), Owner: first,
		Annotation: firstKey, On: route.objectRef()}
}
