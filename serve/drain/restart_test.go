package drain_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/serve/drain"
	"github.com/upshift-dev/upshift/serve/retry"
)

// restartBackend is one generation of the server in the restart test.
type restartBackend struct {
	name   string
	ctrl   *drain.Controller
	srv    *http.Server
	served atomic.Int64
	done   chan error
}

// ledger counts, across every server generation, how many times each
// non-idempotent request (by Idempotency-Key) was executed.
type ledger struct {
	mu         sync.Mutex
	executions map[string]int
}

func (l *ledger) record(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.executions[key]++
}

func (l *ledger) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.executions[key]
}

func startBackend(t *testing.T, name string, ln net.Listener, led *ledger) *restartBackend {
	t.Helper()
	b := &restartBackend{name: name, done: make(chan error, 1)}
	ctrl, err := drain.New(drain.Config{
		GracePeriod: 20 * time.Second,
		AcceptGrace: 30 * time.Millisecond,
		RetryAfter:  time.Second, // clients clamp it with MaxRetryAfter
		Classify: func(r *http.Request) drain.Class {
			if r.URL.Path == "/readyz" {
				return drain.Exempt
			}
			return drain.Wait
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.ctrl = ctrl
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", ctrl.ReadinessHandler())
	mux.HandleFunc("GET /item", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond) // some work, so that requests are in flight at the drain
		b.served.Add(1)
		_, _ = io.WriteString(w, "item")
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		key := r.Header.Get(retry.IdempotencyKeyHeader)
		if err != nil || key == "" || string(body) != "order "+key {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		led.record(key)
		time.Sleep(8 * time.Millisecond) // long enough for the drain to refuse newcomers meanwhile
		b.served.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created "+key)
	})
	b.srv = &http.Server{Handler: ctrl.Middleware(mux), ReadHeaderTimeout: 10 * time.Second}
	if err := ctrl.Attach(b.srv); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.srv.Serve(ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

// listenAgain binds addr again, retrying while the old socket lets go.
func listenAgain(addr string, within time.Duration) (net.Listener, int, error) {
	deadline := time.Now().Add(within)
	for tries := 1; ; tries++ {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, tries, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return nil, tries, err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countingRT counts attempts reaching the network.
type countingRT struct {
	base     http.RoundTripper
	attempts atomic.Int64
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	return c.base.RoundTrip(r)
}

// TestRestartOnLoopback replaces a live server by a new one on the same
// port while 8 clients keep sending GETs and keyed POSTs through the
// retry transport. The old server drains (refusing new work with the
// marker, finishing what it admitted), stops and closes its listener;
// the new one binds the same port. No client may see an error, no
// order may execute twice, and every admitted request must complete.
func TestRestartOnLoopback(t *testing.T) {
	const (
		clients   = 8
		perClient = 80
		total     = clients * perClient
	)
	led := &ledger{executions: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	old := startBackend(t, "old", ln, led)

	counter := &countingRT{base: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	rt := &retry.Transport{
		Base:               counter,
		MaxAttempts:        1000,
		BaseDelay:          2 * time.Millisecond,
		MaxDelay:           25 * time.Millisecond,
		MaxRetryAfter:      20 * time.Millisecond,
		MaxElapsed:         30 * time.Second,
		DeadBackendTimeout: 15 * time.Second,
		Budget:             &retry.Budget{MaxTokens: 2000, TokenRatio: 1},
	}
	client := &http.Client{Transport: rt, Timeout: 60 * time.Second}

	var (
		succeeded atomic.Int64
		errMu     sync.Mutex
		errs      []error
		wg        sync.WaitGroup
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		errs = append(errs, err)
	}
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				var req *http.Request
				want := http.StatusOK
				if i%2 == 0 {
					req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/item", nil)
				} else {
					key := fmt.Sprintf("c%d-%d", c, i)
					req, _ = http.NewRequest(http.MethodPost, "http://"+addr+"/order", bytes.NewReader([]byte("order "+key)))
					req.Header.Set(retry.IdempotencyKeyHeader, key)
					want = http.StatusCreated
				}
				res, err := client.Do(req)
				if err != nil {
					fail(err)
					continue
				}
				_, rerr := io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				if res.StatusCode != want || rerr != nil {
					fail(fmt.Errorf("%s %s: status %d, body error %v", req.Method, req.URL.Path, res.StatusCode, rerr))
					continue
				}
				succeeded.Add(1)
			}
		})
	}

	// Restart once a quarter of the work is done, under full load.
	waitUntil(t, 30*time.Second, func() bool { return succeeded.Load() >= total/4 })
	restartAt := time.Now()
	old.ctrl.Begin()
	// The old server closes its listener when it reaches Terminating (its
	// admitted requests are done); bind the port as soon as it is free.
	ln2, tries, err := listenAgain(addr, 10*time.Second)
	if err != nil {
		t.Fatalf("re-listen on %s: %v", addr, err)
	}
	gap := time.Since(restartAt)
	fresh := startBackend(t, "new", ln2, led)
	if err := <-old.done; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("old Serve: %v", err)
	}

	wg.Wait()
	waitCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// http.Server.Shutdown counts a connection that never sent a request
	// as idle only after 5s, and the client's transport may hold spare
	// connections it dialled but never used. The clients are done: let
	// them hang up, as a client process does when it exits.
	counter.base.(*http.Transport).CloseIdleConnections()
	if err := old.ctrl.Wait(waitCtx); err != nil {
		t.Fatalf("old server did not stop: %v", err)
	}
	fresh.ctrl.Begin()
	if err := fresh.ctrl.Wait(waitCtx); err != nil {
		t.Fatalf("new server did not stop: %v", err)
	}

	// The figures.
	oldStats, newStats := old.ctrl.Stats(), fresh.ctrl.Stats()
	led.mu.Lock()
	duplicates, orders := 0, 0
	for _, n := range led.executions {
		orders++
		if n > 1 {
			duplicates++
		}
	}
	led.mu.Unlock()
	attempts := counter.attempts.Load()
	t.Logf("restart on %s: %d clients x %d requests = %d; %d succeeded, %d client-visible errors", addr, clients, perClient, total, succeeded.Load(), len(errs))
	t.Logf("attempts on the wire %d (%d retries); old served %d, refused %d; new served %d", attempts, attempts-total, old.served.Load(), oldStats.Refused, fresh.served.Load())
	t.Logf("old: admitted %d completed %d cancelled %d abandoned %d; new: admitted %d completed %d cancelled %d abandoned %d",
		oldStats.Admitted, oldStats.Completed, oldStats.Cancelled, oldStats.InFlight, newStats.Admitted, newStats.Completed, newStats.Cancelled, newStats.InFlight)
	t.Logf("orders executed %d (distinct keys), duplicated %d; Begin -> new listener %v (bind tries %d)", orders, duplicates, gap.Round(time.Millisecond), tries)

	for i, err := range errs {
		if i == 5 {
			break
		}
		t.Errorf("client-visible error: %v", err)
	}
	if len(errs) != 0 || succeeded.Load() != total {
		t.Errorf("%d errors, %d of %d succeeded; want none and all", len(errs), succeeded.Load(), total)
	}
	if duplicates != 0 || orders != total/2 {
		t.Errorf("%d duplicated orders, %d executed; want 0 and %d", duplicates, orders, total/2)
	}
	for _, s := range []drain.Stats{oldStats, newStats} {
		if s.Admitted != s.Completed || s.Cancelled != 0 || s.InFlight != 0 {
			t.Errorf("admitted requests not all completed: %+v", s)
		}
	}
	if old.served.Load()+fresh.served.Load() != int64(total) {
		t.Errorf("served %d + %d, want %d", old.served.Load(), fresh.served.Load(), total)
	}
	if old.served.Load() == 0 || fresh.served.Load() == 0 {
		t.Errorf("the restart did not happen under load: old served %d, new %d", old.served.Load(), fresh.served.Load())
	}
}

func waitUntil(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(time.Millisecond)
	}
}
