package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/strategy"
)

var httpOps = kindOps[gwv1.HTTPRouteRule]{
	name:  func(r *gwv1.HTTPRouteRule) *gwv1.SectionName { return r.Name },
	canon: canonHTTP,
	refs: func(rules []gwv1.HTTPRouteRule) ruleRefs {
		return httpRefs(&gwv1.HTTPRoute{Spec: gwv1.HTTPRouteSpec{Rules: rules}})
	},
	copy: func(rules []gwv1.HTTPRouteRule) []gwv1.HTTPRouteRule {
		out := make([]gwv1.HTTPRouteRule, len(rules))
		for i := range rules {
			rules[i].DeepCopyInto(&out[i])
		}
		return out
	},
	build: buildHTTP,
	spec:  specHTTPRule,
	limits: func(rules []gwv1.HTTPRouteRule) error {
		return checkLimits(len(rules),
			func(i int) int { return len(rules[i].BackendRefs) },
			func(i int) int { return len(rules[i].Matches) },
			func(i, j int) int { return len(rules[i].Matches[j].Headers) })
	},
}

// applyExtrasHTTP applies s to an HTTPRoute (see applyExtraRules).
func applyExtrasHTTP(rt *gwv1.HTTPRoute, s *extrasAsk) (bool, error) {
	return applyExtraRules(&httpOps, &rt.ObjectMeta, &rt.Spec.Rules, s)
}

// Gateway API defaults, filled in before a rule is hashed or compared.
var (
	pathPrefix  = gwv1.PathMatchPathPrefix
	slash       = "/"
	headerExact = gwv1.HeaderMatchExact
	queryExact  = gwv1.QueryParamMatchExact
	coreGroup   = gwv1.Group("")
	serviceKind = gwv1.Kind("Service")
)

func defaultObjectRef(r *gwv1.BackendObjectReference) {
	if r.Group == nil {
		r.Group = new(coreGroup)
	}
	if r.Kind == nil {
		r.Kind = new(serviceKind)
	}
}

func defaultRef(r *gwv1.BackendRef) {
	defaultObjectRef(&r.BackendObjectReference)
	if r.Weight == nil {
		r.Weight = new(int32(1))
	}
}

func defaultHTTPFilters(fs []gwv1.HTTPRouteFilter) {
	for i := range fs {
		f := &fs[i]
		if f.RequestMirror != nil {
			defaultObjectRef(&f.RequestMirror.BackendRef)
			if f.RequestMirror.Fraction != nil && f.RequestMirror.Fraction.Denominator == nil {
				f.RequestMirror.Fraction.Denominator = new(int32(100))
			}
		}
		if f.RequestRedirect != nil && f.RequestRedirect.StatusCode == nil {
			f.RequestRedirect.StatusCode = new(302)
		}
		if f.CORS != nil && f.CORS.MaxAge == 0 {
			f.CORS.MaxAge = 5
		}
	}
}

// canonHTTP is the JSON of a rule with Gateway API's defaults filled in,
// and without its name unless withName.
func canonHTTP(r *gwv1.HTTPRouteRule, withName bool) []byte {
	c := r.DeepCopy()
	if !withName {
		c.Name = nil
	}
	if len(c.Matches) == 0 {
		c.Matches = []gwv1.HTTPRouteMatch{{}}
	}
	for i := range c.Matches {
		m := &c.Matches[i]
		if m.Path == nil {
			m.Path = &gwv1.HTTPPathMatch{}
		}
		if m.Path.Type == nil {
			m.Path.Type = new(pathPrefix)
		}
		if m.Path.Value == nil {
			m.Path.Value = new(slash)
		}
		for j := range m.Headers {
			if m.Headers[j].Type == nil {
				m.Headers[j].Type = new(headerExact)
			}
		}
		for j := range m.QueryParams {
			if m.QueryParams[j].Type == nil {
				m.QueryParams[j].Type = new(queryExact)
			}
		}
	}
	defaultHTTPFilters(c.Filters)
	for i := range c.BackendRefs {
		defaultRef(&c.BackendRefs[i].BackendRef)
		defaultHTTPFilters(c.BackendRefs[i].Filters)
	}
	b, err := json.Marshal(c)
	if err != nil { // the API types always encode
		return []byte(err.Error())
	}
	return b
}

