package rollout_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestRunnerAdoptsALostState: the status of a rollout is wiped (or its
// object deleted and re-created with the same spec) while the route is at
// 80/20, side A on v1 and side B on v2, the spec asking for v2. The Runner
// has revision readers: the zero state's Retarget records v2 unobserved,
// the first reconcile reads the world and writes nothing, no reconcile
// reports the rollout released (idle, or Succeeded) before all traffic is
// observed on a side running v2, and the rollout ends there. With an abort
// written in the same spec update, it ends Aborted with all traffic on v1.
// (The Runner used to skip the observation of the zero state's Retarget,
// which recorded v2 as running on side A: idle for good at 80/20.)
func TestRunnerAdoptsALostState(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}
	for _, tc := range []struct {
		name, abort string
		phase       strategy.Phase
		rev         string // what the side with all traffic runs at the end
	}{
		{"released", "", strategy.PhaseSucceeded, "v2"},
		{"aborted in the same update", "a1", strategy.PhaseAborted, "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := newRig(strat, fake.Lag{Reads: 1})
			g.runner.RevisionA, g.runner.RevisionB = g.a, g.b
			g.a.ServingFunc(g.router.Serving(strategy.SideA))
			g.b.ServingFunc(g.router.Serving(strategy.SideB))
			// The world the lost state left: 80/20, A v1 at 100, B v2 at 30.
			g.a.SetRevision("v1")
			g.b.SetRevision("v2")
			if err := g.b.SetCapacity(ctx, rollout.CapacityRequest{Percent: 30}); err != nil {
				t.Fatal(err)
			}
			g.router.Overwrite(rollout.Weights{A: 80, B: 20})
			for g.router.Applied() != (rollout.Weights{A: 80, B: 20}) || !g.b.Status().Settled {
				g.clock.Advance(time.Second)
				_, _ = g.router.Weights(ctx)
				_, _ = g.b.Capacity(ctx)
			}
			writes0 := writes(g)

			spec := strategy.Control{Abort: tc.abort}
			s := strategy.State{}.Retarget("v2", g.clock.Now())
			for i := 0; ; i++ {
				if i == 2000 {
					t.Fatalf("not finished: %s %s", s.Phase, s.Message)
				}
				now := g.runner.Now()
				s = s.Retarget("v2", now)
				s, _ = s.Control(spec, now)
				next, requeue, err := g.runner.ReconcileAt(ctx, s, now)
				if err != nil {
					t.Fatalf("reconcile %d: %v", i, err)
				}
				if i == 0 && (writes(g) != writes0 || next.Idle() || next.Phase.Terminal()) {
					t.Fatalf("the first reconcile wrote %d times and left %s (idle %v): %s", writes(g)-writes0, next.Phase, next.Idle(), next.Message)
				}
				s = next
				g.traffic.Tick()
				if s.Idle() || s.Phase == strategy.PhaseSucceeded {
					on := g.a
					if s.StableSide == strategy.SideB {
						on = g.b
					}
					if w := g.router.Applied().Of(s.StableSide); w != 100 || !on.RevisionStatus().Updated || on.RevisionStatus().Revision != "v2" {
						t.Fatalf("reported released (%s, idle %v) with %d%% on side %s running %+v", s.Phase, s.Idle(), w, s.StableSide, on.RevisionStatus())
					}
				}
				if s.Phase.Terminal() {
					break
				}
				g.clock.Advance(max(requeue, 100*time.Millisecond))
			}
			all, on := strategy.SideA, g.a
			if g.router.Applied().B == 100 {
				all, on = strategy.SideB, g.b
			}
			if s.Phase != tc.phase || g.router.Applied().Of(all) != 100 || on.RevisionStatus().Revision != tc.rev || s.StableSide != all {
				t.Fatalf("ended %s (stable side %s) with weights %+v, side %s running %+v; want %s with all traffic on %s",
					s.Phase, s.StableSide, g.router.Applied(), all, on.RevisionStatus(), tc.phase, tc.rev)
			}
			if v := append(g.a.Violations(), g.b.Violations()...); len(v) != 0 {
				t.Fatalf("deploys under traffic or capacity: %v", v)
			}
			if st := g.traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
				t.Fatalf("traffic %+v", st)
			}
		})
	}
}

