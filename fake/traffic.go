package fake

import (
	"math"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Traffic simulates load on the two sides. Each Tick sends PerTick requests,
// split by the weights the Router's data plane has applied (or, with no
// Router, by ready capacity, as a Service spreads requests over ready pods).
// A side serves at most its ready capacity: Ready percent of PerTick.
// Requests beyond it are Overloaded when the side has some ready capacity
// and Dropped when it has none. PeakCapacity is the largest sum of the two
// sides' provisioned capacities seen at a tick.
//
// Each revision answers the requests its side serves: SetErrorRate makes a
// share of them fail with a 500 (Failed counts them; they are Served
// too), SetLatency sets how long they take. RecordTo records every request
// a side receives into a Metrics, as a data plane's metrics would count
// it: an overloaded or dropped request as a 503.
//
// With a Router that programs extras (SetRoutes), Traffic does what the
// data plane does with them, request by request: see SetUsers,
// SetHeaderShare and SetSeed, and the fields of TrafficStats that count
// them. As a gateway does, it hands out tickets by smooth weighted round
// robin and mirrors by a deterministic count. Users send once a round, in
// an order shuffled every round; a tick's sample of them may lean to one
// side, so with users a side queues what a tick's ready capacity cannot
// serve, for at most a round, before it counts as overloaded.
//
// Build it with the fakes it reads; the zero value is not usable. Safe for
// concurrent use.
type Traffic struct {
	mu      sync.Mutex
	router  *Router
	a, b    func() rollout.CapacityStatus // nil: fixed capacity, always ready
	revA    func() string                 // the revision a side runs; nil: ""
	revB    func() string
	perTick int64
	metrics *Metrics
	answers map[string]*answers // by revision

	ticks        int64
	served       int64
	overloaded   int64
	dropped      int64
	failed       int64
	peakCapacity int32

	sides [2]SideTraffic // A, B
	x     extrasModel
}

// answers is how one revision answers: the share that fails, the
// duration of each request, and the requests it served and failed so far
// (failures are spread evenly: after n served, floor(n * rate) failed).
type answers struct {
	errorRate      float64
	latency        time.Duration
	served, failed int64
}

// TrafficStats are the counts so far. Failed counts the requests served
// with a 500 (SetErrorRate), which Served counts too. Served, Overloaded,
// Dropped and Failed count the clients' requests only: a mirrored copy is
// counted in the side's SideTraffic. It is a plain value; the zero value
// counts nothing.
type TrafficStats struct {
	Ticks, Served, Overloaded, Dropped int64
	Failed                             int64
	PeakCapacity                       int32

	// A and B count what each physical side received (with no route, the
	// requests no side received are not counted in either).
	A, B SideTraffic
	// HeaderMarked counts the requests that carried the headers of
	// SetHeaderShare; HeaderRouted the requests a header route sent to the
	// canary (whether marked or not: a route may match other requests).
	HeaderMarked, HeaderRouted int64
	// Tickets counts the sticky-session tickets handed out: one per
	// request that carried no ticket of the run the data plane applies.
	Tickets int64
	// Sessions is, at the last tick, the number of users (SetUsers)
	// holding a ticket of the run the data plane applies, and
	// CanarySessions those whose ticket sends them to the canary (a
	// ticket at most the canary's weight). Both are 0 without sticky
	// sessions or users.
	Sessions, CanarySessions int64
	// Flips counts the requests of a user that went to the stable side
	// while the user's previous request went to the canary, and the
	// canary's weight was not lower than then: what sticky sessions
	// prevent. It needs users, and a canary side (the one the extras
	// last sent to).
	Flips int64
}

// SideTraffic counts what one side received. It is a plain value; the zero
// value counts nothing.
type SideTraffic struct {
	// The clients' requests sent to the side: served, overloaded or
	// dropped.
	Requests int64
	// The mirrored copies sent to the side (their answers reach no
	// client), and those it could not serve: beyond its ready capacity,
	// after the clients' requests, or with nothing ready.
	Mirrored, MirrorLost int64
}

// Of returns the counts of a physical side (side A for any value but B).
func (s TrafficStats) Of(side strategy.Side) SideTraffic {
	if side == strategy.SideB {
		return s.B
	}
	return s.A
}

// SessionShare is CanarySessions in percent of Sessions; 0 without
// sessions.
func (s TrafficStats) SessionShare() float64 {
	if s.Sessions == 0 {
		return 0
	}
	return 100 * float64(s.CanarySessions) / float64(s.Sessions)
}

// NewTraffic simulates perTick requests per tick against router (nil: no
// router, traffic follows ready capacity) and the two sides (nil: fixed
// capacity, always 100 percent ready).
func NewTraffic(router *Router, a, b *Capacity, perTick int64) *Traffic {
	t := &Traffic{router: router, perTick: perTick, answers: map[string]*answers{}, x: newExtrasModel()}
	if a != nil {
		t.a, t.revA = a.Status, func() string { return a.RevisionStatus().Revision }
	}
	if b != nil {
		t.b, t.revB = b.Status, func() string { return b.RevisionStatus().Revision }
	}
	return t
}

// NewFixedTraffic simulates perTick requests per tick against router
// and two sides of the fixed capacity mode that run revisions (nil: always
// 100 percent ready): a side serves at most its ready share, which a
// deploy lowers while its replicas restart.
func NewFixedTraffic(router *Router, a, b *FixedSide, perTick int64) *Traffic {
	t := &Traffic{router: router, perTick: perTick, answers: map[string]*answers{}, x: newExtrasModel()}
	if a != nil {
		t.a, t.revA = a.Status, func() string { return a.RevisionStatus().Revision }
	}
	if b != nil {
		t.b, t.revB = b.Status, func() string { return b.RevisionStatus().Revision }
	}
	return t
}

// SetErrorRate makes the sides running revision answer that share (0..1,
// clamped) of the requests they serve with a 500, spread evenly over the
// ticks. A side that runs no revision the fakes know runs "".
func (t *Traffic) SetErrorRate(revision string, rate float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answersOf(revision).errorRate = min(max(rate, 0), 1)
}

// SetLatency sets the duration of every request the sides running
// revision serve (0 until set), as RecordTo records it.
func (t *Traffic) SetLatency(revision string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answersOf(revision).latency = d
}

// RecordTo records the requests of every later Tick into m, at the time of
// m's clock (the zero time without one), on the side they were sent to:
// a 200 or a 500 when served, a 503 when overloaded or dropped. Requests
// that no route sends to a side are not recorded. nil stops recording.
func (t *Traffic) RecordTo(m *Metrics) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.metrics = m
}

