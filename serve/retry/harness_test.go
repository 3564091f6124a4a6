package retry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/upshift-dev/upshift/serve/retry"
)

// tb is the part of testing.TB the helpers need (also met by *rapid.T).
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock.Clock whose timers fire at once: AfterFunc
// records the wait, advances time by it and calls f in its own goroutine.
// The Transport's waits (clock.Sleep) therefore take no real time; a wait
// of 0 or less never reaches AfterFunc and is not recorded.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(max(d, 0))
	c.mu.Unlock()
	go f()
	return func() bool { return false } // too late: its time has passed
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// outcome is what the fake backend does with one attempt.
type outcome int

const (
	ok200        outcome = iota // committed success
	err500                      // committed failure
	dialRefused                 // connection refused: nothing sent
	brokenConn                  // connection obtained, request sent, no response
	refused503                  // 503 + Upshift-Drain: refused
	plain503                    // 503 without marker
	cancelled503                // 503 + Upshift-Drain: cancelled
)

var outcomeNames = [...]string{"ok200", "err500", "dialRefused", "brokenConn", "refused503", "plain503", "cancelled503"}

func (o outcome) String() string { return outcomeNames[o] }

func (o outcome) is503() bool { return o == refused503 || o == plain503 || o == cancelled503 }

// trackedBody is a response body that remembers being closed.
type trackedBody struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *trackedBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// attemptRecord is what the fake backend saw of one attempt.
type attemptRecord struct {
	start      time.Time
	answeredAt time.Time // when the response (if any) arrived
	returnedAt time.Time // when RoundTrip returned, with or without one
	outcome    outcome
	body       []byte // request body bytes read
	bodyErr    error
	retryAfter string
	resp       *http.Response
	header     http.Header // the request header this attempt sent
}

// fakeBase is a scripted http.RoundTripper. Attempts beyond the script
// get ok200.
type fakeBase struct {
	clk        *fakeClock
	script     []outcome
	retryAfter []string        // Retry-After per attempt ("" for none)
	latency    []time.Duration // time each attempt takes
	onAttempt  func(*http.Request)

	mu       sync.Mutex
	attempts []*attemptRecord
}

func (f *fakeBase) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	n := len(f.attempts)
	rec := &attemptRecord{start: f.clk.Now(), outcome: ok200, header: req.Header.Clone()}
	if n < len(f.script) {
		rec.outcome = f.script[n]
	}
	if n < len(f.retryAfter) {
		rec.retryAfter = f.retryAfter[n]
	}
	f.attempts = append(f.attempts, rec)
	f.mu.Unlock()
	defer func() { rec.returnedAt = f.clk.Now() }()
	if f.onAttempt != nil {
		f.onAttempt(req)
	}
	if n < len(f.latency) {
		f.clk.advance(f.latency[n])
	}

	if rec.outcome == dialRefused { // a real transport closes the body unread
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{})
	}
	if req.Body != nil {
		rec.body, rec.bodyErr = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	if rec.outcome == brokenConn {
		return nil, io.ErrUnexpectedEOF
	}
	rec.answeredAt = f.clk.Now()
	res := &http.Response{Header: http.Header{}, Request: req, ProtoMajor: 1, ProtoMinor: 1,
		Body: &trackedBody{Reader: strings.NewReader(rec.outcome.String())}}
	switch rec.outcome {
	case ok200:
		res.StatusCode = 200
	case err500:
		res.StatusCode = 500
	default:
		res.StatusCode = 503
		switch rec.outcome {
		case refused503:
			res.Header.Set(retry.MarkerHeader, retry.MarkerRefused)
		case cancelled503:
			res.Header.Set(retry.MarkerHeader, retry.MarkerCancelled)
		}
		if rec.retryAfter != "" {
			res.Header.Set("Retry-After", rec.retryAfter)
		}
	}
	rec.resp = res
	return res, nil
}

func (f *fakeBase) records() []*attemptRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*attemptRecord(nil), f.attempts...)
}

// newRequest builds a request; with body != nil it has a GetBody when
// getBody is true.
func newRequest(t tb, method string, body []byte, getBody bool, key bool) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://backend.test/x", rd)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	if body != nil && !getBody {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = nil
	}
	if key {
		req.Header.Set(retry.IdempotencyKeyHeader, "k-1")
	}
	return req
}

// reqSnapshot captures what RoundTrip must not change.
type reqSnapshot struct {
	Method, URL   string
	Header        http.Header
	Body          io.ReadCloser
	HasGetBody    bool
	ContentLength int64
	Ctx           context.Context
}

func snapshot(r *http.Request) reqSnapshot {
	return reqSnapshot{r.Method, r.URL.String(), r.Header.Clone(), r.Body, r.GetBody != nil, r.ContentLength, r.Context()}
}

func asError(err error) *retry.Error {
	var e *retry.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

type panicTB struct{}

func (panicTB) Helper()                      {}
func (panicTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// newRequestNoTB is newRequest for goroutines that cannot fail a test.
func newRequestNoTB(method string) *http.Request {
	return newRequest(panicTB{}, method, nil, false, false)
}
