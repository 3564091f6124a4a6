package gateway

import (
	"errors"
	"fmt"

	"github.com/upshift-dev/upshift/rollout"
)

// ErrInvalid is matched by every error about the Router's configuration or a
// route's contents that retrying cannot fix.
var ErrInvalid = errors.New("gateway: invalid")

// RouteNotFoundError: a managed route does not exist. It matches
// rollout.ErrNotFound.
type RouteNotFoundError struct {
	Route RouteRef
}

func (e *RouteNotFoundError) Error() string {
	return fmt.Sprintf("gateway: %s not found", e.Route)
}

// Is makes errors.Is(err, rollout.ErrNotFound) true.
func (e *RouteNotFoundError) Is(target error) bool { return target == rollout.ErrNotFound }

// BackendNotFoundError: a route has no backendRef that names Backend
// exactly. Near names a ref with the same name that differs in group, kind,
// namespace or port, when there is one.
type BackendNotFoundError struct {
	Route   RouteRef
	Backend Backend
	Near    string
}

func (e *BackendNotFoundError) Error() string {
	msg := fmt.Sprintf("gateway: %s has no backendRef %s", e.Route, e.Backend)
	if e.Near != "" {
		msg += fmt.Sprintf(" (it has %s, which differs in group, kind, namespace or port)", e.Near)
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalid) and errors.Is(err, rollout.ErrNotFound) true.
func (e *BackendNotFoundError) Is(target error) bool {
	return target == ErrInvalid || target == rollout.ErrNotFound
}

// NoSharedRuleError: both backends are in the route, but in no rule
// together, so no rule can split traffic between them.
type NoSharedRuleError struct {
	Route RouteRef
	A, B  Backend
}

func (e *NoSharedRuleError) Error() string {
	return fmt.Sprintf("gateway: %s has no rule with both %s and %s", e.Route, e.A, e.B)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *NoSharedRuleError) Is(target error) bool { return target == ErrInvalid }

// NotAcceptedError: a parent of the route explicitly refused its current
// generation (Accepted or ResolvedRefs False). It is reported in
// rollout.RouteStatus.Rejected; the weights count as not applied.
type NotAcceptedError struct {
	Route     RouteRef
	Parent    string
	Condition string
	Reason    string
	Message   string
}

func (e *NotAcceptedError) Error() string {
	return fmt.Sprintf("gateway: %s not accepted by %s: %s=False %s: %s", e.Route, e.Parent, e.Condition, e.Reason, e.Message)
}

// withRoute fills in the route of a rule error.
func withRoute(err error, ref RouteRef) error {
	var bnf *BackendNotFoundError
	var nsr *NoSharedRuleError
	switch {
	case errors.As(err, &bnf):
		bnf.Route = ref
	case errors.As(err, &nsr):
		nsr.Route = ref
	}
	return err
}
