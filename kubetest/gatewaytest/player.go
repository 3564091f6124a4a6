package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
)

// DefaultWorkers is the number of status writers of a Player when
// PlayerOptions.Workers is 0: enough to keep up with hundreds of route
// changes a second.
const DefaultWorkers = 32

// PlayerOptions configures Play. The zero value plays with DefaultWorkers
// writers and no delay.
type PlayerOptions struct {
	// Delay is how long the player takes to accept a new generation: a
	// writer that takes a route waits Delay, then reads it again from the
	// informer and writes its status unless it is accepted by then.
	// Traefik, for one, writes the status some 40-80 ms after a route
	// changes.
	Delay time.Duration
	// Workers is the number of routes whose status is written at once.
	// 0 means DefaultWorkers.
	Workers int
}

// ErrPlayerOptions is wrapped by the errors of PlayerOptions.Validate.
var ErrPlayerOptions = errors.New("gatewaytest: invalid PlayerOptions")

// Validate returns an error naming the field that is out of range.
func (o PlayerOptions) Validate() error {
	if o.Delay < 0 {
		return fmt.Errorf("%w: Delay %v is negative", ErrPlayerOptions, o.Delay)
	}
	if o.Workers < 0 {
		return fmt.Errorf("%w: Workers %d is negative", ErrPlayerOptions, o.Workers)
	}
	return nil
}

// Player plays the Gateway API controller for every HTTPRoute of a
// namespace: one informer (one list, one watch) and a work queue whose
// workers write Accepted and ResolvedRefs True for each route's current
// generation, as Accept does, from the informer's copy. A refused write
// (a conflict: the informer has a newer copy coming, whose event enqueues
// the route again) is dropped; any other failed write is retried with an
// exponential backoff from 5 ms to 1 s.
//
// Start one with Play. The zero value is not usable. A Player's methods
// are safe for concurrent use.
type Player struct {
	cs     versioned.Interface
	opts   PlayerOptions
	lister gwlisters.HTTPRouteLister
	queue  workqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc
	done   sync.WaitGroup

	written, conflicts, refused atomic.Int64

	mu   sync.Mutex
	seen map[string]time.Time // key -> when the informer first showed the pending generation
	lags []time.Duration      // from seen to the status written
	errs []error
}

// Play starts a Player of the HTTPRoutes of namespace, reading and
// writing them with cs (which needs list, watch and get on httproutes and
// update on httproutes/status), and waits until its informer has synced.
// Stop it with Stop. Play calls tb.Fatalf when opts is invalid or the
// informer cannot sync.
func Play(tb TB, cs versioned.Interface, namespace string, opts PlayerOptions) *Player {
	tb.Helper()
	if err := opts.Validate(); err != nil {
		tb.Fatalf("%v", err)
		return nil
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Player{
		cs:     cs,
		opts:   opts,
		cancel: cancel,
		seen:   map[string]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second)),
	}
	f := externalversions.NewSharedInformerFactoryWithOptions(cs, 0, externalversions.WithNamespace(namespace))
	inf := f.Gateway().V1().HTTPRoutes()
	p.lister = inf.Lister()
	enqueue := func(obj any) {
		rt, ok := obj.(*gwv1.HTTPRoute)
		if !ok || Accepted(rt) {
			return
		}
		key, err := cache.MetaNamespaceKeyFunc(rt)
		if err != nil {
			return
		}
		p.mu.Lock()
		if _, ok := p.seen[key]; !ok {
			p.seen[key] = time.Now()
		}
		p.mu.Unlock()
		p.queue.Add(key)
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		cancel()
		tb.Fatalf("gatewaytest: %v", err)
		return nil
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			f.Shutdown()
			tb.Fatalf("gatewaytest: the player's informer %v did not sync", typ)
			return nil
		}
	}
	for range opts.Workers {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			for p.work(ctx) {
			}
		}()
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		<-ctx.Done()
		p.queue.ShutDown()
		f.Shutdown()
	}()
	return p
}

