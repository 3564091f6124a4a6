// Package watchloop keeps a Kubernetes watch on one named object open for
// the adapters that notify (gateway, serve/replicas): it re-establishes the
// watch when the server closes it, resumes from the last resourceVersion
// seen, backs off while the API server refuses, and calls wake on every
// change of the object that the adapter reports (Options.Changed), except
// the adapter's own writes (Options.Own).
//
// Only the object itself counts. The watch asks for it by name (a field
// selector), but an event of any other object (a server or a fake that
// ignores the selector, another namespace) is dropped: it wakes nobody,
// and it is not remembered as the object's last version.
//
// Backoff. A watch that the server ends before it has lived
// Options.MinLifetime counts as failed, whatever it delivered: the wait
// before the next one grows from MinBackoff, doubling up to MaxBackoff,
// and is reset only by a watch that lived at least MinLifetime. So a
// server that ends every watch at once, right after one event, costs a
// watch per MaxBackoff at most, not thousands a second. Timers and the
// lifetime are read from Options.Clock (a manual clock in tests).
//
// Lifetime. A loop ends when its ctx ends: its goroutine returns promptly
// (a pending backoff or an open watch is abandoned) and wake is not called
// after Options.Ended has been called.
package watchloop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/upshift-dev/upshift/clock"
)

// Func starts one watch with opts: a watch of the object's collection in its
// namespace, restricted to the object by opts.FieldSelector.
type Func func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// Stats counts what the loops of one adapter did. Safe for concurrent use.
type Stats struct {
	// Watches counts the watch requests made (the first one and every
	// re-establishment).
	Watches atomic.Int64
	// Running counts the loops that have not returned yet.
	Running atomic.Int64
}

// Options tune a loop; the zero value is the production setting.
type Options struct {
	// Timeout asks the server to close each watch after it (rounded up to
	// a second); 0 leaves it to the server (its --min-request-timeout,
	// 30 to 60 minutes by default).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a new watch after
	// one failed, or ended before it had lived MinLifetime; 0 means 100 ms
	// and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// MinLifetime is how long a watch must have lived (from its request
	// to its end) to count as healthy, so that the next one starts at
	// once and the backoff is reset; a shorter one counts as failed,
	// even if it delivered events. 0 means 1 s, or half of Timeout when
	// Timeout is below 2 s.
	MinLifetime time.Duration
	// Namespace, when set, is the object's namespace: an event of an
	// object in another namespace is dropped, as is one of another name.
	Namespace string
	// Clock is the clock of the backoff and of MinLifetime; nil means
	// clock.Real. (Own's wait, OwnWait, is on the wall clock.)
	Clock clock.Clock
	// Ended, when set, is called once the loop is over: when Start
	// returns an error (nothing runs), or when the loop's goroutine
	// returns after ctx ended; wake is not called after it.
	Ended func()
	// Changed reports whether next differs from prev in anything the
	// adapter reports; an event that changes nothing else (another
	// writer's annotation, managed fields) wakes nobody. nil: every event
	// wakes. The first event a loop sees always wakes.
	Changed func(prev, next runtime.Object) bool
	// Own holds the resourceVersions of the adapter's own writes: the
	// event of such a write, in the middle of a watch, wakes nobody (the
	// writer knows what it wrote, and the world has not answered yet).
	Own *Own
	// Observe, when set, is told what the watch knows of the object, in
	// the watch's order and from the loop's goroutine (after Start's own
	// first watch, from Start): every watch opened (afresh or resuming),
	// every version of the object delivered (the initial state of a watch
	// opened afresh included) and its deletion, before Changed and Own
	// judge it, and every watch ended. Cache.observe is such a hook.
	Observe func(Observation)
}

// Observation is one thing a loop tells Options.Observe.
type Observation struct {
	Kind ObservationKind
	// Object is the object delivered (KindObject), or the last state of
	// the deleted one (KindDeleted); nil otherwise.
	Object runtime.Object
}

// ObservationKind says what an Observation reports.
type ObservationKind int

const (
	// KindOpened: a watch is open that resumes from the last
	// resourceVersion seen, so what the earlier ones delivered still
	// holds and every change since follows.
	KindOpened ObservationKind = iota + 1
	// KindOpenedAfresh: a watch is open that did not resume: the
	// object, if it exists, is delivered next (KindObject) and whatever
	// was delivered before no longer counts; an object that does not
	// exist is not reported at all.
	KindOpenedAfresh
	// KindObject: a version of the object (added or modified).
	KindObject
	// KindDeleted: the object was deleted.
	KindDeleted
	// KindClosed: the watch ended (the server closed it, it failed, or
	// ctx ended): until the next KindOpened, changes go unseen.
	KindClosed
)

