package prometheus_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// reply is what the fake Prometheus answers one query with: an HTTP status
// (0 is 200) and a body.
type reply struct {
	status int
	body   string
}

// request is a query the fake Prometheus received.
type request struct {
	method, query, time string
}

// promServer plays Prometheus' HTTP query API (/api/v1/query, a POST with
// a form-encoded body or a GET with URL parameters): it answers each query
// from a function of the query and its time, and records the requests.
type promServer struct {
	*httptest.Server
	t      *testing.T
	answer func(q string, at time.Time) reply

	mu       sync.Mutex
	requests []request
}

func newPromServer(t *testing.T, answer func(q string, at time.Time) reply) *promServer {
	t.Helper()
	s := &promServer{t: t, answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *promServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q, ts := r.Form.Get("query"), r.Form.Get("time")
	s.mu.Lock()
	s.requests = append(s.requests, request{r.Method, q, ts})
	s.mu.Unlock()
	secs, err := strconv.ParseFloat(ts, 64)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"status":"error","errorType":"bad_data","error":"invalid time %q"}`, ts)
		return
	}
	whole, frac := math.Modf(secs)
	at := time.Unix(int64(whole), int64(math.Round(frac*1e9))).UTC()
	rep := s.answer(q, at)
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	fmt.Fprint(w, strings.ReplaceAll(rep.body, "$T", ts))
}

// received returns the requests so far.
func (s *promServer) received() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

// vector is a successful instant vector of one sample per value ($T is the
// query's time).
func vector(values ...string) reply {
	samples := make([]string, len(values))
	for i, v := range values {
		samples[i] = fmt.Sprintf(`{"metric":{"service":"s%d"},"value":[$T,%q]}`, i, v)
	}
	return reply{body: `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`}
}

func scalar(v string) reply {
	return reply{body: fmt.Sprintf(`{"status":"success","data":{"resultType":"scalar","result":[$T,%q]}}`, v)}
}

func apiError(status int, errorType, msg string) reply {
	return reply{status: status, body: fmt.Sprintf(`{"status":"error","errorType":%q,"error":%q}`, errorType, msg)}
}
