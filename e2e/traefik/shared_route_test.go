package traefik_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Routes shared by several teams: other rules on the split rule's path,
// with their own headers, before and after it, and rules on other paths.
// The extra rules of the gateway Router must take only requests the split
// rule would have taken; every request of another rule reaches that
// rule's backend, through the whole rollout.

// The backends of the other teams' rules.
const (
	nameAcme  = "acme"  // /shop + x-tenant: acme
	nameEU    = "eu"    // /shop + x-region: eu
	nameOther = "other" // /other
	nameBeta  = "beta"  // /shop + X-Beta: 1, a rule that shadows the header route
)

// newSharedWorld is newWorld with more backends, named extra, each with
// its Service, which Traefik resolves; the route is setup's until the test
// writes its rules.
func newSharedWorld(t *testing.T, extra ...string) (*world, map[string]*backend) {
	t.Helper()
	traefikBinary(t) // skip early, before the control plane starts
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	w := &world{env: env, stable: startBackend(t, nameStable), canary: startBackend(t, nameCanary)}
	more := map[string]*backend{}
	all := []*backend{w.stable, w.canary}
	for _, n := range extra {
		b := startBackend(t, n)
		more[n] = b
		all = append(all, b)
	}
	w.proxy = startTraefik(t, env, all...)
	w.route = setup(t, env, ns, w.proxy, w.stable, w.canary)
	serveBackends(t, env.Client, ns, all[2:]...)
	return w, more
}

// shopPath is the split rule's path, PathPrefix /shop.
var shopPath = []gwv1.HTTPRouteMatch{pathPrefix("/shop")}

// splitRule is the user's rule upshift moves: PathPrefix /shop, all on
// stable.
func splitRule(w *world) gwv1.HTTPRouteRule {
	return gwv1.HTTPRouteRule{Matches: shopPath, BackendRefs: []gwv1.HTTPBackendRef{svcRef(w.stable, 100), svcRef(w.canary, 0)}}
}

// teamRule is another team's rule, named name: /shop with the header
// name: value, to backend b.
func teamRule(name, header, value string, b *backend) gwv1.HTTPRouteRule {
	return named(name, gwv1.HTTPRouteRule{Matches: withHeaders(shopPath, exactHeader(header, value)),
		BackendRefs: []gwv1.HTTPBackendRef{svcRef(b, 1)}})
}

// sharedRules is the route of several teams: the eu rule (listed before
// the split rule), the split rule, the acme rule (after it), and a rule on
// another path.
func sharedRules(w *world, b map[string]*backend) []gwv1.HTTPRouteRule {
	return []gwv1.HTTPRouteRule{
		teamRule("eu", "x-region", "eu", b[nameEU]),
		splitRule(w),
		teamRule("acme", "x-tenant", "acme", b[nameAcme]),
		named("other", gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{pathPrefix("/other")},
			BackendRefs: []gwv1.HTTPBackendRef{svcRef(b[nameOther], 1)}}),
	}
}

// probe is one kind of request, sent without a cookie jar, and the
// backend it must reach.
type probe struct {
	what   string
	path   string
	header map[string]string
	cookie string // the Cookie header, "" for none
	want   string
}

// send sends p once and returns the backend that answered.
func (p probe) send(hc *http.Client, base string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, base+p.path, nil)
	if err != nil {
		return "", err
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	if p.cookie != "" {
		req.Header.Set("Cookie", p.cookie)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	b := resp.Header.Get(headerBackend)
	if resp.StatusCode != http.StatusOK || b == "" || string(body) != b {
		return "", fmt.Errorf("%s: status %d from %q: %q", p.what, resp.StatusCode, b, body)
	}
	return b, nil
}

// count sends p n times, one after the other, and returns how many
// reached backend; a failed request fails t.
func (p probe) count(t *testing.T, hc *http.Client, base string, n int, backend string) int {
	t.Helper()
	c := 0
	for i := 0; i < n; i++ {
		b, err := p.send(hc, base)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if b == backend {
			c++
		}
	}
	return c
}

// served waits until every probe reaches its backend (Traefik serves the
// route as written).
func served(t *testing.T, w *world, what string, probes ...probe) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	eventually(t, what, func() error {
		for _, p := range probes {
			b, err := p.send(hc, w.proxy.url)
			if err != nil {
				return err
			}
			if b != p.want {
				return fmt.Errorf("%s: answered by %s, want %s", p.what, b, p.want)
			}
		}
		return nil
	})
}

