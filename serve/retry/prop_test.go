package retry_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/serve/retry"
)

func idempotentMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// TestPropertyRoundTrip checks, on random scripts of backend behaviour,
// request shapes and settings, with a controlled clock and seeded jitter:
//
//   - no attempt that fails the safety rule is retried: only "nothing
//     sent", a drain refusal, or (for idempotent or keyed requests, or
//     with RetryPlain503) an ambiguous failure or plain 503 is followed
//     by another attempt; committed responses never are;
//   - a blank idempotency key (empty, white space only, or no value) is
//     no key: such a request is retried like one without the header,
//     and no attempt sends the blank header (a base transport could
//     take its presence as leave to replay); a real key goes out as is;
//   - attempts <= MaxAttempts; no attempt starts after MaxElapsed; no
//     attempt after connection failures starts more than
//     DeadBackendTimeout after the last answer;
//   - every wait lies inside its jitter window (Retry-After clamped,
//     then the backoff window on top);
//   - the body bytes are identical on every attempt that read them;
//   - every discarded response body is closed, the returned one is not;
//   - the caller's request is not modified;
//   - the outcome is the last attempt's response or a *retry.Error
//     with matching Attempts and LastStatus.
func TestPropertyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		method := rapid.SampledFrom([]string{"GET", "HEAD", "PUT", "DELETE", "POST", "PATCH"}).Draw(t, "method")
		keyName := rapid.SampledFrom([]string{"", retry.IdempotencyKeyHeader, "X-Idempotency-Key"}).Draw(t, "keyHeader")
		keyValue := rapid.SampledFrom([][]string{{"k-1"}, {" k-2 "}, {""}, {" "}, {"\t \t"}, nil, {"", "k-3"}}).Draw(t, "keyValue")
		key := keyName != "" && len(keyValue) > 0 && strings.TrimSpace(keyValue[0]) != ""
		var payload []byte
		if rapid.Bool().Draw(t, "hasBody") {
			payload = rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "body")
		}
		getBody := rapid.Bool().Draw(t, "getBody")

		baseDelay := time.Duration(rapid.IntRange(1, 500).Draw(t, "baseDelayMillis")) * time.Millisecond
		rt := &retry.Transport{
			MaxAttempts:        rapid.IntRange(1, 8).Draw(t, "maxAttempts"),
			BaseDelay:          baseDelay,
			MaxDelay:           baseDelay * time.Duration(rapid.IntRange(1, 20).Draw(t, "maxDelayFactor")),
			MaxRetryAfter:      time.Duration(rapid.IntRange(1, 5000).Draw(t, "maxRetryAfterMillis")) * time.Millisecond,
			MaxElapsed:         time.Duration(rapid.IntRange(100, 60000).Draw(t, "maxElapsedMillis")) * time.Millisecond,
			DeadBackendTimeout: time.Duration(rapid.IntRange(100, 30000).Draw(t, "deadBackendMillis")) * time.Millisecond,
			RetryPlain503:      rapid.Bool().Draw(t, "retryPlain503"),
		}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "jitterSeed"), 1))
		rt.Jitter = rng.Float64
		clk := newFakeClock()
		rt.Clock = clk
		n := rapid.IntRange(0, 10).Draw(t, "scriptLen")
		base := &fakeBase{clk: clk}
		raChoices := []string{"", "", "0", "1", "2", "30", "junk",
			t0.Add(3 * time.Second).Format(http.TimeFormat),
			t0.Add(10 * time.Second).Format(time.RFC850),
			t0.Add(time.Second).Format(time.ANSIC)}
		for i := range n {
			base.script = append(base.script, outcome(rapid.IntRange(0, int(cancelled503)).Draw(t, "outcome")))
			base.retryAfter = append(base.retryAfter, rapid.SampledFrom(raChoices).Draw(t, "retryAfter"))
			base.latency = append(base.latency, time.Duration(rapid.IntRange(0, 3000).Draw(t, "latencyMillis"))*time.Millisecond)
			_ = i
		}
		rt.Base = base

		req := newRequest(t, method, payload, getBody, false)
		if keyName != "" {
			req.Header[keyName] = keyValue
		}
		before := snapshot(req)
		res, err := rt.RoundTrip(req)
		recs := base.records()
		safeReq := idempotentMethod(method) || key

		retryable := func(o outcome) bool {
			switch o {
			case dialRefused, refused503:
				return true
			case brokenConn:
				return safeReq
			case plain503, cancelled503:
				return safeReq || rt.RetryPlain503
			}
			return false
		}

		if len(recs) < 1 || len(recs) > rt.MaxAttempts {
			t.Fatalf("%d attempts, MaxAttempts %d", len(recs), rt.MaxAttempts)
		}
		lastAnswer := t0
		for i, r := range recs {
			if i > 0 {
				prev := recs[i-1]
				if !retryable(prev.outcome) {
					t.Fatalf("attempt %d retried after %v (method %s, key %v)", i+1, prev.outcome, method, key)
				}
				if r.start.After(t0.Add(rt.MaxElapsed)) {
					t.Fatalf("attempt %d started %v after the call, MaxElapsed %v", i+1, r.start.Sub(t0), rt.MaxElapsed)
				}
				if !prev.outcome.is503() && r.start.Sub(lastAnswer) > rt.DeadBackendTimeout {
					t.Fatalf("attempt %d started %v after the last answer, DeadBackendTimeout %v", i+1, r.start.Sub(lastAnswer), rt.DeadBackendTimeout)
				}
				// The wait before this attempt lies in its jitter window.
				window := min(rt.MaxDelay, rt.BaseDelay<<min(i-1, 40))
				lo := time.Duration(0)
				if prev.outcome.is503() && prev.retryAfter != "" {
					if d, perr := retry.ParseRetryAfter(prev.retryAfter, prev.answeredAt); perr == nil {
						lo = min(d, rt.MaxRetryAfter)
					}
				}
				if w := r.start.Sub(prev.returnedAt); w < lo || w > lo+window {
					t.Fatalf("wait %d = %v, outside [%v, %v]", i, w, lo, lo+window)
				}
			}
			if r.outcome.is503() {
				lastAnswer = r.answeredAt
			}
			if payload != nil && r.outcome != dialRefused && !bytes.Equal(r.body, payload) {
				t.Fatalf("attempt %d sent body %q, want %q", i+1, r.body, payload)
			}
			wantHeader := req.Header.Clone()
			if keyName != "" && !key {
				delete(wantHeader, keyName)
			}
			if diff := cmp.Diff(wantHeader, r.header); diff != "" {
				t.Fatalf("attempt %d sent header (-want +got):\n%s", i+1, diff)
			}
		}
		// Every wait went through the clock (one of 0 needs no timer).
		var waits []time.Duration
		for i := 1; i < len(recs); i++ {
			if w := recs[i].start.Sub(recs[i-1].returnedAt); w > 0 {
				waits = append(waits, w)
			}
		}
		if !slices.Equal(clk.sleeps, waits) {
			t.Fatalf("clock waits %v for %d attempts, want %v", clk.sleeps, len(recs), waits)
		}
		if payload != nil && !getBody && len(recs) > 1 {
			t.Fatalf("%d attempts with a body that cannot be replayed", len(recs))
		}

		last := recs[len(recs)-1]
		committed := last.outcome == ok200 || last.outcome == err500 || (last.outcome.is503() && !retryable(last.outcome))
		if committed {
			if err != nil || res == nil || res != last.resp {
				t.Fatalf("committed %v: got %v, %v; want the response", last.outcome, res, err)
			}
		} else {
			e := asError(err)
			if res != nil || e == nil {
				t.Fatalf("after %v: got %v, %v; want a *retry.Error", last.outcome, res, err)
			}
			wantStatus := 0
			if last.outcome.is503() {
				wantStatus = 503
			}
			if e.Attempts != len(recs) || e.LastStatus != wantStatus || e.Reason == nil {
				t.Fatalf("error %+v; want %d attempts, last status %d, a reason", e, len(recs), wantStatus)
			}
		}
		for i, r := range recs {
			if r.resp == nil {
				continue
			}
			closed := r.resp.Body.(*trackedBody).isClosed()
			if r.resp == res && closed {
				t.Fatalf("returned body closed")
			}
			if r.resp != res && !closed {
				t.Fatalf("discarded body of attempt %d not closed", i+1)
			}
		}
		if diff := cmp.Diff(before, snapshot(req), cmp.Comparer(func(a, b context.Context) bool { return a == b }),
			cmp.Comparer(func(a, b io.ReadCloser) bool { return a == b })); diff != "" {
			t.Fatalf("request modified (-want +got):\n%s", diff)
		}
		if res != nil {
			_ = res.Body.Close()
		}
	})
}
