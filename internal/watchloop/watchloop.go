// Package watchloop keeps a Kubernetes watch on one named object open for
// the adapters that notify (gateway, serve/replicas): it re-establishes the
// watch when the server closes it, resumes from the last resourceVersion
// seen, backs off while the API server refuses, and calls wake on every
// change of the object.
package watchloop

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
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
	// one failed or closed without delivering anything; 0 means 100 ms
	// and 30 s.
	MinBackoff, MaxBackoff time.Duration
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
	l := &loop{name: name, start: start, wake: wake, stats: stats, opt: opt}
	w, err := l.open(ctx)
	if err != nil && Refused(err) {
		return err
	}
	stats.Running.Add(1)
	go func() {
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
	rv    string // the last resourceVersion seen; "" to start afresh
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
	w, err := l.start(ctx, opts)
	if err != nil {
		if isExpired(err) {
			l.rv = ""
		}
		return nil, fmt.Errorf("watching %s: %w", l.name, err)
	}
	return w, nil
}

// run consumes w (nil after a failed open, whose error is err) and every
// watch after it until ctx ends.
func (l *loop) run(ctx context.Context, w watch.Interface, err error) {
	backoff := time.Duration(0)
	for {
		healthy := false // the watch answered: reopen at once
		if w != nil {
			opened := time.Now()
			healthy = l.consume(ctx, w) || time.Since(opened) >= time.Second
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
		if backoff > 0 {
			t := time.NewTimer(backoff) // honours ctx, unlike a sleep
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		w, err = l.open(ctx)
	}
}

// consume reads w's events until it closes or ctx ends, and reports whether
// it delivered any (a bookmark counts: the server is answering).
func (l *loop) consume(ctx context.Context, w watch.Interface) bool {
	defer w.Stop()
	delivered := false
	for {
		select {
		case <-ctx.Done():
			return delivered
		case ev, ok := <-w.ResultChan():
			if !ok {
				return delivered
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				delivered = true
				l.remember(ev)
				l.wake()
			case watch.Bookmark:
				delivered = true
				l.remember(ev)
			case watch.Error:
				if isExpired(apierrors.FromObject(ev.Object)) {
					l.rv = "" // start afresh: the next watch reports the object
				}
				return delivered
			}
		}
	}
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
