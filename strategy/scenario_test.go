package strategy

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the scenarios in testdata/scenarios")

// TestScenarios runs every rollout story in testdata/scenarios: a strategy,
// a world, a script of what happens to the world and when, and below a
// "----" line the timeline the rollout must produce. Run with -rewrite to
// write the timelines the engine produces now (then read the diff).
//
// The format, a line each ('#' starts a comment):
//
//	strategy incremental step=10 interval=1m surge=30 [mode=Fixed|Replicas] [ramp=Gradual|Emergency] [deadline=5m] [abort-on-deadline] [poll=2s]
//	strategy canary surge=50 steps=20,pause:1m,pause,gate:errors,60 [...the same options]
//	strategy bluegreen [...the same options]
//	state v1 v2                     (the rollout it starts from, stable and canary revisions: v1 v2 by default; "state v1" is idle on v1)
//	world [stable-replicas=N] [canary-replicas=N] [lag=N] [revisions=off]
//	                                (lag: observations until a hop or a deploy shows; revisions=off: the sides report none)
//	at 2m30s crash canary 50        (ready capacity lost: crash stable|canary PERCENT)
//	at 2m30s loop canary on|off     (crash-looping: nothing becomes ready)
//	at 1m reject on|off             (a parent rejects the route)
//	at 1m invalid on|off            (another writer leaves an invalid split)
//	at 1m fail on|off               (the adapters stop answering)
//	at 1m health Unhealthy|Healthy
//	at 1m verdict errors Pass|Fail|Inconclusive
//	at 1m redeploy stable|canary REV (someone else deploys REV on a side, or restarts it)
//	at 1m stuck canary on|off       (a deploy on the side never rolls out)
//	at 1m abort|pause|resume|promote|promote-full|retry|suspend|retarget REV
//	at 1m control-suspended on|off  (the spec's Control.Suspended, applied every Step)
//	run 30m                         (simulate until a terminal phase, or this long)
//
// The timeline shows every hop (a deploy included), every change of phase
// (with the reason of an abort, and the physical side that is stable after
// a success) or of the Degraded condition, every change of the
// RollbackInProgress condition ("removed" once it goes), and what the sides are observed
// running when that changes ("observed canary v3 rolling" while a deploy
// rolls out). The world must keep invariants 6 to 8 of the package doc's
// "# Invariants": a scenario fails if the data plane routes traffic to a
// side that does not run its role's revision (but a side someone else
// redeployed, until the engine has reacted) or a deploy lands under traffic.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			script, want, _ := strings.Cut(string(raw), "\n----\n")
			got, err := runScenario(script)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if *rewrite {
				if err := os.WriteFile(file, []byte(script+"\n----\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-want +got), rerun with -rewrite to accept:\n%s", file, diff)
			}
		})
	}
}

type scenarioEvent struct {
	at   time.Duration
	args []string
}

