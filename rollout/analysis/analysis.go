// Package analysis judges a canary from metrics: success rate, latency, or
// any query, evaluated once per interval over a window, with explicit
// limits (failures, consecutive successes, consecutive query errors, a
// minimum request count). An [Analysis] is a rollout.HealthChecker and a
// rollout.Analyzer (gate steps), and takes the rollout's state as an
// argument through rollout.StateHealthChecker and rollout.StateAnalyzer.
//
// Where the numbers come from is a [Source]: the Prometheus one lives in the
// module github.com/upshift-dev/upshift/rollout/analysis/prometheus (so that
// importing this package adds no dependency), and fake.Metrics measures the
// fakes' own traffic. Build an Analysis from checks ([SuccessRate],
// [LatencyQuantile], or a [Check] with its own query, whose templates see
// [Vars]) and a [Policy], or from a [Spec] embedded in a CRD spec.
//
// Rules:
//   - evaluations are aligned to Policy.Interval and read again from the
//     source, never remembered: a restart computes the same verdict;
//   - only metrics from inside the rollout (or the gate step) count;
//   - no data, a source that is down or too few requests are Inconclusive:
//     they hold the canary, bounded by the strategy's progress deadline;
//   - a source that does not answer costs a reconcile at most one
//     Policy.Timeout per interval.
//
// docs/design/rollout.md has [Spec]'s rules in a CRD.
package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Kind says what a check measures, for sources that do not speak PromQL
// (fake.Metrics); a Prometheus source only runs the queries.
type Kind string

const (
	// KindSuccessRate: the share of the canary's requests that did not
	// fail (no 5xx), 0..1.
	KindSuccessRate Kind = "SuccessRate"
	// KindLatency: a quantile (Check.Quantile) of the canary's request
	// durations, in seconds.
	KindLatency Kind = "Latency"
	// KindQuery: a user's query.
	KindQuery Kind = "Query"
)

// Check is one metric judged against a range.
type Check struct {
	// Name names the check in messages.
	Name string
	// Kind is what it measures.
	Kind Kind
	// Query is a text/template of a PromQL expression that returns one
	// value, with the fields of Vars ({{.Canary.Name}}, {{.Window}}, ...)
	// and three functions for the context a value lands in: str escapes
	// it for a double-quoted PromQL string (namespace="{{str .Namespace}}",
	// PromQLString), re for a regular expression matching it exactly
	// inside a double-quoted PromQL string (pod=~"{{re .Canary.Name}}-.*",
	// PromQLRegexp), and traefik writes a name as Traefik does in its
	// metrics' labels (TraefikName). A result with several series is an
	// error; no series, or NaN, is no data.
	Query string
	// RequestsQuery, when set, is a template of the number of the
	// canary's requests in the window; fewer than Policy.MinRequests
	// makes the evaluation NoData.
	RequestsQuery string
	// Min and Max bound the values that pass (inclusive); nil is open.
	Min, Max *float64
	// Quantile is the quantile of a KindLatency check (0.99, say).
	Quantile float64
}

// ServiceRef is one side's backend as the route names it.
type ServiceRef struct {
	Namespace string
	Name      string // the Service
	Port      int32
}

// Vars are what a check's templates are rendered with.
//
// The templates are rendered with text/template, which escapes nothing: a
// value goes through the function for the context it lands in. Inside a
// double-quoted PromQL string, str escapes a label value (PromQLString) and
// re a regular expression that matches the value exactly (PromQLRegexp: the
// regular expression escaping, then the string escaping of its backslashes,
// so a route web.v2 is web\\.v2 in the query text); traefik writes a name as
// Traefik does in its labels (TraefikName: web.v2 is web-v2). The built-in
// checks do so (TraefikService).
type Vars struct {
	// Namespace and Route name the route that splits the traffic.
	Namespace, Route string
	// Canary and Stable are the backends of the canary and the stable
	// side at the time of the evaluation (they swap with each rollout).
	Canary, Stable ServiceRef
	// CanarySide is the canary's side.
	CanarySide strategy.Side
	// Window is Policy.Window in PromQL's notation ("30s").
	Window string
}

