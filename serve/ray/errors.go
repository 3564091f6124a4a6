package serve

import (
	"errors"
	"fmt"
	"strings"

	"github.com/upshift-dev/upshift/rollout"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrConfig is matched by every *ConfigError.
	ErrConfig = errors.New("serve: invalid config")
	// ErrRejected is matched by an *HTTPError for a 400: Ray refused the
	// config. Such errors are also marked rollout.Permanent.
	ErrRejected = errors.New("serve: Ray rejected the request")
	// ErrResponseTooLarge: an answer exceeded Config.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("serve: response too large")
)

// ConfigError names one invalid field of Config. New joins one per problem.
type ConfigError struct {
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("serve: invalid config: %s: %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// HTTPError is an answer from the dashboard with a status other than 200.
// Body is the start of what Ray said (its validation text for a 400).
//
// 400 matches ErrRejected and comes wrapped in rollout.Permanent, as do the
// other 4xx but 404, 408 and 429 (a request that cannot succeed as it is:
// a bad token, a forbidden call). 404 wraps rollout.ErrNotFound (no Serve
// API at that address). 5xx, 408 and 429 are transient: retry.
type HTTPError struct {
	Method     string
	URL        string
	StatusCode int
	Body       string
}

func (e *HTTPError) Error() string {
	body := strings.TrimSpace(e.Body)
	if body == "" {
		return fmt.Sprintf("serve: %s %s: status %d", e.Method, e.URL, e.StatusCode)
	}
	return fmt.Sprintf("serve: %s %s: status %d: %s", e.Method, e.URL, e.StatusCode, body)
}

// Is makes a 400 match ErrRejected.
func (e *HTTPError) Is(target error) bool {
	return target == ErrRejected && e.StatusCode == 400
}

// Unwrap returns rollout.ErrNotFound for a 404, nil otherwise.
func (e *HTTPError) Unwrap() error {
	if e.StatusCode == 404 {
		return rollout.ErrNotFound
	}
	return nil
}

// Temporary reports whether retrying the same request may succeed.
func (e *HTTPError) Temporary() bool {
	return e.StatusCode >= 500 || e.StatusCode == 408 || e.StatusCode == 429 || e.StatusCode == 404
}
