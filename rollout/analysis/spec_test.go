package analysis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/rollout/analysis"
)

// specJSON is a Spec as a user writes it in a CRD, every field set.
const specJSON = `{
  "prometheus": {"address": "http://prometheus.monitoring:9090"},
  "checks": [
    {"name": "success", "successRate": {"min": "0.99"}},
    {"name": "p99", "latency": {"quantile": "0.99", "max": "300ms"}},
    {"name": "restarts", "query": {"query": "sum(increase(restarts_total{pod=~\"{{re .Canary.Name}}-.*\"}[{{.Window}}]))", "requestsQuery": "sum(x)", "min": "-1", "max": "0"}}
  ],
  "gates": [{"name": "smoke", "checks": [{"name": "success", "successRate": {"min": "0.999"}}]}],
  "policy": {"interval": "15s", "window": "1m30s", "count": 5, "failureLimit": 1, "consecutiveSuccesses": 2,
    "consecutiveErrorLimit": -1, "minRequests": 20, "lag": "3s", "timeout": "4s"}
}`

func dec(s string) *analysis.Decimal { d := analysis.Decimal(s); return &d }

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// fullSpec is specJSON decoded.
func fullSpec() analysis.Spec {
	return analysis.Spec{
		Prometheus: &analysis.PrometheusSpec{Address: "http://prometheus.monitoring:9090"},
		Checks: []analysis.CheckSpec{
			{Name: "success", SuccessRate: &analysis.SuccessRateSpec{Min: "0.99"}},
			{Name: "p99", Latency: &analysis.LatencySpec{Quantile: "0.99", Max: dur(300 * time.Millisecond)}},
			{Name: "restarts", Query: &analysis.QuerySpec{Query: `sum(increase(restarts_total{pod=~"{{re .Canary.Name}}-.*"}[{{.Window}}]))`,
				RequestsQuery: "sum(x)", Min: dec("-1"), Max: dec("0")}},
		},
		Gates: []analysis.GateSpec{{Name: "smoke", Checks: []analysis.CheckSpec{{Name: "success", SuccessRate: &analysis.SuccessRateSpec{Min: "0.999"}}}}},
		Policy: analysis.PolicySpec{Interval: dur(15 * time.Second), Window: dur(90 * time.Second), Count: 5, FailureLimit: 1,
			ConsecutiveSuccesses: 2, ConsecutiveErrorLimit: -1, MinRequests: 20, Lag: dur(3 * time.Second), Timeout: dur(4 * time.Second)},
	}
}

