package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/upshift-dev/upshift/strategy"
)

// Weights is a split of requests between the two physical sides, in percent.
// A and B always sum to 100 when the Runner writes them. Weights read that
// do not (another writer, a careless edit) are reported as
// strategy.Observation.WeightInvalid and repaired once that is safe.
type Weights struct {
	A int32 `json:"a"`
	B int32 `json:"b"`
}

// Of returns the weight of one side.
func (w Weights) Of(s strategy.Side) int32 {
	if s == strategy.SideB {
		return w.B
	}
	return w.A
}

// RouteStatus is what a TrafficRouter reports.
type RouteStatus struct {
	// Weights are the weights in the route's spec.
	Weights Weights
	// Accepted reports that the data plane has accepted Weights (for Gateway
	// API: every parent Accepted and ResolvedRefs for the current
	// generation, plus any settle delay). False means "not yet".
	Accepted bool
	// Message says why not, when Accepted is false.
	Message string
	// Rejected is set when the data plane explicitly refused the route (not
	// merely "not yet"), typed by the adapter. The weights count as not
	// applied; the Runner logs it, and the rollout's progress deadline
	// decides what happens if it lasts.
	Rejected error
}

// TrafficRouter moves requests between the two sides. Implementations are
// idempotent (setting the weights already in place writes nothing) and safe
// for concurrent use.
//
// SetWeights returns ErrNotFound when the route or a backend is missing, a
// Permanent error for anything retrying cannot fix, and other errors for
// transient failures.
type TrafficRouter interface {
	SetWeights(ctx context.Context, w Weights) error
	Weights(ctx context.Context) (RouteStatus, error)
}

// CapacityRequest asks a side for a share of its full serving capacity.
type CapacityRequest struct {
	// Percent is 0..100.
	Percent int32
	// Steady asks the side to return to its steady state (full capacity,
	// nothing pinned: Ray Serve's target_capacity null). Percent is 100.
	Steady bool
}

// Validate reports a request that no CapacitySetter can carry out: a
// Percent outside 0..100, or Steady with a Percent other than 100. The
// error names the field and matches ErrInvalid; a CapacitySetter returns
// it marked Permanent. The Runner only asks for valid requests.
func (r CapacityRequest) Validate() error {
	switch {
	case r.Percent < 0 || r.Percent > 100:
		return fmt.Errorf("%w capacity request: Percent %d: must be 0..100", ErrInvalid, r.Percent)
	case r.Steady && r.Percent != 100:
		return fmt.Errorf("%w capacity request: Percent %d: must be 100 when Steady", ErrInvalid, r.Percent)
	}
	return nil
}

// CapacityStatus is what a CapacitySetter reports for its side.
type CapacityStatus struct {
	// Capacity is the percent the side is set to (100 when steady).
	Capacity int32
	// Steady reports the side is in its steady state.
	Steady bool
	// Ready is the share of full capacity observed ready now.
	Ready int32
	// Settled reports nothing is starting or stopping on the side.
	Settled bool
	// Health of the side (read for the canary); HealthMessage says why.
	Health        strategy.Health
	HealthMessage string
}

// CapacitySetter provisions one side. Implementations are idempotent and safe
// for concurrent use. SetCapacity returns ErrNotFound when the workload is
// missing and a Permanent error for a request the backend rejects.
type CapacitySetter interface {
	SetCapacity(ctx context.Context, r CapacityRequest) error
	Capacity(ctx context.Context) (CapacityStatus, error)
}

// RevisionStatus is what a side reports about the revision it runs.
type RevisionStatus struct {
	// Revision is the revision the side runs, as the adapter recognises it
	// from what the side runs (the Serve config that Ray reports as
	// deployed, compared exactly; a Deployment's live pod template compared
	// with what the revision's template sets), never from a note the
	// adapter left, which another writer may have made stale. Empty when
	// the side runs nothing the adapter recognises.
	Revision string
	// Updated reports that Revision is fully rolled out on the side: the
	// workload's controller has observed the change and no instance of
	// another revision is left.
	Updated bool
}

// RevisionReader reports the revision one side runs. expect is the revision
// the side's role should run now (State.StableRevision on the stable side,
// State.CanaryRevision on the canary side): an adapter that recognises a
// revision by its content (Ray Serve's deployed config, a Deployment's pod
// template) compares against it, and may also try the revision it
// recorded at its last deploy.
//
// The Runner reads a side's revision through Runner.RevisionA or RevisionB.
// A caller who deploys revisions by itself implements only this, and
// reports the revision each side runs: the Runner then asks for no deploy,
// and the rollout waits (bounded by the progress deadline) until the canary
// side reports the revision it should run. RevisionFunc adapts a function.
// Implementations are safe for concurrent use.
type RevisionReader interface {
	Revision(ctx context.Context, expect string) (RevisionStatus, error)
}

