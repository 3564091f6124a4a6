package drain

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upshift-dev/upshift/clock"
)

// State is a phase of the drain. States only move forward:
// Serving -> Unready -> Draining -> Terminating -> Stopped, possibly
// skipping some (Force from Serving goes straight to Terminating).
// The zero value is Serving. A State is a plain value, safe to copy and
// share.
type State int32

const (
	// Serving: every request is admitted and readiness answers 200.
	Serving State = iota
	// Unready (from Begin, for Config.AcceptGrace): readiness answers 503
	// while requests are still admitted, so load balancers and endpoint
	// lists stop sending new work before anything is refused. Responses
	// carry Connection: close, so that clients holding kept-alive
	// connections reconnect (elsewhere, once endpoints are updated)
	// instead of finding the connection closed under their next request.
	Unready
	// Draining: new non-exempt requests are refused with 503 before any
	// work (Retry-After in whole seconds, at least 1, Connection: close
	// and "Upshift-Drain: refused"); admitted Wait requests run on;
	// CancelOnDrain requests have been cancelled (cause ErrDraining).
	// Draining ends when no counted request is left, or at
	// Begin + GracePeriod - TerminateGrace.
	Draining
	// Terminating: every request still running has been cancelled (cause
	// ErrTerminating) and the attached servers are being shut down, in
	// order: wrapped listeners stopped (see Controller.Listener),
	// connections settled (see Controller.Attach), then
	// http.Server.Shutdown with the rest of the grace period, and Close
	// if it runs out.
	Terminating
	// Stopped: the controller is done, at the latest at Begin +
	// GracePeriod, whatever handlers do. Handlers still running now were
	// abandoned (their connections closed); Stats().InFlight counts them.
	// Hijacked connections (websockets and the like) have been closed,
	// whether the handler still runs or handed the connection on; a TLS
	// connection is closed underneath, without waiting to send
	// close_notify. Done is closed after that.
	Stopped
)