// checkProbes sends each probe n times and fails t unless every request
// reaches its backend; it logs the figures.
func checkProbes(t *testing.T, w *world, n int, probes ...probe) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, p := range probes {
		c := p.count(t, hc, w.proxy.url, n, p.want)
		t.Logf("%-40s %d/%d on %s", p.what+":", c, n, p.want)
		if c != n {
			t.Errorf("%s: %d of %d requests reached %s", p.what, c, n, p.want)
		}
	}
}

// useRules writes the route's rules by hand and waits until Traefik
// accepts them and serves the probes.
func useRules(t *testing.T, w *world, rules []gwv1.HTTPRouteRule, probes ...probe) {
	t.Helper()
	setRules(t, w.env.Client, w.route, rules...)
	waitAccepted(t, w.env.Client, w.route)
	served(t, w, "the rules served", probes...)
}

// applyRoutes programs rs with the Router and waits until it reports rs
// applied (accepted, settled, and the extras read back).
func applyRoutes(t *testing.T, r *gateway.Router, rs rollout.Routes) {
	t.Helper()
	ctx := context.Background()
	if err := r.SetRoutes(ctx, rs); err != nil {
		t.Fatalf("SetRoutes %+v: %v", rs, err)
	}
	var st rollout.RoutesStatus
	eventually(t, "the routes applied", func() error {
		var err error
		if st, err = r.Routes(ctx); err != nil {
			return err
		}
		if !st.Accepted || st.Weights != rs.Weights || !st.Extras.Equal(rs.Extras) {
			return fmt.Errorf("reported %+v", st)
		}
		return nil
	})
}

// readRoute returns the route as stored.
func readRoute(t *testing.T, w *world) *gwv1.HTTPRoute {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := w.env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.route.Namespace, Name: w.route.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	return &rt
}

// ruleNames lists the rules of rt by name ("-" for an unnamed one), the
// extra rules by role.
func ruleNames(rt *gwv1.HTTPRoute) []string {
	out := make([]string, len(rt.Spec.Rules))
	for i, r := range rt.Spec.Rules {
		switch {
		case r.Name == nil:
			out[i] = "-"
		case strings.HasPrefix(string(*r.Name), "upshift-"):
			n := string(*r.Name)
			out[i] = "owned:" + n[strings.Index(n[len("upshift-"):], "-")+len("upshift-")+1:]
		default:
			out[i] = string(*r.Name)
		}
	}
	return out
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// stickyOf is a sticky run with every cookie default filled in.
func stickyOf(run string, grid ...int32) *strategy.Sticky {
	return &strategy.Sticky{Run: run, Grid: grid, Cookie: strategy.SessionAffinity{
		CookieName: strategy.DefaultSessionCookie, MaxAge: &metav1.Duration{Duration: strategy.DefaultSessionMaxAge},
		Path: "/", SameSite: "Lax"}}
}

var betaHeader = &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{headerExact}}

