// Package retry provides an http.RoundTripper that lets clients ride
// through a server restart: it retries what is safe to retry, waits as
// the server asks, gives up in bounded time, and never repeats a request
// that may already have taken effect.
//
// It is the client half of a graceful upgrade. The server half is
// serve/drain, whose refusals ("503 + Upshift-Drain: refused") this
// package recognises; the header name and values are duplicated here as
// constants rather than imported.
//
// # When a call is retried
//
// An attempt's outcome is one of:
//
//   - a response other than 503: committed. It is returned as is, even
//     a 500, and never retried. Once headers have arrived, nothing that
//     happens while reading the body causes a retry.
//   - a 503 with "Upshift-Drain: refused": the server did no work.
//     Retried whatever the method.
//   - any other 503 (no marker, or "Upshift-Drain: cancelled"): retried
//     only for requests that are safe to repeat (below), or for every
//     request if Transport.RetryPlain503 is set. Otherwise the 503 is
//     returned to the caller.
//   - an error before a connection was obtained (dial errors,
//     connection refused, DNS failures other than "no such host"):
//     nothing was sent. Retried whatever the method. What counts is the
//     last connection the base transport looked for (httptrace GetConn
//     and GotConn): net/http, finding a kept-alive connection closed
//     before it wrote anything, dials another for the same request, and
//     if that dial is refused nothing was sent either.
//   - any other error (reset, EOF, timeout after the request went out):
//     the server may have acted on it. Retried only for requests that
//     are safe to repeat; otherwise the call ends with [ErrNotSafe].
//
// A request is safe to repeat when its method is idempotent (GET, HEAD,
// OPTIONS, TRACE, PUT, DELETE) or it carries an idempotency key, by
// which the server promises to deduplicate: an Idempotency-Key (or
// X-Idempotency-Key) header whose value is not blank. The value that
// counts is the header's first, the one Header.Get returns; an empty or
// white-space-only value, or the header with no value at all, is no
// key, and the request is treated exactly like one without the header:
// retried only if nothing was sent or the server refused it with the
// drain marker. Such a blank header is also left out of every attempt
// (the caller's request keeps it), because net/http replays a request
// that carries the header, whatever its value, when a kept-alive
// connection fails under it. Unknown hosts and rejected certificates
// end the call at once ([ErrPermanent]).
//
// # How long it waits, and when it stops
//
// Before retry n the wait is drawn uniformly from
// [0, min(MaxDelay, BaseDelay*2^(n-1))) ("full jitter"). If the 503
// carried Retry-After (delta-seconds or any of the three HTTP-date
// forms, see [ParseRetryAfter]) the wait is that value, capped by
// MaxRetryAfter, plus the same jitter on top, so that a fleet told "1"
// does not return in the same millisecond.
//
// The call ends with an [*Error] (wrapping one reason) when
//
//   - MaxAttempts attempts were made ([ErrAttemptsExhausted]);
//   - the next attempt would start after MaxElapsed from the call's
//     start, or after the request context's deadline ([ErrOutOfTime]);
//     the transport gives up at once rather than sleep into the deadline;
//   - attempts have produced no HTTP response at all for
//     DeadBackendTimeout since the call began or the last response
//     ([ErrBackendUnreachable]): a dead backend is given up on well
//     before MaxElapsed, instead of being polled for many minutes;
//   - the shared [Budget] refuses ([ErrBudgetExhausted]);
//   - a retry needs the body again but the request has no GetBody
//     ([ErrNotReplayable]);
//   - the request context ends (the context's error).
//
// The error reports Attempts, LastStatus (0 if no response), Elapsed
// and the last attempt's own error as Cause; errors.Is matches both the
// reason and the cause.
//
// # Budget
//
// A [Budget] is a token bucket shared by many transports, with gRPC's
// retryThrottling rules: failures cost one token, other responses earn
// TokenRatio, and retries stop while half the bucket or less is left.
// A fleet of clients facing a server that is down therefore sends about
// MaxTokens/2 retries in total, not MaxAttempts per call, and recovers
// its retries as calls succeed again.
//
// # Requests and bodies
//
// RoundTrip never modifies the caller's request. The first attempt sends
// it as given (with a shallow clone if it needs a trace hook or drops a
// blank idempotency-key header); every retry sends a shallow clone whose
// body comes from req.GetBody, so the server sees identical bytes each
// time. http.NewRequest sets GetBody for bytes.Reader, bytes.Buffer and
// strings.Reader bodies. Every response that is not returned is read
// (up to 64 KiB, so its connection can be reused) and closed.
//
// # Usage
//
//	client := &http.Client{Transport: &retry.Transport{
//		Budget: sharedBudget,              // one *retry.Budget per process
//		DeadBackendTimeout: 20 * time.Second,
//	}}
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
//	req.Header.Set(retry.IdempotencyKeyHeader, orderID) // lets a POST be retried after a reset
//	res, err := client.Do(req)
//	var rerr *retry.Error
//	if errors.As(err, &rerr) { log.Printf("gave up after %d attempts: %v", rerr.Attempts, err) }
//
// Time comes from Transport.Clock and jitter from Transport.Jitter;
// tests pass a clock that records the waits and a seeded generator.
package retry
