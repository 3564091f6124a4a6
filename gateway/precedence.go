package gateway

import (
	"regexp"
	"strings"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// This file places the extra rules of SetRoutes by Gateway API's
// precedence. A request goes to the match that ranks first: for an
// HTTPRoute an Exact path, then the longest PathPrefix, then a method, then
// the most header matches, then the most query matches; for a GRPCRoute
// the longest service, then the longest method, then the most header
// matches. Ties go to the oldest route, then the first by
// "namespace/name", then the first rule in list order. Across routes on
// one listener, a more specific hostname wins before any of that.
//
// An extra header or sticky rule E copies each match M of the user's rule
// R and adds header conditions, so E ranks strictly above M and takes
// every request it matches that R took. It must take no other: a rule X
// that overlaps E (some request matches both) and ranks above M today must
// still rank above E. When X ranks strictly between M and E, no place in
// the list helps and SetRoutes refuses (*PrecedenceError); when X ties
// with E, E goes after X in the list. A header rule whose every match is
// covered by a rule that ranks above it can never be reached
// (*ShadowedError).

// cond is one header or query condition of a match.
type cond struct {
	name  string
	regex bool
	value string
}

// Path match types, as precedence sees them.
const (
	pathTypePrefix = iota
	pathTypeExact
	pathTypeRegex
)

// matchSpec is one match of a rule as precedence sees it: an HTTPRoute
// match (path, method) or a GRPCRoute match (service, method), with its
// header and query conditions.
type matchSpec struct {
	grpc     bool
	pathType int
	path     string
	// method is the HTTP method, or the gRPC method.
	method string
	// service is the gRPC service.
	service string
	// unknown marks a regular expression on the path, service or method,
	// whose precedence Gateway API leaves to the implementation.
	unknown bool
	headers []cond
	query   []cond
}

// ruleSpec is the matches of one rule.
type ruleSpec struct {
	matches []matchSpec
}

// rank is a match's precedence, compared element by element.
type rank [5]int

func (m *matchSpec) rank() rank {
	if m.grpc {
		return rank{len(m.service), len(m.method), len(m.headers)}
	}
	exact, method := 0, 0
	if m.pathType == pathTypeExact {
		exact = 1
	}
	if m.method != "" {
		method = 1
	}
	return rank{exact, len(m.path), method, len(m.headers), len(m.query)}
}

// compareRank returns -1, 0 or 1 as a ranks below, with or above b.
func compareRank(a, b rank) int {
	for i := range a {
		switch {
		case a[i] < b[i]:
			return -1
		case a[i] > b[i]:
			return 1
		}
	}
	return 0
}

// firstConds keeps the first condition of each name: Gateway API ignores
// the later ones.
func firstConds(in []cond, fold bool) []cond {
	var out []cond
	seen := map[string]bool{}
	for _, c := range in {
		k := c.name
		if fold {
			k = strings.ToLower(k)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

func specHTTPRule(r *gwv1.HTTPRouteRule) ruleSpec {
	if len(r.Matches) == 0 {
		return ruleSpec{matches: []matchSpec{{path: "/"}}}
	}
	out := ruleSpec{matches: make([]matchSpec, len(r.Matches))}
	for j := range r.Matches {
		m := &r.Matches[j]
		s := &out.matches[j]
		s.path = "/"
		if m.Path != nil {
			if m.Path.Value != nil {
				s.path = *m.Path.Value
			}
			if m.Path.Type != nil {
				switch *m.Path.Type {
				case gwv1.PathMatchExact:
					s.pathType = pathTypeExact
				case gwv1.PathMatchRegularExpression:
					s.pathType, s.unknown = pathTypeRegex, true
				}
			}
		}
		if m.Method != nil {
			s.method = string(*m.Method)
		}
		var hs, qs []cond
		for _, h := range m.Headers {
			hs = append(hs, cond{name: string(h.Name), value: h.Value, regex: h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression})
		}
		for _, q := range m.QueryParams {
			qs = append(qs, cond{name: string(q.Name), value: q.Value, regex: q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression})
		}
		s.headers, s.query = firstConds(hs, true), firstConds(qs, false)
	}
	return out
}

func specGRPCRule(r *gwv1.GRPCRouteRule) ruleSpec {
	if len(r.Matches) == 0 {
		return ruleSpec{matches: []matchSpec{{grpc: true}}}
	}
	out := ruleSpec{matches: make([]matchSpec, len(r.Matches))}
	for j := range r.Matches {
		m := &r.Matches[j]
		s := &out.matches[j]
		s.grpc = true
		if mm := m.Method; mm != nil {
			if mm.Service != nil {
				s.service = *mm.Service
			}
			if mm.Method != nil {
				s.method = *mm.Method
			}
			s.unknown = mm.Type != nil && *mm.Type == gwv1.GRPCMethodMatchRegularExpression
		}
		var hs []cond
		for _, h := range m.Headers {
			hs = append(hs, cond{name: string(h.Name), value: h.Value, regex: h.Type != nil && *h.Type == gwv1.GRPCHeaderMatchRegularExpression})
		}
		s.headers = firstConds(hs, true)
	}
	return out
}

// underPrefix reports whether every path that path p (a prefix or exact
// path) matches is under PathPrefix q, which matches by path element:
// /shop matches /shop, /shop/ and /shop/cart, not /shopping.
func underPrefix(p, q string) bool {
	q = strings.TrimRight(q, "/")
	if q == "" {
		return true
	}
	p = strings.TrimRight(p, "/")
	return p == q || strings.HasPrefix(p, q+"/")
}

// pathsOverlap reports whether some path matches both a and b (true when
// either is a regular expression: it might).
func pathsOverlap(a, b *matchSpec) bool {
	switch {
	case a.pathType == pathTypeRegex || b.pathType == pathTypeRegex:
		return true
	case a.pathType == pathTypeExact && b.pathType == pathTypeExact:
		return a.path == b.path
	case a.pathType == pathTypeExact:
		return underPrefix(a.path, b.path)
	case b.pathType == pathTypeExact:
		return underPrefix(b.path, a.path)
	}
	return underPrefix(a.path, b.path) || underPrefix(b.path, a.path)
}

// pathCovers reports whether every path o matches, x matches too.
func pathCovers(x, o *matchSpec) bool {
	switch {
	case x.pathType == pathTypeRegex || o.pathType == pathTypeRegex:
		return x.pathType == o.pathType && x.path == o.path
	case x.pathType == pathTypeExact:
		return o.pathType == pathTypeExact && o.path == x.path
	}
	return underPrefix(o.path, x.path)
}

func fullMatch(re, s string) bool {
	ok, err := regexp.MatchString(`^(?:`+re+`)$`, s)
	return err == nil && ok
}

func partMatch(re, s string) bool {
	ok, err := regexp.MatchString(re, s)
	return err != nil || ok // an expression Go cannot read might match
}

func findCond(cs []cond, name string, fold bool) *cond {
	for i := range cs {
		if cs[i].name == name || (fold && strings.EqualFold(cs[i].name, name)) {
			return &cs[i]
		}
	}
	return nil
}

// condsOverlap reports whether some request meets both a and b.
func condsOverlap(a, b []cond, fold bool) bool {
	for _, ca := range a {
		cb := findCond(b, ca.name, fold)
		switch {
		case cb == nil, ca.regex && cb.regex:
		case !ca.regex && !cb.regex:
			if ca.value != cb.value {
				return false
			}
		case ca.regex:
			if !partMatch(ca.value, cb.value) {
				return false
			}
		default:
			if !partMatch(cb.value, ca.value) {
				return false
			}
		}
	}
	return true
}

// condsCover reports whether every request that meets o meets x.
func condsCover(x, o []cond, fold bool) bool {
	for _, cx := range x {
		co := findCond(o, cx.name, fold)
		switch {
		case co == nil:
			return false
		case cx.regex && co.regex, !cx.regex && !co.regex:
			if cx.value != co.value {
				return false
			}
		case cx.regex:
			if !fullMatch(cx.value, co.value) {
				return false
			}
		default: // an exact x never covers a pattern
			return false
		}
	}
	return true
}

func grpcPartOverlap(a, b string, unknown bool) bool {
	return unknown || a == "" || b == "" || a == b
}

// overlap reports whether some request matches both a and b.
func overlap(a, b *matchSpec) bool {
	if a.grpc {
		return grpcPartOverlap(a.service, b.service, a.unknown || b.unknown) &&
			grpcPartOverlap(a.method, b.method, a.unknown || b.unknown) &&
			condsOverlap(a.headers, b.headers, true)
	}
	if a.method != "" && b.method != "" && a.method != b.method {
		return false
	}
	return pathsOverlap(a, b) && condsOverlap(a.headers, b.headers, true) && condsOverlap(a.query, b.query, false)
}

// covers reports whether every request that matches o matches x.
func covers(x, o *matchSpec) bool {
	if x.grpc {
		if x.unknown || o.unknown {
			return x.unknown && o.unknown && x.service == o.service && x.method == o.method && condsCover(x.headers, o.headers, true)
		}
		return (x.service == "" || x.service == o.service) && (x.method == "" || x.method == o.method) && condsCover(x.headers, o.headers, true)
	}
	return pathCovers(x, o) && (x.method == "" || x.method == o.method) &&
		condsCover(x.headers, o.headers, true) && condsCover(x.query, o.query, false)
}

// peerRoute is another route on a listener of the managed route, with the
// rules that compete with the managed route's for the same hostnames.
type peerRoute struct {
	ref   RouteRef
	older bool // it wins ties of match precedence with the managed route
	rules []ruleSpec
}

// placement is what precedence needs to place the extra rules of one
// route.
type placement struct {
	// user is every user rule of the route, in order; r is the split rule.
	user []ruleSpec
	r    int
	// index maps a user rule to its index in spec.rules as read, for
	// errors.
	index func(i int) int
	peers []peerRoute
}

// place returns the index of the user rule before which the extra rules
// (each the split rule's matches, match for match, with conditions added)
// go: r or later. A rule that ranks between a match of R and the owned
// rule built on it, and that shares requests with it, is a
// *PrecedenceError; a header rule that another rule takes every request
// of is a *ShadowedError. The split rule needs no placing: it has R's
// matches exactly and goes right before R.
func (p *placement) place(owned []ruleSpec, roles []RuleRole) (int, error) {
	at := p.r
	R := p.user[p.r]
	for k, e := range owned {
		if roles[k] == RoleSplit {
			continue
		}
		shadowed := true
		var shadow error
		for j := range e.matches {
			o := &e.matches[j]
			m := &R.matches[min(j, len(R.matches)-1)]
			covered := false
			check := func(x *matchSpec, beatsM, beatsOnTie bool) (bool, error) {
				// beatsM: x ranks above m today; beatsOnTie: x wins a tie with o.
				if !beatsM || !overlap(x, o) {
					return false, nil
				}
				if x.unknown || o.unknown {
					return false, &PrecedenceError{Role: roles[k], Match: j, Reason: "a regular expression on its path, service or method has implementation-specific precedence"}
				}
				switch c := compareRank(x.rank(), o.rank()); {
				case c < 0:
					return false, &PrecedenceError{Role: roles[k], Match: j, Reason: "it ranks above the split rule's match but below the extra rule's, so the extra rule would take requests it wins today"}
				case c == 0 && !beatsOnTie:
					return false, &PrecedenceError{Role: roles[k], Match: j, Reason: "it ties with the extra rule, and its route loses ties to the managed route (newer, or later by namespace/name)"}
				}
				return covers(x, o), nil
			}
			for i, u := range p.user {
				if i == p.r {
					continue
				}
				for xi := range u.matches {
					x := &u.matches[xi]
					c := compareRank(x.rank(), m.rank())
					beatsM := c > 0 || (c == 0 && i < p.r)
					cov, err := check(x, beatsM, true)
					if err != nil {
						pe := err.(*PrecedenceError)
						pe.Rule, pe.OtherMatch = p.index(i), xi
						return 0, pe
					}
					if beatsM && overlap(x, o) && compareRank(x.rank(), o.rank()) == 0 && i+1 > at {
						at = i + 1
					}
					if cov && !covered {
						covered = true
						shadow = &ShadowedError{Rule: p.index(i), Match: xi}
					}
				}
			}
			for _, pr := range p.peers {
				for i, u := range pr.rules {
					for xi := range u.matches {
						x := &u.matches[xi]
						c := compareRank(x.rank(), m.rank())
						beatsM := c > 0 || (c == 0 && pr.older)
						cov, err := check(x, beatsM, pr.older)
						if err != nil {
							pe := err.(*PrecedenceError)
							pe.Other, pe.Rule, pe.OtherMatch = pr.ref, i, xi
							return 0, pe
						}
						if cov && !covered {
							covered = true
							shadow = &ShadowedError{Other: pr.ref, Rule: i, Match: xi}
						}
					}
				}
			}
			shadowed = shadowed && covered
		}
		if roles[k] == RoleHeader && shadowed && shadow != nil {
			return 0, shadow
		}
	}
	return at, nil
}

// hostRank is a hostname's specificity: the characters of a non-wildcard
// hostname, then all its characters; no hostname ranks lowest.
func hostRank(h string) [2]int {
	if h == "" || strings.HasPrefix(h, "*") {
		return [2]int{0, len(h)}
	}
	return [2]int{len(h), len(h)}
}

// hostsIntersect reports whether some host matches both hostnames (""
// matches every host, "*.example.com" any host below example.com).
func hostsIntersect(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	switch {
	case a == "" || b == "" || a == b:
		return true
	case strings.HasPrefix(a, "*.") && strings.HasPrefix(b, "*."):
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case strings.HasPrefix(a, "*."):
		return strings.HasSuffix(b, a[1:])
	case strings.HasPrefix(b, "*."):
		return strings.HasSuffix(a, b[1:])
	}
	return false
}

// competes reports whether a route with hostnames theirs competes on match
// precedence with one with hostnames ours: for some host both match, with
// hostnames equally specific. Elsewhere the more specific one takes every
// request, the extra rules' as well as the split rule's.
func competes(ours, theirs []gwv1.Hostname) bool {
	if len(ours) == 0 {
		ours = []gwv1.Hostname{""}
	}
	if len(theirs) == 0 {
		theirs = []gwv1.Hostname{""}
	}
	for _, a := range ours {
		for _, b := range theirs {
			if hostsIntersect(string(a), string(b)) && hostRank(string(a)) == hostRank(string(b)) {
				return true
			}
		}
	}
	return false
}

// sharesListener reports whether two routes' parentRefs attach to a common
// listener: the same Gateway, with section names and ports that do not
// exclude each other. nsA and nsB are the routes' namespaces.
func sharesListener(a []gwv1.ParentReference, nsA string, b []gwv1.ParentReference, nsB string) bool {
	for _, pa := range a {
		ga, ka, na, ma := parentOf(pa, nsA)
		for _, pb := range b {
			gb, kb, nb, mb := parentOf(pb, nsB)
			if ga != gb || ka != kb || na != nb || ma != mb {
				continue
			}
			if pa.SectionName != nil && pb.SectionName != nil && *pa.SectionName != *pb.SectionName {
				continue
			}
			if pa.Port != nil && pb.Port != nil && *pa.Port != *pb.Port {
				continue
			}
			return true
		}
	}
	return false
}

// olderRoute reports whether route a wins ties of match precedence with
// route b: it is older, or as old and first by "namespace/name".
func olderRoute(aTime time.Time, aNS, aName string, bTime time.Time, bNS, bName string) bool {
	if !aTime.Equal(bTime) {
		return aTime.Before(bTime)
	}
	return aNS+"/"+aName < bNS+"/"+bName
}

// parentOf spells out a parentRef of a route in namespace ns: its group,
// kind, namespace and name, with Gateway API's defaults.
func parentOf(p gwv1.ParentReference, ns string) (group, kind, namespace, name string) {
	group, kind = gwv1.GroupName, "Gateway"
	if p.Group != nil {
		group = string(*p.Group)
	}
	if p.Kind != nil {
		kind = string(*p.Kind)
	}
	if p.Namespace != nil {
		ns = string(*p.Namespace)
	}
	return group, kind, ns, string(p.Name)
}
