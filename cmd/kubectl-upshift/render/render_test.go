package render

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

var canary = strategy.Canary{
	Steps: []strategy.CanaryStep{
		strategy.SetWeight(20),
		strategy.Pause(time.Minute),
		strategy.Gate("errors"),
		strategy.SetWeight(50),
		strategy.PauseUntilResumed(),
	},
	MaxSurgePercent: 25,
}

var incremental = strategy.Incremental{StepPercent: 25, Interval: dur(30 * time.Second), MaxSurgePercent: 25}

// drive steps st with strat from at, every hop applied at once and every
// gate reporting verdict, until stop says so; it returns the state and the
// instant reached. It fails the test if stop never holds.
func drive(t *testing.T, strat strategy.Strategy, st strategy.State, at time.Time, verdict strategy.Verdict, stop func(*strategy.State) bool) (strategy.State, time.Time) {
	t.Helper()
	st.Observed.Revisions = true
	st.Observed.Stable.Revision, st.Observed.Stable.Updated = st.StableRevision, true
	for range 500 {
		if stop(&st) {
			return st, at
		}
		if st.Gate != "" {
			st.Observed.Gates = []strategy.GateResult{{Name: st.Gate, Verdict: verdict}}
		}
		st.Observed.At = metav1.NewMicroTime(at)
		d := strat.Step(st, at)
		st = d.State
		o := &st.Observed
		if d.Weight.Set {
			o.Weight, o.WeightApplied = d.Weight.Value, true
		}
		if d.StableCapacity.Set {
			o.Stable.Capacity, o.Stable.Ready, o.Stable.Settled = d.StableCapacity.Value, d.StableCapacity.Value, true
		}
		if d.CanaryCapacity.Set {
			o.Canary.Capacity, o.Canary.Ready, o.Canary.Settled = d.CanaryCapacity.Value, d.CanaryCapacity.Value, true
		}
		if d.Deploy.Set {
			o.Canary.Revision, o.Canary.Updated = d.Deploy.Revision, true
		}
		if stop(&st) {
			return st, at
		}
		if !d.HasHops() {
			if d.RequeueAfter <= 0 {
				t.Fatalf("drive: nothing to wait for in phase %s (%s)", st.Phase, st.Message)
			}
			at = at.Add(d.RequeueAfter)
		}
	}
	t.Fatalf("drive: the stop condition never held (phase %s)", st.Phase)
	return st, at
}

func atStep(i int32, p strategy.Phase) func(*strategy.State) bool {
	return func(s *strategy.State) bool { return s.StepIndex == i && s.Phase == p }
}

func TestRender(t *testing.T) {
	start := strategy.NewState("v1", "v2")
	events := []RecentEvent{
		{Time: t0.Add(-time.Hour), Type: "Normal", Reason: "Old", Message: "dropped: only the newest are kept"},
		{Time: t0.Add(2 * time.Second), Type: "Normal", Reason: "Retarget", Message: "v1 -> v2"},
		{Time: t0.Add(5 * time.Second), Type: "Normal", Reason: "Hop", Message: "weight 20", Count: 2},
		{Time: t0.Add(3 * time.Second), Type: "Normal", Reason: "Hop", Message: "canary capacity\n25"},
	}
	type tc struct {
		name string
		view func(t *testing.T) View
	}
	cases := []tc{
		{"idle", func(t *testing.T) View {
			return View{Kind: "Release", Namespace: "shop", Name: "web", State: strategy.NewState("v1", "v1"), Strategy: canary, Now: t0}
		}},
		{"zero-state-no-strategy", func(t *testing.T) View {
			return View{Kind: "HTTPRoute", Name: "web", Now: t0}
		}},
		{"canary-timed-pause", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, atStep(1, strategy.PhasePaused))
			return View{Kind: "Release", Namespace: "shop", Name: "web", State: st, Strategy: canary,
				Events: events, Now: at.Add(20 * time.Second), MaxEvents: 3}
		}},
		{"canary-gate", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPending, func(s *strategy.State) bool { return s.Gate != "" })
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Now: at.Add(3 * time.Second)}
		}},
		{"canary-pause-until-resumed", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, func(s *strategy.State) bool { return s.AwaitingResume })
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Now: at.Add(time.Hour)}
		}},
		{"canary-control-paused", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, atStep(0, strategy.PhaseProgressing))
			c := strategy.Control{Paused: true}
			st, _ = st.Control(c, at)
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Control: &c, Now: at.Add(90 * time.Second)}
		}},
		{"canary-hop-in-flight", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, func(s *strategy.State) bool {
				return s.StepIndex == 3 && s.Desired.Weight > 20
			})
			// The weight hop is asked for and not observed yet; the
			// canary side is still starting.
			st.Observed.Weight, st.Observed.WeightApplied = 20, false
			st.Observed.Canary.Ready, st.Observed.Canary.Settled = st.Observed.Canary.Ready-10, false
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Now: at}
		}},
		{"canary-aborted", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictFail, func(s *strategy.State) bool { return s.Phase == strategy.PhaseAborted })
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Events: events, Now: at.Add(10 * time.Minute)}
		}},
		{"canary-aborting", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, atStep(1, strategy.PhasePaused))
			st = st.Abort(strategy.ReasonAborted, at)
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Now: at}
		}},
		{"canary-suspending", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, atStep(4, strategy.PhasePaused))
			c := strategy.Control{Suspended: true}
			st, _ = st.Control(c, at)
			// The first hop of the walk back asked for, not observed yet.
			st = canary.Step(st, at).State
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Control: &c, Now: at.Add(time.Second)}
		}},
		{"canary-suspended", func(t *testing.T) View {
			st, at := drive(t, canary, start, t0, strategy.VerdictPass, atStep(4, strategy.PhasePaused))
			st, at = drive(t, canary, st.Suspend(at), at, strategy.VerdictPass, func(s *strategy.State) bool { return s.Phase == strategy.PhaseSuspended })
			return View{Kind: "Release", Name: "web", State: st, Strategy: canary, Now: at.Add(5 * time.Minute)}
		}},
		{"incremental-interval", func(t *testing.T) View {
			st, at := drive(t, incremental, start, t0, strategy.VerdictPass, func(s *strategy.State) bool { return s.Observed.Weight == 50 })
			return View{Kind: "Release", Name: "web", State: st, Strategy: incremental, Now: at.Add(10 * time.Second)}
		}},
		{"incremental-succeeded", func(t *testing.T) View {
			st, at := drive(t, incremental, start, t0, strategy.VerdictPass, func(s *strategy.State) bool { return s.Phase == strategy.PhaseSucceeded })
			return View{Kind: "Release", Name: "web", State: st, Strategy: incremental, Now: at.Add(5 * time.Minute), MaxEvents: -1, Events: events}
		}},
		{"adapter-error-no-strategy", func(t *testing.T) View {
			st, at := drive(t, incremental, start, t0, strategy.VerdictPass, func(s *strategy.State) bool { return s.Observed.Weight == 25 })
			st.Observed.Error = "route shop/web: connection refused"
			return View{Kind: "HTTPRoute", Namespace: "shop", Name: "web", State: st, Now: at}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Render(&b, c.view(t)); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", c.name+".txt")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("Render (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderNeedsNow(t *testing.T) {
	if err := Render(&bytes.Buffer{}, View{Name: "web"}); !errors.Is(err, ErrNoNow) {
		t.Fatalf("Render without Now: got %v, want %v", err, ErrNoNow)
	}
}
