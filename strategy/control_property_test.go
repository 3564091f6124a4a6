package strategy

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

// genToken draws a request token from a small set, so that draws repeat
// values and clear fields.
func genToken(t *rapid.T, label string) string {
	return rapid.SampledFrom([]string{"", "1", "2", "3"}).Draw(t, label)
}

func genControl(t *rapid.T) Control {
	return Control{
		Paused:      rapid.Bool().Draw(t, "cPaused"),
		Suspended:   rapid.IntRange(0, 3).Draw(t, "cSuspended") == 0,
		Abort:       genToken(t, "cAbort"),
		Retry:       genToken(t, "cRetry"),
		Promote:     genToken(t, "cPromote"),
		PromoteFull: genToken(t, "cPromoteFull"),
		Resume:      genToken(t, "cResume"),
	}
}

// withoutInstants is s without the instants a command records, which
// differ with the now it is given.
func withoutInstants(s State) State {
	s.LastCommandAt, s.PausedAt = metav1.MicroTime{}, metav1.MicroTime{}
	if s.Aborted != nil {
		a := *s.Aborted
		a.At = metav1.MicroTime{}
		s.Aborted = &a
	}
	return s
}

// TestControlIdempotent: from any stored state (corrupt ones included),
// State.Control does not modify its input; applied again to its own result,
// at any instant and after a JSON round trip, it applies nothing and changes
// nothing; what it applies does not depend on the instant (only the
// instants recorded do); it records every request it saw; and it never
// turns a valid state into an invalid one.
func TestControlIdempotent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genState(t)
		if rapid.Bool().Draw(t, "controlPaused") && s.AwaitingResume {
			s.PauseReason = ReasonControlPause
		}
		s.Handled = Requests{Abort: genToken(t, "hAbort"), Retry: genToken(t, "hRetry"), Promote: genToken(t, "hPromote"),
			PromoteFull: genToken(t, "hPromoteFull"), Resume: genToken(t, "hResume")}
		c := genControl(t)
		at := genTime(t, "at").Time
		if at.IsZero() {
			at = t0
		}
		later := at.Add(time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "later")))
		before := *s.DeepCopy()
		once, applied := s.Control(c, at)
		if diff := cmp.Diff(before, s); diff != "" {
			t.Fatalf("Control modified its input (-before +after):\n%s", diff)
		}
		for _, x := range []State{once, roundTrip(t, once)} {
			twice, again := x.Control(c, later)
			if diff := cmp.Diff(x, twice); len(again) != 0 || diff != "" {
				t.Fatalf("applied again: %+v (-once +twice):\n%s", again, diff)
			}
		}
		elsewhen, appliedElsewhen := s.Control(c, later)
		if diff := cmp.Diff(applied, appliedElsewhen); diff != "" {
			t.Fatalf("what Control applies depends on the instant (-at +later):\n%s", diff)
		}
		if diff := cmp.Diff(withoutInstants(once), withoutInstants(elsewhen)); diff != "" {
			t.Fatalf("the instant changed more than the instants recorded (-at +later):\n%s", diff)
		}
		want := Requests{Abort: c.Abort, Retry: c.Retry, Promote: c.Promote, PromoteFull: c.PromoteFull, Resume: c.Resume}
		if once.Handled != want {
			t.Fatalf("handled %+v, want %+v", once.Handled, want)
		}
		for _, mode := range []CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas} {
			if s.Validate(mode) == nil && once.Validate(mode) != nil {
				t.Fatalf("Control made a valid state invalid (%s): %v", mode, once.Validate(mode))
			}
		}
	})
}

