package drain

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

const refusalBody = "upshift: the server is draining; retry the request\n"

// Middleware wraps next with admission control and in-flight tracking.
//
// For every request it calls Classify once. Exempt requests go straight
// to next. Any other request is, in one step under the controller's
// lock, either refused (the controller is Draining or later) or admitted
// and counted. A refused request gets 503 with Retry-After,
// Connection: close and "Upshift-Drain: refused"; next never sees it.
//
// An admitted request runs with a context the drain can cancel: at
// Draining for CancelOnDrain, at Terminating for every class. If the
// drain cancelled it while the handler ran, the response is finished
// for the client: before any header was written it becomes a 503 with
// "Upshift-Drain: cancelled"; after, it ends with the trailer
// "Upshift-Drain: resumable" (only visible on chunked HTTP/1.1 and
// HTTP/2 responses). A handler that returns before any cancellation is
// counted Completed and its response is left untouched, except that a
// response whose headers go out from Unready on carries Connection:
// close (unless it is a 101 Switching Protocols).
//
// A nil next is treated as http.NotFoundHandler(). The ResponseWriter
// passed to next supports http.Flusher,
// http.Hijacker and http.ResponseController (through Unwrap). A
// connection hijacked through it is closed when the controller reaches
// Stopped.
func (c *Controller) Middleware(next http.Handler) http.Handler {
	c.init()
	if next == nil {
		next = http.NotFoundHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		class := Wait
		if c.cfg.Classify != nil {
			class = c.cfg.Classify(r)
			if class != CancelOnDrain && class != Exempt {
				class = Wait
			}
		}
		if class == Exempt {
			next.ServeHTTP(w, r)
			return
		}
		// Decide whether this request needs its own cancellable context:
		// Wait requests on an attached server already descend from the
		// controller's terminating context.
		attached := r.Context().Value(baseKey{}) == c
		derive := class == CancelOnDrain || !attached
		t := &tracked{c: c, w: w, class: class, attached: attached}
		var ctx context.Context
		if derive {
			ctx, t.cancel = context.WithCancelCause(r.Context())
		}

		c.mu.Lock()
		if c.st >= Draining {
			c.counts.Refused++
			c.mu.Unlock()
			if t.cancel != nil {
				t.cancel(nil)
			}
			c.writeUnavailable(w, MarkerRefused)
			return
		}
		c.counts.Admitted++
		c.inflight++
		if derive {
			t.next = c.head
			if c.head != nil {
				c.head.prev = t
			}
			c.head = t
		}
		c.mu.Unlock()

		if derive {
			r = r.WithContext(ctx)
		}
		returned := false
		defer func() { c.finish(t, returned) }()
		next.ServeHTTP(t, r)
		returned = true
	})
}

// finish accounts for a handler that returned (or panicked, when
// returned is false) and completes a cancelled response.
func (c *Controller) finish(t *tracked, returned bool) {
	c.mu.Lock()
	if t.cancel != nil {
		if t.prev != nil {
			t.prev.next = t.next
		} else {
			c.head = t.next
		}
		if t.next != nil {
			t.next.prev = t.prev
		}
		t.prev, t.next = nil, nil
	}
	c.inflight--
	cancelled := c.st >= Terminating || (t.class == CancelOnDrain && c.st >= Draining)
	if cancelled {
		c.counts.Cancelled++
	} else {
		c.counts.Completed++
	}
	c.requestDone(c.cfg.Clock.Now())
	c.unlock()

	if cancelled && returned && !t.hijacked {
		if t.wroteHeader {
			t.w.Header().Set(http.TrailerPrefix+MarkerHeader, MarkerResumable)
		} else {
			c.writeUnavailable(t.w, MarkerCancelled)
		}
	}
	if t.cancel != nil {
		t.cancel(nil)
	}
}

func (c *Controller) writeUnavailable(w http.ResponseWriter, marker string) {
	h := w.Header()
	h.Set("Retry-After", c.retryAfter)
	h.Set("Connection", "close")
	h.Set(MarkerHeader, marker)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(refusalBody))
}

// tracked is the ResponseWriter handed to an admitted handler and the
// entry in the controller's list of individually cancellable requests.
type tracked struct {
	c           *Controller
	w           http.ResponseWriter
	class       Class
	cancel      context.CancelCauseFunc // nil when the context is not derived
	prev, next  *tracked                // list links, guarded by c.mu
	attached    bool                    // served by an attached server, whose ConnState hook sees hijacks
	wroteHeader bool
	hijacked    bool
}

func (t *tracked) Header() http.Header { return t.w.Header() }

func (t *tracked) WriteHeader(code int) {
	if !t.wroteHeader && (code >= 200 || code == http.StatusSwitchingProtocols) {
		t.wroteHeader = true
		if code != http.StatusSwitchingProtocols && t.c.State() >= Unready {
			// Do not invite another request on this connection: the
			// client reconnects (elsewhere, once endpoints are updated)
			// instead of finding it closed under its next request.
			t.w.Header().Set("Connection", "close")
		}
	}
	t.w.WriteHeader(code)
}

func (t *tracked) Write(b []byte) (int, error) {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	return t.w.Write(b)
}

// Flush implements http.Flusher.
func (t *tracked) Flush() { _ = t.FlushError() }

// FlushError flushes like http.ResponseController.Flush.
func (t *tracked) FlushError() error {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	switch f := t.w.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.ErrNotSupported
}

// Hijack implements http.Hijacker when the underlying writer does.
func (t *tracked) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(t.w).Hijack()
	if err == nil {
		t.hijacked = true
		if !t.attached {
			t.c.trackHijacked(conn)
		}
	}
	return conn, rw, err
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (t *tracked) Unwrap() http.ResponseWriter { return t.w }