// TestSpecJSON: the JSON a user writes decodes to the Spec, which encodes
// back to the same JSON (durations as "1m30s", thresholds as the strings
// written, nothing added), and is valid.
func TestSpecJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want analysis.Spec
	}{
		{"every field", specJSON, fullSpec()},
		{"one check, defaults", `{"checks":[{"name":"ok","successRate":{"min":"1"}}]}`,
			analysis.Spec{Checks: []analysis.CheckSpec{{Name: "ok", SuccessRate: &analysis.SuccessRateSpec{Min: "1"}}}}},
		{"gates only, a max", `{"gates":[{"name":"g","checks":[{"name":"q","query":{"query":"up","max":"1e3"}}]}]}`,
			analysis.Spec{Gates: []analysis.GateSpec{{Name: "g", Checks: []analysis.CheckSpec{{Name: "q", Query: &analysis.QuerySpec{Query: "up", Max: dec("1e3")}}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got analysis.Spec
			if err := json.Unmarshal([]byte(tc.json), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate = %v", err)
			}
			raw, err := json.Marshal(&got)
			if err != nil {
				t.Fatal(err)
			}
			var want, back any
			if err := json.Unmarshal([]byte(tc.json), &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, back); d != "" {
				t.Errorf("encoded %s (-want +got):\n%s", raw, d)
			}
			// DeepCopy copies everything and shares nothing.
			cp := got.DeepCopy()
			if d := cmp.Diff(&got, cp); d != "" {
				t.Errorf("DeepCopy (-want +got):\n%s", d)
			}
			if len(cp.Checks) > 0 {
				cp.Checks[0].Name = "changed"
				if got.Checks[0].Name == "changed" {
					t.Error("DeepCopy shares the checks")
				}
			}
		})
	}
}

// TestSpecValidate: each problem is reported with the path of its field
// as the JSON names it, all at once.
func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*analysis.Spec)
		paths []string
	}{
		{"valid", func(*analysis.Spec) {}, nil},
		{"nothing declared", func(s *analysis.Spec) { s.Checks, s.Gates = nil, nil }, []string{"checks"}},
		{"no address", func(s *analysis.Spec) { s.Prometheus.Address = "" }, []string{"prometheus.address"}},
		{"address not http", func(s *analysis.Spec) { s.Prometheus.Address = "ftp://p:9090" }, []string{"prometheus.address"}},
		{"address with a query", func(s *analysis.Spec) { s.Prometheus.Address = "http://p:9090/?x=1" }, []string{"prometheus.address"}},
		{"address with a bad port", func(s *analysis.Spec) { s.Prometheus.Address = "http://p:port" }, []string{"prometheus.address"}},
		{"no name", func(s *analysis.Spec) { s.Checks[1].Name = "" }, []string{"checks[1].name"}},
		{"name too long", func(s *analysis.Spec) { s.Checks[1].Name = strings.Repeat("n", 64) }, []string{"checks[1].name"}},
		{"duplicate name", func(s *analysis.Spec) { s.Checks[2].Name = "success" }, []string{"checks[2].name"}},
		{"no kind", func(s *analysis.Spec) { s.Checks[0].SuccessRate = nil }, []string{"checks[0]"}},
		{"two kinds", func(s *analysis.Spec) { s.Checks[0].Latency = s.Checks[1].Latency }, []string{"checks[0]"}},
		{"rate above 1", func(s *analysis.Spec) { s.Checks[0].SuccessRate.Min = "1.01" }, []string{"checks[0].successRate.min"}},
		{"rate not a number", func(s *analysis.Spec) { s.Checks[0].SuccessRate.Min = "99%" }, []string{"checks[0].successRate.min"}},
		{"rate empty", func(s *analysis.Spec) { s.Checks[0].SuccessRate.Min = "" }, []string{"checks[0].successRate.min"}},
		{"rate NaN", func(s *analysis.Spec) { s.Checks[0].SuccessRate.Min = "NaN" }, []string{"checks[0].successRate.min"}},
		{"quantile 1", func(s *analysis.Spec) { s.Checks[1].Latency.Quantile = "1" }, []string{"checks[1].latency.quantile"}},
		{"latency 0", func(s *analysis.Spec) { s.Checks[1].Latency.Max = dur(0) }, []string{"checks[1].latency.max"}},
		{"no query", func(s *analysis.Spec) { s.Checks[2].Query.Query = "" }, []string{"checks[2].query.query"}},
		{"bad template", func(s *analysis.Spec) { s.Checks[2].Query.Query = "{{.Canary" }, []string{"checks[2].query.query"}},
		{"bad requests template", func(s *analysis.Spec) { s.Checks[2].Query.RequestsQuery = "{{end}}" }, []string{"checks[2].query.requestsQuery"}},
		{"no range", func(s *analysis.Spec) { s.Checks[2].Query.Min, s.Checks[2].Query.Max = nil, nil }, []string{"checks[2].query.max"}},
		{"min above max", func(s *analysis.Spec) { s.Checks[2].Query.Min = dec("2") }, []string{"checks[2].query.min"}},
		{"max out of range", func(s *analysis.Spec) { s.Checks[2].Query.Max = dec("1e400") }, []string{"checks[2].query.max"}},
		{"too many checks", func(s *analysis.Spec) {
			for i := range 15 {
				s.Checks = append(s.Checks, analysis.CheckSpec{Name: fmt.Sprint("c", i), SuccessRate: &analysis.SuccessRateSpec{Min: "0.5"}})
			}
		}, []string{"checks"}},
		{"gate without name", func(s *analysis.Spec) { s.Gates[0].Name = "" }, []string{"gates[0].name"}},
		{"duplicate gate", func(s *analysis.Spec) { s.Gates = append(s.Gates, s.Gates[0]) }, []string{"gates[1].name"}},
		{"gate without checks", func(s *analysis.Spec) { s.Gates[0].Checks = nil }, []string{"gates[0].checks"}},
		{"bad gate check", func(s *analysis.Spec) { s.Gates[0].Checks[0].SuccessRate.Min = "-0.5" }, []string{"gates[0].checks[0].successRate.min"}},
		{"negative interval", func(s *analysis.Spec) { s.Policy.Interval = dur(-time.Second) }, []string{"policy.interval"}},
		{"negative durations", func(s *analysis.Spec) {
			s.Policy.Window, s.Policy.Lag, s.Policy.Timeout = dur(-1), dur(-1), dur(-1)
		}, []string{"policy.window", "policy.lag", "policy.timeout"}},
		{"error limit -2", func(s *analysis.Spec) { s.Policy.ConsecutiveErrorLimit = -2 }, []string{"policy.consecutiveErrorLimit"}},
		{"negative counts", func(s *analysis.Spec) {
			s.Policy.Count, s.Policy.FailureLimit, s.Policy.ConsecutiveSuccesses, s.Policy.MinRequests = -1, -1, -1, -1
		}, []string{"policy.count", "policy.failureLimit", "policy.consecutiveSuccesses", "policy.minRequests"}},
		{"count too small", func(s *analysis.Spec) { s.Policy.Count, s.Policy.FailureLimit = 2, 2 }, []string{"policy.count"}},
		{"several", func(s *analysis.Spec) {
			s.Checks[0].SuccessRate.Min = "2"
			s.Gates[0].Name = ""
			s.Policy.Lag = dur(-1)
		}, []string{"checks[0].successRate.min", "gates[0].name", "policy.lag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fullSpec()
			tc.edit(&s)
			err := s.Validate()
			if tc.paths == nil {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			var inv *analysis.InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, analysis.ErrInvalid) {
				t.Fatalf("Validate = %v, want an *InvalidError", err)
			}
			var got []string
			for _, e := range inv.Errors {
				got = append(got, e.Field)
			}
			if d := cmp.Diff(tc.paths, got); d != "" {
				t.Errorf("paths (-want +got):\n%s\n%v", d, err)
			}
			if _, berr := s.Build(nopSource, analysis.Target{}); !errors.Is(berr, analysis.ErrInvalid) {
				t.Errorf("Build = %v, want the spec refused", berr)
			}
		})
	}
}

var nopSource = analysis.SourceFunc(func(context.Context, *analysis.Check, analysis.Vars, string, string, time.Time) (analysis.Measurement, error) {
	return analysis.Measurement{}, nil
})

func TestBuildWithoutSource(t *testing.T) {
	s := fullSpec()
	var fe *analysis.FieldError
	if _, err := s.Build(nil, analysis.Target{}); !errors.As(err, &fe) || fe.Field != "Source" || !errors.Is(err, analysis.ErrInvalid) {
		t.Fatalf("Build(nil) = %v, want a FieldError naming Source", err)
	}
}

func TestDecimal(t *testing.T) {
	for _, tc := range []struct {
		d    analysis.Decimal
		want float64
		ok   bool
	}{
		{"0.99", 0.99, true}, {"1", 1, true}, {"-1", -1, true}, {"+.5", 0.5, true}, {"1.", 1, true}, {"2.5e-3", 0.0025, true},
		{"", 0, false}, {"NaN", 0, false}, {"Inf", 0, false}, {"1e400", 0, false}, {"0x1p3", 0, false}, {"1_000", 0, false},
		{" 1", 0, false}, {"99%", 0, false}, {analysis.Decimal("0." + strings.Repeat("9", 31)), 0, false},
	} {
		got, err := tc.d.Float()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Decimal(%q).Float() = %v, %v; want %v (ok %v)", tc.d, got, err, tc.want, tc.ok)
		}
	}
	for _, f := range []float64{0, 0.99, -3, 1e-7, 123456789.125} {
		if got, err := analysis.DecimalOf(f).Float(); err != nil || got != f {
			t.Errorf("DecimalOf(%v) reads back as %v, %v", f, got, err)
		}
	}
}

// checkModel is a check drawn by the property test: what it is, as the
// built-in constructors take it.
type checkModel struct {
	name     string
	kind     int // 0 success rate, 1 latency, 2 query
	min, max *float64
	quantile float64
	latency  time.Duration
	query    string
	requests string
}

func drawFloat(t *rapid.T, label string, lo, hi float64) float64 {
	// Values a person writes: a few decimals.
	return math.Round(rapid.Float64Range(lo, hi).Draw(t, label)*1e4) / 1e4
}

