package retry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/upshift-dev/upshift/clock"
)

// The marker header a draining upshift server (serve/drain) puts on the
// responses it produces itself. The names and values are the same
// strings as drain.MarkerHeader and friends; this package does not
// import serve/drain.
const (
	MarkerHeader    = "Upshift-Drain"
	MarkerRefused   = "refused"   // 503 before any work: retried whatever the method
	MarkerCancelled = "cancelled" // 503 after the handler started: retried like a plain 503
	MarkerResumable = "resumable" // trailer of a response cut short: not acted upon here
)

// IdempotencyKeyHeader marks a non-idempotent request as safe to repeat
// (the server deduplicates by key). X-Idempotency-Key is accepted too.
//
// Only a key that is not blank counts. The value that counts is the
// header's first, the one Header.Get returns; an empty or white-space-only
// value, or the header with no value at all, is no key, and the request is
// treated exactly like one without the header: retried only if nothing was
// sent or the server refused it with the drain marker. Such a blank header
// is also left out of every attempt (the caller's request keeps it),
// because net/http replays a request that carries the header, whatever its
// value, when a kept-alive connection fails under it.
const IdempotencyKeyHeader = "Idempotency-Key"

// keyHeaders are the headers that may carry an idempotency key.
var keyHeaders = [...]string{IdempotencyKeyHeader, "X-Idempotency-Key"}

// Defaults used for zero fields of Transport.
const (
	DefaultMaxAttempts        = 10
	DefaultBaseDelay          = 100 * time.Millisecond
	DefaultMaxDelay           = 5 * time.Second
	DefaultMaxRetryAfter      = 30 * time.Second
	DefaultMaxElapsed         = 2 * time.Minute
	DefaultDeadBackendTimeout = 30 * time.Second
)

// discardLimit is how much of a discarded response body is read so that
// its connection can be reused; larger bodies are just closed.
const discardLimit = 64 << 10

// Transport is an http.RoundTripper that rides through a server restart:
// it retries what is safe to retry and nothing else. See RoundTrip for the
// rules.
//
// The zero value is usable: it wraps http.DefaultTransport with the
// defaults below and no retry budget. Set the fields before first use
// and do not change them afterwards; a *Transport is then safe for
// concurrent use by any number of goroutines.
type Transport struct {
	// Base performs each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// MaxAttempts bounds the attempts per call, the first included.
	// Zero means DefaultMaxAttempts; 1 disables retries.
	MaxAttempts int

	// BaseDelay and MaxDelay shape the full-jitter exponential backoff:
	// before retry n (1-based) the wait is uniform in
	// [0, min(MaxDelay, BaseDelay*2^(n-1))). Zero means the defaults.
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// MaxRetryAfter caps a server's Retry-After; the backoff jitter of
	// the same retry is added on top of the capped value. Zero means
	// DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration

	// MaxElapsed bounds the whole call: no attempt starts later than
	// MaxElapsed after the call began (nor after the request context's
	// deadline, whichever is earlier). It does not cut a response that
	// is being read. Zero means DefaultMaxElapsed.
	MaxElapsed time.Duration

	// DeadBackendTimeout is the shorter give-up for a backend that does
	// not answer at all: once attempts have produced no HTTP response
	// (only connection errors) for this long since the call began or
	// since the last response, the call ends with ErrBackendUnreachable.
	// Zero means DefaultDeadBackendTimeout.
	DeadBackendTimeout time.Duration

	// Budget, if set, is consulted before every retry and usually
	// shared by all the transports of a process. Nil means no budget.
	Budget *Budget

	// RetryPlain503 also retries a 503 without the drain marker (or
	// with MarkerCancelled) for requests that are not idempotent. Only
	// set it when such a 503 is known to mean "not processed".
	RetryPlain503 bool

	// Jitter returns a uniformly distributed number in [0, 1) and must
	// be safe for concurrent use; values outside the range are clamped.
	// Nil means math/rand/v2.Float64.
	Jitter func() float64

	// Clock is the time source: when a call started, and how it waits
	// between attempts. Nil means clock.Real.
	Clock clock.Clock
}

