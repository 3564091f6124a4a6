package traefik_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/strategy"
)

// stickyCheck follows users through a rollout with sticky sessions and
// checks every answer against the routes in effect.
type stickyCheck struct {
	base string
	mu   sync.Mutex
	// sticky: the extras' sticky sessions, once known.
	sticky *strategy.Sticky
	// everCanary: the user was answered by the canary while the rollout
	// went forward.
	everCanary []bool
	forward    bool
	flips      int
	problems   []string
}

func (c *stickyCheck) problem(format string, args ...any) {
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// seen is traffic.seen: the app cookie survives on every answer, and no
// user goes back to stable while the rollout goes forward.
func (c *stickyCheck) seen(u *user, a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	canary := a.backend == nameCanary
	if app := hasCookie(a.cookies, appCookie); app == nil || app.Value != a.backend {
		c.problem("user %d: answer from %s without its app cookie: %v", u.id, a.backend, a.cookies)
	}
	if c.forward && c.everCanary[u.id] && !canary {
		c.flips++
		c.problem("user %d went back to stable at %s while the rollout went forward", u.id, a.start.Format("15:04:05.000"))
	}
	if canary && c.forward {
		c.everCanary[u.id] = true
	}
	if c.sticky == nil {
		return
	}
	if tk := hasCookie(a.cookies, c.sticky.Cookie.CookieName); tk != nil {
		if !tk.HttpOnly || tk.Path != "/" || tk.MaxAge != int(c.sticky.Cookie.MaxAge.Seconds()) || tk.SameSite != http.SameSiteLaxMode {
			c.problem("user %d: ticket cookie %+v", u.id, tk)
		}
	}
}

// setSticky records the run's sticky sessions once known.
func (c *stickyCheck) setSticky(st *strategy.Sticky) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sticky == nil && st != nil {
		c.sticky = st.DeepCopy()
	}
}

// backward marks the rollout as no longer going forward (an abort).
func (c *stickyCheck) backward() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forward = false
}

// ticket is u's ticket of this run, 0 when none.
func (c *stickyCheck) ticket(u *user) int32 {
	if c.sticky == nil {
		return 0
	}
	v, ok := strings.CutPrefix(u.cookie(c.base, c.sticky.Cookie.CookieName), c.sticky.Run+".")
	if !ok {
		return 0
	}
	for _, g := range c.sticky.Grid {
		if fmt.Sprint(g) == v {
			return g
		}
	}
	return 0
}

// checkSticky checks the requests of users through a rollout with sticky
// sessions aborted at abortAt: per write, the share of the users answered
// while it held is its weight within 2 points and each is on its ticket's
// side; once the first weight-0 write after abortAt is applied, no user is
// answered by the canary; no flip back to stable while going forward.
func checkSticky(t *testing.T, writes []routesWrite, hold time.Duration, log []sent, check *stickyCheck, abortAt time.Time, pop *population) {
	t.Helper()
	// Per write: the sides each user was answered from while it held.
	sides := make([]map[int]map[string]bool, len(writes))
	lastStableMiss := time.Time{}
	for _, s := range log {
		if !s.start.Before(abortAt) && s.backend == nameCanary && s.start.After(lastStableMiss) {
			lastStableMiss = s.start
		}
		i := inEffect(writes, s.start, s.end)
		if i < 0 {
			continue
		}
		if sides[i] == nil {
			sides[i] = map[int]map[string]bool{}
		}
		if sides[i][s.user] == nil {
			sides[i][s.user] = map[string]bool{}
		}
		sides[i][s.user][s.backend] = true
	}
	for i, wr := range writes {
		theta := wr.routes.Weights.B
		active, onCanary, both, wrongTicket := 0, 0, 0, 0
		for id, s := range sides[i] {
			active++
			if len(s) > 1 {
				both++
				continue
			}
			on := s[nameCanary]
			if on {
				onCanary++
			}
			if wr.routes.Extras.Sticky != nil {
				if tk := check.ticket(pop.users[id]); tk == 0 || on != (tk <= theta) {
					wrongTicket++
				}
			}
		}
		if active == 0 {
			if heldLong(writes, i, hold) {
				t.Errorf("write %d: no user was answered while it held", i)
			}
			continue
		}
		share := 100 * float64(onCanary) / float64(active)
		t.Logf("write %d: canary %3d, sticky %-5v %s: %.2f%% of %d active users on the canary, %d on both sides, %d not on their ticket's side",
			i, theta, wr.routes.Extras.Sticky != nil, appliedAfter(wr), share, active, both, wrongTicket)
		// The share is measured over the users answered while the write
		// held: all of them when it held for rounds; a write that held
		// briefly saw a subset picked by timing, too few to measure.
		if heldLong(writes, i, hold) && active < len(pop.users)/2 {
			t.Errorf("write %d (canary %d) held, yet only %d of %d users were answered meanwhile", i, theta, active, len(pop.users))
		} else if heldLong(writes, i, hold) && math.Abs(share-float64(theta)) > 2 {
			t.Errorf("write %d (canary %d): %.2f%% of the users on the canary", i, theta, share)
		}
		if both+wrongTicket > 0 {
			t.Errorf("write %d (canary %d): %d users on both sides, %d not on their ticket's side", i, theta, both, wrongTicket)
		}
	}
	// After the abort: on stable within one settle delay of the status.
	abortIdx := -1
	for i, wr := range writes {
		if !wr.at.Before(abortAt) && wr.routes.Weights.B == 0 {
			abortIdx = i
			break
		}
	}
	if abortIdx < 0 {
		t.Errorf("no write of weight 0 after the abort")
	} else {
		abort := writes[abortIdx]
		t.Logf("abort: written, accepted and settled after %v; the last canary answer to a request sent %v after the write",
			abort.applied.Sub(abort.at).Round(time.Millisecond), lastStableMiss.Sub(abort.at).Round(time.Millisecond))
		if lastStableMiss.After(abort.applied) {
			t.Errorf("a user was answered by the canary %v after the abort was applied", lastStableMiss.Sub(abort.applied))
		}
	}
	tickets := map[int32]int{}
	for _, u := range pop.users {
		tickets[check.ticket(u)]++
	}
	t.Logf("%d requests; tickets held at the end (0: none): %v", len(log), tickets)
	if check.flips > 0 {
		t.Errorf("%d answers from stable to users the canary had answered while the rollout went forward", check.flips)
	}
	if len(check.problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(check.problems, "\n"))
	}
}
