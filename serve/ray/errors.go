package ray

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/upshift-dev/upshift/rollout"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid is matched by every *ConfigError.
	ErrInvalid = errors.New("ray: invalid config")
	// ErrRejected is matched by an *HTTPError for a 400: Ray refused the
	// config. Such errors are also marked rollout.Permanent.
	ErrRejected = errors.New("ray: Ray rejected the request")
	// ErrResponseTooLarge: an answer exceeded Config.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("ray: response too large")
	// ErrServing is matched by a *ServingError: Deploy refused to change
	// the config of a cluster that may serve traffic.
	ErrServing = errors.New("ray: the cluster serves another config")
	// ErrUnknownRevision: with Config.Revisions set, SetCapacity does not
	// know which revision's config the cluster runs (none was deployed or
	// recognised by this adapter, or the cluster now runs another config)
	// and was asked to raise its capacity, or to lower it on a cluster
	// whose config it cannot write back as it runs; it wrote nothing.
	// Lowering the capacity of such a cluster is carried out (see
	// Ray.SetCapacity). Not marked permanent: the next
	// Deployer.Revision may recognise the cluster's config.
	ErrUnknownRevision = errors.New("ray: unknown revision")
)

// ConfigError names one invalid field of Config. New joins one per problem.
// For a revision's config (Config.Revisions), Field names the revision:
// Revisions["v2"].applications[0].name; Deploy and Revision return such
// errors joined and marked rollout.Permanent.
type ConfigError struct {
	Field   string
	Problem string
	// Err is the error Config.Revisions returned, if that was the problem.
	Err error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("ray: invalid config: %s: %s", e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// ServingError is a Deploy refused because the cluster may serve traffic:
// its target_capacity is not 0 (null counts as 100) and it runs
// applications whose config is not the revision's. Deploy never changes
// the config of such a cluster; the rollout brings a side to
// target_capacity 0 before it deploys. It matches ErrServing and comes
// wrapped in rollout.Permanent.
type ServingError struct {
	// URL is the Serve endpoint.
	URL string
	// Revision is the revision asked; Running the revision the cluster runs
	// as far as the adapter knows ("" when unknown).
	Revision, Running string
	// TargetCapacity is the cluster's (nil for null).
	TargetCapacity *float64
}

func (e *ServingError) Error() string {
	tc := "null"
	if e.TargetCapacity != nil {
		tc = strconv.FormatFloat(*e.TargetCapacity, 'f', -1, 64)
	}
	running := "a config of no known revision"
	if e.Running != "" {
		running = fmt.Sprintf("revision %q", e.Running)
	}
	return fmt.Sprintf("ray: %s: refusing to deploy revision %q: the cluster runs %s at target_capacity %s, not 0",
		e.URL, e.Revision, running, tc)
}

// Is makes errors.Is(err, ErrServing) hold.
func (e *ServingError) Is(target error) bool { return target == ErrServing }

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
		return fmt.Sprintf("ray: %s %s: status %d", e.Method, e.URL, e.StatusCode)
	}
	return fmt.Sprintf("ray: %s %s: status %d: %s", e.Method, e.URL, e.StatusCode, body)
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

// RedirectError is a redirect the adapter refused to follow. A request
// follows a redirect only within the dashboard's origin (Config.Dashboard's
// scheme, host and port) and only with its method unchanged:
//
//   - A redirect to another scheme, host or port is refused rather than
//     followed without the token: following would still carry the Serve
//     config of a PUT (a 307 or 308 resends the body), and net/http keeps
//     Authorization on a redirect to another port of the same host or to
//     a subdomain, and X-Ray-Authorization on a redirect anywhere. Nothing
//     is sent to Location.
//   - A 301, 302 or 303 answering a PUT is refused: net/http would follow
//     it with a GET, and the write would be lost while the call succeeds.
//
// It comes wrapped in rollout.Permanent: a dashboard URL that redirects
// elsewhere is a configuration to fix (set Dashboard to where the
// dashboard answers), not a failure to retry.
type RedirectError struct {
	// Method and URL are the request's; StatusCode is the redirect's
	// status and Location where it pointed (without any user:password).
	Method, URL string
	StatusCode  int
	Location    string
	// Reason says why it was refused.
	Reason string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("ray: %s %s: refused to follow the %d redirect to %s: %s", e.Method, e.URL, e.StatusCode, e.Location, e.Reason)
}
