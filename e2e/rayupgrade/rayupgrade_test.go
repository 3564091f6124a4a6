package rayupgrade

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestResource: the counter tells objects from collections and names the
// subresource written.
func TestResource(t *testing.T) {
	for _, tc := range []struct {
		path  string
		res   string
		named bool
	}{
		{"/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes", "httproutes", false},
		{"/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes/shop", "httproutes", true},
		{"/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes/shop/status", "httproutes/status", true},
		{"/api/v1/namespaces/ns/configmaps", "configmaps", false},
		{"/api/v1/namespaces", "namespaces", false},
		{"/api/v1/namespaces/ns", "namespaces", true},
		{"/apis/gateway.networking.k8s.io/v1/httproutes", "httproutes", false},
	} {
		if res, named := resource(tc.path); res != tc.res || named != tc.named {
			t.Errorf("resource(%q) = %q, %v; want %q, %v", tc.path, res, named, tc.res, tc.named)
		}
	}
}

// TestRayUpgrade is the upgrade at a 1 s interval: it succeeds, no side is
// ever observed with less ready capacity than the traffic the route sends
// it, no serving cluster is redeployed, and the counts stay within loose
// bounds (every hop costs a few requests, not dozens). It checks no timing
// but that the ramp takes at least half its minimum.
func TestRayUpgrade(t *testing.T) {
	r := upgrade(t, time.Second, 5*time.Minute)
	t.Logf("\n%s", r.table())
	if r.end.Phase != strategy.PhaseSucceeded || r.end.StableRevision != "v2" || r.end.StableSide != strategy.SideB {
		t.Fatalf("ended %s with %s stable on side %s: %s", r.end.Phase, r.end.StableRevision, r.end.StableSide, r.end.Message)
	}
	for _, v := range r.violations {
		t.Error(v)
	}
	if n := len(r.moves); n != 10 {
		t.Fatalf("%d weight moves, want 10 (10%% steps): %v", n, r.moves)
	}
	if last := r.moves[len(r.moves)-1].weights; last[backendB.Name] != 100 || last[backendA.Name] != 0 {
		t.Errorf("last weights %v, want all on %s", last, backendB.Name)
	}
	// The interval counts from the decision, so a slow first write can
	// bring the landings closer than the minimum; not by half of it.
	if r.ramp < r.minRamp()/2 {
		t.Errorf("ramp %v, less than half its minimum %v", r.ramp, r.minRamp())
	}
	if r.hops[rollout.HopDeploy] != 1 {
		t.Errorf("%d deploys, want 1 (v2 on cluster B)", r.hops[rollout.HopDeploy])
	}
	hops := 0
	for _, n := range r.hops {
		hops += n
	}
	// Loose bounds: a hop writes the route or a cluster and the state,
	// with a few retries on conflicts; reads are a few per reconcile;
	// each cluster is polled at most every 2 s after writes, plus the
	// Runner's reads of it.
	if w := r.totalWrites(); w < 10 || w > 3*hops+10 {
		t.Errorf("%d API writes for %d hops, want 10..%d", w, hops, 3*hops+10)
	}
	if r.putsPerMove() > 5 {
		t.Errorf("%.2f route PUTs per weight move, want at most 5", r.putsPerMove())
	}
	if reads := r.gets + r.lists; reads > 20*hops {
		t.Errorf("%d API reads for %d hops, want at most %d", reads, hops, 20*hops)
	}
	if r.watches == 0 || r.watches > 10 {
		t.Errorf("%d watches, want the Router's (1 to 10)", r.watches)
	}
	d := r.dashboard[0] + r.dashboard[1]
	// Run's own dashboard reads reuse the last answer of a cluster for up
	// to ReadMaxAge (2 s) unless the adapter wrote since: no more than a
	// 2 s poll of both clusters makes over the upgrade, plus the GET each
	// SetCapacity and Deploy sends before it writes and the one read
	// after each PUT, and a few to spare (a hop retried). Measured here:
	// 20 and 21 of a bound of 34 over 10 s; in the benchmark's 46 s
	// upgrade 32 to 34 of 68, where without the reuse Run read both
	// clusters at every reconcile (90 to 98).
	writes := r.hops[rollout.HopCapacity] + r.hops[rollout.HopDeploy]
	puts := r.dashPuts[0] + r.dashPuts[1]
	if bound := r.pollReads() + writes + puts + 4; r.runGets > bound {
		t.Errorf("%d dashboard reads of Run's over %v, want at most %d (a %v poll of both clusters %d, %d writes, %d PUTs, 4 to spare)",
			r.runGets, r.took, bound, pollEvery, r.pollReads(), writes, puts)
	}
	// The adapters poll after each of their writes until they see what
	// it waits for: a few GETs (the clusters build, start and stop in at
	// most 3 polls), not seconds of polls.
	if polls := d - r.runGets; polls > 4*puts {
		t.Errorf("%d dashboard GETs polling for notifications after %d PUTs, want at most 4 each", polls, puts)
	}
	if r.conflicts > hops {
		t.Errorf("%d conflicts for %d hops", r.conflicts, hops)
	}
}

// BenchmarkRayUpgrade is the measured upgrade: Incremental step 10%,
// interval 5 s, max surge 30%, a 45 s ramp at least. Each run reports:
//
//	trigger-s       trigger to done (Run's duration), seconds
//	ramp-s          first to last weight move landing, seconds
//	ramp-ratio      ramp-s over its minimum, (moves - 1) * interval
//	api-writes      the upgrade's API writes
//	route-puts/move every PUT of the route over the weight moves
//	api-reads       GETs and LISTs of the API (watches apart)
//	api-watches     watches opened
//	dashboard-reads GETs of both clusters' Serve applications
//	run-dashboard-reads those of Run's (the rest are the adapters' polls)
//	conflicts       answers 409
//	reconciles      Run's reconciles
//
// and prints them as a table.
func BenchmarkRayUpgrade(b *testing.B) {
	var r result
	for b.Loop() {
		r = upgrade(b, 5*time.Second, 5*time.Minute)
		if r.end.Phase != strategy.PhaseSucceeded {
			b.Fatalf("ended %s: %s", r.end.Phase, r.end.Message)
		}
		for _, v := range r.violations {
			b.Error(v)
		}
	}
	b.ReportMetric(r.took.Seconds(), "trigger-s")
	b.ReportMetric(r.ramp.Seconds(), "ramp-s")
	b.ReportMetric(r.rampRatio(), "ramp-ratio")
	b.ReportMetric(float64(r.totalWrites()), "api-writes")
	b.ReportMetric(r.putsPerMove(), "route-puts/move")
	b.ReportMetric(float64(r.gets+r.lists), "api-reads")
	b.ReportMetric(float64(r.watches), "api-watches")
	b.ReportMetric(float64(r.dashboard[0]+r.dashboard[1]), "dashboard-reads")
	b.ReportMetric(float64(r.runGets), "run-dashboard-reads")
	b.ReportMetric(float64(r.conflicts), "conflicts")
	b.ReportMetric(float64(r.reconciles), "reconciles")
	fmt.Print(r.table()) // b.Log would cut it short
}
