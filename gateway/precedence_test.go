package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/strategy"
)

// fatalTB is what the helpers need of a test, so that they run under
// rapid too.
type fatalTB interface {
	Helper()
	Fatal(args ...any)
}

// request is one HTTP request as routing sees it.
type request struct {
	host    string
	path    string
	method  string
	headers map[string]string // lower-case names
	query   map[string]string
}

// modelRoute is a route as a data plane sees it.
type modelRoute struct {
	ns, name  string
	created   time.Time
	hostnames []gwv1.Hostname
	rules     []gwv1.HTTPRouteRule
}

// pathMatches is Gateway API's path match, written plainly: PathPrefix
// by path element, trailing slashes ignored.
func pathMatches(m *gwv1.HTTPRouteMatch, path string) bool {
	typ, val := gwv1.PathMatchPathPrefix, "/"
	if m.Path != nil {
		if m.Path.Type != nil {
			typ = *m.Path.Type
		}
		if m.Path.Value != nil {
			val = *m.Path.Value
		}
	}
	switch typ {
	case gwv1.PathMatchExact:
		return path == val
	case gwv1.PathMatchRegularExpression:
		return compiled("^(?:" + val + ")$").MatchString(path)
	}
	prefix := strings.TrimSuffix(val, "/")
	if prefix == "" {
		return true
	}
	segs, want := strings.Split(strings.Trim(path, "/"), "/"), strings.Split(strings.Trim(prefix, "/"), "/")
	if len(segs) < len(want) {
		return false
	}
	for i := range want {
		if segs[i] != want[i] {
			return false
		}
	}
	return true
}

var regexps sync.Map

func compiled(re string) *regexp.Regexp {
	if v, ok := regexps.Load(re); ok {
		return v.(*regexp.Regexp)
	}
	c := regexp.MustCompile(re)
	regexps.Store(re, c)
	return c
}

func matchMatches(m *gwv1.HTTPRouteMatch, q *request) bool {
	if !pathMatches(m, q.path) {
		return false
	}
	if m.Method != nil && string(*m.Method) != q.method {
		return false
	}
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name := strings.ToLower(string(h.Name))
		if seen[name] {
			continue // only the first match of a name counts
		}
		seen[name] = true
		v, ok := q.headers[name]
		if !ok {
			return false
		}
		if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
			if !compiled(h.Value).MatchString(v) {
				return false
			}
		} else if v != h.Value {
			return false
		}
	}
	for _, p := range m.QueryParams {
		v, ok := q.query[string(p.Name)]
		if !ok || v != p.Value {
			return false
		}
	}
	return true
}

func hostMatches(h gwv1.Hostname, host string) (bool, [2]int) {
	s := string(h)
	switch {
	case s == "":
		return true, [2]int{0, 0}
	case strings.HasPrefix(s, "*."):
		return strings.HasSuffix(host, s[1:]), [2]int{0, len(s)}
	}
	return s == host, [2]int{len(s), len(s)}
}

