package drain

import (
	"net"
	"sync"
	"time"
)

// Listener wraps ln, a listener of a server attached to c, so that
// closing it resets no connection that a client has already opened.
// Serve the wrapped listener: srv.Serve(ctrl.Listener(ln)), or
// srv.ServeTLS, which adds TLS on top. Wrap the TCP listener itself, not
// a TLS listener built on it.
//
// Until Terminating, Accept passes connections through unchanged. At
// Terminating, before the servers shut down, the wrapper takes every
// connection waiting in the kernel's accept queue, and every one arriving
// after, and holds them until none has arrived for Config.RetryAfter (or
// half of what remains of the grace period has passed); then it closes ln
// and hands the held connections to the server, which refuses their
// requests in a way clients retry. Connections taken from the queue are
// counted in Stats().AcceptedAtClose. After the stop, Accept blocks until
// the server closes the wrapper, then reports it closed, so Serve returns
// http.ErrServerClosed; the port is free from the stop on.
//
// A Listener closed before the controller stopped it closes ln at once,
// like an unwrapped listener. If ln has no SetDeadline method the stop
// closes it without emptying the queue. Wrapping a listener once the
// controller is Terminating stops it before Listener returns. An unwrapped
// listener is closed by http.Server.Shutdown, resetting the connections
// still in its accept queue. See docs/design/drain.md for the details.
func (c *Controller) Listener(ln net.Listener) net.Listener {
	c.init()
	l := &listener{Listener: ln, c: c, stopped: make(chan struct{}), closed: make(chan struct{})}
	l.idle = sync.NewCond(&l.mu)
	c.mu.Lock()
	late := c.st >= Terminating
	c.listeners = append(c.listeners, l)
	c.mu.Unlock()
	if late {
		l.stop(c.acceptLimits())
	}
	return l
}

// The lifecycle of a listener: open, then stopping and stopped (by the
// controller at Terminating), then closed (by its server); or open,
// then closed.
const (
	lnOpen = iota
	lnStopping
	lnStopped
	lnClosed
)

type listener struct {
	net.Listener
	c *Controller

	mu       sync.Mutex
	state    int
	inAccept int        // Accept calls inside ln.Accept
	idle     *sync.Cond // signalled when inAccept drops to 0
	pending  []net.Conn // taken from the queue by stop, for Accept to hand over
	parked   int        // Accept calls waiting for Close, with nothing left to hand over
	closeErr error      // from closing ln
	stopped  chan struct{}
	closed   chan struct{}
}

// Accept returns the next connection. Once the listener is stopped, it
// returns the connections taken from the queue, then blocks until Close
// and returns an error wrapping net.ErrClosed.
func (l *listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.state == lnOpen {
		l.inAccept++
		l.mu.Unlock()
		conn, err := l.Listener.Accept()
		l.mu.Lock()
		l.inAccept--
		if l.inAccept == 0 {
			l.idle.Broadcast()
		}
		open := l.state == lnOpen
		l.mu.Unlock()
		if err == nil || open {
			return conn, err
		}
	} else {
		l.mu.Unlock()
	}
	<-l.stopped
	l.mu.Lock()
	if len(l.pending) > 0 {
		conn := l.pending[0]
		l.pending[0] = nil
		l.pending = l.pending[1:]
		l.mu.Unlock()
		return conn, nil
	}
	// The caller comes back only after it has taken in the connections
	// it was given (http.Server registers each, with its ConnState hook,
	// before it calls Accept again): the controller may settle now.
	l.parked++
	l.mu.Unlock()
	l.c.connsChanged()
	<-l.closed
	l.mu.Lock()
	l.parked--
	l.mu.Unlock()
	return nil, l.opError("accept")
}

// Close closes the listener. After a stop it only releases Accept (the
// socket is already closed) and closes connections taken from the queue
// that no Accept handed over. A second call returns an error wrapping
// net.ErrClosed.
func (l *listener) Close() error {
	l.mu.Lock()
	switch l.state {
	case lnClosed:
		l.mu.Unlock()
		return l.opError("close")
	case lnOpen:
		l.state = lnClosed
		l.mu.Unlock()
		err := l.Listener.Close()
		close(l.stopped)
		close(l.closed)
		l.c.forgetListener(l)
		return err
	case lnStopping:
		l.mu.Unlock()
		<-l.stopped
		l.mu.Lock()
	}
	l.state = lnClosed
	leftover := l.pending
	l.pending = nil
	err := l.closeErr
	l.mu.Unlock()
	for _, conn := range leftover {
		_ = conn.Close()
	}
	close(l.closed)
	l.c.forgetListener(l)
	return err
}