// Accepted reports whether every parent of rt has Accepted and
// ResolvedRefs True for rt's current generation, as Accept and Player
// write them.
func Accepted(rt *gwv1.HTTPRoute) bool {
	if len(rt.Status.Parents) != len(rt.Spec.ParentRefs) {
		return false
	}
	for _, ps := range rt.Status.Parents {
		for _, ct := range []string{"Accepted", "ResolvedRefs"} {
			c := meta.FindStatusCondition(ps.Conditions, ct)
			if c == nil || c.ObservedGeneration != rt.Generation || c.Status != metav1.ConditionTrue {
				return false
			}
		}
	}
	return true
}

// pending returns the informer's copy of route key unless it is gone or
// accepted.
func (p *Player) pending(key string) (*gwv1.HTTPRoute, bool) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	cur, err := p.lister.HTTPRoutes(ns).Get(name)
	if err != nil || Accepted(cur) {
		return nil, false
	}
	return cur, true
}

func (p *Player) work(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	cur, ok := p.pending(key)
	if ok && p.opts.Delay > 0 {
		select {
		case <-ctx.Done():
			p.queue.Forget(key)
			return true
		case <-time.After(p.opts.Delay):
		}
		cur, ok = p.pending(key)
	}
	if !ok {
		p.queue.Forget(key)
		return true
	}
	rt := cur.DeepCopy()
	rt.Status.Parents = nil
	for _, ref := range rt.Spec.ParentRefs {
		ps := gwv1.RouteParentStatus{ParentRef: ref, ControllerName: "example.com/gateway"}
		for _, ct := range []string{"Accepted", "ResolvedRefs"} {
			ps.Conditions = append(ps.Conditions, metav1.Condition{Type: ct, Status: metav1.ConditionTrue, Reason: ct,
				ObservedGeneration: rt.Generation, LastTransitionTime: metav1.Now()})
		}
		rt.Status.Parents = append(rt.Status.Parents, ps)
	}
	_, err := p.cs.GatewayV1().HTTPRoutes(rt.Namespace).UpdateStatus(ctx, rt, metav1.UpdateOptions{})
	switch {
	case err == nil:
		p.queue.Forget(key)
		p.written.Add(1)
		p.mu.Lock()
		if t, ok := p.seen[key]; ok {
			p.lags = append(p.lags, time.Since(t))
			delete(p.seen, key)
		}
		p.mu.Unlock()
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), ctx.Err() != nil:
		// A conflict means the informer has a newer copy coming: its
		// event enqueues the route again (or already has, and the
		// queue runs it once this one is done).
		p.queue.Forget(key)
		p.refused.Add(1)
		if apierrors.IsConflict(err) {
			p.conflicts.Add(1)
		}
	default:
		p.mu.Lock()
		p.errs = append(p.errs, err)
		p.mu.Unlock()
		p.queue.AddRateLimited(key)
	}
	return true
}

// Written returns the number of statuses written so far.
func (p *Player) Written() int64 { return p.written.Load() }

// Conflicts returns the number of status writes refused with a conflict
// (409) so far.
func (p *Player) Conflicts() int64 { return p.conflicts.Load() }

// Refused returns the number of status writes dropped so far: those
// refused with a conflict or because the route is gone, and those cut
// short by Stop.
func (p *Player) Refused() int64 { return p.refused.Load() }

// Errors returns the other failed status writes so far (each retried).
func (p *Player) Errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// Lags returns, for each status written since the last ResetLags, the
// time from the informer first showing the route's pending generation to
// the write's answer.
func (p *Player) Lags() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lags)
}

// ResetLags forgets the lags recorded so far.
func (p *Player) ResetLags() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lags = nil
}

// Stop stops the player and waits for its writers and informer to end.
// Stop may be called more than once.
func (p *Player) Stop() {
	p.cancel()
	p.done.Wait()
}
