package fake_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

func ptr[T any](v T) *T { return &v }

var (
	betaRoute = &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}, ExpectedPercent: ptr(int32(5))}
	sticky    = &strategy.Sticky{Run: "0badcafe", Grid: []int32{5, 10, 20, 35, 50, 75, 100}}
)

// TestRouterRoutes walks a Router through SetRoutes and its faults at
// fixed instants: the extras travel with the weights and their lag, are
// refused whole when unsupported or malformed, and vanish from Routes when
// another writer drops them.
func TestRouterRoutes(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	r := fake.NewRouter(clock)
	r.SetLag(fake.Lag{Duration: time.Second})
	w := func(b int32) rollout.Weights { return rollout.Weights{A: 100 - b, B: b} }
	mirror20 := strategy.TrafficExtras{MirrorPercent: 20, Sticky: sticky}
	type step struct {
		name   string
		do     func() error
		at     time.Duration // clock offset from t0 when checked
		err    error         // errors.Is; nil: none
		perm   bool          // the error is Permanent
		status rollout.RoutesStatus
		live   rollout.Routes // AppliedRoutes
	}
	accepted := func(wt rollout.Weights, c strategy.Side, x strategy.TrafficExtras) rollout.RoutesStatus {
		return rollout.RoutesStatus{RouteStatus: rollout.RouteStatus{Weights: wt, Accepted: true}, Canary: c, Extras: x}
	}
	pendingSt := func(wt rollout.Weights, c strategy.Side, x strategy.TrafficExtras) rollout.RoutesStatus {
		st := accepted(wt, c, x)
		st.Accepted, st.Message = false, "not yet accepted"
		return st
	}
	steps := []step{
		{name: "sticky and mirror at weight 10, pending", at: 0,
			do: func() error {
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20})
			},
			status: pendingSt(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(0)}},
		{name: "applied after the lag", at: time.Second, do: func() error { return nil },
			status: accepted(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "the same again writes nothing", at: time.Second,
			do: func() error {
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20})
			},
			status: accepted(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "a mirror refused as unsupported writes nothing", at: time.Second,
			do: func() error {
				r.Unsupported(fake.ExtraMirror)
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(20), Canary: strategy.SideB, Extras: strategy.TrafficExtras{MirrorPercent: 30}})
			},
			err: rollout.ErrUnsupported, perm: true,
			status: accepted(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "extras without a canary side are invalid", at: time.Second,
			do: func() error {
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(20), Extras: strategy.TrafficExtras{Sticky: sticky}})
			},
			err: rollout.ErrInvalid, perm: true,
			status: accepted(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "a conflict writes nothing", at: time.Second,
			do: func() error {
				r.Conflicts(1)
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(20), Canary: strategy.SideB, Extras: strategy.TrafficExtras{Sticky: sticky}})
			},
			err:    rollout.ErrConflict,
			status: accepted(w(10), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "header route and sticky at weight 20", at: time.Second,
			do: func() error {
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(20), Canary: strategy.SideB, Extras: strategy.TrafficExtras{HeaderRoute: betaRoute, Sticky: sticky}})
			},
			status: pendingSt(w(20), strategy.SideB, strategy.TrafficExtras{HeaderRoute: betaRoute, Sticky: sticky}),
			live:   rollout.Routes{Weights: w(10), Canary: strategy.SideB, Extras: mirror20}},
		{name: "SetWeights keeps the extras", at: 2 * time.Second,
			do:     func() error { return r.SetWeights(ctx, w(35)) },
			status: pendingSt(w(35), strategy.SideB, strategy.TrafficExtras{HeaderRoute: betaRoute, Sticky: sticky}),
			live:   rollout.Routes{Weights: w(20), Canary: strategy.SideB, Extras: strategy.TrafficExtras{HeaderRoute: betaRoute, Sticky: sticky}}},
		{name: "DropExtras: Routes reports none at once, the data plane after the lag", at: 3 * time.Second,
			do:     func() error { r.DropExtras(); return nil },
			status: pendingSt(w(35), "", strategy.TrafficExtras{}),
			live:   rollout.Routes{Weights: w(35), Canary: strategy.SideB, Extras: strategy.TrafficExtras{HeaderRoute: betaRoute, Sticky: sticky}}},
		{name: "dropped in the data plane", at: 4 * time.Second, do: func() error { return nil },
			status: accepted(w(35), "", strategy.TrafficExtras{}), live: rollout.Routes{Weights: w(35)}},
		{name: "repaired", at: 5 * time.Second,
			do: func() error {
				r.Unsupported()
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(35), Canary: strategy.SideB, Extras: mirror20})
			},
			status: pendingSt(w(35), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(35)}},
		{name: "Overwrite keeps the extras", at: 6 * time.Second,
			do:     func() error { r.Overwrite(w(50)); return nil },
			status: pendingSt(w(50), strategy.SideB, mirror20), live: rollout.Routes{Weights: w(35), Canary: strategy.SideB, Extras: mirror20}},
		{name: "Create replaces the route without extras", at: 8 * time.Second,
			do:     func() error { r.Create(w(0)); return nil },
			status: pendingSt(w(0), "", strategy.TrafficExtras{}), live: rollout.Routes{Weights: w(50), Canary: strategy.SideB, Extras: mirror20}},
		{name: "zero extras remove them", at: 9 * time.Second,
			do: func() error {
				if err := r.SetRoutes(ctx, rollout.Routes{Weights: w(0), Canary: strategy.SideA, Extras: strategy.TrafficExtras{HeaderRoute: betaRoute}}); err != nil {
					return err
				}
				clock.Advance(time.Second)
				return r.SetRoutes(ctx, rollout.Routes{Weights: w(0), Canary: strategy.SideA})
			},
			status: pendingSt(w(0), "", strategy.TrafficExtras{}), live: rollout.Routes{Weights: w(0), Canary: strategy.SideA, Extras: strategy.TrafficExtras{HeaderRoute: betaRoute}}},
	}
	for _, st := range steps {
		clock.Set(t0.Add(st.at))
		err := st.do()
		if !errors.Is(err, st.err) || (err == nil) != (st.err == nil) || rollout.IsPermanent(err) != st.perm {
			t.Fatalf("%s: err %v (permanent %v), want %v (permanent %v)", st.name, err, rollout.IsPermanent(err), st.err, st.perm)
		}
		got, err := r.Routes(ctx)
		if err != nil {
			t.Fatalf("%s: Routes: %v", st.name, err)
		}
		if diff := cmp.Diff(st.status, got); diff != "" {
			t.Errorf("%s: Routes (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.live, r.AppliedRoutes()); diff != "" {
			t.Errorf("%s: AppliedRoutes (-want +got):\n%s", st.name, diff)
		}
	}
	var asked []string
	for _, c := range r.History() {
		if c.Op == "SetRoutes" {
			if c.Routes == nil {
				t.Fatalf("SetRoutes call without its Routes: %+v", c)
			}
			ok := "ok"
			if c.Err != nil {
				ok = "failed"
			}
			asked = append(asked, c.Arg+" "+ok)
		}
	}
	want := []string{
		"A=90 B=10 canary B: mirror 20%, sticky 0badcafe grid 5,10,20,35,50,75,100 ok",
		"A=90 B=10 canary B: mirror 20%, sticky 0badcafe grid 5,10,20,35,50,75,100 ok",
		"A=80 B=20 canary B: mirror 30% failed",
		"A=80 B=20 canary : sticky 0badcafe grid 5,10,20,35,50,75,100 failed",
		"A=80 B=20 canary B: sticky 0badcafe grid 5,10,20,35,50,75,100 failed",
		"A=80 B=20 canary B: header x-beta=1 (5%), sticky 0badcafe grid 5,10,20,35,50,75,100 ok",
		"A=65 B=35 canary B: mirror 20%, sticky 0badcafe grid 5,10,20,35,50,75,100 ok",
		"A=100 B=0 canary A: header x-beta=1 (5%) ok",
		"A=100 B=0 ok",
	}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("SetRoutes history (-want +got):\n%s", diff)
	}
}