// settings is a Transport with the defaults filled in.
type settings struct {
	base                               http.RoundTripper
	maxAttempts                        int
	baseDelay, maxDelay, maxRetryAfter time.Duration
	maxElapsed, deadBackend            time.Duration
	budget                             *Budget
	plain503                           bool
	jitter                             func() float64
	clock                              clock.Clock
}

func (t *Transport) settings() settings {
	s := settings{
		base: t.Base, maxAttempts: t.MaxAttempts,
		baseDelay: t.BaseDelay, maxDelay: t.MaxDelay, maxRetryAfter: t.MaxRetryAfter,
		maxElapsed: t.MaxElapsed, deadBackend: t.DeadBackendTimeout,
		budget: t.Budget, plain503: t.RetryPlain503, jitter: t.Jitter, clock: t.Clock,
	}
	if s.base == nil {
		s.base = http.DefaultTransport
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = DefaultMaxAttempts
	}
	if s.baseDelay == 0 {
		s.baseDelay = DefaultBaseDelay
	}
	if s.maxDelay == 0 {
		s.maxDelay = DefaultMaxDelay
	}
	if s.maxRetryAfter == 0 {
		s.maxRetryAfter = DefaultMaxRetryAfter
	}
	if s.maxElapsed == 0 {
		s.maxElapsed = DefaultMaxElapsed
	}
	if s.deadBackend == 0 {
		s.deadBackend = DefaultDeadBackendTimeout
	}
	if s.jitter == nil {
		s.jitter = rand.Float64
	}
	s.clock = clock.OrReal(s.clock)
	return s
}

