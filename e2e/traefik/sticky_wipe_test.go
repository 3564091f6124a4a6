package traefik_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestStickyStateWipedThroughTraefik: a Canary rollout with sticky
// sessions through 10, 20 and 50%, then completed, whose state is lost at
// every pause (what a controller makes of a wiped status or a re-created
// object: the zero State retargeted to the spec's revision), while 1,000
// users with cookie jars send requests through Traefik. The adoption
// recovers the run in force from the route: the Runner never asks for
// another run, no user's ticket is replaced, and no user the canary
// answered goes back to stable while the rollout goes forward.
func TestStickyStateWipedThroughTraefik(t *testing.T) {
	w := newWorld(t)
	const settle, users = 2 * time.Second, 1000
	log := &shaperLog{ExtrasRouter: w.shaper(t, settle, gateway.MirrorGatewayAPI)}
	pop := newPopulation(t, users, 16)
	check := &stickyCheck{base: w.proxy.url, everCanary: make([]bool, users), forward: true}
	tr := &traffic{pop: pop, seen: check.seen}
	loadCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := tr.run(loadCtx, w.proxy.url, "/", pop.users)
	hold := tr.holdFor(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	strat := strategy.Canary{MaxSurgePercent: 100, Steps: []strategy.CanaryStep{
		strategy.SetWeight(10), strategy.PauseUntilResumed(), strategy.SetWeight(20), strategy.PauseUntilResumed(),
		strategy.SetWeight(50), strategy.PauseUntilResumed(),
	}}
	strat.SessionAffinity = &strategy.SessionAffinity{MaxAge: &metav1.Duration{Duration: strategy.DefaultSessionMaxAge}}
	a := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 100})
	b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
	a.SetRevision("v1")
	r := &rollout.Runner{Strategy: strat, Router: log, A: a, B: b, RevisionA: a, RevisionB: b}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	e := &extrasRunner{t: t, runner: r}
	runs := map[string]bool{}
	e.each = func(s strategy.State) {
		check.setSticky(s.DesiredExtras.Sticky)
		if k := s.DesiredExtras.Sticky; k != nil {
			runs[k.Run] = true
		}
	}
	s := e.drive(ctx, strategy.NewState("v1", "v2"), pausedAt(10))
	for _, weight := range []int32{10, 20, 50} {
		time.Sleep(hold)
		before := tickets(check, pop)
		s = strategy.State{}.Retarget("v2", time.Now()) // the status is wiped
		s = e.drive(ctx, s, pausedAt(weight))
		t.Logf("wiped at %d%%: adopted %s at weight %d (%s)", weight, s.Phase, s.Desired.Weight, s.Message)
		time.Sleep(hold)
		if after := tickets(check, pop); after < before {
			t.Errorf("wiped at %d%%: %d users hold a ticket of the run in force after the adoption, %d before", weight, after, before)
		}
		if weight < 50 {
			s = e.drive(ctx, s.Resume(time.Now()), pausedAt(map[int32]int32{10: 20, 20: 50}[weight]))
		}
	}
	s = e.drive(ctx, s.Resume(time.Now()), phaseIs(strategy.PhaseSucceeded))
	time.Sleep(hold)
	stop()
	<-done
	tr.stats.report(t)
	checkNoOwnedRules(t, w, "after the completion")
	e.report()
	if len(runs) != 1 {
		t.Errorf("the Runner asked for %d sticky runs %v, want the one run throughout", len(runs), runs)
	}
	held := tickets(check, pop)
	t.Logf("%d requests; %d of %d users hold a ticket of run %s at the end; %d flips", len(tr.log), held, users, check.sticky.Run, check.flips)
	if check.flips > 0 {
		t.Errorf("%d answers from stable to users the canary had answered while the rollout went forward", check.flips)
	}
	if len(check.problems) > 0 {
		t.Errorf("problems:\n%s", strings.Join(check.problems, "\n"))
	}
}

// tickets counts the users holding a ticket of the run in force.
func tickets(c *stickyCheck, pop *population) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, u := range pop.users {
		if c.ticket(u) != 0 {
			n++
		}
	}
	return n
}
