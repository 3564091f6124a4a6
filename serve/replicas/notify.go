package replicas

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/rollout"
)

var _ rollout.Notifier = (*Deployer)(nil)

// Notify implements rollout.Notifier: it watches the workload by name (a
// field selector metadata.name=<name> in its namespace: the typed
// clientset for a Deployment or a StatefulSet, the dynamic client for
// ForScalable), so RBAC needs watch on that resourceName only, and calls
// wake on every event that changes the workload's spec, annotations or
// status (how its controller reports replicas ready and a template rolled
// out), not on one that changes only its bookkeeping (managed fields), nor
// on the Setter's (or its Deployers') own writes: the wake comes when the
// workload's controller answers them.
//
// The watch is re-established when the server closes it, resuming from the
// last resourceVersion seen (a watch that cannot resume reports the
// workload again, one extra wake), with a backoff while the API server
// refuses, until ctx ends; then the goroutine Notify started returns.
// Notify opens the first watch before it returns, and returns an error
// when the server refuses it for good (Forbidden without watch on the
// workload's name): the caller polls. A transient failure is retried in
// the background.
func (s *Setter) Notify(ctx context.Context, wake func()) error {
	if s == nil || s.watch == nil {
		return fmt.Errorf("%w: Notify: the Setter is nil or not built by ForDeployment, ForStatefulSet or ForScalable", ErrInvalid)
	}
	opts := s.watchOpts
	opts.Own = &s.own
	opts.Changed = func(prev, next runtime.Object) bool {
		return watchloop.SpecOrStatusChanged(prev, next) || watchloop.AnnotationsChanged(prev, next)
	}
	if err := watchloop.Start(ctx, s.name, s.watch, wake, &s.watches, opts); err != nil {
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
