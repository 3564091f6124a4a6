package strategy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
)

var allPhases = []Phase{"", PhaseProgressing, PhasePaused, PhaseAborting, PhaseAborted, PhaseRolledBack, PhaseCompleting, PhaseSucceeded, PhaseSuspended}

// TestTransitionTable holds canBecome to the table in transitions.go: every
// pair of phases, each allowed move listed, every other pair refused.
func TestTransitionTable(t *testing.T) {
	allowed := map[Phase][]Phase{
		"":               {PhaseProgressing, PhaseAborting, PhaseSuspended},
		PhaseProgressing: {PhasePaused, PhaseCompleting, PhaseAborting},
		PhasePaused:      {PhaseProgressing, PhaseAborting},
		PhaseCompleting:  {PhaseSucceeded, PhaseAborting},
		PhaseAborting:    {PhaseAborted, PhaseRolledBack, PhaseProgressing, PhaseSuspended},
		PhaseAborted:     {PhaseProgressing, PhaseRolledBack, ""},
		PhaseSuspended:   {PhaseProgressing, "", PhaseAborted, PhaseRolledBack},
		PhaseRolledBack:  {""},
		PhaseSucceeded:   {""},
	}
	for _, from := range allPhases {
		for _, to := range allPhases {
			want := from == to
			for _, p := range allowed[from] {
				want = want || p == to
			}
			if got := canBecome(from, to); got != want {
				t.Errorf("canBecome(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
	for _, p := range []Phase{"Bogus", "progressing"} {
		if canBecome(p, p) || canBecome(p, PhaseProgressing) || canBecome("", p) {
			t.Errorf("a transition from or to the unknown phase %q is allowed", p)
		}
	}
}

// transition names one transition function, for the property below.
type transition struct {
	name string
	do   func(s *State, reason string, at metav1.MicroTime) bool
}

var transitionFuncs = []transition{
	{"becomeProgressing", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeProgressing() }},
	{"becomePaused", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomePaused() }},
	{"becomeCompleting", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeCompleting() }},
	{"becomeSucceeded", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeSucceeded() }},
	{"becomeAborting", func(s *State, r string, at metav1.MicroTime) bool { return s.becomeAborting(r, at) }},
	{"becomeAborted", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeAborted() }},
	{"becomeRolledBack", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeRolledBack() }},
	{"becomeNew", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeNew() }},
	{"becomeSuspended", func(s *State, _ string, _ metav1.MicroTime) bool { return s.becomeSuspended() }},
	{"suspendUnstarted", func(s *State, r string, at metav1.MicroTime) bool { return s.suspendUnstarted(r, at) }},
	{"retakeSuspension", func(s *State, r string, _ metav1.MicroTime) bool { return s.retakeSuspension(r) }},
	{"abortSuspended", func(s *State, r string, at metav1.MicroTime) bool { return s.abortSuspended(r, at) }},
	{"hold", func(s *State, r string, at metav1.MicroTime) bool { return s.hold(r, at) }},
	{"retakeHold", func(s *State, r string, at metav1.MicroTime) bool { return s.retakeHold(r, at) }},
	{"unhold", func(s *State, _ string, _ metav1.MicroTime) bool { return s.unhold() }},
	{"unholdStep", func(s *State, _ string, _ metav1.MicroTime) bool { return s.unholdStep() }},
	{"recordAbort", func(s *State, r string, at metav1.MicroTime) bool { return s.recordAbort(r, at, false) }},
	{"recordAbort replace", func(s *State, r string, at metav1.MicroTime) bool { return s.recordAbort(r, at, true) }},
	{"dropAbort", func(s *State, _ string, _ metav1.MicroTime) bool { return s.dropAbort() }},
	{"markEmergency", func(s *State, _ string, _ metav1.MicroTime) bool { return s.markEmergency() }},
}