// runScenario plays a script and returns its timeline: one line per hop,
// change of phase, change of the Degraded condition or of the
// RollbackInProgress condition.
func runScenario(script string) (string, error) {
	var (
		strat  Strategy
		w      *world
		lag    int
		events []scenarioEvent
		limit  = time.Hour
		s      = NewState("v1", "v2")
	)
	for n, line := range strings.Split(script, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "strategy":
			strat, err = parseStrategy(f[1:])
		case "state":
			switch {
			case w != nil:
				err = fmt.Errorf("state after world")
			case len(f) == 2:
				s = State{}.Retarget(f[1], t0)
			case len(f) == 3:
				s = NewState(f[1], f[2])
			default:
				err = fmt.Errorf("state takes a stable and a canary revision")
			}
		case "world":
			if strat == nil {
				return "", fmt.Errorf("line %d: world before strategy", n+1)
			}
			w = newWorld(strat.Shared().Capacity, &s)
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				x, perr := strconv.Atoi(v)
				switch {
				case k == "revisions" && v == "off":
					w.noRevisions = true
				case perr != nil:
					err = fmt.Errorf("%s: %v", kv, perr)
				case k == "stable-replicas":
					w.stable.replicas = int32(x)
				case k == "canary-replicas":
					w.canary.replicas = int32(x)
				case k == "lag":
					lag = x
				default:
					err = fmt.Errorf("unknown world option %q", k)
				}
			}
			w.stable.ready = w.stable.readyFor(w.stable.asked)
		case "at":
			var at time.Duration
			if len(f) < 3 {
				err = fmt.Errorf("at needs an instant and an action")
			} else if at, err = time.ParseDuration(f[1]); err == nil {
				events = append(events, scenarioEvent{at: at, args: f[2:]})
			}
		case "run":
			if len(f) == 2 {
				limit, err = time.ParseDuration(f[1])
			}
		default:
			err = fmt.Errorf("unknown directive %q", f[0])
		}
		if err != nil {
			return "", fmt.Errorf("line %d: %v", n+1, err)
		}
	}
	if strat == nil || w == nil {
		return "", fmt.Errorf("a scenario needs a strategy and a world")
	}
	if err := strat.Validate(); err != nil {
		return "", err
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	opts := strat.Shared()
	poll := opts.pollInterval()

	var out strings.Builder
	start := t0
	now := start
	line := func(what string) {
		a := s.Desired
		fmt.Fprintf(&out, "+%s %s (%d,%d) w%d\n", now.Sub(start), what, a.StableCapacity, a.CanaryCapacity, a.Weight)
	}
	degraded := ""
	rollback := scenarioRollback(&s)                            // RollbackInProgress, "" while absent
	phase := s.Phase                                            // the phase the timeline last showed
	runs := [2]string{sideRuns(&w.stable), sideRuns(&w.canary)} // what the sides were last observed running
	breach := func() error {
		if b := w.revisionBreach(&s); b != "" {
			return fmt.Errorf("at %s: %s", now.Sub(start), b)
		}
		return nil
	}
	for steps := 0; now.Sub(start) <= limit; steps++ {
		if steps > 100000 {
			return "", fmt.Errorf("more than 100000 steps")
		}
		for len(events) > 0 && events[0].at <= now.Sub(start) {
			if err := scenarioAct(&s, w, events[0].args, now); err != nil {
				return "", fmt.Errorf("at %s: %v", events[0].at, err)
			}
			line(strings.Join(events[0].args, " "))
			events = events[1:]
		}
		s, _ = s.Control(w.control, now) // the spec's control, on every reconcile
		observeWorld(&s, w, now)
		if !w.noRevisions && !w.failing {
			for i, sd := range []*side{&w.stable, &w.canary} {
				if r := sideRuns(sd); r != runs[i] {
					runs[i] = r
					line("observed " + [2]string{"stable", "canary"}[i] + " " + r)
				}
			}
		}
		d := strat.Step(s, now)
		before := s
		before.Phase = phase // a command may have changed it since the last Step
		s = d.State
		if d.Weight.Set {
			line(fmt.Sprintf("weight %d", d.Weight.Value))
		}
		if d.StableCapacity.Set {
			line(fmt.Sprintf("stable capacity %d", d.StableCapacity.Value))
		}
		if d.Deploy.Set {
			line("deploy " + d.Deploy.Revision)
		}
		if d.CanaryCapacity.Set {
			line(fmt.Sprintf("canary capacity %d", d.CanaryCapacity.Value))
		}
		if s.Phase != before.Phase {
			what := "phase " + string(s.Phase)
			switch {
			case (s.Phase == PhaseAborting || s.Phase == PhaseAborted || s.Phase == PhaseSuspended) && s.Aborted != nil:
				what += " (" + s.Aborted.Reason + ")"
			case s.Phase == PhaseSucceeded:
				what += " (stable side " + string(s.StableSide) + ")"
			}
			line(what)
		}
		phase = s.Phase
		if c := scenarioCondition(&s, ConditionDegraded); c != degraded {
			degraded = c
			line("degraded " + c)
		}
		if c := scenarioRollback(&s); c != rollback {
			rollback = c
			if c == "" {
				line("rollback in progress removed")
			} else {
				line("rollback in progress: " + c)
			}
		}
		w.apply(&d, lag)
		if s.StableSide != before.StableSide {
			w.swap()
			runs[0], runs[1] = runs[1], runs[0]
		}
		if err := breach(); err != nil {
			return "", err
		}
		if s.Phase.Terminal() && len(events) == 0 {
			break
		}
		w.tick()
		if err := breach(); err != nil {
			return "", err
		}
		next := d.RequeueAfter
		if next <= 0 {
			next = poll // nothing timed: look again at the next poll
		}
		if len(events) > 0 && start.Add(events[0].at).Before(now.Add(next)) && start.Add(events[0].at).After(now) {
			next = start.Add(events[0].at).Sub(now)
		}
		now = now.Add(next)
	}
	fmt.Fprintf(&out, "end %s after %s: %s\n", s.Phase, now.Sub(start), s.Message)
	return out.String(), nil
}

// sideRuns is what a side is observed running: its revision, and "rolling"
// until it is fully rolled out ("stuck" too when it never will be).
func sideRuns(sd *side) string {
	r := sd.rev
	if r == "" {
		r = "nothing"
	}
	switch {
	case sd.updated:
	case sd.stuck:
		r += " rolling (stuck)"
	default:
		r += " rolling"
	}
	return r
}

// scenarioRollback is the RollbackInProgress condition as a timeline shows
// it: its status, reason and message, or "" while it is absent.
func scenarioRollback(s *State) string {
	for _, c := range s.Conditions {
		if c.Type == ConditionRollbackInProgress {
			return fmt.Sprintf("%s %s (%s)", c.Status, c.Reason, c.Message)
		}
	}
	return ""
}

func scenarioCondition(s *State, typ string) string {
	for _, c := range s.Conditions {
		if c.Type == typ {
			if c.Status == metav1.ConditionTrue {
				return c.Reason
			}
			return "no"
		}
	}
	return "no"
}

