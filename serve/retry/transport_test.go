package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/retry"
)

// half is a deterministic jitter: every wait is half its window.
func half() float64 { return 0.5 }

func TestRetryRules(t *testing.T) {
	tests := []struct {
		name         string
		method       string
		key          bool
		plain503     bool
		script       []outcome
		wantAttempts int
		wantStatus   int   // response status, 0 for an error
		wantReason   error // for an error
	}{
		{"GET succeeds first time", "GET", false, false, []outcome{ok200}, 1, 200, nil},
		{"500 is committed", "GET", false, false, []outcome{err500}, 1, 500, nil},
		{"drain refusal retried for POST", "POST", false, false, []outcome{refused503, refused503, ok200}, 3, 200, nil},
		{"connection refused retried for POST", "POST", false, false, []outcome{dialRefused, ok200}, 2, 200, nil},
		{"broken connection not retried for POST", "POST", false, false, []outcome{brokenConn, ok200}, 1, 0, retry.ErrNotSafe},
		{"broken connection retried for POST with key", "POST", true, false, []outcome{brokenConn, ok200}, 2, 200, nil},
		{"broken connection retried for GET", "GET", false, false, []outcome{brokenConn, ok200}, 2, 200, nil},
		{"broken connection retried for PUT", "PUT", false, false, []outcome{brokenConn, ok200}, 2, 200, nil},
		{"plain 503 retried for GET", "GET", false, false, []outcome{plain503, ok200}, 2, 200, nil},
		{"plain 503 returned for POST", "POST", false, false, []outcome{plain503, ok200}, 1, 503, nil},
		{"cancelled 503 returned for PATCH", "PATCH", false, false, []outcome{cancelled503, ok200}, 1, 503, nil},
		{"plain 503 retried for POST when asked", "POST", false, true, []outcome{plain503, ok200}, 2, 200, nil},
		{"plain 503 retried for POST with key", "POST", true, false, []outcome{plain503, ok200}, 2, 200, nil},
		{"attempts exhausted", "GET", false, false, []outcome{plain503, plain503, plain503, plain503}, 3, 0, retry.ErrAttemptsExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			base := &fakeBase{clk: clk, script: tt.script}
			rt := &retry.Transport{Base: base, MaxAttempts: 3, RetryPlain503: tt.plain503, Clock: clk, Jitter: half}
			res, err := rt.RoundTrip(newRequest(t, tt.method, nil, false, tt.key))
			recs := base.records()
			if len(recs) != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", len(recs), tt.wantAttempts)
			}
			if tt.wantStatus != 0 {
				if err != nil || res.StatusCode != tt.wantStatus {
					t.Fatalf("got %v, %v; want status %d", res, err, tt.wantStatus)
				}
				return
			}
			e := asError(err)
			if res != nil || e == nil || !errors.Is(err, tt.wantReason) || e.Attempts != tt.wantAttempts {
				t.Fatalf("got %v, %v; want *retry.Error with reason %v after %d attempts", res, err, tt.wantReason, tt.wantAttempts)
			}
		})
	}
}

