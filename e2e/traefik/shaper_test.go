package traefik_test

import (
	"context"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
)

// The extras programmed by the gateway Router (its extra rules, its
// TraefikService) through Traefik, while simulated users keep sending
// requests: the route writes and when each was reported applied are logged
// by shaperLog, the requests by traffic, and each request is checked against
// the extras in effect when it was sent.

// shaper is the world's Router programming the extras on side B (canary).
func (w *world) shaper(t *testing.T, settle time.Duration, mode gateway.MirrorMode) *gateway.Router {
	t.Helper()
	r, err := gateway.NewRouter(w.env.Client, gateway.Config{Routes: []gateway.RouteRef{w.route},
		A: backendRef(w.stable), B: backendRef(w.canary), SettleDelay: settle, Mirror: mode})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// routesWrite is one route update: what was asked, when, and when the
// router first reported it applied (accepted for the written generation,
// plus the settle delay, and the extras read back).
type routesWrite struct {
	at, applied time.Time
	routes      rollout.Routes
}

// shaperLog wraps an ExtrasRouter (the Runner's router) and logs every update
// and when it was first reported applied.
type shaperLog struct {
	rollout.ExtrasRouter
	mu     sync.Mutex
	writes []routesWrite
}

func (l *shaperLog) SetRoutes(ctx context.Context, rs rollout.Routes) error {
	return l.record(rs, func() error { return l.ExtrasRouter.SetRoutes(ctx, rs) })
}

func (l *shaperLog) SetWeights(ctx context.Context, w rollout.Weights) error {
	l.mu.Lock()
	rs := rollout.Routes{Weights: w}
	if n := len(l.writes); n > 0 {
		rs.Canary, rs.Extras = l.writes[n-1].routes.Canary, l.writes[n-1].routes.Extras
	}
	l.mu.Unlock()
	return l.record(rs, func() error { return l.ExtrasRouter.SetWeights(ctx, w) })
}

func (l *shaperLog) record(rs rollout.Routes, write func() error) error {
	at := time.Now()
	err := write()
	if err == nil {
		l.mu.Lock()
		if n := len(l.writes); n == 0 || !sameRoutes(l.writes[n-1].routes, rs) {
			l.writes = append(l.writes, routesWrite{at: at, routes: rs})
		}
		l.mu.Unlock()
	}
	return err
}

func (l *shaperLog) Routes(ctx context.Context) (rollout.RoutesStatus, error) {
	st, err := l.ExtrasRouter.Routes(ctx)
	if err == nil && st.Accepted {
		l.mu.Lock()
		if n := len(l.writes); n > 0 && l.writes[n-1].applied.IsZero() {
			last := l.writes[n-1].routes
			if st.Weights == last.Weights && st.Extras.Equal(last.Extras) && (last.Extras.IsZero() || st.Canary == last.Canary) {
				l.writes[n-1].applied = time.Now()
			}
		}
		l.mu.Unlock()
	}
	return st, err
}

func (l *shaperLog) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	st, err := l.Routes(ctx)
	return st.RouteStatus, err
}

func sameRoutes(a, b rollout.Routes) bool {
	return a.Weights == b.Weights && a.Canary == b.Canary && a.Extras.Equal(b.Extras)
}

// snapshot returns the writes so far.
func (l *shaperLog) snapshot() []routesWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]routesWrite(nil), l.writes...)
}

// inEffect returns the index of the write in effect the whole time a
// request sent at start and answered at end was in flight: applied before
// start, and the next write not begun before end; -1 for a request sent
// while the routes were changing.
func inEffect(writes []routesWrite, start, end time.Time) int {
	i := sort.Search(len(writes), func(i int) bool { return writes[i].at.After(start) }) - 1
	if i < 0 || writes[i].applied.IsZero() || writes[i].applied.After(start) {
		return -1
	}
	if i+1 < len(writes) && writes[i+1].at.Before(end) {
		return -1
	}
	return i
}

// heldLong reports whether write i held, applied, for at least d (or is
// the last one, applied): long enough that requests must have been checked
// against it alone.
func heldLong(writes []routesWrite, i int, d time.Duration) bool {
	if writes[i].applied.IsZero() {
		return false
	}
	return i+1 == len(writes) || writes[i+1].at.Sub(writes[i].applied) >= d
}

// sent is one request of a user.
type sent struct {
	start, end time.Time
	user       int
	backend    string
	path       string
}

// traffic has users send requests round after round until stopped, and
// keeps every answer.
type traffic struct {
	pop   *population
	stats roundStats
	mu    sync.Mutex
	log   []sent
	// afterRound, when set, runs after each round (in the traffic's
	// goroutine).
	afterRound func(round int, from, to time.Time)
	// seen, when set, sees each answer as it comes.
	seen func(u *user, a answer)
	// chunk, when set, makes a round of the next chunk users only,
	// cycling through them.
	chunk int
	// durations of the rounds so far, under mu.
	durations []time.Duration
}

// holdFor returns how long a step should hold for its requests to be
// checked: at least min, and at least three rounds as long as the longest
// of the first two (which it waits for); the machine may be slow.
func (tr *traffic) holdFor(t *testing.T, least time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(propagationBudget)
	for {
		tr.mu.Lock()
		ds := append([]time.Duration(nil), tr.durations...)
		tr.mu.Unlock()
		if len(ds) >= 2 {
			d := max(least, 3*max(ds[0], ds[1])).Round(100 * time.Millisecond)
			t.Logf("rounds of the users took %v and %v: steps hold %v", ds[0].Round(time.Millisecond), ds[1].Round(time.Millisecond), d)
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("the users did not finish two rounds in %v", propagationBudget)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run sends rounds of every user in us to base+path until ctx is done; the
// returned channel closes when the last round has ended.
func (tr *traffic) run(ctx context.Context, base, path string, us []*user) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for round := 0; ctx.Err() == nil; round++ {
			from := time.Now()
			batch := us
			if tr.chunk > 0 {
				k := round % ((len(us) + tr.chunk - 1) / tr.chunk)
				batch = us[k*tr.chunk : min((k+1)*tr.chunk, len(us))]
			}
			tr.pop.round(context.Background(), &tr.stats, base, path, batch, func(u *user, a answer) {
				tr.mu.Lock()
				tr.log = append(tr.log, sent{start: a.start, end: a.end, user: u.id, backend: a.backend, path: a.path})
				tr.mu.Unlock()
				if tr.seen != nil {
					tr.seen(u, a)
				}
			})
			if tr.afterRound != nil {
				tr.afterRound(round, from, time.Now())
			}
			tr.mu.Lock()
			tr.durations = append(tr.durations, time.Since(from))
			tr.mu.Unlock()
		}
	}()
	return done
}

// offWeight reports whether c of n requests on the canary is off the
// canary weight w by more than 2 points: weighted round robin in Traefik is
// deterministic, so the count of any run of consecutive requests is within
// one or two of w·n; for small n, two requests is allowed instead.
func offWeight(c, n int64, w int32) bool {
	want := float64(n) * float64(w) / 100
	return math.Abs(float64(c)-want) > max(0.02*float64(n), 2)
}

// appliedAfter says when the write was reported applied.
func appliedAfter(wr routesWrite) string {
	if wr.applied.IsZero() {
		return "never reported applied"
	}
	return "applied " + wr.applied.Sub(wr.at).Round(time.Millisecond).String() + " after the write"
}