// Deployer puts a revision on one side: for Ray Serve, a PUT of that
// revision's Serve config at target_capacity 0; for a Deployment, its pod
// template at 0 replicas. The Runner asks a side to deploy only while it
// carries no traffic and, with capacity setters, while it is at capacity 0;
// it then waits until Revision reports the revision fully rolled out before
// it sends capacity or traffic to the side. Deploy is idempotent (deploying
// the revision the side runs writes nothing), returns a Permanent error for
// a revision it cannot map to a workload change, and ErrNotFound when the
// workload is missing.
type Deployer interface {
	RevisionReader
	Deploy(ctx context.Context, revision string) error
}

// RevisionFunc adapts a function to RevisionReader.
type RevisionFunc func(ctx context.Context, expect string) (RevisionStatus, error)

// Revision calls f.
func (f RevisionFunc) Revision(ctx context.Context, expect string) (RevisionStatus, error) {
	return f(ctx, expect)
}

// Notifier is an optional interface of the adapters (a TrafficRouter, a
// CapacitySetter, a RevisionReader, a HealthChecker) that can tell when
// what they report may have changed: the gateway Router watches its routes,
// serve/replicas its workloads, and serve/ray polls fast after each write.
//
// Notify sets the notifications up and returns; from then until ctx ends
// it calls wake, from any goroutine, whenever what the adapter reports may
// have changed (a burst of changes may be one call or many; wake never
// blocks). An error means the adapter cannot notify: the caller polls.
// Run uses it to reconcile as soon as a hop is applied instead of at the
// next poll; an operator maps the same changes to its watches (see
// Runner.Watched). The gateway Router watches its routes by name,
// serve/replicas its workloads, and the fakes every change they make. Run
// subscribes to each once and reconciles as soon as one reports a change (a
// burst is one reconcile). When every adapter that observes the world (the
// Router, the capacity setters, the revision readers) notifies, Run waits
// for the strategy's WatchedRequeueAfter, which polls only at the poll
// interval; otherwise it takes RequeueAfter, which polls fast right after a
// hop (from strategy.Options.InitialPollInterval, doubling up to the poll
// interval), so that a hop the world applies in 300 ms is seen within about
// 400 ms rather than at the next 2 s poll.
//
// The notifications end when ctx ends: every goroutine Notify started
// (a watch, a poller) returns promptly after, without waiting for a timer
// or a server, and wake is not called again; nothing outlives ctx. Notify
// reports each such goroutine through TrackNotify(ctx), so that Run, which
// ends its ctx before it returns, can wait until they are gone.
type Notifier interface {
	Notify(ctx context.Context, wake func()) error
}

// Analyzer returns a verdict for a named gate (a metric query, a smoke
// test...). VerdictPending means "ask again later". Optional. An Analyzer
// that decides from the rollout's state implements StateAnalyzer too; one
// that only implements Analyze finds the state with StateFrom(ctx).
type Analyzer interface {
	Analyze(ctx context.Context, gate string) (strategy.Verdict, error)
}

// StateAnalyzer is an optional interface of an Analyzer that takes the
// rollout's state as an argument: the Runner calls AnalyzeState, with the
// state it observes for (the one its Reconcile was given; s.Gate is gate),
// in preference to Analyze, and then puts no state in ctx. s is a copy,
// but its slices are the Runner's: read them only. analysis.Analysis
// implements it.
type StateAnalyzer interface {
	AnalyzeState(ctx context.Context, s strategy.State, gate string) (strategy.Verdict, error)
}

// AnalyzerFunc adapts a function to Analyzer.
type AnalyzerFunc func(ctx context.Context, gate string) (strategy.Verdict, error)

// Analyze calls f.
func (f AnalyzerFunc) Analyze(ctx context.Context, gate string) (strategy.Verdict, error) {
	return f(ctx, gate)
}

// HealthChecker reports the canary's health when its CapacitySetter does not
// (or there is none). Optional. A HealthChecker that decides from the
// rollout's state implements StateHealthChecker too; one that only
// implements Health finds the state with StateFrom(ctx).
type HealthChecker interface {
	Health(ctx context.Context) (strategy.Health, string, error)
}

// StateHealthChecker is an optional interface of a HealthChecker that takes
// the rollout's state as an argument: the Runner calls HealthState, with
// the state it observes for (the one its Reconcile was given), in
// preference to Health, and then puts no state in ctx. s is a copy, but
// its slices are the Runner's: read them only. analysis.Analysis
// implements it.
type StateHealthChecker interface {
	HealthState(ctx context.Context, s strategy.State) (strategy.Health, string, error)
}

// Store loads and saves the state of one rollout for standalone runs. Load
// returns ErrNotFound when nothing was saved yet. Save is a full replace.
// Package fake has an in-memory Store; gateway.AnnotationStore keeps the
// state on a route.
type Store interface {
	Load(ctx context.Context) (strategy.State, error)
	Save(ctx context.Context, s strategy.State) error
}

