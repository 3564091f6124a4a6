package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

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
// resumes from the cluster, not from its own memory. Built by
// Router.AnnotationStore, it is also a rollout.HopStore: the Runner's Run
// writes each weight hop and its state in one update of the route. Annotations do not
// change a route's generation, so saving never disturbs the acceptance that
// the Router reads. Safe for concurrent use.
//
// Room. The API server accepts at most 256 KiB of annotations on an object,
// keys and values together, and another tool (a GitOps tool's record of
// the whole object, say) may fill a route's. A write that would take the
// route past that limit with the state is refused before it is sent, and
// the API server's own refusal (422 Invalid on metadata.annotations, when
// another writer grew its annotations meanwhile) is read the same way: a
// *rollout.StateRefusedError naming the route and StateAnnotation,
// matching rollout.ErrStateRefused, not Permanent, with nothing written
// (with several routes, none of them). rollout.Runner.Run then still
// walks traffic back to the stable side, with a reduced state or with the
// weights alone, and holds every forward hop until the state fits (see
// rollout.HopStore). Make room in the route's annotations to end it.
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
	// router is the Router whose route this is, for a store built by
	// Router.AnnotationStore; nil otherwise.
	router *Router
}

var (
	_ rollout.Store    = (*AnnotationStore)(nil)
	_ rollout.HopStore = (*AnnotationStore)(nil)
)

// AnnotationStore returns the AnnotationStore that keeps a rollout's state
// on route, one of the Router's routes, through the Router's client: it is
// a rollout.HopStore, so rollout.Runner.Run writes each weight hop and the
// state that records it in one update of the route (SaveWeights,
// SaveRoutes), rather than the weights and then the annotation. Each
// weight move then costs one write of the route, a crash can never leave
// the weights without their state, and no second write races the
// gateway's status writes. With several routes, the others get the
// weights first and route carries the state with the last write. Its
// reads and writes are the Router's (counted in Router.Counts). It is
// refused with an error matching ErrInvalid when route is not one of the
// Router's routes.
func (r *Router) AnnotationStore(route RouteRef) (*AnnotationStore, error) {
	for _, ref := range r.cfg.Routes {
		if ref.kind() == route.kind() && ref.Namespace == route.Namespace && ref.Name == route.Name {
			return &AnnotationStore{api: r.api, route: ref, MaxConflictRetries: r.cfg.MaxConflictRetries, router: r}, nil
		}
	}
	return nil, fmt.Errorf("%w: annotation store: route %s is not one of the Router's routes", ErrInvalid, route)
}

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
// *rollout.ClaimedError naming one of them, and nothing is written; a
// route with no room for the state, with a *rollout.StateRefusedError.
func (s *AnnotationStore) Save(ctx context.Context, st strategy.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("gateway: encoding the state: %w", err)
	}
	retries := s.MaxConflictRetries
	if retries == 0 {
		retries = defaultConflictRetries
	}
	return stateRefused(updateRoute(ctx, s.api, s.route, retries, s.annotate(ctx, b)), s.route)
}

