package fake

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// MetricsRetention is how far back Metrics keeps requests: those recorded
// more than this before the newest one are forgotten.
const MetricsRetention = 10 * time.Minute

// Metrics is an analysis.Source over requests recorded per side: what a
// metrics backend would scrape from the data plane. Record adds requests
// (Traffic.RecordTo records every simulated one); Measure answers a check
// for the canary side that its Vars name, over the window they name:
//
//   - analysis.KindSuccessRate: the share of the requests answered with a
//     status below 500;
//   - analysis.KindLatency: the check's Quantile of the request durations,
//     in seconds (nearest rank);
//   - analysis.KindQuery (or no Kind): the value SetQuery gives for the
//     rendered query, whatever the requests; an unknown query has no data.
//
// A success rate or latency over a window without requests has no data
// (NoData, Value NaN), as a ratio over no requests has none in PromQL. The requests in the window are
// counted when the check has a RequestsQuery (Requests is NaN otherwise).
// SetLag delays what a Measure sees (a scrape and ingestion lag); SetDown
// makes every Measure fail (a backend that is down). An analysis.Analysis
// over a Metrics judges the simulated canary as it would a real one.
//
// Requests with the same side, instant, status and duration are kept as
// one entry with a count, so recording many of them (a Traffic tick's)
// stays cheap.
// Safe for concurrent use; the zero value is not usable: use NewMetrics.
type Metrics struct {
	mu      sync.Mutex
	clock   *Clock
	lag     time.Duration
	down    error
	sides   map[strategy.Side][]metricEntry // in time order
	newest  time.Time
	queries map[string]func(at time.Time) (float64, bool)
	records int // entries added since the last trim
}

// metricEntry is count requests to one side at one instant with one status
// and duration.
type metricEntry struct {
	at      time.Time
	status  int
	latency time.Duration
	count   int64
}

var _ analysis.Source = (*Metrics)(nil)

// NewMetrics returns metrics without any request. clock tells what is
// visible now under SetLag; nil measures as if the clock read the instant
// asked for.
func NewMetrics(clock *Clock) *Metrics {
	return &Metrics{clock: clock, sides: map[strategy.Side][]metricEntry{}, queries: map[string]func(time.Time) (float64, bool){}}
}

// Record adds one request to side at the instant at, answered with status
// after latency.
func (m *Metrics) Record(side strategy.Side, at time.Time, status int, latency time.Duration) {
	m.recordN(side, at, status, latency, 1)
}

// recordN adds n requests alike to side (nothing for n <= 0): a tick of
// Traffic records its requests in a few calls.
func (m *Metrics) recordN(side strategy.Side, at time.Time, status int, latency time.Duration, n int64) {
	if n <= 0 {
		return
	}
	side = canonical(side)
	m.mu.Lock()
	defer m.mu.Unlock()
	es := m.sides[side]
	// Insert after every entry at or before at, merging into an equal one
	// at the same instant.
	i := sort.Search(len(es), func(i int) bool { return es[i].at.After(at) })
	for j := i - 1; j >= 0 && es[j].at.Equal(at); j-- {
		if es[j].status == status && es[j].latency == latency {
			es[j].count += n
			return
		}
	}
	es = slices.Insert(es, i, metricEntry{at: at, status: status, latency: latency, count: n})
	m.sides[side] = es
	if at.After(m.newest) {
		m.newest = at
	}
	if m.records++; m.records >= 1024 {
		m.trim()
	}
}

// trim forgets the entries older than MetricsRetention before the newest.
func (m *Metrics) trim() {
	m.records = 0
	horizon := m.newest.Add(-MetricsRetention)
	for side, es := range m.sides {
		i := sort.Search(len(es), func(i int) bool { return !es[i].at.Before(horizon) })
		if i > 0 {
			m.sides[side] = slices.Clone(es[i:])
		}
	}
}