// sideRef returns the ref of rule to backend b.
func sideRef(refs []gwv1.HTTPBackendRef, b *Backend, ns string) *gwv1.HTTPBackendRef {
	for i := range refs {
		if b.matches(&refs[i].BackendObjectReference, ns) {
			return &refs[i]
		}
	}
	return nil
}

// cloneHTTPRef copies a ref, its filters included, with weight w and the
// defaults spelled out.
func cloneHTTPRef(ref *gwv1.HTTPBackendRef, w int32) gwv1.HTTPBackendRef {
	c := ref.DeepCopy()
	c.Weight = new(w)
	defaultRef(&c.BackendRef)
	defaultHTTPFilters(c.Filters)
	return *c
}

// cookieRE matches a Cookie header that carries cookie name with one of
// values, at cookie boundaries (RE2; unanchored engines see the same
// boundaries).
func cookieRE(name string, values ...string) string {
	alts := make([]string, len(values))
	for i, v := range values {
		alts[i] = regexp.QuoteMeta(v)
	}
	v := strings.Join(alts, "|")
	if len(alts) > 1 {
		v = "(" + v + ")"
	}
	return `(^|;\s*)` + regexp.QuoteMeta(name) + "=" + v + `(;|$)`
}

// headerMatch is one header condition of an extra rule.
type headerMatch struct {
	regex       bool
	name, value string
	field       string // where it comes from, for errors
}

// headerConds turns a header route into header conditions; a cookie match
// is a regular expression on Cookie.
func headerConds(h *strategy.HeaderRoute) ([]headerMatch, error) {
	var out []headerMatch
	seen := map[string]string{}
	for i, m := range h.Matches {
		c := headerMatch{name: m.Name, value: m.Value, field: fmt.Sprintf("extras.headerRoute.matches[%d]", i)}
		switch m.Type {
		case strategy.HeaderRegularExpression:
			c.regex = true
		case strategy.HeaderCookie:
			c.regex, c.name, c.value = true, "Cookie", cookieRE(m.Name, m.Value)
		}
		if prev, ok := seen[strings.ToLower(c.name)]; ok {
			return nil, &HeaderClashError{Field: c.field, Header: c.name + " (also " + prev + ")"}
		}
		seen[strings.ToLower(c.name)] = c.field
		out = append(out, c)
	}
	return out, nil
}

// checkHeaderClash refuses a rule whose matches already name a header of
// conds.
func checkHeaderClash(r int, names func(j int) []string, n int, conds []headerMatch) error {
	for j := 0; j < n; j++ {
		for k, name := range names(j) {
			for _, c := range conds {
				if strings.EqualFold(name, c.name) {
					return &HeaderClashError{Field: fmt.Sprintf("spec.rules[%d].matches[%d].headers[%d]", r, j, k), Header: name}
				}
			}
		}
	}
	return nil
}

func httpHeaders(conds []headerMatch) []gwv1.HTTPHeaderMatch {
	out := make([]gwv1.HTTPHeaderMatch, len(conds))
	for i, c := range conds {
		t := gwv1.HeaderMatchExact
		if c.regex {
			t = gwv1.HeaderMatchRegularExpression
		}
		out[i] = gwv1.HTTPHeaderMatch{Type: new(t), Name: gwv1.HTTPHeaderName(c.name), Value: c.value}
	}
	return out
}

// withHeaders returns every match of base with the conditions added.
func withHeaders(base []gwv1.HTTPRouteMatch, conds []headerMatch) []gwv1.HTTPRouteMatch {
	out := make([]gwv1.HTTPRouteMatch, len(base))
	for j := range base {
		base[j].DeepCopyInto(&out[j])
		out[j].Headers = append(out[j].Headers, httpHeaders(conds)...)
	}
	return out
}

// setCookie is the Set-Cookie value of ticket t.
func setCookie(st *strategy.Sticky, t int32) string {
	c := st.Cookie
	name := c.CookieName
	if name == "" {
		name = strategy.DefaultSessionCookie
	}
	maxAge := strategy.DefaultSessionMaxAge
	if c.MaxAge != nil {
		maxAge = c.MaxAge.Duration
	}
	path := c.Path
	if path == "" {
		path = "/"
	}
	sameSite := c.SameSite
	if sameSite == "" {
		sameSite = "Lax"
	}
	v := fmt.Sprintf("%s=%s.%d; Max-Age=%d; Path=%s", name, st.Run, t, int64(maxAge.Seconds()), path)
	if c.Domain != "" {
		v += "; Domain=" + c.Domain
	}
	if c.Secure {
		v += "; Secure"
	}
	return v + "; HttpOnly; SameSite=" + sameSite
}