// Validate reports every invalid field at once, as *ConfigError values
// joined with errors.Join. The zero Transport is valid.
func (t *Transport) Validate() error {
	var errs []error
	bad := func(field, problem string) {
		errs = append(errs, &ConfigError{Field: field, Problem: problem})
	}
	if t.MaxAttempts < 0 {
		bad("MaxAttempts", "must not be negative (0 for the default)")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"BaseDelay", t.BaseDelay}, {"MaxDelay", t.MaxDelay}, {"MaxRetryAfter", t.MaxRetryAfter},
		{"MaxElapsed", t.MaxElapsed}, {"DeadBackendTimeout", t.DeadBackendTimeout},
	} {
		if f.d < 0 {
			bad(f.name, "must not be negative (0 for the default), got "+f.d.String())
		}
	}
	if len(errs) == 0 {
		s := t.settings()
		if s.baseDelay > s.maxDelay {
			bad("BaseDelay", "must not exceed MaxDelay ("+s.maxDelay.String()+"), got "+s.baseDelay.String())
		}
	}
	if t.Budget != nil {
		if err := t.Budget.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RoundTrip sends req, retrying as described below. It returns either the
// first committed response, or a nil response and an *Error. It closes
// req.Body, as every RoundTripper must.
//
// A response other than 503 is committed: returned as is, even a 500, and
// never retried, whatever happens while its body is read. A 503 with
// "Upshift-Drain: refused" (the server did no work) and an error before a
// connection was obtained (nothing was sent) are retried whatever the
// method. Any other 503 is retried only for a request safe to repeat (or
// any request with RetryPlain503), else returned; any other error (the
// server may have acted) only for a request safe to repeat, else the call
// ends with ErrNotSafe. A request is safe to repeat when its method is
// idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or it carries a
// non-blank IdempotencyKeyHeader, by which the server promises to
// deduplicate. Unknown hosts and rejected certificates end the call at
// once (ErrPermanent).
//
// Before retry n the wait is drawn uniformly from
// [0, min(MaxDelay, BaseDelay*2^(n-1))); after a Retry-After
// (ParseRetryAfter) it is that value, capped by MaxRetryAfter, plus that
// jitter. The call ends with an *Error wrapping one reason:
// ErrAttemptsExhausted (MaxAttempts), ErrOutOfTime (the next attempt would
// start after MaxElapsed or the context's deadline), ErrBackendUnreachable
// (no HTTP response for DeadBackendTimeout), ErrBudgetExhausted,
// ErrNotReplayable (a retry without req.GetBody), or the context's error.
//
// RoundTrip never modifies the caller's request: retries send a shallow
// clone whose body comes from req.GetBody. Every response not returned is
// read (up to 64 KiB) and closed. See docs/design/retry.md for each case.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, &Error{Reason: ErrNilRequest}
	}
	if err := t.Validate(); err != nil {
		closeBody(req)
		return nil, err
	}
	s := t.settings()
	ctx := req.Context()
	start := s.clock.Now()
	deadline := start.Add(s.maxElapsed)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	lastAnswer := start
	safe := isIdempotent(req)
	hasBody := req.Body != nil && req.Body != http.NoBody
	// A blank key header is not sent: the base transport may take the
	// header's mere presence as leave to replay the request (net/http
	// does, on a kept-alive connection that fails).
	sendHeader := withoutBlankKeys(req.Header)

	fail := func(attempts, status int, reason, cause error) (*http.Response, error) {
		return nil, &Error{Attempts: attempts, LastStatus: status, Elapsed: s.clock.Now().Sub(start), Reason: reason, Cause: cause}
	}

	for attempt := 1; ; attempt++ {
		areq := req
		var probe *connProbe
		if !safe || attempt > 1 || sendHeader != nil {
			actx := ctx
			if !safe {
				probe = new(connProbe)
				actx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: probe.getConn, GotConn: probe.gotConn})
			}
			areq = req.WithContext(actx) // shallow clone; req itself is never touched
			if sendHeader != nil {
				areq.Header = sendHeader
			}
			if attempt > 1 && hasBody {
				body, err := req.GetBody()
				if err != nil {
					return fail(attempt-1, 0, ErrNotReplayable, err)
				}
				areq.Body = body
			}
		}

		resp, err := s.base.RoundTrip(areq)
		now := s.clock.Now()
		status := 0
		var cause error
		retryable, answered := false, false
		var retryAfter time.Duration
		hasRetryAfter := false

		switch {
		case err != nil:
			if resp != nil { // a broken base; do not leak the body
				discard(resp)
				resp = nil
			}
			cause = err
			if ctx.Err() != nil {
				return fail(attempt, 0, ctx.Err(), err)
			}
			if isPermanent(err) {
				if s.budget != nil {
					s.budget.failure()
				}
				return fail(attempt, 0, ErrPermanent, err)
			}
			nothingSent := (probe == nil || !probe.used.Load()) && isDialError(err)
			retryable = safe || nothingSent
		case resp == nil:
			return fail(attempt, 0, ErrNilResponse, nil)
		case resp.StatusCode == http.StatusServiceUnavailable:
			answered = true
			status = resp.StatusCode
			retryable = resp.Header.Get(MarkerHeader) == MarkerRefused || safe || s.plain503
			if !retryable { // the caller gets the server's answer
				if s.budget != nil {
					s.budget.failure()
				}
				return resp, nil
			}
			if v := resp.Header.Get("Retry-After"); v != "" {
				if d, perr := ParseRetryAfter(v, now); perr == nil {
					retryAfter, hasRetryAfter = min(d, s.maxRetryAfter), true
				}
			}
		default: // committed
			if s.budget != nil {
				s.budget.success()
			}
			return resp, nil
		}

		// A retryable-kind failure: a transport error or a 503.
		budgetOK := true
		if s.budget != nil {
			budgetOK = s.budget.failure()
		}
		if answered {
			lastAnswer = now
		}
		var reason error
		switch {
		case !retryable:
			reason = ErrNotSafe
		case hasBody && req.GetBody == nil:
			reason = ErrNotReplayable
		case attempt >= s.maxAttempts:
			reason = ErrAttemptsExhausted
		case !budgetOK:
			reason = ErrBudgetExhausted
		}
		var wait time.Duration
		if reason == nil {
			wait = s.backoff(attempt)
			if hasRetryAfter {
				wait += retryAfter
			}
			next := now.Add(wait)
			switch {
			case next.After(deadline):
				reason = ErrOutOfTime
			case !answered && next.Sub(lastAnswer) > s.deadBackend:
				reason = ErrBackendUnreachable
			}
		}
		if resp != nil {
			discard(resp)
		}
		if reason != nil {
			return fail(attempt, status, reason, cause)
		}
		if err := clock.Sleep(ctx, s.clock, wait); err != nil {
			return fail(attempt, status, ctx.Err(), err)
		}
	}
}

