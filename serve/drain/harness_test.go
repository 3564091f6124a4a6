package drain_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/serve/drain"
)

// tb is the part of testing.TB the helpers need, so that they also run
// under rapid (*rapid.T satisfies it).
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Fixed instants for table tests.
var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// fakeClock is a manual clock.Clock. Timers fire inside Advance, on the
// caller's goroutine, in deadline order (ties in creation order).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	at     time.Time
	seq    int
	f      func()
	closed bool // fired or stopped
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.closed {
			return false
		}
		t.closed = true
		return true
	}
}

// Advance moves time forward by d, firing due timers one by one.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var live []*fakeTimer
		for _, t := range c.timers {
			if !t.closed {
				live = append(live, t)
			}
		}
		c.timers = live
		sort.Slice(live, func(i, j int) bool {
			if !live[i].at.Equal(live[j].at) {
				return live[i].at.Before(live[j].at)
			}
			return live[i].seq < live[j].seq
		})
		if len(live) == 0 || live[0].at.After(target) {
			c.now = target
			c.mu.Unlock()
			return
		}
		t := live[0]
		t.closed = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// call is one request driven step by step through the middleware.
type call struct {
	class      drain.Class
	respectCtx bool // the handler returns as soon as its context ends
	rec        *httptest.ResponseRecorder
	cmds       chan string
	acks       chan struct{}
	entered    chan struct{}
	done       chan struct{}

	admitted    bool
	ctx         context.Context // the handler's context, once entered
	wroteHeader bool
	finished    bool
}

type callKey struct{}

// testHandler runs the script of the call found in the request context.
var testHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	cl := r.Context().Value(callKey{}).(*call)
	cl.ctx = r.Context()
	close(cl.entered)
	var ctxDone <-chan struct{}
	if cl.respectCtx {
		ctxDone = r.Context().Done()
	}
	for {
		select {
		case cmd := <-cl.cmds:
			switch cmd {
			case "header":
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte("partial "))
				w.(http.Flusher).Flush()
				cl.acks <- struct{}{}
			case "return":
				_, _ = w.Write([]byte("done"))
				return
			}
		case <-ctxDone:
			return
		}
	}
})

// start sends a request of the given class and waits until it is either
// refused (the middleware returned) or inside the handler.
func start(h http.Handler, class drain.Class, respectCtx bool) *call {
	cl := &call{
		class: class, respectCtx: respectCtx, rec: httptest.NewRecorder(),
		cmds: make(chan string), acks: make(chan struct{}),
		entered: make(chan struct{}), done: make(chan struct{}),
	}
	req := httptest.NewRequest(http.MethodPost, "/"+class.String(), nil)
	req = req.WithContext(context.WithValue(req.Context(), callKey{}, cl))
	go func() {
		defer close(cl.done)
		h.ServeHTTP(cl.rec, req)
	}()
	select {
	case <-cl.entered:
		cl.admitted = true
	case <-cl.done:
		cl.finished = true
	}
	return cl
}

// header makes a running handler write and flush its headers.
func (cl *call) header() {
	select {
	case cl.cmds <- "header":
		<-cl.acks
		cl.wroteHeader = true
	case <-cl.done:
		cl.finished = true
	}
}

// finish makes a running handler return and waits for the middleware.
func (cl *call) finish() {
	select {
	case cl.cmds <- "return":
		cl.wroteHeader = true // the handler writes "done" before returning
	case <-cl.done:
	}
	<-cl.done
	cl.finished = true
}

// settle waits for every handler that respects its context and was
// cancelled, so that the controller's state is stable again.
func settle(calls []*call) {
	for _, cl := range calls {
		if cl.admitted && !cl.finished && cl.respectCtx && cl.ctx.Err() != nil {
			<-cl.done
			cl.finished = true
		}
	}
}

// classifyByPath maps the paths used by start to classes.
func classifyByPath(r *http.Request) drain.Class {
	switch r.URL.Path {
	case "/CancelOnDrain":
		return drain.CancelOnDrain
	case "/Exempt", "/readyz":
		return drain.Exempt
	}
	return drain.Wait
}

// recordTransitions returns an OnTransition hook and a getter.
func recordTransitions() (func(drain.Transition), func() []drain.Transition) {
	var mu sync.Mutex
	var got []drain.Transition
	return func(tr drain.Transition) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, tr)
		}, func() []drain.Transition {
			mu.Lock()
			defer mu.Unlock()
			return append([]drain.Transition(nil), got...)
		}
}

func mustNew(t tb, cfg drain.Config) *drain.Controller {
	t.Helper()
	c, err := drain.New(cfg)
	if err != nil {
		t.Fatalf("drain.New: %v", err)
	}
	return c
}
