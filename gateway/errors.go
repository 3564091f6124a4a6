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
	var orc *ExtraRuleConflictError
	var rle *RuleLimitError
	var hce *HeaderClashError
	var sce *SetCookieClashError
	var ue *UnsupportedError
	var pe *PrecedenceError
	var se *ShadowedError
	switch {
	case errors.As(err, &bnf):
		bnf.Route = ref
	case errors.As(err, &nsr):
		nsr.Route = ref
	case errors.As(err, &ebe):
		ebe.Route = ref
	case errors.As(err, &orc):
		orc.Route = ref
	case errors.As(err, &rle):
		rle.Route = ref
	case errors.As(err, &hce):
		hce.Route = ref
	case errors.As(err, &sce):
		sce.Route = ref
	case errors.As(err, &ue):
		ue.Route = ref
	case errors.As(err, &pe):
		pe.Route = ref
		if pe.Other == (RouteRef{}) {
			pe.Other = ref
		}
	case errors.As(err, &se):
		se.Route = ref
		if se.Other == (RouteRef{}) {
			se.Other = ref
		}
	}
	return err
}

// ExtraRuleConflictError: a rule (or the mirror's TraefikService) carries a
// name the Router gives what it adds for extras, but not the content the Router
// recorded for it: another writer edited it, or wrote it. The Router never
// overwrites it; SetRoutes refuses with this error and writes nothing.
// Rule is the rule's index in spec.rules (-1 for the TraefikService); Name
// is its name. Remove the object (or restore it) and the next SetRoutes
// programs the extras again. It matches ErrInvalid and is
// rollout.Permanent.
type ExtraRuleConflictError struct {
	Route RouteRef
	Rule  int
	Name  string
}

// OwnedRuleConflictError is ExtraRuleConflictError under its former name.
//
// Deprecated: use ExtraRuleConflictError.
type OwnedRuleConflictError = ExtraRuleConflictError

func (e *ExtraRuleConflictError) Error() string {
	if e.Rule < 0 {
		return fmt.Sprintf("gateway: %s: %s exists but was not written by this Router (or was edited since); it is left alone: delete it to let the Router write it", e.Route, e.Name)
	}
	return fmt.Sprintf("gateway: %s rule %d (%s) carries a name the Router owns but was edited by another writer; it is left alone: delete the rule to let the Router write it again", e.Route, e.Rule, e.Name)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ExtraRuleConflictError) Is(target error) bool { return target == ErrInvalid }

// RuleLimitError: the extras need more than Gateway API allows in one
// route: at most 16 rules, 16 backendRefs per rule, 16 header matches per
// match and 128 matches per route. Field is the path of the list that
// would overflow (spec.rules, spec.rules[i].backendRefs,
// spec.rules[i].matches[j].headers or spec.rules[*].matches), Need the
// length the extras need and Max the limit. Nothing is written. It matches
// ErrInvalid and is rollout.Permanent.
type RuleLimitError struct {
	Route RouteRef
	Field string
	Need  int
	Max   int
}

func (e *RuleLimitError) Error() string {
	return fmt.Sprintf("gateway: %s: the traffic extras need %d entries in %s; Gateway API allows %d", e.Route, e.Need, e.Field, e.Max)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *RuleLimitError) Is(target error) bool { return target == ErrInvalid }

// HeaderClashError: an extra rule would match a header that the user's
// rule, or another match of the same extras, already matches. Gateway API
// counts only the first match of a header name in a match, so the extra's
// condition would be ignored. Field is the path of the clashing match
// (spec.rules[i].matches[j].headers[k] in the route, or
// extras.headerRoute.matches[k]), Header the header's name (Cookie for a
// cookie match or sticky sessions). Nothing is written. It matches
// ErrInvalid and is rollout.Permanent.
type HeaderClashError struct {
	Route  RouteRef
	Field  string
	Header string
}

func (e *HeaderClashError) Error() string {
	return fmt.Sprintf("gateway: %s: %s already matches header %s: a second match on it would be ignored", e.Route, e.Field, e.Header)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *HeaderClashError) Is(target error) bool { return target == ErrInvalid }

// SetCookieClashError: the user's rule has a ResponseHeaderModifier that
// sets (rather than adds) Set-Cookie, which would replace the session
// ticket the sticky rules add. Field is the path of the filter. Nothing is
// written. It matches ErrInvalid and is rollout.Permanent.
type SetCookieClashError struct {
	Route RouteRef
	Field string
}

func (e *SetCookieClashError) Error() string {
	return fmt.Sprintf("gateway: %s: %s sets Set-Cookie, which would replace the session cookie; use add instead of set", e.Route, e.Field)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *SetCookieClashError) Is(target error) bool { return target == ErrInvalid }

// UnsupportedError: an extra the route or its gateways cannot carry.
// Extra names it (header route, mirror, sticky sessions); GatewayClass and
// Missing name the class and the features it does not list in
// status.supportedFeatures, when that is the reason; Reason says why
// otherwise. Nothing is written. It matches rollout.ErrUnsupported and is
// rollout.Permanent.
type UnsupportedError struct {
	Route        RouteRef
	Extra        string
	GatewayClass string
	Missing      []string
	Reason       string
}

func (e *UnsupportedError) Error() string {
	msg := fmt.Sprintf("gateway: %s: %s unsupported", e.Route, e.Extra)
	if e.GatewayClass != "" {
		msg += fmt.Sprintf(": GatewayClass %s does not list %v in status.supportedFeatures", e.GatewayClass, e.Missing)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, rollout.ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == rollout.ErrUnsupported }

// PrecedenceError: an extra header or sticky rule cannot go into the route
// without taking requests that another rule wins today under Gateway API's
// precedence (see Router.SetRoutes). Rule is that rule's index in the
// spec.rules of Other (the managed route itself when Other is Route, or
// another route on the same listener and hostname) and OtherMatch its
// match; Role is the extra rule and Match the match of the split rule it
// copies. Reason says why no place in the list is safe. Nothing is written.
// Give the rule more conditions than the extra rule (or fewer than the
// split rule), or drop the extra. It matches ErrInvalid and is
// rollout.Permanent.
type PrecedenceError struct {
	Route      RouteRef
	Role       RuleRole
	Match      int
	Other      RouteRef
	Rule       int
	OtherMatch int
	Reason     string
}

func (e *PrecedenceError) Error() string {
	return fmt.Sprintf("gateway: %s: the %s rule (for match %d of the split rule) would take requests that %s rule %d match %d wins today: %s",
		e.Route, e.Role, e.Match, e.Other, e.Rule, e.OtherMatch, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *PrecedenceError) Is(target error) bool { return target == ErrInvalid }

// ShadowedError: the header route can never reach the canary: for every
// match of the split rule, a rule that ranks above the header rule in
// Gateway API's precedence matches every request the header rule would.
// Rule is the index in the spec.rules of Other (the managed route itself
// when Other is Route, or another route on the same listener and hostname)
// of one such rule, Match its match. Nothing is written, and Routes never
// reports such a header route programmed. It matches ErrInvalid and is
// rollout.Permanent.
type ShadowedError struct {
	Route RouteRef
	Other RouteRef
	Rule  int
	Match int
}

func (e *ShadowedError) Error() string {
	return fmt.Sprintf("gateway: %s: the header route is shadowed: %s rule %d match %d ranks above it and matches every request it would, so no request could reach the canary through it",
		e.Route, e.Other, e.Rule, e.Match)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ShadowedError) Is(target error) bool { return target == ErrInvalid }