// TestRouterRoutesInvalid: every malformed part is named, nothing is
// written.
func TestRouterRoutesInvalid(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 50, B: 50}, Canary: "C", Extras: strategy.TrafficExtras{
		MirrorPercent: 101,
		HeaderRoute:   &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Type: strategy.HeaderRegularExpression, Name: "x", Value: "("}, {Type: "Glob", Value: "v"}}},
		Sticky:        &strategy.Sticky{Run: "a.b", Grid: []int32{50, 20}},
	}})
	if !errors.Is(err, rollout.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Fatalf("err %v, want a Permanent ErrInvalid", err)
	}
	for _, field := range []string{"Routes.Canary", "Routes.Extras.MirrorPercent", "Matches[0].Value", "Matches[1].Name", "Matches[1].Type",
		"Routes.Extras.Sticky.Run", "Routes.Extras.Sticky.Grid"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
	if err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 50, B: 40}}); !rollout.IsPermanent(err) {
		t.Errorf("weights 50/40: %v, want a Permanent error", err)
	}
	if st, _ := r.Status(); st.Weights != (rollout.Weights{A: 100}) || r.Writes() != 0 {
		t.Errorf("written: %+v, %d writes", st, r.Writes())
	}
	r.Delete()
	if err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 100}}); !errors.Is(err, rollout.ErrNotFound) {
		t.Errorf("deleted route: %v, want ErrNotFound", err)
	}
	if _, err := r.Routes(ctx); !errors.Is(err, rollout.ErrNotFound) {
		t.Errorf("Routes of a deleted route: %v, want ErrNotFound", err)
	}
}

