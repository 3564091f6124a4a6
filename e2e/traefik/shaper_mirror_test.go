package traefik_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// mirrorRound is one round of every user, once the canary's copies of it
// have all arrived.
type mirrorRound struct {
	from, to       time.Time
	stable, canary int64 // answers
	copies         int64 // requests the canary received beyond its answers
}

// TestRouterMirrorThroughTraefik: the Router's mirror as a TraefikService
// (Config.Mirror = MirrorTraefikService) copies 20% of the stable side's
// requests to the canary while 997 users keep sending requests, at weights
// 0, 10 and 30, and is gone after the completion. In every round (250
// users, one request each) sent while a write held, the canary received exactly ⌊0.2·s⌋
// or ⌈0.2·s⌉ copies of the s requests the stable side answered (Traefik's
// mirror counter is deterministic); the users only ever saw the stable
// side's answers at weight 0, and none failed, also while the canary
// answered 500 to every copy.
func TestRouterMirrorThroughTraefik(t *testing.T) {
	f := &faults{}
	w := newWorldWith(t, startBackend(t, nameStable), startFaultyBackend(t, nameCanary, f))
	const settle, hold, percent = 1500 * time.Millisecond, 3 * time.Second, 20
	log := &shaperLog{RouteShaper: w.shaper(t, settle, gateway.MirrorTraefikService)}
	pop := newPopulation(t, 997, 32)
	var stableN, canaryN atomic.Int64
	var mu sync.Mutex
	var rounds []mirrorRound
	tr := &traffic{pop: pop, chunk: 250,
		seen: func(_ *user, a answer) {
			if a.backend == nameCanary {
				canaryN.Add(1)
			} else {
				stableN.Add(1)
			}
		},
	}
	c0 := w.canary.hits.Load()
	tr.afterRound = func(_ int, from, _ time.Time) {
		c1 := quiet(&w.canary.hits)
		s, c := stableN.Swap(0), canaryN.Swap(0)
		mu.Lock()
		rounds = append(rounds, mirrorRound{from: from, to: time.Now(), stable: s, canary: c, copies: c1 - c0 - c})
		mu.Unlock()
		c0 = c1
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := tr.run(ctx, w.proxy.url, "/", pop.users)
	x := strategy.TrafficExtras{MirrorPercent: percent}
	time.Sleep(time.Second)
	log.apply(t, rollout.Routes{Weights: weightsFor(0), Canary: canarySide, Extras: x})
	time.Sleep(hold)
	failFrom := time.Now()
	f.failEvery.Store(1) // the canary answers 500 to every copy
	failed0 := f.n.Load()
	time.Sleep(hold)
	f.failEvery.Store(0)
	failTo := time.Now()
	failedCopies := f.n.Load() - failed0
	for _, canary := range []int32{10, 30} {
		log.apply(t, rollout.Routes{Weights: weightsFor(canary), Canary: canarySide, Extras: x})
		time.Sleep(hold)
	}
	log.apply(t, rollout.Routes{Weights: weightsFor(100), Canary: canarySide})
	time.Sleep(hold)
	stop()
	<-done
	tr.stats.report(t)
	checkNoOwnedRules(t, w, "after the completion")
	if failedCopies == 0 {
		t.Errorf("the canary answered no copy with 500 between %s and %s", failFrom.Format("15:04:05.000"), failTo.Format("15:04:05.000"))
	}

	checkMirror(t, log.snapshot(), hold*9/10, rounds, failFrom, failTo)
}

// checkMirror checks each round sent while one write held: the canary
// received ⌊p·s⌋ or ⌈p·s⌉ copies of the s requests the stable side answered;
// no canary answer at weight 0, the weight's share otherwise.
func checkMirror(t *testing.T, writes []routesWrite, hold time.Duration, rounds []mirrorRound, failFrom, failTo time.Time) {
	t.Helper()
	checked := make([]int, len(writes))
	for _, r := range rounds {
		i := inEffect(writes, r.from, r.to)
		if i < 0 {
			continue
		}
		rs := writes[i].routes
		checked[i]++
		p := int64(rs.Extras.MirrorPercent)
		lo, hi := r.stable*p/100, (r.stable*p+99)/100
		failing := r.to.After(failFrom) && r.from.Before(failTo)
		t.Logf("round %s..%s under write %d (canary %d, mirror %d%%, canary failing %v): answers stable %d canary %d; copies %d (want %d..%d)",
			r.from.Format("05.000"), r.to.Format("05.000"), i, rs.Weights.B, p, failing, r.stable, r.canary, r.copies, lo, hi)
		if r.copies < lo || r.copies > hi {
			t.Errorf("write %d: %d copies of %d stable requests at %d%%, want %d..%d", i, r.copies, r.stable, p, lo, hi)
		}
		if rs.Weights.B == 0 && r.canary != 0 {
			t.Errorf("write %d (canary 0): the users saw %d canary answers", i, r.canary)
		}
		if n := r.stable + r.canary; rs.Weights.B > 0 && n > 0 {
			if share := 100 * float64(r.canary) / float64(n); math.Abs(share-float64(rs.Weights.B)) > 2 {
				t.Errorf("write %d (canary %d): %.2f%% of the answers from the canary", i, rs.Weights.B, share)
			}
		}
	}
	for i, n := range checked {
		if n == 0 && heldLong(writes, i, hold) {
			t.Errorf("write %d (%+v): no round held under it alone", i, writes[i].routes)
		}
	}
}