var stateNames = [...]string{"Serving", "Unready", "Draining", "Terminating", "Stopped"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Class tells the controller how to treat a request. One predicate,
// [Config.Classify], decides it, and the same answer is used for
// admission and for in-flight counting. The zero value is Wait. A Class
// is a plain value, safe to copy and share.
//
// The Middleware classifies a request once, and admission and in-flight
// counting happen in the same step under one lock: there is no moment at
// which the drain can see zero requests in flight while a request that was
// classified for admission has not been counted yet.
type Class int

const (
	// Wait requests are refused from Draining on; once admitted they run
	// to completion unless the controller reaches Terminating first.
	Wait Class = iota
	// CancelOnDrain requests (long streams, watches, internal work that
	// can be resumed elsewhere) are refused like Wait requests and have
	// their context cancelled, with cause ErrDraining, as soon as the
	// controller enters Draining.
	CancelOnDrain
	// Exempt requests (health, readiness, metrics, control endpoints) are
	// never refused and never counted. They still see their context
	// cancelled once the controller is Terminating if the server was
	// attached.
	Exempt
)

var classNames = [...]string{"Wait", "CancelOnDrain", "Exempt"}

func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// The marker header. A draining server sets it on the responses it
// produces itself, so that clients can tell a planned refusal from a
// failure. serve/retry recognises the same name and values.
//
// Every request that reaches a draining server over a connection it
// accepted, or that was waiting in a wrapped listener's accept queue, gets
// one of these answers, never a reset or an EOF, under the conditions
// Controller.Attach and Controller.Listener give. A client connecting after
// a wrapped listener closed is refused by the kernel before it sends
// anything ("connection refused"), which any client may retry. A request
// that completed before any cancellation is never marked.
const (
	// MarkerHeader is the response header (or trailer) name.
	MarkerHeader = "Upshift-Drain"
	// MarkerRefused on a 503: the request was refused before any work;
	// retrying it is safe whatever its method.
	MarkerRefused = "refused"
	// MarkerCancelled on a 503: the handler started and was cancelled
	// before writing anything; work may have happened, so only requests
	// that are safe to repeat should be retried.
	MarkerCancelled = "cancelled"
	// MarkerResumable as a trailer: the response was cut short by the
	// drain after its headers went out; the client holds a prefix of it
	// and may resume from another server.
	MarkerResumable = "resumable"
)

// Defaults used for zero fields of Config.
const (
	DefaultGracePeriod = 30 * time.Second
	DefaultRetryAfter  = time.Second
)

// Config configures a [Controller]. Zero fields take the documented
// defaults, and the zero Config is valid. A Config is a plain value,
// safe to copy; its funcs must be safe for concurrent use.
type Config struct {
	// GracePeriod is the whole budget from the signal (Begin, or Force
	// if it came first) to Stopped. Every deadline derives from it and
	// from that one instant. Zero means DefaultGracePeriod (30s, the
	// Kubernetes default terminationGracePeriodSeconds).
	GracePeriod time.Duration

	// AcceptGrace is how long the controller stays Unready after Begin:
	// readiness already fails but requests are still admitted, so that
	// load balancers and endpoint lists can catch up. Zero skips the
	// wait (Begin enters Draining at once).
	AcceptGrace time.Duration

	// TerminateGrace is the part of GracePeriod kept for Terminating:
	// cancelling what still runs, http.Server.Shutdown and Close.
	// Draining ends at the latest at Begin + GracePeriod - TerminateGrace.
	// Zero means GracePeriod/10.
	TerminateGrace time.Duration

	// RetryAfter is advertised in the Retry-After header of refusals,
	// rounded up to whole seconds and at least 1. Zero means
	// DefaultRetryAfter (1s). Unrounded, it also paces Terminating, as
	// the time in which a refused client is expected back: a wrapped
	// listener closes once no connection arrived for RetryAfter, and the
	// connections of attached servers get up to RetryAfter to close
	// before the idle ones are closed (see Controller.Attach).
	RetryAfter time.Duration

	// Classify assigns a Class to each request. It must be fast, must
	// not block and must be safe for concurrent use. Nil classifies
	// every request as Wait. An unknown Class is treated as Wait.
	Classify func(*http.Request) Class

	// OnTransition, if set, is called once per state change, in order,
	// outside the controller's lock (it may call the controller). It
	// must not block for long: the goroutine that caused the change
	// runs it.
	OnTransition func(Transition)

	// Clock is the time source: the instant Begin is called and the
	// timers that end each phase. Nil means clock.Real; tests pass a
	// manual clock (fake.Clock, or their own), or run with the wall clock
	// inside testing/synctest.
	Clock clock.Clock
}

// Transition describes one state change, passed to Config.OnTransition.
// It is a plain value (the zero value describes no change), safe to
// copy and share.
type Transition struct {
	From, To State
	At       time.Time // the Clock's time of the change
	InFlight int       // non-exempt requests running at that moment
}

// Validate reports every invalid field at once, as *ConfigError values
// joined with errors.Join (each matches ErrInvalid). It returns nil
// for a valid Config, including the zero Config.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, problem string) {
		errs = append(errs, &ConfigError{Field: field, Problem: problem})
	}
	if c.GracePeriod < 0 {
		bad("GracePeriod", "must not be negative, got "+c.GracePeriod.String())
	}
	if c.AcceptGrace < 0 {
		bad("AcceptGrace", "must not be negative, got "+c.AcceptGrace.String())
	}
	if c.TerminateGrace < 0 {
		bad("TerminateGrace", "must not be negative, got "+c.TerminateGrace.String())
	}
	if c.RetryAfter < 0 {
		bad("RetryAfter", "must not be negative, got "+c.RetryAfter.String())
	}
	if len(errs) == 0 {
		d := c.withDefaults()
		if d.TerminateGrace > d.GracePeriod {
			bad("TerminateGrace", "must not exceed GracePeriod ("+d.GracePeriod.String()+"), got "+d.TerminateGrace.String())
		} else if d.AcceptGrace > d.GracePeriod-d.TerminateGrace {
			bad("AcceptGrace", "AcceptGrace + TerminateGrace must not exceed GracePeriod ("+
				d.GracePeriod.String()+"), got "+d.AcceptGrace.String()+" + "+d.TerminateGrace.String())
		}
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.TerminateGrace == 0 {
		c.TerminateGrace = c.GracePeriod / 10
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	c.Clock = clock.OrReal(c.Clock)
	return c
}

// Stats is a snapshot of a Controller's counters, taken under its lock
// so that the fields agree with each other. It is a plain value (the
// zero value is a Serving controller that saw no request), safe to copy
// and share.
type Stats struct {
	State    State
	Began    time.Time // the signal instant; zero while Serving
	InFlight int       // non-exempt requests running now (abandoned ones once Stopped)

	Admitted  uint64 // non-exempt requests passed to the handler
	Completed uint64 // admitted requests whose handler returned before any drain cancellation
	Cancelled uint64 // admitted requests whose context the drain cancelled while they ran
	Refused   uint64 // non-exempt requests answered 503 without calling the handler

	// AcceptedAtClose counts connections that a [Controller.Listener]
	// took from the kernel's accept queue when the controller stopped
	// it, and handed to the server to be answered instead of reset.
	AcceptedAtClose uint64
}

// Controller drives one server (or a group of servers) through a
// graceful drain. Create it with New. The zero value is usable and
// behaves as New(Config{}) (30s grace period, no accept grace, every
// request Wait). A Controller must not be copied after first use. All
// methods are safe for concurrent use.
type Controller struct {
	once       sync.Once
	cfg        Config
	retryAfter string // pre-rendered Retry-After value

	state atomic.Int32 // mirror of st for lock-free reads (written under mu)

	mu       sync.Mutex
	st       State
	began    time.Time
	stopAt   time.Time // began + GracePeriod
	counts   Stats     // counters; State/Began/InFlight kept in st/began/inflight
	inflight int
	head     *tracked // requests with a derived, individually cancellable context

	termCtx    context.Context // cancelled at Terminating; the BaseContext of attached servers
	termCancel context.CancelCauseFunc
	baseCtx    context.Context // termCtx carrying baseKey{} -> c

	servers       []*http.Server
	listeners     []*listener // wrapped by Listener, stopped at Terminating
	startShutdown bool        // set under mu; consumed by unlock
	shutdownDone  bool
	timers        []func() bool
	pending       []Transition
	dispatching   bool
	stopping      bool       // set with Stopped under mu; unlock then closes done
	hijacked      []net.Conn // hijacked connections, closed at Stopped
	sweepAt       int        // len(hijacked) at which closed ones are forgotten
	closing       []net.Conn // hijacked connections taken at Stopped; unlock closes them
	done          chan struct{}

	// Connections of attached servers, kept by their ConnState hook.
	conns     sync.Map // net.Conn -> *connEntry
	connCount atomic.Int64
	settling  atomic.Bool   // Terminating waits for connections to close
	connEvent chan struct{} // a connection changed state while settling
}

type baseKey struct{}

// New returns a Serving controller for cfg, or the errors of
// cfg.Validate.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{}
	c.once.Do(func() { c.setup(cfg) })
	return c, nil
}