// TestRouterServingExtras: a canary at weight 0 receives requests through
// a mirror or a header route, so a deploy on it is under traffic.
func TestRouterServingExtras(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	if got := r.Serving(strategy.SideB)(); got != 0 {
		t.Fatalf("side B serves %d before any extra", got)
	}
	for _, tt := range []struct {
		x    strategy.TrafficExtras
		want int32
	}{
		{strategy.TrafficExtras{MirrorPercent: 20}, 20},
		{strategy.TrafficExtras{HeaderRoute: betaRoute}, 5},
		{strategy.TrafficExtras{Sticky: sticky}, 0},
	} {
		if err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 100}, Canary: strategy.SideB, Extras: tt.x}); err != nil {
			t.Fatal(err)
		}
		if got := r.Serving(strategy.SideB)(); got != tt.want {
			t.Errorf("%s: side B serves %d, want %d", tt.x.String(), got, tt.want)
		}
	}
}

func TestInterceptRouteShaper(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	calls := 0
	ir := fake.InterceptRouter(r, fake.RouterFuncs{
		SetRoutes: func(ctx context.Context, next rollout.ExtrasRouter, rt rollout.Routes) error {
			calls++
			return next.SetRoutes(ctx, rt)
		},
	})
	rs, ok := ir.(rollout.ExtrasRouter)
	if !ok {
		t.Fatal("an intercepted Router is not an ExtrasRouter")
	}
	if err := rs.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}, Canary: strategy.SideB, Extras: strategy.TrafficExtras{MirrorPercent: 5}}); err != nil {
		t.Fatal(err)
	}
	if st, err := rs.Routes(ctx); err != nil || calls != 1 || st.Extras.MirrorPercent != 5 {
		t.Errorf("Routes %+v, %v after %d intercepted calls", st, err, calls)
	}
	// A weights interceptor sees the weights of SetRoutes and Routes too;
	// the extras travel with them.
	double := func(w rollout.Weights) rollout.Weights { return rollout.Weights{A: 100 - 2*w.B, B: 2 * w.B} }
	halve := func(w rollout.Weights) rollout.Weights { return rollout.Weights{A: 100 - w.B/2, B: w.B / 2} }
	wi := fake.InterceptRouter(r, fake.RouterFuncs{
		SetWeights: func(ctx context.Context, next rollout.TrafficRouter, w rollout.Weights) error {
			return next.SetWeights(ctx, double(w))
		},
		Weights: func(ctx context.Context, next rollout.TrafficRouter) (rollout.RouteStatus, error) {
			st, err := next.Weights(ctx)
			st.Weights = halve(st.Weights)
			return st, err
		},
	}).(rollout.ExtrasRouter)
	x := strategy.TrafficExtras{Sticky: sticky}
	if err := wi.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 80, B: 20}, Canary: strategy.SideB, Extras: x}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Routes(ctx); st.Weights != (rollout.Weights{A: 60, B: 40}) || !st.Extras.Equal(x) || st.Canary != strategy.SideB {
		t.Errorf("written through a weights interceptor: %+v", st)
	}
	if st, err := wi.Routes(ctx); err != nil || st.Weights != (rollout.Weights{A: 80, B: 20}) || !st.Extras.Equal(x) || st.Canary != strategy.SideB {
		t.Errorf("read through a weights interceptor: %+v, %v", st, err)
	}
	plain := fake.InterceptRouter(fake.InterceptRouter(r, fake.RouterFuncs{}), fake.RouterFuncs{})
	if _, ok := plain.(rollout.ExtrasRouter); !ok {
		t.Error("a wrapped wrapper lost ExtrasRouter")
	}
	if _, ok := fake.InterceptRouter(weightsOnly{r}, fake.RouterFuncs{}).(rollout.ExtrasRouter); ok {
		t.Error("a router without SetRoutes became an ExtrasRouter")
	}
}