// backoff is the full-jitter wait before retry n (attempt n failed).
func (s *settings) backoff(n int) time.Duration {
	return time.Duration(clampUnit(s.jitter()) * float64(s.window(n)))
}

// window returns min(maxDelay, baseDelay*2^(n-1)) without overflow.
func (s *settings) window(n int) time.Duration {
	d := s.baseDelay
	for i := 1; i < n && d < s.maxDelay; i++ {
		if d > math.MaxInt64/2 {
			return s.maxDelay
		}
		d *= 2
	}
	return min(d, s.maxDelay)
}

func clampUnit(f float64) float64 {
	if !(f >= 0) { // also NaN
		return 0
	}
	if f >= 1 {
		return math.Nextafter(1, 0)
	}
	return f
}

// connProbe learns, through httptrace, whether the last connection the
// base transport looked for was obtained (after which request bytes may
// have been sent). A base that finds a kept-alive connection closed
// before it wrote anything looks for another one (GetConn again) for the
// same request; net/http does so for a request that is not safe to
// repeat only when none of it was written. If that second connection
// cannot be dialled, nothing was sent.
type connProbe struct{ used atomic.Bool }

func (p *connProbe) getConn(string)                { p.used.Store(false) }
func (p *connProbe) gotConn(httptrace.GotConnInfo) { p.used.Store(true) }

// isIdempotent reports whether repeating req cannot duplicate an effect:
// an idempotent method (RFC 9110 section 9.2.2) or an idempotency key.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return hasIdempotencyKey(req.Header)
}

// hasIdempotencyKey reports whether h carries an idempotency key: an
// Idempotency-Key or X-Idempotency-Key header whose value (the first
// one, which is what Header.Get returns and servers read) is not empty
// or white space only. A blank key cannot be deduplicated by.
func hasIdempotencyKey(h http.Header) bool {
	for _, name := range keyHeaders {
		if v := h[name]; len(v) > 0 && strings.TrimSpace(v[0]) != "" {
			return true
		}
	}
	return false
}

// withoutBlankKeys returns a copy of h without its blank idempotency-key
// headers (present with no value, or a blank first value), or nil if it
// has none.
func withoutBlankKeys(h http.Header) http.Header {
	var out http.Header
	for _, name := range keyHeaders {
		v, ok := h[name]
		if !ok || (len(v) > 0 && strings.TrimSpace(v[0]) != "") {
			continue
		}
		if out == nil {
			out = h.Clone()
		}
		delete(out, name)
	}
	return out
}

// isDialError reports whether err happened while connecting, before any
// request byte could be written.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// isPermanent reports errors that no retry can fix.
func isPermanent(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return true
	}
	var (
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		rhe tls.RecordHeaderError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) ||
		errors.As(err, &ci) || errors.As(err, &rhe)
}

// discard reads what is cheap of a response body and closes it.
func discard(resp *http.Response) {
	if resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, discardLimit)
	_ = resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// Compile-time check.
var _ http.RoundTripper = (*Transport)(nil)
