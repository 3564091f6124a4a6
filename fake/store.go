package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Store is an in-memory rollout.Store. It keeps the state as JSON, as a real
// store would, so every Load is a round trip. Test-only controls: FailWith,
// Saves, History. The zero value is empty and ready. Safe for concurrent use.
type Store struct {
	mu   sync.Mutex
	data []byte
	err  error
	hist history
}

var _ rollout.Store = (*Store)(nil)

// Load returns the saved state, or rollout.ErrNotFound.
func (s *Store) Load(ctx context.Context) (strategy.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st strategy.State
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if s.err != nil {
		s.hist.add(nil, "Load", "", s.err)
		return st, s.err
	}
	if s.data == nil {
		s.hist.add(nil, "Load", "", rollout.ErrNotFound)
		return st, fmt.Errorf("fake store: %w", rollout.ErrNotFound)
	}
	s.hist.add(nil, "Load", "", nil)
	if err := json.Unmarshal(s.data, &st); err != nil {
		return st, fmt.Errorf("fake store: %w", err)
	}
	return st, nil
}

// Save replaces the saved state.
func (s *Store) Save(ctx context.Context, st strategy.State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.err != nil {
		s.hist.add(nil, "Save", string(st.Phase), s.err)
		return s.err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("fake store: %w", err)
	}
	s.data = b
	s.hist.add(nil, "Save", string(st.Phase), nil)
	return nil
}

// FailWith makes every call fail with err until FailWith(nil).
func (s *Store) FailWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Saves counts successful saves.
func (s *Store) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.count("Save")
}

// History returns every call so far.
func (s *Store) History() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.hist.calls...)
}

// Analyzer is an in-memory rollout.Analyzer: each gate answers the verdict
// last set for it, VerdictPending if none. The zero value is ready. Safe for
// concurrent use.
type Analyzer struct {
	mu       sync.Mutex
	verdicts map[string]strategy.Verdict
	err      error
	hist     history
}

var _ rollout.Analyzer = (*Analyzer)(nil)

// Set sets the verdict a gate answers.
func (a *Analyzer) Set(gate string, v strategy.Verdict) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verdicts == nil {
		a.verdicts = map[string]strategy.Verdict{}
	}
	a.verdicts[gate] = v
}

// Analyze returns the verdict set for gate.
func (a *Analyzer) Analyze(ctx context.Context, gate string) (strategy.Verdict, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return strategy.VerdictPending, err
	}
	if a.err != nil {
		a.hist.add(nil, "Analyze", gate, a.err)
		return strategy.VerdictPending, a.err
	}
	a.hist.add(nil, "Analyze", gate, nil)
	return a.verdicts[gate], nil
}

// FailWith makes every call fail with err until FailWith(nil).
func (a *Analyzer) FailWith(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

// History returns every call so far.
func (a *Analyzer) History() []Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Call(nil), a.hist.calls...)
}