// setup initialises c for a valid cfg.
func (c *Controller) setup(cfg Config) {
	cfg = cfg.withDefaults()
	secs := int64((cfg.RetryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	c.cfg = cfg
	c.retryAfter = strconv.FormatInt(secs, 10)
	c.done = make(chan struct{})
	c.connEvent = make(chan struct{}, 1)
	c.termCtx, c.termCancel = context.WithCancelCause(context.Background())
	c.baseCtx = context.WithValue(c.termCtx, baseKey{}, c)
}

// init makes the zero Controller equivalent to New(Config{}).
func (c *Controller) init() { c.once.Do(func() { c.setup(Config{}) }) }

// State returns the current state.
func (c *Controller) State() State { return State(c.state.Load()) }

// Done returns a channel closed when the controller reaches Stopped.
func (c *Controller) Done() <-chan struct{} {
	c.init()
	return c.done
}

// Wait blocks until the controller is Stopped or ctx ends; in the latter
// case it returns context.Cause(ctx).
func (c *Controller) Wait(ctx context.Context) error {
	c.init()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Stats returns a snapshot of the counters.
func (c *Controller) Stats() Stats {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.counts
	s.State = c.st
	s.Began = c.began
	s.InFlight = c.inflight
	return s
}

// Begin starts the drain: the signal. It records the instant from which
// every deadline is measured and enters Unready (then Draining after
// AcceptGrace). Calling it again, or after Force, does nothing.
//
// Every deadline derives from one GracePeriod measured at this signal (or
// at Force, if it comes first). Nothing restarts the clock, so a slow
// phase eats into the next one rather than extending the total.
func (c *Controller) Begin() {
	c.init()
	c.mu.Lock()
	if c.st == Serving {
		now := c.cfg.Clock.Now()
		c.startTimeline(now)
		c.setState(Unready, now)
		if c.cfg.AcceptGrace <= 0 {
			c.enterDraining(now)
		} else {
			c.timers = append(c.timers, c.cfg.Clock.AfterFunc(c.cfg.AcceptGrace, c.onAcceptGraceEnd))
		}
	}
	c.unlock()
}

// Force jumps to Terminating now (the second signal): everything still
// running is cancelled and attached servers are shut down with what is
// left of the grace period. If Begin was never called, the grace period
// is measured from this call. Force after Terminating does nothing.
func (c *Controller) Force() {
	c.init()
	c.mu.Lock()
	c.enterTerminating(c.cfg.Clock.Now())
	c.unlock()
}

// ReadinessHandler answers 200 while the controller is Serving and 503
// in every other state. Classify its path as Exempt if it sits behind
// the Middleware.
func (c *Controller) ReadinessHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st := c.State()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if st == Serving {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + st.String() + "\n"))
	})
}

