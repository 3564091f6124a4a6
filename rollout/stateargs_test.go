package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// judgeCall is one call of a HealthChecker or an Analyzer: the method, the
// state it judged (its argument, or what StateFrom found), the gate, and
// whether its context carried a state.
type judgeCall struct {
	Method    string
	State     strategy.State
	Gate      string
	InContext bool
}

type judgeCalls struct{ calls []judgeCall }

func (j *judgeCalls) add(ctx context.Context, method string, s *strategy.State, gate string) {
	c, in := rollout.StateFrom(ctx)
	if s == nil {
		s = &c
	}
	j.calls = append(j.calls, judgeCall{Method: method, State: *s, Gate: gate, InContext: in})
}

// contextJudge is a HealthChecker and an Analyzer that only read the state
// from the context: healthy, and every gate passes.
type contextJudge struct{ judgeCalls }

func (j *contextJudge) Health(ctx context.Context) (strategy.Health, string, error) {
	j.add(ctx, "Health", nil, "")
	return strategy.HealthHealthy, "", nil
}

func (j *contextJudge) Analyze(ctx context.Context, gate string) (strategy.Verdict, error) {
	j.add(ctx, "Analyze", nil, gate)
	return strategy.VerdictPass, nil
}

// stateJudge is contextJudge that also takes the state as an argument.
type stateJudge struct{ contextJudge }

var (
	_ rollout.StateHealthChecker = (*stateJudge)(nil)
	_ rollout.StateAnalyzer      = (*stateJudge)(nil)
)

func (j *stateJudge) HealthState(ctx context.Context, s strategy.State) (strategy.Health, string, error) {
	j.add(ctx, "HealthState", &s, "")
	return strategy.HealthHealthy, "", nil
}

func (j *stateJudge) AnalyzeState(ctx context.Context, s strategy.State, gate string) (strategy.Verdict, error) {
	j.add(ctx, "AnalyzeState", &s, gate)
	return strategy.VerdictPass, nil
}

// TestRunnerPassesTheState: at every reconcile of a canary rollout with a
// gate, the Runner gives its HealthChecker, and its Analyzer while a gate
// is pending, the state it was given: as the argument of HealthState and
// AnalyzeState when they implement them, with no state in the context;
// else in the context, for StateFrom. One of each kind mixes the two.
func TestRunnerPassesTheState(t *testing.T) {
	strat := strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.Gate("p99"), strategy.SetWeight(60)},
		MaxSurgePercent: 20, Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}
	type judge interface {
		rollout.HealthChecker
		rollout.Analyzer
		reset() []judgeCall
	}
	for _, tc := range []struct {
		name                 string
		health, analyzer     judge
		healthBy, analyzerBy string // the methods the Runner must call
	}{
		{"by argument", &stateJudge{}, &stateJudge{}, "HealthState", "AnalyzeState"},
		{"by context", &contextJudge{}, &contextJudge{}, "Health", "Analyze"},
		{"health by argument, gates by context", &stateJudge{}, &contextJudge{}, "HealthState", "Analyze"},
		{"health by context, gates by argument", &contextJudge{}, &stateJudge{}, "Health", "AnalyzeState"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(strat, fake.Lag{})
			g.runner.Health, g.runner.Analyzer = tc.health, tc.analyzer
			call := func(method string, s strategy.State, gate string) judgeCall {
				return judgeCall{Method: method, State: s, Gate: gate, InContext: method == "Health" || method == "Analyze"}
			}
			s := strategy.NewState("v1", "v2")
			gates := 0
			for i := 0; i < 200 && !s.Phase.Terminal(); i++ {
				tc.health.reset()
				tc.analyzer.reset()
				next, requeue, err := g.runner.Reconcile(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				var want, got []judgeCall
				want = append(want, call(tc.healthBy, s, ""))
				if s.Gate != "" {
					want = append(want, call(tc.analyzerBy, s, s.Gate))
					gates++
				}
				got = append(append(got, tc.health.reset()...), tc.analyzer.reset()...)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("reconcile %d (phase %s, gate %q): calls (-want +got):\n%s", i, s.Phase, s.Gate, diff)
				}
				s = next
				g.traffic.Tick()
				g.clock.Advance(requeue)
			}
			if s.Phase != strategy.PhaseSucceeded || gates == 0 {
				t.Fatalf("ended %s (%s) after %d reconciles at a gate: the test wants a rollout through its gate", s.Phase, s.Message, gates)
			}
		})
	}
}

func (j *judgeCalls) reset() []judgeCall {
	c := j.calls
	j.calls = nil
	return c
}