// recognising is a side whose revision reader recognises only the revision
// it is asked about, as serve/replicas compares a Deployment's live
// template with the one a revision means (and the workload carries no note
// of an older revision): any other revision it runs reads as "". It
// deploys as the fake does.
type recognising struct{ *fake.Capacity }

func (c recognising) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	rs, err := c.Capacity.Revision(ctx, expect)
	if err != nil || rs.Revision == expect {
		return rs, err
	}
	return rollout.RevisionStatus{}, nil
}

// TestRunnerInstallsOnAServingApplication: upshift installed on an
// application that already serves: a fresh rollout object (the zero state
// and a Retarget to v2) over all traffic on side A, which runs v1, and side
// B idle at capacity 0, running nothing, v2 already, or something else
// (v0). With readers that recognise what a side runs, and with readers
// that recognise only the revision they are asked about (the serving side
// then reads as running no revision its reader recognises), the first
// reconcile writes nothing, v2 is deployed on B only at weight 0 and
// capacity 0, no request is dropped or overloaded, nothing is reported
// released early, and the rollout ends Succeeded with all traffic on B
// running v2. (The Runner used to hold, Degraded AdoptionBlocked, when the
// serving side was not recognised.)
func TestRunnerInstallsOnAServingApplication(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 50}
	for _, readers := range []string{"content", "expect only"} {
		for _, idle := range []string{"", "v2", "v0"} {
			t.Run(readers+"/B runs "+idle, func(t *testing.T) {
				ctx := context.Background()
				g := newRig(strat, fake.Lag{Reads: 1})
				g.runner.RevisionA, g.runner.RevisionB = g.a, g.b
				if readers == "expect only" {
					g.runner.RevisionA, g.runner.RevisionB = recognising{g.a}, recognising{g.b}
				}
				g.a.ServingFunc(g.router.Serving(strategy.SideA))
				g.b.ServingFunc(g.router.Serving(strategy.SideB))
				g.a.SetRevision("v1")
				if idle != "" {
					g.b.SetRevision(idle)
				}
				writes0 := writes(g)
				s := strategy.State{}
				for i := 0; ; i++ {
					if i == 2000 {
						t.Fatalf("not finished: %s %s", s.Phase, s.Message)
					}
					now := g.runner.Now()
					s = s.Retarget("v2", now)
					next, requeue, err := g.runner.ReconcileAt(ctx, s, now)
					if err != nil {
						t.Fatalf("reconcile %d: %v", i, err)
					}
					if i == 0 && (writes(g) != writes0 || next.Unobserved || next.Phase != strategy.PhaseProgressing) {
						t.Fatalf("the first reconcile wrote %d times and left %q (unobserved %v): %s", writes(g)-writes0, next.Phase, next.Unobserved, next.Message)
					}
					s = next
					g.traffic.Tick()
					if g.router.Applied().B > 0 && (g.b.RevisionStatus().Revision != "v2" || !g.b.RevisionStatus().Updated) {
						t.Fatalf("traffic on side B (%+v) running %+v", g.router.Applied(), g.b.RevisionStatus())
					}
					if s.Idle() || s.Phase == strategy.PhaseSucceeded {
						if g.router.Applied().B != 100 || g.b.RevisionStatus() != (rollout.RevisionStatus{Revision: "v2", Updated: true}) {
							t.Fatalf("reported released (%s, idle %v) with weights %+v, side B running %+v", s.Phase, s.Idle(), g.router.Applied(), g.b.RevisionStatus())
						}
					}
					if s.Phase.Terminal() {
						break
					}
					g.clock.Advance(max(requeue, 100*time.Millisecond))
				}
				if s.Phase != strategy.PhaseSucceeded || s.StableSide != strategy.SideB || s.StableRevision != "v2" {
					t.Fatalf("ended %s with stable side %s on %q: %s", s.Phase, s.StableSide, s.StableRevision, s.Message)
				}
				if v := append(g.a.Violations(), g.b.Violations()...); len(v) != 0 {
					t.Fatalf("deploys under traffic or capacity: %v", v)
				}
				if st := g.traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
					t.Fatalf("traffic %+v", st)
				}
			})
		}
	}
}