func drawChecks(t *rapid.T, label string, min int) []checkModel {
	n := rapid.IntRange(min, 4).Draw(t, label+".n")
	out := make([]checkModel, n)
	for i := range out {
		c := checkModel{name: fmt.Sprintf("%s-%d", label, i), kind: rapid.IntRange(0, 2).Draw(t, label+".kind")}
		switch c.kind {
		case 0:
			m := drawFloat(t, "min", 0, 1)
			c.min = &m
		case 1:
			c.quantile = drawFloat(t, "quantile", 0.0001, 0.9999)
			c.latency = time.Duration(rapid.Int64Range(1, 10_000).Draw(t, "ms")) * time.Millisecond
		case 2:
			c.query = rapid.SampledFrom([]string{"up", `sum(rate(x{ns="{{str .Namespace}}"}[{{.Window}}]))`, "vector(1)"}).Draw(t, "query")
			c.requests = rapid.SampledFrom([]string{"", "sum(y)"}).Draw(t, "requests")
			lo := drawFloat(t, "lo", -1000, 1000)
			hi := lo + drawFloat(t, "span", 0, 1000)
			switch rapid.IntRange(0, 2).Draw(t, "bounds") {
			case 0:
				c.min = &lo
			case 1:
				c.max = &hi
			default:
				c.min, c.max = &lo, &hi
			}
		}
		out[i] = c
	}
	return out
}

// spec writes the model as a spec, with DecimalOf.
func (c checkModel) spec() analysis.CheckSpec {
	cs := analysis.CheckSpec{Name: c.name}
	opt := func(f *float64) *analysis.Decimal {
		if f == nil {
			return nil
		}
		d := analysis.DecimalOf(*f)
		return &d
	}
	switch c.kind {
	case 0:
		cs.SuccessRate = &analysis.SuccessRateSpec{Min: analysis.DecimalOf(*c.min)}
	case 1:
		cs.Latency = &analysis.LatencySpec{Quantile: analysis.DecimalOf(c.quantile), Max: dur(c.latency)}
	case 2:
		cs.Query = &analysis.QuerySpec{Query: c.query, RequestsQuery: c.requests, Min: opt(c.min), Max: opt(c.max)}
	}
	return cs
}

// check builds the model by hand, with the package's constructors.
func (c checkModel) check() analysis.Check {
	var out analysis.Check
	switch c.kind {
	case 0:
		out = analysis.SuccessRate(*c.min)
	case 1:
		out = analysis.LatencyQuantile(c.quantile, c.latency)
	case 2:
		out = analysis.Check{Kind: analysis.KindQuery, Query: c.query, RequestsQuery: c.requests, Min: c.min, Max: c.max}
	}
	out.Name = c.name
	return out
}

// TestBuildProperty: for random valid specs, Build returns the Analysis
// built by hand from the same numbers with the package's constructors,
// and the spec survives a JSON round trip unchanged.
func TestBuildProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checks := drawChecks(t, "check", 0)
		ngates := rapid.IntRange(0, 3).Draw(t, "gates")
		if len(checks) == 0 && ngates == 0 {
			ngates = 1
		}
		spec := analysis.Spec{}
		want := &analysis.Analysis{Source: nopSource, Namespace: "shop", Route: "web",
			A: analysis.ServiceRef{Namespace: "shop", Name: "web-a", Port: 80}, B: analysis.ServiceRef{Namespace: "shop", Name: "web-b"}}
		for _, c := range checks {
			spec.Checks = append(spec.Checks, c.spec())
			want.Checks = append(want.Checks, c.check())
		}
		for g := range ngates {
			name := fmt.Sprintf("gate-%d", g)
			gs := analysis.GateSpec{Name: name}
			if want.Gates == nil {
				want.Gates = map[string][]analysis.Check{}
			}
			for _, c := range drawChecks(t, name, 1) {
				gs.Checks = append(gs.Checks, c.spec())
				want.Gates[name] = append(want.Gates[name], c.check())
			}
			spec.Gates = append(spec.Gates, gs)
		}
		p := analysis.Policy{
			Interval:              time.Duration(rapid.Int64Range(0, 120).Draw(t, "interval")) * time.Second,
			Window:                time.Duration(rapid.Int64Range(0, 600).Draw(t, "window")) * time.Second,
			FailureLimit:          rapid.IntRange(0, 5).Draw(t, "failureLimit"),
			ConsecutiveSuccesses:  rapid.IntRange(0, 5).Draw(t, "consecutiveSuccesses"),
			ConsecutiveErrorLimit: rapid.IntRange(-1, 5).Draw(t, "consecutiveErrorLimit"),
			MinRequests:           float64(rapid.IntRange(0, 1000).Draw(t, "minRequests")),
			Lag:                   time.Duration(rapid.Int64Range(0, 10_000).Draw(t, "lag")) * time.Millisecond,
			Timeout:               time.Duration(rapid.Int64Range(0, 10_000).Draw(t, "timeout")) * time.Millisecond,
		}
		if rapid.Bool().Draw(t, "count") { // else the default
			p.Count = max(p.FailureLimit+1, p.ConsecutiveSuccesses, 1) + rapid.IntRange(0, 5).Draw(t, "extra")
		}
		want.Policy = p
		spec.Policy = analysis.PolicySpec{Interval: dur(p.Interval), Window: dur(p.Window), Count: int32(p.Count),
			FailureLimit: int32(p.FailureLimit), ConsecutiveSuccesses: int32(p.ConsecutiveSuccesses),
			ConsecutiveErrorLimit: int32(p.ConsecutiveErrorLimit), MinRequests: int64(p.MinRequests), Lag: dur(p.Lag), Timeout: dur(p.Timeout)}

		// Through JSON, as the API server stores it.
		raw, err := json.Marshal(&spec)
		if err != nil {
			t.Fatal(err)
		}
		var decoded analysis.Spec
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(spec, decoded, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("JSON round trip of %s (-want +got):\n%s", raw, d)
		}
		got, err := decoded.Build(nopSource, analysis.Target{Namespace: "shop", Route: "web", A: want.A, B: want.B})
		if err != nil {
			t.Fatalf("Build(%s) = %v", raw, err)
		}
		if err := want.Validate(); err != nil {
			t.Fatalf("the hand-built Analysis is invalid: %v", err)
		}
		if d := cmp.Diff(want, got, cmpopts.IgnoreUnexported(analysis.Analysis{}), cmpopts.IgnoreFields(analysis.Analysis{}, "Source")); d != "" {
			t.Fatalf("Build(%s) (-want +got):\n%s", raw, d)
		}
	})
}

// FuzzSpecJSON: whatever JSON decodes into a Spec, Validate and Build
// never panic, agree (Build succeeds exactly when Validate passes), and a
// valid spec builds a valid Analysis that survives a JSON round trip.
func FuzzSpecJSON(f *testing.F) {
	f.Add([]byte(specJSON))
	for _, s := range []string{`{}`, `null`, `{"checks":[{"name":"a","successRate":{"min":"2"}}]}`,
		`{"checks":[{"name":"a","latency":{"quantile":"0.5","max":"-1s"}}]}`,
		`{"gates":[{"name":"g","checks":[{"name":"q","query":{"query":"{{.X","min":"1"}}]}]}`,
		`{"checks":[{"name":"q","query":{"query":"up","min":"3","max":"1"}}],"policy":{"count":1,"failureLimit":4}}`,
		`{"prometheus":{"address":"http://[::1]:9090"},"checks":[{"name":"q","query":{"query":"up","max":"1"}}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s analysis.Spec
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		verr := s.Validate()
		var inv *analysis.InvalidError
		if verr != nil && (!errors.As(verr, &inv) || len(inv.Errors) == 0) {
			t.Fatalf("Validate = %v, want an *InvalidError listing problems", verr)
		}
		for _, e := range errorsOf(inv) {
			if e.Field == "" || strings.ContainsAny(e.Field, " ") {
				t.Fatalf("a problem without a field path: %v", e)
			}
		}
		a, berr := s.Build(nopSource, analysis.Target{Namespace: "ns", Route: "r"})
		switch {
		case verr != nil && berr == nil:
			t.Fatalf("Validate = %v but Build succeeded", verr)
		case verr == nil && berr != nil:
			t.Fatalf("Validate passed but Build = %v", berr)
		case verr != nil:
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("Build returned an invalid Analysis: %v", err)
		}
		raw, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		var back analysis.Spec
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(s, back, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("JSON round trip (-want +got):\n%s", d)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("valid before the round trip, not after: %v", err)
		}
	})
}

func errorsOf(e *analysis.InvalidError) field.ErrorList {
	if e == nil {
		return nil
	}
	return e.Errors
}