func cookieName(st *strategy.Sticky) string {
	if st.Cookie.CookieName == "" {
		return strategy.DefaultSessionCookie
	}
	return st.Cookie.CookieName
}

// ticketCond matches the sessions of st holding one of tickets.
func ticketCond(st *strategy.Sticky, tickets []int32) headerMatch {
	vals := make([]string, len(tickets))
	for i, t := range tickets {
		vals[i] = strconv.Itoa(int(t))
	}
	re := `(^|;\s*)` + regexp.QuoteMeta(cookieName(st)+"="+st.Run+".") + "(" + strings.Join(vals, "|") + `)(;|$)`
	return headerMatch{regex: true, name: "Cookie", value: re, field: "extras.sticky"}
}

// addSetCookie adds a Set-Cookie header to a ref's responses, in its
// ResponseHeaderModifier when it has one (a filter type appears once).
func addSetCookie(ref *gwv1.HTTPBackendRef, value string) {
	h := gwv1.HTTPHeader{Name: "Set-Cookie", Value: value}
	for i := range ref.Filters {
		if f := &ref.Filters[i]; f.Type == gwv1.HTTPRouteFilterResponseHeaderModifier && f.ResponseHeaderModifier != nil {
			f.ResponseHeaderModifier.Add = append(f.ResponseHeaderModifier.Add, h)
			return
		}
	}
	ref.Filters = append(ref.Filters, gwv1.HTTPRouteFilter{
		Type:                   gwv1.HTTPRouteFilterResponseHeaderModifier,
		ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Add: []gwv1.HTTPHeader{h}},
	})
}

// setsCookie finds a filter that sets Set-Cookie.
func setsCookie(fs []gwv1.HTTPRouteFilter) int {
	for i, f := range fs {
		if f.ResponseHeaderModifier == nil {
			continue
		}
		for _, h := range f.ResponseHeaderModifier.Set {
			if strings.EqualFold(string(h.Name), "Set-Cookie") {
				return i
			}
		}
	}
	return -1
}

// mirrorFilter copies numerator/10000 of a rule's requests to b.
func mirrorFilter(b *Backend, numerator int32) gwv1.HTTPRouteFilter {
	ref := backendRef(*b, 0).BackendObjectReference
	defaultObjectRef(&ref)
	return gwv1.HTTPRouteFilter{
		Type: gwv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gwv1.HTTPRequestMirrorFilter{
			BackendRef: ref,
			Fraction:   &gwv1.Fraction{Numerator: numerator, Denominator: new(int32(10000))},
		},
	}
}

// traefikGroup and traefikServiceKind name a TraefikService backendRef.
const (
	traefikGroup       = "traefik.io"
	traefikServiceKind = "TraefikService"
)

