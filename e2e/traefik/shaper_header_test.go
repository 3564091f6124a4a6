package traefik_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// checkNoOwnedRules fails t unless the route holds the user's rule alone
// and no TraefikService of the Router is left.
func checkNoOwnedRules(t *testing.T, w *world, what string) {
	t.Helper()
	ctx := context.Background()
	var rt gwv1.HTTPRoute
	if err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: w.route.Namespace, Name: w.route.Name}, &rt); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.Spec.Rules); n != 1 {
		var names []string
		for _, r := range rt.Spec.Rules {
			if r.Name != nil {
				names = append(names, string(*r.Name))
			}
		}
		t.Errorf("%s: the route has %d rules %v, want the user's rule alone", what, n, names)
	}
	ts := traefikService(w.route.Namespace, gateway.MirrorServiceName(w.route.Namespace, backendRef(w.stable), backendRef(w.canary)), nil)
	if err := w.env.Client.Get(ctx, client.ObjectKeyFromObject(ts), ts); err == nil {
		t.Errorf("%s: TraefikService %s left behind", what, ts.GetName())
	}
}

// headerUsers makes users with the header x-beta: 1 and the cookie
// beta=yes (the first withHeader users) and users with near misses of both
// (x-beta: 2, xbeta=yes, beta=yess), or neither, for the header tests.
func headerUsers(t *testing.T, base string, users, withHeader int) *population {
	t.Helper()
	pop := newPopulation(t, users, 16)
	for i, u := range pop.users {
		var c *http.Cookie
		switch {
		case i < withHeader:
			u.header.Set("X-Beta", "1")
			c = &http.Cookie{Name: "beta", Value: "yes", Path: "/"}
		case i%4 == 0:
			u.header.Set("X-Beta", "2")
		case i%4 == 1:
			c = &http.Cookie{Name: "xbeta", Value: "yes", Path: "/"}
		case i%4 == 2:
			c = &http.Cookie{Name: "beta", Value: "yess", Path: "/"}
		}
		if c != nil {
			if err := u.setCookie(base, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pop
}

// The header routes of the header tests: an Exact match on x-beta, and a
// Cookie match on beta=yes.
var (
	headerExact  = strategy.HeaderMatch{Type: strategy.HeaderExact, Name: "x-beta", Value: "1"}
	headerCookie = strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"}
)

// checkHeader checks the requests of a header-route rollout against the
// writes in effect: while a header route holds, every request of the users
// below withHeader (who send it) reaches the canary; every other request
// follows the weights; every path is rewritten to /v2/x.
func checkHeader(t *testing.T, writes []routesWrite, hold time.Duration, log []sent, withHeader int) {
	t.Helper()
	type count struct{ header, headerCanary, other, otherCanary int }
	counts := make([]count, len(writes))
	var problems []string
	unchecked := 0
	// moved[j]: the start of the last request sent after write j that
	// went where write j sends none.
	moved := make([]time.Time, len(writes))
	for _, s := range log {
		if s.path != "/v2/x" && len(problems) < 10 {
			problems = append(problems, fmt.Sprintf("user %d: path %q, want /v2/x", s.user, s.path))
		}
		if j := lastWriteBefore(writes, s.start); j >= 0 {
			if want, ok := headerSide(writes[j].routes, s.user < withHeader); ok && want != s.backend && s.start.After(moved[j]) {
				moved[j] = s.start
			}
		}
		i := inEffect(writes, s.start, s.end)
		if i < 0 {
			unchecked++
			continue
		}
		canary := s.backend == nameCanary
		if s.user < withHeader {
			counts[i].header++
			if canary {
				counts[i].headerCanary++
			}
		} else {
			counts[i].other++
			if canary {
				counts[i].otherCanary++
			}
		}
	}
	for i, wr := range writes {
		ct, canary := counts[i], wr.routes.Weights.B
		header := wr.routes.Extras.HeaderRoute != nil
		lag := time.Duration(0)
		if !moved[i].IsZero() {
			lag = moved[i].Sub(wr.at)
		}
		t.Logf("write %2d: canary %3d, header route %-5v %s, traffic moved %4v after it: with the header %4d/%4d on the canary, without %4d/%4d",
			i, canary, header, appliedAfter(wr), lag.Round(time.Millisecond), ct.headerCanary, ct.header, ct.otherCanary, ct.other)
		if ct.header == 0 || ct.other == 0 {
			if heldLong(writes, i, hold) {
				t.Errorf("write %d: no request while it held", i)
			}
			continue
		}
		wantHeader := ct.header // header route: all on the canary
		if !header {
			wantHeader = int(math.Round(float64(ct.header) * float64(canary) / 100))
		}
		if header && ct.headerCanary != ct.header || !header && (canary == 0 || canary == 100) && ct.headerCanary != wantHeader {
			t.Errorf("write %d (canary %d, header route %v): %d of %d requests with the header on the canary, want %d",
				i, canary, header, ct.headerCanary, ct.header, wantHeader)
		}
		share := 100 * float64(ct.otherCanary) / float64(ct.other)
		if (canary == 0 || canary == 100) && share != float64(canary) || offWeight(int64(ct.otherCanary), int64(ct.other), canary) {
			t.Errorf("write %d (canary %d): %.2f%% of the requests without the header on the canary", i, canary, share)
		}
	}
	t.Logf("%d requests, %d sent while the routes changed (not checked)", len(log), unchecked)
	if len(problems) > 0 {
		t.Errorf("%v", problems)
	}
}

// rewriteApp makes the route's one rule the user's rule of the header
// tests: PathPrefix /app, rewritten to /v2, all on stable; and waits until
// Traefik serves it.
func rewriteApp(t *testing.T, w *world) {
	t.Helper()
	c := w.env.Client
	prefix := []gwv1.HTTPRouteMatch{pathPrefix("/app")}
	setRules(t, c, w.route, gwv1.HTTPRouteRule{Matches: prefix, Filters: []gwv1.HTTPRouteFilter{rewritePrefix("/v2")},
		BackendRefs: []gwv1.HTTPBackendRef{svcRef(w.stable, 100), svcRef(w.canary, 0)}})
	waitAccepted(t, c, w.route)
	hc := &http.Client{Timeout: 5 * time.Second}
	eventually(t, "the rewrite served", func() error {
		resp, err := hc.Get(w.proxy.url + "/app/x")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if p := resp.Header.Get(headerPath); p != "/v2/x" {
			return fmt.Errorf("path %q", p)
		}
		return nil
	})
}

// lastWriteBefore is the index of the last write begun before at, -1 if none.
func lastWriteBefore(writes []routesWrite, at time.Time) int {
	return sort.Search(len(writes), func(i int) bool { return writes[i].at.After(at) }) - 1
}

// headerSide is the backend the routes send a request to, with or without
// the header, when that does not depend on a weighted draw.
func headerSide(rs rollout.Routes, header bool) (string, bool) {
	switch {
	case header && rs.Extras.HeaderRoute != nil, rs.Weights.B == 100:
		return nameCanary, true
	case rs.Weights.B == 0:
		return nameStable, true
	}
	return "", false
}