// TestControlExactlyOnce drives rollouts of random strategies, with an
// instant world, as a controller does: on every reconcile State.Control with
// the spec as it is, then Step, at the same instant. Between reconciles the
// spec is edited at random (a request set to a new value, the same value,
// an older value, cleared; paused toggled), the controller restarts (a JSON
// round trip of the state), time passes and the revision changes (new
// rollouts). Checked against a model of the spec's history:
//
//   - each request acts exactly once per edit to a new non-empty value (an
//     Applied, Ignored or not, on the first reconcile after the edit, and
//     never again), also across restarts and rollouts, and the state
//     records the value of an ignored one (State.Ignored);
//   - un-paused, the spec resumes no pause it did not cause;
//   - paused, the rollout is held (when it can be: not idle, finished or
//     walking back) and Step moves no weight forward (a pause step or an
//     inconclusive gate, which a Promote passes, only outside the spec's
//     pause).
func TestControlExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		s := NewState("a", "b")
		w := newWorld(mode, &s)
		for _, name := range strat.Gates() {
			w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
		}
		now := t0
		var spec Control
		var seen Requests // the model: the last value of each request seen
		fresh := 0
		fields := func(r *Requests) [5]*string {
			return [5]*string{&r.Abort, &r.Retry, &r.Promote, &r.PromoteFull, &r.Resume}
		}
		specFields := func(c *Control) [5]*string {
			return [5]*string{&c.Abort, &c.Retry, &c.Promote, &c.PromoteFull, &c.Resume}
		}
		commands := [5]string{CommandAbort, CommandRetry, CommandPromote, CommandPromoteFull, CommandResume}
		for i, n := 0, rapid.IntRange(1, 300).Draw(t, "actions"); i < n; i++ {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1: // edit a request
				f := specFields(&spec)[rapid.IntRange(0, 4).Draw(t, "field")]
				switch rapid.IntRange(0, 3).Draw(t, "edit") {
				case 0:
					fresh++
					*f = strconv.Itoa(fresh)
				case 1:
					*f = ""
				case 2:
					if fresh > 0 {
						*f = strconv.Itoa(rapid.IntRange(1, fresh).Draw(t, "older"))
					}
				default: // written again as it is: no edit
				}
			case 2:
				spec.Paused = !spec.Paused
			case 3:
				s = roundTrip(t, s) // a restarted controller reads the stored state
			case 4:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(10*time.Minute)).Draw(t, "advance")))
			case 5:
				s = s.Retarget(rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "revision"), now)
			default: // reconcile
				in := s
				next, applied := s.Control(spec, now)
				for k, f := range specFields(&spec) {
					token, last := *f, fields(&seen)[k]
					n := 0
					for _, a := range applied {
						if a.Command == commands[k] && a.Token != "" {
							n++
							if a.Token != token {
								t.Fatalf("%s applied with token %q, the spec holds %q", a.Command, a.Token, token)
							}
							if rec := *fields(&next.Ignored)[k]; (rec == token) != a.Ignored {
								t.Fatalf("%s %q: ignored %v, but the state's ignored record is %q", a.Command, token, a.Ignored, rec)
							}
						}
					}
					if want := token != *last && token != ""; n != map[bool]int{true: 1}[want] {
						t.Fatalf("%s %q (last seen %q) applied %d times: %+v", commands[k], token, *last, n, applied)
					}
					*last = token
				}
				if next.Handled != seen {
					t.Fatalf("handled %+v, the model %+v", next.Handled, seen)
				}
				ended := false // a request ended the pause in force
				for _, a := range applied {
					ended = ended || !a.Ignored && (a.Command == CommandAbort || a.Command == CommandResume || a.Command == CommandPromoteFull)
				}
				if !spec.Paused && in.AwaitingResume && in.PauseReason != ReasonControlPause && !ended &&
					(!next.AwaitingResume || next.PauseReason != in.PauseReason) {
					t.Fatalf("un-paused, the spec ended a pause it did not cause (%s): %+v", in.PauseReason, applied)
				}
				if spec.Paused && !next.AwaitingResume && !next.Idle() && !next.Phase.Terminal() && next.Phase != PhaseAborting {
					t.Fatalf("paused, the spec does not hold the rollout in phase %s", next.Phase)
				}
				next.Observed = w.observe(now)
				d := checkStep(t, strat, next, now)
				// A Promote passes a pause step or an inconclusive gate; no
				// other pause lets the weight move forward.
				if next.AwaitingResume && next.PauseReason != ReasonPauseStep && next.PauseReason != ReasonGateInconclusive &&
					d.State.Desired.Weight > next.Desired.Weight {
					t.Fatalf("paused (%s), the weight moved forward from %d to %d", next.PauseReason, next.Desired.Weight, d.State.Desired.Weight)
				}
				if d.State.StableSide != next.StableSide {
					w.swap()
				}
				w.apply(&d, 0)
				w.settle()
				s = d.State
			}
		}
	})
}

// TestAbortWithNewRevisionHolds: an Abort written in the same spec update
// as a new revision (Retarget, then Control, as an operator applies a spec)
// mid-rollout stops the rollout whatever the revision: from then on no Step
// raises the weight asked of the canary, against a world that lags, crashes,
// is scaled and redeployed by others, until a Retry, and once the world
// settles the rollout ends Aborted or RolledBack with no traffic on the
// canary side.
func TestAbortWithNewRevisionHolds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		opts, _ := optionsOf(strat)
		s := NewState("a", "b")
		w := newWorld(mode, &s)
		for _, name := range strat.Gates() {
			w.gates = append(w.gates, GateResult{Name: name, Verdict: VerdictPass})
		}
		now := t0
		step := func() Decision {
			observeWorld(&s, w, now)
			d := checkStep(t, strat, s, now)
			w.apply(&d, rapid.IntRange(0, 2).Draw(t, "lag"))
			if d.State.stableSide() != s.stableSide() {
				w.swap()
			}
			s = d.State
			w.tick()
			if s.AwaitingResume {
				s = s.Resume(now)
			}
			if !d.HasHops() {
				now = now.Add(max(d.RequeueAfter, opts.pollInterval()))
			}
			return d
		}
		for i, n := 0, rapid.IntRange(0, 30).Draw(t, "before"); i < n && !s.Phase.Terminal(); i++ {
			checkedActions.Add(1)
			step()
		}
		rev := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "revision")
		spec := Control{Abort: "stop"}
		s = s.Retarget(rev, now)
		s, _ = s.Control(spec, now)
		t.Logf("Retarget %s and Abort at %s: %s %s/%s/%s at %d", rev, now.Format("15:04:05"), s.Phase, s.StableRevision, s.CanaryRevision, s.PendingRevision, s.Desired.Weight)
		for i := 0; i < 60; i++ {
			checkedActions.Add(1)
			if rapid.IntRange(0, 9).Draw(t, "fault") == 0 {
				worldAction(t, w)
			}
			w.failing = false
			s = s.Retarget(rev, now)
			s, _ = s.Control(spec, now)
			before, phase := s.Desired.Weight, s.Phase
			d := step()
			if d.Weight.Set && d.Weight.Value > before || d.State.Desired.Weight > before {
				t.Fatalf("weight raised from %d to %d (asked %v %d) after the abort: %s %s", before, d.State.Desired.Weight, d.Weight.Set, d.Weight.Value, d.State.Phase, d.State.Message)
			}
			if d.State.Phase == PhaseSucceeded && phase != PhaseSucceeded {
				t.Fatalf("the aborted rollout succeeded with %s", d.State.StableRevision)
			}
		}
	})
}
