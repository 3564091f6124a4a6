package fake

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Users is the population of simulated clients of Traffic.SetUsers: every
// request comes from one of N users, drawn uniformly at random (so each
// user's requests per tick are about binomial), and carries the cookies
// the user's client keeps. The zero value is no population: requests
// carry no cookies. A Users is a plain value: safe for concurrent use as
// long as nobody writes it.
type Users struct {
	// N is the number of users; 0 removes the population.
	N int
	// RefuseCookies is the share of users (0..1, rounded to whole users)
	// whose client keeps no cookie: each of their requests is a new
	// session.
	RefuseCookies float64
	// Churn is the chance (0..1) that a user leaves at each tick and a
	// new one, with no cookies and refusing them with the chance
	// RefuseCookies, takes the place.
	Churn float64
	// Clock, when set, makes cookies expire: a ticket is dropped from the
	// user's client once the cookie's MaxAge has passed on it. nil: no
	// cookie expires.
	Clock *Clock
}

// Validate reports every problem with u, each naming its field and
// matching rollout.ErrInvalid.
func (u *Users) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w fake traffic: "+format, append([]any{rollout.ErrInvalid}, args...)...))
	}
	if u.N < 0 {
		bad("Users.N %d: must be 0 (no population) or more", u.N)
	}
	if !(u.RefuseCookies >= 0 && u.RefuseCookies <= 1) {
		bad("Users.RefuseCookies %v: must be a share from 0 to 1", u.RefuseCookies)
	}
	if !(u.Churn >= 0 && u.Churn <= 1) {
		bad("Users.Churn %v: must be a share from 0 to 1", u.Churn)
	}
	return errors.Join(errs...)
}

// user is one simulated client: its cookies and where its last request
// went.
type user struct {
	refuses bool
	// mark places the user among those whose requests carry the headers
	// of SetHeaderShare: they do when mark < the share.
	mark float64
	jar  []jarCookie
	// The side of the last request, the canary side then and the
	// canary's weight then ("" before any request with a canary known).
	last, lastCanary strategy.Side
	lastWeight       int32
}

type jarCookie struct {
	name, value string
	expires     time.Time // zero: never
	// The ticket the value holds, and its run.
	run    string
	ticket int32
}

// extrasModel is the part of Traffic that models the data plane's extras
// request by request. Traffic's lock guards it.
type extrasModel struct {
	rng         *rand.Rand
	opts        Users
	users       []user
	headerShare float64
	header      http.Header
	// canary is the side the extras last sent to ("" before any).
	canary strategy.Side
	regex  map[string]*regexp.Regexp

	headerMarked, headerRouted, tickets int64
	sessions, canarySessions, flips     int64

	// order and next: users send at one rate, each once per round, in an
	// order shuffled every round. wrr is the smooth weighted round robin that hands out tickets
	// (a gateway picks among a rule's backend references so), for the
	// grid wrrGrid. mirrored and copied count stable-bound requests and
	// their copies: a copy is made while copied·100 < mirrored·percent, the
	// deterministic count a mirroring proxy keeps.
	order            []int
	next             int
	queued           [2]int64 // requests waiting on each side (A, B)
	queuedCopies     [2]int64 // mirrored copies waiting behind them
	wrr              []int32
	wrrGrid          []int32
	mirrored, copied int64
}

func newExtrasModel() extrasModel { return extrasModel{rng: newRand(1)} }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// detailed reports whether a tick needs requests one by one: users, marked
// requests, or extras.
func (m *extrasModel) detailed(rt *rollout.Routes) bool {
	return len(m.users) > 0 || m.headerShare > 0 || !rt.Extras.IsZero()
}

// SetSeed restarts the random draws of Traffic with seed: which user sends
// each request, which requests carry the headers of SetHeaderShare, the
// sticky-session tickets handed out, which requests are mirrored, and the
// users that come and go. Without SetSeed the seed is 1: a Traffic draws
// the same every run.
func (t *Traffic) SetSeed(seed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.rng = newRand(seed)
}

// SetUsers replaces the population of simulated users (see Users) with u,
// every user new and without cookies. It returns u's errors (Users.Validate)
// and changes nothing then.
func (t *Traffic) SetUsers(u Users) error {
	if err := u.Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.x.opts = u
	t.x.users = make([]user, u.N)
	refuse := int(math.Round(float64(u.N) * u.RefuseCookies))
	for i := range t.x.users {
		t.x.users[i] = user{refuses: i < refuse, mark: t.x.rng.Float64()}
	}
	return nil
}

