package fake_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

// req is a request to record: on a side, at t0 + at.
type req struct {
	side    strategy.Side
	at      time.Duration
	status  int
	latency time.Duration
}

func canaryVars(side strategy.Side, window string) analysis.Vars {
	return analysis.Vars{Namespace: "shop", Route: "web", CanarySide: side, Window: window}
}

// same reports whether two measurements are equal, NaN equal to NaN.
func same(a, b analysis.Measurement) bool {
	eq := func(x, y float64) bool { return x == y || math.IsNaN(x) && math.IsNaN(y) }
	return a.NoData == b.NoData && eq(a.Value, b.Value) && eq(a.Requests, b.Requests)
}

func TestMetricsMeasure(t *testing.T) {
	nan := math.NaN()
	success := analysis.SuccessRate(0.95)
	p90 := analysis.LatencyQuantile(0.9, time.Second)
	p50 := analysis.LatencyQuantile(0.5, time.Second)
	custom := analysis.Check{Name: "restarts", Kind: analysis.KindQuery, Query: "restarts"}
	ms := time.Millisecond
	// ten requests to side B at t0-10s..t0-1s: 10ms..100ms, the last two
	// failing.
	var ten []req
	for i := 1; i <= 10; i++ {
		status := 200
		if i > 8 {
			status = 503
		}
		ten = append(ten, req{strategy.SideB, time.Duration(i-11) * time.Second, status, time.Duration(i) * 10 * ms})
	}
	for _, tc := range []struct {
		name     string
		reqs     []req
		check    analysis.Check
		side     strategy.Side
		window   string
		requests string // the rendered RequestsQuery
		lag      time.Duration
		now      time.Duration // the clock at t0 + now
		at       time.Duration // Measure at t0 + at
		want     analysis.Measurement
	}{
		{name: "success rate", reqs: ten, check: success, side: strategy.SideB, window: "30s", requests: "n",
			want: analysis.Measurement{Value: 0.8, Requests: 10}},
		{name: "no requests query: requests NaN", reqs: ten, check: success, side: strategy.SideB, window: "30s",
			want: analysis.Measurement{Value: 0.8, Requests: nan}},
		{name: "the canary side from Vars", reqs: ten, check: success, side: strategy.SideA, window: "30s", requests: "n",
			want: analysis.Measurement{Value: nan, Requests: 0, NoData: true}},
		{name: "the zero side is side A", reqs: []req{{strategy.SideA, -time.Second, 500, 0}, {strategy.SideB, -time.Second, 200, 0}},
			check: success, side: "", window: "30s", requests: "n", want: analysis.Measurement{Value: 0, Requests: 1}},
		{name: "a 4xx is a success, a 500 is not", reqs: []req{{strategy.SideB, -time.Second, 404, 0}, {strategy.SideB, -time.Second, 499, 0},
			{strategy.SideB, -time.Second, 500, 0}, {strategy.SideB, -time.Second, 200, 0}},
			check: success, side: strategy.SideB, window: "30s", requests: "n", want: analysis.Measurement{Value: 0.75, Requests: 4}},
		{name: "p90 by nearest rank", reqs: ten, check: p90, side: strategy.SideB, window: "30s", requests: "n",
			want: analysis.Measurement{Value: 0.09, Requests: 10}},
		{name: "p50 by nearest rank", reqs: ten, check: p50, side: strategy.SideB, window: "30s",
			want: analysis.Measurement{Value: 0.05, Requests: nan}},
		{name: "latency without requests", check: p90, side: strategy.SideB, window: "30s", requests: "n",
			want: analysis.Measurement{Value: nan, Requests: 0, NoData: true}},
		// The window (at - 5s, at]: t0-5s is out, t0-4s..t0-1s in.
		{name: "window excludes its start", reqs: ten, check: success, side: strategy.SideB, window: "5s", requests: "n",
			want: analysis.Measurement{Value: 0.5, Requests: 4}},
		{name: "window includes its end", reqs: ten, check: success, side: strategy.SideB, window: "5s", requests: "n",
			now: -2 * time.Second, at: -2 * time.Second, want: analysis.Measurement{Value: 0.8, Requests: 5}},
		{name: "window in milliseconds", reqs: ten, check: success, side: strategy.SideB, window: "1500ms", requests: "n",
			want: analysis.Measurement{Value: 0, Requests: 1}},
		{name: "window in minutes and seconds", reqs: []req{{strategy.SideB, -90 * time.Second, 500, 0}, {strategy.SideB, -89 * time.Second, 200, 0}},
			check: success, side: strategy.SideB, window: "1m30s", requests: "n", want: analysis.Measurement{Value: 1, Requests: 1}},
		{name: "requests after the instant are not counted", reqs: ten, check: success, side: strategy.SideB, window: "30s", requests: "n",
			at: -3 * time.Second, want: analysis.Measurement{Value: 1, Requests: 8}},
		// Lag 2.5s at t0: what was recorded after t0-2.5s is not in yet.
		{name: "requests after the clock's time are not in yet", reqs: append([]req{{strategy.SideB, time.Second, 500, 0}}, ten...),
			check: success, side: strategy.SideB, window: "30s", requests: "n", at: 2 * time.Second,
			want: analysis.Measurement{Value: 0.8, Requests: 10}},
		{name: "lag hides the newest requests", reqs: ten, check: success, side: strategy.SideB, window: "30s", requests: "n",
			lag: 2500 * ms, want: analysis.Measurement{Value: 1, Requests: 8}},
		{name: "lag ingested by the clock's time", reqs: ten, check: success, side: strategy.SideB, window: "30s", requests: "n",
			lag: 2500 * ms, now: 3 * time.Second, want: analysis.Measurement{Value: 0.8, Requests: 10}},
		{name: "lag hides everything", reqs: ten, check: success, side: strategy.SideB, window: "5s", requests: "n",
			lag: time.Minute, want: analysis.Measurement{Value: nan, Requests: 0, NoData: true}},
		{name: "query", check: custom, side: strategy.SideB, window: "30s", want: analysis.Measurement{Value: 2, Requests: nan}},
		{name: "query without requests still has its value", check: custom, side: strategy.SideB, window: "30s", requests: "n",
			want: analysis.Measurement{Value: 2, Requests: 0}},
		{name: "unknown query", check: analysis.Check{Name: "other", Kind: analysis.KindQuery, Query: "other"}, side: strategy.SideB,
			window: "30s", want: analysis.Measurement{Value: nan, Requests: nan, NoData: true}},
		{name: "query with no data at the instant", check: custom, side: strategy.SideB, window: "30s", at: -time.Minute,
			want: analysis.Measurement{Value: nan, Requests: nan, NoData: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0.Add(tc.now))
			m := fake.NewMetrics(clock)
			m.SetLag(tc.lag)
			m.SetQuery("restarts", func(at time.Time) (float64, bool) { return 2, !at.Before(t0.Add(-time.Second)) })
			for _, r := range tc.reqs {
				m.Record(r.side, t0.Add(r.at), r.status, r.latency)
			}
			c := tc.check
			got, err := m.Measure(context.Background(), &c, canaryVars(tc.side, tc.window), c.Query, tc.requests, t0.Add(tc.at))
			if err != nil {
				t.Fatal(err)
			}
			if !same(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMetricsErrors(t *testing.T) {
	ctx := context.Background()
	m := fake.NewMetrics(fake.NewClock(t0))
	m.Record(strategy.SideB, t0.Add(-time.Second), 200, 0)
	c := analysis.SuccessRate(0.95)
	measure := func(c analysis.Check, window string) error {
		_, err := m.Measure(ctx, &c, canaryVars(strategy.SideB, window), c.Query, "", t0)
		return err
	}
	down := errors.New("connection refused")
	m.SetDown(down)
	if err := measure(c, "30s"); !errors.Is(err, down) {
		t.Errorf("down: got %v, want %v", err, down)
	}
	m.SetDown(nil)
	if err := measure(c, "30s"); err != nil {
		t.Errorf("back up: %v", err)
	}
	for _, w := range []string{"", "30", "s", "30x", "1s1m", "5s5s", "-5s", "0s", "99999999999999999999s", "9999999999y"} {
		if err := measure(c, w); err == nil {
			t.Errorf("window %q: want an error", w)
		}
	}
	if err := measure(analysis.Check{Name: "odd", Kind: "Throughput"}, "30s"); err == nil {
		t.Error("unknown kind: want an error")
	}
	if err := measure(analysis.Check{Name: "p0", Kind: analysis.KindLatency}, "30s"); err == nil {
		t.Error("latency without a quantile: want an error")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Measure(cancelled, &c, canaryVars(strategy.SideB, "30s"), c.Query, "", t0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}

// TestTrafficRecords: a revision's error rate fails that share of the
// requests its side serves, spread evenly, and every request a side
// receives is recorded with its status and latency.
func TestTrafficRecords(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100})
	a.SetRevision("v1")
	b.SetRevision("v2")
	_ = router.SetWeights(ctx, rollout.Weights{A: 90, B: 10})
	metrics := fake.NewMetrics(clock)
	traffic := fake.NewTraffic(router, a, b, 1000)
	traffic.RecordTo(metrics)
	traffic.SetErrorRate("v2", 0.07)
	traffic.SetLatency("v2", 40*time.Millisecond)
	traffic.SetLatency("v1", 10*time.Millisecond)
	for range 3 {
		clock.Advance(time.Second)
		traffic.Tick() // 900 to side A, 100 to side B: 7 of them fail
	}
	_ = b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0})
	clock.Advance(time.Second)
	traffic.Tick() // side B has nothing ready: its 100 are dropped
	want := fake.TrafficStats{Ticks: 4, Served: 3*1000 + 900, Dropped: 100, Failed: 3 * 7, PeakCapacity: 200,
		A: fake.SideTraffic{Requests: 4 * 900}, B: fake.SideTraffic{Requests: 4 * 100}}
	if got := traffic.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	success, p99 := analysis.SuccessRate(0.95), analysis.LatencyQuantile(0.99, time.Second)
	for _, tc := range []struct {
		check  analysis.Check
		side   strategy.Side
		window string
		want   analysis.Measurement
	}{
		{success, strategy.SideB, "3s", analysis.Measurement{Value: 186.0 / 300, Requests: 300}}, // 2 * (100 - 7 failed) + 0 of 100 dropped
		{success, strategy.SideB, "2s", analysis.Measurement{Value: 93.0 / 200, Requests: 200}},
		{success, strategy.SideA, "10s", analysis.Measurement{Value: 1, Requests: 3600}},
		{p99, strategy.SideA, "10s", analysis.Measurement{Value: 0.01, Requests: 3600}},
		{p99, strategy.SideB, "10s", analysis.Measurement{Value: 0.04, Requests: 400}},
	} {
		got, err := metrics.Measure(ctx, &tc.check, canaryVars(tc.side, tc.window), "", "n", clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !same(got, tc.want) {
			t.Errorf("%s on side %s over %s: got %+v, want %+v", tc.check.Name, tc.side, tc.window, got, tc.want)
		}
	}
}

// TestMetricsRetention: requests older than MetricsRetention before the
// newest are forgotten; the newer ones stay.
func TestMetricsRetention(t *testing.T) {
	m := fake.NewMetrics(nil)
	old := t0.Add(-fake.MetricsRetention - time.Minute)
	m.Record(strategy.SideB, old, 500, 0)
	for i := range 2000 { // enough records to trim
		m.Record(strategy.SideB, t0.Add(time.Duration(i)*time.Millisecond), 200, time.Duration(i))
	}
	c := analysis.SuccessRate(0.95)
	got, err := m.Measure(context.Background(), &c, canaryVars(strategy.SideB, "2h"), c.Query, "n", t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got.Requests != 2000 || got.Value != 1 {
		t.Errorf("got %+v: want the 2000 recent requests only", got)
	}
}

// TestMetricsConcurrent records and measures at once (go test -race).
func TestMetricsConcurrent(t *testing.T) {
	clock := fake.NewClock(t0.Add(time.Second))
	m := fake.NewMetrics(clock)
	c := analysis.SuccessRate(0.95)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				m.Record(strategy.SideB, t0.Add(time.Duration(i)*time.Millisecond), 200+300*(g%2), 0)
				if _, err := m.Measure(context.Background(), &c, canaryVars(strategy.SideB, "10s"), c.Query, "n", t0.Add(time.Second)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, _ := m.Measure(context.Background(), &c, canaryVars(strategy.SideB, "10s"), c.Query, "n", t0.Add(time.Second))
	if got.Requests != 2000 || got.Value != 0.5 {
		t.Errorf("got %+v, want 2000 requests, half failed", got)
	}
}

// TestMetricsProperties: whatever is recorded, a success rate is within
// [0, 1], a quantile is among the latencies recorded in the window, the
// requests counted are those in the window, all successes measure 1, and
// no data never comes with a value.
func TestMetricsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := fake.NewClock(t0)
		m := fake.NewMetrics(clock)
		lag := time.Duration(rapid.IntRange(0, 5000).Draw(t, "lag ms")) * time.Millisecond
		m.SetLag(lag)
		allOK := rapid.Bool().Draw(t, "all ok")
		n := rapid.IntRange(0, 40).Draw(t, "requests")
		window := time.Duration(rapid.IntRange(1, 20).Draw(t, "window")) * time.Second
		type rec struct {
			side    strategy.Side
			at      time.Time
			status  int
			latency time.Duration
		}
		var recs []rec
		for i := range n {
			r := rec{
				side:    rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, fmt.Sprintf("side %d", i)),
				at:      t0.Add(-time.Duration(rapid.IntRange(0, 30000).Draw(t, fmt.Sprintf("ms ago %d", i))) * time.Millisecond),
				status:  200,
				latency: time.Duration(rapid.IntRange(0, 2000).Draw(t, fmt.Sprintf("latency %d", i))) * time.Millisecond,
			}
			if !allOK {
				r.status = rapid.SampledFrom([]int{200, 404, 500, 503}).Draw(t, fmt.Sprintf("status %d", i))
			}
			recs = append(recs, r)
			m.Record(r.side, r.at, r.status, r.latency)
		}
		side := rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, "canary side")
		at := t0.Add(-time.Duration(rapid.IntRange(0, 10).Draw(t, "at")) * time.Second)
		q := rapid.Float64Range(0.01, 0.99).Draw(t, "quantile")
		v := canaryVars(side, fmt.Sprintf("%ds", int(window/time.Second)))
		// What the model says is visible: the canary's requests in
		// (at - window, min(at, now - lag)].
		inWindow := 0
		latencies := map[float64]bool{}
		until := at
		if visible := t0.Add(-lag); visible.Before(until) {
			until = visible
		}
		for _, r := range recs {
			if r.side == side && r.at.After(at.Add(-window)) && !r.at.After(until) {
				inWindow++
				latencies[r.latency.Seconds()] = true
			}
		}
		for _, c := range []analysis.Check{analysis.SuccessRate(0.9), analysis.LatencyQuantile(q, time.Second)} {
			got, err := m.Measure(context.Background(), &c, v, c.Query, "n", at)
			if err != nil {
				t.Fatal(err)
			}
			if got.NoData != math.IsNaN(got.Value) {
				t.Fatalf("%s: NoData %t with value %v", c.Name, got.NoData, got.Value)
			}
			if got.NoData != (got.Requests == 0) {
				t.Fatalf("%s: NoData %t on %v requests", c.Name, got.NoData, got.Requests)
			}
			if got.Requests != float64(inWindow) {
				t.Fatalf("%s: %v requests measured, %d visible in the window", c.Name, got.Requests, inWindow)
			}
			if got.NoData {
				continue
			}
			switch c.Kind {
			case analysis.KindSuccessRate:
				if got.Value < 0 || got.Value > 1 {
					t.Fatalf("success rate %v", got.Value)
				}
				if allOK && got.Value != 1 {
					t.Fatalf("all requests succeeded, success rate %v", got.Value)
				}
			case analysis.KindLatency:
				if !latencies[got.Value] {
					t.Fatalf("quantile %v is not a latency recorded in the window", got.Value)
				}
			}
		}
	})
}