func scenarioAct(s *State, w *world, a []string, now time.Time) error {
	sideOf := func(name string) (*side, error) {
		switch name {
		case "stable":
			return &w.stable, nil
		case "canary":
			return &w.canary, nil
		}
		return nil, fmt.Errorf("side %q: want stable or canary", name)
	}
	onOff := func(v string) (bool, error) {
		switch v {
		case "on":
			return true, nil
		case "off":
			return false, nil
		}
		return false, fmt.Errorf("%q: want on or off", v)
	}
	need := func(n int) error {
		if len(a) != n {
			return fmt.Errorf("%q takes %d arguments", a[0], n-1)
		}
		return nil
	}
	var err error
	switch a[0] {
	case "crash":
		if err = need(3); err == nil {
			var sd *side
			var pct int
			if sd, err = sideOf(a[1]); err == nil {
				if pct, err = strconv.Atoi(a[2]); err == nil {
					sd.crash(int32(pct))
				}
			}
		}
	case "loop":
		if err = need(3); err == nil {
			var sd *side
			if sd, err = sideOf(a[1]); err == nil {
				sd.loop, err = onOff(a[2])
			}
		}
	case "redeploy":
		if err = need(3); err == nil {
			var sd *side
			if sd, err = sideOf(a[1]); err == nil {
				w.redeploy(sd, a[2], 0)
			}
		}
	case "stuck":
		if err = need(3); err == nil {
			var sd *side
			if sd, err = sideOf(a[1]); err == nil {
				sd.stuck, err = onOff(a[2])
			}
		}
	case "reject":
		var on bool
		if err = need(2); err == nil {
			on, err = onOff(a[1])
			w.accepted = !on
		}
	case "invalid":
		if err = need(2); err == nil {
			w.invalid, err = onOff(a[1])
		}
	case "fail":
		if err = need(2); err == nil {
			w.failing, err = onOff(a[1])
		}
	case "health":
		if err = need(2); err == nil {
			w.health = Health(a[1])
		}
	case "verdict":
		if err = need(3); err == nil {
			g := GateResult{Name: a[1], Verdict: Verdict(a[2]), At: micro(now)}
			w.gates = slices.DeleteFunc(w.gates, func(x GateResult) bool { return x.Name == g.Name })
			w.gates = append(w.gates, g) // the latest verdict of each gate
		}
	case "abort":
		*s = s.Abort("scenario", now)
	case "pause":
		*s = s.Pause(now)
	case "resume":
		*s = s.Resume(now)
	case "promote":
		*s = s.Promote(now)
	case "promote-full":
		*s = s.PromoteFull(now)
	case "retry":
		*s = s.Retry(now)
	case "suspend":
		*s = s.Suspend(now)
	case "control-suspended":
		if err = need(2); err == nil {
			var on bool
			if on, err = onOff(a[1]); err == nil {
				w.control.Suspended = on
				*s, _ = s.Control(w.control, now)
			}
		}
	case "retarget":
		if err = need(2); err == nil {
			*s = s.Retarget(a[1], now)
		}
	default:
		err = fmt.Errorf("unknown action %q", a[0])
	}
	return err
}

func parseStrategy(f []string) (Strategy, error) {
	if len(f) == 0 {
		return nil, fmt.Errorf("strategy needs a kind")
	}
	var (
		opts     Options
		step     int32
		surge    int32
		interval time.Duration
		steps    []CanaryStep
	)
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "step", "surge":
			var x int
			x, err = strconv.Atoi(v)
			if k == "step" {
				step = int32(x)
			} else {
				surge = int32(x)
			}
		case "interval":
			interval, err = time.ParseDuration(v)
		case "mode":
			opts.Capacity = CapacityMode(v)
		case "ramp":
			opts.AbortRamp = AbortRamp(v)
		case "deadline":
			opts.ProgressDeadline.Duration, err = time.ParseDuration(v)
		case "abort-on-deadline":
			opts.AbortOnProgressDeadline = true
		case "poll":
			opts.PollInterval.Duration, err = time.ParseDuration(v)
		case "unhealthy":
			opts.UnhealthyAction = UnhealthyAction(v)
		case "steps":
			for _, st := range strings.Split(v, ",") {
				name, arg, _ := strings.Cut(st, ":")
				switch {
				case name == "pause" && arg == "":
					steps = append(steps, PauseUntilResumed())
				case name == "pause":
					var d time.Duration
					if d, err = time.ParseDuration(arg); err == nil {
						steps = append(steps, Pause(d))
					}
				case name == "gate":
					steps = append(steps, Gate(arg))
				default:
					var x int
					if x, err = strconv.Atoi(name); err == nil {
						steps = append(steps, SetWeight(int32(x)))
					}
				}
			}
		default:
			err = fmt.Errorf("unknown option %q", k)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", kv, err)
		}
	}
	switch f[0] {
	case "incremental":
		return Incremental{StepPercent: step, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: surge, Options: opts}, nil
	case "canary":
		return Canary{Steps: steps, MaxSurgePercent: surge, Options: opts}, nil
	case "bluegreen":
		return BlueGreen{Options: opts}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q", f[0])
}
