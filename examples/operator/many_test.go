package main_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

var (
	fleetN        = flag.Int("operator.n", 1000, "number of Releases of BenchmarkManyReleases")
	fleetInterval = flag.Duration("operator.interval", 30*time.Second, "interval of the Releases' Incremental strategy in BenchmarkManyReleases")
	fleetWorkers  = flag.Int("operator.workers", 16, "the operator's -max-concurrent-reconciles in BenchmarkManyReleases")
	fleetShards   = flag.Int("operator.shards", 1, "operator processes in BenchmarkManyReleases, each reconciling -operator.n Releases selected by a label (-release-selector)")
)

// fleetStrategy is what a user writes in spec.strategy.incremental: 10%
// every interval, a surge of one step, the default polls.
func fleetStrategy(interval time.Duration) strategy.Incremental {
	return strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: 10}
}

// TestManyReleases runs 10 Releases through one operator process, each
// with its own HTTPRoute and two Deployments whose pods the cluster runs
// (up to 10 x 2 x 11 pods on the simulated nodes; Incremental 10% every 1 s:
// a 9 s plan of 32 hops), the edits spread over one second, and checks
// that every rollout is Released at v2 within 5x its plan plus 30 s (a
// bound for a loaded 2-core machine under -race, not a speed target: that
// is BenchmarkManyReleases), and that the operator's API requests per
// rollout stay under about 1.5x the most they measured (49 writes: 22
// Deployment updates, 10 route updates, 13 status writes and 4 Events),
// and its reads under 25: the cache serves them, but for a Release the
// cache shows behind the operator's last write (about 4 per rollout).
func TestManyReleases(t *testing.T) {
	t.Parallel()
	const n = 10
	strat := fleetStrategy(time.Second)
	plan, err := strategy.Plan(strat, strategy.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := 5*plan.Duration + 30*time.Second
	r := runFleet(t, 1, n, 4, strat, time.Second, bound)[0]
	t.Log(r.table())
	if r.succeeded != n {
		t.Fatalf("%d of %d rollouts were Released at v2 within %v", r.succeeded, n, bound)
	}
	for i, d := range r.durations {
		if d > bound {
			t.Errorf("rollout %d took %v, more than %v (plan %v)", i, d, bound, plan.Duration)
		}
	}
	const maxReads, maxWrites, maxWatches = 25, 75, 2
	if got := r.perRollout(r.api.Reads); got > maxReads {
		t.Errorf("%.1f reads per rollout, want at most %d", got, maxReads)
	}
	if got := r.perRollout(r.api.Writes); got > maxWrites {
		t.Errorf("%.1f writes per rollout, want at most %d", got, maxWrites)
	}
	if got := r.perRollout(r.api.Watches); got > maxWatches {
		t.Errorf("%.1f watches per rollout, want at most %d", got, maxWatches)
	}
	if r.hops < float64(n*plan.Hops) {
		t.Errorf("%.0f hops applied, want at least %d (%d per rollout)", r.hops, n*plan.Hops, plan.Hops)
	}
}

// BenchmarkManyReleases runs -operator.n Releases (default 1000) through
// one operator process on one kube-apiserver, each with its own HTTPRoute
// and two Deployments of 10 replicas, spec.strategy Incremental 10% every
// -operator.interval (default 30 s: a plan of 4m30s and 32 hops), the
// edits of spec.revision from v1 to v2 spread evenly over one interval.
// The operator is the binary of main.go, run as its ServiceAccount with
// the generated role, one replica without leader election, and
// -max-concurrent-reconciles -operator.workers (default 16). The cluster
// is kubetest's cluster in a box: the real Deployment and ReplicaSet
// controllers, the scheduler and three simulated nodes run the pods
// (ready 200 ms after they start); the test process plays the gateway
// with one informer, and proxies the operator's requests to count them. It reports:
//
//	within1.05x      the fraction of rollouts Released at v2 within 1.05x
//	                 the plan (strategy.Plan of the Release's strategy),
//	                 timed from the edit to the Released condition seen
//	p50-ratio, p99-ratio
//	                 duration / plan
//	reads/rollout, writes/rollout, watches/rollout
//	                 the operator's API requests during the rollouts / N
//	rec-p99-ms       the 99th percentile of controller-runtime's reconcile
//	                 time (controller_runtime_reconcile_time_seconds)
//	cpu-ms/hop       the operator process's CPU time / the hops it applied
//	rss-KiB/rollout  the operator's resident memory at the end minus before
//	                 any object existed, / N
//	*-cores          the cores each process kept busy on average
//
// and prints a table with the rest (the players' requests, the work queue's
// wait, the Go heap, the machine's load and its other work). The run
// takes about the plan plus one interval plus the setup (a few minutes
// for 1000 Releases):
//
//	cd examples/operator && GOWORK=off UPSHIFT_REQUIRE_KUBE=1 go test -run XXX -bench ManyReleases -benchtime 1x -timeout 60m -operator.n 1000
//
// -operator.shards S runs S operator processes, each with
// -release-selector naming its N Releases (S x N in all), and prints each
// shard's table. On this 2-core machine, on the cluster: 200 Releases all
// finish within 1.05x (p50 1.004, p99 1.006) with 5 reads and 49 writes
// per rollout, 5.5 ms of operator CPU per hop and 185 KiB of RSS per
// Release; two shards of 200 all finish at 1.2x (the machine is full);
// 1000 at a 30 s interval need some 120 hops a second, more than the
// cluster's own controllers and nodes serve on two cores (none finished
// in 9 minutes); at a 120 s interval all 1000 finish at 1.075x (p99
// 1.082), the machine nearly full. docs/performance.md,
// "Many Releases in one operator", has the tables.
func BenchmarkManyReleases(b *testing.B) {
	if *fleetN <= 0 || *fleetInterval <= 0 || *fleetWorkers <= 0 || *fleetShards <= 0 {
		b.Fatalf("-operator.n %d, -operator.interval %v, -operator.workers %d, -operator.shards %d: want all positive", *fleetN, *fleetInterval, *fleetWorkers, *fleetShards)
	}
	strat := fleetStrategy(*fleetInterval)
	plan, err := strategy.Plan(strat, strategy.PlanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var rs []fleetResult
	for b.Loop() {
		rs = runFleet(b, *fleetShards, *fleetN, *fleetWorkers, strat, *fleetInterval, plan.Duration*3/2+2*time.Minute)
	}
	rs[0].report(b) // the first shard's, when several: the tables have each
	for _, r := range rs {
		fmt.Print(r.table()) // whole: the benchmark's log keeps 10 lines
	}

}
