package drain_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/serve/drain"
	"github.com/upshift-dev/upshift/serve/retry"
)

// requestIDHeader identifies a POST in the server's ledger. It is not an
// idempotency key: the server does not deduplicate by it, and
// serve/retry does not treat it as one.
const requestIDHeader = "X-Request-Id"

// generation is one server process in a chain of same-port restarts.
type generation struct {
	ctrl   *drain.Controller
	srv    *http.Server
	served chan error
}

func startGeneration(t *testing.T, ln net.Listener, exec *ledger) *generation {
	t.Helper()
	ctrl := mustNew(t, drain.Config{
		GracePeriod: 20 * time.Second,
		AcceptGrace: 200 * time.Millisecond,
		RetryAfter:  100 * time.Millisecond, // advertised as 1s; clients cap it at 20ms
		Classify: func(r *http.Request) drain.Class {
			if r.URL.Path == "/readyz" {
				return drain.Exempt
			}
			return drain.Wait
		},
	})
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", ctrl.ReadinessHandler())
	mux.HandleFunc("GET /item", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "item")
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		id := r.Header.Get(requestIDHeader)
		if err != nil || id == "" || string(body) != "order "+id {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		exec.record(id)
		time.Sleep(3 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	g := &generation{ctrl: ctrl, served: make(chan error, 1),
		srv: &http.Server{Handler: ctrl.Middleware(mux), ReadHeaderTimeout: 10 * time.Second}}
	if err := ctrl.Attach(g.srv); err != nil {
		t.Fatal(err)
	}
	wrapped := ctrl.Listener(ln)
	go func() { g.served <- g.srv.Serve(wrapped) }()
	t.Cleanup(func() { _ = g.srv.Close() })
	return g
}

// wireLog classifies every attempt that the retry transport makes.
type wireLog struct {
	base *http.Transport

	mu       sync.Mutex
	attempts int
	dial     int            // connection refused while dialling: nothing sent
	broken   map[string]int // "METHOD on a fresh|reused connection: kind" for any other error
}

func (w *wireLog) RoundTrip(r *http.Request) (*http.Response, error) {
	var reused atomic.Bool
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
	}))
	res, err := w.base.RoundTrip(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.attempts++
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			w.dial++
		} else {
			conn := "fresh"
			if reused.Load() {
				conn = "reused"
			}
			w.broken[r.Method+" on a "+conn+" connection: "+errorKind(err)]++
		}
	}
	return res, err
}

// errorKind shortens a transport error to its kind (EOF, reset, ...).
func errorKind(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset by peer", "broken pipe", "server closed idle connection", "unexpected EOF", "EOF"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

// TestRepeatedDrainsLoseNothing replaces a server on one port again and
// again while 16 clients send, through serve/retry, POSTs without an
// Idempotency-Key and GETs. Every drain refuses with the marker rather
// than resetting a connection: no client sees an error, no attempt
// fails after its connection was obtained (only refused dials are
// allowed), and every POST that succeeded ran exactly once.
func TestRepeatedDrainsLoseNothing(t *testing.T) {
	const (
		clients = 16
		drains  = 4
	)
	exec := &ledger{executions: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	gens := []*generation{startGeneration(t, ln, exec)}

	wire := &wireLog{base: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}, broken: map[string]int{}}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &retry.Transport{
		Base:               wire,
		MaxAttempts:        1000,
		BaseDelay:          2 * time.Millisecond,
		MaxDelay:           25 * time.Millisecond,
		MaxRetryAfter:      20 * time.Millisecond,
		MaxElapsed:         30 * time.Second,
		DeadBackendTimeout: 15 * time.Second,
		Budget:             &retry.Budget{MaxTokens: 1e6, TokenRatio: 1},
	}}

	var (
		stop      atomic.Bool
		succeeded atomic.Int64
		errMu     sync.Mutex
		visible   = map[string][]string{} // method -> client-visible errors
		executed  []string                // POSTs that succeeded
		wg        sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				var req *http.Request
				want := http.StatusOK
				if i%2 == 0 {
					id := fmt.Sprintf("c%d-%d", c, i)
					req, _ = http.NewRequest(http.MethodPost, "http://"+addr+"/order", bytes.NewReader([]byte("order "+id)))
					req.Header.Set(requestIDHeader, id)
					want = http.StatusCreated
				} else {
					req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/item", nil)
				}
				res, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
					if err == nil && res.StatusCode != want {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				errMu.Lock()
				if err != nil {
					visible[req.Method] = append(visible[req.Method], err.Error())
				} else if req.Method == http.MethodPost {
					executed = append(executed, req.Header.Get(requestIDHeader))
				}
				errMu.Unlock()
				if err == nil {
					succeeded.Add(1)
				}
			}
		})
	}

	for range drains {
		// Each generation serves under full load before it is replaced.
		mark := succeeded.Load()
		waitUntil(t, 30*time.Second, func() bool { return succeeded.Load() >= mark+300 })
		old := gens[len(gens)-1]
		old.ctrl.Begin()
		next, _, err := listenAgain(addr, 15*time.Second)
		if err != nil {
			t.Fatalf("re-listen on %s: %v", addr, err)
		}
		gens = append(gens, startGeneration(t, next, exec))
	}
	mark := succeeded.Load()
	waitUntil(t, 30*time.Second, func() bool { return succeeded.Load() >= mark+300 })
	stop.Store(true)
	wg.Wait()
	wire.base.CloseIdleConnections()
	last := gens[len(gens)-1]
	last.ctrl.Begin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, g := range gens {
		if err := g.ctrl.Wait(ctx); err != nil {
			t.Fatalf("generation %d did not stop: %v", i, err)
		}
	}

	var refused, queued uint64
	for _, g := range gens {
		refused += g.ctrl.Stats().Refused
		queued += g.ctrl.Stats().AcceptedAtClose
	}
	wire.mu.Lock()
	broken := wire.broken
	t.Logf("%d drains, %d clients: %d requests succeeded; %d attempts, %d refused by the drain, %d connections taken from an accept queue, %d refused dials",
		drains, clients, succeeded.Load(), wire.attempts, refused, queued, wire.dial)
	wire.mu.Unlock()

	errMu.Lock()
	defer errMu.Unlock()
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		if n := len(visible[m]); n != 0 {
			t.Errorf("%s: %d client-visible errors in %d drains (%.1f per drain), e.g. %q",
				m, n, drains, float64(n)/drains, visible[m][0])
		}
	}
	kinds := make([]string, 0, len(broken))
	for k, n := range broken {
		kinds = append(kinds, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(kinds)
	if len(kinds) != 0 {
		t.Errorf("attempts that failed after their connection was obtained (EOF/reset): %v", kinds)
	}
	dup := 0
	for _, id := range executed {
		if n := exec.count(id); n != 1 {
			dup++
			if dup <= 3 {
				t.Errorf("POST %s succeeded but ran %d times", id, n)
			}
		}
	}
}
