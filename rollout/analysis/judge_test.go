package analysis_test

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// results builds evaluations, newest first, from outcome letters:
// p pass, f fail, n no data, e error.
func results(s string) []analysis.Result {
	rs := make([]analysis.Result, len(s))
	for i, c := range s {
		r := analysis.Result{At: t0.Add(-time.Duration(i) * 10 * time.Second), Value: 0.5, Requests: 100}
		switch c {
		case 'p':
			r.Outcome, r.Value = analysis.OutcomePass, 0.99
		case 'f':
			r.Outcome = analysis.OutcomeFail
		case 'n':
			r.Outcome, r.Value = analysis.OutcomeNoData, math.NaN()
		case 'e':
			r.Outcome, r.Err = analysis.OutcomeError, "connection refused"
		}
		rs[i] = r
	}
	return rs
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rs      string
		p       analysis.Policy
		want    strategy.Verdict
		wantWhy string
	}{
		{"nothing yet", "", analysis.Policy{}, strategy.VerdictInconclusive, "no evaluation yet"},
		{"a pass", "p", analysis.Policy{}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99"},
		{"no data never passes", "nnnn", analysis.Policy{}, strategy.VerdictInconclusive, "no data (or too few requests) at the last evaluation"},
		{"no data after passes", "np", analysis.Policy{}, strategy.VerdictInconclusive, "no data (or too few requests) at the last evaluation"},
		{"a fail, limit 0", "fppp", analysis.Policy{}, strategy.VerdictFail, "1 of 4 evaluations failed (limit 0): 0.5"},
		{"an old fail still counts", "pppf", analysis.Policy{}, strategy.VerdictFail, "1 of 4 evaluations failed (limit 0): 0.5"},
		{"a fail within the limit, then passes", "ppf", analysis.Policy{FailureLimit: 1}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99"},
		{"a fail within the limit, newest", "fpp", analysis.Policy{FailureLimit: 1}, strategy.VerdictPending, "the last evaluation failed at 0.5 (1 failed, limit 1)"},
		{"the limit exceeded", "fpf", analysis.Policy{FailureLimit: 1}, strategy.VerdictFail, "2 of 3 evaluations failed (limit 1): 0.5, 0.5"},
		{"consecutive successes needed", "ppnp", analysis.Policy{ConsecutiveSuccesses: 3}, strategy.VerdictPending, "waiting for more evaluations that pass"},
		{"consecutive successes reached", "pppn", analysis.Policy{ConsecutiveSuccesses: 3}, strategy.VerdictPass, "3 evaluations in a row passed, the last at 0.99"},
		{"errors within the limit are set aside", "eep", analysis.Policy{}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99; the newest 2 queries failed, set aside (ConsecutiveErrorLimit 2): connection refused"},
		{"errors beyond the limit", "eeep", analysis.Policy{}, strategy.VerdictInconclusive, "3 queries in a row failed (ConsecutiveErrorLimit 2): connection refused"},
		{"errors beyond the limit hide an old pass, not a fail", "eeef", analysis.Policy{}, strategy.VerdictInconclusive, "3 queries in a row failed (ConsecutiveErrorLimit 2): connection refused"},
		{"no error set aside (-1)", "ep", analysis.Policy{ConsecutiveErrorLimit: -1}, strategy.VerdictInconclusive, "1 queries in a row failed (ConsecutiveErrorLimit -1): connection refused"},
		{"below -1 is -1 (Validate refuses it)", "ep", analysis.Policy{ConsecutiveErrorLimit: -5}, strategy.VerdictInconclusive, "1 queries in a row failed (ConsecutiveErrorLimit -1): connection refused"},
		{"limit 1", "ep", analysis.Policy{ConsecutiveErrorLimit: 1}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99; the newest 1 queries failed, set aside (ConsecutiveErrorLimit 1): connection refused"},
		{"the default limit (0) is 2", "eep", analysis.Policy{ConsecutiveErrorLimit: 0}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99; the newest 2 queries failed, set aside (ConsecutiveErrorLimit 2): connection refused"},
		{"errors set aside before no data", "en", analysis.Policy{}, strategy.VerdictInconclusive, "no data (or too few requests) at the last evaluation; the newest 1 queries failed, set aside (ConsecutiveErrorLimit 2): connection refused"},
		{"old errors are set aside", "pep", analysis.Policy{ConsecutiveErrorLimit: -1}, strategy.VerdictPass, "1 evaluations in a row passed, the last at 0.99"},
		{"all errors, within the limit: the error is named", "eeeeee", analysis.Policy{ConsecutiveErrorLimit: 10}, strategy.VerdictInconclusive, "no evaluation with data: 6 queries failed, set aside (ConsecutiveErrorLimit 10): connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := analysis.Judge(results(tc.rs), tc.p)
			if got != tc.want || why != tc.wantWhy {
				t.Errorf("Judge(%q) = %s (%s), want %s (%s)", tc.rs, got, why, tc.want, tc.wantWhy)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	lo, hi := 0.95, 0.3
	rate := analysis.Check{Query: "q", RequestsQuery: "r", Min: &lo}
	latency := analysis.Check{Query: "q", Max: &hi}
	for _, tc := range []struct {
		name string
		m    analysis.Measurement
		c    *analysis.Check
		min  float64
		want analysis.Outcome
	}{
		{"above min", analysis.Measurement{Value: 0.99, Requests: 50}, &rate, 10, analysis.OutcomePass},
		{"at min", analysis.Measurement{Value: 0.95, Requests: 50}, &rate, 10, analysis.OutcomePass},
		{"below min", analysis.Measurement{Value: 0.9, Requests: 50}, &rate, 10, analysis.OutcomeFail},
		{"too few requests", analysis.Measurement{Value: 0.5, Requests: 9}, &rate, 10, analysis.OutcomeNoData},
		{"requests unknown", analysis.Measurement{Value: 0.99, Requests: math.NaN()}, &rate, 0, analysis.OutcomeNoData},
		{"NaN", analysis.Measurement{Value: math.NaN(), Requests: 50}, &rate, 0, analysis.OutcomeNoData},
		{"no series", analysis.Measurement{NoData: true}, &latency, 0, analysis.OutcomeNoData},
		{"+Inf", analysis.Measurement{Value: math.Inf(1)}, &latency, 0, analysis.OutcomeNoData},
		{"below max", analysis.Measurement{Value: 0.1}, &latency, 0, analysis.OutcomePass},
		{"above max", analysis.Measurement{Value: 0.31}, &latency, 0, analysis.OutcomeFail},
		{"no requests query: not counted", analysis.Measurement{Value: 0.1, Requests: 0}, &latency, 100, analysis.OutcomePass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := analysis.Classify(tc.m, tc.c, tc.min); got != tc.want {
				t.Errorf("Classify = %s, want %s", got, tc.want)
			}
		})
	}
}

func genResults(t *rapid.T) []analysis.Result {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) analysis.Result {
		o := rapid.SampledFrom([]analysis.Outcome{analysis.OutcomePass, analysis.OutcomeFail, analysis.OutcomeNoData, analysis.OutcomeError}).Draw(t, "outcome")
		return analysis.Result{Outcome: o, Value: rapid.Float64Range(0, 1).Draw(t, "value"), Requests: 10}
	}), 0, 12).Draw(t, "results")
}

func genPolicy(t *rapid.T) analysis.Policy {
	return analysis.Policy{
		FailureLimit:          rapid.IntRange(0, 4).Draw(t, "failureLimit"),
		ConsecutiveSuccesses:  rapid.IntRange(0, 4).Draw(t, "consecutiveSuccesses"),
		ConsecutiveErrorLimit: rapid.IntRange(-1, 4).Draw(t, "consecutiveErrorLimit"),
	}
}

// TestJudgeProperties: a verdict is never Pass without data (as many
// passing evaluations in a row as required, none of them an error or
// without data); never Fail before more than FailureLimit evaluations
// failed; and equal inputs give equal verdicts.
func TestJudgeProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs, p := genResults(t), genPolicy(t)
		v, why := analysis.Judge(rs, p)
		need := max(p.ConsecutiveSuccesses, 1)
		var kept []analysis.Result
		fails := 0
		for _, r := range rs {
			if r.Outcome != analysis.OutcomeError {
				kept = append(kept, r)
			}
			if r.Outcome == analysis.OutcomeFail {
				fails++
			}
		}
		switch v {
		case strategy.VerdictPass:
			if len(kept) < need {
				t.Fatalf("Pass on %d evaluations with data, %d needed: %v", len(kept), need, rs)
			}
			for _, r := range kept[:need] {
				if r.Outcome != analysis.OutcomePass {
					t.Fatalf("Pass with %s among the newest %d: %v", r.Outcome, need, rs)
				}
			}
			if fails > p.FailureLimit {
				t.Fatalf("Pass with %d failures, limit %d", fails, p.FailureLimit)
			}
		case strategy.VerdictFail:
			if fails <= p.FailureLimit {
				t.Fatalf("Fail with %d failures, limit %d: %v", fails, p.FailureLimit, rs)
			}
		}
		if fails > p.FailureLimit && v != strategy.VerdictFail && v != strategy.VerdictInconclusive {
			t.Fatalf("%d failures over the limit %d, verdict %s", fails, p.FailureLimit, v)
		}
		again := append([]analysis.Result(nil), rs...)
		if v2, why2 := analysis.Judge(again, p); v2 != v || why2 != why {
			t.Fatalf("equal inputs, different verdicts: %s (%s), then %s (%s)", v, why, v2, why2)
		}
	})
}
