package analysis_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/strategy"
)

var (
	_ rollout.StateHealthChecker = (*analysis.Analysis)(nil)
	_ rollout.StateAnalyzer      = (*analysis.Analysis)(nil)
)

// judgement is what one call answered and what it asked the source.
type judgement struct {
	Health  strategy.Health
	Verdict strategy.Verdict
	Err     string
	Queries []string
	Ats     []time.Time
}

// TestStateArgument: HealthState and AnalyzeState judge the state they are
// given, whatever the context carries (nothing, or another rollout's state
// with the other side stable), and answer as Health and Analyze do with
// that state in the context (rollout.WithState), from the same queries.
func TestStateArgument(t *testing.T) {
	gate := func(s strategy.State) strategy.State {
		s.Gate, s.StepStartedAt = "smoke", metav1.NewMicroTime(t0.Add(-40*time.Second))
		return s
	}
	onB := progressing()
	onB.StableSide = strategy.SideB
	at := t0.Add(2 * time.Second)
	for _, tc := range []struct {
		name   string
		s      strategy.State
		gate   string // "" judges the health
		answer float64
		want   judgement // Queries and Ats are compared between the calls
	}{
		{"healthy", progressing(), "", 0.99, judgement{Health: strategy.HealthHealthy}},
		{"unhealthy", progressing(), "", 0.5, judgement{Health: strategy.HealthUnhealthy}},
		{"healthy, side B stable", onB, "", 0.99, judgement{Health: strategy.HealthHealthy}},
		{"not started", strategy.NewState("v1", "v2"), "", 0.5, judgement{Health: strategy.HealthUnknown}},
		{"gate passes", gate(progressing()), "smoke", 0.99, judgement{Verdict: strategy.VerdictPass}},
		{"gate fails", gate(progressing()), "smoke", 0.1, judgement{Verdict: strategy.VerdictFail}},
		{"gate without checks", gate(progressing()), "typo", 0.99,
			judgement{Verdict: strategy.VerdictPending, Err: `analysis: no checks for gate "typo"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := func(ctx context.Context, byArgument bool) judgement {
				src := &script{answer: rate(tc.answer)}
				a := newAnalysis(src, fake.NewClock(at))
				var j judgement
				var err error
				switch {
				case tc.gate == "" && byArgument:
					j.Health, _, err = a.HealthState(ctx, tc.s)
				case tc.gate == "":
					j.Health, _, err = a.Health(ctx)
				case byArgument:
					j.Verdict, err = a.AnalyzeState(ctx, tc.s, tc.gate)
				default:
					j.Verdict, err = a.Analyze(ctx, tc.gate)
				}
				if err != nil {
					j.Err = err.Error()
				}
				j.Queries, j.Ats = src.queries, src.ats
				return j
			}
			other := gate(progressing())
			other.StableSide, other.StartedAt = tc.s.StableSide.Other(), metav1.NewMicroTime(t0.Add(-time.Hour))
			if tc.s.StableSide == "" {
				other.StableSide = strategy.SideB
			}
			byContext := call(rollout.WithState(context.Background(), tc.s), false)
			for name, ctx := range map[string]context.Context{
				"no state in the context":      context.Background(),
				"another state in the context": rollout.WithState(context.Background(), other),
			} {
				got := call(ctx, true)
				if diff := cmp.Diff(tc.want, judgement{Health: got.Health, Verdict: got.Verdict, Err: got.Err}); diff != "" {
					t.Errorf("%s: answer (-want +got):\n%s", name, diff)
				}
				if diff := cmp.Diff(byContext, got); diff != "" {
					t.Errorf("%s: by argument and by context differ (-context +argument):\n%s", name, diff)
				}
			}
		})
	}
}