// SetHeaderShare makes share (0..1, clamped) of the requests carry the
// header fields h, as internal users or a beta group would: the true share
// a header route matching them sends to the canary, whatever any
// declared ExpectedPercent says. With users (SetUsers) it is a share of the
// users, each drawn once, whose every request carries h (a beta tester
// stays one); without, each request is drawn. A Cookie field joins the
// user's own cookies on one Cookie line. share 0 or an empty h carries
// none.
func (t *Traffic) SetHeaderShare(share float64, h http.Header) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(h) == 0 || !(share > 0) {
		share = 0
	}
	t.x.headerShare = min(share, 1)
	t.x.header = h.Clone()
}

func sideIndex(s strategy.Side) int {
	if s == strategy.SideB {
		return 1
	}
	return 0
}

func (m *extrasModel) now() time.Time {
	if m.opts.Clock == nil {
		return time.Time{}
	}
	return m.opts.Clock.Now()
}

// tickRequests sends one tick of requests one by one through the applied
// routes rt, in the order the data plane tries its rules: a header route
// (every request matching all its matches to the canary), then sticky
// sessions (a request carrying a ticket of the run follows it; any other
// gets a new ticket, drawn over the grid by the gaps, and follows it), then
// the weights for the rest. A request the weights send to the stable side
// is copied to the canary with the chance MirrorPercent. Each side serves
// the clients' requests first, within its ready capacity (ready percent of
// the tick's requests), then the copies with what is left. The caller
// holds t.mu.
func (t *Traffic) tickRequests(rt *rollout.Routes, ready [2]int64, revs [2]string, at time.Time) {
	m := &t.x
	n, w, x, canary := t.perTick, rt.Weights, rt.Extras, rt.Canary
	if canary != strategy.SideA && canary != strategy.SideB {
		x, canary = strategy.TrafficExtras{}, ""
	} else {
		m.canary = canary
	}
	var theta int32
	if canary != "" {
		theta = w.Of(canary)
	}
	now := m.now()
	m.churn()
	var sent, copies [2]int64
	mirror := float64(x.MirrorPercent) / 100
	route := func(u int, side strategy.Side) {
		sent[sideIndex(side)]++
		if mirror > 0 && side != canary {
			m.mirrored++
			if m.copied*100 < m.mirrored*int64(x.MirrorPercent) {
				m.copied++
				copies[sideIndex(canary)]++
			}
		}
		m.visit(u, side, w)
	}
	header := x.HeaderRoute != nil && len(x.HeaderRoute.Matches) > 0
	var pool []int // the users of the requests the weights split
	for range n {
		u := -1
		if len(m.users) > 0 {
			if m.next%len(m.users) == 0 || len(m.order) != len(m.users) {
				m.order = m.rng.Perm(len(m.users))
				m.next = 0
			}
			u = m.order[m.next%len(m.users)]
			m.next++
		}
		var marked bool
		switch {
		case m.headerShare <= 0:
		case u >= 0:
			marked = m.users[u].mark < m.headerShare
		default:
			marked = m.rng.Float64() < m.headerShare
		}
		if marked {
			m.headerMarked++
		}
		cookies := m.cookieLine(u, marked, now)
		switch {
		case header && m.matches(x.HeaderRoute.Matches, marked, cookies):
			m.headerRouted++
			route(u, canary)
		case x.Sticky != nil:
			ticket, ok := m.ticketIn(cookies, x.Sticky)
			if !ok {
				ticket = m.draw(x.Sticky.Grid)
				m.tickets++
				m.setCookie(u, x.Sticky, ticket, now)
			}
			side := canary.Other()
			if ticket <= theta {
				side = canary
			}
			route(u, side)
		default:
			pool = append(pool, u)
		}
	}
	// The weights' proportions, as the data plane shares requests; the
	// requests come in random user order.
	toA := int64(len(pool)) * int64(w.A) / int64(w.A+w.B)
	for j, u := range pool {
		side := strategy.SideB
		if int64(j) < toA {
			side = strategy.SideA
		}
		route(u, side)
	}
	// Each user sends once a round (rounds ticks), so a side holds its
	// share of the sessions over a round while one tick's sample of users
	// may lean one way: requests beyond a tick's ready capacity wait in the
	// side's queue, for at most a round, and are served first in the ticks
	// that follow; beyond that they are overloaded. Mirrored copies wait
	// behind the clients' requests in the same queue, and are lost beyond
	// it. Without users a tick is the whole population: no queue.
	rounds := int64(1)
	if len(m.users) > 0 && n > 0 {
		rounds = (int64(len(m.users)) + n - 1) / n
	}
	for i, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		capacity := n * ready[i] / 100
		total := sent[i] + m.queued[i]
		served := min(total, capacity)
		room := capacity * (rounds - 1)
		m.queued[i] = min(total-served, room)
		over := total - served - m.queued[i]
		t.serve(side, revs[i], served+over, served, ready[i] > 0, at)
		ctotal := copies[i] + m.queuedCopies[i]
		cserved := min(ctotal, capacity-served)
		m.queuedCopies[i] = min(ctotal-cserved, room-m.queued[i])
		t.serveCopies(side, revs[i], ctotal-m.queuedCopies[i], cserved, at)
	}
	m.snapshot(x.Sticky, theta, now)
}

