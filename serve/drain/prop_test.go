package drain_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/serve/drain"
)

// drainMachine drives a Controller with random requests, handler
// behaviours, clock moves, Begin and Force, and checks the invariants of
// issue 6 after every step:
//
//   - no non-exempt request reaches the handler at or after cordon (Draining);
//   - states only move forward;
//   - every admitted request completes or is cancelled by its deadline
//     (Draining for CancelOnDrain, Terminating for every class), and none
//     is cancelled earlier;
//   - Begin -> Stopped within GracePeriod whatever handlers do;
//   - readiness answers 200 iff Serving;
//   - exempt requests are never counted;
//   - a completed request is never marked cancelled; a cancelled one is
//     marked (503 + marker before headers, resumable trailer after);
//   - a response whose headers went out from Unready on carries
//     Connection: close (so is every marked 503), one sent while Serving
//     does not.
type drainMachine struct {
	cfg    drain.Config
	clk    *fakeClock
	ctrl   *drain.Controller
	h      http.Handler
	trans  func() []drain.Transition
	calls  []*call
	seen   map[*call]bool        // finished calls already checked
	sentIn map[*call]drain.State // the state when a handler's headers went out
	forced bool
	last   drain.State

	refused, completed, cancelled uint64
}

func newDrainMachine(t *rapid.T) *drainMachine {
	gp := time.Duration(rapid.IntRange(1, 120).Draw(t, "graceSeconds")) * time.Second
	tg := time.Duration(rapid.Int64Range(0, int64(gp/time.Millisecond)/2).Draw(t, "terminateMillis")) * time.Millisecond
	effTG := tg
	if effTG == 0 {
		effTG = gp / 10 // the documented default
	}
	ag := time.Duration(rapid.Int64Range(0, int64((gp-effTG)/time.Millisecond)).Draw(t, "acceptMillis")) * time.Millisecond
	m := &drainMachine{clk: newFakeClock(t0), seen: map[*call]bool{}, sentIn: map[*call]drain.State{}}
	hook, got := recordTransitions()
	m.trans = got
	m.cfg = drain.Config{GracePeriod: gp, AcceptGrace: ag, TerminateGrace: tg, Clock: m.clk, OnTransition: hook, Classify: classifyByPath}
	m.ctrl = mustNew(t, m.cfg)
	m.cfg.TerminateGrace = effTG
	m.h = m.ctrl.Middleware(testHandler)
	t.Cleanup(func() {
		for _, cl := range m.calls {
			if cl.admitted && !cl.finished {
				cl.finish()
			}
		}
	})
	return m
}

func (m *drainMachine) running() []*call {
	var out []*call
	for _, cl := range m.calls {
		if cl.admitted && !cl.finished {
			out = append(out, cl)
		}
	}
	return out
}

func (m *drainMachine) Start(t *rapid.T) {
	class := rapid.SampledFrom([]drain.Class{drain.Wait, drain.Wait, drain.CancelOnDrain, drain.Exempt}).Draw(t, "class")
	respect := rapid.Bool().Draw(t, "respectCtx")
	before := m.ctrl.State()
	cl := start(m.h, class, respect)
	m.calls = append(m.calls, cl)
	if class == drain.Exempt {
		if !cl.admitted {
			t.Fatalf("exempt request refused in %v", before)
		}
		return
	}
	if cordoned := before >= drain.Draining; cl.admitted == cordoned {
		t.Fatalf("%v request in state %v: admitted=%v", class, before, cl.admitted)
	}
	if !cl.admitted {
		m.refused++
		m.seen[cl] = true
		res := cl.rec.Result()
		ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.StatusCode != 503 || res.Header.Get(drain.MarkerHeader) != drain.MarkerRefused ||
			res.Header.Get("Connection") != "close" || err != nil || ra < 1 {
			t.Fatalf("bad refusal: status %d headers %v", res.StatusCode, res.Header)
		}
	}
}

func (m *drainMachine) Header(t *rapid.T) {
	run := m.running()
	if len(run) == 0 {
		t.Skip("nothing running")
	}
	cl := rapid.SampledFrom(run).Draw(t, "call")
	if cl.wroteHeader {
		t.Skip("headers already written")
	}
	m.sentIn[cl] = m.ctrl.State()
	cl.header()
}

