package fake

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// RouteStore is a rollout.HopStore that keeps the state on a fake Router's
// route, as the gateway package's AnnotationStore keeps it in an
// annotation of the route it moves: SaveWeights and SaveRoutes write the
// weights (and extras) and the state in one update, so whatever makes the
// Router refuse a write (FailWith, Conflicts, Delete, a claim of another
// owner, bad weights, an Unsupported extra) writes neither, and a
// rollout.Runner's Run writes each weight hop once. Load, Save and the
// writes share the Router's failures: a route that FailWith breaks or that
// Delete removes fails them all (Load and Save of a deleted route report
// rollout.ErrNotFound); a claim of another owner refuses Save as it
// refuses the weights. Other writers' annotations count against the API
// server's limit (FillAnnotations): a write that carries a state the
// route has no room for is refused as the API server refuses it, with a
// *rollout.StateRefusedError (rollout.ErrStateRefused) and nothing
// written, while the same write without the state goes through. The
// state is kept as JSON, so every Load is a round
// trip, and it survives Delete and Create as an annotation would not: a
// test that wants it gone builds a new Router. Calls are kept in the
// Router's History: "Load", "Save", and the writes as "SetWeights" or
// "SetRoutes". Build it with Router.Store; safe for concurrent use.
type RouteStore struct {
	r *Router
}

var _ rollout.HopStore = (*RouteStore)(nil)

// Store returns the RouteStore that keeps a state on r's route.
func (r *Router) Store() *RouteStore { return &RouteStore{r: r} }

// Load returns the saved state, or an error matching rollout.ErrNotFound
// when none is saved or the route is deleted.
func (s *RouteStore) Load(ctx context.Context) (strategy.State, error) {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	var st strategy.State
	err := ctx.Err()
	switch {
	case err != nil:
	case r.err != nil:
		err = r.err
	case r.deleted:
		err = fmt.Errorf("fake route store: route: %w", rollout.ErrNotFound)
	case r.state == nil:
		err = fmt.Errorf("fake route store: no state saved: %w", rollout.ErrNotFound)
	default:
		if err = json.Unmarshal(r.state, &st); err != nil {
			err = fmt.Errorf("fake route store: %w", err)
		}
	}
	r.hist.add(r.clock, "Load", "", err)
	return st, err
}

// Save writes the state alone.
func (s *RouteStore) Save(ctx context.Context, st strategy.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("fake route store: encoding the state: %w", err)
	}
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	err = ctx.Err()
	switch {
	case err != nil:
	case r.err != nil:
		err = r.err
	case r.deleted:
		err = fmt.Errorf("fake route store: route: %w", rollout.ErrNotFound)
	case r.conflict > 0:
		r.conflict--
		err = fmt.Errorf("fake route store: %w", rollout.ErrConflict)
	default:
		if err = r.claim.check(ctx); err == nil {
			err = r.fits(b)
		}
	}
	r.hist.add(r.clock, "Save", string(st.Phase), err)
	r.hist.owned(ctx)
	if err == nil {
		r.state = b
	}
	return err
}

// SaveWeights writes w and the state in one update (see Router.SetWeights).
func (s *RouteStore) SaveWeights(ctx context.Context, w rollout.Weights, st strategy.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("fake route store: encoding the state: %w", err)
	}
	return s.r.setWeights(ctx, w, b)
}

// SaveRoutes writes routes and the state in one update (see
// Router.SetRoutes).
func (s *RouteStore) SaveRoutes(ctx context.Context, routes rollout.Routes, st strategy.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("fake route store: encoding the state: %w", err)
	}
	return s.r.setRoutes(ctx, routes, b)
}

// Moves reports whether router is the Router this store keeps its state
// on.
func (s *RouteStore) Moves(router rollout.TrafficRouter) bool {
	r, ok := router.(*Router)
	return ok && r == s.r
}

// Saves counts the successful writes of the state: Save, and SaveWeights
// and SaveRoutes, which write it with the route.
func (s *RouteStore) Saves() int {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.count("Save") + r.stateWrites
}

// AnnotationLimit is the most bytes of annotations, keys and values
// together, that the API server accepts on an object (256 KiB), and so on
// a fake Router's route: the state a RouteStore writes counts with its key,
// StateAnnotation, beside what other writers keep (FillAnnotations).
const AnnotationLimit = 256 << 10

// StateAnnotation is the annotation whose key and value a RouteStore's
// state counts as, named as the gateway package's AnnotationStore names
// it.
const StateAnnotation = "upshift.dev/rollout-state"

// errTooLong is the API server's answer to an object whose annotations
// exceed AnnotationLimit.
var errTooLong = fmt.Errorf("metadata.annotations: Too long: may not be more than %d bytes", AnnotationLimit)

// stateSize is the bytes a state (JSON) takes in the route's annotations.
func stateSize(st []byte) int {
	if st == nil {
		return 0
	}
	return len(StateAnnotation) + len(st)
}

// fits refuses a write of the state st (nil: none) that would take the
// route's annotations past AnnotationLimit. r.mu is held.
func (r *Router) fits(st []byte) error {
	if st == nil {
		return nil
	}
	if total := r.others + stateSize(st); total > AnnotationLimit {
		return &rollout.StateRefusedError{Object: "fake route", Field: "metadata.annotations", Key: StateAnnotation,
			Size: total, Limit: AnnotationLimit, Err: errTooLong}
	}
	return nil
}

// FillAnnotations is another writer (a GitOps tool's record of the whole
// object, say) filling the route's annotations until only room bytes are
// left beyond what the state takes now: a state
// written later that is larger than the one on the route by more than room
// is refused, and writes without the state still go through. A negative
// room leaves less than the state takes now, as when another writer
// replaced the route's annotations with its own: no state can be written
// until the room grows. It lasts until ClearAnnotations.
func (r *Router) FillAnnotations(room int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.others = max(AnnotationLimit-stateSize(r.state)-room, 0)
}

// ClearAnnotations removes the annotations FillAnnotations added.
func (r *Router) ClearAnnotations() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.others = 0
}

// AnnotationRoom returns the bytes a larger state may still take on the
// route: AnnotationLimit less other writers' annotations and the state's.
func (r *Router) AnnotationRoom() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return AnnotationLimit - r.others - stateSize(r.state)
}
