// Package measure counts what a test harness costs: the API requests sent
// through an http.RoundTripper (Counter) and the CPU time of the test
// process, its children and the machine, read from /proc (SampleCPU).
// Quantile summarises the latencies.
package measure

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Counter counts the requests through the RoundTrippers it wraps: reads
// (GET but watches), writes (every other method) and watches (GET with
// watch=true), each counted when it is sent; the answers 409 (conflict)
// and 429 (the API server's priority and fairness refusing); the requests
// that failed without an answer; and the latency until the response
// headers of reads and writes.
//
// The zero value is ready to use. A Counter is safe for concurrent use.
type Counter struct {
	reads, writes, watches, conflicts, tooMany, failed atomic.Int64

	mu                sync.Mutex
	readLat, writeLat []time.Duration
	byResource        map[string]int64
}

// Counts is a snapshot of a Counter's counts. The zero value is no
// requests.
type Counts struct {
	Reads, Writes, Watches, Conflicts, TooMany, Failed int64
}

// Minus returns a - b: the requests counted between two snapshots.
func (a Counts) Minus(b Counts) Counts {
	return Counts{a.Reads - b.Reads, a.Writes - b.Writes, a.Watches - b.Watches, a.Conflicts - b.Conflicts, a.TooMany - b.TooMany, a.Failed - b.Failed}
}

// Plus returns a + b.
func (a Counts) Plus(b Counts) Counts {
	return Counts{a.Reads + b.Reads, a.Writes + b.Writes, a.Watches + b.Watches, a.Conflicts + b.Conflicts, a.TooMany + b.TooMany, a.Failed + b.Failed}
}

// Mark is a position in a Counter's latency records. The zero value is the
// first record.
type Mark struct{ reads, writes int }

// Wrap returns rt with its requests counted by c. Its signature fits
// rest.Config.Wrap.
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		watch := req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true"
		switch {
		case watch:
			c.watches.Add(1)
		case req.Method == http.MethodGet:
			c.reads.Add(1)
		default:
			c.writes.Add(1)
		}
		key := requestKey(req, watch)
		c.mu.Lock()
		if c.byResource == nil {
			c.byResource = map[string]int64{}
		}
		c.byResource[key]++
		c.mu.Unlock()
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if !watch {
			took := time.Since(start)
			c.mu.Lock()
			if req.Method == http.MethodGet {
				c.readLat = append(c.readLat, took)
			} else {
				c.writeLat = append(c.writeLat, took)
			}
			c.mu.Unlock()
		}
		if err != nil {
			c.failed.Add(1)
			return resp, err
		}
		switch resp.StatusCode {
		case http.StatusConflict:
			c.conflicts.Add(1)
		case http.StatusTooManyRequests:
			c.tooMany.Add(1)
		}
		return resp, err
	})
}

// requestKey names what a request does: its verb (GET, LIST, WATCH, PUT,
// POST, PATCH, DELETE) and the resource of its path, with its
// subresource ("PUT deployments", "PUT releases/status", "LIST httproutes").
func requestKey(req *http.Request, watch bool) string {
	verb := req.Method
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...; then namespaces/ns/ maybe.
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource := strings.Join(parts, "/")
	if len(parts) >= 2 {
		resource = parts[0]
		if len(parts) >= 3 {
			resource += "/" + parts[2]
		}
	}
	switch {
	case watch:
		verb = "WATCH"
	case verb == http.MethodGet && len(parts) == 1:
		verb = "LIST"
	}
	return verb + " " + resource
}

// ByResource returns the requests so far by verb and resource, as
// "GET httproutes", "LIST deployments", "PUT releases/status".
func (c *Counter) ByResource() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byResource)
}

// Counts returns the counts so far.
func (c *Counter) Counts() Counts {
	return Counts{c.reads.Load(), c.writes.Load(), c.watches.Load(), c.conflicts.Load(), c.tooMany.Load(), c.failed.Load()}
}

// Mark returns the position of the next latency records, for Latencies.
func (c *Counter) Mark() Mark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Mark{len(c.readLat), len(c.writeLat)}
}

// Latencies returns copies of the read and write latencies recorded since
// mark, in the order the answers came.
func (c *Counter) Latencies(mark Mark) (reads, writes []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.readLat[min(mark.reads, len(c.readLat)):]), slices.Clone(c.writeLat[min(mark.writes, len(c.writeLat)):])
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Quantile returns the q-quantile (nearest rank) of ds, 0 when ds is
// empty. ds is not changed.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
