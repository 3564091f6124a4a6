package prometheus_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// q is a query with characters that the form encoding must carry intact.
const q = `sum(rate(http_requests_total{service=~"web-b-[0-9]+",code!~"5.."}[30s])) / sum(rate(http_requests_total{service=~"web-b-[0-9]+"}[30s])) + 0 * count(up{job="a&b"})`

func newSource(t *testing.T, url string) *prometheus.Source {
	t.Helper()
	s, err := prometheus.New(url, nil)
	if err != nil {
		t.Fatalf("New(%q): %v", url, err)
	}
	return s
}

func TestMeasure(t *testing.T) {
	const nan = "NaN" // want no data
	for _, tc := range []struct {
		name   string
		reply  reply
		closed bool // the server is down
		want   string
		// wantErr are substrings of the error (with the query, always);
		// wantType is the API error's type, when there is one.
		wantErr  []string
		wantType v1.ErrorType
	}{
		{name: "one sample", reply: vector("0.97"), want: "0.97"},
		{name: "empty vector is no data", reply: vector(), want: nan},
		{name: "scalar", reply: scalar("0.5"), want: "0.5"},
		{name: "zero", reply: vector("0"), want: "0"},
		{name: "NaN is no data", reply: vector("NaN"), want: nan},
		{name: "NaN scalar is no data", reply: scalar("NaN"), want: nan},
		{name: "+Inf is no data", reply: vector("+Inf"), want: nan},
		{name: "-Inf is no data", reply: vector("-Inf"), want: nan},
		{name: "warnings are ignored", reply: reply{body: `{"status":"success","warnings":["PromQL info: metric might not be a counter"],"data":{"resultType":"vector","result":[{"metric":{},"value":[$T,"0.9"]}]}}`}, want: "0.9"},
		{name: "two samples", reply: vector("0.9", "0.8"), wantErr: []string{"2 series", "sum"}},
		{name: "matrix", reply: reply{body: `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[$T,"1"]]}]}}`}, wantErr: []string{"matrix"}},
		{name: "string", reply: reply{body: `{"status":"success","data":{"resultType":"string","result":[$T,"x"]}}`}, wantErr: []string{"string"}},
		{name: "bad PromQL", reply: apiError(http.StatusBadRequest, "bad_data", `1:5: parse error: unexpected "}"`), wantErr: []string{"bad_data", "parse error"}, wantType: v1.ErrBadData},
		{name: "execution error", reply: apiError(http.StatusUnprocessableEntity, "execution", "query processing would load too many samples"), wantErr: []string{"too many samples"}, wantType: v1.ErrExec},
		{name: "503", reply: reply{status: http.StatusServiceUnavailable, body: "Service Unavailable"}, wantErr: []string{"503"}, wantType: v1.ErrServer},
		{name: "not JSON", reply: reply{body: "<html>"}, wantErr: []string{"prometheus: query"}, wantType: v1.ErrBadResponse},
		{name: "connection refused", closed: true, wantErr: []string{"connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newPromServer(t, func(string, time.Time) reply { return tc.reply })
			src := newSource(t, srv.URL)
			if tc.closed {
				srv.Close()
			}
			c := analysis.SuccessRate(0.95)
			m, err := src.Measure(context.Background(), &c, analysis.Vars{}, q, "", t0)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Measure = %+v, want an error", m)
				}
				for _, s := range append(tc.wantErr, strconv.Quote(q)) {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %s", err, s)
					}
				}
				var apiErr *v1.Error
				if tc.wantType != "" && (!errors.As(err, &apiErr) || apiErr.Type != tc.wantType) {
					t.Errorf("error %v does not wrap a %s API error", err, tc.wantType)
				}
				if tc.closed && !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("error %v does not wrap ECONNREFUSED", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Measure: %v", err)
			}
			if !math.IsNaN(m.Requests) {
				t.Errorf("Requests = %v without a requests query, want NaN", m.Requests)
			}
			if tc.want == nan {
				if !m.NoData || !math.IsNaN(m.Value) {
					t.Errorf("Measure = %+v, want no data (and a NaN value)", m)
				}
			} else if w, _ := strconv.ParseFloat(tc.want, 64); m.NoData || m.Value != w {
				t.Errorf("Measure = %+v, want %v", m, w)
			}
			// One instant query: the query verbatim, at the instant.
			rs := srv.received()
			if len(rs) != 1 {
				t.Fatalf("%d requests, want 1: %+v", len(rs), rs)
			}
			if rs[0].query != q {
				t.Errorf("query sent\n got %s\nwant %s", rs[0].query, q)
			}
			if at := parseTime(t, rs[0].time); !at.Equal(t0) {
				t.Errorf("time sent %s (%v), want %v", rs[0].time, at, t0)
			}
		})
	}
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("time parameter %q: %v", s, err)
	}
	whole, frac := math.Modf(secs)
	return time.Unix(int64(whole), int64(math.Round(frac*1e6))*1e3).UTC()
}

