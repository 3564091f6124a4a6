package rollout

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/upshift-dev/upshift/strategy"
)

// HopKind says what a hop changed.
type HopKind string

const (
	HopWeight   HopKind = "weight"
	HopCapacity HopKind = "capacity"
	// HopDeploy: a side was asked to run a revision.
	HopDeploy HopKind = "deploy"
	// HopRoutes: the router was asked for the weights and the extras (a
	// header route, a mirror, sticky sessions) in one update.
	HopRoutes HopKind = "routes"
)

// Hop is one change the Runner applied through an adapter.
type Hop struct {
	Kind HopKind
	// Role is "stable" or "canary"; Side is the physical side.
	Role string
	Side strategy.Side
	// Value is the canary weight (HopWeight) or the side's capacity.
	Value  int32
	Steady bool
	// Weights are the weights written (HopWeight).
	Weights Weights
	// Revision is the revision deployed (HopDeploy).
	Revision string
	// Extras are the extras written with the weights (HopRoutes).
	Extras strategy.TrafficExtras
}

// String renders a hop: "weight 30 (A=70 B=30)", "canary capacity 40 (side
// B)", "deploy v3 on side B".
func (h Hop) String() string {
	if h.Kind == HopDeploy {
		return fmt.Sprintf("deploy %s on side %s", h.Revision, h.Side)
	}
	if h.Kind == HopWeight {
		return fmt.Sprintf("weight %d (A=%d B=%d)", h.Value, h.Weights.A, h.Weights.B)
	}
	if h.Kind == HopRoutes {
		return fmt.Sprintf("weight %d (A=%d B=%d) with %s to side %s", h.Value, h.Weights.A, h.Weights.B, h.Extras, h.Side)
	}
	if h.Steady {
		return fmt.Sprintf("%s capacity steady (side %s)", h.Role, h.Side)
	}
	return fmt.Sprintf("%s capacity %d (side %s)", h.Role, h.Value, h.Side)
}

// Event describes one reconcile, for the Observer.
type Event struct {
	// Rollout names the object whose rollout was reconciled, from the
	// context (WithName); zero when the context names none.
	Rollout types.NamespacedName
	Time    time.Time
	// Before is the state passed in; After the state returned.
	Before, After strategy.State
	// Decision is the strategy's decision (zero if observing failed).
	Decision strategy.Decision
	// Applied lists the hops applied, in order.
	Applied []Hop
	// Err is the adapter error, if any.
	Err error
}

// Observer receives an Event after every reconcile: the hook for Kubernetes
// events, metrics and audit logs. It is called synchronously; keep it fast.
// One Runner may serve many objects, concurrently: Event.Rollout says which
// one an Event concerns when the caller names it in the context
// (WithName). Logging goes instead through the logr.Logger in the context
// (the controller-runtime convention), with the rollout's name ("rollout");
// each applied hop is logged at V(1).
type Observer interface {
	Reconciled(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Reconciled calls f.
func (f ObserverFunc) Reconciled(ctx context.Context, e Event) { f(ctx, e) }

// AdapterError is an adapter failure, naming the adapter ("router",
// "capacity A", "revision B", "analyzer", "health", "store"), the operation
// and the hop, and wrapping the adapter's error (ErrNotFound, ErrConflict,
// ...). After a transient one the Runner returns the state before the
// failed hop, with the error in Observed.Error, so the next reconcile asks
// for the hop again; see Runner.ReconcileAt. An error marked Permanent
// aborts the rollout instead.
type AdapterError struct {
	Adapter string
	Op      string
	// Hop is the hop being applied, empty for reads.
	Hop string
	Err error
}

// Error names the adapter and what it was doing once: "router: apply weight
// 30 (A=70 B=30): ...", "capacity B: read capacity: ...".
func (e *AdapterError) Error() string {
	what := e.Op
	if e.Hop != "" {
		what = "apply " + e.Hop // the hop names the operation
	}
	return fmt.Sprintf("%s: %s: %v", e.Adapter, what, e.Err)
}

func (e *AdapterError) Unwrap() error { return e.Err }
