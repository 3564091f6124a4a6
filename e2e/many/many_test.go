package many

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/kubetest/measure"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

var (
	sizes    = flag.String("many.n", "100,200,400,800", "comma-separated numbers of concurrent rollouts for BenchmarkConcurrentRollouts")
	interval = flag.Duration("many.interval", time.Second, "the Incremental strategy's interval in BenchmarkConcurrentRollouts (the starts are spread over one)")
	variants = flag.String("many.variants", "notify,poll1s", "comma-separated variants of BenchmarkConcurrentRollouts: notify, poll1s")
)

// TestConcurrentRollouts runs 20 short rollouts at once in each variant,
// the two variants in parallel (Incremental 25% every 250 ms, a 750 ms
// plan), and checks that they all succeed. It checks no timing: under -race on a small machine they may
// take several plans.
func TestConcurrentRollouts(t *testing.T) {
	for _, v := range []variant{notifyVariant, poll1sVariant} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			strat := strategyFor(v, 25, 250*time.Millisecond)
			// Each rollout may take up to 5 minutes: on a 2-core machine
			// with two busy loops and other modules' tests beside it, the
			// API server and the gateway player lag by seconds (20 of these
			// once needed more than the minute this allowed before). A
			// rollout that ends sooner ends the wait sooner.
			r := run(t, 20, v, strat, 250*time.Millisecond, 5*time.Minute)
			t.Log(r.summary(v))
			if r.succeeded != r.n {
				t.Fatalf("%d of %d rollouts succeeded", r.succeeded, r.n)
			}
			if r.api.Watches != 0 && !v.notify {
				t.Errorf("poll1s: %d watches; the wrapper should hide Notify", r.api.Watches)
			}
			if v.notify && r.api.Watches < int64(r.n) {
				t.Errorf("notify: %d watches for %d rollouts", r.api.Watches, r.n)
			}
		})
	}
}

// BenchmarkConcurrentRollouts runs N concurrent rollouts (Incremental 10%
// every -many.interval, 1 s by default, fixed capacity: a plan of 9
// intervals), their starts spread over one interval, against the one
// kube-apiserver of the package, for each N of -many.n and each variant of
// -many.variants. Each rollout may take 2 plans plus 2 minutes (at least 5
// minutes). Each sub-benchmark reports:
//
//	within1.2x    the fraction of rollouts that succeeded within 1.2x the plan
//	within1.05x   the same within 1.05x the plan
//	p50-ratio     duration / plan, median
//	p99-ratio     duration / plan, 99th percentile
//	reads/rollout, writes/rollout, watches/rollout
//	              the operator's API requests per rollout
//	rec-p99-ms    the 99th percentile of a reconcile's latency (observe, step,
//	              apply the hops; from rollout.Event.Time to the Observer)
//	read-p99-ms, write-p99-ms
//	              the 99th percentile of the operator's requests' latencies
//	throttle-ms   the total time requests waited in client-go's rate limiter
//	              (QPS 5000, Burst 10000)
//	cpu-ms/hop    this test process's CPU time (the rollouts, and the
//	              gateway player) / the hops applied
//	*-cores       the cores kube-apiserver, etcd and this process kept busy
//
// The operator's benchmark (examples/operator, BenchmarkManyReleases) runs
// the same N with the same strategy through a controller-runtime operator:
//
//	go test -run XXX -bench ConcurrentRollouts -benchtime 1x -timeout 60m ./e2e/many -many.n 1000 -many.interval 30s -many.variants notify
//
// and logs the same figures as a row of docs/performance.md's table.
func BenchmarkConcurrentRollouts(b *testing.B) {
	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-many.n: %q is not a positive number", f)
		}
		ns = append(ns, n)
	}
	var vs []variant
	for _, f := range strings.Split(*variants, ",") {
		switch strings.TrimSpace(f) {
		case notifyVariant.name:
			vs = append(vs, notifyVariant)
		case poll1sVariant.name:
			vs = append(vs, poll1sVariant)
		default:
			b.Fatalf("-many.variants: %q is neither notify nor poll1s", f)
		}
	}
	if *interval <= 0 {
		b.Fatalf("-many.interval %v: want a positive duration", *interval)
	}
	for _, n := range ns {
		for _, v := range vs {
			b.Run(v.name+"/N="+strconv.Itoa(n), func(b *testing.B) {
				strat := strategyFor(v, 10, *interval)
				plan, err := strategy.Plan(strat, strategy.PlanOptions{})
				if err != nil {
					b.Fatal(err)
				}
				var r result
				for b.Loop() {
					r = run(b, n, v, strat, *interval, max(5*time.Minute, 2*plan.Duration+2*time.Minute))
				}
				b.ReportMetric(r.fractionWithin(), "within1.2x")
				b.ReportMetric(float64(r.within105)/float64(r.n), "within1.05x")
				b.ReportMetric(r.ratio(0.5), "p50-ratio")
				b.ReportMetric(r.ratio(0.99), "p99-ratio")
				b.ReportMetric(r.perRollout(r.api.Reads), "reads/rollout")
				b.ReportMetric(r.perRollout(r.api.Writes), "writes/rollout")
				b.ReportMetric(r.perRollout(r.api.Watches), "watches/rollout")
				b.ReportMetric(ms(measure.Quantile(r.reconciles, 0.99)), "rec-p99-ms")
				b.ReportMetric(ms(measure.Quantile(r.readLat, 0.99)), "read-p99-ms")
				b.ReportMetric(ms(measure.Quantile(r.writeLat, 0.99)), "write-p99-ms")
				b.ReportMetric(ms(r.throttled), "throttle-ms")
				if r.hops > 0 {
					b.ReportMetric(1000*r.cpu["test"]/float64(r.hops), "cpu-ms/hop")
				}
				secs := r.elapsed.Seconds()
				b.ReportMetric(r.cpu["kube-apiserver"]/secs, "apiserver-cores")
				b.ReportMetric(r.cpu["etcd"]/secs, "etcd-cores")
				b.ReportMetric(r.cpu["test"]/secs, "test-cores")
				b.Log(r.summary(v))
			})
		}
	}
}
