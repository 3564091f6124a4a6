package retry

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Reasons a call ends in an *Error. Compare with errors.Is; an *Error
// wraps exactly one of them (or the context's error) plus the last
// attempt's own error, if any.
var (
	// ErrInvalid is matched by every *ConfigError.
	ErrInvalid = errors.New("retry: invalid config")

	// ErrNotReplayable: a retry was needed but the request body was
	// already consumed and the request has no GetBody to rewind it.
	ErrNotReplayable = errors.New("retry: request body cannot be replayed (no GetBody)")

	// ErrNotSafe: the attempt failed after the request may have reached
	// the server, and the request is neither idempotent nor carries an
	// Idempotency-Key, so repeating it could duplicate its effect.
	ErrNotSafe = errors.New("retry: not safe to retry: the request may have reached the server")

	// ErrPermanent: the attempt failed in a way retrying cannot fix
	// (unknown host, certificate rejected).
	ErrPermanent = errors.New("retry: permanent failure")

	// ErrAttemptsExhausted: MaxAttempts attempts were made.
	ErrAttemptsExhausted = errors.New("retry: attempts exhausted")

	// ErrOutOfTime: the next attempt would start after MaxElapsed or
	// after the request context's deadline.
	ErrOutOfTime = errors.New("retry: out of time")

	// ErrBackendUnreachable: no HTTP response at all for
	// DeadBackendTimeout; the backend is treated as dead.
	ErrBackendUnreachable = errors.New("retry: backend unreachable")

	// ErrBudgetExhausted: the shared Budget refused the retry.
	ErrBudgetExhausted = errors.New("retry: retry budget exhausted")

	// ErrNilResponse: the base RoundTripper returned neither a response
	// nor an error.
	ErrNilResponse = errors.New("retry: base RoundTripper returned a nil response and a nil error")

	// ErrNilRequest: RoundTrip was called with a nil request.
	ErrNilRequest = errors.New("retry: nil request")
)

// Error is returned by Transport.RoundTrip when a call ends without a
// response for the caller. errors.Is matches both its Reason and its
// Cause. It is plain data, safe to share once returned; the zero value
// describes a call that made no attempt.
type Error struct {
	Attempts   int           // attempts made (calls to the base RoundTripper)
	LastStatus int           // status of the last response received, 0 if none
	Elapsed    time.Duration // from the call's start to giving up
	Reason     error         // why the call ended: one of the Err* sentinels, or the context's error
	Cause      error         // the last attempt's error, nil if it got a response
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Reason != nil {
		b.WriteString(e.Reason.Error())
	} else {
		b.WriteString("retry: request failed")
	}
	b.WriteString(" (after ")
	b.WriteString(strconv.Itoa(e.Attempts))
	if e.Attempts == 1 {
		b.WriteString(" attempt")
	} else {
		b.WriteString(" attempts")
	}
	b.WriteString(" in ")
	b.WriteString(e.Elapsed.String())
	if e.LastStatus != 0 {
		b.WriteString(", last status ")
		b.WriteString(strconv.Itoa(e.LastStatus))
	}
	b.WriteString(")")
	if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	return b.String()
}

// Unwrap returns Reason and Cause (those that are set).
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Reason != nil {
		errs = append(errs, e.Reason)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// ConfigError reports one invalid field of a Transport or Budget. It
// matches ErrInvalid (errors.Is). It is plain data, safe to share once returned.
type ConfigError struct {
	Field   string // e.g. "MaxDelay" or "Budget.TokenRatio"
	Problem string
}

func (e *ConfigError) Error() string {
	return ErrInvalid.Error() + ": " + e.Field + ": " + e.Problem
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalid }
