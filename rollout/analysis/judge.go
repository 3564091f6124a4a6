package analysis

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/upshift-dev/upshift/strategy"
)

// Outcome is what one evaluation of a check at one instant found.
type Outcome string

const (
	// OutcomePass: the value is within the check's range, on enough
	// requests.
	OutcomePass Outcome = "Pass"
	// OutcomeFail: the value is outside the check's range, on enough
	// requests.
	OutcomeFail Outcome = "Fail"
	// OutcomeNoData: the query returned nothing (no series, NaN: a ratio
	// over no requests), or fewer requests than Policy.MinRequests. Never
	// a pass.
	OutcomeNoData Outcome = "NoData"
	// OutcomeError: the query failed (the metrics source is down, a
	// timeout, a bad query).
	OutcomeError Outcome = "Error"
)

// Result is one evaluation of a check at one instant.
type Result struct {
	At       time.Time
	Outcome  Outcome
	Value    float64 // the check's value (NaN when there is none)
	Requests float64 // the requests in the window (NaN when not measured)
	Err      string  // the query's error, for OutcomeError
}

// Classify turns a measurement into the outcome of an evaluation: NoData
// without a value or below minRequests requests (when the check measures
// them), else Pass when the value is within [min, max] (nil bounds are
// open), else Fail.
func Classify(m Measurement, c *Check, minRequests float64) Outcome {
	if m.NoData || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
		return OutcomeNoData
	}
	if c.RequestsQuery != "" && (math.IsNaN(m.Requests) || m.Requests < minRequests) {
		return OutcomeNoData
	}
	if (c.Min != nil && m.Value < *c.Min) || (c.Max != nil && m.Value > *c.Max) {
		return OutcomeFail
	}
	return OutcomePass
}

// Judge returns the verdict of one check from its evaluations, newest
// first, under p, with the reason. It is a pure function of its inputs:
//
//  1. Errors: while the newest ConsecutiveErrorLimit evaluations or fewer
//     in a row failed to query, those are set aside (a query that fails now
//     and then changes nothing); more in a row than that makes the verdict
//     Inconclusive, whatever came before. With ConsecutiveErrorLimit -1 no
//     error is set aside: the newest evaluation failing to query is
//     Inconclusive.
//  2. Fail when more than FailureLimit of the remaining evaluations failed.
//  3. Pass when the newest ConsecutiveSuccesses remaining evaluations all
//     passed.
//  4. Otherwise Inconclusive when the newest remaining evaluation has no
//     data (or there is none), and Pending (not decided yet: too few passes
//     in a row, or a failure within the limit) else.
//
// So a verdict is never Pass without ConsecutiveSuccesses evaluations that
// had data, and never Fail before more than FailureLimit evaluations failed.
// Whenever the newest evaluations failed to query, the reason names the
// newest error.
func Judge(rs []Result, p Policy) (strategy.Verdict, string) {
	return judge(rs, p.withDefaults())
}

// judge is Judge under a Policy whose defaults are applied.
func judge(rs []Result, p Policy) (strategy.Verdict, string) {
	errs := 0
	for errs < len(rs) && rs[errs].Outcome == OutcomeError {
		errs++
	}
	if limit := p.errorLimit(); errs > limit {
		return strategy.VerdictInconclusive, fmt.Sprintf("%d queries in a row failed (ConsecutiveErrorLimit %d): %s", errs, p.ConsecutiveErrorLimit, rs[0].Err)
	}
	// aside says which errors were set aside, for the reasons below.
	aside := ""
	if errs > 0 {
		aside = fmt.Sprintf("; the newest %d queries failed, set aside (ConsecutiveErrorLimit %d): %s", errs, p.ConsecutiveErrorLimit, rs[0].Err)
	}
	kept := make([]Result, 0, len(rs))
	for _, r := range rs {
		if r.Outcome != OutcomeError {
			kept = append(kept, r)
		}
	}
	var failed []string
	for _, r := range kept {
		if r.Outcome == OutcomeFail {
			failed = append(failed, formatValue(r.Value))
		}
	}
	if len(failed) > p.FailureLimit {
		return strategy.VerdictFail, fmt.Sprintf("%d of %d evaluations failed (limit %d): %s",
			len(failed), len(kept), p.FailureLimit, strings.Join(failed, ", ")) + aside
	}
	if len(kept) >= p.ConsecutiveSuccesses {
		pass := true
		for _, r := range kept[:p.ConsecutiveSuccesses] {
			pass = pass && r.Outcome == OutcomePass
		}
		if pass {
			return strategy.VerdictPass, fmt.Sprintf("%d evaluations in a row passed, the last at %s", p.ConsecutiveSuccesses, formatValue(kept[0].Value)) + aside
		}
	}
	if len(kept) == 0 {
		if errs > 0 {
			return strategy.VerdictInconclusive, fmt.Sprintf("no evaluation with data: %d queries failed, set aside (ConsecutiveErrorLimit %d): %s", errs, p.ConsecutiveErrorLimit, rs[0].Err)
		}
		return strategy.VerdictInconclusive, "no evaluation yet"
	}
	if kept[0].Outcome == OutcomeNoData {
		return strategy.VerdictInconclusive, "no data (or too few requests) at the last evaluation" + aside
	}
	if kept[0].Outcome == OutcomeFail {
		return strategy.VerdictPending, fmt.Sprintf("the last evaluation failed at %s (%d failed, limit %d)", formatValue(kept[0].Value), len(failed), p.FailureLimit) + aside
	}
	return strategy.VerdictPending, "waiting for more evaluations that pass" + aside
}

func formatValue(v float64) string { return fmt.Sprintf("%.4g", v) }

// worse combines the verdicts of several checks: Fail over Inconclusive
// over Pending over Pass.
func worse(a, b strategy.Verdict) strategy.Verdict {
	rank := func(v strategy.Verdict) int {
		switch v {
		case strategy.VerdictFail:
			return 3
		case strategy.VerdictInconclusive:
			return 2
		case strategy.VerdictPending:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}