// Own remembers the resourceVersions of an adapter's latest writes. Safe
// for concurrent use; the zero value is ready.
//
// The watch may deliver the event of a write before the write's answer
// reaches the writer, so a write is announced first: Begin before sending
// it, and the func Begin returns with the resourceVersion the write
// returned ("" if it failed). An event that arrives while writes are in
// flight waits for them (at most OwnWait) before it is judged.
type Own struct {
	mu       sync.Mutex
	rvs      [32]string
	next     int
	inFlight int
	done     chan struct{} // closed when inFlight drops to 0
}

// OwnWait bounds how long an event waits for the adapter's writes in
// flight to return before it wakes anyway.
const OwnWait = 5 * time.Second

// Begin announces a write; call the func it returns with the
// resourceVersion the write returned, or "" when it failed.
func (o *Own) Begin() (end func(rv string)) {
	if o == nil {
		return func(string) {}
	}
	o.mu.Lock()
	if o.inFlight == 0 {
		o.done = make(chan struct{})
	}
	o.inFlight++
	o.mu.Unlock()
	var once sync.Once
	return func(rv string) {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if rv != "" {
				o.rvs[o.next%len(o.rvs)] = rv
				o.next++
			}
			if o.inFlight--; o.inFlight == 0 {
				close(o.done)
			}
		})
	}
}

// take reports whether rv is one of the adapter's writes, after the writes
// in flight have returned (or OwnWait, or ctx, passed). Several watches of
// one object (a Setter's and its Deployer's) may share one Own.
func (o *Own) take(ctx context.Context, rv string) bool {
	if o == nil || rv == "" {
		return false
	}
	o.mu.Lock()
	if o.inFlight > 0 {
		done := o.done
		o.mu.Unlock()
		t := time.NewTimer(OwnWait)
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	for _, v := range o.rvs {
		if v == rv {
			return true // kept: another watch of the same object may ask too
		}
	}
	return false
}

// SpecOrStatusChanged reports whether the spec or the status of two
// versions of an object differ (semantic equality: quantities and times
// compare by value). It handles typed objects with Spec and Status fields
// and unstructured ones; any other object counts as changed.
func SpecOrStatusChanged(prev, next runtime.Object) bool {
	if pu, ok := prev.(*unstructured.Unstructured); ok {
		nu, ok := next.(*unstructured.Unstructured)
		return !ok || !equality.Semantic.DeepEqual(pu.Object["spec"], nu.Object["spec"]) ||
			!equality.Semantic.DeepEqual(pu.Object["status"], nu.Object["status"])
	}
	pv, nv := reflect.ValueOf(prev), reflect.ValueOf(next)
	if pv.Kind() != reflect.Pointer || nv.Kind() != reflect.Pointer || pv.Type() != nv.Type() || pv.IsNil() || nv.IsNil() ||
		pv.Elem().Kind() != reflect.Struct {
		return true
	}
	for _, f := range []string{"Spec", "Status"} {
		a, b := pv.Elem().FieldByName(f), nv.Elem().FieldByName(f)
		if !a.IsValid() || !equality.Semantic.DeepEqual(a.Interface(), b.Interface()) {
			return true
		}
	}
	return false
}

// AnnotationsChanged reports whether the annotations of two versions of an
// object differ.
func AnnotationsChanged(prev, next runtime.Object) bool {
	pm, err1 := meta.Accessor(prev)
	nm, err2 := meta.Accessor(next)
	return err1 != nil || err2 != nil || !maps.Equal(pm.GetAnnotations(), nm.GetAnnotations())
}

// NameSelector is the field selector of a watch on the object named name:
// RBAC authorises it with resourceNames, like a get of that name.
func NameSelector(name string) string {
	return fields.OneTermEqualSelector("metadata.name", name).String()
}

// Start opens the first watch of name with start, synchronously, and
// returns its error when the server refuses it for good (forbidden,
// unauthorised, not found, not supported, invalid): the caller then polls.
// Otherwise it returns nil and a goroutine keeps a watch open until ctx
// ends, calling wake on every event that reports a change of the object
// (added, modified, deleted; a watch that starts without a resourceVersion
// reports the object as added, so a re-established watch that could not
// resume wakes once). A transient failure of the first watch is retried in
// that goroutine.
func Start(ctx context.Context, name string, start Func, wake func(), stats *Stats, opt Options) error {
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 100 * time.Millisecond
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 30 * time.Second
	}
	if opt.MinLifetime <= 0 {
		opt.MinLifetime = time.Second
		if opt.Timeout > 0 && opt.Timeout < 2*time.Second {
			opt.MinLifetime = opt.Timeout / 2
		}
	}
	ended := opt.Ended
	if ended == nil {
		ended = func() {}
	}
	l := &loop{name: name, start: start, wake: wake, stats: stats, opt: opt, clk: clock.OrReal(opt.Clock)}
	w, err := l.open(ctx)
	if err != nil && Refused(err) {
		ended()
		return err
	}
	stats.Running.Add(1)
	go func() {
		defer ended()
		defer stats.Running.Add(-1)
		l.run(ctx, w, err)
	}()
	return nil
}

