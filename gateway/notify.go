package gateway

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/rollout"
)

// subscription is one Notify call, live until its ctx ends.
type subscription struct {
	ctx  context.Context
	wake func()
}

// Notify implements rollout.Notifier: it watches each managed route, by
// name (a field selector metadata.name=<name> in the route's namespace, so
// RBAC needs watch on those resourceNames only), and calls wake on every
// event of a route that changes what Weights reports: its spec (another
// writer's weights) and its status, which is how the data plane reports
// that it has accepted the weights. Events of the Router's own writes and
// changes of annotations alone (the AnnotationStore's state) wake nobody.
// With a SettleDelay, the event that shows a generation accepted starts
// the settling and the wake comes when it ends (no event marks it), as
// it does when Weights is the first to see the acceptance.
//
// Each watch is re-established when the server closes it, resuming from
// the last resourceVersion seen (a watch that cannot resume reports the
// route again, one extra wake), with a backoff while the API server
// refuses or ends watches at once, until the last subscription's ctx
// ends; then every goroutine Notify started returns promptly, and wake is
// not called again once ctx has ended (Notify tracks each subscription
// with rollout.TrackNotify, the last one until the watch's goroutine has
// returned: a Runner's Run returns after them). An event of another
// object (a server that ignored the field selector) is dropped.
//
// Reads from the watch. The watch of a route is shared by every live
// subscription (the first opens it, the last to end closes it; Counts
// reports one watch per route), and while one is live the Router reads
// the route from what that watch delivered instead of the API server:
// Weights, Routes, Claim, and the read of every read-modify-write
// (SetWeights, SetRoutes, Release). A read reports the newest version
// known: the watch's, or the answer to the Router's own last write (or
// GET) until the watch delivers that version or a later one, so it never
// reports a version older than the Router's own write. Another writer's
// change is seen once the watch delivered it; a write based on a version
// the watch has not replaced yet loses the optimistic-concurrency race
// (409), and its retry reads the API server. The Router reads the API
// server until the watch has delivered the route, while the watch is down
// (between a watch ending and the next one opening), and once every
// subscription has ended. A deleted route is reported not found from the
// watch. The AnnotationStore built by NewAnnotationStore or
// NewAnnotationStoreForClientset reads the API server.
//
// Notify opens the first watch of every route before it returns, and
// returns an error, watching nothing, when the server refuses one for good
// (a Role without watch on the route's name is Forbidden) or when the
// Router was built by NewRouter with a client that is not a
// client.WithWatch (build it with client.NewWithWatch, or use
// NewRouterForClientset): the caller polls. A transient failure is retried
// in the background.
func (r *Router) Notify(ctx context.Context, wake func()) error {
	// cancel stops the routes already watched when one is refused; the
	// watches of a subscription that succeeds end with the caller's ctx.
	ctx, cancel := context.WithCancel(ctx)
	for _, ref := range r.cfg.Routes {
		start := func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return r.api.watch(ctx, ref, opts)
		}
		opts := r.watchOpts
		opts.Own = &r.own
		opts.Changed = func(prev, next runtime.Object) bool { return r.changed(ref, prev, next) }
		opts.Namespace = ref.Namespace
		if err := r.shared[ref.key()].Subscribe(ctx, ref.Name, start, wake, rollout.TrackNotify(ctx), &r.watches, opts); err != nil {
			cancel()
			return fmt.Errorf("gateway: %s: %w", ref, err)
		}
	}
	sub := &subscription{ctx: ctx, wake: wake}
	r.mu.Lock()
	if r.subs == nil {
		r.subs = map[*subscription]struct{}{}
	}
	r.subs[sub] = struct{}{}
	r.mu.Unlock()
	ended := rollout.TrackNotify(ctx)
	context.AfterFunc(ctx, func() {
		defer ended()
		r.mu.Lock()
		delete(r.subs, sub)
		r.mu.Unlock()
	})
	_ = cancel
	return nil
}

// changed decides whether an event of route ref wakes the subscribers: only
// a change of its spec or its status does (not the AnnotationStore's state,
// nor another writer's annotations), and the Router's own writes do not
// either (watchloop.Options.Own). When the event is the data plane
// accepting the route's generation and a SettleDelay applies, the settling
// starts now, when the status was written, rather than at the next read,
// and the wake comes when it ends: reconciling in between would only read
// "settling".
func (r *Router) changed(ref RouteRef, prev, next runtime.Object) bool {
	if !watchloop.SpecOrStatusChanged(prev, next) {
		return false
	}
	if r.cfg.SettleDelay == 0 {
		return true
	}
	var rt route
	switch o := next.(type) {
	case *gwv1.HTTPRoute:
		rt.http = o
	case *gwv1.GRPCRoute:
		rt.grpc = o
	default:
		return true
	}
	ok, _, rejected := r.accepted(ref, rt)
	return ok || rejected != nil || !r.settling(ref, rt.meta().Generation)
}

// settling reports whether the SettleDelay of generation gen of ref has
// begun and not ended (its end wakes the subscribers).
func (r *Router) settling(ref RouteRef, gen int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.seen[ref]
	return ok && a.generation == gen && r.cfg.Clock.Now().Sub(a.at) < r.cfg.SettleDelay
}

// wakeAfterLocked wakes every live subscription once d has passed on the
// Router's clock. r.mu is held.
func (r *Router) wakeAfterLocked(d time.Duration) {
	for sub := range r.subs {
		r.cfg.Clock.AfterFunc(d, func() {
			if sub.ctx.Err() == nil {
				sub.wake()
			}
		})
	}
}