type weightsOnly struct{ r *fake.Router }

func (w weightsOnly) SetWeights(ctx context.Context, wt rollout.Weights) error {
	return w.r.SetWeights(ctx, wt)
}
func (w weightsOnly) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return w.r.Weights(ctx)
}

// hoeffding is the largest deviation of a share (0..1) of n independent
// draws from its expectation with probability at least 1-delta; by the
// Dvoretzky-Kiefer-Wolfowitz inequality (Massart's constant) the same
// bound holds for the empirical distribution of n tickets at every
// threshold at once.
func hoeffding(n int64, delta float64) float64 {
	return math.Sqrt(math.Log(2/delta) / (2 * float64(n)))
}

// stickyWorld is a route with sticky sessions on side B and a population
// of users sending 1000 requests per tick.
func stickyWorld(t *testing.T, users fake.Users, seed uint64) (*fake.Router, *fake.Traffic) {
	t.Helper()
	r := fake.NewRouter(nil)
	tr := fake.NewTraffic(r, nil, nil, 1000)
	tr.SetSeed(seed)
	if err := tr.SetUsers(users); err != nil {
		t.Fatal(err)
	}
	return r, tr
}

func setSticky(t *testing.T, r *fake.Router, theta int32, x strategy.TrafficExtras) {
	t.Helper()
	if err := r.SetRoutes(context.Background(), rollout.Routes{Weights: rollout.Weights{A: 100 - theta, B: theta}, Canary: strategy.SideB, Extras: x}); err != nil {
		t.Fatal(err)
	}
}

// TestTrafficStickyShare walks the canary weight up the grid and back to
// 0 with 10,000 users (a fixed seed: the draws are the same every run).
// At every step the share of sessions on the canary is within the
// Hoeffding bound of the weight (delta 1e-6), no session flips from the
// canary to the stable side while the weight rises, and every session is
// on the stable side at weight 0.
func TestTrafficStickyShare(t *testing.T) {
	r, tr := stickyWorld(t, fake.Users{N: 10000, Churn: 0.001}, 23)
	x := strategy.TrafficExtras{Sticky: sticky}
	for _, theta := range []int32{0, 5, 10, 20, 35, 50, 75, 100} {
		setSticky(t, r, theta, x)
		for range 20 {
			tr.Tick()
		}
		st := tr.Stats()
		bound := 100 * hoeffding(st.Sessions, 1e-6)
		if st.Sessions < 5000 || math.Abs(st.SessionShare()-float64(theta)) > bound {
			t.Errorf("weight %d: %d of %d sessions on the canary (%.2f%%), want within %.2f points", theta, st.CanarySessions, st.Sessions, st.SessionShare(), bound)
		}
		if st.Flips != 0 {
			t.Errorf("weight %d: %d flips while the weight rose", theta, st.Flips)
		}
		if theta == 0 && (st.CanarySessions != 0 || st.B.Requests != 0) {
			t.Errorf("weight 0: %d sessions and %d requests on the canary", st.CanarySessions, st.B.Requests)
		}
	}
	// An abort walks the weight back: sessions leave the canary with it and
	// none stays.
	before := tr.Stats()
	for _, theta := range []int32{50, 10, 0} {
		setSticky(t, r, theta, x)
		tr.Tick()
	}
	st := tr.Stats()
	if st.CanarySessions != 0 || st.Flips != before.Flips {
		t.Errorf("after the walk back: %d sessions on the canary, %d flips counted while the weight fell", st.CanarySessions, st.Flips-before.Flips)
	}
}