func TestWaits(t *testing.T) {
	tests := []struct {
		name       string
		script     []outcome
		retryAfter []string
		latency    []time.Duration
		wantSleeps []time.Duration
	}{
		{"full jitter doubles to the cap", []outcome{plain503, plain503, plain503, plain503, plain503}, nil, nil,
			[]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond}},
		{"retry-after seconds, jitter added after", []outcome{refused503, refused503}, []string{"2", "1"}, nil,
			[]time.Duration{2050 * time.Millisecond, 1100 * time.Millisecond}},
		{"retry-after clamped", []outcome{refused503}, []string{"3600"}, nil, []time.Duration{3050 * time.Millisecond}},
		{"retry-after as a date", []outcome{refused503}, []string{"Sun, 01 Mar 2026 12:00:02 GMT"}, []time.Duration{500 * time.Millisecond},
			[]time.Duration{1550 * time.Millisecond}},
		{"malformed retry-after ignored", []outcome{refused503}, []string{"soon"}, nil, []time.Duration{50 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			base := &fakeBase{clk: clk, script: tt.script, retryAfter: tt.retryAfter, latency: tt.latency}
			rt := &retry.Transport{Base: base, MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 500 * time.Millisecond,
				MaxRetryAfter: 3 * time.Second, Clock: clk, Jitter: half}
			res, err := rt.RoundTrip(newRequest(t, "GET", nil, false, false))
			if err == nil {
				_ = res.Body.Close()
			}
			if diff := cmp.Diff(tt.wantSleeps, clk.sleeps); diff != "" {
				t.Errorf("sleeps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGiveUps(t *testing.T) {
	tests := []struct {
		name       string
		rt         retry.Transport
		script     []outcome
		latency    []time.Duration
		wantReason error
		wantStatus int
		wantN      int
	}{
		{"out of time", retry.Transport{MaxElapsed: time.Second, MaxAttempts: 100},
			[]outcome{plain503, plain503, plain503, plain503, plain503, plain503}, []time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond},
			retry.ErrOutOfTime, 503, 3},
		{"dead backend gives up before MaxElapsed", retry.Transport{MaxElapsed: time.Hour, DeadBackendTimeout: 2 * time.Second, MaxAttempts: 100},
			[]outcome{dialRefused, dialRefused, dialRefused, dialRefused, dialRefused, dialRefused, dialRefused, dialRefused, dialRefused},
			[]time.Duration{time.Second, time.Second, time.Second}, retry.ErrBackendUnreachable, 0, 2},
		{"answers reset the dead-backend clock", retry.Transport{MaxElapsed: time.Hour, DeadBackendTimeout: 2 * time.Second, MaxAttempts: 100},
			[]outcome{dialRefused, refused503, dialRefused, refused503, dialRefused, dialRefused},
			[]time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}, retry.ErrBackendUnreachable, 0, 6},
		{"budget stops the retries", retry.Transport{Budget: &retry.Budget{MaxTokens: 4, TokenRatio: 0.5}, MaxAttempts: 100},
			[]outcome{plain503, plain503, plain503, plain503}, nil, retry.ErrBudgetExhausted, 503, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			base := &fakeBase{clk: clk, script: tt.script, latency: tt.latency}
			rt := tt.rt
			rt.Base, rt.Clock, rt.Jitter, rt.BaseDelay, rt.MaxDelay = base, clk, half, 100*time.Millisecond, 100*time.Millisecond
			res, err := rt.RoundTrip(newRequest(t, "GET", nil, false, false))
			e := asError(err)
			if res != nil || e == nil || !errors.Is(err, tt.wantReason) {
				t.Fatalf("got %v, %v; want reason %v", res, err, tt.wantReason)
			}
			if e.LastStatus != tt.wantStatus || e.Attempts != tt.wantN || e.Attempts != len(base.records()) {
				t.Errorf("error %+v, want last status %d after %d attempts", e, tt.wantStatus, tt.wantN)
			}
			if !strings.HasPrefix(err.Error(), "retry: ") {
				t.Errorf("message %q lacks the package prefix", err)
			}
		})
	}
}

func TestBodies(t *testing.T) {
	payload := []byte(`{"order":42}`)
	t.Run("rewound with GetBody", func(t *testing.T) {
		clk := newFakeClock()
		base := &fakeBase{clk: clk, script: []outcome{refused503, dialRefused, refused503, ok200}}
		rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
		req := newRequest(t, "POST", payload, true, false)
		before := snapshot(req)
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		var got []string
		for _, r := range base.records() {
			got = append(got, string(r.body))
		}
		if diff := cmp.Diff([]string{string(payload), "", string(payload), string(payload)}, got); diff != "" {
			t.Errorf("bodies seen per attempt (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(before, snapshot(req), cmp.Comparer(func(a, b context.Context) bool { return a == b }),
			cmp.Comparer(func(a, b io.ReadCloser) bool { return a == b })); diff != "" {
			t.Errorf("request modified (-want +got):\n%s", diff)
		}
	})
	t.Run("no GetBody is not replayable", func(t *testing.T) {
		clk := newFakeClock()
		base := &fakeBase{clk: clk, script: []outcome{refused503, ok200}}
		rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
		_, err := rt.RoundTrip(newRequest(t, "POST", payload, false, false))
		if !errors.Is(err, retry.ErrNotReplayable) || len(base.records()) != 1 {
			t.Errorf("got %v after %d attempts, want ErrNotReplayable after 1", err, len(base.records()))
		}
		if e := asError(err); e == nil || e.LastStatus != 503 {
			t.Errorf("error %+v, want LastStatus 503", e)
		}
	})
	t.Run("GetBody failing is not replayable", func(t *testing.T) {
		clk := newFakeClock()
		base := &fakeBase{clk: clk, script: []outcome{refused503, ok200}}
		rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
		req := newRequest(t, "POST", payload, true, false)
		boom := errors.New("boom")
		req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
		_, err := rt.RoundTrip(req)
		if !errors.Is(err, retry.ErrNotReplayable) || !errors.Is(err, boom) {
			t.Errorf("got %v, want ErrNotReplayable wrapping the GetBody error", err)
		}
	})
	t.Run("discarded bodies closed, returned body open", func(t *testing.T) {
		clk := newFakeClock()
		base := &fakeBase{clk: clk, script: []outcome{plain503, refused503, ok200}}
		rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
		res, err := rt.RoundTrip(newRequest(t, "GET", nil, false, false))
		if err != nil {
			t.Fatal(err)
		}
		var closed []bool
		for _, r := range base.records() {
			closed = append(closed, r.resp.Body.(*trackedBody).isClosed())
		}
		if diff := cmp.Diff([]bool{true, true, false}, closed); diff != "" {
			t.Errorf("closed bodies (-want +got):\n%s", diff)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "ok200" {
			t.Errorf("returned body %q", b)
		}
	})
}

func TestContextEndsTheCall(t *testing.T) {
	clk := newFakeClock()
	ctx, cancel := context.WithCancel(context.Background())
	base := &fakeBase{clk: clk, script: []outcome{refused503, refused503}, onAttempt: func(*http.Request) { cancel() }}
	rt := &retry.Transport{Base: base, Clock: clk, Jitter: half}
	req := newRequest(t, "GET", nil, false, false).WithContext(ctx)
	_, err := rt.RoundTrip(req)
	if !errors.Is(err, context.Canceled) || len(base.records()) != 1 {
		t.Errorf("got %v after %d attempts, want context.Canceled after 1", err, len(base.records()))
	}
}

func TestContextDeadlineBoundsTheCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	base := &fakeBase{clk: newFakeClock(), script: []outcome{refused503, refused503}, retryAfter: []string{"5", "5"}}
	rt := &retry.Transport{Base: base, Jitter: half}
	start := time.Now()
	_, err := rt.RoundTrip(newRequest(t, "GET", nil, false, false).WithContext(ctx))
	if !errors.Is(err, retry.ErrOutOfTime) {
		t.Errorf("got %v, want ErrOutOfTime (a 5s Retry-After cannot fit a 300ms deadline)", err)
	}
	if time.Since(start) > 250*time.Millisecond {
		t.Errorf("waited %v before giving up; should give up at once", time.Since(start))
	}
}

type nilBase struct{}

func (nilBase) RoundTrip(*http.Request) (*http.Response, error) { return nil, nil }

func TestBadInputs(t *testing.T) {
	if _, err := (&retry.Transport{}).RoundTrip(nil); !errors.Is(err, retry.ErrNilRequest) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := (&retry.Transport{Base: nilBase{}}).RoundTrip(newRequest(t, "GET", nil, false, false)); !errors.Is(err, retry.ErrNilResponse) {
		t.Errorf("nil response: %v", err)
	}
	body := &trackedBody{Reader: strings.NewReader("x")}
	req := newRequest(t, "POST", nil, false, false)
	req.Body = body
	_, err := (&retry.Transport{MaxAttempts: -1}).RoundTrip(req)
	if !errors.Is(err, retry.ErrInvalid) || !body.isClosed() {
		t.Errorf("invalid config: %v, body closed %v; want ErrInvalid and the body closed", err, body.isClosed())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		rt   retry.Transport
		want []string
	}{
		{"zero is valid", retry.Transport{}, nil},
		{"negatives", retry.Transport{MaxAttempts: -1, BaseDelay: -1, MaxDelay: -1, MaxRetryAfter: -1, MaxElapsed: -1, DeadBackendTimeout: -1},
			[]string{"MaxAttempts", "BaseDelay", "MaxDelay", "MaxRetryAfter", "MaxElapsed", "DeadBackendTimeout"}},
		{"base above max", retry.Transport{BaseDelay: time.Second, MaxDelay: time.Millisecond}, []string{"BaseDelay"}},
		{"bad budget", retry.Transport{Budget: &retry.Budget{MaxTokens: -1, TokenRatio: 2}}, []string{"Budget.MaxTokens", "Budget.TokenRatio"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range flatten(tt.rt.Validate()) {
				var ce *retry.ConfigError
				if !errors.As(e, &ce) || !errors.Is(e, retry.ErrInvalid) || !strings.Contains(e.Error(), ce.Field) {
					t.Fatalf("%v is not a *ConfigError naming its field", e)
				}
				got = append(got, ce.Field)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func TestErrorMessage(t *testing.T) {
	e := &retry.Error{Attempts: 3, LastStatus: 503, Elapsed: 1500 * time.Millisecond, Reason: retry.ErrAttemptsExhausted}
	want := "retry: attempts exhausted (after 3 attempts in 1.5s, last status 503)"
	if e.Error() != want {
		t.Errorf("got %q, want %q", e.Error(), want)
	}
	e = &retry.Error{Attempts: 1, Reason: retry.ErrNotSafe, Cause: io.ErrUnexpectedEOF}
	want = "retry: not safe to retry: the request may have reached the server (after 1 attempt in 0s): unexpected EOF"
	if e.Error() != want || !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Errorf("got %q, want %q wrapping the cause", e.Error(), want)
	}
}
