package traefik_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/kubetest/promtest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
	"github.com/upshift-dev/upshift/strategy"
)

// analysisWorld is a Traefik with its metrics scraped by a real Prometheus,
// a healthy stable backend and a canary with faults.
type analysisWorld struct {
	*world
	faults *faults
	prom   *promtest.Server
	a      *analysis.Analysis
}

const (
	analysisInterval = 2 * time.Second
	analysisSettle   = 500 * time.Millisecond
)

func newAnalysisWorld(t *testing.T, checks ...analysis.Check) *analysisWorld {
	t.Helper()
	f := &faults{}
	w := newWorldWith(t, startBackend(t, nameStable), startFaultyBackend(t, nameCanary, f))
	prom := promtest.Start(t, promtest.Config{
		Jobs:           []promtest.Job{{Name: "traefik", Targets: []string{w.proxy.metricsAddr}}},
		ScrapeInterval: 500 * time.Millisecond,
	})
	src, err := prometheus.New(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := w.route.Namespace
	a := &analysis.Analysis{
		Source: src, Namespace: ns, Route: w.route.Name,
		A:      analysis.ServiceRef{Namespace: ns, Name: nameStable, Port: servicePort},
		B:      analysis.ServiceRef{Namespace: ns, Name: nameCanary, Port: servicePort},
		Checks: checks,
		// One evaluation every 2 s over the last 4 s (8 scrapes), at
		// least 20 canary requests each; one failed evaluation is
		// tolerated, the second aborts; a query error in a row is set
		// aside, the second holds.
		Policy: analysis.Policy{Interval: analysisInterval, Window: 2 * analysisInterval, FailureLimit: 1,
			ConsecutiveErrorLimit: 1, MinRequests: 20, Lag: time.Second},
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	return &analysisWorld{world: w, faults: f, prom: prom, a: a}
}

// analysisCanary ramps 20, 40, 60, 80, 100 with a 6 s pause after each
// step: time for three evaluations of each weight.
func analysisCanary() strategy.Canary {
	pause := 6 * time.Second
	return strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetWeight(20), strategy.Pause(pause), strategy.SetWeight(40), strategy.Pause(pause),
		strategy.SetWeight(60), strategy.Pause(pause), strategy.SetWeight(80), strategy.Pause(pause), strategy.SetWeight(100),
	}, Options: strategy.Options{UnhealthyThreshold: 1, PollInterval: metav1.Duration{Duration: time.Second}}}
}

// analysisRun is one rollout through Traefik with 8 clients throughout.
type analysisRun struct {
	t      *testing.T
	w      *analysisWorld
	rec    *recordingRouter
	runner *rollout.Runner
	l      *load
	stop   func()
	began  time.Time
	// every is called with each state the Runner returns.
	every func(strategy.State)
}

func (w *analysisWorld) start(t *testing.T, strat strategy.Strategy) *analysisRun {
	r := &analysisRun{t: t, w: w, rec: &recordingRouter{TrafficRouter: w.router(t, analysisSettle)}, l: &load{}, began: time.Now()}
	a, b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	r.runner = &rollout.Runner{Strategy: strat, Router: r.rec, A: a, B: b, Health: w.a}
	if err := r.runner.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wg := r.l.run(ctx, w.proxy.url, 8)
	r.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(r.stop)
	time.Sleep(time.Second)
	return r
}

// drive reconciles until done or a terminal phase.
func (r *analysisRun) drive(s strategy.State, timeout time.Duration, done func(strategy.State) bool) strategy.State {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for !done(s) && !s.Phase.Terminal() {
		next, requeue, err := r.runner.Reconcile(ctx, s)
		if err != nil {
			r.t.Logf("reconcile: %v", err)
		}
		s = next
		if r.every != nil {
			r.every(s)
		}
		if ctx.Err() != nil {
			r.t.Fatalf("not done in %v: phase %s, weight %d, health %s (%s): %s", timeout, s.Phase, s.Desired.Weight,
				s.Observed.Health, s.Observed.HealthMessage, s.Message)
		}
		time.Sleep(min(max(requeue, time.Millisecond), 20*time.Millisecond))
	}
	return s
}