// TestTrafficStickyDrift: clients that refuse cookies get a new ticket at
// every request, so they flip while the weight stands still; sessions of
// clients that keep cookies do not. Dropping the extras (a GitOps re-apply)
// sends every session back to per-request routing: flips appear.
func TestTrafficStickyDrift(t *testing.T) {
	r, tr := stickyWorld(t, fake.Users{N: 2000, RefuseCookies: 0.25}, 7)
	x := strategy.TrafficExtras{Sticky: sticky}
	setSticky(t, r, 50, x)
	for range 10 {
		tr.Tick()
	}
	st := tr.Stats()
	if st.Flips == 0 {
		t.Error("no flips with a quarter of the users refusing cookies")
	}
	if st.Sessions > 1500 || st.Sessions < 1400 {
		t.Errorf("%d sessions, want the 1500 users that keep cookies, nearly all seen", st.Sessions)
	}
	if st.Tickets < 10*1000/4 {
		t.Errorf("%d tickets handed out, want one per request of a refusing user at least", st.Tickets)
	}
	// Without refusing users, dropping the extras makes sessions flip.
	r, tr = stickyWorld(t, fake.Users{N: 2000}, 7)
	setSticky(t, r, 50, x)
	for range 10 {
		tr.Tick()
	}
	if f := tr.Stats().Flips; f != 0 {
		t.Fatalf("%d flips at a standing weight", f)
	}
	r.DropExtras()
	for range 10 {
		tr.Tick()
	}
	if st := tr.Stats(); st.Flips == 0 || st.Sessions != 0 {
		t.Errorf("after DropExtras: %d flips, %d sessions; want flips and no sessions counted", st.Flips, st.Sessions)
	}
}

// TestTrafficStickyExpiry: a ticket expires after MaxAge on the users'
// clock; the user then gets a new one.
func TestTrafficStickyExpiry(t *testing.T) {
	clock := fake.NewClock(t0)
	r, tr := stickyWorld(t, fake.Users{N: 100, Clock: clock}, 1)
	s := *sticky
	s.Cookie.CookieName = "sess"
	s.Cookie.MaxAge = &metav1.Duration{Duration: time.Minute}
	setSticky(t, r, 50, strategy.TrafficExtras{Sticky: &s})
	tr.Tick()
	first := tr.Stats()
	tr.Tick()
	if tr.Stats().Tickets-first.Tickets > 5 {
		t.Errorf("%d new tickets in the second tick, want almost none", tr.Stats().Tickets-first.Tickets)
	}
	before := tr.Stats().Tickets
	clock.Advance(time.Minute)
	tr.Tick()
	if got := tr.Stats().Tickets - before; got < 90 || got > 100 {
		t.Errorf("%d new tickets after MaxAge, want one for (nearly) every one of the 100 users", got)
	}
}

