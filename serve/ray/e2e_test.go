package ray_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

// e2eConfig has fixed deployments of 10 and 5 replicas and an autoscaling
// one with a floor of 5: at every multiple of 10 percent Ray's rounding
// gives each at least its share.
const e2eConfig = `{"applications": [{"name": "shop", "route_prefix": "/", "import_path": "shop.app:build",
  "deployments": [
    {"name": "Ingress", "num_replicas": 10},
    {"name": "Ranker", "num_replicas": 5},
    {"name": "Model", "num_replicas": 3},
    {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}]}]}`

// watched checks, at every observation of a side, that the side is ready
// for the traffic the router sends it.
type watched struct {
	rollout.CapacitySetter
	side   strategy.Side
	router *fake.Router

	mu         sync.Mutex
	polls      int
	violations []string
}

func (w *watched) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	st, err := w.CapacitySetter.Capacity(ctx)
	if err != nil {
		return st, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if routed := w.router.Applied().Of(w.side); st.Ready < routed {
		w.violations = append(w.violations, fmt.Sprintf("poll %d of side %s: ready %d < routed %d (%+v)", w.polls, w.side, st.Ready, routed, st))
	}
	return st, nil
}

// TestIncrementalUpgradeBetweenRayClusters is an incremental upgrade from
// one emulated Ray cluster to another, driven by the Runner with the fake
// router: the new cluster ends at a null target capacity, the old one at 0,
// and no poll ever sees a side with less ready capacity than the traffic
// routed to it.
func TestIncrementalUpgradeBetweenRayClusters(t *testing.T) {
	ctx := context.Background()
	rsA, srvA := cluster(t, raytest.Options{StartPolls: 2, StopPolls: 1})
	rsB, srvB := cluster(t, raytest.Options{BuildPolls: 1, StartPolls: 2, StopPolls: 2})
	// The adapters age the answers they reuse on the Runner's clock: a
	// read reuses the last answer for up to ReadMaxAge (2 s) of it, so
	// the reconciles 1 s apart see a cluster that moves only every other
	// one (it moves when polled), and the checks hold of reused answers.
	clock := fake.NewClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	onClock := func(c *ray.Config) { c.Clock = clock }
	a, b := adapter(t, srvA.URL, e2eConfig, onClock), adapter(t, srvB.URL, e2eConfig, onClock)

	// The old cluster serves everything, in its steady state.
	if err := a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	rsA.Advance(2)
	if st, err := a.Capacity(ctx); err != nil || st.Ready != 100 || !st.Settled {
		t.Fatalf("old cluster not ready: %+v %v", st, err)
	}

	router := fake.NewRouter(clock)
	wa := &watched{CapacitySetter: a, side: strategy.SideA, router: router}
	wb := &watched{CapacitySetter: b, side: strategy.SideB, router: router}
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: 5 * time.Second}, MaxSurgePercent: 30,
			Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}},
		Router: router, A: wa, B: wb, Clock: clock,
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	s := strategy.NewState("v1", "v2")
	transient := 0
	for i := 0; !s.Phase.Terminal(); i++ {
		if i > 1000 {
			t.Fatalf("not finished after %d reconciles: %s %+v", i, s.Phase, s.Desired)
		}
		if i == 20 {
			rsB.FailRequests(503, 2) // a dashboard hiccup mid-rollout
		}
		next, requeue, err := r.Reconcile(ctx, s)
		if err != nil {
			var herr *ray.HTTPError
			if !errors.As(err, &herr) || herr.StatusCode != 503 {
				t.Fatalf("reconcile %d: %v", i, err)
			}
			transient++
		}
		s = next
		if requeue <= 0 {
			requeue = time.Second
		}
		clock.Advance(requeue)
	}
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("phase %s (%s), want Succeeded", s.Phase, s.Message)
	}
	if transient == 0 {
		t.Error("the injected 503s were never seen")
	}
	if s.StableSide != strategy.SideB {
		t.Errorf("stable side %s after the upgrade, want B", s.StableSide)
	}
	if tc, running := rsB.TargetCapacity(); tc != nil {
		t.Errorf("new cluster target_capacity %v, want null", *tc)
	} else if !running {
		t.Error("Serve is not running on the new cluster")
	}
	if tc, _ := rsA.TargetCapacity(); tc == nil || *tc != 0 {
		t.Errorf("old cluster target_capacity %v, want 0", tc)
	}
	if w := router.Applied(); w != (rollout.Weights{B: 100}) {
		t.Errorf("weights %+v, want all on B", w)
	}
	for _, w := range []*watched{wa, wb} {
		for _, v := range w.violations {
			t.Error(v)
		}
	}
	for _, dep := range []string{"Ingress", "Ranker", "Embedder"} {
		if st, ok := rsA.Deployment("shop", dep); !ok || st.Target != 0 {
			t.Errorf("old cluster %s: %+v", dep, st)
		}
		if st, ok := rsB.Deployment("shop", dep); !ok || st.Running != st.Target || st.Target == 0 {
			t.Errorf("new cluster %s: %+v", dep, st)
		}
	}
	t.Logf("%d polls of A, %d of B; PUTs to A %v, to B %v", wa.polls, wb.polls, puts(rsA), puts(rsB))
}

// BenchmarkSetObserve is one capacity change (GET, PUT) and one
// observation (GET) against the emulator on loopback.
func BenchmarkSetObserve(b *testing.B) {
	ctx := context.Background()
	_, srv := cluster(b, raytest.Options{})
	side := adapter(b, srv.URL, llmConfig)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: int32(40 + i%2*20)}); err != nil {
			b.Fatal(err)
		}
		if _, err := side.Capacity(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func puts(rs *raytest.Server) []string {
	var out []string
	for _, c := range rs.History() {
		if c.Op == "PUT" {
			out = append(out, c.Arg)
		}
	}
	return out
}