func (m *drainMachine) Finish(t *rapid.T) {
	run := m.running()
	if len(run) == 0 {
		t.Skip("nothing running")
	}
	cl := rapid.SampledFrom(run).Draw(t, "call")
	if !cl.wroteHeader {
		m.sentIn[cl] = m.ctrl.State() // the handler writes before returning
	}
	cl.finish()
}

func (m *drainMachine) Advance(t *rapid.T) {
	ms := rapid.Int64Range(0, int64(m.cfg.GracePeriod/time.Millisecond)).Draw(t, "advanceMillis")
	m.clk.Advance(time.Duration(ms) * time.Millisecond)
}

func (m *drainMachine) Begin(t *rapid.T) { m.ctrl.Begin() }

func (m *drainMachine) Force(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "forceDice") != 0 {
		t.Skip("Force kept rare")
	}
	if m.ctrl.State() < drain.Terminating {
		m.forced = true
	}
	m.ctrl.Force()
}

// Check runs after every action.
func (m *drainMachine) Check(t *rapid.T) {
	settle(m.calls)
	st := m.ctrl.State()
	stats := m.ctrl.Stats()
	now := m.clk.Now()

	// States only move forward, and the hook saw every change in order.
	if st < m.last {
		t.Fatalf("state went back from %v to %v", m.last, st)
	}
	m.last = st
	prev := drain.Serving
	for _, tr := range m.trans() {
		if tr.From != prev || tr.To <= tr.From {
			t.Fatalf("bad transition %v -> %v after %v", tr.From, tr.To, prev)
		}
		prev = tr.To
	}
	if prev != st {
		t.Fatalf("last transition to %v, state %v", prev, st)
	}

	// Readiness 200 iff Serving.
	rec := httptest.NewRecorder()
	m.ctrl.ReadinessHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if (rec.Code == 200) != (st == drain.Serving) {
		t.Fatalf("readiness %d in %v", rec.Code, st)
	}

	// Deadlines, all from the one instant of the signal.
	if st != drain.Serving {
		began := stats.Began
		if !began.Equal(m.firstSignal()) {
			t.Fatalf("Began %v, first transition at %v", began, m.firstSignal())
		}
		if !now.Before(began.Add(m.cfg.GracePeriod)) && st != drain.Stopped {
			t.Fatalf("%v at %v, grace period ended at %v", st, now, began.Add(m.cfg.GracePeriod))
		}
		if !now.Before(began.Add(m.cfg.GracePeriod-m.cfg.TerminateGrace)) && st < drain.Terminating {
			t.Fatalf("%v after the drain deadline", st)
		}
		if !m.forced && !now.Before(began.Add(m.cfg.AcceptGrace)) && st < drain.Draining {
			t.Fatalf("%v after the accept grace", st)
		}
		for _, tr := range m.trans() {
			if tr.At.After(began.Add(m.cfg.GracePeriod)) {
				t.Fatalf("transition %v -> %v at %v, after the grace period", tr.From, tr.To, tr.At)
			}
		}
	}

	// Running requests are cancelled exactly from their deadline on.
	inflight := 0
	for _, cl := range m.running() {
		if cl.class == drain.Exempt {
			if cl.ctx.Err() != nil {
				t.Fatalf("exempt request cancelled")
			}
			continue
		}
		inflight++
		due := st >= drain.Terminating || (cl.class == drain.CancelOnDrain && st >= drain.Draining)
		cause := context.Cause(cl.ctx)
		if due && !errors.Is(cause, drain.ErrDraining) && !errors.Is(cause, drain.ErrTerminating) {
			t.Fatalf("%v request still running uncancelled in %v (cause %v)", cl.class, st, cause)
		}
		if !due && cause != nil {
			t.Fatalf("%v request cancelled early in %v: %v", cl.class, st, cause)
		}
	}

	// Finished requests: completed ones untouched, cancelled ones marked.
	for _, cl := range m.calls {
		if !cl.finished || m.seen[cl] {
			continue
		}
		m.seen[cl] = true
		if cl.class == drain.Exempt {
			continue
		}
		res := cl.rec.Result()
		marker, trailer := res.Header.Get(drain.MarkerHeader), res.Trailer.Get(drain.MarkerHeader)
		closes := res.Header.Get("Connection") == "close"
		if st, sent := m.sentIn[cl]; sent && cl.wroteHeader && closes != (st >= drain.Unready) {
			t.Fatalf("response sent in %v: Connection: close = %v", st, closes)
		}
		if marker != "" && !closes {
			t.Fatalf("marked %d without Connection: close", res.StatusCode)
		}
		cause := context.Cause(cl.ctx)
		if errors.Is(cause, drain.ErrDraining) || errors.Is(cause, drain.ErrTerminating) {
			m.cancelled++
			switch {
			case cl.wroteHeader && trailer != drain.MarkerResumable:
				t.Fatalf("cancelled stream without resumable trailer: %v", res.Trailer)
			case !cl.wroteHeader && (res.StatusCode != 503 || marker != drain.MarkerCancelled):
				t.Fatalf("cancelled request answered %d %q", res.StatusCode, marker)
			}
		} else {
			m.completed++
			if res.StatusCode != 200 || marker != "" || trailer != "" {
				t.Fatalf("completed request marked: %d %q %q", res.StatusCode, marker, trailer)
			}
		}
	}

	// Exempt requests never counted.
	admitted := uint64(0)
	for _, cl := range m.calls {
		if cl.admitted && cl.class != drain.Exempt {
			admitted++
		}
	}
	want := drain.Stats{State: st, Began: stats.Began, InFlight: inflight, Admitted: admitted,
		Completed: m.completed, Cancelled: m.cancelled, Refused: m.refused}
	if stats != want {
		t.Fatalf("stats %+v, want %+v", stats, want)
	}
}

