package retry_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/upshift-dev/upshift/serve/retry"
)

// A POST reaches a server that is draining: the refusal is marked, so
// the transport knows nothing ran and sends the order again.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set(retry.MarkerHeader, retry.MarkerRefused)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created %s", body)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retry.Transport{
		MaxRetryAfter: 10 * time.Millisecond, // keep the example fast
		Budget:        &retry.Budget{},
	}}
	res, err := client.Post(srv.URL, "text/plain", bytes.NewReader([]byte("order-42")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Printf("%d %s after %d attempts\n", res.StatusCode, body, calls.Load())
	// Output: 201 created order-42 after 2 attempts
}

// A plain 503 to a POST without an idempotency key is the server's
// answer, not a retry: the transport returns it.
func ExampleTransport_notSafe() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &retry.Transport{BaseDelay: time.Millisecond, MaxAttempts: 3}}

	res, err := client.Post(srv.URL, "text/plain", nil)
	if err == nil {
		res.Body.Close()
		fmt.Println("POST:", res.StatusCode)
	}
	_, err = client.Get(srv.URL)
	var rerr *retry.Error
	if errors.As(err, &rerr) {
		fmt.Println("GET:", rerr.Reason, "- attempts", rerr.Attempts, "last status", rerr.LastStatus)
	}
	// Output:
	// POST: 503
	// GET: retry: attempts exhausted - attempts 3 last status 503
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 01 Mar 2026 12:00:30 GMT", "Sunday, 01-Mar-26 12:01:00 GMT", "Sun Mar  1 12:00:05 2026", "soon"} {
		d, err := retry.ParseRetryAfter(v, now)
		fmt.Println(d, err)
	}
	// Output:
	// 2m0s <nil>
	// 30s <nil>
	// 1m0s <nil>
	// 5s <nil>
	// 0s retry: malformed Retry-After: "soon"
}
