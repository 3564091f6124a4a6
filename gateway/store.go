package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// StateAnnotation is the annotation in which AnnotationStore keeps a
// rollout's state.
const StateAnnotation = "upshift.dev/rollout-state"

// AnnotationStore is a rollout.Store that keeps the state as JSON in an
// annotation on a managed route, so a standalone program that crashes
// resumes from the cluster, not from its own memory. Annotations do not
// change a route's generation, so saving never disturbs the acceptance that
// the Router reads. Safe for concurrent use.
type AnnotationStore struct {
	api   routes
	route RouteRef
	// MaxConflictRetries bounds re-reads after a conflict; 0 means 5.
	// Conflicts that outlast them return an error matching
	// rollout.ErrConflict.
	MaxConflictRetries int
	// Owner is the owner of the rollout whose state this is (see
	// rollout.Owner and Router.Claim); the zero Owner means the owner of
	// Save's context (rollout.OwnerFrom), if any. Save refuses, with a
	// *rollout.ClaimedError and nothing written, to write on a route whose
	// rules other owners claim while Owner claims none of them.
	// rollout.Runner.Run saves with a context that names the Runner's
	// Owner, so a Store used by Run needs no Owner of its own.
	Owner rollout.Owner
}

var _ rollout.Store = (*AnnotationStore)(nil)

// NewAnnotationStore keeps the state on route, through a controller-runtime
// client.
func NewAnnotationStore(c client.Client, route RouteRef) *AnnotationStore {
	return &AnnotationStore{api: crRoutes{c: c}, route: route}
}

// NewAnnotationStoreForClientset keeps the state on route, through the
// gateway-api clientset.
func NewAnnotationStoreForClientset(cs versioned.Interface, route RouteRef) *AnnotationStore {
	return &AnnotationStore{api: csRoutes{cs: cs}, route: route}
}

// Load returns the saved state, or an error matching rollout.ErrNotFound
// when the route has none (or does not exist).
func (s *AnnotationStore) Load(ctx context.Context) (strategy.State, error) {
	var st strategy.State
	rt, err := s.api.get(ctx, s.route)
	if err != nil {
		return st, apiError(err, s.route)
	}
	raw, ok := rt.meta().Annotations[StateAnnotation]
	if !ok {
		return st, fmt.Errorf("gateway: %s has no %s annotation: %w", s.route, StateAnnotation, rollout.ErrNotFound)
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return st, rollout.Permanent(fmt.Errorf("gateway: %s: annotation %s: %w", s.route, StateAnnotation, err))
	}
	return st, nil
}

var _ rollout.ControlStore = (*AnnotationStore)(nil)

// LoadControl returns the strategy.Control written in the route's
// ControlAnnotation: the zero Control when there is none, an error
// matching rollout.ErrNotFound when the route does not exist, and a
// permanent error naming the annotation when it does not decode.
func (s *AnnotationStore) LoadControl(ctx context.Context) (strategy.Control, error) {
	var c strategy.Control
	rt, err := s.api.get(ctx, s.route)
	if err != nil {
		return c, apiError(err, s.route)
	}
	raw, ok := rt.meta().Annotations[ControlAnnotation]
	if !ok || raw == "" {
		return c, nil
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return c, rollout.Permanent(fmt.Errorf("gateway: %s: annotation %s: %w", s.route, ControlAnnotation, err))
	}
	return c, nil
}

// Save writes the state into the annotation, re-reading on a conflict. A
// route that other owners claim, and Owner does not, is refused with a
// *rollout.ClaimedError naming one of them, and nothing is written.
func (s *AnnotationStore) Save(ctx context.Context, st strategy.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("gateway: encoding the state: %w", err)
	}
	retries := s.MaxConflictRetries
	if retries == 0 {
		retries = defaultConflictRetries
	}
	owner := s.Owner
	if owner.IsZero() {
		owner, _ = rollout.OwnerFrom(ctx)
	}
	return updateRoute(ctx, s.api, s.route, retries, func(rt route) (bool, error) {
		m := rt.meta()
		if err := storeWriter(s.route, m.Annotations, owner); err != nil { // claim.go
			return false, err
		}
		if m.Annotations[StateAnnotation] == string(b) {
			return false, nil
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[StateAnnotation] = string(b)
		return true, nil
	})
}

// ControlAnnotation is the annotation of a route in which a person (or
// `kubectl upshift pause`, `abort`...) steers a standalone rollout whose
// state AnnotationStore keeps: the JSON of a strategy.Control, such as
// {"abort":"2026-03-01T12:00:00Z"} or {"paused":true}.
// AnnotationStore.LoadControl reads it, and rollout.Runner.Run applies it
// as the example operator applies spec.control (see rollout.ControlStore).
const ControlAnnotation = "upshift.dev/rollout-control"