// annotate is the change of the route that writes the state b.
func (s *AnnotationStore) annotate(ctx context.Context, b []byte) func(route) (bool, error) {
	owner := s.Owner
	if owner.IsZero() {
		owner, _ = rollout.OwnerFrom(ctx)
	}
	return func(rt route) (bool, error) {
		m := rt.meta()
		if err := storeWriter(s.route, m.Annotations, owner); err != nil { // claim.go
			return false, err
		}
		if m.Annotations[StateAnnotation] == string(b) {
			return false, nil
		}
		if size := annotationsSize(m.Annotations, string(b)); size > apivalidation.TotalAnnotationSizeLimitB {
			// The API server would refuse it: say so without asking.
			return false, &rollout.StateRefusedError{Object: s.route.String(), Field: "metadata.annotations", Key: StateAnnotation,
				Size: size, Limit: apivalidation.TotalAnnotationSizeLimitB,
				Err: fmt.Errorf("the route's annotations would exceed the API server's limit; make room, or have the tool that fills them keep less")}
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[StateAnnotation] = string(b)
		return true, nil
	}
}

// annotationsSize is the size the API server counts for annotations (keys
// and values) once StateAnnotation holds state.
func annotationsSize(annotations map[string]string, state string) int {
	n := len(StateAnnotation) + len(state)
	for k, v := range annotations {
		if k != StateAnnotation {
			n += len(k) + len(v)
		}
	}
	return n
}

// stateRefused turns the API server's refusal of a write that carried the
// state into a *rollout.StateRefusedError when the state is what it
// refuses: a 422 Invalid whose causes are in metadata.annotations (the
// total over the limit after another writer grew its annotations since
// the read), beside at most the API server's note, on a custom resource,
// that its schema's rules were not checked because of them. Any other
// error is returned as it is.
func stateRefused(err error, ref RouteRef) error {
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return err
	}
	d := status.Status().Details
	if d == nil {
		return err
	}
	annotations := false
	for _, c := range d.Causes {
		switch {
		case c.Field == "metadata.annotations" || strings.HasPrefix(c.Field, "metadata.annotations["):
			annotations = true
		case (c.Field == "" || c.Field == "<nil>") && strings.Contains(c.Message, "not checked"):
			// "some validation rules were not checked because the object
			// was invalid": a consequence, not a cause.
		default:
			return err
		}
	}
	if !annotations {
		return err
	}
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		err = se // the API server's answer, without the Permanent mark apiError gave it
	}
	return &rollout.StateRefusedError{Object: ref.String(), Field: "metadata.annotations", Key: StateAnnotation, Err: err}
}

// SaveWeights writes w into the Router's routes, as Router.SetWeights
// does, and the state into this store's route in the same update (see
// Router.AnnotationStore): a write refused for any reason (a claim, a rule
// the Router refuses, conflicts that outlast the retries, a state the
// route has no room for) writes neither. A refusal caused by the state's
// size is a *rollout.StateRefusedError (see AnnotationStore), checked on
// the route as read before any route of the group is written.
// A store not built by Router.AnnotationStore refuses it with a permanent
// error matching ErrInvalid.
func (s *AnnotationStore) SaveWeights(ctx context.Context, w rollout.Weights, st strategy.State) error {
	edit, err := s.hopEdit(ctx, st)
	if err != nil {
		return err
	}
	return stateRefused(s.router.setWeights(ctx, w, edit), s.route)
}

// SaveRoutes writes routes, as Router.SetRoutes does, and the state into
// this store's route in the same update (see SaveWeights).
func (s *AnnotationStore) SaveRoutes(ctx context.Context, routes rollout.Routes, st strategy.State) error {
	edit, err := s.hopEdit(ctx, st)
	if err != nil {
		return err
	}
	return stateRefused(s.router.setRoutes(ctx, routes, edit), s.route)
}

// hopEdit is the edit that writes st with a hop.
func (s *AnnotationStore) hopEdit(ctx context.Context, st strategy.State) (*routeEdit, error) {
	if s.router == nil {
		return nil, rollout.Permanent(fmt.Errorf("%w: annotation store of %s: it writes weights only when built by Router.AnnotationStore", ErrInvalid, s.route))
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("gateway: encoding the state: %w", err)
	}
	return &routeEdit{ref: s.route, edit: s.annotate(ctx, b)}, nil
}

// Moves reports whether router is the Router that built this store
// (Router.AnnotationStore).
func (s *AnnotationStore) Moves(router rollout.TrafficRouter) bool {
	r, ok := router.(*Router)
	return ok && s.router != nil && r == s.router
}

// ControlAnnotation is the annotation of a route in which a person (or
// `kubectl upshift pause`, `abort`...) steers a standalone rollout whose
// state AnnotationStore keeps: the JSON of a strategy.Control, such as
// {"abort":"2026-03-01T12:00:00Z"} or {"paused":true}.
// AnnotationStore.LoadControl reads it, and rollout.Runner.Run applies it
// as the example operator applies spec.control (see rollout.ControlStore).
const ControlAnnotation = "upshift.dev/rollout-control"
