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
// refuses the weights. The state is kept as JSON, so every Load is a round
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
		err = r.claim.check(ctx)
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
