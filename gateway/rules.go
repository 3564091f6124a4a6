package gateway

import (
	"fmt"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Backend names one backend of a route by exact reference. The defaults are
// Gateway API's: an empty Group is the core group, an empty Kind is
// "Service", an empty Namespace is the route's own. Port must equal the
// ref's port; 0 matches only a ref without a port. Names are compared whole,
// never as substrings.
type Backend struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Port      int32  `json:"port,omitempty"`
}

func (b Backend) String() string {
	kind := b.Kind
	if kind == "" {
		kind = "Service"
	}
	s := kind + " " + b.Name
	if b.Namespace != "" {
		s = kind + " " + b.Namespace + "/" + b.Name
	}
	if b.Port != 0 {
		s += fmt.Sprintf(":%d", b.Port)
	}
	return s
}

// matches reports whether ref names b, for a route in namespace ns.
func (b *Backend) matches(ref *gwv1.BackendObjectReference, ns string) bool {
	if string(ref.Name) != b.Name {
		return false
	}
	group, kind, refNS := "", "Service", ns
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	if ref.Namespace != nil {
		refNS = string(*ref.Namespace)
	}
	wantKind, wantNS := b.Kind, b.Namespace
	if wantKind == "" {
		wantKind = "Service"
	}
	if wantNS == "" {
		wantNS = ns
	}
	var port int32
	if ref.Port != nil {
		port = int32(*ref.Port)
	}
	return group == b.Group && kind == wantKind && refNS == wantNS && port == b.Port
}

// nameOnly reports whether ref has b's name but differs in another part of
// the reference: worth naming in an error.
func (b *Backend) nameOnly(ref *gwv1.BackendObjectReference) bool {
	return string(ref.Name) == b.Name
}

// ruleRefs is the backendRefs of every rule of a route, whatever its kind.
type ruleRefs [][]*gwv1.BackendRef

// setWeights writes weight wa on the ref to a and wb on the ref to b, in
// every rule that holds both. Rules with only one of them, other backends
// and everything else are left alone. A rule that holds both must name each
// of them once and hold nothing else that gets traffic (see checkShared).
// It reports whether anything changed. It changes nothing when it returns
// an error.
func setWeights(rules ruleRefs, a, b *Backend, ns string, wa, wb int32) (bool, error) {
	if err := checkRules(rules, a, b, ns); err != nil {
		return false, err
	}
	changed := false
	// Refs that change share two fresh values (the route is ours to write):
	// two allocations per call, however many refs.
	var pa, pb *int32
	for _, refs := range rules {
		if !holdsBoth(refs, a, b, ns) {
			continue
		}
		for _, ref := range refs {
			var p **int32
			var w int32
			switch {
			case a.matches(&ref.BackendObjectReference, ns):
				p, w = &pa, wa
			case b.matches(&ref.BackendObjectReference, ns):
				p, w = &pb, wb
			default:
				continue
			}
			if ref.Weight == nil || *ref.Weight != w {
				if *p == nil {
					*p = new(int32)
					**p = w
				}
				ref.Weight = *p
				changed = true
			}
		}
	}
	return changed, nil
}

// readWeights returns the weights of a and b in the first rule that holds
// both, as the spec has them (an omitted weight is 1, as the data plane
// reads it), and whether every such rule agrees. checkRules guarantees each
// such rule splits its traffic between exactly those two refs, so the
// shares are wa/(wa+wb) and wb/(wa+wb): a pair that sums to 100 is the real
// split in percent.
func readWeights(rules ruleRefs, a, b *Backend, ns string) (wa, wb int32, agree bool, err error) {
	if err := checkRules(rules, a, b, ns); err != nil {
		return 0, 0, false, err
	}
	first := true
	agree = true
	for _, refs := range rules {
		if !holdsBoth(refs, a, b, ns) {
			continue
		}
		var ra, rb int32
		for _, ref := range refs {
			w := int32(1)
			if ref.Weight != nil {
				w = *ref.Weight
			}
			switch {
			case a.matches(&ref.BackendObjectReference, ns):
				ra = w
			case b.matches(&ref.BackendObjectReference, ns):
				rb = w
			}
		}
		if first {
			wa, wb, first = ra, rb, false
		} else if ra != wa || rb != wb {
			agree = false
		}
	}
	return wa, wb, agree, nil
}

func holdsBoth(refs []*gwv1.BackendRef, a, b *Backend, ns string) bool {
	hasA, hasB := false, false
	for _, ref := range refs {
		hasA = hasA || a.matches(&ref.BackendObjectReference, ns)
		hasB = hasB || b.matches(&ref.BackendObjectReference, ns)
	}
	return hasA && hasB
}