// ControlStore is a Store that also keeps the rollout's strategy.Control:
// the declarative requests (paused, abort, promote...) that a person writes
// next to the stored state, as the gateway package's AnnotationStore reads
// them from the route's upshift.dev/rollout-control annotation. Run reads
// it before every reconcile and applies it (strategy.State.Control) to the
// state, at the Runner's clock, exactly as an operator applies its spec's
// control: each one-shot request acts once, whatever the number of reads,
// also across restarts (the state records the requests it has seen), and
// Paused holds the rollout while true. LoadControl returns the zero Control
// when none is written. Optional. A request that does not apply to the
// rollout as it stands is used up and logged as ignored. With the
// AnnotationStore, `kubectl upshift pause httproute/NAME` (abort,
// promote...) writes the annotation, or by hand:
//
//	kubectl annotate httproute web --overwrite upshift.dev/rollout-control='{"abort":"2026-03-01T12:00:00Z"}'
type ControlStore interface {
	Store
	LoadControl(ctx context.Context) (strategy.Control, error)
}

// HopStore is a Store that keeps the state on the object the Router moves,
// so that a weight hop and the state that records it land in one update,
// or not at all: no crash, lost connection or conflict leaves weights on
// the route without the state that asked for them, and a weight hop costs
// one write instead of two. gateway's Router.AnnotationStore returns one,
// fake.Router.Store another; a Store of your own whose routes live in the
// same object implements it the same way.
//
// Run uses it for every weight hop when Moves reports that the store writes
// through the Runner's Router (SaveWeights, or SaveRoutes when the state
// has extras); other hops and commands are saved with Save. ReconcileAt
// never uses it. Each write has the Router's contract (checks, refusals,
// claims, nothing written when nothing changes) plus the state's: a write
// refused for any reason writes neither.
//
// A write refused because of the state itself (the object would exceed
// what its API accepts) returns an error matching ErrStateRefused (a
// *StateRefusedError naming the object and the field), and only then. Run
// then writes a hop back toward the stable side with a reduced state, or
// the weights alone, so that a walk back never waits on its bookkeeping
// (Degraded, ReasonStateRefused, until the state fits); a hop toward the
// canary is never written without its whole state. docs/design/rollout.md
// has the whole sequence.
type HopStore interface {
	Store
	// SaveWeights writes w, as the Router's SetWeights would, and s, in one
	// update. A refusal caused by s matches ErrStateRefused.
	SaveWeights(ctx context.Context, w Weights, s strategy.State) error
	// SaveRoutes writes routes, as the Router's SetRoutes would, and s, in
	// one update. A refusal caused by s matches ErrStateRefused.
	SaveRoutes(ctx context.Context, routes Routes, s strategy.State) error
	// Moves reports whether router is the TrafficRouter whose writes
	// SaveWeights and SaveRoutes make (the same value, not a wrapper of
	// it).
	Moves(router TrafficRouter) bool
}

// Sentinel errors. Adapters wrap them with %w.
var (
	// ErrInvalid: a Runner's configuration (see Runner.Validate) or a
	// request to an adapter (see CapacityRequest.Validate) is invalid;
	// retrying cannot fix it.
	ErrInvalid = errors.New("rollout: invalid")
	// ErrNotFound: the route, backend, workload or saved state is missing.
	ErrNotFound = errors.New("rollout: not found")
	// ErrConflict: a write lost an optimistic-concurrency race; retrying
	// after a fresh read is expected to succeed.
	ErrConflict = errors.New("rollout: conflict")
	// ErrStateRefused: a Store refused to keep a state because of the
	// state itself (too large for the object that holds it, or a value the
	// object's API refuses), not because of anything else in the write:
	// the same write without the state is expected to succeed. See
	// StateRefusedError and HopStore.
	ErrStateRefused = errors.New("rollout: state refused")
)

// StateRefusedError is a Store's refusal of a state (ErrStateRefused):
// Object is what the state is kept on ("HTTPRoute default/web"), Field the
// path of the field the refusal names ("metadata.annotations"), Key the
// entry of that field that holds the state ("upshift.dev/rollout-state";
// empty when the field is the state), Size and Limit the size in bytes the
// field would have had and the most it may have (0 when unknown), and Err
// the store's answer as it came (an API server's 422 Invalid). It is not
// Permanent: the refusal ends once the object has room again (another
// writer removes what it added).
type StateRefusedError struct {
	Object string
	Field  string
	Key    string
	Size   int
	Limit  int
	Err    error
}

func (e *StateRefusedError) Error() string {
	msg := "rollout: " + e.Object + ": the state cannot be stored in " + e.Field
	if e.Key != "" {
		msg += "[" + e.Key + "]"
	}
	if e.Size > 0 && e.Limit > 0 {
		msg += fmt.Sprintf(" (%d bytes with it, at most %d)", e.Size, e.Limit)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Err.
func (e *StateRefusedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStateRefused) true.
func (e *StateRefusedError) Is(target error) bool { return target == ErrStateRefused }

// permanent marks an error that retrying will not fix.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the Runner aborts the rollout
// (or, if it is already walking back, degrades it) instead of retrying
// forever. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err: err}
}

// IsPermanent reports whether err or anything it wraps was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}