// Measurement is what a Source measured for a check at an instant.
type Measurement struct {
	// Value is the check's value; NaN or NoData when there is none.
	Value float64
	// Requests is the number of requests in the window, NaN when the check
	// has no RequestsQuery.
	Requests float64
	// NoData: the query returned no series.
	NoData bool
}

// Source measures checks. Measure evaluates q (the check's Query rendered)
// and, when set, requests (its RequestsQuery rendered) as of at.
type Source interface {
	Measure(ctx context.Context, c *Check, v Vars, q, requests string, at time.Time) (Measurement, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, c *Check, v Vars, q, requests string, at time.Time) (Measurement, error)

// Measure calls f.
func (f SourceFunc) Measure(ctx context.Context, c *Check, v Vars, q, requests string, at time.Time) (Measurement, error) {
	return f(ctx, c, v, q, requests, at)
}

// Policy is how evaluations become a verdict (see Judge).
type Policy struct {
	// Interval between two evaluations; default 10s.
	Interval time.Duration
	// Window each evaluation looks back over (a PromQL range); default
	// 3 intervals, at least 2 scrape intervals of the source.
	Window time.Duration
	// Count is the number of evaluations judged (the newest ones); default
	// FailureLimit + ConsecutiveSuccesses + ConsecutiveErrorLimit + 1.
	Count int
	// FailureLimit is the number of failed evaluations tolerated: one more
	// fails the check. Default 0: the first failure fails.
	FailureLimit int
	// ConsecutiveSuccesses is the number of passing evaluations in a row
	// for a pass; default 1.
	ConsecutiveSuccesses int
	// ConsecutiveErrorLimit is the number of query errors in a row (the
	// newest) that are set aside; one more is inconclusive. 0 is the
	// default, DefaultConsecutiveErrorLimit (2); -1 sets none aside (the
	// newest evaluation failing to query is inconclusive); n > 0 sets up
	// to n aside. Below -1 is invalid.
	ConsecutiveErrorLimit int
	// MinRequests is the least number of the canary's requests in the
	// window for a verdict (checks with a RequestsQuery); default 0.
	MinRequests float64
	// Lag is how far evaluations trail the clock, so that the source has
	// ingested what they read; default 2s.
	Lag time.Duration
	// Timeout bounds one judgement as a whole: every query that one
	// Health or Analyze call sends, for every check at every instant,
	// shares one deadline, counted on the Analysis' Clock. 0 is
	// DefaultTimeout (5s); negative is invalid. When it passes, or when
	// the source is unavailable (an error matching ErrUnavailable: the
	// server unreachable, a transport timeout), the judgement sends no
	// other query: the evaluations not yet measured are query errors, and
	// until the next evaluation instant (Interval) no judgement queries
	// the source again; a reconcile in between costs nothing.
	Timeout time.Duration
}

// Defaults of Policy.
const (
	DefaultInterval              = 10 * time.Second
	DefaultConsecutiveErrorLimit = 2
	DefaultLag                   = 2 * time.Second
	DefaultTimeout               = 5 * time.Second
)

// NoConsecutiveErrors is the Policy.ConsecutiveErrorLimit that sets no query
// error aside.
const NoConsecutiveErrors = -1

// withDefaults returns p with its defaults applied. It is the one place
// that applies them, and it is idempotent: a ConsecutiveErrorLimit of -1
// (none set aside) stays -1, never becoming 0 and then the default.
func (p Policy) withDefaults() Policy {
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	if p.Window <= 0 {
		p.Window = 3 * p.Interval
	}
	if p.ConsecutiveSuccesses <= 0 {
		p.ConsecutiveSuccesses = 1
	}
	if p.FailureLimit < 0 {
		p.FailureLimit = 0
	}
	switch {
	case p.ConsecutiveErrorLimit == 0:
		p.ConsecutiveErrorLimit = DefaultConsecutiveErrorLimit
	case p.ConsecutiveErrorLimit < 0:
		p.ConsecutiveErrorLimit = NoConsecutiveErrors
	}
	if p.Count <= 0 {
		p.Count = p.FailureLimit + p.ConsecutiveSuccesses + p.errorLimit() + 1
	}
	if p.Lag <= 0 {
		p.Lag = DefaultLag
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	return p
}

// errorLimit is the number of query errors in a row set aside, of a Policy
// with its defaults applied.
func (p Policy) errorLimit() int { return max(p.ConsecutiveErrorLimit, 0) }

// FieldError is a configuration error, naming the field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "analysis: " + e.Field + ": " + e.Reason }

// Analysis judges the canary with checks. Build it once per rollout
// object; it is safe for concurrent use.
//
// A check is evaluated at instants aligned to Policy.Interval, trailing the
// clock by Policy.Lag (the scrape and ingestion delay): at a given moment
// the evaluations are those of the last Policy.Count aligned instants. Each
// evaluation queries the metrics as they were at its instant, over a window
// of Policy.Window before it, so the evaluations of the past are read again
// from the source, not remembered: a restarted controller, or a second
// replica, computes the same verdict (successful evaluations are cached in
// memory, which changes nothing but the number of queries). Only instants
// whose window lies inside the rollout count (after State.StartedAt for
// health, after the gate step's start for a gate, both from the state
// HealthState and AnalyzeState are given), so the canary side's metrics
// from before the rollout never weigh in.
//
// The verdict of a check from its evaluations is Judge's; several checks
// combine to the worst (Fail, then Inconclusive, then Pending, then Pass).
// Query errors are set aside while the newest Policy.ConsecutiveErrorLimit
// evaluations or fewer failed to query (0 is the default, 2; -1 sets none
// aside); more in a row is inconclusive. The verdict's message names the
// newest error whenever the newest evaluations failed.
//
// A source that does not answer costs a judgement (one call: every check
// at every instant not cached) at most Policy.Timeout, and the first query
// that finds it unavailable (ErrUnavailable) ends the querying until the
// next evaluation instant (see Policy.Timeout): a Prometheus that never
// answers costs a reconcile at most one timeout per Interval, and an abort
// or another object on the same worker does not wait behind it.
type Analysis struct {
	// Source runs the queries.
	Source Source
	// Namespace and Route name the route; A and B are the backends of
	// the two sides.
	Namespace, Route string
	A, B             ServiceRef
	// Checks are run continuously while traffic moves (Health).
	Checks []Check
	// Gates are the checks of each gate step, by gate name.
	Gates map[string][]Check
	// Policy applies to every check.
	Policy Policy
	// Clock is the source of time, of the evaluation instants and of
	// the judgement's deadline (Policy.Timeout); nil is clock.Real. Give
	// it the Runner's.
	Clock clock.Clock

	mu     sync.Mutex
	cache  map[cacheKey]Result
	outage *outage // the source found unavailable, until a newer instant
}

type cacheKey struct {
	query, requests string
	at              int64
}

// Validate checks the configuration.
func (a *Analysis) Validate() error {
	if a.Source == nil {
		return &FieldError{"Source", "required"}
	}
	if len(a.Checks) == 0 && len(a.Gates) == 0 {
		return &FieldError{"Checks", "no check: set Checks or Gates"}
	}
	check := func(field string, cs []Check) error {
		for i := range cs {
			c := &cs[i]
			f := fmt.Sprintf("%s[%d]", field, i)
			if strings.TrimSpace(c.Query) == "" {
				return &FieldError{f + ".Query", "required"}
			}
			for _, q := range []string{c.Query, c.RequestsQuery} {
				if _, err := parse(q); err != nil {
					return &FieldError{f + ".Query", err.Error()}
				}
			}
			if c.Min != nil && c.Max != nil && *c.Min > *c.Max {
				return &FieldError{f + ".Min", "above Max"}
			}
			if c.Min == nil && c.Max == nil {
				return &FieldError{f + ".Max", "set Min, Max or both"}
			}
			if c.Kind == KindLatency && (c.Quantile <= 0 || c.Quantile >= 1) {
				return &FieldError{f + ".Quantile", "want 0 < quantile < 1"}
			}
		}
		return nil
	}
	if err := check("Checks", a.Checks); err != nil {
		return err
	}
	for name, cs := range a.Gates {
		if err := check("Gates["+name+"]", cs); err != nil {
			return err
		}
	}
	p := a.Policy
	switch {
	case p.Interval < 0:
		return &FieldError{"Policy.Interval", "negative"}
	case p.Window < 0:
		return &FieldError{"Policy.Window", "negative"}
	case p.Count < 0:
		return &FieldError{"Policy.Count", "negative"}
	case p.FailureLimit < 0:
		return &FieldError{"Policy.FailureLimit", "negative"}
	case p.MinRequests < 0:
		return &FieldError{"Policy.MinRequests", "negative"}
	case p.ConsecutiveErrorLimit < NoConsecutiveErrors:
		return &FieldError{"Policy.ConsecutiveErrorLimit", fmt.Sprintf("%d: want -1 (set no query error aside), 0 (the default, %d) or a positive count", p.ConsecutiveErrorLimit, DefaultConsecutiveErrorLimit)}
	case p.Lag < 0:
		return &FieldError{"Policy.Lag", "negative"}
	case p.Timeout < 0:
		return &FieldError{"Policy.Timeout", "negative"}
	}
	if d := p.withDefaults(); d.Count < d.ConsecutiveSuccesses || d.Count <= d.FailureLimit {
		return &FieldError{"Policy.Count", fmt.Sprintf("%d evaluations cannot hold %d successes in a row nor %d failures", d.Count, d.ConsecutiveSuccesses, d.FailureLimit+1)}
	}
	return nil
}

var templates sync.Map // string -> *template.Template

// funcs are the functions of a check's templates (see Check.Query).
var funcs = template.FuncMap{"re": PromQLRegexp, "str": PromQLString, "traefik": TraefikName}

func parse(text string) (*template.Template, error) {
	if t, ok := templates.Load(text); ok {
		return t.(*template.Template), nil
	}
	t, err := template.New("query").Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return nil, err
	}
	templates.Store(text, t)
	return t, nil
}

func render(text string, v *Vars) (string, error) {
	if text == "" {
		return "", nil
	}
	t, err := parse(text)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Health is HealthState with the state the context carries
// (rollout.StateFrom): rollout.HealthChecker, the compatibility path for a
// caller that puts the state in the context (rollout.WithState) rather than
// calling HealthState. Without one it is an error.
func (a *Analysis) Health(ctx context.Context) (strategy.Health, string, error) {
	s, ok := rollout.StateFrom(ctx)
	if !ok {
		return strategy.HealthUnknown, "", errors.New("analysis: no rollout state in the context (rollout.WithState)")
	}
	return a.HealthState(ctx, s)
}

// HealthState judges the Checks for the rollout in state s:
// rollout.StateHealthChecker, which the Runner calls. Pass is Healthy, Fail
// is Unhealthy (the strategy's UnhealthyThreshold and UnhealthyAction then
// apply: set the threshold to 1 to act on the analysis' own limits), and
// anything else is Inconclusive, which holds a canary that has traffic
// without aborting it: no data, a source that is down, too few requests.
// An inconclusive health does not hold for ever: the strategy counts the
// hold toward its progress deadline (see strategy.HealthInconclusive).
func (a *Analysis) HealthState(ctx context.Context, s strategy.State) (strategy.Health, string, error) {
	if len(a.Checks) == 0 || s.Phase == strategy.PhaseAborting || s.Phase.Terminal() || s.StartedAt.IsZero() {
		return strategy.HealthUnknown, "", nil
	}
	v, msg, err := a.judge(ctx, &s, a.Checks, s.StartedAt.Time, false)
	if err != nil {
		return strategy.HealthUnknown, "", err
	}
	switch v {
	case strategy.VerdictPass:
		return strategy.HealthHealthy, msg, nil
	case strategy.VerdictFail:
		return strategy.HealthUnhealthy, msg, nil
	}
	return strategy.HealthInconclusive, msg, nil
}

// Analyze is AnalyzeState with the state the context carries
// (rollout.StateFrom): rollout.Analyzer, the compatibility path for a
// caller that puts the state in the context (rollout.WithState) rather than
// calling AnalyzeState. Without one it is an error.
func (a *Analysis) Analyze(ctx context.Context, gate string) (strategy.Verdict, error) {
	s, ok := rollout.StateFrom(ctx)
	if !ok {
		return strategy.VerdictPending, errors.New("analysis: no rollout state in the context (rollout.WithState)")
	}
	return a.AnalyzeState(ctx, s, gate)
}

// AnalyzeState judges the checks of a gate for the rollout in state s:
// rollout.StateAnalyzer, which the Runner calls. A gate without checks is
// an error (a typo in a gate's name must not pass it). A verdict other
// than Pass or Fail stays Pending until Policy.Count evaluations of the
// gate are in; then no data (or a source down) is Inconclusive, which
// pauses the gate (strategy.ReasonGateInconclusive).
func (a *Analysis) AnalyzeState(ctx context.Context, s strategy.State, gate string) (strategy.Verdict, error) {
	checks, ok := a.Gates[gate]
	if !ok {
		return strategy.VerdictPending, fmt.Errorf("analysis: no checks for gate %q", gate)
	}
	since := s.StepStartedAt.Time
	if since.IsZero() {
		since = s.StartedAt.Time
	}
	v, _, err := a.judge(ctx, &s, checks, since, true)
	return v, err
}

// judge evaluates checks at the instants since since and combines their
// verdicts. For a gate, a verdict other than Pass or Fail is Pending
// until the gate has had Count evaluations. All its queries share one
// deadline (Policy.Timeout); the first that finds the source unavailable
// ends the querying (see evaluation). When the caller's ctx ends first,
// judge returns its error and no verdict.
func (a *Analysis) judge(ctx context.Context, s *strategy.State, checks []Check, since time.Time, gate bool) (strategy.Verdict, string, error) {
	p := a.Policy.withDefaults()
	clk := clock.OrReal(a.Clock)
	now := clk.Now()
	vars := a.vars(s, p)
	ats := instants(now, since, p)
	ev := a.begin(ctx, clk, p, newest(now, p))
	defer ev.end()
	verdict, msgs := strategy.VerdictPass, make([]string, 0, len(checks))
	for i := range checks {
		c := &checks[i]
		q, err := render(c.Query, &vars)
		if err != nil {
			return strategy.VerdictPending, "", &FieldError{"Query", err.Error()}
		}
		rq, err := render(c.RequestsQuery, &vars)
		if err != nil {
			return strategy.VerdictPending, "", &FieldError{"RequestsQuery", err.Error()}
		}
		rs := make([]Result, len(ats))
		for j, at := range ats {
			rs[j] = ev.evaluate(c, vars, q, rq, at)
		}
		v, why := judge(rs, p)
		if gate && len(ats) < p.Count && v != strategy.VerdictPass && v != strategy.VerdictFail {
			v, why = strategy.VerdictPending, fmt.Sprintf("%d of %d evaluations in: %s", len(ats), p.Count, why)
		}
		verdict = worse(verdict, v)
		msgs = append(msgs, fmt.Sprintf("%s %s (%s)", c.Name, v, why))
	}
	if err := ctx.Err(); err != nil {
		return strategy.VerdictPending, "", fmt.Errorf("analysis: %w", context.Cause(ctx))
	}
	return verdict, strings.Join(msgs, "; "), nil
}

// ErrUnavailable marks an error of a Source that says the source itself
// cannot answer now, whatever the query: it is unreachable, the connection
// or the transport timed out, it answered with a server error instead of a
// result. A judgement that meets one sends no other query, and none is
// sent until the next evaluation instant (see Policy.Timeout). A Source
// wraps it (fmt.Errorf("...: %w: %w", analysis.ErrUnavailable, err)); an
// error of the query itself (a bad expression, a result of several
// series) does not match it and ends nothing. The end of a judgement's own
// deadline counts as unavailable too, whatever the Source returns.
var ErrUnavailable = errors.New("metrics source unavailable")

// outage is a source found unavailable by a judgement at an evaluation
// instant: no judgement queries it again until a newer instant.
type outage struct {
	newest time.Time // the newest evaluation instant when it was found
	err    error
}

// evaluation is the querying of one judgement: one deadline for all its
// queries, and the first unavailability ends it.
type evaluation struct {
	a      *Analysis
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
	p      Policy
	newest time.Time
	down   error // the source is unavailable: send nothing
}

// errDeadline is the cause of a judgement's context when Policy.Timeout
// passes.
var errDeadline = errors.New("deadline of the judgement passed")

// begin starts the querying of a judgement whose newest evaluation
// instant is newest. A source found unavailable at the same newest instant
// is not queried at all.
func (a *Analysis) begin(ctx context.Context, clk clock.Clock, p Policy, newest time.Time) *evaluation {
	ev := &evaluation{a: a, parent: ctx, p: p, newest: newest}
	ev.ctx, ev.cancel = context.WithCancelCause(ctx)
	ev.stop = clk.AfterFunc(p.Timeout, func() { ev.cancel(errDeadline) })
	a.mu.Lock()
	if o := a.outage; o != nil && o.newest.Equal(newest) {
		ev.down = o.err
	}
	a.mu.Unlock()
	return ev
}

func (ev *evaluation) end() {
	ev.stop()
	ev.cancel(nil)
}

// newest is the newest evaluation instant at now, whether or not its
// window lies inside the rollout.
func newest(now time.Time, p Policy) time.Time { return now.Add(-p.Lag).Truncate(p.Interval) }

// evaluate measures one check at one instant: from the cache when it was
// measured before, as a query error without sending anything when the
// source is unavailable, else from the source.
func (ev *evaluation) evaluate(c *Check, v Vars, q, rq string, at time.Time) Result {
	a, p := ev.a, ev.p
	key := cacheKey{q, rq, at.UnixNano()}
	a.mu.Lock()
	r, ok := a.cache[key]
	a.mu.Unlock()
	if ok {
		// A cached result was computed with the same queries: its outcome
		// depends on the limits too.
		r.Outcome = Classify(Measurement{Value: r.Value, Requests: r.Requests}, c, p.MinRequests)
		return r
	}
	failed := func(err error) Result {
		return Result{At: at, Outcome: OutcomeError, Value: math.NaN(), Requests: math.NaN(), Err: err.Error()}
	}
	if ev.down != nil {
		return failed(fmt.Errorf("not queried: %w", ev.down))
	}
	if err := ev.parent.Err(); err != nil {
		return failed(err)
	}
	m, err := a.Source.Measure(ev.ctx, c, v, q, rq, at)
	if err != nil {
		switch {
		case ev.parent.Err() != nil:
			// The caller gave up: nothing is learnt about the source.
		case ev.ctx.Err() != nil:
			err = fmt.Errorf("%w: Policy.Timeout %v for all the queries of a judgement passed: %w", ErrUnavailable, p.Timeout, err)
			ev.unavailable(err)
		case errors.Is(err, ErrUnavailable):
			ev.unavailable(err)
		}
		return failed(err)
	}
	if m.NoData {
		m.Value = math.NaN()
	}
	if rq == "" {
		m.Requests = math.NaN()
	}
	r = Result{At: at, Outcome: Classify(m, c, p.MinRequests), Value: m.Value, Requests: m.Requests}
	a.mu.Lock()
	if a.cache == nil {
		a.cache = map[cacheKey]Result{}
	}
	a.cache[key] = r
	// Forget what no judgement reads any more.
	horizon := at.Add(-time.Duration(p.Count+1) * p.Interval).UnixNano()
	if len(a.cache) > 64 {
		for k := range a.cache {
			if k.at < horizon {
				delete(a.cache, k)
			}
		}
	}
	a.mu.Unlock()
	return r
}

// unavailable ends the querying of the judgement and remembers the outage
// until the next evaluation instant.
func (ev *evaluation) unavailable(err error) {
	ev.down = err
	ev.a.mu.Lock()
	ev.a.outage = &outage{newest: ev.newest, err: err}
	ev.a.mu.Unlock()
}

func (a *Analysis) vars(s *strategy.State, p Policy) Vars {
	canary, stable := a.B, a.A
	if s.StableSide == strategy.SideB {
		canary, stable = a.A, a.B
	}
	return Vars{Namespace: a.Namespace, Route: a.Route, Canary: canary, Stable: stable,
		CanarySide: s.StableSide.Other(), Window: promDuration(p.Window)}
}

// instants returns the evaluation instants, newest first: aligned to the
// interval, trailing now by the lag, at most Count, none whose window
// starts before since.
func instants(now, since time.Time, p Policy) []time.Time {
	last := newest(now, p)
	out := make([]time.Time, 0, p.Count)
	for k := 0; k < p.Count; k++ {
		at := last.Add(-time.Duration(k) * p.Interval)
		if at.Add(-p.Window).Before(since) {
			break
		}
		out = append(out, at)
	}
	return out
}

// promDuration writes d in PromQL's duration notation.
func promDuration(d time.Duration) string {
	if d%time.Second != 0 {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%ds", int64(d/time.Second))
}