// report logs the requests and failures, and returns the instants of the
// first and the last failed request.
func (r *analysisRun) report() (first, last time.Time) {
	r.stop()
	total, failed := r.l.total.Load(), r.l.failed.Load()
	r.t.Logf("8 clients sent %d requests through Traefik in %v, %d failed; canary weights %v",
		total, time.Since(r.began).Round(time.Millisecond), failed, canaryWeights(r.rec.writes))
	return r.l.firstFailure(), r.l.lastFailure()
}

// abortedByAnalysis runs a canary whose faults the analysis must catch:
// it aborts by itself, within a bounded time of the first bad response,
// and the failures stop once the traffic is back on the stable side.
func abortedByAnalysis(t *testing.T, check analysis.Check, inject func(*faults), bad func(*analysisRun) time.Time) {
	w := newAnalysisWorld(t, check)
	inject(w.faults)
	r := w.start(t, analysisCanary())
	var abortedAt time.Time
	var verdict string
	r.every = func(s strategy.State) {
		if abortedAt.IsZero() && s.Phase == strategy.PhaseAborting {
			abortedAt, verdict = time.Now(), s.Observed.HealthMessage
		}
	}
	s := r.drive(strategy.NewState("v1", "v2"), 3*time.Minute, func(s strategy.State) bool { return s.Phase == strategy.PhaseAborted })
	if s.Phase != strategy.PhaseAborted || s.Aborted == nil || s.Aborted.Reason != strategy.ReasonUnhealthy {
		t.Fatalf("ended %s, aborted %+v: %s", s.Phase, s.Aborted, s.Message)
	}
	time.Sleep(analysisSettle + 2*time.Second)
	first, last := r.report()
	firstBad := bad(r)
	if firstBad.IsZero() {
		t.Fatal("the canary never misbehaved in front of a client")
	}
	took := abortedAt.Sub(firstBad)
	failures := "none failed"
	if !first.IsZero() {
		failures = fmt.Sprintf("failed requests from %s to %s", first.Format("15:04:05.000"), last.Format("15:04:05.000"))
	}
	t.Logf("aborted by the analysis %v after the first bad response at %s; %s; the verdict: %s",
		took.Round(time.Millisecond), firstBad.Format("15:04:05.000"), failures, verdict)
	// Bound: FailureLimit+1 evaluations must fail. The first evaluation
	// whose window holds bad responses is at most one interval, plus the
	// lag, after them; with a window of two intervals, two more
	// intervals, and one for the Prometheus scrape and the reconcile.
	if bound := time.Duration(w.a.Policy.FailureLimit+4)*analysisInterval + w.a.Policy.Lag; took > bound {
		t.Errorf("aborted %v after the first bad response, want at most %v", took, bound)
	}
	// The walk back's weight write, then the data plane: no failure after.
	walkedBack := time.Time{}
	for _, wr := range r.rec.writes {
		if wr.canary == 0 && wr.at.After(abortedAt.Add(-time.Second)) {
			walkedBack = wr.at
			break
		}
	}
	if walkedBack.IsZero() {
		t.Fatalf("no weight 0 written after the abort: %v", canaryWeights(r.rec.writes))
	}
	if !last.IsZero() && last.After(walkedBack.Add(analysisSettle+time.Second)) {
		t.Errorf("a request failed at %s, after the traffic went back to the stable side at %s",
			last.Format("15:04:05.000"), walkedBack.Format("15:04:05.000"))
	}
}

// TestAnalysisAbortsFailingCanary: a canary that answers 500 to one request
// in ten is aborted by the success-rate check alone.
func TestAnalysisAbortsFailingCanary(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	abortedByAnalysis(t, analysis.SuccessRate(0.95),
		func(f *faults) { f.failEvery.Store(10) },
		func(r *analysisRun) time.Time { return r.l.firstFailure() })
}

