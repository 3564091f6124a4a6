package retry_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/retry"
)

// An Idempotency-Key header whose value is empty or only spaces is no
// key: the request is as unsafe to repeat as one without the header.
func TestBlankIdempotencyKeyIsNoKey(t *testing.T) {
	headers := []struct {
		name   string
		header http.Header
	}{
		{"empty", http.Header{"Idempotency-Key": {""}}},
		{"spaces and tab", http.Header{"Idempotency-Key": {" \t "}}},
		{"empty X- header", http.Header{"X-Idempotency-Key": {""}}},
		{"both blank", http.Header{"Idempotency-Key": {" "}, "X-Idempotency-Key": {"\t"}}},
		{"no value at all", http.Header{"Idempotency-Key": nil}},
		{"blank first value", http.Header{"Idempotency-Key": {"", "k-1"}}},
	}
	outcomes := []struct {
		name         string
		script       []outcome
		wantAttempts int
		wantStatus   int   // 0 for an error
		wantReason   error // for an error
	}{
		{"broken connection is not retried", []outcome{brokenConn, ok200}, 1, 0, retry.ErrNotSafe},
		{"plain 503 is returned", []outcome{plain503, ok200}, 1, 503, nil},
		{"cancelled 503 is returned", []outcome{cancelled503, ok200}, 1, 503, nil},
		{"drain refusal is retried", []outcome{refused503, ok200}, 2, 200, nil},
		{"connection refused is retried", []outcome{dialRefused, ok200}, 2, 200, nil},
	}
	for _, h := range headers {
		for _, o := range outcomes {
			t.Run(h.name+"/"+o.name, func(t *testing.T) {
				clk := newFakeClock()
				var sent []http.Header
				base := &fakeBase{clk: clk, script: o.script, onAttempt: func(r *http.Request) { sent = append(sent, r.Header.Clone()) }}
				rt := &retry.Transport{Base: base, MaxAttempts: 5, Clock: clk, Jitter: half}
				req := newRequest(t, http.MethodPost, []byte("order"), true, false)
				for k, v := range h.header {
					req.Header[k] = v
				}
				before := req.Header.Clone()
				res, err := rt.RoundTrip(req)
				if n := len(base.records()); n != o.wantAttempts {
					t.Errorf("attempts = %d, want %d", n, o.wantAttempts)
				}
				if o.wantStatus != 0 {
					if err != nil || res.StatusCode != o.wantStatus {
						t.Fatalf("got %v, %v; want status %d", res, err, o.wantStatus)
					}
					_ = res.Body.Close()
				} else if !errors.Is(err, o.wantReason) {
					t.Fatalf("got %v, %v; want reason %v", res, err, o.wantReason)
				}
				// The base transport must not see the blank header either:
				// net/http replays a request carrying it on a reused
				// connection, whatever its value.
				for i, hdr := range sent {
					_, k1 := hdr["Idempotency-Key"]
					_, k2 := hdr["X-Idempotency-Key"]
					if k1 || k2 {
						t.Errorf("attempt %d sent a blank key header: %v", i+1, hdr)
					}
				}
				if diff := cmp.Diff(before, req.Header); diff != "" {
					t.Errorf("caller's header modified (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// On the wire: a server that processes a POST and then drops the
// connection without answering. A POST with an empty Idempotency-Key
// must run once and fail with ErrNotSafe, not be sent again by the retry
// transport or by net/http underneath it.
func TestBlankKeyDroppedPostRunsOnce(t *testing.T) {
	var executions atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "warm")
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		executions.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close() // processed, then the connection is lost
		}
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &retry.Transport{Base: base, MaxAttempts: 5, Jitter: func() float64 { return 0 }}}

	// A kept-alive connection, so that the POST goes out on a reused one.
	res, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/order", bytes.NewReader([]byte("order")))
	req.Header.Set(retry.IdempotencyKeyHeader, "")
	_, err = client.Do(req)
	if !errors.Is(err, retry.ErrNotSafe) {
		t.Errorf("error %v, want ErrNotSafe", err)
	}
	if n := executions.Load(); n != 1 {
		t.Errorf("the dropped POST ran %d times, want 1", n)
	}
}

// redialBase behaves like net/http when a kept-alive connection turns
// out to be closed before anything was written: it obtains that
// connection, then dials a new one for the same request, and the dial
// is refused. Nothing was sent.
type redialBase struct {
	attempts int
	then     http.RoundTripper
}

func (b *redialBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.attempts++
	if b.attempts > 1 {
		return b.then.RoundTrip(req)
	}
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil {
		if tr.GetConn != nil {
			tr.GetConn("backend.test:80")
		}
		if tr.GotConn != nil {
			tr.GotConn(httptrace.GotConnInfo{Reused: true, WasIdle: true})
		}
		if tr.GetConn != nil {
			tr.GetConn("backend.test:80")
		}
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

func TestDialRefusedAfterRedialIsRetried(t *testing.T) {
	clk := newFakeClock()
	ok := &fakeBase{clk: clk}
	base := &redialBase{then: ok}
	rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
	res, err := rt.RoundTrip(newRequest(t, http.MethodPost, []byte("order"), true, false))
	if err != nil {
		t.Fatalf("POST whose last dial was refused: %v; want it retried (nothing was sent)", err)
	}
	_ = res.Body.Close()
	if base.attempts != 2 {
		t.Errorf("attempts = %d, want 2", base.attempts)
	}
}