// buildHTTP returns the extra rules for the user's rule r (see
// Router.SetRoutes for the layout).
func buildHTTP(rules []gwv1.HTTPRouteRule, r int, s *extrasAsk) ([]gwv1.HTTPRouteRule, []RuleRole, error) {
	R := &rules[r]
	stable, canary := s.sides()
	stRef, caRef := sideRef(R.BackendRefs, stable, s.ns), sideRef(R.BackendRefs, canary, s.ns)
	base := R.Matches
	if len(base) == 0 {
		base = []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: new(pathPrefix), Value: new(slash)}}}
	}
	names := func(j int) []string {
		if j >= len(R.Matches) {
			return nil
		}
		var out []string
		for _, h := range R.Matches[j].Headers {
			out = append(out, string(h.Name))
		}
		return out
	}
	x := s.extras
	var conds []headerMatch
	if x.HeaderRoute != nil && len(x.HeaderRoute.Matches) > 0 {
		var err error
		if conds, err = headerConds(x.HeaderRoute); err != nil {
			return nil, nil, err
		}
		if err := checkHeaderClash(r, names, len(R.Matches), conds); err != nil {
			return nil, nil, err
		}
	}
	st := x.Sticky
	if st != nil {
		if err := checkHeaderClash(r, names, len(R.Matches), []headerMatch{{name: "Cookie"}}); err != nil {
			return nil, nil, err
		}
		if i := setsCookie(R.Filters); i >= 0 {
			return nil, nil, &SetCookieClashError{Field: fmt.Sprintf("spec.rules[%d].filters[%d].responseHeaderModifier.set", r, i)}
		}
		for k := range R.BackendRefs {
			if i := setsCookie(R.BackendRefs[k].Filters); i >= 0 {
				return nil, nil, &SetCookieClashError{Field: fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters[%d].responseHeaderModifier.set", r, k, i)}
			}
		}
	}
	p := x.MirrorPercent
	if p > 0 && s.traefik != "" && len(stRef.Filters) > 0 {
		return nil, nil, &UnsupportedError{Extra: "mirror", Reason: fmt.Sprintf(
			"spec.rules[%d]: the stable backendRef has filters, which a TraefikService backendRef cannot carry", r)}
	}
	// stableTo is a ref to the stable side, through the mirror's
	// TraefikService when there is one.
	stableTo := func(w int32) gwv1.HTTPBackendRef {
		if p > 0 && s.traefik != "" {
			return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
				Group: new(gwv1.Group(traefikGroup)), Kind: new(gwv1.Kind(traefikServiceKind)), Name: gwv1.ObjectName(s.traefik),
			}, Weight: new(w)}}
		}
		return cloneHTTPRef(stRef, w)
	}
	// mirrored adds the portable mirror of numerator/10000 requests.
	mirrored := func(rule *gwv1.HTTPRouteRule, numerator int32) {
		if p > 0 && s.traefik == "" {
			rule.Filters = append(rule.Filters, mirrorFilter(canary, numerator))
		}
	}
	owned := func(role RuleRole, matches []gwv1.HTTPRouteMatch, refs ...gwv1.HTTPBackendRef) gwv1.HTTPRouteRule {
		c := R.DeepCopy()
		c.Name = new(gwv1.SectionName(extraRulePrefix(s.id) + string(role)))
		c.Matches = matches
		c.BackendRefs = refs
		defaultHTTPFilters(c.Filters)
		return *c
	}
	var out []gwv1.HTTPRouteRule
	var roles []RuleRole
	add := func(role RuleRole, rule gwv1.HTTPRouteRule) {
		out, roles = append(out, rule), append(roles, role)
	}
	if len(conds) > 0 {
		add(RoleHeader, owned(RoleHeader, withHeaders(base, conds), cloneHTTPRef(caRef, 1)))
	}
	theta := s.theta()
	switch {
	case st != nil:
		var low, high []int32
		for _, t := range st.Grid {
			if t <= theta {
				low = append(low, t)
			} else {
				high = append(high, t)
			}
		}
		if len(low) > 0 {
			add(RoleStickyCanary, owned(RoleStickyCanary, withHeaders(base, []headerMatch{ticketCond(st, low)}), cloneHTTPRef(caRef, 1)))
		}
		if len(high) > 0 {
			pin := owned(RoleStickyStable, withHeaders(base, []headerMatch{ticketCond(st, high)}), stableTo(1))
			mirrored(&pin, p*100)
			add(RoleStickyStable, pin)
		}
		var refs []gwv1.HTTPBackendRef
		prev := int32(0)
		for _, t := range st.Grid {
			var ref gwv1.HTTPBackendRef
			if t <= theta {
				ref = cloneHTTPRef(caRef, t-prev)
			} else {
				ref = cloneHTTPRef(stRef, t-prev) // a TraefikService ref would drop the cookie
			}
			addSetCookie(&ref, setCookie(st, t))
			refs = append(refs, ref)
			prev = t
		}
		split := owned(RoleSplit, withHeaders(base, nil), refs...)
		mirrored(&split, p*(100-theta))
		add(RoleSplit, split)
	case p > 0:
		split := owned(RoleSplit, withHeaders(base, nil), stableTo(s.weights.Of(otherSide(s.canary))), cloneHTTPRef(caRef, theta))
		mirrored(&split, p*(100-theta))
		add(RoleSplit, split)
	}
	return out, roles, nil
}

func otherSide(s strategy.Side) strategy.Side {
	if s == strategy.SideB {
		return strategy.SideA
	}
	return strategy.SideB
}
