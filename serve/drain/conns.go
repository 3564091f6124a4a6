package drain

import (
	"net"
	"net/http"
	"reflect"
	"sync/atomic"
	"syscall"
	"time"
)

// connEntry is the last known state of one connection of an attached
// server.
type connEntry struct{ state atomic.Int32 }

// connState is installed as (part of) the ConnState hook of attached
// servers. It keeps the set of their open connections with their
// states, and records the connections their handlers hijack. It takes
// no lock on the path of every request (StateActive, StateIdle).
func (c *Controller) connState(conn net.Conn, st http.ConnState) {
	if conn == nil || !reflect.TypeOf(conn).Comparable() {
		return // cannot be a map key; Shutdown still handles it
	}
	switch st {
	case http.StateNew:
		e := new(connEntry)
		e.state.Store(int32(st))
		c.conns.Store(conn, e)
		c.connCount.Add(1)
	case http.StateActive, http.StateIdle:
		if e, ok := c.conns.Load(conn); ok {
			e.(*connEntry).state.Store(int32(st))
		}
	case http.StateHijacked, http.StateClosed:
		if _, ok := c.conns.LoadAndDelete(conn); ok {
			c.connCount.Add(-1)
		}
		if st == http.StateHijacked {
			c.trackHijacked(conn)
		}
	}
	c.connsChanged()
}

// connsChanged wakes settle, if it is waiting, to look again.
func (c *Controller) connsChanged() {
	if c.settling.Load() {
		select {
		case c.connEvent <- struct{}{}:
		default:
		}
	}
}

// settle runs at Terminating, after the listeners are stopped and before
// http.Server.Shutdown, which drops a request it reads once it has begun
// and closes idle connections at once. It waits until every connection
// of the attached servers has closed, each request on them being
// answered with the refusal and Connection: close, and every wrapped
// listener's server has taken in what the listener handed it; or until
// RetryAfter has passed (a refused client comes back after Retry-After,
// possibly on a connection it keeps open), bounded by the deadline. It
// then closes the connections still idle or unused, and returns.
func (c *Controller) settle(deadline time.Time) {
	clk := c.cfg.Clock
	end := clk.Now().Add(c.cfg.RetryAfter)
	if deadline.Before(end) {
		end = deadline
	}
	c.settling.Store(true)
	wake := make(chan struct{}, 1)
	stop := clk.AfterFunc(end.Sub(clk.Now()), func() { wake <- struct{}{} })
	for (c.connCount.Load() > 0 || !c.listenersSettled()) && clk.Now().Before(end) {
		select {
		case <-c.connEvent:
		case <-wake:
		}
	}
	stop()
	c.settling.Store(false)

	c.conns.Range(func(k, v any) bool {
		if st := http.ConnState(v.(*connEntry).state.Load()); st == http.StateNew || st == http.StateIdle {
			go func() { _ = k.(net.Conn).Close() }()
		}
		return true
	})
}

// trackHijacked records a connection taken over by a handler, to be
// closed at Stopped; from Stopped on, it closes it at once.
func (c *Controller) trackHijacked(conn net.Conn) {
	c.mu.Lock()
	if c.st == Stopped {
		c.mu.Unlock()
		closeConn(conn)
		return
	}
	if len(c.hijacked) >= c.sweepAt {
		// Forget the connections their handlers have closed, so that a
		// long-running server does not accumulate them.
		live := c.hijacked[:0]
		for _, h := range c.hijacked {
			if !connClosed(h) {
				live = append(live, h)
			}
		}
		clear(c.hijacked[len(live):])
		c.hijacked = live
		c.sweepAt = max(64, 2*len(live))
	}
	c.hijacked = append(c.hijacked, conn)
	c.mu.Unlock()
}

// connClosed reports whether conn is known to be closed. Connections
// that do not expose their descriptor are reported open.
func connClosed(conn net.Conn) bool {
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	return rc.Control(func(uintptr) {}) != nil
}

// closeConn closes conn without waiting on its peer: a TLS connection is
// closed underneath, with no close_notify.
func closeConn(conn net.Conn) {
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn()
	}
	_ = conn.Close()
}
