package rollout

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
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
