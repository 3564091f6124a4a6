package gateway

import (
	"encoding/json"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

var grpcOps = kindOps[gwv1.GRPCRouteRule]{
	name:  func(r *gwv1.GRPCRouteRule) *gwv1.SectionName { return r.Name },
	canon: canonGRPC,
	refs: func(rules []gwv1.GRPCRouteRule) ruleRefs {
		return grpcRefs(&gwv1.GRPCRoute{Spec: gwv1.GRPCRouteSpec{Rules: rules}})
	},
	copy: func(rules []gwv1.GRPCRouteRule) []gwv1.GRPCRouteRule {
		out := make([]gwv1.GRPCRouteRule, len(rules))
		for i := range rules {
			rules[i].DeepCopyInto(&out[i])
		}
		return out
	},
	build: buildGRPC,
	spec:  specGRPCRule,
	limits: func(rules []gwv1.GRPCRouteRule) error {
		return checkLimits(len(rules),
			func(i int) int { return len(rules[i].BackendRefs) },
			func(i int) int { return len(rules[i].Matches) },
			func(i, j int) int { return len(rules[i].Matches[j].Headers) })
	},
}

// applyExtrasGRPC applies s to a GRPCRoute (see applyExtraRules): header routes only.
func applyExtrasGRPC(rt *gwv1.GRPCRoute, s *extrasAsk) (bool, error) {
	return applyExtraRules(&grpcOps, &rt.ObjectMeta, &rt.Spec.Rules, s)
}

var (
	grpcHeaderExact = gwv1.GRPCHeaderMatchExact
	grpcMethodExact = gwv1.GRPCMethodMatchExact
)

func canonGRPC(r *gwv1.GRPCRouteRule, withName bool) []byte {
	c := r.DeepCopy()
	if !withName {
		c.Name = nil
	}
	for i := range c.Matches {
		m := &c.Matches[i]
		if m.Method != nil && m.Method.Type == nil {
			m.Method.Type = new(grpcMethodExact)
		}
		for j := range m.Headers {
			if m.Headers[j].Type == nil {
				m.Headers[j].Type = new(grpcHeaderExact)
			}
		}
	}
	for i := range c.BackendRefs {
		defaultRef(&c.BackendRefs[i].BackendRef)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return []byte(err.Error())
	}
	return b
}

// buildGRPC returns the header rule for the user's rule r; sticky
// sessions and mirrors are refused (see Router.SetRoutes).
func buildGRPC(rules []gwv1.GRPCRouteRule, r int, s *extrasAsk) ([]gwv1.GRPCRouteRule, []RuleRole, error) {
	switch {
	case s.extras.Sticky != nil:
		return nil, nil, &UnsupportedError{Extra: "sticky sessions", Reason: "a GRPCRoute cannot set a cookie on its responses portably"}
	case s.extras.MirrorPercent > 0:
		return nil, nil, &UnsupportedError{Extra: "mirror", Reason: "mirrors are programmed on HTTPRoutes only"}
	}
	R := &rules[r]
	conds, err := headerConds(s.extras.HeaderRoute)
	if err != nil {
		return nil, nil, err
	}
	names := func(j int) []string {
		var out []string
		for _, h := range R.Matches[j].Headers {
			out = append(out, string(h.Name))
		}
		return out
	}
	if err := checkHeaderClash(r, names, len(R.Matches), conds); err != nil {
		return nil, nil, err
	}
	var hs []gwv1.GRPCHeaderMatch
	for _, c := range conds {
		t := gwv1.GRPCHeaderMatchExact
		if c.regex {
			t = gwv1.GRPCHeaderMatchRegularExpression
		}
		hs = append(hs, gwv1.GRPCHeaderMatch{Type: new(t), Name: gwv1.GRPCHeaderName(c.name), Value: c.value})
	}
	base := R.Matches
	if len(base) == 0 {
		base = []gwv1.GRPCRouteMatch{{}}
	}
	c := R.DeepCopy()
	c.Name = new(gwv1.SectionName(extraRulePrefix(s.id) + string(RoleHeader)))
	c.Matches = make([]gwv1.GRPCRouteMatch, len(base))
	for j := range base {
		base[j].DeepCopyInto(&c.Matches[j])
		if m := c.Matches[j].Method; m != nil && m.Type == nil {
			m.Type = new(grpcMethodExact)
		}
		c.Matches[j].Headers = append(c.Matches[j].Headers, hs...)
	}
	_, canary := s.sides()
	c.BackendRefs = nil
	for k := range R.BackendRefs {
		if canary.matches(&R.BackendRefs[k].BackendObjectReference, s.ns) {
			ref := R.BackendRefs[k].DeepCopy()
			ref.Weight = new(int32(1))
			defaultRef(&ref.BackendRef)
			c.BackendRefs = append(c.BackendRefs, *ref)
			break
		}
	}
	return []gwv1.GRPCRouteRule{*c}, []RuleRole{RoleHeader}, nil
}
