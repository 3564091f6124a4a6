// Package prometheus is the analysis.Source of a Prometheus server: it runs
// a check's queries as instant queries through Prometheus' HTTP API
// (/api/v1/query), at the instant of each evaluation.
//
// It is a module of its own, github.com/upshift-dev/upshift/rollout/analysis/prometheus,
// so that upshift's root module does not require Prometheus' client library:
// an operator that imports strategy, rollout or fake keeps its own versions.
//
// A check's query must return one value: a scalar, or a vector of one
// sample (aggregate with sum, say). An empty vector, NaN (a ratio over no
// requests) and ±Inf are no data; several samples, a range vector or a
// string are errors, as are the failures of the query itself (Prometheus
// unreachable or answering an error, a bad PromQL expression, a timeout).
// Prometheus' warnings are ignored.
//
// An error that says Prometheus itself cannot answer, whatever the query,
// matches analysis.ErrUnavailable: a transport error (connection refused, a
// reset, a timeout, Source.Timeout or the caller's deadline passing) and an
// HTTP error status without an answer of the API (a 5xx or 4xx from
// Prometheus or a proxy in front of it, such as 503 while it starts). An
// Analysis then sends no other query of that judgement, nor any before the
// next evaluation instant. An error the API answered about the query (bad
// data, an execution error, Prometheus' own query timeout) and a result of
// the wrong shape do not match it.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/upshift-dev/upshift/rollout/analysis"
)

// DefaultTimeout is the time a query may take when Source.Timeout is not
// set.
const DefaultTimeout = 5 * time.Second

// Source runs checks against a Prometheus server's HTTP API. It is safe for
// concurrent use.
type Source struct {
	// API is the client of the server's HTTP API (New makes one).
	API v1.API
	// Timeout bounds each query; 0 is DefaultTimeout. A deadline of the
	// caller's context that comes sooner applies (an Analysis gives all
	// the queries of one judgement one deadline: analysis.Policy.Timeout).
	Timeout time.Duration
}

var _ analysis.Source = (*Source)(nil)

// New returns a Source for the Prometheus server at address, an http or
// https URL ("http://prometheus.monitoring:9090", with a path prefix when
// the server has one). rt carries the requests (authentication, TLS); nil
// is the client library's default transport. An invalid address is an
// *analysis.FieldError naming "address".
func New(address string, rt http.RoundTripper) (*Source, error) {
	if err := validAddress(address); err != nil {
		return nil, err
	}
	c, err := api.NewClient(api.Config{Address: address, RoundTripper: rt})
	if err != nil {
		return nil, &analysis.FieldError{Field: "address", Reason: err.Error()}
	}
	return &Source{API: v1.NewAPI(c)}, nil
}

func validAddress(address string) error {
	bad := func(reason string) error {
		return &analysis.FieldError{Field: "address", Reason: fmt.Sprintf("%q: %s", address, reason)}
	}
	if address == "" {
		return &analysis.FieldError{Field: "address", Reason: "required (the Prometheus server's URL, http://host:port)"}
	}
	u, err := url.Parse(address)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // without the address again
		}
		return bad(err.Error())
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("want an http or https URL (http://host:port)")
	}
	if u.Host == "" {
		return bad("no host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return bad("want no query or fragment")
	}
	return nil
}

// Measure runs q as an instant query at at and, when requests is set, the
// requests query likewise (an empty result is 0 requests: no request is a
// count of zero, which Policy.MinRequests makes no data). Without a
// requests query, Measurement.Requests is NaN.
func (s *Source) Measure(ctx context.Context, _ *analysis.Check, _ analysis.Vars, q, requests string, at time.Time) (analysis.Measurement, error) {
	v, empty, err := s.query(ctx, q, at)
	if err != nil {
		return analysis.Measurement{}, err
	}
	m := analysis.Measurement{Value: v, Requests: math.NaN(), NoData: empty || math.IsNaN(v)}
	if m.NoData {
		m.Value = math.NaN()
	}
	if requests != "" {
		n, empty, err := s.query(ctx, requests, at)
		if err != nil {
			return analysis.Measurement{}, err
		}
		if empty {
			n = 0
		}
		m.Requests = n
	}
	return m, nil
}

// unavailable reports whether err, from the API client, says that the
// server cannot answer whatever the query: a transport error (the client
// returns those as they are), or an HTTP error status that carried no
// answer of the API (ErrServer, ErrClient).
func unavailable(err error) bool {
	var apiErr *v1.Error
	if !errors.As(err, &apiErr) {
		return true
	}
	return apiErr.Type == v1.ErrServer || apiErr.Type == v1.ErrClient
}

// query runs q at at and returns its one value (NaN for NaN or ±Inf), or
// true when the result is empty.
func (s *Source) query(ctx context.Context, q string, at time.Time) (float64, bool, error) {
	if s.API == nil {
		return 0, false, fmt.Errorf("prometheus: query %q: no API client (use New)", q)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, _, err := s.API.Query(ctx, q, at)
	if err != nil {
		if unavailable(err) {
			return 0, false, fmt.Errorf("prometheus: query %q: %w: %w", q, analysis.ErrUnavailable, err)
		}
		return 0, false, fmt.Errorf("prometheus: query %q: %w", q, err)
	}
	var v model.SampleValue
	switch r := res.(type) {
	case model.Vector:
		switch len(r) {
		case 0:
			return math.NaN(), true, nil
		case 1:
			v = r[0].Value
		default:
			return 0, false, fmt.Errorf("prometheus: query %q returned %d series, want one value: aggregate them (sum(...), say)", q, len(r))
		}
	case *model.Scalar:
		v = r.Value
	case nil:
		return 0, false, fmt.Errorf("prometheus: query %q returned no result", q)
	default:
		return 0, false, fmt.Errorf("prometheus: query %q returned a %s, want a vector of one sample or a scalar", q, res.Type())
	}
	f := float64(v)
	if math.IsInf(f, 0) {
		f = math.NaN()
	}
	return f, false, nil
}