// TestSharedRouteTieSettledByPlacement: a tenant rule (/shop + x-tenant:
// acme) listed after the split rule ties with the extra header and sticky
// rules on Gateway API's precedence (one header match each), and Traefik
// settles such ties by list order. With a header route on x-beta: 1 and
// sticky sessions at weight 20, acme requests that carry x-beta: 1 or a
// ticket reach acme, since the Router places its rules after the acme rule,
// while the same requests without x-tenant follow the header route and the
// tickets. Then the extra rules are moved by hand where they used to go,
// right before the split rule: the acme requests reach the canary or the
// stable side, and Routes reports no extras; SetRoutes puts them back.
func TestSharedRouteTieSettledByPlacement(t *testing.T) {
	w, b := newSharedWorld(t, nameAcme)
	ctx := context.Background()
	acme := map[string]string{"x-tenant": "acme"}
	beta := map[string]string{"x-beta": "1"}
	both := map[string]string{"x-tenant": "acme", "x-beta": "1"}
	tk := func(v string) string { return strategy.DefaultSessionCookie + "=tie." + v }
	rules := []gwv1.HTTPRouteRule{splitRule(w), teamRule("acme", "x-tenant", "acme", b[nameAcme])}
	useRules(t, w, rules,
		probe{what: "acme", path: "/shop/x", header: acme, want: nameAcme},
		probe{what: "no header", path: "/shop/x", want: nameStable})
	r := w.shaper(t, time.Second, gateway.MirrorGatewayAPI)
	rs := rollout.Routes{Weights: rollout.Weights{A: 80, B: 20}, Canary: strategy.SideB,
		Extras: strategy.TrafficExtras{HeaderRoute: betaHeader, Sticky: stickyOf("tie", 20, 100)}}
	applyRoutes(t, r, rs)
	names := ruleNames(readRoute(t, w))
	t.Logf("the route as the Router wrote it: %v", names)
	at := indexOf(names, "acme")
	for _, role := range []string{"owned:header", "owned:sticky-canary", "owned:sticky-stable"} {
		if i := indexOf(names, role); i < 0 || i < at {
			t.Errorf("rule %s at %d, want after the acme rule (%d): %v", role, i, at, names)
		}
	}
	// Acme's requests stay on acme; the same without x-tenant are the owned
	// rules' (they are in force).
	tenant := []probe{
		{what: "acme + x-beta", path: "/shop/x", header: both, want: nameAcme},
		{what: "acme + canary ticket", path: "/shop/x", header: acme, cookie: tk("20"), want: nameAcme},
		{what: "acme + stable ticket", path: "/shop/x", header: acme, cookie: tk("100"), want: nameAcme},
		{what: "acme + x-beta + canary ticket", path: "/shop/x", header: both, cookie: tk("20"), want: nameAcme},
		{what: "acme + x-beta + stable ticket", path: "/shop/x", header: both, cookie: tk("100"), want: nameAcme},
	}
	owned := []probe{
		{what: "x-beta", path: "/shop/x", header: beta, want: nameCanary},
		{what: "canary ticket", path: "/shop/x", cookie: tk("20"), want: nameCanary},
		{what: "stable ticket", path: "/shop/x", cookie: tk("100"), want: nameStable},
		{what: "x-beta + stable ticket", path: "/shop/x", header: beta, cookie: tk("100"), want: nameCanary},
	}
	served(t, w, "the extra rules served", append(owned, tenant...)...)
	const n = 40
	checkProbes(t, w, n, append(tenant, owned...)...)

	// Where the extra rules went before: all of them right before the
	// user's rule, the acme rule last. Traefik gives the tie to the first
	// rule listed.
	rt := readRoute(t, w)
	names = ruleNames(rt)
	var old []gwv1.HTTPRouteRule
	for _, name := range []string{"owned:header", "owned:sticky-canary", "owned:sticky-stable", "owned:split", "-", "acme"} {
		i := indexOf(names, name)
		if i < 0 {
			t.Fatalf("no rule %s in %v", name, names)
		}
		old = append(old, rt.Spec.Rules[i])
	}
	misplaced := []probe{
		{what: "acme + x-beta (old placement)", path: "/shop/x", header: both, want: nameCanary},
		{what: "acme + canary ticket (old placement)", path: "/shop/x", header: acme, cookie: tk("20"), want: nameCanary},
		{what: "acme + stable ticket (old placement)", path: "/shop/x", header: acme, cookie: tk("100"), want: nameStable},
	}
	useRules(t, w, old, misplaced...)
	oldRoute := readRoute(t, w)
	t.Logf("the old placement, written by hand: %v", ruleNames(oldRoute))
	checkProbes(t, w, n, misplaced...)
	st, err := r.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Extras.IsZero() {
		t.Errorf("Routes reports extras %+v for extra rules that take the acme rule's requests", st.Extras)
	}
	// SetRoutes places them again.
	applyRoutes(t, r, rs)
	t.Logf("the route after SetRoutes: %v", ruleNames(readRoute(t, w)))
	served(t, w, "the extra rules placed again", tenant...)
	checkProbes(t, w, n, tenant...)
}