// TestMetricsAnalysis: an Analysis over Metrics fed by Traffic aborts a
// canary whose revision fails 10% of its requests, and passes one that does
// not.
func TestMetricsAnalysis(t *testing.T) {
	for _, tc := range []struct {
		errorRate float64
		want      strategy.Phase
	}{{0.1, strategy.PhaseAborted}, {0, strategy.PhaseSucceeded}} {
		t.Run(fmt.Sprint(tc.errorRate), func(t *testing.T) {
			clock := fake.NewClock(t0)
			router := fake.NewRouter(clock)
			a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
			a.SetRevision("v1")
			metrics := fake.NewMetrics(clock)
			metrics.SetLag(time.Second)
			traffic := fake.NewTraffic(router, a, b, 100)
			traffic.RecordTo(metrics)
			traffic.SetErrorRate("v2", tc.errorRate)
			an := &analysis.Analysis{
				Source: metrics, Namespace: "shop", Route: "web",
				A: analysis.ServiceRef{Namespace: "shop", Name: "web-a"}, B: analysis.ServiceRef{Namespace: "shop", Name: "web-b"},
				Checks: []analysis.Check{analysis.SuccessRate(0.95)},
				Policy: analysis.Policy{Interval: time.Second, FailureLimit: 1, MinRequests: 20},
				Clock:  clock,
			}
			if err := an.Validate(); err != nil {
				t.Fatal(err)
			}
			r := &rollout.Runner{
				Strategy: strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: 2 * time.Second}, MaxSurgePercent: 20,
					Options: strategy.Options{UnhealthyThreshold: 1}},
				Router: router, A: a, B: b, RevisionA: a, RevisionB: b, Health: an, Clock: clock,
			}
			s := strategy.NewState("v1", "v2")
			for i := 0; i < 2000 && !s.Phase.Terminal(); i++ {
				next, requeue, err := r.ReconcileAt(context.Background(), s, clock.Now())
				if err != nil {
					t.Fatal(err)
				}
				s = next
				for d := time.Duration(0); d < max(requeue, 100*time.Millisecond); d += 100 * time.Millisecond {
					clock.Advance(100 * time.Millisecond)
					traffic.Tick()
				}
			}
			if s.Phase != tc.want {
				t.Fatalf("phase %s (%s), want %s", s.Phase, s.Message, tc.want)
			}
			st := traffic.Stats()
			if wantFailed := st.Failed > 0; wantFailed != (tc.errorRate > 0) || st.Dropped+st.Overloaded != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// ExampleMetrics judges a canary on side B from the requests recorded:
// 96 of 100 succeeded in the last 30 seconds, 4 answered 503.
func ExampleMetrics() {
	clock := fake.NewClock(t0)
	metrics := fake.NewMetrics(clock)
	for i := range 100 {
		status := 200
		if i%25 == 0 {
			status = 503
		}
		metrics.Record(strategy.SideB, t0.Add(-time.Duration(i)*200*time.Millisecond), status, time.Duration(10+i)*time.Millisecond)
	}
	vars := analysis.Vars{CanarySide: strategy.SideB, Window: "30s"}
	for _, c := range []analysis.Check{analysis.SuccessRate(0.95), analysis.LatencyQuantile(0.99, 100*time.Millisecond)} {
		m, err := metrics.Measure(context.Background(), &c, vars, c.Query, c.RequestsQuery, clock.Now())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %v over %v requests: %s\n", c.Name, m.Value, m.Requests, analysis.Classify(m, &c, 50))
	}
	// Output:
	// success-rate: 0.96 over 100 requests: Pass
	// latency-p99: 0.108 over 100 requests: Fail
}
