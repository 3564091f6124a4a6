// Command drain shows a zero-error restart on one port: a server (v1)
// under load from a few clients is drained with serve/drain and replaced
// by v2 on the same address, while the clients, using serve/retry, see
// no error and no order is executed twice.
//
//	go run ./examples/drain
//
// It runs on 127.0.0.1 only, prints what happens, and exits 0 within a
// few seconds (1 if any client saw an error).
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/upshift-dev/upshift/serve/drain"
	"github.com/upshift-dev/upshift/serve/retry"
)

func main() {
	rep, err := run(os.Stdout, 4, 60)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drain example:", err)
		os.Exit(1)
	}
	if rep.Errors > 0 || rep.Duplicates > 0 {
		os.Exit(1)
	}
}

// report is what run observed.
type report struct {
	Requests, Errors, Attempts int
	ByVersion                  map[string]int // successful responses per server version
	Orders, Duplicates         int            // distinct orders executed; orders executed more than once
	Old, New                   drain.Stats
}

// backend is one version of the server.
type backend struct {
	version string
	ctrl    *drain.Controller
	srv     *http.Server
	served  chan error
}

// orderBook records executions per Idempotency-Key across versions.
type orderBook struct {
	mu   sync.Mutex
	seen map[string]int
}

func (o *orderBook) execute(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[key]++
}

func startBackend(version string, ln net.Listener, book *orderBook) (*backend, error) {
	ctrl, err := drain.New(drain.Config{
		GracePeriod: 10 * time.Second,
		AcceptGrace: 50 * time.Millisecond, // a load balancer would stop routing here meanwhile
		Classify: func(r *http.Request) drain.Class {
			if r.URL.Path == "/readyz" {
				return drain.Exempt
			}
			return drain.Wait
		},
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", ctrl.ReadinessHandler())
	mux.HandleFunc("GET /price", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		w.Header().Set("X-Version", version)
		_, _ = io.WriteString(w, "42")
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		book.execute(r.Header.Get(retry.IdempotencyKeyHeader))
		time.Sleep(5 * time.Millisecond)
		w.Header().Set("X-Version", version)
		w.WriteHeader(http.StatusCreated)
	})
	b := &backend{version: version, ctrl: ctrl, served: make(chan error, 1),
		srv: &http.Server{Handler: ctrl.Middleware(mux), ReadHeaderTimeout: 5 * time.Second}}
	if err := ctrl.Attach(b.srv); err != nil {
		return nil, err
	}
	// The wrapped listener answers, rather than resets, the connections
	// still queued when v1 closes it.
	go func() { b.served <- b.srv.Serve(ctrl.Listener(ln)) }()
	return b, nil
}

// listenAgain binds addr once the previous listener has let go of it.
func listenAgain(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countingTransport counts the attempts that reach the network.
type countingTransport struct {
	base *http.Transport
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// run starts v1, runs `clients` clients doing `each` requests apiece,
// replaces v1 by v2 on the same port a third of the way through, and
// reports.
func run(out io.Writer, clients, each int) (*report, error) {
	book := &orderBook{seen: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	v1, err := startBackend("v1", ln, book)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "v1 serving on %s\n", addr)

	wire := &countingTransport{base: &http.Transport{MaxIdleConnsPerHost: clients}}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &retry.Transport{
		Base:               wire,
		BaseDelay:          5 * time.Millisecond,
		MaxDelay:           50 * time.Millisecond,
		MaxRetryAfter:      25 * time.Millisecond, // the server says 1s; a restart on one host is faster
		MaxAttempts:        100,
		DeadBackendTimeout: 5 * time.Second,
		Budget:             &retry.Budget{MaxTokens: 500, TokenRatio: 1},
	}}

	rep := &report{Requests: clients * each, ByVersion: map[string]int{}}
	var (
		mu   sync.Mutex
		done atomic.Int64
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				var req *http.Request
				if i%3 == 2 {
					key := fmt.Sprintf("order-%d-%d", c, i)
					req, _ = http.NewRequest(http.MethodPost, "http://"+addr+"/order", bytes.NewReader([]byte(key)))
					req.Header.Set(retry.IdempotencyKeyHeader, key)
				} else {
					req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/price", nil)
				}
				res, err := client.Do(req)
				ok := err == nil && res.StatusCode < 300
				version := ""
				if err == nil {
					version = res.Header.Get("X-Version")
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
				}
				mu.Lock()
				if ok {
					rep.ByVersion[version]++
				} else {
					rep.Errors++
					if err == nil {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
					fmt.Fprintf(out, "client %d: %s %s: %v\n", c, req.Method, req.URL.Path, err)
				}
				mu.Unlock()
				done.Add(1)
			}
		})
	}

	// The upgrade: once a third of the requests are done, drain v1 and
	// start v2 on the same port as soon as v1 lets go of it.
	for done.Load() < int64(rep.Requests/3) {
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintln(out, "upgrade: v1 begins to drain (readiness fails, then new requests are refused)")
	v1.ctrl.Begin()
	ln2, err := listenAgain(addr)
	if err != nil {
		v1.ctrl.Force()
		wg.Wait()
		return nil, fmt.Errorf("re-listen on %s: %w", addr, err)
	}
	v2, err := startBackend("v2", ln2, book)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "v2 serving on %s\n", addr)

	wg.Wait()
	wire.base.CloseIdleConnections() // the clients are done; hang up
	<-v1.ctrl.Done()
	<-v1.served
	v2.ctrl.Begin()
	<-v2.ctrl.Done()
	<-v2.served

	rep.Attempts = int(wire.n.Load())
	rep.Old, rep.New = v1.ctrl.Stats(), v2.ctrl.Stats()
	for _, n := range book.seen {
		rep.Orders++
		if n > 1 {
			rep.Duplicates++
		}
	}
	fmt.Fprintf(out, "v1 stopped: admitted %d, completed %d, cancelled %d, refused %d (%d connections taken from its accept queue)\n",
		rep.Old.Admitted, rep.Old.Completed, rep.Old.Cancelled, rep.Old.Refused, rep.Old.AcceptedAtClose)
	fmt.Fprintf(out, "clients: %d requests (%d answered by v1, %d by v2), %d attempts on the wire, %d errors\n",
		rep.Requests, rep.ByVersion["v1"], rep.ByVersion["v2"], rep.Attempts, rep.Errors)
	fmt.Fprintf(out, "orders: %d executed, %d executed twice\n", rep.Orders, rep.Duplicates)
	return rep, nil
}
