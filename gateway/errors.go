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

// ExtraBackendError: a rule that holds both managed backends does not
// split its traffic between exactly those two backendRefs, so the weights
// the Router writes would not be the shares the data plane serves. Rule is
// the rule's index in spec.rules; Backend is the offending backendRef, as
// "[group/]Kind namespace/name[:port]".
//
// Without Duplicate, Backend is a third backend whose weight is above 0;
// Weight is its weight as the spec has it (nil: omitted, which Gateway API
// reads as 1). Set its weight to 0 or move it to a rule of its own. With
// Duplicate, Backend is one of the two managed backends named a second
// time in the rule, which would double that side's share; keep one
// backendRef to it.
//
// It matches ErrInvalid and is rollout.Permanent: a rollout aborts instead
// of counting 70/30 while a third backend takes its own share, and its walk
// back writes nothing until the rule is fixed. A backend that must keep
// serving belongs in a rule of its own (a different match), where the
// Router leaves it alone.
type ExtraBackendError struct {
	Route     RouteRef
	Rule      int
	Backend   string
	Weight    *int32
	Duplicate bool
}

func (e *ExtraBackendError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("gateway: %s rule %d names %s more than once: the Router needs exactly one backendRef to each side of a rule it splits", e.Route, e.Rule, e.Backend)
	}
	w := "no weight, which means 1"
	if e.Weight != nil {
		w = fmt.Sprintf("weight %d", *e.Weight)
	}
	return fmt.Sprintf("gateway: %s rule %d also sends traffic to %s (%s): the Router splits a rule between its two backends only; set that weight to 0 or move %s to a rule of its own", e.Route, e.Rule, e.Backend, w, e.Backend)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ExtraBackendError) Is(target error) bool { return target == ErrInvalid }

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
	var ebe *ExtraBackendError
	switch {
	case errors.As(err, &bnf):
		bnf.Route = ref
	case errors.As(err, &nsr):
		nsr.Route = ref
	case errors.As(err, &ebe):
		ebe.Route = ref
	}
	return err
}