// serveCopies accounts for mirrored copies sent to a side running
// revision, of which served were served: the revision answers them as any
// request (its error rate and latency), and they are recorded, but no
// client sees them.
func (t *Traffic) serveCopies(side strategy.Side, revision string, sent, served int64, at time.Time) {
	if sent == 0 {
		return
	}
	failed := t.answersOf(revision).answer(served)
	st := &t.sides[sideIndex(side)]
	st.Mirrored += sent
	st.MirrorLost += sent - served
	if t.metrics != nil {
		lat := t.answersOf(revision).latency
		t.metrics.recordN(side, at, 200, lat, served-failed)
		t.metrics.recordN(side, at, 500, lat, failed)
		t.metrics.recordN(side, at, 503, 0, sent-served)
	}
}

// churn replaces each user with a new one with the chance Users.Churn.
func (m *extrasModel) churn() {
	if m.opts.Churn <= 0 {
		return
	}
	for i := range m.users {
		if m.rng.Float64() < m.opts.Churn {
			m.users[i] = user{refuses: m.rng.Float64() < m.opts.RefuseCookies, mark: m.rng.Float64()}
		}
	}
}

// visit notes that user u's request went to side, counting a flip.
func (m *extrasModel) visit(u int, side strategy.Side, w rollout.Weights) {
	if u < 0 || m.canary == "" {
		return
	}
	us := &m.users[u]
	cw := w.Of(m.canary)
	if us.last == m.canary && us.lastCanary == m.canary && side != m.canary && cw >= us.lastWeight {
		m.flips++
	}
	us.last, us.lastCanary, us.lastWeight = side, m.canary, cw
}

