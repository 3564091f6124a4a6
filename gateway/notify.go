package gateway

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

// subscription is one Notify call, live until its ctx ends.
type subscription struct {
	ctx  context.Context
	wake func()
}

// Notify implements rollout.Notifier: it watches each managed route, by
// name (a field selector metadata.name=<name> in the route's namespace, so
// RBAC needs watch on those resourceNames only), and calls wake on every
// event of a route: a change of its weights, of its annotations, and of its
// status, which is how the data plane reports that it has accepted the
// weights. It also calls wake when a SettleDelay that Weights started
// ends, since no event marks it.
//
// Each watch is re-established when the server closes it, resuming from
// the last resourceVersion seen (a watch that cannot resume reports the
// route again, one extra wake), with a backoff while the API server
// refuses, until ctx ends; then every goroutine Notify started returns.
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
		if err := watchloop.Start(ctx, ref.Name, start, wake, &r.watches, r.watchOpts); err != nil {
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
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		delete(r.subs, sub)
		r.mu.Unlock()
	})
	_ = cancel
	return nil
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