func (m *drainMachine) firstSignal() time.Time {
	tr := m.trans()
	if len(tr) == 0 {
		return time.Time{}
	}
	return tr[0].At
}

func TestPropertyDrain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newDrainMachine(t)
		t.Repeat(rapid.StateMachineActions(m))
	})
}

// wireClient is one client of the on-the-wire property: a request on a
// fresh connection, or on a connection kept alive from before Begin.
type wireClient struct {
	reuse      bool          // send on a kept-alive connection
	at         time.Duration // when to connect (fresh) or send (reuse), from Begin
	writeDelay time.Duration // fresh: between connecting and writing the request
	method     string
	work       time.Duration // how long the handler works

	conn net.Conn
	br   *bufio.Reader
	got  answer
	// late reports that the machine ran the client so late that it fell
	// outside the window in which the package promises a response or the
	// refusal (measured: a fresh connection's request written more than
	// RetryAfter/2 after its dial began, half the time a connection has
	// to settle; a kept-alive one's sent more than AcceptGrace +
	// RetryAfter/2 after Begin).
	late bool
}

// TestPropertyDrainOnTheWire checks, on a real loopback server with a
// Listener and random client timings around Begin, that every request
// sent to a draining server gets either a full response or the marked
// refusal (503 + Retry-After + Connection: close + "Upshift-Drain:
// refused"), never a reset or an EOF; that a refused request never ran
// and a served one ran once; that a client connecting after the
// listener closed is refused by the kernel before it sends anything;
// and that the counters agree with what the clients saw. Every client
// connects, or reuses its kept-alive connection, by AcceptGrace +
// RetryAfter/4 after Begin, and writes within RetryAfter/4 of
// connecting: well before the listener has seen no arrival for
// RetryAfter and the connections have had RetryAfter to settle, the
// condition under which the package promises this. The margin (at
// least 1.5 RetryAfter, 150ms) absorbs scheduling delays on a loaded
// machine; a client that the machine ran later still (see
// wireClient.late) is outside the promise, and of it the property only
// asks that a request that got no answer never ran.
func TestPropertyDrainOnTheWire(t *testing.T) {
	const retryAfter = 100 * time.Millisecond
	rapid.Check(t, func(rt *rapid.T) {
		acceptGrace := time.Duration(rapid.IntRange(0, 10).Draw(rt, "acceptGraceMillis")) * time.Millisecond
		latest := acceptGrace + retryAfter/4
		var clients []*wireClient
		for range rapid.IntRange(1, 6).Draw(rt, "clients") {
			clients = append(clients, &wireClient{
				reuse:      rapid.Bool().Draw(rt, "reuse"),
				at:         time.Duration(rapid.Int64Range(-int64(5*time.Millisecond), int64(latest)).Draw(rt, "at")),
				writeDelay: time.Duration(rapid.Int64Range(0, int64(retryAfter/4)).Draw(rt, "writeDelay")),
				method:     rapid.SampledFrom([]string{http.MethodGet, http.MethodPost}).Draw(rt, "method"),
				work:       time.Duration(rapid.IntRange(0, 5).Draw(rt, "workMillis")) * time.Millisecond,
			})
		}

		ctrl := mustNew(rt, drain.Config{GracePeriod: 5 * time.Second, AcceptGrace: acceptGrace, RetryAfter: retryAfter})
		var mu sync.Mutex
		ran := map[string]int{}
		srv := &http.Server{Handler: ctrl.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			id := r.URL.Query().Get("id")
			mu.Lock()
			ran[id]++
			mu.Unlock()
			if d, err := time.ParseDuration(r.URL.Query().Get("work")); err == nil {
				time.Sleep(d)
			}
			_, _ = io.WriteString(w, "ok "+id)
		}))}
		if err := ctrl.Attach(srv); err != nil {
			rt.Fatalf("Attach: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			rt.Fatalf("Listen: %v", err)
		}
		addr := ln.Addr().String()
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctrl.Listener(ln)) }()
		defer srv.Close()

		path := func(i int, c *wireClient) string {
			return fmt.Sprintf("/?id=%d&work=%v", i, c.work)
		}
		// Kept-alive connections: one request each while Serving.
		warm := 0
		for i, c := range clients {
			if !c.reuse {
				continue
			}
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				rt.Fatalf("dial: %v", err)
			}
			defer conn.Close()
			c.conn, c.br = conn, bufio.NewReader(conn)
			if err := rawRequest(conn, http.MethodGet, fmt.Sprintf("/?id=warm%d", i)); err != nil {
				rt.Fatalf("warm-up: %v", err)
			}
			if a := readAnswer(c.br, conn); a.Status != http.StatusOK || a.Connection == "close" {
				rt.Fatalf("warm-up answered %+v, want a kept-alive 200", a)
			}
			warm++
		}

		begin := time.Now().Add(10 * time.Millisecond)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				time.Sleep(time.Until(begin.Add(c.at)))
				dialAt := time.Now()
				if !c.reuse {
					conn, err := net.Dial("tcp", addr)
					if errors.Is(err, syscall.ECONNREFUSED) {
						c.got = answer{Err: "dial refused"}
						return
					} else if err != nil {
						c.got = answer{Err: "dial: " + err.Error()}
						return
					}
					defer conn.Close()
					c.conn, c.br = conn, bufio.NewReader(conn)
					time.Sleep(c.writeDelay)
				}
				err := rawRequest(c.conn, c.method, path(i, c))
				wrote := time.Now()
				if c.reuse {
					c.late = wrote.Sub(begin) > acceptGrace+retryAfter/2
				} else {
					c.late = wrote.Sub(dialAt) > retryAfter/2
				}
				if err != nil {
					c.got = answer{Err: "write: " + errorKind(err)}
					return
				}
				c.got = readAnswer(c.br, c.conn)
			})
		}
		time.Sleep(time.Until(begin))
		ctrl.Begin()
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ctrl.Wait(ctx); err != nil {
			rt.Fatalf("not stopped: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			rt.Fatalf("Serve returned %v", err)
		}

		var ok, refused, queued uint64
		mu.Lock()
		defer mu.Unlock()
		for i, c := range clients {
			id := strconv.Itoa(i)
			switch {
			case c.got.Status == http.StatusOK && c.got.Body == "ok "+id:
				ok++
				if ran[id] != 1 {
					rt.Fatalf("client %d served, but its request ran %d times", i, ran[id])
				}
			case c.got == refusal:
				refused++
				if ran[id] != 0 {
					rt.Fatalf("client %d refused, but its request ran %d times", i, ran[id])
				}
			case !c.reuse && c.got.Err == "dial refused":
				if ran[id] != 0 {
					rt.Fatalf("client %d could not connect, but its request ran", i)
				}
			case c.late && c.got.Status == 0:
				// Run too late by a loaded machine: the server may have
				// closed the connection as idle before the request came.
				// It must not have run it.
				rt.Logf("client %d ran late (%+v) and got %+v", i, *c, c.got)
				if ran[id] != 0 {
					rt.Fatalf("client %d got %+v, but its request ran %d times", i, c.got, ran[id])
				}
			default:
				rt.Fatalf("client %d (%+v) got %+v: neither a full response nor the refusal", i, *c, c.got)
			}
		}
		s := ctrl.Stats()
		queued = s.AcceptedAtClose
		if s.Admitted != ok+uint64(warm) || s.Completed != s.Admitted || s.Refused != refused || s.InFlight != 0 || queued > refused {
			rt.Fatalf("stats %+v; clients saw %d served (+%d warm-ups), %d refused", s, ok, warm, refused)
		}
	})
}