// Attach ties srv to the controller. Call it before srv starts serving,
// once per server; several servers may share one controller.
//
// It installs srv.BaseContext so that request contexts are cancelled
// (cause ErrTerminating) when the controller reaches Terminating,
// wrapping any BaseContext already set; installs srv.ConnState, calling
// any hook already set after its own, to follow the server's
// connections and record those its handlers hijack (closed at
// Stopped); and registers an OnShutdown hook that calls Begin, so that
// a Shutdown started by other code also fails readiness and refuses
// new work. At Terminating the controller stops the listeners wrapped
// by Controller.Listener, lets the server's connections settle (below),
// then calls srv.Shutdown with the rest of the grace period and srv.Close
// if that runs out. Hijacked connections of a server that is not attached
// are tracked when the hijacking handler runs behind the Middleware (not
// exempt).
//
// Settling, because http.Server.Shutdown drops any request it reads and
// closes idle connections under a client: every request gets the refusal
// with Connection: close, and the controller waits until all connections
// are closed, or Config.RetryAfter at most within the grace period, then
// closes those still idle or never used. See docs/design/drain.md for why,
// and for the races that remain.
func (c *Controller) Attach(srv *http.Server) error {
	if srv == nil {
		return ErrNilServer
	}
	c.init()
	c.mu.Lock()
	if c.st >= Terminating {
		c.mu.Unlock()
		return ErrTooLate
	}
	c.servers = append(c.servers, srv)
	c.mu.Unlock()

	prev := srv.BaseContext
	if prev == nil {
		srv.BaseContext = func(net.Listener) context.Context { return c.baseCtx }
	} else {
		srv.BaseContext = func(l net.Listener) context.Context {
			parent := prev(l)
			if parent == nil {
				parent = context.Background()
			}
			ctx, cancel := context.WithCancelCause(parent)
			context.AfterFunc(c.termCtx, func() { cancel(context.Cause(c.termCtx)) })
			return ctx
		}
	}
	prevState := srv.ConnState
	srv.ConnState = func(conn net.Conn, st http.ConnState) {
		c.connState(conn, st)
		if prevState != nil {
			prevState(conn, st)
		}
	}
	srv.RegisterOnShutdown(c.Begin)
	return nil
}

// --- state machine; every function below with a lowercase name expects c.mu held ---

func (c *Controller) setState(to State, now time.Time) {
	from := c.st
	c.st = to
	c.state.Store(int32(to))
	c.pending = append(c.pending, Transition{From: from, To: to, At: now, InFlight: c.inflight})
	if to == Stopped {
		for _, stop := range c.timers {
			stop()
		}
		c.timers = nil
		c.closing, c.hijacked = c.hijacked, nil
		c.stopping = true
	}
}

func (c *Controller) startTimeline(now time.Time) {
	c.began = now
	c.stopAt = now.Add(c.cfg.GracePeriod)
	clk := c.cfg.Clock
	c.timers = append(c.timers,
		clk.AfterFunc(c.cfg.GracePeriod-c.cfg.TerminateGrace, c.onDrainDeadline),
		clk.AfterFunc(c.cfg.GracePeriod, c.onStopDeadline))
}