// checkRules finds both backends and a rule that holds them both, and
// checks that every rule holding both splits traffic between them alone.
func checkRules(rules ruleRefs, a, b *Backend, ns string) error {
	foundA, foundB, both := false, false, false
	var near *gwv1.BackendObjectReference
	for _, refs := range rules {
		for _, ref := range refs {
			foundA = foundA || a.matches(&ref.BackendObjectReference, ns)
			foundB = foundB || b.matches(&ref.BackendObjectReference, ns)
			if near == nil && (a.nameOnly(&ref.BackendObjectReference) || b.nameOnly(&ref.BackendObjectReference)) &&
				!a.matches(&ref.BackendObjectReference, ns) && !b.matches(&ref.BackendObjectReference, ns) {
				near = &ref.BackendObjectReference
			}
		}
		both = both || holdsBoth(refs, a, b, ns)
	}
	missing := []*Backend{}
	if !foundA {
		missing = append(missing, a)
	}
	if !foundB {
		missing = append(missing, b)
	}
	if len(missing) > 0 {
		e := &BackendNotFoundError{Backend: *missing[0]}
		if near != nil {
			e.Near = describeRef(near, ns)
		}
		return e
	}
	if !both {
		return &NoSharedRuleError{A: *a, B: *b}
	}
	for i, refs := range rules {
		if !holdsBoth(refs, a, b, ns) {
			continue
		}
		if err := checkShared(i, refs, a, b, ns); err != nil {
			return err
		}
	}
	return nil
}

// checkShared checks one rule that holds both backends: it must split its
// traffic between exactly one ref to a and one ref to b. Any other ref that
// gets traffic (a weight above 0, or no weight, which means 1) would take a
// share the weights do not show, and a second ref to a or b would double
// that side's share, so both are refused. Other refs with weight 0 get no
// traffic and are allowed.
func checkShared(rule int, refs []*gwv1.BackendRef, a, b *Backend, ns string) error {
	seenA, seenB := false, false
	for _, ref := range refs {
		obj := &ref.BackendObjectReference
		var seen *bool
		switch {
		case a.matches(obj, ns):
			seen = &seenA
		case b.matches(obj, ns):
			seen = &seenB
		default:
			if ref.Weight == nil || *ref.Weight != 0 {
				e := &ExtraBackendError{Rule: rule, Backend: describeRef(obj, ns)}
				if ref.Weight != nil {
					e.Weight = new(*ref.Weight)
				}
				return e
			}
			continue
		}
		if *seen {
			return &ExtraBackendError{Rule: rule, Backend: describeRef(obj, ns), Duplicate: true}
		}
		*seen = true
	}
	return nil
}

func describeRef(ref *gwv1.BackendObjectReference, ns string) string {
	b := Backend{Name: string(ref.Name), Namespace: ns}
	if ref.Group != nil {
		b.Group = string(*ref.Group)
	}
	if ref.Kind != nil {
		b.Kind = string(*ref.Kind)
	}
	if ref.Namespace != nil {
		b.Namespace = string(*ref.Namespace)
	}
	if ref.Port != nil {
		b.Port = int32(*ref.Port)
	}
	s := b.String()
	if b.Group != "" {
		s = b.Group + "/" + s
	}
	return s
}

// httpRefs and grpcRefs collect pointers into a route's rules.
func httpRefs(r *gwv1.HTTPRoute) ruleRefs {
	return collect(r.Spec.Rules, func(rule *gwv1.HTTPRouteRule) int { return len(rule.BackendRefs) },
		func(rule *gwv1.HTTPRouteRule, j int) *gwv1.BackendRef { return &rule.BackendRefs[j].BackendRef })
}

func grpcRefs(r *gwv1.GRPCRoute) ruleRefs {
	return collect(r.Spec.Rules, func(rule *gwv1.GRPCRouteRule) int { return len(rule.BackendRefs) },
		func(rule *gwv1.GRPCRouteRule, j int) *gwv1.BackendRef { return &rule.BackendRefs[j].BackendRef })
}

func collect[R any](rules []R, n func(*R) int, at func(*R, int) *gwv1.BackendRef) ruleRefs {
	out := make(ruleRefs, len(rules))
	for i := range rules {
		out[i] = make([]*gwv1.BackendRef, n(&rules[i]))
		for j := range out[i] {
			out[i][j] = at(&rules[i], j)
		}
	}
	return out
}