// TestTrafficHeaderRoute: a header route sends exactly the requests that
// match it to the canary, whatever the weight, and the weights split the
// rest.
func TestTrafficHeaderRoute(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		match  strategy.HeaderMatch
		routed bool
	}{
		{"exact", http.Header{"X-Beta": {"1"}}, strategy.HeaderMatch{Name: "x-beta", Value: "1"}, true},
		{"exact, another value", http.Header{"X-Beta": {"2"}}, strategy.HeaderMatch{Name: "x-beta", Value: "1"}, false},
		{"regular expression, unanchored", http.Header{"User-Agent": {"curl/8.5 beta"}}, strategy.HeaderMatch{Type: strategy.HeaderRegularExpression, Name: "user-agent", Value: "beta$"}, true},
		{"cookie", http.Header{"Cookie": {"lang=en; beta=1"}}, strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "1"}, true},
		{"cookie, another name ending alike", http.Header{"Cookie": {"xbeta=1"}}, strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "1"}, false},
		{"cookie, a longer value", http.Header{"Cookie": {"beta=10"}}, strategy.HeaderMatch{Type: strategy.HeaderCookie, Name: "beta", Value: "1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fake.NewRouter(nil)
			tr := fake.NewTraffic(r, nil, nil, 1000)
			tr.SetHeaderShare(0.05, tt.header)
			route := &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{tt.match}, ExpectedPercent: ptr(int32(5))}
			if err := r.SetRoutes(context.Background(), rollout.Routes{Weights: rollout.Weights{A: 90, B: 10}, Canary: strategy.SideB,
				Extras: strategy.TrafficExtras{HeaderRoute: route}}); err != nil {
				t.Fatal(err)
			}
			var prev fake.TrafficStats
			for range 40 {
				tr.Tick()
				st := tr.Stats()
				routed, marked := st.HeaderRouted-prev.HeaderRouted, st.HeaderMarked-prev.HeaderMarked
				if tt.routed && routed != marked || !tt.routed && routed != 0 {
					t.Fatalf("tick %d: %d requests routed by the header route, %d marked (match: %v)", st.Ticks, routed, marked, tt.routed)
				}
				if b := st.B.Requests - prev.B.Requests; b != routed+(1000-routed)-(1000-routed)*90/100 {
					t.Fatalf("tick %d: side B got %d requests, want the %d header-routed and the weights' share of the rest", st.Ticks, b, routed)
				}
				rest := 1000 - routed
				if a := st.A.Requests - prev.A.Requests; a != rest*90/100 {
					t.Fatalf("tick %d: side A got %d of the %d requests the weights split, want %d", st.Ticks, a, rest, rest*90/100)
				}
				prev = st
			}
			n := prev.Ticks * 1000
			if share := float64(prev.HeaderMarked) / float64(n); math.Abs(share-0.05) > hoeffding(n, 1e-6) {
				t.Errorf("%d of %d requests marked, want about 5%%", prev.HeaderMarked, n)
			}
		})
	}
}

// TestTrafficMirror: about p% of the requests the weights send to the
// stable side are copied to the canary; the copies are load on it (beyond
// its ready capacity they are lost, never a client's request).
func TestTrafficMirror(t *testing.T) {
	ctx := context.Background()
	r := fake.NewRouter(nil)
	a := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100})
	b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 30})
	tr := fake.NewTraffic(r, a, b, 1000)
	tr.SetSeed(5)
	if err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 70, B: 30}, Canary: strategy.SideB, Extras: strategy.TrafficExtras{MirrorPercent: 20}}); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		tr.Tick()
	}
	st := tr.Stats()
	stableBound := st.A.Requests
	if stableBound != 50*700 || st.B.Requests != 50*300 {
		t.Fatalf("requests A %d, B %d; want the weights' 70/30", st.A.Requests, st.B.Requests)
	}
	if share := float64(st.B.Mirrored) / float64(stableBound); math.Abs(share-0.2) > hoeffding(stableBound, 1e-6) {
		t.Errorf("%d copies of %d stable-bound requests (%.2f%%), want about 20%%", st.B.Mirrored, stableBound, 100*share)
	}
	if st.A.Mirrored != 0 || st.Overloaded != 0 || st.Dropped != 0 {
		t.Errorf("copies to the stable side %d, overloaded %d, dropped %d; want none", st.A.Mirrored, st.Overloaded, st.Dropped)
	}
	if st.B.MirrorLost != st.B.Mirrored {
		t.Errorf("%d of %d copies lost; the canary's ready capacity (30) is used up by its own 300 requests", st.B.MirrorLost, st.B.Mirrored)
	}
	// With room for them, the copies are served.
	_ = b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50})
	tr.Tick()
	if st2 := tr.Stats(); st2.B.MirrorLost != st.B.MirrorLost {
		t.Errorf("%d copies lost with the canary at 50%% ready", st2.B.MirrorLost-st.B.MirrorLost)
	}
}

// TestUsersValidate names every bad field.
func TestUsersValidate(t *testing.T) {
	tr := fake.NewTraffic(nil, nil, nil, 10)
	err := tr.SetUsers(fake.Users{N: -1, RefuseCookies: 2, Churn: math.NaN()})
	if !errors.Is(err, rollout.ErrInvalid) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
	for _, f := range []string{"Users.N", "Users.RefuseCookies", "Users.Churn"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error does not name %s: %v", f, err)
		}
	}
}