// cookieLine is the Cookie header of a request of user u (-1: none):
// the marked headers' cookies, then the user's own that have not
// expired, "; "-separated, as one line.
func (m *extrasModel) cookieLine(u int, marked bool, now time.Time) string {
	var parts []string
	if marked {
		parts = append(parts, m.header.Values("Cookie")...)
	}
	if u >= 0 {
		for _, c := range m.users[u].jar {
			if c.expires.IsZero() || now.Before(c.expires) {
				parts = append(parts, c.name+"="+c.value)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// matches reports whether a request (marked: carrying the headers of
// SetHeaderShare; with the Cookie line cookies) matches every match, as a
// gateway does: Exact compares each value of the header, RegularExpression
// searches each value (unanchored, RE2), Cookie searches the Cookie line
// for the cookie at a cookie boundary.
func (m *extrasModel) matches(ms []strategy.HeaderMatch, marked bool, cookies string) bool {
	for _, hm := range ms {
		if hm.Type == strategy.HeaderCookie {
			if !m.re(cookieMatchExpr(hm.Name, hm.Value)).MatchString(cookies) {
				return false
			}
			continue
		}
		var values []string
		switch {
		case strings.EqualFold(hm.Name, "Cookie"):
			if cookies != "" {
				values = []string{cookies}
			}
		case marked:
			values = m.header.Values(hm.Name)
		}
		ok := false
		for _, v := range values {
			if hm.Type == strategy.HeaderRegularExpression {
				ok = m.re(hm.Value).MatchString(v)
			} else {
				ok = v == hm.Value
			}
			if ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// cookieMatchExpr is the regular expression (RE2, unanchored) that finds
// the cookie name=value on a Cookie header line, at cookie boundaries: the
// match a router programs for a strategy.HeaderCookie match.
func cookieMatchExpr(name, value string) string {
	return `(^|;\s*)` + regexp.QuoteMeta(name) + `=` + regexp.QuoteMeta(value) + `(;|$)`
}

// re compiles expr once. An expression that does not compile matches
// nothing (the Router refuses it before it is programmed).
func (m *extrasModel) re(expr string) *regexp.Regexp {
	if r, ok := m.regex[expr]; ok {
		return r
	}
	r, err := regexp.Compile(expr)
	if err != nil {
		r = regexp.MustCompile(`[^\x00-\x{10FFFF}]`) // matches nothing
	}
	if m.regex == nil {
		m.regex = map[string]*regexp.Regexp{}
	}
	m.regex[expr] = r
	return r
}

func cookieName(s *strategy.Sticky) string {
	if s.Cookie.CookieName == "" {
		return strategy.DefaultSessionCookie
	}
	return s.Cookie.CookieName
}

// ticketIn finds a ticket of sticky's run on the Cookie line, where the
// router's pin rules find it (name=run.T at a cookie boundary, followed by
// ";" or the end): a grid value, as the pin rules enumerate them. Another
// run's cookie, or a value off the grid, is no ticket.
func (m *extrasModel) ticketIn(cookies string, s *strategy.Sticky) (int32, bool) {
	prefix := cookieName(s) + "=" + s.Run + "."
	for i, part := range strings.Split(cookies, ";") {
		if i > 0 {
			part = strings.TrimLeft(part, " \t\n\v\f\r")
		}
		v, ok := strings.CutPrefix(part, prefix)
		if !ok || v == "" || strings.Trim(v, "0123456789") != "" {
			continue
		}
		return onGridValue(v, s.Grid)
	}
	return 0, false
}

func onGridValue(v string, grid []int32) (int32, bool) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, false
	}
	for _, g := range grid {
		if int32(n) == g {
			return g, true
		}
	}
	return 0, false
}

// draw picks a ticket as a gateway's assign rule does: grid value j with
// the weight of its gap from the value below it (the first from 0), by
// smooth weighted round robin, so every 100 new sessions get each value
// exactly its gap's times, spread out.
func (m *extrasModel) draw(grid []int32) int32 {
	if len(grid) == 0 {
		return 100
	}
	if !slices.Equal(grid, m.wrrGrid) {
		m.wrrGrid, m.wrr = slices.Clone(grid), make([]int32, len(grid))
	}
	best, prev := 0, int32(0)
	for j, g := range grid {
		m.wrr[j] += g - prev
		prev = g
		if m.wrr[j] > m.wrr[best] {
			best = j
		}
	}
	m.wrr[best] -= prev // the weights sum to the last value, 100
	return grid[best]
}

// setCookie stores the ticket in user u's client, unless it refuses
// cookies: a cookie of the same name is replaced.
func (m *extrasModel) setCookie(u int, s *strategy.Sticky, ticket int32, now time.Time) {
	if u < 0 || m.users[u].refuses {
		return
	}
	c := jarCookie{name: cookieName(s), value: s.Run + "." + strconv.Itoa(int(ticket)), run: s.Run, ticket: ticket}
	if !now.IsZero() {
		age := strategy.DefaultSessionMaxAge
		if s.Cookie.MaxAge != nil {
			age = s.Cookie.MaxAge.Duration
		}
		c.expires = now.Add(age)
	}
	us := &m.users[u]
	for i := range us.jar {
		if us.jar[i].name == c.name {
			us.jar[i] = c
			return
		}
	}
	us.jar = append(us.jar, c)
}

// snapshot counts the users holding a live ticket of sticky's run, and
// those on the canary (a ticket at most theta).
func (m *extrasModel) snapshot(s *strategy.Sticky, theta int32, now time.Time) {
	m.sessions, m.canarySessions = 0, 0
	if s == nil {
		return
	}
	name := cookieName(s)
	var onGrid [101]bool
	for _, g := range s.Grid {
		if g >= 1 && g <= 100 {
			onGrid[g] = true
		}
	}
	for i := range m.users {
		for _, c := range m.users[i].jar {
			if c.name != name || c.run != s.Run || !onGrid[c.ticket] || !(c.expires.IsZero() || now.Before(c.expires)) {
				continue
			}
			m.sessions++
			if c.ticket <= theta {
				m.canarySessions++
			}
		}
	}
}