// ErrUnsupported is wrapped by the error of a Func whose client cannot
// watch at all; Start returns it.
var ErrUnsupported = errors.New("the client cannot watch")

// Refused reports an error that retrying a watch does not fix.
func Refused(err error) bool {
	return errors.Is(err, ErrUnsupported) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)
}

type loop struct {
	name  string
	start Func
	wake  func()
	stats *Stats
	opt   Options
	clk   clock.Clock
	rv    string // the last resourceVersion seen; "" to start afresh
	prev  runtime.Object
	// opened is when the current watch was asked for.
	opened time.Time
}

func (l *loop) open(ctx context.Context) (watch.Interface, error) {
	opts := metav1.ListOptions{
		FieldSelector:       NameSelector(l.name),
		ResourceVersion:     l.rv,
		AllowWatchBookmarks: true,
	}
	if l.opt.Timeout > 0 {
		s := int64((l.opt.Timeout + time.Second - 1) / time.Second)
		opts.TimeoutSeconds = &s
	}
	l.stats.Watches.Add(1)
	l.opened = l.clk.Now()
	w, err := l.start(ctx, opts)
	if err != nil {
		if isExpired(err) {
			l.rv = ""
		}
		return nil, fmt.Errorf("watching %s: %w", l.name, err)
	}
	if opts.ResourceVersion == "" {
		l.observe(Observation{Kind: KindOpenedAfresh})
	} else {
		l.observe(Observation{Kind: KindOpened})
	}
	return w, nil
}

func (l *loop) observe(o Observation) {
	if l.opt.Observe != nil {
		l.opt.Observe(o)
	}
}

// run consumes w (nil after a failed open, whose error is err) and every
// watch after it until ctx ends.
func (l *loop) run(ctx context.Context, w watch.Interface, err error) {
	backoff := time.Duration(0)
	for {
		healthy := false // the watch lived long enough: reopen at once
		if w != nil {
			opened := l.opened
			l.consume(ctx, w)
			healthy = l.clk.Now().Sub(opened) >= l.opt.MinLifetime
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && healthy:
			backoff = 0
		case backoff == 0:
			backoff = l.opt.MinBackoff
		default:
			backoff = min(2*backoff, l.opt.MaxBackoff)
		}
		if backoff > 0 && clock.Sleep(ctx, l.clk, backoff) != nil {
			return // ctx ended during the backoff
		}
		w, err = l.open(ctx)
	}
}

// consume reads w's events until it closes or ctx ends.
func (l *loop) consume(ctx context.Context, w watch.Interface) {
	defer l.observe(Observation{Kind: KindClosed})
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if !l.ours(ev.Object) {
					continue
				}
				l.remember(ev)
				l.observe(Observation{Kind: KindObject, Object: ev.Object})
				if l.relevant(ctx, ev) && ctx.Err() == nil {
					l.wake()
				}
			case watch.Deleted:
				if !l.ours(ev.Object) {
					continue
				}
				l.remember(ev)
				l.observe(Observation{Kind: KindDeleted, Object: ev.Object})
				l.prev = nil
				if ctx.Err() == nil {
					l.wake()
				}
			case watch.Bookmark:
				l.remember(ev)
			case watch.Error:
				if isExpired(apierrors.FromObject(ev.Object)) {
					l.rv = "" // start afresh: the next watch reports the object
				}
				return
			}
		}
	}
}

// ours reports whether obj is the watched object: its name, and its
// namespace when Options.Namespace is set. Another object's event (a
// server that ignored the field selector) is dropped.
func (l *loop) ours(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return m.GetName() == l.name && (l.opt.Namespace == "" || m.GetNamespace() == l.opt.Namespace)
}

// relevant reports whether an added or modified object should wake: not
// the event of the adapter's own write in the middle of a watch (each
// event there is one write, so it holds that write alone), nor one that
// changes nothing the adapter reports.
func (l *loop) relevant(ctx context.Context, ev watch.Event) bool {
	prev := l.prev
	l.prev = ev.Object
	if prev == nil {
		return true
	}
	if ev.Type == watch.Modified && l.opt.Own != nil {
		if m, err := meta.Accessor(ev.Object); err == nil && l.opt.Own.take(ctx, m.GetResourceVersion()) {
			return false
		}
	}
	return l.opt.Changed == nil || l.opt.Changed(prev, ev.Object)
}

func (l *loop) remember(ev watch.Event) {
	if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
		l.rv = m.GetResourceVersion()
	}
}

func isExpired(err error) bool {
	var st apierrors.APIStatus
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		errors.As(err, &st) && st.Status().Code == 410
}
