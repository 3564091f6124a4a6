package drain_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/drain"
)

// rawRequest writes one HTTP/1.1 request on conn.
func rawRequest(conn net.Conn, method, path string) error {
	body := ""
	if method == http.MethodPost {
		body = "order"
	}
	_, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	return err
}

// answer is what a client read back for one request.
type answer struct {
	Status     int
	Marker     string
	Connection string
	RetryAfter bool
	Body       string
	Err        string // a transport error instead of a response
}

func readAnswer(br *bufio.Reader, conn net.Conn) answer {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return answer{Err: errorKind(err)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{Err: errorKind(err)}
	}
	a := answer{Status: res.StatusCode, Marker: res.Header.Get(drain.MarkerHeader), RetryAfter: res.Header.Get("Retry-After") != ""}
	if res.Close { // ReadResponse takes "Connection: close" out of the header
		a.Connection = "close"
	}
	if res.StatusCode == http.StatusOK {
		a.Body = string(b)
	}
	return a
}

var refusal = answer{Status: 503, Marker: drain.MarkerRefused, Connection: "close", RetryAfter: true}

// Connections waiting in the kernel's accept queue when the listener is
// stopped get the refusal, not a reset. Serve is held back by a
// ConnState hook that blocks, so that the connections stay queued.
func TestQueuedConnectionsAreRefused(t *testing.T) {
	const queued = 5
	ctrl := mustNew(t, drain.Config{GracePeriod: 10 * time.Second, RetryAfter: 50 * time.Millisecond})
	hold := make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	srv := &http.Server{
		Handler: ctrl.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				<-hold
			}
		},
	}
	if err := ctrl.Attach(srv); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctrl.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Cleanup(release) // runs first: Close waits for Serve

	// The first connection is accepted; Serve then blocks in its hook.
	// The others, with their requests written, wait in the queue.
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range queued + 1 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		method := http.MethodGet
		if i%2 == 1 {
			method = http.MethodPost
		}
		if err := rawRequest(conn, method, "/"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		readers = append(readers, bufio.NewReader(conn))
	}
	time.Sleep(20 * time.Millisecond) // let the handshakes and requests land

	ctrl.Begin() // no accept grace, nothing admitted: Terminating at once
	// Once the listening socket is closed the port can be bound again,
	// while Serve is still held.
	again, _, err := listenAgain(addr, 10*time.Second)
	if err != nil {
		t.Fatalf("port not released after Begin: %v", err)
	}
	_ = again.Close()
	release()

	var got []answer
	for i, conn := range conns {
		got = append(got, readAnswer(readers[i], conn))
	}
	want := make([]answer, len(conns))
	for i := range want {
		want[i] = refusal
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ctrl.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
	if s := ctrl.Stats(); s.Refused != queued+1 || s.Admitted != 0 || s.AcceptedAtClose != queued {
		t.Errorf("stats %+v, want %d refused (%d taken from the queue) and none admitted", s, queued+1, queued)
	}
}

// The wrapper's own contract, without a server.
func TestListenerAcceptAndClose(t *testing.T) {
	t.Run("closed before any stop: closes at once", func(t *testing.T) {
		ctrl := mustNew(t, drain.Config{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wl := ctrl.Listener(ln)
		accepted := make(chan error, 1)
		go func() {
			_, err := wl.Accept()
			accepted <- err
		}()
		if err := wl.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := <-accepted; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
		if err := wl.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close: %v, want net.ErrClosed", err)
		}
		if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			t.Error("dial succeeded after Close")
		}
	})
	t.Run("stopped at terminating: hands queued connections over, then waits for Close", func(t *testing.T) {
		ctrl := mustNew(t, drain.Config{RetryAfter: 20 * time.Millisecond})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wl := ctrl.Listener(ln)
		for range 3 {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
		time.Sleep(10 * time.Millisecond)
		// Without an attached server the controller stops at once; a
		// Listener created after Terminating is stopped on creation.
		ctrl.Force()
		late := ctrl.Listener(ln)
		for i := range 3 {
			conn, err := late.Accept()
			if err != nil {
				t.Fatalf("Accept %d: %v", i, err)
			}
			_ = conn.Close()
		}
		accepted := make(chan error, 1)
		go func() {
			_, err := late.Accept()
			accepted <- err
		}()
		select {
		case err := <-accepted:
			t.Fatalf("Accept returned %v before Close", err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := late.Close(); err != nil {
			t.Errorf("Close after the stop: %v", err)
		}
		if err := <-accepted; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
		_ = wl.Close()
		if got := ctrl.Stats().AcceptedAtClose; got != 3 {
			t.Errorf("AcceptedAtClose = %d, want 3", got)
		}
	})
}

// Hijacked connections do not outlive Stopped: the controller closes
// them, whether the handler still runs or handed the connection on, on
// an attached server (seen through ConnState, exempt requests included)
// or on one that only uses the Middleware.
func TestHijackedConnectionsClosedAtStopped(t *testing.T) {
	tests := []struct {
		name    string
		attach  bool
		class   drain.Class
		returns bool // the handler returns after hijacking
	}{
		{"attached, handler returns", true, drain.Wait, true},
		{"attached, handler keeps running", true, drain.Wait, false},
		{"attached, exempt request", true, drain.Exempt, true},
		{"middleware only, handler returns", false, drain.Wait, true},
		{"middleware only, handler keeps running", false, drain.Wait, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctrl := mustNew(t, drain.Config{GracePeriod: time.Second, Classify: func(*http.Request) drain.Class { return tt.class }})
			release := make(chan struct{})
			defer close(release)
			var keep []net.Conn // referenced, so that nothing but the controller closes them
			var mu sync.Mutex
			srv := &http.Server{Handler: ctrl.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("Hijack: %v", err)
					return
				}
				mu.Lock()
				keep = append(keep, conn)
				mu.Unlock()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
				_ = brw.Flush()
				if !tt.returns {
					<-release // ignores its context, like a careless websocket loop
				}
			}))}
			var url string
			if tt.attach {
				url, _ = serveAttached(t, ctrl, srv)
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = srv.Serve(ln) }()
				t.Cleanup(func() { _ = srv.Close() })
				url = "http://" + ln.Addr().String()
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v, %v", res, err)
			}

			ctrl.Begin()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := ctrl.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
				t.Errorf("read on the hijacked connection after Stopped: %v, want EOF", err)
			}
		})
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
