package replicas

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upshift-dev/upshift/rollout"
)

var _ rollout.Notifier = (*Deployer)(nil)

// Notify implements rollout.Notifier: it watches the workload by name (a
// field selector metadata.name=<name>, through the Setter's client, or the
// client.WithWatch for ForClient), so RBAC needs watch on that
// resourceName only, and calls wake on every event that changes what the
// Setter or its Deployers report (the capacity asked, the ready share,
// settled, failing, the revision and whether it rolled out), not on the
// Setter's or its Deployers' own writes: the wake comes when the
// workload's controller answers them.
//
// The Setter and its Deployers share one watch of the workload (Counts
// reports one per workload), re-established with a backoff until the last
// subscription's ctx ends; then the goroutine Notify started returns
// promptly and wake is not called again (Notify tracks each subscription
// with rollout.TrackNotify). While a subscription is live they read the
// workload from what the watch delivered (Capacity, Revision, and the read
// of SetCapacity, Deploy, Claim and Release), never a version older than
// their own last write; a write on a stale version conflicts and its retry
// reads the API server.
//
// Notify opens the first watch before it returns, and returns an error
// when the server refuses it for good (Forbidden without watch on the
// workload's name), or when ForClient was given a client that is not a
// client.WithWatch (a manager's client; build one with
// client.NewWithWatch): the caller polls. A transient failure is retried in
// the background. See docs/design/replicas.md for the watch in full.
func (s *Setter) Notify(ctx context.Context, wake func()) error {
	if s == nil || s.watch == nil {
		return fmt.Errorf("%w: Notify: the Setter is nil or not built by ForDeployment, ForStatefulSet, ForScalable or ForClient", ErrInvalid)
	}
	opts := s.watchOpts
	opts.Own = &s.own
	opts.Changed = s.reportChanged
	opts.Namespace = s.ns
	if err := s.shared.Subscribe(ctx, s.name, s.watch, wake, rollout.TrackNotify(ctx), &s.watches, opts); err != nil {
		return fmt.Errorf("replicas: %s: %w", s.ref, err)
	}
	return nil
}

// Notify implements rollout.Notifier with the Setter's watch of the
// workload (see Setter.Notify): every change of the workload, its status
// included, may change the revision it reports.
func (d *Deployer) Notify(ctx context.Context, wake func()) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.s.Notify(ctx, wake)
}

// reportChanged reports whether what the Setter and its Deployers report
// differs between two versions of the workload: its capacity status (the
// capacity asked, the ready share, settled, failing), its revision
// annotation and pod template, and whether it has rolled out. A status
// write of its controller that changes none of them (the generation seen,
// pods created but not ready yet) wakes nobody: a reconcile would observe
// what the last one did.
func (s *Setter) reportChanged(prev, next runtime.Object) bool {
	pw, nw := s.from(prev), s.from(next)
	if pw == nil || nw == nil {
		return true
	}
	pc, perr := s.capacityOf(pw)
	nc, nerr := s.capacityOf(nw)
	return pc != nc || (perr == nil) != (nerr == nil) ||
		pw.meta.Annotations[RevisionAnnotation] != nw.meta.Annotations[RevisionAnnotation] ||
		pw.rolledOut() != nw.rolledOut() ||
		!apiequality.Semantic.DeepEqual(pw.template, nw.template)
}