// winner is the rule a request takes among routes on one listener, by
// Gateway API's precedence written plainly: the most specific hostname,
// then Exact path, longest prefix, method, header count, query count,
// then the oldest route, then namespace/name, then rule order. It
// returns the route and rule index, or -1.
func winner(routes []modelRoute, q *request) (int, int) {
	type cand struct {
		host     [2]int
		key      [5]int
		created  time.Time
		nn       string
		rt, rule int
	}
	var best *cand
	better := func(a, b *cand) bool {
		if a.host != b.host {
			return a.host[0] > b.host[0] || (a.host[0] == b.host[0] && a.host[1] > b.host[1])
		}
		for i := range a.key {
			if a.key[i] != b.key[i] {
				return a.key[i] > b.key[i]
			}
		}
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		if a.nn != b.nn {
			return a.nn < b.nn
		}
		return a.rule < b.rule
	}
	for ri, rt := range routes {
		host, hostOK := [2]int{-1, -1}, false
		hs := rt.hostnames
		if len(hs) == 0 {
			hs = []gwv1.Hostname{""}
		}
		for _, h := range hs {
			if ok, rk := hostMatches(h, q.host); ok && (rk[0] > host[0] || (rk[0] == host[0] && rk[1] > host[1])) {
				host, hostOK = rk, true
			}
		}
		if !hostOK {
			continue
		}
		for i := range rt.rules {
			ms := rt.rules[i].Matches
			if len(ms) == 0 {
				ms = []gwv1.HTTPRouteMatch{{}}
			}
			for j := range ms {
				m := &ms[j]
				if !matchMatches(m, q) {
					continue
				}
				c := cand{host: host, created: rt.created, nn: rt.ns + "/" + rt.name, rt: ri, rule: i}
				if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gwv1.PathMatchExact {
					c.key[0] = 1
				}
				c.key[1] = 1
				if m.Path != nil && m.Path.Value != nil {
					c.key[1] = len(*m.Path.Value)
				}
				if m.Method != nil {
					c.key[2] = 1
				}
				c.key[3], c.key[4] = len(m.Headers), len(m.QueryParams)
				if best == nil || better(&c, best) {
					best = &c
				}
			}
		}
	}
	if best == nil {
		return -1, -1
	}
	return best.rt, best.rule
}

func ruleName(r *gwv1.HTTPRouteRule) string {
	if r.Name == nil {
		return ""
	}
	return string(*r.Name)
}

var (
	genPaths   = []string{"/", "/shop", "/shop/cart", "/shopping", "/admin"}
	genMethods = []gwv1.HTTPMethod{"GET", "POST"}
	genHeaders = [][2]string{{"x-tenant", "acme"}, {"x-tenant", "zeta"}, {"x-beta", "1"}, {"x-beta", "2"}, {"x-region", "eu"}}
	genQueries = [][2]string{{"debug", "1"}, {"v", "2"}}
)

func genMatch(t *rapid.T, label string) gwv1.HTTPRouteMatch {
	var m gwv1.HTTPRouteMatch
	typ := rapid.SampledFrom([]gwv1.PathMatchType{gwv1.PathMatchPathPrefix, gwv1.PathMatchPathPrefix, gwv1.PathMatchExact}).Draw(t, label+"pathType")
	m.Path = &gwv1.HTTPPathMatch{Type: &typ, Value: new(rapid.SampledFrom(genPaths).Draw(t, label+"path"))}
	if rapid.IntRange(0, 3).Draw(t, label+"method?") == 0 {
		m.Method = new(rapid.SampledFrom(genMethods).Draw(t, label+"method"))
	}
	seen := map[string]bool{}
	for k := rapid.IntRange(0, 2).Draw(t, label+"headers"); k > 0; k-- {
		h := rapid.SampledFrom(genHeaders).Draw(t, label+"header")
		if seen[h[0]] {
			continue
		}
		seen[h[0]] = true
		m.Headers = append(m.Headers, gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(h[0]), Value: h[1]})
	}
	if rapid.IntRange(0, 3).Draw(t, label+"query?") == 0 {
		q := rapid.SampledFrom(genQueries).Draw(t, label+"query")
		m.QueryParams = []gwv1.HTTPQueryParamMatch{{Name: gwv1.HTTPHeaderName(q[0]), Value: q[1]}}
	}
	return m
}

func backend(name string) gwv1.HTTPBackendRef {
	return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: new(gwv1.PortNumber(80))}}}
}

