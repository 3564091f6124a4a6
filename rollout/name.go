package rollout

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/upshift-dev/upshift/strategy"
)

// nameKey is the context key of the rollout's name.
type nameKey struct{}

// WithName returns a context that names the rollout being reconciled: the
// object that holds its state (with controller-runtime, the reconcile
// request's NamespacedName). A Runner that serves many objects reports it
// in every Event (Event.Rollout) and in its log lines ("rollout"), so an
// Observer knows which object an Event concerns:
//
//	next, requeue, err := c.runner.Reconcile(rollout.WithName(ctx, req.NamespacedName), obj.Status.Rollout)
//
// Run reports it the same way when its ctx carries one.
func WithName(ctx context.Context, name types.NamespacedName) context.Context {
	return context.WithValue(ctx, nameKey{}, name)
}

// NameFrom returns the rollout's name that WithName put in ctx, and
// whether there was one.
func NameFrom(ctx context.Context) (types.NamespacedName, bool) {
	n, ok := ctx.Value(nameKey{}).(types.NamespacedName)
	return n, ok
}

// stateKey is the context key of the state a reconcile observes for.
type stateKey struct{}

// StateFrom returns the state of the rollout that a reconcile is observing
// for, and whether there is one. The Runner puts it in the context it gives
// its HealthChecker and its Analyzer, so that an analysis can tell which side
// is the canary (State.StableSide), since when the rollout runs
// (State.StartedAt) and since when the current gate waits
// (State.StepStartedAt): what a metric query needs, kept in the state, so that
// a restarted controller asks the same questions.
func StateFrom(ctx context.Context) (strategy.State, bool) {
	s, ok := ctx.Value(stateKey{}).(*strategy.State)
	if !ok || s == nil {
		return strategy.State{}, false
	}
	return *s, true
}

// WithState returns a context that carries s for StateFrom: for tests of a
// HealthChecker or an Analyzer, and for callers that invoke them outside a
// Runner.
func WithState(ctx context.Context, s strategy.State) context.Context {
	return context.WithValue(ctx, stateKey{}, &s)
}
