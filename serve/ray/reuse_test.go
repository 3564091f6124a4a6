package ray_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// counted is a dashboard in front of an emulated cluster that counts the
// GETs and PUTs of the applications it is sent, and can answer the next
// ones 503 without passing them on.
type counted struct {
	h http.Handler

	mu                 sync.Mutex
	gets, puts         int
	failGets, failPuts int
}

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	fail := false
	switch r.Method {
	case http.MethodGet:
		c.gets++
		if c.failGets > 0 {
			c.failGets, fail = c.failGets-1, true
		}
	case http.MethodPut:
		c.puts++
		if c.failPuts > 0 {
			c.failPuts, fail = c.failPuts-1, true
		}
	}
	c.mu.Unlock()
	if fail {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	c.h.ServeHTTP(w, r)
}

func (c *counted) count() (gets, puts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.puts
}

func (c *counted) fail(gets, puts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failGets, c.failPuts = gets, puts
}

// reuseStep is one step of TestReadReuse: an operation, and the GETs and
// PUTs it sends.
type reuseStep struct {
	// op is one of:
	//
	//	capacity   Capacity; with settled set, it must report that
	//	revision   Deployer.Revision("v1")
	//	set        SetCapacity(percent)
	//	deploy     Deployer.Deploy(revision)
	//	advance    the clock moves by d (firing the polls due)
	//	move       the cluster moves n steps behind the adapter's back
	//	fail       the next n GETs are answered 503
	//	failput    the next PUT is answered 503
	//	drain      the clock moves from poll to poll until none is due
	op       string
	d        time.Duration
	n        int
	percent  int32
	revision string
	// gets and puts are the requests the step sends (-1: any number).
	gets, puts int
	err        bool
	// settled, when not nil, is what a capacity step must report as
	// Settled; percent, when not 0, its Capacity.
	settled *bool
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

// TestReadReuse: Capacity and Revision reuse the last answer of the
// dashboard, whichever GET got it, while it is younger than ReadMaxAge and
// the adapter has written nothing since; a write (even one that fails) makes
// the next read a GET; an error is never kept; a negative ReadMaxAge sends
// a GET for every read; the default follows NotifyMaxInterval. Every case
// starts on a cluster running v1, deployed by the adapter at
// target_capacity 0 and built, after one Capacity (a GET) at the clock's
// start.
func TestReadReuse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config func(*ray.Config)
		notify bool
		steps  []reuseStep
	}{{
		name: "reused while younger than the max age",
		steps: []reuseStep{
			{op: "advance", d: 1999 * time.Millisecond},
			{op: "capacity"}, {op: "revision"}, {op: "capacity"},
			{op: "advance", d: time.Millisecond},
			{op: "capacity", gets: 1}, {op: "revision"},
		},
	}, {
		name: "what someone else changes shows within the max age",
		steps: []reuseStep{
			{op: "set", percent: 50, gets: 1, puts: 1},
			{op: "capacity", gets: 1, settled: no},
			{op: "move", n: 5},
			{op: "advance", d: time.Second},
			{op: "capacity", settled: no}, // the answer of a second ago
			{op: "advance", d: time.Second},
			{op: "capacity", gets: 1, settled: yes, percent: 50},
		},
	}, {
		name: "a write makes the next read a GET, within the max age",
		steps: []reuseStep{
			{op: "set", percent: 50, gets: 1, puts: 1},
			{op: "capacity", gets: 1, percent: 50},
			{op: "revision"},
			{op: "set", percent: 0, gets: 1, puts: 1},
			{op: "revision", gets: 1},
			{op: "capacity", percent: 0},
		},
	}, {
		name: "a write's GET is reused when it writes nothing",
		steps: []reuseStep{
			{op: "set", percent: 0, gets: 1}, // the cluster is at 0 already
			{op: "capacity"}, {op: "revision"},
			{op: "deploy", revision: "v1", gets: 1}, // it runs v1 already
			{op: "capacity"},
		},
	}, {
		name: "a Deploy makes the next read a GET",
		steps: []reuseStep{
			{op: "deploy", revision: "v2", gets: 1, puts: 1},
			{op: "capacity", gets: 1}, {op: "capacity"},
		},
	}, {
		name: "a write that fails makes the next read a GET",
		steps: []reuseStep{
			{op: "failput"},
			{op: "set", percent: 50, gets: 1, puts: 1, err: true},
			{op: "capacity", gets: 1},
			{op: "capacity"},
		},
	}, {
		name: "errors are not kept",
		steps: []reuseStep{
			{op: "advance", d: 2 * time.Second},
			{op: "fail", n: 2},
			{op: "capacity", gets: 1, err: true},
			{op: "revision", gets: 1, err: true},
			{op: "capacity", gets: 1}, {op: "revision"},
		},
	}, {
		name: "a write's GET that fails keeps nothing",
		steps: []reuseStep{
			{op: "advance", d: 2 * time.Second},
			{op: "fail", n: 1},
			{op: "set", percent: 50, gets: 1, err: true},
			{op: "capacity", gets: 1}, {op: "capacity"},
		},
	}, {
		name:   "the poller's answer is the next read's",
		notify: true,
		steps: []reuseStep{
			{op: "set", percent: 50, gets: 1, puts: 1},
			{op: "drain", gets: -1},
			{op: "capacity", settled: yes, percent: 50},
			{op: "revision"},
			{op: "advance", d: 2 * time.Second},
			{op: "capacity", gets: 1, settled: yes},
		},
	}, {
		name:   "a read between the write and its first poll is a GET of its own",
		notify: true,
		steps: []reuseStep{
			{op: "set", percent: 50, gets: 1, puts: 1},
			{op: "capacity", gets: 1, settled: no},
			{op: "advance", d: ray.DefaultNotifyMinInterval, gets: 1}, // the first poll
			{op: "capacity"},
		},
	}, {
		name:   "reuse off",
		config: func(c *ray.Config) { c.ReadMaxAge = -1 },
		steps: []reuseStep{
			{op: "capacity", gets: 1}, {op: "capacity", gets: 1}, {op: "revision", gets: 1},
		},
	}, {
		name:   "a max age of its own",
		config: func(c *ray.Config) { c.ReadMaxAge = 500 * time.Millisecond },
		steps: []reuseStep{
			{op: "advance", d: 499 * time.Millisecond},
			{op: "capacity"},
			{op: "advance", d: time.Millisecond},
			{op: "capacity", gets: 1},
		},
	}, {
		name:   "the default follows NotifyMaxInterval",
		config: func(c *ray.Config) { c.NotifyMaxInterval = 5 * time.Second },
		steps: []reuseStep{
			{op: "advance", d: 4999 * time.Millisecond},
			{op: "capacity"},
			{op: "advance", d: time.Millisecond},
			{op: "capacity", gets: 1},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clk := fake.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
			rs := raytest.New(raytest.Options{BuildPolls: 1, StartPolls: 2, StopPolls: 1, Clock: clk})
			dash := &counted{h: rs}
			r, dp := revAdapter(t, "http://ray.test", inProcess(dash), func(c *ray.Config) {
				c.Clock = clk
				if tc.config != nil {
					tc.config(c)
				}
			})
			if err := dp.Deploy(ctx, "v1"); err != nil {
				t.Fatal(err)
			}
			rs.Advance(3)
			if _, err := r.Capacity(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.notify {
				if err := r.Notify(ctx, func() {}); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range tc.steps {
				gets, puts := dash.count()
				var st rollout.CapacityStatus
				var err error
				switch s.op {
				case "capacity":
					st, err = r.Capacity(ctx)
				case "revision":
					_, err = dp.Revision(ctx, "v1")
				case "set":
					err = r.SetCapacity(ctx, rollout.CapacityRequest{Percent: s.percent})
				case "deploy":
					err = dp.Deploy(ctx, s.revision)
				case "advance":
					clk.Advance(s.d)
				case "move":
					rs.Advance(s.n)
				case "fail":
					dash.fail(s.n, 0)
				case "failput":
					dash.fail(0, 1)
				case "drain":
					for n := 0; ; n++ {
						at, ok := clk.NextWake()
						if !ok {
							break
						}
						if n > 100 {
							t.Fatal("the poller never stops")
						}
						clk.Set(at)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				g, p := dash.count()
				what := fmt.Sprintf("step %d (%s)", i, s.op)
				if (err != nil) != s.err {
					t.Fatalf("%s: error %v, want one: %v", what, err, s.err)
				}
				if s.gets >= 0 && g-gets != s.gets || p-puts != s.puts {
					t.Errorf("%s: %d GETs and %d PUTs, want %d and %d", what, g-gets, p-puts, s.gets, s.puts)
				}
				if s.op != "capacity" || err != nil {
					continue
				}
				if s.settled != nil && st.Settled != *s.settled {
					t.Errorf("%s: %+v, want Settled %v", what, st, *s.settled)
				}
				if s.percent != 0 && st.Capacity != s.percent {
					t.Errorf("%s: %+v, want Capacity %d", what, st, s.percent)
				}
			}
		})
	}
}

// TestReadReuseConcurrent: readers of one Ray and its Deployer share its
// answers with a writer and a poller on other goroutines (run with -race),
// while the clock moves. Each read that follows a write on the writer's
// goroutine reports what it wrote: the adapter's own writes are never
// hidden. Each GET serves one read at most once per max age, unless a
// write intervened.
func TestReadReuseConcurrent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := fake.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	rs := raytest.New(raytest.Options{StartPolls: 1, Clock: clk})
	dash := &counted{h: rs}
	r, dp := revAdapter(t, "http://ray.test", inProcess(dash), func(c *ray.Config) { c.Clock = clk })
	if err := dp.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Notify(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
	const readers, reads = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, readers+2)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range reads {
				var err error
				if (i+j)%2 == 0 {
					_, err = r.Capacity(ctx)
				} else {
					_, err = dp.Revision(ctx, "v1")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		for j := range 50 {
			percent := int32(10 * (j % 10))
			if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: percent}); err != nil {
				errs <- err
				return
			}
			st, err := r.Capacity(ctx)
			if err != nil {
				errs <- err
				return
			}
			if st.Capacity != percent {
				errs <- fmt.Errorf("write %d: Capacity %d right after SetCapacity(%d): the write is hidden", j, st.Capacity, percent)
				return
			}
		}
	}()
	wg.Add(1)
	go func() { // the clock, firing the polls
		defer wg.Done()
		for range 200 {
			clk.Advance(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	gets, puts := dash.count()
	if total := readers*reads + 2*50; gets >= total {
		t.Errorf("%d GETs for %d reads and 50 writes: nothing was reused", gets, total)
	}
	t.Logf("%d GETs, %d PUTs for %d reads, 50 writes and 10 s of polls", gets, puts, readers*reads+50)
}

// TestReuseAndAnotherWriter: another writer's config is hidden from the
// reads for up to ReadMaxAge, but never from a write, which decides on a
// GET of its own: SetCapacity refuses to raise a cluster that runs a config
// of no revision it knows, and the reads after that refusal see that
// config without a GET of their own.
func TestReuseAndAnotherWriter(t *testing.T) {
	ctx := context.Background()
	clk := fake.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	rs := raytest.New(raytest.Options{Clock: clk})
	dash := &counted{h: rs}
	r, dp := revAdapter(t, "http://ray.test", inProcess(dash), func(c *ray.Config) { c.Clock = clk })
	if err := dp.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
		t.Fatal(err)
	}
	if st := revision(t, dp, "v1"); st.Revision != "v1" {
		t.Fatalf("revision %+v, want v1", st)
	}
	if err := rs.PutByOther([]byte(`{"target_capacity": 50, "applications": [{"name": "other", "import_path": "o:app"}]}`)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	gets, _ := dash.count()
	if st := revision(t, dp, "v1"); st.Revision != "v1" {
		t.Fatalf("revision %+v a second after another writer's PUT, want v1 (the answer of a second ago)", st)
	}
	err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 80})
	if !errors.Is(err, ray.ErrUnknownRevision) {
		t.Fatalf("SetCapacity(80) on the other writer's config: %v, want ErrUnknownRevision", err)
	}
	if st := revision(t, dp, "v1"); st.Revision != "" {
		t.Fatalf("revision %+v after the write's GET saw the other config, want none", st)
	}
	if g, _ := dash.count(); g-gets != 1 {
		t.Errorf("%d GETs, want the write's only", g-gets)
	}
	if tc, _ := rs.TargetCapacity(); tc == nil || *tc != 50 {
		t.Errorf("target_capacity %v, want the other writer's 50", tc)
	}
}

// gated answers one GET from the cluster as it is when the GET arrives,
// but holds the answer back until released: an answer that left the
// cluster before a write and reaches the adapter after it.
type gated struct {
	h http.Handler

	mu     sync.Mutex
	armed  bool
	served chan struct{}
	open   chan struct{}
}

func (g *gated) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.served, g.open = true, make(chan struct{}), make(chan struct{})
}

func (g *gated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hold := g.armed && r.Method == http.MethodGet
	if hold {
		g.armed = false
	}
	served, open := g.served, g.open
	g.mu.Unlock()
	if !hold {
		g.h.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, r)
	close(served)
	<-open
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// TestReuseDropsAnAnswerFromBeforeAWrite: a GET sent before a write whose
// answer arrives after it is not kept, even at the same instant of the
// clock: the next read sends a GET and reports the write.
func TestReuseDropsAnAnswerFromBeforeAWrite(t *testing.T) {
	ctx := context.Background()
	clk := fake.NewClock(time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC))
	rs := raytest.New(raytest.Options{Clock: clk})
	g := &gated{h: rs}
	dash := &counted{h: g}
	r, dp := revAdapter(t, "http://ray.test", inProcess(dash), func(c *ray.Config) { c.Clock = clk })
	if err := dp.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	g.arm()
	slow := make(chan rollout.CapacityStatus)
	go func() {
		st, err := r.Capacity(ctx)
		if err != nil {
			t.Error(err)
		}
		slow <- st
	}()
	<-g.served // the cluster answered: at target_capacity 0
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	if st := <-slow; st.Capacity != 0 {
		t.Fatalf("the read sent before the write: %+v, want capacity 0", st)
	}
	gets, _ := dash.count()
	st, err := r.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := dash.count(); g-gets != 1 || st.Capacity != 50 {
		t.Errorf("the read after the write: %d GETs, %+v; want 1 GET, capacity 50", g-gets, st)
	}
}