// TestMeasureTime: the instant is sent with its fraction of a second.
func TestMeasureTime(t *testing.T) {
	srv := newPromServer(t, func(string, time.Time) reply { return vector("1") })
	at := t0.Add(2500 * time.Millisecond)
	if _, err := newSource(t, srv.URL).Measure(context.Background(), &analysis.Check{}, analysis.Vars{}, "up", "", at); err != nil {
		t.Fatal(err)
	}
	if rs := srv.received(); len(rs) != 1 || !parseTime(t, rs[0].time).Equal(at) {
		t.Fatalf("requests %+v, want one at %v", rs, at)
	}
}

func TestMeasureRequests(t *testing.T) {
	const rq = `sum(increase(http_requests_total{service=~"web-b-[0-9]+"}[30s]))`
	for _, tc := range []struct {
		name     string
		requests reply
		want     float64 // NaN: NaN
		wantErr  bool
	}{
		{name: "count", requests: vector("100"), want: 100},
		{name: "scalar", requests: scalar("7"), want: 7},
		{name: "empty is no requests", requests: vector(), want: 0},
		{name: "NaN", requests: vector("NaN"), want: math.NaN()},
		{name: "error", requests: apiError(http.StatusBadRequest, "bad_data", "parse error"), wantErr: true},
		{name: "several series", requests: vector("1", "2", "3"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newPromServer(t, func(query string, _ time.Time) reply {
				if query == rq {
					return tc.requests
				}
				return vector("0.99")
			})
			c := analysis.SuccessRate(0.95)
			m, err := newSource(t, srv.URL).Measure(context.Background(), &c, analysis.Vars{}, q, rq, t0)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), strconv.Quote(rq)) {
					t.Fatalf("Measure = %+v, %v; want an error naming the requests query", m, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Value != 0.99 || m.NoData {
				t.Errorf("Measure = %+v, want the value 0.99", m)
			}
			if got := m.Requests; got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
				t.Errorf("Requests = %v, want %v", got, tc.want)
			}
			rs := srv.received()
			if len(rs) != 2 || rs[0].query != q || rs[1].query != rq {
				t.Fatalf("requests %+v: want the query, then the requests query", rs)
			}
			for _, r := range rs {
				if !parseTime(t, r.time).Equal(t0) {
					t.Errorf("%s sent at %s, want %v", r.query, r.time, t0)
				}
			}
		})
	}
}

// TestMeasureNoDataStillCountsRequests: a value without data does not
// skip the requests query.
func TestMeasureNoDataStillCountsRequests(t *testing.T) {
	srv := newPromServer(t, func(query string, _ time.Time) reply {
		if strings.HasPrefix(query, "count") {
			return vector()
		}
		return vector("NaN")
	})
	m, err := newSource(t, srv.URL).Measure(context.Background(), &analysis.Check{}, analysis.Vars{}, "ratio", "count", t0)
	if err != nil || !m.NoData || m.Requests != 0 {
		t.Fatalf("Measure = %+v, %v; want no data over 0 requests", m, err)
	}
}

func TestMeasureTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newPromServer(t, func(string, time.Time) reply {
		<-release
		return vector("1")
	})
	defer close(release) // before the server closes: it waits for the handler
	src := newSource(t, srv.URL)
	src.Timeout = 50 * time.Millisecond
	start := time.Now()
	_, err := src.Measure(context.Background(), &analysis.Check{}, analysis.Vars{}, "slow", "", t0)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"slow"`) {
		t.Fatalf("Measure = %v, want a deadline error naming the query", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the query took %v with a timeout of 50ms", d)
	}
}

func TestMeasureCanceled(t *testing.T) {
	srv := newPromServer(t, func(string, time.Time) reply { return vector("1") })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newSource(t, srv.URL).Measure(ctx, &analysis.Check{}, analysis.Vars{}, "up", "", t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Measure with a canceled context = %v", err)
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestNew(t *testing.T) {
	for _, addr := range []string{"", "localhost:9090", "prometheus", "ftp://prometheus:9090", "http://", "http:///api", "http://prometheus:9090/?x=1", "http://prometheus:9090/#top", "http://[::1"} {
		s, err := prometheus.New(addr, nil)
		var fe *analysis.FieldError
		if !errors.As(err, &fe) || fe.Field != "address" {
			t.Errorf("New(%q) = %v, %v; want a FieldError naming address", addr, s, err)
		}
	}
	for _, addr := range []string{"http://prometheus.monitoring:9090", "https://metrics.example.com/prometheus/", "http://127.0.0.1:9090"} {
		if _, err := prometheus.New(addr, nil); err != nil {
			t.Errorf("New(%q): %v", addr, err)
		}
	}
	// The round tripper carries the queries.
	srv := newPromServer(t, func(string, time.Time) reply { return vector("1") })
	rt := &countingTransport{}
	s, err := prometheus.New(srv.URL, rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Measure(context.Background(), &analysis.Check{}, analysis.Vars{}, "up", "", t0); err != nil || rt.n.Load() != 1 {
		t.Fatalf("Measure: %v; %d requests through the round tripper, want 1", err, rt.n.Load())
	}
	if _, err := (&prometheus.Source{}).Measure(context.Background(), &analysis.Check{}, analysis.Vars{}, "up", "", t0); err == nil {
		t.Error("a Source without an API client measured")
	}
}