// genRoute draws a route with several user rules and the split rule R.
func genRoute(t *rapid.T, ns, name string) *gwv1.HTTPRoute {
	rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	rt.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw", Namespace: new(gwv1.Namespace("shop"))}}
	rt.Spec.Hostnames = []gwv1.Hostname{"shop.example"}
	n := rapid.IntRange(0, 4).Draw(t, name+"rules")
	r := rapid.IntRange(0, n).Draw(t, name+"R")
	for i := 0; i <= n; i++ {
		rule := gwv1.HTTPRouteRule{Name: new(gwv1.SectionName(fmt.Sprintf("%s-u%d", name, i)))}
		for k := rapid.IntRange(1, 2).Draw(t, fmt.Sprintf("%s-u%d-matches", name, i)); k > 0; k-- {
			rule.Matches = append(rule.Matches, genMatch(t, fmt.Sprintf("%s-u%d-", name, i)))
		}
		if i == r && name == "web" {
			rule.BackendRefs = []gwv1.HTTPBackendRef{backend(stable.Name), backend(canary.Name)}
			rule.BackendRefs[0].Weight, rule.BackendRefs[1].Weight = new(int32(100)), new(int32(0))
		} else {
			rule.BackendRefs = []gwv1.HTTPBackendRef{backend(fmt.Sprintf("%s-team%d", name, i))}
		}
		rt.Spec.Rules = append(rt.Spec.Rules, rule)
	}
	return rt
}

// requests is every request of the generated vocabulary worth trying,
// sticky tickets included: each generated path, and one below it that no
// longer generated path matches (an Exact rule may take every request of
// its path from a PathPrefix rule, never those below it).
func requests(run string) []request {
	var out []request
	for _, p := range []string{"/", "/x", "/shop", "/shop/x", "/shop/cart", "/shop/cart/x", "/shopping", "/shopping/x", "/admin", "/admin/x"} {
		for _, m := range []string{"GET", "POST", "PUT"} {
			for mask := 0; mask < 1<<len(genHeaders); mask++ {
				hs := map[string]string{}
				ok := true
				for i, h := range genHeaders {
					if mask&(1<<i) != 0 {
						if _, dup := hs[h[0]]; dup {
							ok = false
						}
						hs[h[0]] = h[1]
					}
				}
				if !ok {
					continue
				}
				for _, cookie := range []string{"", "upshift-session=" + run + ".10", "upshift-session=" + run + ".50"} {
					for _, q := range []map[string]string{nil, {"debug": "1"}, {"v": "2"}} {
						h := map[string]string{}
						for k, v := range hs {
							h[k] = v
						}
						if cookie != "" {
							h["cookie"] = cookie
						}
						out = append(out, request{host: "shop.example", path: p, method: m, headers: h, query: q})
					}
				}
			}
		}
	}
	return out
}

