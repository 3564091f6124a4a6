package strategy_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/strategy"
)

// applied builds the expected result of State.Control.
func applied(as ...strategy.Applied) []strategy.Applied { return as }

func cmd(c, token string) strategy.Applied { return strategy.Applied{Command: c, Token: token} }

func ignored(c, token string) strategy.Applied {
	return strategy.Applied{Command: c, Token: token, Ignored: true}
}

var (
	pauseCmd  = strategy.Applied{Command: strategy.CommandPause}
	resumeCmd = strategy.Applied{Command: strategy.CommandResume}
)

func pausedBy(reason string) func(*strategy.State) string {
	return func(s *strategy.State) string {
		if !s.AwaitingResume || s.PauseReason != reason {
			return "want paused by " + reason + ", got paused " + boolStr(s.AwaitingResume) + " " + s.PauseReason
		}
		return ""
	}
}

func phase(p strategy.Phase) func(*strategy.State) string {
	return func(s *strategy.State) string {
		if s.Phase != p {
			return "phase " + string(s.Phase) + ", want " + string(p)
		}
		return ""
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// TestControlTable: State.Control on a state in each phase, at a fixed
// instant: which commands it applies (or uses up, Ignored), and the pause
// interplay: Paused pauses with a pause of its own, un-pausing resumes only
// that one, never a manual pause, a PauseUntilResumed step or an unhealthy
// pause. Applied again, the same spec changes nothing.
func TestControlTable(t *testing.T) {
	fx := fixtures(t)
	tests := []struct {
		fixture string
		c       strategy.Control
		want    []strategy.Applied
		check   func(*strategy.State) string
	}{
		{"progressing", strategy.Control{Paused: true}, applied(pauseCmd), pausedBy(strategy.ReasonControlPause)},
		{"fresh", strategy.Control{Paused: true}, applied(pauseCmd), pausedBy(strategy.ReasonControlPause)},
		{"completing", strategy.Control{Paused: true}, applied(pauseCmd), pausedBy(strategy.ReasonControlPause)},
		// A PauseUntilResumed step is taken over: it holds until un-paused.
		{"pausedStep", strategy.Control{Paused: true}, applied(pauseCmd), pausedBy(strategy.ReasonControlPause)},
		// Pauses that are not the step's are left as they are.
		{"manualPause", strategy.Control{Paused: true}, nil, pausedBy(strategy.ReasonManualPause)},
		{"unhealthy", strategy.Control{Paused: true}, nil, pausedBy(strategy.ReasonUnhealthy)},
		// A walk back and a finished rollout are not held.
		{"aborting", strategy.Control{Paused: true}, nil, phase(strategy.PhaseAborting)},
		{"aborted", strategy.Control{Paused: true}, nil, phase(strategy.PhaseAborted)},
		{"succeeded", strategy.Control{Paused: true}, nil, phase(strategy.PhaseSucceeded)},
		// Not paused resumes nothing the spec did not pause.
		{"manualPause", strategy.Control{}, nil, pausedBy(strategy.ReasonManualPause)},
		{"pausedStep", strategy.Control{}, nil, pausedBy(strategy.ReasonPauseStep)},
		{"unhealthy", strategy.Control{}, nil, pausedBy(strategy.ReasonUnhealthy)},
		// Requests.
		{"progressing", strategy.Control{Abort: "a1"}, applied(cmd("Abort", "a1")), phase(strategy.PhaseAborting)},
		{"succeeded", strategy.Control{Abort: "a1"}, applied(ignored("Abort", "a1")), phase(strategy.PhaseSucceeded)},
		{"aborted", strategy.Control{Retry: "r1"}, applied(cmd("Retry", "r1")), phase(strategy.PhaseProgressing)},
		{"progressing", strategy.Control{Retry: "r1"}, applied(ignored("Retry", "r1")), phase(strategy.PhaseProgressing)},
		// Both new: Retry, then Abort; the rollout ends up aborting.
		{"aborted", strategy.Control{Retry: "r1", Abort: "a1"}, applied(cmd("Retry", "r1"), cmd("Abort", "a1")), phase(strategy.PhaseAborting)},
		{"pausedStep", strategy.Control{Promote: "p1"}, applied(cmd("Promote", "p1")), func(s *strategy.State) string {
			if !s.PromoteRequested {
				return "promote not requested"
			}
			return ""
		}},
		{"succeeded", strategy.Control{Promote: "p1", PromoteFull: "f1"}, applied(ignored("PromoteFull", "f1"), ignored("Promote", "p1")), phase(strategy.PhaseSucceeded)},
		{"manualPause", strategy.Control{PromoteFull: "f1"}, applied(cmd("PromoteFull", "f1")), func(s *strategy.State) string {
			if s.AwaitingResume || !s.PromoteFullRequested {
				return "want unpaused with promote-full requested"
			}
			return ""
		}},
		// Resume ends the pause in force, an unhealthy one too...
		{"unhealthy", strategy.Control{Resume: "s1"}, applied(cmd("Resume", "s1")), func(s *strategy.State) string {
			if s.AwaitingResume || s.UnhealthyCount != 0 {
				return "want resumed with the unhealthy count reset"
			}
			return ""
		}},
		// ...and Paused then holds the rollout with its own pause.
		{"unhealthy", strategy.Control{Resume: "s1", Paused: true}, applied(cmd("Resume", "s1"), pauseCmd), pausedBy(strategy.ReasonControlPause)},
		{"pausedStep", strategy.Control{Resume: "s1", Paused: true}, applied(cmd("Resume", "s1"), pauseCmd), func(s *strategy.State) string {
			if !s.Resumed {
				return "the step is not resumed"
			}
			return pausedBy(strategy.ReasonControlPause)(s)
		}},
		{"succeeded", strategy.Control{Resume: "s1"}, applied(ignored("Resume", "s1")), phase(strategy.PhaseSucceeded)},
		// An abort ends the spec's pause; the walk back is not held.
		{"progressing", strategy.Control{Paused: true, Abort: "a1"}, applied(cmd("Abort", "a1")), phase(strategy.PhaseAborting)},
	}
	for _, tt := range tests {
		name := tt.fixture + "/" + mustJSON(t, tt.c)
		t.Run(name, func(t *testing.T) {
			in := fx[tt.fixture]
			before := *in.DeepCopy()
			got, as := in.Control(tt.c, t9)
			if diff := cmp.Diff(before, in); diff != "" {
				t.Fatalf("Control modified its input (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, as); diff != "" {
				t.Fatalf("applied (-want +got):\n%s", diff)
			}
			if msg := tt.check(&got); msg != "" {
				t.Fatal(msg)
			}
			// The state says which requests were ignored, for the client
			// that wrote them (State.Ignored).
			for _, a := range as {
				if a.Token == "" {
					continue
				}
				rec := map[string]string{"Abort": got.Ignored.Abort, "Retry": got.Ignored.Retry, "Promote": got.Ignored.Promote,
					"PromoteFull": got.Ignored.PromoteFull, "Resume": got.Ignored.Resume}[a.Command]
				if (rec == a.Token) != a.Ignored {
					t.Fatalf("%s %s: ignored %v, state.ignored records %q", a.Command, a.Token, a.Ignored, rec)
				}
			}
			if err := got.Validate(strategy.CapacityManaged); err != nil && fx[tt.fixture].Validate(strategy.CapacityManaged) == nil {
				t.Fatalf("Control made a valid state invalid: %v", err)
			}
			// Applied again, later, and after a JSON round trip: nothing.
			for _, s := range []strategy.State{got, jsonRoundTrip(t, got)} {
				again, as2 := s.Control(tt.c, t9.Add(tick))
				if diff := cmp.Diff(s, again); len(as2) != 0 || diff != "" {
					t.Fatalf("applied again: %+v, (-once +twice):\n%s", as2, diff)
				}
			}
		})
	}
}

// TestControlPausedHoldsPromote: Paused holds a PauseUntilResumed step even
// when Promote is requested meanwhile; un-paused, the promote passes the
// step. Without a promote, the step waits again for one.
func TestControlPausedHoldsPromote(t *testing.T) {
	c := fixtureCanary
	pausedStep := fixtures(t)["pausedStep"]
	held, _ := pausedStep.Control(strategy.Control{Paused: true, Promote: "p1"}, t5)
	if d := c.Step(held, t6); d.HasHops() || !d.State.AwaitingResume || d.State.PauseReason != strategy.ReasonControlPause || d.State.StepIndex != pausedStep.StepIndex {
		t.Fatalf("paused by the spec, a promote passed the step: step %d, hops %v, paused %v %s", d.State.StepIndex, d.HasHops(), d.State.AwaitingResume, d.State.PauseReason)
	} else {
		held = d.State
	}
	unpaused, as := held.Control(strategy.Control{Promote: "p1"}, t9)
	if diff := cmp.Diff(applied(resumeCmd), as); diff != "" {
		t.Fatalf("un-pausing (-want +got):\n%s", diff)
	}
	if d := c.Step(unpaused, t9); d.State.StepIndex <= pausedStep.StepIndex || d.State.AwaitingResume {
		t.Fatalf("un-paused with a promote pending: step %d, paused %v %s", d.State.StepIndex, d.State.AwaitingResume, d.State.PauseReason)
	}

	// The same without a promote: the step pauses again, waiting for one.
	held, _ = pausedStep.Control(strategy.Control{Paused: true}, t5)
	unpaused, _ = held.Control(strategy.Control{}, t6)
	d := c.Step(unpaused, t6)
	if d.HasHops() || !d.State.AwaitingResume || d.State.PauseReason != strategy.ReasonPauseStep || d.State.StepIndex != pausedStep.StepIndex {
		t.Fatalf("un-paused without a promote: step %d, paused %v %s", d.State.StepIndex, d.State.AwaitingResume, d.State.PauseReason)
	}
	next, as := d.State.Control(strategy.Control{Promote: "p2"}, t9)
	if diff := cmp.Diff(applied(cmd("Promote", "p2")), as); diff != "" {
		t.Fatalf("promote (-want +got):\n%s", diff)
	}
	if d := c.Step(next, t9); d.State.StepIndex <= pausedStep.StepIndex || d.State.AwaitingResume {
		t.Fatalf("promoted: step %d, paused %v", d.State.StepIndex, d.State.AwaitingResume)
	}
}

// TestControlTokensOutliveRollouts: a request seen on an idle state, or in
// an earlier rollout, is used up: it does not act on the next rollout. A
// new value does; a value written back after another one is a new request,
// and a cleared field asks for nothing.
func TestControlTokensOutliveRollouts(t *testing.T) {
	spec := strategy.Control{Abort: "a1", Promote: "p1"}
	s, as := strategy.NewState("v1", "v1").Control(spec, t0)
	if diff := cmp.Diff(applied(ignored("Abort", "a1"), ignored("Promote", "p1")), as); diff != "" {
		t.Fatalf("on the idle state (-want +got):\n%s", diff)
	}
	// On a state that has not observed the world yet, the requests are
	// recorded for the rollout it adopts; adopted as the idle state (all
	// traffic on the side that runs v1), they have nothing to act on.
	u, as := strategy.State{}.Retarget("v1", t0).Control(spec, t0)
	if diff := cmp.Diff(applied(cmd("Abort", "a1"), cmd("Promote", "p1")), as); diff != "" {
		t.Fatalf("on the unobserved state (-want +got):\n%s", diff)
	}
	if d := fixtureCanary.Step(u, t0); !d.State.Idle() || d.State.Aborted != nil || d.State.PromoteRequested || d.State.Handled != s.Handled {
		t.Fatalf("adopted idle: %+v", d.State)
	}
	s = jsonRoundTrip(t, s).Retarget("v2", t1)
	s, as = s.Control(spec, t1)
	if len(as) != 0 || s.PromoteRequested || s.Phase == strategy.PhaseAborting {
		t.Fatalf("requests used up on the idle state acted on the rollout: %+v", as)
	}
	fin, _ := walk(t, fixtureCanary, s, t1, phaseIs(strategy.PhasePaused))
	fin, as = fin.Control(strategy.Control{Abort: "a1", Promote: "p2"}, t2)
	if diff := cmp.Diff(applied(cmd("Promote", "p2")), as); diff != "" {
		t.Fatalf("a new promote (-want +got):\n%s", diff)
	}
	fin, _ = walk(t, fixtureCanary, fin, t2, phaseIs(strategy.PhaseSucceeded))
	next, as := fin.Retarget("v3", t9).Control(strategy.Control{Abort: "a1", Promote: "p2"}, t9)
	if len(as) != 0 || next.PromoteRequested {
		t.Fatalf("requests of the last rollout acted on the next one: %+v", as)
	}
	next, as = next.Control(strategy.Control{Abort: "a1"}, t9) // promote cleared
	if len(as) != 0 {
		t.Fatalf("a cleared request: %+v", as)
	}
	_, as = next.Control(strategy.Control{Abort: "a1", Promote: "p2"}, t9) // written back
	if diff := cmp.Diff(applied(cmd("Promote", "p2")), as); diff != "" {
		t.Fatalf("a value written back (-want +got):\n%s", diff)
	}
}

func jsonRoundTrip(t tb, s strategy.State) strategy.State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out strategy.State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

func mustJSON(t tb, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}
