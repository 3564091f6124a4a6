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
// for, and whether there is one: the compatibility path for a
// HealthChecker or an Analyzer that only implements Health or Analyze. The
// Runner puts it in the context it gives them, so that an analysis can tell
// which side is the canary (State.StableSide), since when the rollout runs
// (State.StartedAt) and since when the current gate waits
// (State.StepStartedAt): what a metric query needs, kept in the state, so
// that a restarted controller asks the same questions. One that implements
// StateHealthChecker or StateAnalyzer gets the state as an argument
// instead, and the Runner puts none in its context.
func StateFrom(ctx context.Context) (strategy.State, bool) {
	s, ok := ctx.Value(stateKey{}).(*strategy.State)
	if !ok || s == nil {
		return strategy.State{}, false
	}
	return *s, true
}

// WithState returns a context that carries s for StateFrom: for tests of a
// HealthChecker or an Analyzer that only implements Health or Analyze, and
// for callers that invoke one outside a Runner. One that implements
// StateHealthChecker or StateAnalyzer takes s as an argument instead.
func WithState(ctx context.Context, s strategy.State) context.Context {
	return context.WithValue(ctx, stateKey{}, &s)
}
