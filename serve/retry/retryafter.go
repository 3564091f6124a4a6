package retry

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrBadRetryAfter is wrapped by ParseRetryAfter's errors.
var ErrBadRetryAfter = errors.New("retry: malformed Retry-After")

// maxRetryAfterSeconds is the largest delta-seconds value that fits a
// time.Duration; larger values are clamped to it.
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter decodes a Retry-After header value into a wait
// relative to now. It accepts delta-seconds (a non-negative decimal
// integer; values too large for a time.Duration are clamped to the
// largest one) and an HTTP-date in any of the three forms HTTP/1.1
// allows (IMF-fixdate, the obsolete RFC 850 form and asctime). A date
// at or before now gives 0. Surrounding spaces and tabs are ignored.
// Anything else returns an error wrapping ErrBadRetryAfter; the result
// is never negative.
func ParseRetryAfter(value string, now time.Time) (time.Duration, error) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, badRetryAfter(value)
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxRetryAfterSeconds { // only overflow is possible here
			return time.Duration(maxRetryAfterSeconds) * time.Second, nil
		}
		return time.Duration(n) * time.Second, nil
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, badRetryAfter(value)
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func badRetryAfter(v string) error {
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return &retryAfterError{value: v}
}

type retryAfterError struct{ value string }

func (e *retryAfterError) Error() string {
	return ErrBadRetryAfter.Error() + ": " + strconv.Quote(e.value)
}

func (e *retryAfterError) Unwrap() error { return ErrBadRetryAfter }