func (t *Traffic) answersOf(revision string) *answers {
	a, ok := t.answers[revision]
	if !ok {
		a = &answers{}
		t.answers[revision] = a
	}
	return a
}

// answer accounts for served more requests answered, and returns how many
// of them failed.
func (a *answers) answer(served int64) (failed int64) {
	failed = int64(math.Floor(float64(a.served+served)*a.errorRate+1e-9)) - a.failed // 1e-9: 0.29 * 100 is 29
	failed = min(max(failed, 0), served)
	a.served += served
	a.failed += failed
	return failed
}

func sideRevision(rev func() string) string {
	if rev == nil {
		return ""
	}
	return rev()
}

// serve accounts for sent requests to a side running revision, of which
// served were served (the rest were overloaded, or dropped when the side
// had nothing ready), and records them.
func (t *Traffic) serve(side strategy.Side, revision string, sent, served int64, ready bool, at time.Time) {
	ans := t.answersOf(revision)
	failed := ans.answer(served)
	t.served += served
	t.failed += failed
	if ready {
		t.overloaded += sent - served
	} else {
		t.dropped += sent - served
	}
	t.sides[sideIndex(side)].Requests += sent
	if t.metrics != nil {
		t.metrics.recordN(side, at, 200, ans.latency, served-failed)
		t.metrics.recordN(side, at, 500, ans.latency, failed)
		t.metrics.recordN(side, at, 503, 0, sent-served)
	}
}

func sideState(status func() rollout.CapacityStatus) (capacity, ready int64) {
	if status == nil {
		return 100, 100
	}
	s := status()
	return int64(s.Capacity), int64(s.Ready)
}

// Tick sends one tick of requests.
func (t *Traffic) Tick() {
	capA, readyA := sideState(t.a)
	capB, readyB := sideState(t.b)
	revA, revB := sideRevision(t.revA), sideRevision(t.revB)
	t.mu.Lock()
	defer t.mu.Unlock()
	var at time.Time
	if t.metrics != nil && t.metrics.clock != nil {
		at = t.metrics.clock.Now()
	}
	t.ticks++
	if p := int32(capA + capB); p > t.peakCapacity {
		t.peakCapacity = p
	}
	n := t.perTick
	if t.router == nil {
		// A Service spreads requests over the ready pods of both sides;
		// beyond their ready capacity, requests are overloaded.
		if readyA+readyB == 0 {
			t.dropped += n // nothing ready anywhere: no side receives them
			return
		}
		served := min(n, n*(readyA+readyB)/100)
		servedA, overA := served*readyA/(readyA+readyB), (n-served)*readyA/(readyA+readyB)
		t.serve(strategy.SideA, revA, servedA+overA, servedA, true, at)
		t.serve(strategy.SideB, revB, n-servedA-overA, served-servedA, true, at)
		return
	}
	rt := t.router.AppliedRoutes()
	w := rt.Weights
	t.x.sessions, t.x.canarySessions = 0, 0
	if w.A+w.B <= 0 {
		t.dropped += n // no route: nothing reaches either side
		return
	}
	if t.x.detailed(&rt) {
		t.tickRequests(&rt, [2]int64{readyA, readyB}, [2]string{revA, revB}, at)
		return
	}
	toA := n * int64(w.A) / int64(w.A+w.B) // requests follow the weights' proportions
	t.serve(strategy.SideA, revA, toA, min(toA, n*readyA/100), readyA > 0, at)
	t.serve(strategy.SideB, revB, n-toA, min(n-toA, n*readyB/100), readyB > 0, at)
}

// Stats returns the counts so far.
func (t *Traffic) Stats() TrafficStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TrafficStats{Ticks: t.ticks, Served: t.served, Overloaded: t.overloaded, Dropped: t.dropped, Failed: t.failed, PeakCapacity: t.peakCapacity,
		A: t.sides[0], B: t.sides[1], HeaderMarked: t.x.headerMarked, HeaderRouted: t.x.headerRouted, Tickets: t.x.tickets,
		Sessions: t.x.sessions, CanarySessions: t.x.canarySessions, Flips: t.x.flips}
}