func (c *Controller) enterDraining(now time.Time) {
	if c.st != Unready {
		return
	}
	c.setState(Draining, now)
	for t := c.head; t != nil; t = t.next {
		if t.class == CancelOnDrain {
			t.cancel(ErrDraining)
		}
	}
	if c.inflight == 0 {
		c.enterTerminating(now)
	}
}

func (c *Controller) enterTerminating(now time.Time) {
	if c.st >= Terminating {
		return
	}
	if c.st == Serving {
		c.startTimeline(now)
	}
	c.setState(Terminating, now)
	for t := c.head; t != nil; t = t.next {
		t.cancel(ErrTerminating)
	}
	c.termCancel(ErrTerminating)
	if len(c.servers) > 0 {
		c.startShutdown = true
	} else {
		c.shutdownDone = true
	}
	c.maybeStop(now)
}

func (c *Controller) maybeStop(now time.Time) {
	if c.st == Terminating && c.shutdownDone && c.inflight == 0 {
		c.setState(Stopped, now)
	}
}

// requestDone is called (under mu) when a non-exempt handler returns.
func (c *Controller) requestDone(now time.Time) {
	switch c.st {
	case Draining:
		if c.inflight == 0 {
			c.enterTerminating(now)
		}
	case Terminating:
		c.maybeStop(now)
	}
}

// --- timer callbacks ---

func (c *Controller) onAcceptGraceEnd() {
	c.mu.Lock()
	c.enterDraining(c.cfg.Clock.Now())
	c.unlock()
}

func (c *Controller) onDrainDeadline() {
	c.mu.Lock()
	c.enterTerminating(c.cfg.Clock.Now())
	c.unlock()
}

func (c *Controller) onStopDeadline() {
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	c.enterTerminating(now)
	if c.st < Stopped {
		c.setState(Stopped, now)
	}
	c.unlock()
}

// unlock releases mu, then, if a transition asked for it, closes the
// hijacked connections and Done (at Stopped) or starts the shutdown of
// attached servers (at Terminating), and delivers pending transitions
// to the hook.
func (c *Controller) unlock() {
	start := c.startShutdown
	c.startShutdown = false
	var servers []*http.Server
	var budget time.Duration
	if start {
		servers = append(servers, c.servers...)
		budget = c.stopAt.Sub(c.cfg.Clock.Now())
	}
	closing, stopping := c.closing, c.stopping
	c.closing, c.stopping = nil, false
	c.mu.Unlock()
	for _, conn := range closing {
		closeConn(conn)
	}
	if stopping {
		close(c.done)
	}
	if start {
		go c.shutdown(servers, budget)
	}
	c.dispatch()
}

// shutdown stops the wrapped listeners, lets the connections of attached
// servers settle, then runs http.Server.Shutdown on every attached
// server with the remaining budget, and Close on those that did not
// finish in time.
func (c *Controller) shutdown(servers []*http.Server, budget time.Duration) {
	deadline := c.cfg.Clock.Now().Add(budget)
	c.stopListeners()
	c.settle(deadline)
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := c.cfg.Clock.AfterFunc(deadline.Sub(c.cfg.Clock.Now()), func() { cancel(errGraceExpired) })
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		})
	}
	wg.Wait()
	stop()
	cancel(nil)
	c.mu.Lock()
	c.shutdownDone = true
	c.maybeStop(c.cfg.Clock.Now())
	c.unlock()
}

// dispatch delivers pending transitions to OnTransition in order. Only
// one goroutine dispatches at a time; others leave their transitions to
// it.
func (c *Controller) dispatch() {
	c.mu.Lock()
	if c.dispatching || len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	c.dispatching = true
	finished := false
	defer func() {
		if !finished { // the hook panicked: let later transitions through
			c.mu.Lock()
			c.dispatching = false
			c.mu.Unlock()
		}
	}()
	for len(c.pending) > 0 {
		batch := c.pending
		c.pending = nil
		c.mu.Unlock()
		if hook := c.cfg.OnTransition; hook != nil {
			for _, tr := range batch {
				hook(tr)
			}
		}
		c.mu.Lock()
	}
	c.dispatching = false
	finished = true
	c.mu.Unlock()
}
