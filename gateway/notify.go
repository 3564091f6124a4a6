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

// Notify implements rollout.Notifier: it watches each managed route by name
// (a field selector metadata.name=<name>, so RBAC needs watch on those
// resourceNames only) and calls wake on every event that changes what
// Weights reports: the route's spec (another writer's weights) and its
// status (the data plane accepting them). Events of the Router's own writes
// and of annotations alone wake nobody. With a SettleDelay, the wake comes
// when the settling ends.
//
// Watches are re-established (resuming from the last resourceVersion, with
// a backoff) until the last subscription's ctx ends; then every goroutine
// Notify started returns promptly and wake is not called again (Notify
// tracks each subscription with rollout.TrackNotify). The watch of a route
// is shared by every live subscription, and while one is live the Router
// reads the route from what it delivered (Weights, Routes, Claim and the
// read of every read-modify-write), never a version older than its own last
// write; a write on a stale version loses the optimistic-concurrency race
// and its retry reads the API server. The AnnotationStore reads the API
// server.
//
// Notify opens the first watch of every route before it returns, and
// returns an error, watching nothing, when the server refuses one for good
// (a Role without watch on the route's name is Forbidden) or when the
// Router was built by NewRouter with a client that is not a
// client.WithWatch (build it with client.NewWithWatch, or use
// NewRouterForClientset): the caller polls. A transient failure is retried
// in the background. See docs/design/gateway.md for reads from the watch.
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