// TestTransitionsRefuse: on any state, a transition function either makes a
// move the table allows (and reports true) or refuses it and changes
// nothing; none touches the caller's abort record in place, and each keeps
// the hold and the phase consistent: no hold while walking back or
// finished, a hold always with its reason.
func TestTransitionsRefuse(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genState(t)
		tr := rapid.SampledFrom(transitionFuncs).Draw(t, "transition")
		reason := rapid.SampledFrom([]string{"", ReasonManualPause, ReasonPauseStep, ReasonControlPause, ReasonAborted}).Draw(t, "reason")
		at := genTime(t, "at")
		before := *s.DeepCopy()
		var aborted AbortStatus
		if s.Aborted != nil {
			aborted = *s.Aborted
		}
		ok := tr.do(&s, reason, at)
		if s.Aborted != nil && before.Aborted != nil && *before.Aborted != aborted {
			t.Fatalf("%s changed the caller's abort record in place", tr.name)
		}
		if !ok {
			if diff := cmp.Diff(before, s); diff != "" {
				t.Fatalf("%s refused but changed the state (-before +after):\n%s", tr.name, diff)
			}
			return
		}
		if s.Phase != before.Phase && !canBecome(before.Phase, s.Phase) {
			t.Fatalf("%s moved %q to %q, which the table refuses", tr.name, before.Phase, s.Phase)
		}
		if s.AwaitingResume && !before.AwaitingResume && (s.Phase == PhaseAborting || s.Phase.Terminal()) {
			t.Fatalf("%s held a rollout in phase %q", tr.name, s.Phase)
		}
		if s.AwaitingResume && s.PauseReason == "" && before.PauseReason != "" {
			t.Fatalf("%s left a hold without its reason", tr.name)
		}
		if s.Phase == PhaseAborting && before.Phase != PhaseAborting && (s.Aborted == nil || s.AwaitingResume) {
			t.Fatalf("%s started a walk back without an abort record, or held: %+v", tr.name, s)
		}
	})
}

// noRefusals runs f and fails if it attempted a phase transition that the
// table refuses: a decision that the engine would silently drop.
func noRefusals(t *rapid.T, what string, f func()) {
	var bad []string
	refused = func(from, to Phase) { bad = append(bad, fmt.Sprintf("%q -> %q", from, to)) }
	defer func() { refused = nil }()
	f()
	if len(bad) > 0 {
		t.Fatalf("%s attempted transitions the table refuses: %v", what, bad)
	}
}

// TestStepMakesAllowedTransitions: in worlds like TestNeverUnsafe's (every
// strategy and mode, lag, crashes, other writers, commands, time), no Step
// or command on a valid state attempts a transition the table refuses.
func TestStepMakesAllowedTransitions(t *testing.T) {
	rounds(t, 4, func(t *rapid.T) {
		mode := rapid.SampledFrom([]CapacityMode{CapacityManaged, CapacityFixed, CapacityReplicas}).Draw(t, "mode")
		strat := genStrategy(t, mode)
		opts, _ := optionsOf(strat)
		s := NewState("a", "b")
		if rapid.Bool().Draw(t, "drawn") {
			s = genState(t)
		}
		w := genWorld(t, mode, opts.MaxUnavailablePercent)
		w.adopt(&s)
		now := t0
		for i, n := 0, rapid.IntRange(1, 200).Draw(t, "steps"); i < n; i++ {
			valid := s.check(mode, nil)
			switch rapid.IntRange(0, 6).Draw(t, "action") {
			case 0, 1, 2:
				observeWorld(&s, w, now)
				valid = s.check(mode, nil)
				var d Decision
				if valid {
					noRefusals(t, fmt.Sprintf("Step of %+v", s), func() { d = strat.Step(s, now) })
				} else {
					d = strat.Step(s, now)
				}
				w.apply(&d, rapid.IntRange(0, 3).Draw(t, "lag"))
				if d.State.stableSide() != s.stableSide() && (d.State.Phase == PhaseSucceeded || s.Unobserved) {
					w.swap()
				}
				s = d.State
			case 3:
				w.tick()
				worldAction(t, w)
			case 4:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(5*time.Minute)).Draw(t, "advance")))
			default:
				c := rapid.IntRange(0, 6).Draw(t, "command")
				if valid {
					noRefusals(t, fmt.Sprint("command ", c), func() { s, _ = applyCommand(t, c, s, now) })
				} else {
					s, _ = applyCommand(t, c, s, now)
				}
			}
		}
	})
}

// TestOnlyTransitionsWriteThePhase: outside transitions.go (and DeepCopy,
// which copies), no code of the package assigns the phase, the hold or the
// abort record, nor builds an abort record.
func TestOnlyTransitionsWriteThePhase(t *testing.T) {
	guarded := map[string]bool{"Phase": true, "AwaitingResume": true, "PauseReason": true, "PausedAt": true, "Aborted": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "transitions.go" || strings.Contains(name, "deepcopy") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && guarded[sel.Sel.Name] {
						t.Errorf("%s: assigns %s outside transitions.go", fset.Position(n.Pos()), sel.Sel.Name)
					}
				}
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "AbortStatus" {
					t.Errorf("%s: builds an abort record outside transitions.go", fset.Position(n.Pos()))
				}
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "State" {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && guarded[k.Name] {
								t.Errorf("%s: sets %s in a State literal outside transitions.go", fset.Position(kv.Pos()), k.Name)
							}
						}
					}
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked %d files: the package's sources were not found", checked)
	}
}
