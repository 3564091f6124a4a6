package retry

import (
	"errors"
	"math"
	"strconv"
	"sync"
)

// Defaults used for zero fields of Budget.
const (
	DefaultMaxTokens  = 10
	DefaultTokenRatio = 0.1
)

// Budget is a retry budget shared by every Transport (and every client
// process component) that points to it: a token bucket with the
// semantics of gRPC's retryThrottling. It starts full with MaxTokens
// tokens; every failed attempt (a transport error or a 503) takes one
// token, every other response gives back TokenRatio tokens, never
// above MaxTokens. A retry is allowed only while more than half the
// tokens remain. When a recovering server fails most requests, the
// fleet therefore stops retrying after about MaxTokens/2 failures and
// resumes as successes refill the bucket: over any run of failing calls
// the retries sum to less than MaxTokens/2 plus what successes earned.
//
// The zero value is a budget with DefaultMaxTokens (10) and
// DefaultTokenRatio (0.1). Set the fields before first use and do not
// change them afterwards. A *Budget is safe for concurrent use.
type Budget struct {
	MaxTokens  float64 // > 0; zero means DefaultMaxTokens
	TokenRatio float64 // in (0, 1]; zero means DefaultTokenRatio

	mu      sync.Mutex
	started bool
	tokens  float64
}

// Validate reports invalid fields as *ConfigError values joined with
// errors.Join; field names are prefixed with "Budget.".
func (b *Budget) Validate() error {
	var errs []error
	if !(b.MaxTokens >= 0) || math.IsInf(b.MaxTokens, 0) {
		errs = append(errs, &ConfigError{Field: "Budget.MaxTokens", Problem: "must be a finite number > 0 (0 for the default), got " + fmtFloat(b.MaxTokens)})
	}
	if !(b.TokenRatio >= 0 && b.TokenRatio <= 1) {
		errs = append(errs, &ConfigError{Field: "Budget.TokenRatio", Problem: "must be in (0, 1] (0 for the default), got " + fmtFloat(b.TokenRatio)})
	}
	return errors.Join(errs...)
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// limits returns the effective maximum and ratio; invalid values fall
// back to the defaults (RoundTrip validates before using a Budget).
func (b *Budget) limits() (maxTokens, ratio float64) {
	maxTokens, ratio = b.MaxTokens, b.TokenRatio
	if !(maxTokens > 0) || math.IsInf(maxTokens, 0) {
		maxTokens = DefaultMaxTokens
	}
	if !(ratio > 0 && ratio <= 1) {
		ratio = DefaultTokenRatio
	}
	return maxTokens, ratio
}

func (b *Budget) startLocked(maxTokens float64) {
	if !b.started {
		b.started = true
		b.tokens = maxTokens
	}
}

// Tokens returns the tokens left.
func (b *Budget) Tokens() float64 {
	maxTokens, _ := b.limits()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startLocked(maxTokens)
	return b.tokens
}

// failure takes a token for a failed attempt and reports whether a retry
// is still allowed.
func (b *Budget) failure() (retryAllowed bool) {
	maxTokens, _ := b.limits()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startLocked(maxTokens)
	b.tokens--
	if b.tokens < 0 {
		b.tokens = 0
	}
	return b.tokens > maxTokens/2
}

// success gives back TokenRatio tokens.
func (b *Budget) success() {
	maxTokens, ratio := b.limits()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startLocked(maxTokens)
	b.tokens += ratio
	if b.tokens > maxTokens {
		b.tokens = maxTokens
	}
}