// stop takes the queued and arriving connections into pending until
// none arrived for quiet (or for at most limit), then closes ln; Accept
// hands the connections over. It does nothing unless the listener is
// open.
func (l *listener) stop(quiet, limit time.Duration) {
	l.mu.Lock()
	if l.state != lnOpen {
		l.mu.Unlock()
		return
	}
	l.state = lnStopping
	l.mu.Unlock()
	var conns []net.Conn
	if dl, ok := l.Listener.(deadlineListener); ok && dl.SetDeadline(time.Now()) == nil {
		// The expired deadline sends every Accept inside ln.Accept back
		// to wait for the stop, and no new one enters it. Once they are
		// out, this goroutine is the only one accepting.
		l.mu.Lock()
		for l.inAccept > 0 {
			l.idle.Wait()
		}
		l.mu.Unlock()
		conns = holdArrivals(dl, quiet, limit)
	}
	err := l.Listener.Close()
	l.mu.Lock()
	l.state = lnStopped
	l.pending = conns
	l.closeErr = err
	l.mu.Unlock()
	close(l.stopped)
	l.c.acceptedAtClose(len(conns))
}

// settled reports whether every connection the listener accepted is
// known to its server: it is closed, or it is stopped with nothing left
// to hand over and its server back in Accept, waiting for Close. An
// open listener (not stopped, nothing to wait for) counts as settled.
func (l *listener) settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case lnStopping:
		return false
	case lnStopped:
		return len(l.pending) == 0 && l.parked > 0
	}
	return true
}

func (l *listener) opError(op string) error {
	return &net.OpError{Op: op, Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
}

// deadlineListener is a listener whose Accept can time out, as TCP and
// Unix listeners can.
type deadlineListener interface {
	net.Listener
	SetDeadline(time.Time) error
}

// holdArrivals accepts the connections waiting in ln's queue and those
// arriving after, until none arrived for quiet or limit has passed. None
// is answered before the close, so that no client is sent away to come
// back at the moment of the close.
func holdArrivals(ln deadlineListener, quiet, limit time.Duration) []net.Conn {
	var conns []net.Conn
	end := time.Now().Add(limit)
	for {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if ln.SetDeadline(now.Add(min(quiet, end.Sub(now)))) != nil {
			break
		}
		conn, err := ln.Accept()
		if err != nil {
			break
		}
		conns = append(conns, conn)
	}
	return conns
}

// acceptLimits returns how long a stopping listener waits for arrivals
// to cease (RetryAfter) and at most (half of what remains of the grace
// period).
func (c *Controller) acceptLimits() (quiet, limit time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.RetryAfter, max(0, c.stopAt.Sub(c.cfg.Clock.Now())/2)
}

// stopListeners stops every listener wrapped by c, concurrently, and
// returns when all are closed.
func (c *Controller) stopListeners() {
	quiet, limit := c.acceptLimits()
	c.mu.Lock()
	ls := append([]*listener(nil), c.listeners...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { l.stop(quiet, limit) })
	}
	wg.Wait()
}

// listenersSettled reports whether every wrapped listener is settled.
func (c *Controller) listenersSettled() bool {
	c.mu.Lock()
	ls := append([]*listener(nil), c.listeners...)
	c.mu.Unlock()
	for _, l := range ls {
		if !l.settled() {
			return false
		}
	}
	return true
}

func (c *Controller) forgetListener(l *listener) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.listeners {
		if x == l {
			c.listeners = append(c.listeners[:i], c.listeners[i+1:]...)
			return
		}
	}
}

// acceptedAtClose counts connections a Listener took from its queue.
func (c *Controller) acceptedAtClose(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.counts.AcceptedAtClose += uint64(n)
	c.mu.Unlock()
}