// TestOwnedRulesTakeOnlyTheSplitRulesRequests is the promise of shared
// routes (see Router.SetRoutes): on random routes with several rules on
// the same paths and headers, and another route on the same listener,
// every request another rule takes before the extras are programmed
// still goes there after; only the split rule's requests reach owned
// rules; and a header route that is accepted is reachable.
func TestOwnedRulesTakeOnlyTheSplitRulesRequests(t *testing.T) {
	reqs := requests(stickyRun.Run)
	var placed, behind, refused, shadowed int
	defer func() {
		t.Logf("%d programmed (%d with extra rules after the split rule), %d refused as unsafe, %d as shadowed", placed, behind, refused, shadowed)
	}()
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		web := genRoute(t, "shop", "web")
		objs := []client.Object{web}
		t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
		web.CreationTimestamp = metav1.NewTime(t0)
		var peer *gwv1.HTTPRoute
		if rapid.Bool().Draw(t, "peer?") {
			peer = genRoute(t, "team", "peer")
			peer.Spec.ParentRefs[0].Namespace = new(gwv1.Namespace("shop"))
			peer.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "peerAge")) * time.Hour))
			objs = append(objs, peer)
		}
		c, r := extrasWorld(t, "mirroring", gateway.Config{}, objs...)
		header := strategy.HeaderMatch{Name: "x-beta", Value: "1"}
		if rapid.Bool().Draw(t, "tenantHeader?") {
			header = strategy.HeaderMatch{Name: "x-tenant", Value: "acme"}
		}
		var x strategy.TrafficExtras
		if rapid.Bool().Draw(t, "header?") {
			x.HeaderRoute = &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{header}}
		}
		if rapid.Bool().Draw(t, "sticky?") || x.HeaderRoute == nil {
			x.Sticky = stickyRun
		}
		model := func(rt *gwv1.HTTPRoute) []modelRoute {
			out := []modelRoute{{ns: rt.Namespace, name: rt.Name, created: rt.CreationTimestamp.Time, hostnames: rt.Spec.Hostnames, rules: rt.Spec.Rules}}
			if peer != nil {
				out = append(out, modelRoute{ns: peer.Namespace, name: peer.Name, created: peer.CreationTimestamp.Time, hostnames: peer.Spec.Hostnames, rules: peer.Spec.Rules})
			}
			return out
		}
		before := model(web.DeepCopy())
		stored := getHTTPRoute(t, c, webRef).ResourceVersion
		err := r.SetRoutes(ctx, routesAt(20, x))
		var pe *gateway.PrecedenceError
		var se *gateway.ShadowedError
		var hc *gateway.HeaderClashError
		if errors.As(err, &pe) || errors.As(err, &se) || errors.As(err, &hc) {
			switch {
			case pe != nil:
				refused++
			case se != nil:
				shadowed++
			}
			// A refusal writes nothing, and Routes reports no extras.
			if got := getHTTPRoute(t, c, webRef).ResourceVersion; got != stored {
				t.Fatalf("refused (%v), yet the route was written", err)
			}
			if st, err := r.Routes(ctx); err != nil || !st.Extras.IsZero() {
				t.Fatalf("Routes after a refusal: %+v, %v", st.Extras, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		placed++
		got := getHTTPRoute(t, c, webRef)
		rIdx, extraIdx := -1, -1
		for i := range got.Spec.Rules {
			name := ruleName(&got.Spec.Rules[i])
			switch {
			case !strings.HasPrefix(name, "upshift-") && len(got.Spec.Rules[i].BackendRefs) == 2:
				rIdx = i
			case strings.HasPrefix(name, "upshift-") && !strings.HasSuffix(name, string(gateway.RoleSplit)) && extraIdx < 0:
				extraIdx = i
			}
		}
		if extraIdx > rIdx {
			behind++
		}
		after := model(got)
		split := ruleName(&web.Spec.Rules[func() int {
			for i := range web.Spec.Rules {
				if len(web.Spec.Rules[i].BackendRefs) == 2 {
					return i
				}
			}
			return -1
		}()])
		prefix := strings.TrimSuffix(gateway.ExtraRuleName("shop", stable, canary, gateway.RoleSplit), string(gateway.RoleSplit))
		reached := false
		for i := range reqs {
			q := &reqs[i]
			br, bi := winner(before, q)
			ar, ai := winner(after, q)
			var bname, aname string
			if br >= 0 {
				bname = before[br].ns + "/" + ruleName(&before[br].rules[bi])
			}
			if ar >= 0 {
				aname = after[ar].ns + "/" + ruleName(&after[ar].rules[ai])
			}
			if aname == "shop/"+gateway.ExtraRuleName("shop", stable, canary, gateway.RoleHeader) {
				reached = true
			}
			if bname == "shop/"+split {
				if aname != bname && !strings.HasPrefix(aname, "shop/"+prefix) {
					t.Fatalf("%+v: took the split rule, now %q", *q, aname)
				}
				continue
			}
			if aname != bname {
				t.Fatalf("%+v: took %q before the extras, now %q\nrules after: %s", *q, bname, aname, names(after[0].rules))
			}
		}
		if x.HeaderRoute != nil && !reached {
			t.Fatalf("the header route was accepted, but no request reaches it\nrules after: %s", names(after[0].rules))
		}
	})
}

func names(rules []gwv1.HTTPRouteRule) string {
	var out []string
	for i := range rules {
		out = append(out, ruleName(&rules[i]))
	}
	return strings.Join(out, ", ")
}