// TestAnalysisAbortsSlowCanary: a canary that answers every request 150 ms
// late (and never fails) is aborted by the p90 latency check alone.
func TestAnalysisAbortsSlowCanary(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	abortedByAnalysis(t, analysis.LatencyQuantile(0.9, 100*time.Millisecond),
		func(f *faults) { f.delay.Store(int64(150 * time.Millisecond)) },
		func(r *analysisRun) time.Time { return r.l.firstCanary() })
}

// TestAnalysisPassesHealthyCanary: a healthy canary under both checks
// completes, with no failed request.
func TestAnalysisPassesHealthyCanary(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	w := newAnalysisWorld(t, analysis.SuccessRate(0.95), analysis.LatencyQuantile(0.9, 100*time.Millisecond))
	r := w.start(t, analysisCanary())
	healthy := 0
	r.every = func(s strategy.State) {
		if s.Observed.Health == strategy.HealthHealthy {
			healthy++
		}
	}
	s := r.drive(strategy.NewState("v1", "v2"), 3*time.Minute, func(s strategy.State) bool { return false })
	first, _ := r.report()
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s (%s)", s.Phase, s.Message, s.Observed.HealthMessage)
	}
	if n := r.l.failed.Load(); n != 0 {
		t.Errorf("%d requests failed, the first at %s", n, first.Format("15:04:05.000"))
	}
	if healthy == 0 {
		t.Error("the analysis never found the canary healthy")
	}
}

// TestAnalysisHoldsWithoutPrometheus: Prometheus stopped mid-rollout: the
// rollout holds as inconclusive (it neither aborts nor progresses), and
// goes on to complete once Prometheus is back.
func TestAnalysisHoldsWithoutPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("long end-to-end test")
	}
	w := newAnalysisWorld(t, analysis.SuccessRate(0.95))
	r := w.start(t, analysisCanary())
	s := r.drive(strategy.NewState("v1", "v2"), 2*time.Minute, func(s strategy.State) bool {
		return s.Desired.Weight >= 40 && s.Observed.Weight >= 40
	})
	if err := w.prom.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Within the error limit the older evaluations still judge; then the
	// rollout holds.
	s = r.drive(s, time.Minute, func(s strategy.State) bool { return s.Observed.Health == strategy.HealthInconclusive })
	held := s.Desired.Weight
	t.Logf("Prometheus stopped at weight %d; inconclusive %v later at weight %d: %s",
		40, time.Since(stopped).Round(time.Millisecond), held, s.Observed.HealthMessage)
	holdUntil := time.Now().Add(15 * time.Second)
	var moved []int32
	r.every = func(s strategy.State) {
		if s.Desired.Weight != held {
			moved = append(moved, s.Desired.Weight)
		}
	}
	s = r.drive(s, time.Minute, func(strategy.State) bool { return time.Now().After(holdUntil) })
	if s.Phase.Terminal() || s.Phase == strategy.PhaseAborting || len(moved) > 0 || s.Observed.Health != strategy.HealthInconclusive {
		t.Fatalf("without Prometheus: phase %s, health %s, weights %v after %d: %s", s.Phase, s.Observed.Health, moved, held, s.Message)
	}
	if err := w.prom.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	r.every = nil
	s = r.drive(s, 3*time.Minute, func(s strategy.State) bool { return false })
	r.report()
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("after Prometheus came back: %s: %s", s.Phase, s.Message)
	}
	t.Logf("held %v at weight %d without Prometheus; completed %v after it came back", back.Sub(stopped).Round(time.Millisecond),
		held, time.Since(back).Round(time.Millisecond))
	if n := r.l.failed.Load(); n != 0 {
		t.Errorf("%d requests failed", n)
	}
}
