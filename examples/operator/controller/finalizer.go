package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/rollout"
)

// Claims. The Runner of a Release claims the route rule and the two
// Deployments it moves (rollout.Owner: the Release's kind, namespace, name
// and UID), so a second Release pointed at the same objects is refused:
// it reports Degraded with reason Claimed, naming the Release that holds
// them, and writes nothing. The finalizer Finalizer keeps a Release until
// its claims are released; a claim left by a Release that is gone (deleted
// without the finalizer, or re-created with another UID) is taken over.

// Finalizer is the finalizer the operator puts on every Release: its
// deletion releases the Release's claims on the route and the Deployments.
const Finalizer = v1alpha1.Group + "/claims"

// kindRelease is the kind an Owner of this operator names.
const kindRelease = v1alpha1.Kind

// ownerOf is the Owner of a Release's rollout.
func ownerOf(rel *v1alpha1.Release) rollout.Owner {
	return rollout.Owner{Kind: kindRelease, Namespace: rel.Namespace, Name: rel.Name, UID: rel.UID}
}

// deleting passes the update that marks a Release deleted, which changes
// no generation.
var deleting = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return !e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// addFinalizer puts Finalizer on a Release that lacks it, before anything
// is claimed.
func (r *Reconciler) addFinalizer(ctx context.Context, rel *v1alpha1.Release) error {
	if !controllerutil.AddFinalizer(rel, Finalizer) {
		return nil
	}
	return r.update(ctx, rel, false)
}

// finalize releases the claims of a Release being deleted, then lets the
// deletion go on. A Release whose spec builds no Runner claimed nothing
// with it; a claim left from an earlier spec is stale once the Release is
// gone, and is taken over.
func (r *Reconciler) finalize(ctx context.Context, rel *v1alpha1.Release) error {
	if !controllerutil.ContainsFinalizer(rel, Finalizer) {
		return nil
	}
	if gen := r.runnerFor(rel); gen.err == nil {
		if err := gen.runner.Release(ctx); err != nil {
			return err
		}
	}
	controllerutil.RemoveFinalizer(rel, Finalizer)
	if err := r.update(ctx, rel, false); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.forget(client.ObjectKeyFromObject(rel))
	return nil
}

// releaseGone reports whether the Release that holds a claim no longer
// exists: not found, or found with another UID (deleted and re-created).
// A claim by another kind of owner is never taken over.
func (r *Reconciler) releaseGone(ctx context.Context, holder rollout.Owner) (bool, error) {
	if holder.Kind != kindRelease {
		return false, nil
	}
	var rel v1alpha1.Release
	err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: holder.Namespace, Name: holder.Name}, &rel)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return rel.UID != holder.UID, nil
}