// TestTrafficStickyProperty: whatever the population and the seed, while
// the weight rises along the grid no session flips from the canary to the
// stable side, a weight of 0 holds no session on the canary and a weight
// of 100 holds them all.
func TestTrafficStickyProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		grid := rapid.SliceOfNDistinct(rapid.Int32Range(1, 99), 0, 15, rapid.ID).Draw(t, "grid")
		grid = append(sortedInt32(grid), 100)
		s := &strategy.Sticky{Run: "r" + rapid.StringMatching(`[0-9a-f]{6}`).Draw(t, "run"), Grid: grid}
		r := fake.NewRouter(nil)
		tr := fake.NewTraffic(r, nil, nil, int64(rapid.IntRange(1, 500).Draw(t, "perTick")))
		tr.SetSeed(rapid.Uint64().Draw(t, "seed"))
		if err := tr.SetUsers(fake.Users{N: rapid.IntRange(1, 300).Draw(t, "users"), Churn: rapid.Float64Range(0, 0.2).Draw(t, "churn")}); err != nil {
			t.Fatal(err)
		}
		theta := int32(0)
		for i := range rapid.IntRange(1, 12).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "rise") {
				theta = rapid.SampledFrom(append([]int32{theta}, above(grid, theta)...)).Draw(t, "theta")
			}
			if err := r.SetRoutes(context.Background(), rollout.Routes{Weights: rollout.Weights{A: 100 - theta, B: theta}, Canary: strategy.SideB,
				Extras: strategy.TrafficExtras{Sticky: s}}); err != nil {
				t.Fatal(err)
			}
			for range rapid.IntRange(1, 4).Draw(t, "ticks") {
				tr.Tick()
			}
			st := tr.Stats()
			switch {
			case st.Flips != 0:
				t.Fatalf("step %d, weight %d: %d flips while the weight rose", i, theta, st.Flips)
			case theta == 0 && (st.CanarySessions != 0 || st.B.Requests != 0):
				t.Fatalf("weight 0: %d sessions, %d requests on the canary", st.CanarySessions, st.B.Requests)
			case theta == 100 && st.CanarySessions != st.Sessions:
				t.Fatalf("weight 100: %d of %d sessions on the canary", st.CanarySessions, st.Sessions)
			}
		}
	})
}

func sortedInt32(v []int32) []int32 {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	return v
}

func above(grid []int32, theta int32) []int32 {
	var out []int32
	for _, g := range grid {
		if g > theta {
			out = append(out, g)
		}
	}
	return out
}

// TestRouterRoutesProperty: whatever the sequence of writes, faults and
// reads, Routes reports the extras of the last SetRoutes that succeeded,
// unless DropExtras or Create removed them since (SetWeights and Overwrite
// keep them); a refused SetRoutes changes nothing; and once the lag has
// passed the data plane routes by exactly what the spec holds.
func TestRouterRoutesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		clock := fake.NewClock(t0)
		r := fake.NewRouter(clock)
		lag := time.Duration(rapid.IntRange(0, 3).Draw(t, "lagSeconds")) * time.Second
		r.SetLag(fake.Lag{Duration: lag})
		var refused []fake.Extra
		if rapid.Bool().Draw(t, "refuseMirror") {
			refused = append(refused, fake.ExtraMirror)
		}
		r.Unsupported(refused...)
		wantW, wantC, wantX := rollout.Weights{A: 100}, strategy.Side(""), strategy.TrafficExtras{}
		for i := range rapid.IntRange(1, 30).Draw(t, "ops") {
			b := int32(rapid.IntRange(0, 100).Draw(t, "weight"))
			w := rollout.Weights{A: 100 - b, B: b}
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				x := strategy.TrafficExtras{MirrorPercent: int32(rapid.SampledFrom([]int{0, 0, 10, 50}).Draw(t, "mirror"))}
				if rapid.Bool().Draw(t, "header") {
					x.HeaderRoute = betaRoute
				}
				if rapid.Bool().Draw(t, "sticky") {
					x.Sticky = sticky
				}
				c := rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, "canary")
				err := r.SetRoutes(ctx, rollout.Routes{Weights: w, Canary: c, Extras: x})
				if refusedMirror := len(refused) > 0 && x.MirrorPercent > 0; refusedMirror != (err != nil) {
					t.Fatalf("op %d: SetRoutes with %s: %v", i, x.String(), err)
				}
				if err == nil {
					wantW, wantC, wantX = w, c, x
					if x.IsZero() {
						wantC, wantX = "", strategy.TrafficExtras{}
					}
				}
			case 2:
				if err := r.SetWeights(ctx, w); err != nil {
					t.Fatal(err)
				}
				wantW = w
			case 3:
				r.DropExtras()
				wantC, wantX = "", strategy.TrafficExtras{}
			case 4:
				if rapid.Bool().Draw(t, "create") {
					r.Create(w)
					wantC, wantX = "", strategy.TrafficExtras{}
				} else {
					r.Overwrite(w)
				}
				wantW = w
			case 5:
				clock.Advance(time.Duration(rapid.IntRange(0, 4).Draw(t, "advance")) * time.Second)
			}
			st, err := r.Routes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Weights != wantW || st.Canary != wantC || !st.Extras.Equal(wantX) {
				t.Fatalf("op %d: Routes %v canary %q %s; want %v canary %q %s", i, st.Weights, st.Canary, st.Extras.String(),
					wantW, wantC, wantX.String())
			}
		}
		clock.Advance(lag)
		if _, err := r.Routes(ctx); err != nil {
			t.Fatal(err)
		}
		live := r.AppliedRoutes()
		if live.Weights != wantW || live.Canary != wantC || !live.Extras.Equal(wantX) {
			t.Fatalf("after the lag the data plane routes by %v canary %q %s; want %v canary %q %s", live.Weights, live.Canary,
				live.Extras.String(), wantW, wantC, wantX.String())
		}
	})
}