// TestShadowedHeaderRouteRefusedThroughTraefik: a user rule listed before
// the split rule already sends /shop + X-Beta: 1 to the beta backend. A
// header route on x-beta: 1 could never reach the canary: SetRoutes refuses
// it with a *gateway.ShadowedError naming that rule, writes nothing, and
// Routes never reports it. Then, on a route without that rule, the header
// route is programmed and in force; another writer adds the rule before
// it: Routes stops reporting the header route, X-Beta: 1 requests reach the
// beta backend through Traefik, SetRoutes refuses the header route again,
// and the next weight write removes the extra rules.
func TestShadowedHeaderRouteRefusedThroughTraefik(t *testing.T) {
	w, b := newSharedWorld(t, nameBeta)
	ctx := context.Background()
	c := w.env.Client
	shadow := teamRule("beta", "X-Beta", "1", b[nameBeta])
	beta := map[string]string{"x-beta": "1"}
	toBeta := probe{what: "x-beta", path: "/shop/x", header: beta, want: nameBeta}
	plain := probe{what: "no header", path: "/shop/x", want: nameStable}
	const n = 40
	r := w.shaper(t, time.Second, gateway.MirrorGatewayAPI)
	rs := rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}, Canary: strategy.SideB,
		Extras: strategy.TrafficExtras{HeaderRoute: betaHeader}}

	// checkShadowed: SetRoutes refuses rs naming rule 0 of the route, and
	// writes nothing.
	checkShadowed := func(what string) {
		t.Helper()
		before := readRoute(t, w)
		err := r.SetRoutes(ctx, rs)
		var se *gateway.ShadowedError
		if !errors.As(err, &se) {
			t.Fatalf("%s: SetRoutes: %v, want a *gateway.ShadowedError", what, err)
		}
		t.Logf("%s: SetRoutes: %v", what, err)
		if se.Route != w.route || se.Other != w.route || se.Rule != 0 || se.Match != 0 {
			t.Errorf("%s: %+v, want rule 0 match 0 of %s", what, se, w.route)
		}
		if !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
			t.Errorf("%s: %v is not ErrInvalid and permanent", what, err)
		}
		if after := readRoute(t, w); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the route was written (resourceVersion %s to %s): %v", what, before.ResourceVersion, after.ResourceVersion, ruleNames(after))
		}
		st, err := r.Routes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Extras.IsZero() {
			t.Errorf("%s: Routes reports %+v", what, st.Extras)
		}
	}

	// 1. Shadowed from the start.
	useRules(t, w, []gwv1.HTTPRouteRule{shadow, splitRule(w)}, toBeta, plain)
	checkShadowed("shadowed from the start")
	if names := ruleNames(readRoute(t, w)); len(names) != 2 {
		t.Errorf("extra rules written: %v", names)
	}
	checkProbes(t, w, n, toBeta, plain)

	// 2. Programmed, then shadowed by another writer.
	useRules(t, w, []gwv1.HTTPRouteRule{splitRule(w)}, plain)
	applyRoutes(t, r, rs)
	toCanary := probe{what: "x-beta (header route)", path: "/shop/x", header: beta, want: nameCanary}
	served(t, w, "the header route served", toCanary)
	checkProbes(t, w, n, toCanary)
	rt := readRoute(t, w)
	t.Logf("the route with the header route: %v", ruleNames(rt))
	rt.Spec.Rules = append([]gwv1.HTTPRouteRule{shadow}, rt.Spec.Rules...)
	if err := c.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	t.Logf("another writer added the beta rule first: %v", ruleNames(rt))
	st, err := r.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Extras.IsZero() || st.Canary != "" {
		t.Errorf("Routes reports %s %+v with the header route shadowed", st.Canary, st.Extras)
	}
	waitAccepted(t, c, w.route)
	served(t, w, "the beta rule served", toBeta)
	checkProbes(t, w, n, toBeta)
	checkShadowed("shadowed by another writer")

	// The next weight write drops the extra rules, and the weights move.
	if err := r.SetWeights(ctx, rollout.Weights{A: 80, B: 20}); err != nil {
		t.Fatal(err)
	}
	names := ruleNames(readRoute(t, w))
	t.Logf("after SetWeights 80/20: %v", names)
	if len(names) != 2 || names[0] != "beta" {
		t.Errorf("after SetWeights the route holds %v, want the beta rule and the split rule", names)
	}
	if st, err = r.Routes(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Weights != (rollout.Weights{A: 80, B: 20}) || !st.Extras.IsZero() {
		t.Errorf("Routes after SetWeights: %+v", st)
	}
	waitAccepted(t, c, w.route)
	checkProbes(t, w, n, toBeta)
}

