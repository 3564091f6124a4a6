package drain

import (
	"errors"
	"strings"
)

// Sentinel errors. Compare with errors.Is; the package wraps them with %w.
var (
	// ErrInvalid is matched by every *ConfigError.
	ErrInvalid = errors.New("drain: invalid config")

	// ErrDraining is the cause (context.Cause) given to the context of a
	// CancelOnDrain request when the controller enters Draining.
	ErrDraining = errors.New("drain: request cancelled: the server is draining")

	// ErrTerminating is the cause given to the context of every request
	// still running when the controller enters Terminating.
	ErrTerminating = errors.New("drain: request cancelled: the server is terminating")

	// ErrNilServer is returned by Attach when given a nil *http.Server.
	ErrNilServer = errors.New("drain: nil *http.Server")

	// ErrTooLate is returned by Attach once the controller is Terminating
	// or Stopped: the server would never be shut down by it.
	ErrTooLate = errors.New("drain: controller is already terminating")

	// errGraceExpired ends http.Server.Shutdown when the grace period
	// runs out; the server is then closed.
	errGraceExpired = errors.New("drain: grace period expired")
)

// ConfigError reports one invalid field of a [Config]. It matches
// [ErrInvalid] (errors.Is). Config.Validate joins one ConfigError per problem
// with errors.Join, so every problem is reported at once. It is plain
// data, safe to share once returned.
type ConfigError struct {
	Field   string // the Config field, e.g. "AcceptGrace"
	Problem string // what is wrong with it
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	b.WriteString(": ")
	b.WriteString(e.Field)
	b.WriteString(": ")
	b.WriteString(e.Problem)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalid }
