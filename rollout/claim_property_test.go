package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// claimWorld is two rollouts with different owners over one route and two
// sides (fakes that model claims), reconciled in a random interleaving,
// some of them at once, with owners deleted (their claims released, or
// left behind for the other to take over as stale).
type claimWorld struct {
	clock   *fake.Clock
	router  *fake.Router
	a, b    *fake.Capacity
	owners  [2]rollout.Owner
	runners [2]*rollout.Runner
	states  [2]strategy.State
	gone    [2]bool
	// checked counts the history entries of each object already
	// replayed; holders the claimant replayed from them.
	checked [3]int
	holders [3]rollout.Owner
}

func newClaimWorld(t *rapid.T) *claimWorld {
	w := &claimWorld{clock: fake.NewClock(t0)}
	w.router = fake.NewRouter(w.clock)
	w.a, w.b = fake.NewCapacity(w.clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(w.clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	w.a.SetRevision("v1")
	step := rapid.Int32Range(10, 100).Draw(t, "step")
	strat := strategy.Incremental{StepPercent: step, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 100}
	for i := range w.owners {
		w.owners[i] = rollout.Owner{Kind: "Release", Namespace: "shop", Name: fmt.Sprintf("r%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}
		w.runners[i] = &rollout.Runner{Strategy: strat, Router: w.router, A: w.a, B: w.b, RevisionA: w.a, RevisionB: w.b,
			Clock: w.clock, Owner: w.owners[i], OwnerGone: w.ownerGone}
		w.states[i] = strategy.NewState("v1", rapid.SampledFrom([]string{"v2", "v3"}).Draw(t, fmt.Sprintf("revision%d", i)))
	}
	return w
}

// ownerGone is what an operator's check of its objects says.
func (w *claimWorld) ownerGone(_ context.Context, o rollout.Owner) (bool, error) {
	for i := range w.owners {
		if w.owners[i] == o {
			return w.gone[i], nil
		}
	}
	return true, nil
}

// reconcile reconciles owner i once and checks what it did.
func (w *claimWorld) reconcile(t *rapid.T, i int) {
	before := w.states[i]
	spec, _ := w.router.Status()
	revs := map[strategy.Side]rollout.RevisionStatus{strategy.SideA: w.a.RevisionStatus(), strategy.SideB: w.b.RevisionStatus()}
	holder := w.router.Claimant()
	next, _, err := w.runners[i].ReconcileAt(context.Background(), before, w.clock.Now())
	w.states[i] = next
	if errors.Is(err, rollout.ErrClaimed) {
		// The loser reports Degraded, reason Claimed, naming the winner.
		c := degraded(next)
		if c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonClaimed || !strings.Contains(c.Message, holder.Namespace+"/"+holder.Name) {
			t.Fatalf("owner %s refused (%v) but Degraded is %+v, want Claimed naming %s", w.owners[i].Name, err, c, holder)
		}
		if after, _ := w.router.Status(); after.Weights != spec.Weights {
			t.Fatalf("owner %s refused, yet the weights moved %v -> %v", w.owners[i].Name, spec.Weights, after.Weights)
		}
		return
	}
	// A weight write sends more traffic only to a side that runs, fully
	// rolled out, the revision its role has in the writer's state.
	after, _ := w.router.Status()
	stable := before.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		if after.Weights.Of(side) <= spec.Weights.Of(side) {
			continue
		}
		want := before.CanaryRevision
		if side == stable {
			want = before.StableRevision
		}
		if rs := revs[side]; rs.Revision != want || !rs.Updated {
			t.Fatalf("owner %s raised side %s's weight %d -> %d while it runs %+v, its role's revision is %s",
				w.owners[i].Name, side, spec.Weights.Of(side), after.Weights.Of(side), rs, want)
		}
	}
}

// check replays each object's history: every write was made for the
// owner that held the object's claim at that moment (at most one owner
// writes since its claim), and no deploy hit a side that served.
func (w *claimWorld) check(t *rapid.T) {
	for k, h := range [3][]fake.Call{w.router.History(), w.a.History(), w.b.History()} {
		for _, c := range h[w.checked[k]:] {
			if c.Err != nil {
				continue
			}
			switch c.Op {
			case "Claim":
				w.holders[k] = c.Owner
			case "Release":
				if w.holders[k] == c.Owner {
					w.holders[k] = rollout.Owner{}
				}
			case "SetWeights", "SetCapacity", "Deploy":
				if c.Owner != w.holders[k] {
					t.Fatalf("object %d: %s %s by %s while %s holds the claim", k, c.Op, c.Arg, c.Owner, w.holders[k])
				}
			}
		}
		w.checked[k] = len(h)
	}
	for _, c := range []*fake.Capacity{w.a, w.b} {
		if v := c.Violations(); len(v) > 0 {
			t.Fatalf("unsafe deploys: %v", v)
		}
	}
}

func TestClaimsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := newClaimWorld(t)
		w.a.ServingFunc(func() int32 { return w.router.Applied().A })
		w.b.ServingFunc(func() int32 { return w.router.Applied().B })
		t.Repeat(map[string]func(*rapid.T){
			"reconcile": func(t *rapid.T) {
				i := rapid.IntRange(0, 1).Draw(t, "owner")
				if w.gone[i] {
					t.Skip("deleted")
				}
				w.reconcile(t, i)
				w.check(t)
			},
			"both at once": func(t *rapid.T) {
				if w.gone[0] || w.gone[1] {
					t.Skip("one is deleted")
				}
				var wg sync.WaitGroup
				for i := range w.runners {
					wg.Go(func() {
						next, _, _ := w.runners[i].ReconcileAt(context.Background(), w.states[i], w.clock.Now())
						w.states[i] = next
					})
				}
				wg.Wait()
				w.check(t)
			},
			"advance": func(t *rapid.T) {
				w.clock.Advance(time.Duration(rapid.IntRange(1, 3000).Draw(t, "ms")) * time.Millisecond)
			},
			"delete": func(t *rapid.T) {
				i := rapid.IntRange(0, 1).Draw(t, "owner")
				if w.gone[i] || w.gone[1-i] {
					t.Skip("keep one")
				}
				if rapid.Bool().Draw(t, "finalizer") {
					if err := w.runners[i].Release(context.Background()); err != nil {
						t.Fatal(err)
					}
				} // else its claims are left behind, stale
				w.gone[i] = true
				w.check(t)
			},
		})
	})
}