// SetQuery gives the values of the checks whose rendered query is query
// (analysis.KindQuery): f returns the value as of an instant, or false for
// no data. A nil f forgets the query.
func (m *Metrics) SetQuery(query string, f func(at time.Time) (float64, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f == nil {
		delete(m.queries, query)
		return
	}
	m.queries[query] = f
}

// SetDown makes every Measure fail with err, as a metrics backend that is
// down; nil brings it back.
func (m *Metrics) SetDown(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = err
}

// SetLag makes a request visible d after the instant it was recorded at
// (on the clock), as the scrape interval and ingestion delay a metrics
// backend has: a Measure sees the requests recorded at or before both the
// instant it asks for and the clock's time minus d.
func (m *Metrics) SetLag(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lag = max(d, 0)
}

// Measure measures c for the canary side v names, over the window v.Window
// that ends at at: analysis.Source.
func (m *Metrics) Measure(ctx context.Context, c *analysis.Check, v analysis.Vars, q, requests string, at time.Time) (analysis.Measurement, error) {
	if err := ctx.Err(); err != nil {
		return analysis.Measurement{}, err
	}
	window, err := parsePromDuration(v.Window)
	if err != nil {
		return analysis.Measurement{}, fmt.Errorf("fake metrics: window: %w", err)
	}
	if window <= 0 {
		return analysis.Measurement{}, fmt.Errorf("fake metrics: window %q: want a positive duration", v.Window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down != nil {
		return analysis.Measurement{}, m.down
	}
	now := at
	if m.clock != nil {
		now = m.clock.Now()
	}
	until := at
	if visible := now.Add(-m.lag); visible.Before(until) {
		until = visible
	}
	from := at.Add(-window) // exclusive
	es := m.sides[canonical(v.CanarySide)]
	lo := sort.Search(len(es), func(i int) bool { return es[i].at.After(from) })
	hi := sort.Search(len(es), func(i int) bool { return es[i].at.After(until) })
	if hi < lo {
		hi = lo
	}
	in := es[lo:hi]
	var n int64
	for _, e := range in {
		n += e.count
	}
	meas := analysis.Measurement{Value: math.NaN(), Requests: math.NaN()}
	if requests != "" {
		meas.Requests = float64(n)
	}
	switch c.Kind {
	case analysis.KindSuccessRate:
		if n == 0 {
			break
		}
		var ok int64
		for _, e := range in {
			if e.status < 500 {
				ok += e.count
			}
		}
		meas.Value = float64(ok) / float64(n)
	case analysis.KindLatency:
		if n == 0 {
			break
		}
		if c.Quantile <= 0 || c.Quantile >= 1 {
			return analysis.Measurement{}, fmt.Errorf("fake metrics: check %q: quantile %v: want 0 < quantile < 1", c.Name, c.Quantile)
		}
		meas.Value = quantile(in, n, c.Quantile).Seconds()
	case analysis.KindQuery, "":
		if f, ok := m.queries[q]; ok {
			if val, ok := f(at); ok {
				meas.Value = val
			}
		}
	default:
		return analysis.Measurement{}, fmt.Errorf("fake metrics: check %q: unknown kind %q", c.Name, c.Kind)
	}
	meas.NoData = math.IsNaN(meas.Value)
	return meas, nil
}

// quantile is the q quantile of the durations of es, which hold n
// requests, by nearest rank: the smallest duration that at least q of the
// requests do not exceed.
func quantile(es []metricEntry, n int64, q float64) time.Duration {
	sorted := slices.Clone(es)
	slices.SortFunc(sorted, func(a, b metricEntry) int {
		switch {
		case a.latency < b.latency:
			return -1
		case a.latency > b.latency:
			return 1
		}
		return 0
	})
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for _, e := range sorted {
		seen += e.count
		if seen >= rank {
			return e.latency
		}
	}
	return sorted[len(sorted)-1].latency
}

// canonical maps the zero Side to SideA, as strategy.Side does.
func canonical(s strategy.Side) strategy.Side {
	if s == strategy.SideB {
		return strategy.SideB
	}
	return strategy.SideA
}

// parsePromDuration parses a duration in PromQL's notation, as
// analysis.Vars.Window holds it: one or more of a whole number and a unit,
// largest unit first, among ms, s, m, h, d (24h), w (7d) and y (365d):
// "30s", "500ms", "1m30s".
func parsePromDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	units := []struct {
		name string
		d    time.Duration
	}{
		{"y", 365 * 24 * time.Hour}, {"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour},
		{"h", time.Hour}, {"ms", time.Millisecond}, {"m", time.Minute}, {"s", time.Second},
	}
	order := map[string]int{"y": 0, "w": 1, "d": 2, "h": 3, "m": 4, "s": 5, "ms": 6}
	var total time.Duration
	last := -1
	for rest := s; rest != ""; {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("duration %q: want a number before each unit", s)
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		rest = rest[i:]
		unit := ""
		for _, u := range units {
			if len(rest) >= len(u.name) && rest[:len(u.name)] == u.name {
				// "m" is a prefix of "ms": units are tried with ms first.
				unit = u.name
				if n > int64(math.MaxInt64/u.d) || total > math.MaxInt64-time.Duration(n)*u.d {
					return 0, fmt.Errorf("duration %q: out of range", s)
				}
				total += time.Duration(n) * u.d
				break
			}
		}
		if unit == "" {
			return 0, fmt.Errorf("duration %q: unknown unit (want ms, s, m, h, d, w or y)", s)
		}
		if order[unit] <= last {
			return 0, fmt.Errorf("duration %q: units must go from the largest to the smallest, each once", s)
		}
		last = order[unit]
		rest = rest[len(unit):]
	}
	return total, nil
}