// TestTrafficMirrorRecorded: the canary answers mirrored copies as any
// request, and they are recorded on its side, but no client sees their
// failures.
func TestTrafficMirrorRecorded(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	r := fake.NewRouter(clock)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100})
	a.SetRevision("v1")
	b.SetRevision("v2")
	metrics := fake.NewMetrics(clock)
	tr := fake.NewTraffic(r, a, b, 1000)
	tr.RecordTo(metrics)
	tr.SetErrorRate("v2", 0.5)
	if err := r.SetRoutes(ctx, rollout.Routes{Weights: rollout.Weights{A: 100}, Canary: strategy.SideB, Extras: strategy.TrafficExtras{MirrorPercent: 50}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clock.Advance(time.Second)
		tr.Tick()
	}
	st := tr.Stats()
	if st.Failed != 0 || st.B.Requests != 0 || st.B.Mirrored == 0 || st.Served != 3000 {
		t.Fatalf("stats %+v: want 3000 clients' requests served by side A, none failed, copies on side B", st)
	}
	c := analysis.SuccessRate(0.95)
	got, err := metrics.Measure(ctx, &c, canaryVars(strategy.SideB, "10s"), "", "n", clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Requests != float64(st.B.Mirrored) || math.Abs(got.Value-0.5) > 0.01 {
		t.Errorf("side B recorded %+v; want its %d copies, half of them failed", got, st.B.Mirrored)
	}
}

// TestTrafficStickyNewRun: the tickets of another run are no tickets: a
// new rollout's sticky sessions hand every user a new one.
func TestTrafficStickyNewRun(t *testing.T) {
	r, tr := stickyWorld(t, fake.Users{N: 500}, 3)
	setSticky(t, r, 50, strategy.TrafficExtras{Sticky: sticky})
	for range 5 {
		tr.Tick()
	}
	first := tr.Stats()
	if first.Sessions < 495 || first.Tickets != first.Sessions {
		t.Fatalf("%d sessions, %d tickets; want one ticket for each of (nearly) 500 users", first.Sessions, first.Tickets)
	}
	next := *sticky
	next.Run = "feedface"
	setSticky(t, r, 50, strategy.TrafficExtras{Sticky: &next})
	tr.Tick()
	st := tr.Stats()
	if st.Tickets-first.Tickets != st.Sessions {
		t.Errorf("after a new run: %d sessions (of %d before), %d new tickets; want a new ticket for each user back since, the others holding none of the run",
			st.Sessions, first.Sessions, st.Tickets-first.Tickets)
	}
	// A new run is a new session: a user on the canary whose new ticket is
	// above the weight moves to the stable side though the weight stood
	// still (why a rollout keeps one run from start to end).
	if st.Flips == 0 {
		t.Error("no flips when the run changed at a standing weight")
	}
}
