// Package retry provides an http.RoundTripper that lets clients ride
// through a server restart: it retries what is safe to retry, waits as
// the server asks, gives up in bounded time, and never repeats a request
// that may already have taken effect. It is the client half of a graceful
// upgrade; the server half is serve/drain, whose refusals ("503 +
// Upshift-Drain: refused") it recognises by value ([MarkerHeader]).
//
//	client := &http.Client{Transport: &retry.Transport{
//		Budget: sharedBudget,              // one *retry.Budget per process
//		DeadBackendTimeout: 20 * time.Second,
//	}}
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
//	req.Header.Set(retry.IdempotencyKeyHeader, orderID) // lets a POST be retried after a reset
//	res, err := client.Do(req)
//
// Rules:
//   - A response other than 503 is returned as it is, never retried.
//   - A drain refusal, and an error before anything was sent, are retried
//     whatever the method; any other 503 or error only for a request that
//     is safe to repeat: an idempotent method, or a non-blank
//     [IdempotencyKeyHeader]. Otherwise the call ends with [ErrNotSafe].
//   - Waits are exponential with full jitter, or the server's Retry-After
//     plus jitter; the call ends with an [*Error] after MaxAttempts,
//     MaxElapsed, DeadBackendTimeout without a response, or when the shared
//     [Budget] refuses. [Transport.RoundTrip] gives every case.
//   - A body is replayed from req.GetBody; the caller's request is never
//     modified.
//
// Time comes from Transport.Clock and jitter from Transport.Jitter.
package retry