// foreignCheck counts the requests of users that belong to a rule other
// than the split rule, by kind, and those that missed its backend.
type foreignCheck struct {
	mu       sync.Mutex
	checked  map[string]int
	wrong    map[string]int
	examples []string
}

func (f *foreignCheck) see(kind, want string, u *user, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked[kind]++
	if a.backend != want {
		f.wrong[kind]++
		if len(f.examples) < 20 {
			f.examples = append(f.examples, fmt.Sprintf("%s user %d (%s) answered by %s, want %s",
				a.start.Format("15:04:05.000"), u.id, kind, a.backend, want))
		}
	}
}

// reticket records the tickets handed to users that already held one of
// the run: a session that gets a new ticket may change sides.
type reticket struct {
	mu       sync.Mutex
	held     map[int]string
	n        int
	examples []string
}

func (r *reticket) see(st *strategy.Sticky, u *user, a answer) {
	if st == nil {
		return
	}
	tk := hasCookie(a.cookies, st.Cookie.CookieName)
	if tk == nil || !strings.HasPrefix(tk.Value, st.Run+".") {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.held[u.id]; ok {
		r.n++
		if len(r.examples) < 20 {
			r.examples = append(r.examples, fmt.Sprintf("%s user %d held %s, handed %s by %s",
				a.start.Format("15:04:05.000"), u.id, prev, tk.Value, a.backend))
		}
	}
	r.held[u.id] = tk.Value
}

// sharedUser is what a user of the shared-route test sends, and where
// its requests must go ("" when the split rule decides).
type sharedUser struct {
	kind string
	want string
	// ticket: the user carries a ticket of the rollout's run once it is
	// known, on the canary's side (the lowest ticket) or on the stable
	// side (100).
	ticket, canaryTicket bool
}

// TestSharedRouteThroughTraefik: one HTTPRoute shared by several teams —
// the eu rule (/shop + x-region: eu, listed before the split rule), the
// split rule (/shop), the acme rule (/shop + x-tenant: acme, after it),
// and a rule on /other — through a whole Canary rollout driven by the
// Runner with a header route on x-beta: 1, a 20% mirror (the Router's
// TraefikService) and sticky sessions, at weights 10, 20 and 50, then
// aborted; meanwhile users send requests with every combination of
// x-tenant: acme, x-region: eu, x-beta: 1 and a ticket. Every request of
// the acme, eu and other rules reaches its own backend, at every instant
// (0 misrouted); the backends of those rules serve exactly the requests
// their users sent (no mirrored copy); x-beta requests of the split rule
// reach the canary while the header route is in force; the users of the
// split rule alone pass checkSticky's checks; the canary receives mirrored
// copies; and the abort leaves the route with the teams' rules exactly as
// they were.
func TestSharedRouteThroughTraefik(t *testing.T) {
	w, b := newSharedWorld(t, nameAcme, nameEU, nameOther)
	ctx := context.Background()
	c := w.env.Client
	useRules(t, w, sharedRules(w, b),
		probe{what: "acme", path: "/shop/x", header: map[string]string{"x-tenant": "acme"}, want: nameAcme},
		probe{what: "eu", path: "/shop/x", header: map[string]string{"x-region": "eu"}, want: nameEU},
		probe{what: "other", path: "/other/x", want: nameOther},
		probe{what: "shop", path: "/shop/x", want: nameStable})
	userRules := readRoute(t, w).Spec.Rules

	// The users: of the split rule alone (sticky), with x-beta (some with
	// tickets), and of the other rules with every combination of x-beta
	// and a ticket; acme and eu together go to eu, the rule listed first.
	const sticky, betas, perTeam = 1000, 200, 160
	var shop []sharedUser
	for i := 0; i < sticky; i++ {
		shop = append(shop, sharedUser{kind: "split"})
	}
	for i := 0; i < betas; i++ {
		shop = append(shop, sharedUser{kind: "x-beta", ticket: i%2 == 1, canaryTicket: i%4 == 1})
	}
	team := func(kind, want string) []sharedUser {
		var out []sharedUser
		for i := 0; i < perTeam; i++ {
			u := sharedUser{kind: kind, want: want, ticket: i%4 >= 2, canaryTicket: i%8 == 2 || i%8 == 3}
			if i%2 == 1 {
				u.kind += "+x-beta"
			}
			if u.ticket {
				u.kind += "+ticket"
			}
			out = append(out, u)
		}
		return out
	}
	shop = append(shop, team("acme", nameAcme)...)
	shop = append(shop, team("eu", nameEU)...)
	shop = append(shop, team("acme+eu", nameEU)...)
	other := team("other", nameOther)
	for i := range other {
		if i%3 == 0 {
			other[i].kind += "+acme"
		}
	}
	mkPop := func(us []sharedUser) *population {
		pop := newPopulation(t, len(us), 16)
		for i, su := range us {
			h := pop.users[i].header
			if strings.Contains(su.kind, "acme") {
				h.Set("x-tenant", "acme")
			}
			if strings.Contains(su.kind, "eu") {
				h.Set("x-region", "eu")
			}
			if strings.Contains(su.kind, "x-beta") {
				h.Set("x-beta", "1")
			}
		}
		return pop
	}
	shopPop, otherPop := mkPop(shop), mkPop(other)
	shopWant := func(u *user) (string, string) { return shop[u.id].kind, shop[u.id].want }

	const settle = 2 * time.Second
	log := &shaperLog{ExtrasRouter: w.shaper(t, settle, gateway.MirrorTraefikService)}
	check := &stickyCheck{base: w.proxy.url, everCanary: make([]bool, sticky), forward: true}
	retickets := &reticket{held: map[int]string{}}
	foreign := &foreignCheck{checked: map[string]int{}, wrong: map[string]int{}}
	answers := map[string]*atomic.Int64{}
	hits0 := map[string]int64{}
	for _, bk := range append([]*backend{w.stable, w.canary}, b[nameAcme], b[nameEU], b[nameOther]) {
		answers[bk.name] = &atomic.Int64{}
		hits0[bk.name] = bk.hits.Load()
	}
	count := func(a answer) {
		if n := answers[a.backend]; n != nil {
			n.Add(1)
		}
	}
	shopTr := &traffic{pop: shopPop, seen: func(u *user, a answer) {
		count(a)
		if kind, want := shopWant(u); want != "" {
			foreign.see(kind, want, u, a)
		}
		if u.id < sticky {
			check.seen(u, a)
			check.mu.Lock()
			st := check.sticky
			check.mu.Unlock()
			retickets.see(st, u, a)
		}
	}}
	otherTr := &traffic{pop: otherPop, seen: func(u *user, a answer) {
		count(a)
		foreign.see(other[u.id].kind, nameOther, u, a)
	}}
	// Tickets of the run, once it is known, for the users that carry one.
	var planted atomic.Bool
	plant := func(st *strategy.Sticky) {
		if st == nil || !planted.CompareAndSwap(false, true) {
			return
		}
		give := func(pop *population, us []sharedUser) {
			for i, su := range us {
				if !su.ticket {
					continue
				}
				v := st.Grid[len(st.Grid)-1]
				if su.canaryTicket {
					v = st.Grid[0]
				}
				if err := pop.users[i].setCookie(w.proxy.url, &http.Cookie{Name: st.Cookie.CookieName,
					Value: fmt.Sprintf("%s.%d", st.Run, v), Path: "/"}); err != nil {
					t.Error(err)
				}
			}
		}
		give(shopPop, shop)
		give(otherPop, other)
		t.Logf("tickets of run %s (grid %v) given to the users that carry one", st.Run, st.Grid)
	}

	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	shopDone := shopTr.run(loadCtx, w.proxy.url, "/shop/x", shopPop.users)
	otherDone := otherTr.run(loadCtx, w.proxy.url, "/other/x", otherPop.users)
	hold := shopTr.holdFor(t, 2500*time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	strat := strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetHeaderRoute(10, headerExact), strategy.SetMirror(20), strategy.Pause(hold),
		strategy.SetWeight(10), strategy.Pause(hold), strategy.SetWeight(20), strategy.Pause(hold),
		strategy.SetWeight(50), strategy.PauseUntilResumed(),
	}}
	strat.SessionAffinity = &strategy.SessionAffinity{MaxAge: &metav1.Duration{Duration: strategy.DefaultSessionMaxAge}}
	runner := newExtrasRunner(t, strat, log)
	runner.each = func(s strategy.State) {
		check.setSticky(s.DesiredExtras.Sticky)
		plant(s.DesiredExtras.Sticky)
	}
	s := runner.drive(rctx, strategy.NewState("v1", "v2"), pausedAt(50))
	t.Logf("at weight 50: %v", ruleNames(readRoute(t, w)))
	time.Sleep(hold)
	check.backward()
	abortAt := time.Now()
	runner.drive(rctx, s.Abort("e2e: abort at 50%", time.Now()), phaseIs(strategy.PhaseAborted))
	time.Sleep(hold)
	stop()
	<-shopDone
	<-otherDone
	shopTr.stats.report(t)
	otherTr.stats.report(t)
	writes := log.snapshot()
	for i, wr := range writes {
		t.Logf("write %d: canary %3d, %s, %s", i, wr.routes.Weights.B, wr.routes.Extras, appliedAfter(wr))
	}

	// The teams' rules, as they were; no TraefikService left.
	after := readRoute(t, w)
	if d := cmp.Diff(userRules, after.Spec.Rules); d != "" {
		t.Errorf("after the abort the route is not the teams' rules as they were (-before +after):\n%s", d)
	}
	ts := traefikService(w.route.Namespace, gateway.MirrorServiceName(w.route.Namespace, backendRef(w.stable), backendRef(w.canary)), nil)
	if err := c.Get(ctx, client.ObjectKeyFromObject(ts), ts); err == nil {
		t.Errorf("TraefikService %s left behind", ts.GetName())
	}

	// Every request of the other rules on its own backend.
	kinds := make([]string, 0, len(foreign.checked))
	total, wrong := 0, 0
	for k := range foreign.checked {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("%-24s %6d requests, %d misrouted", k+":", foreign.checked[k], foreign.wrong[k])
		total += foreign.checked[k]
		wrong += foreign.wrong[k]
	}
	// Of those, the ones sent while one write with a header route and
	// sticky sessions held, from its being applied to the next write.
	underExtras := 0
	for _, l := range []struct {
		log     []sent
		foreign func(id int) bool
	}{
		{shopTr.log, func(id int) bool { return shop[id].want != "" }},
		{otherTr.log, func(int) bool { return true }},
	} {
		for _, s := range l.log {
			if i := inEffect(writes, s.start, s.end); l.foreign(s.user) && i >= 0 &&
				writes[i].routes.Extras.HeaderRoute != nil && writes[i].routes.Extras.Sticky != nil {
				underExtras++
			}
		}
	}
	t.Logf("other rules: %d requests (%d of them while a header route and sticky sessions held), %d misrouted",
		total, underExtras, wrong)
	if wrong > 0 || len(foreign.examples) > 0 {
		t.Errorf("%d of %d requests of the other rules misrouted:\n%s", wrong, total, strings.Join(foreign.examples, "\n"))
	}
	if total == 0 {
		t.Errorf("no request of the other rules")
	}

	// The other rules' backends served exactly their users' requests, and
	// the canary received mirrored copies.
	quiet(&w.canary.hits)
	for _, bk := range []*backend{b[nameAcme], b[nameEU], b[nameOther]} {
		if served, seen := bk.hits.Load()-hits0[bk.name], answers[bk.name].Load(); served != seen {
			t.Errorf("backend %s served %d requests, its users saw %d answers", bk.name, served, seen)
		}
	}
	copies := w.canary.hits.Load() - hits0[nameCanary] - answers[nameCanary].Load()
	t.Logf("answers: stable %d, canary %d, acme %d, eu %d, other %d; mirrored copies received by the canary: %d",
		answers[nameStable].Load(), answers[nameCanary].Load(), answers[nameAcme].Load(), answers[nameEU].Load(),
		answers[nameOther].Load(), copies)
	if copies <= 0 {
		t.Errorf("the canary received no mirrored copy")
	}

	// x-beta requests of the split rule: on the canary while the header
	// route holds.
	headerN, headerWrong := 0, 0
	for _, s := range shopTr.log {
		if shop[s.user].kind != "x-beta" {
			continue
		}
		if i := inEffect(writes, s.start, s.end); i >= 0 && writes[i].routes.Extras.HeaderRoute != nil {
			headerN++
			if s.backend != nameCanary {
				headerWrong++
			}
		}
	}
	t.Logf("x-beta requests of the split rule while the header route held: %d, %d not on the canary", headerN, headerWrong)
	if headerN == 0 || headerWrong > 0 {
		t.Errorf("x-beta requests under the header route: %d of %d not on the canary", headerWrong, headerN)
	}

	// The split rule's own users: tickets and weights.
	if check.sticky == nil {
		t.Fatal("the rollout never asked for sticky sessions")
	}
	runner.report()
	t.Logf("tickets handed to sessions that held one: %d", retickets.n)
	if retickets.n > 0 {
		t.Errorf("%d sessions were handed a new ticket:\n%s", retickets.n, strings.Join(retickets.examples, "\n"))
	}
	var stickyLog []sent
	for _, s := range shopTr.log {
		if s.user < sticky {
			stickyLog = append(stickyLog, s)
		}
	}
	checkSticky(t, writes, hold*9/10, stickyLog, check, abortAt, &population{users: shopPop.users[:sticky]})
}
