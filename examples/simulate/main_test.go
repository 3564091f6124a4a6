package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func runSim(t *testing.T, cfg Config) string {
	t.Helper()
	var out bytes.Buffer
	cfg.Speed = 0
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return out.String()
}

var (
	header  = regexp.MustCompile(`(?m)^== (\w+) (v\d+) -> (v\d+) \(plan with instant adapters: (\S+), (\d+) hops\)$`)
	summary = regexp.MustCompile(`(?m)^   (\w+) (?:in (\S+) \(plan with instant adapters: (\S+)\)|at \+(\S+) \((.*)\), walked back in (\S+)), (\d+) hops; (nothing deployed|deployed .*?); peak capacity (\d+) \(100 \+ MaxSurge (\d+)\); requests served (\d+), overloaded (\d+), dropped (\d+)`)
	// progress is a progress line: time, phase, weight, capacity and ready
	// capacity (stable/canary), the weight bar, the event.
	progress = regexp.MustCompile(`^ +\+(\S+)s (\S+) +(\d+) +(\d+)/(\d+) +(\d+)/(\d+) +\[[#.]{20}\] (.*)$`)
)

// rolloutReport is one rollout as the program reports it.
type rolloutReport struct {
	Strategy, From, To string
	Phase              string
	// Took and Plan are set for a rollout that was not aborted; AbortAt,
	// AbortReason and WalkBack for one that was.
	Took, Plan        time.Duration
	AbortAt, WalkBack time.Duration
	AbortReason       string
	// Deploys is the summary's account of the deploys: "deployed v2 on
	// side B (rolled out in 1.5s)".
	Deploys             string
	Peak, MaxSurge      int
	Served              int
	Overloaded, Dropped int
}

// reports reads the header and summary of every rollout in out.
func reports(t *testing.T, out string) []rolloutReport {
	t.Helper()
	hs, ss := header.FindAllStringSubmatch(out, -1), summary.FindAllStringSubmatch(out, -1)
	if len(hs) == 0 || len(hs) != len(ss) {
		t.Fatalf("%d headers and %d summaries:\n%s", len(hs), len(ss), out)
	}
	dur := func(s string) time.Duration {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return d
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	var rs []rolloutReport
	for i, h := range hs {
		s := ss[i]
		rs = append(rs, rolloutReport{
			Strategy: h[1], From: h[2], To: h[3], Phase: s[1],
			Took: dur(s[2]), Plan: dur(s[3]), AbortAt: dur(s[4]), AbortReason: s[5], WalkBack: dur(s[6]),
			Deploys: s[8], Peak: num(s[9]), MaxSurge: num(s[10]), Served: num(s[11]), Overloaded: num(s[12]), Dropped: num(s[13]),
		})
	}
	return rs
}

// progressLine is one progress line of a rollout.
type progressLine struct {
	Phase                  string
	Weight, Stable, Canary int
	Event                  string
}

// rolloutLines splits out into the progress lines of each rollout, in the
// order of the headers, and fails on a line between a header and its
// summary that is not a progress line.
func rolloutLines(t *testing.T, out string) [][]progressLine {
	t.Helper()
	var all [][]progressLine
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case header.MatchString(line):
			all, in = append(all, nil), true
		case summary.MatchString(line):
			in = false
		case in && strings.HasPrefix(strings.TrimSpace(line), "time "):
		case in:
			m := progress.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("not a progress line: %q", line)
			}
			num := func(s string) int { n, _ := strconv.Atoi(s); return n }
			all[len(all)-1] = append(all[len(all)-1], progressLine{Phase: m[2], Weight: num(m[3]),
				Stable: num(m[4]), Canary: num(m[5]), Event: m[8]})
		}
	}
	return all
}

// checkDeploys checks the deploy hops of every rollout in out: each is
// shown at weight 0 and canary capacity 0, and one of the rollout's target
// revision comes before any weight hop.
func checkDeploys(t *testing.T, out string) {
	t.Helper()
	hs := header.FindAllStringSubmatch(out, -1)
	for i, lines := range rolloutLines(t, out) {
		deployed := false
		for _, l := range lines {
			if strings.HasPrefix(l.Event, "asked: deploy ") {
				if l.Weight != 0 || l.Canary != 0 {
					t.Errorf("%s: %q at weight %d and canary capacity %d: want 0 and 0", hs[i][0], l.Event, l.Weight, l.Canary)
				}
				if strings.HasPrefix(l.Event, "asked: deploy "+hs[i][3]+" on side ") {
					deployed = true
				}
			}
			if strings.HasPrefix(l.Event, "asked: weight ") && !deployed {
				t.Errorf("%s: %q before the deploy of %s", hs[i][0], l.Event, hs[i][3])
			}
		}
	}
}

// TestDefaultRun is the README's main command: both rollouts succeed with no
// request dropped and a peak capacity of exactly 100 + MaxSurge, and the
// summaries say what the plan assumes. Each rollout first deploys its
// revision on the canary side (v2 on side B, then v3 on side A, as the
// sides swap roles), waits until it is rolled out, and only then moves
// capacity and weight to it.
func TestDefaultRun(t *testing.T) {
	out := runSim(t, defaultConfig())
	rs := reports(t, out)
	for i := range rs {
		if rs[i].Served == 0 || rs[i].Took <= rs[i].Plan {
			t.Errorf("%s: served %d in %s against a plan of %s: want requests served and the adapters' lag on top of the plan",
				rs[i].Strategy, rs[i].Served, rs[i].Took, rs[i].Plan)
		}
		rs[i].Served, rs[i].Took = 0, 0
	}
	want := []rolloutReport{
		{Strategy: "incremental", From: "v1", To: "v2", Phase: "Succeeded", Plan: 18 * time.Second, Peak: 110, MaxSurge: 20,
			Deploys: "deployed v2 on side B (rolled out in 1.5s)"},
		{Strategy: "canary", From: "v2", To: "v3", Phase: "Succeeded", Plan: 7 * time.Second, Peak: 120, MaxSurge: 20,
			Deploys: "deployed v3 on side A (rolled out in 1.5s)"},
	}
	if diff := cmp.Diff(want, rs); diff != "" {
		t.Errorf("rollouts (-want +got):\n%s\n%s", diff, out)
	}
	// The deploy hops, in order, each before any weight hop of its rollout
	// and shown like the other hops.
	if i, j := strings.Index(out, "asked: deploy v2 on side B"), strings.Index(out, "asked: deploy v3 on side A"); i < 0 || j < i {
		t.Errorf("want the deploy of v2 on side B, then of v3 on side A:\n%s", out)
	}
	checkDeploys(t, out)
	for i, lines := range rolloutLines(t, out) {
		rev, side := []string{"v2", "v3"}[i], []string{"B", "A"}[i]
		var events []string
		for _, l := range lines {
			if !strings.HasPrefix(l.Event, "asked: weight ") {
				events = append(events, l.Event)
				continue
			}
			if diff := cmp.Diff([]string{"asked: deploy " + rev + " on side " + side, rev + " rolled out on side " + side,
				"asked: canary capacity " + []string{"10", "20"}[i] + " (side " + side + ")"}, events); diff != "" { // what the first weight needs
				t.Errorf("%s: the events before the first weight hop (-want +got):\n%s", rs[i].Strategy, diff)
			}
			break
		}
		if lines[0].Phase != "Progressing" || lines[0].Stable != 100 || lines[0].Canary != 0 || lines[0].Weight != 0 {
			t.Errorf("%s: the deploy shown at %+v: want Progressing, weight 0, capacity 100/0", rs[i].Strategy, lines[0])
		}
	}
	if !strings.Contains(out, "resumed") || !strings.Contains(out, "paused by a step") {
		t.Errorf("the canary's pauses are not shown:\n%s", out)
	}
}

// TestEveryFlagCombination runs the main job for every -strategy, with and
// without -faults, with no abort and with -abort-at early (during the
// deploy), mid-rollout and late (for the incremental rollout: during
// completion) under every -abort-ramp. Every run must exit cleanly: the
// expected phase, no request dropped or overloaded (but for an emergency
// abort, which may on purpose), capacity within the strategy's own surge
// budget (bluegreen: 100), no deploy on a side that serves or holds
// capacity (a violation the fake sides record exits 1), and each
// rollout's deploy shown before any weight hop. The
// runs that hit the engine's known emergency-abort bug (see the skip below)
// are skipped by that symptom only; any other failure fails.
func TestEveryFlagCombination(t *testing.T) {
	strategies := map[string][]string{
		"all":         {"incremental", "canary"},
		"incremental": {"incremental"},
		"canary":      {"canary"},
		"bluegreen":   {"bluegreen"},
	}
	budget := map[string]int{"incremental": 20, "canary": 20, "bluegreen": 100}
	// The surge a rollout that is not aborted spends at its peak: the
	// incremental's capacity is asked for one weight step (10) at a time.
	peak := map[string]int{"incremental": 110, "canary": 120, "bluegreen": 200}
	for _, name := range []string{"all", "incremental", "canary", "bluegreen"} {
		for _, faults := range []bool{false, true} {
			base := defaultConfig()
			base.Strategy, base.Faults = name, faults
			// How long each rollout takes when nothing aborts it: an abort
			// requested later finds it finished.
			var took []time.Duration
			for _, r := range reports(t, runSim(t, base)) {
				took = append(took, r.Took)
			}
			for _, abortAt := range []time.Duration{0, time.Second, 6 * time.Second, 12 * time.Second, 28 * time.Second} {
				for _, ramp := range []string{"immediate", "gradual", "emergency"} {
					if abortAt == 0 && ramp != "immediate" {
						continue // the ramp matters only to an abort
					}
					t.Run(fmt.Sprintf("%s/faults=%t/abort-at=%s/%s", name, faults, abortAt, ramp), func(t *testing.T) {
						cfg := base
						cfg.AbortAt, cfg.AbortRamp = abortAt, ramp
						var out bytes.Buffer
						cfg.Speed = 0
						err := run(context.Background(), cfg, &out)
						if err != nil {
							t.Fatalf("exit status 1: %v\n%s", err, out.String())
						}
						var got, want []rolloutReport
						for i, r := range reports(t, out.String()) {
							g := rolloutReport{Strategy: r.Strategy, Phase: r.Phase, MaxSurge: r.MaxSurge,
								AbortAt: r.AbortAt, AbortReason: r.AbortReason,
								Peak: r.Peak, Overloaded: r.Overloaded, Dropped: r.Dropped}
							w := rolloutReport{Strategy: strategies[name][i], Phase: "Succeeded", MaxSurge: budget[strategies[name][i]],
								Peak: peak[strategies[name][i]]}
							if faults { // a side that lost replicas is asked for more, within the budget
								w.Peak = min(g.Peak, 100+budget[strategies[name][i]])
							}
							if abortAt > 0 && abortAt < took[i] {
								w.Phase, w.AbortAt, w.AbortReason = "Aborted", abortAt, "requested by -abort-at"
								// An early abort need not reach the peak; a walk
								// back may spend the whole budget growing the
								// stable side back.
								w.Peak = min(g.Peak, 100+budget[strategies[name][i]])
							}
							if ramp == "emergency" {
								w.Overloaded, w.Dropped = g.Overloaded, g.Dropped
							}
							got, want = append(got, g), append(want, w)
						}
						if diff := cmp.Diff(want, got); diff != "" {
							t.Errorf("rollouts (-want +got):\n%s\n%s", diff, out.String())
						}
						checkDeploys(t, out.String())
						for _, line := range strings.Split(out.String(), "\n") {
							if strings.Contains(line, "rollout:") || strings.Contains(line, "capacity steady") {
								t.Errorf("stutter or jargon: %q", line)
							}
						}
					})
				}
			}
		}
	}
}

// TestAbortSummary: an aborted rollout is not compared with the full plan;
// the summary says when it was aborted and how long the walk back took.
func TestAbortSummary(t *testing.T) {
	for _, ramp := range []string{"immediate", "gradual"} {
		cfg := defaultConfig()
		cfg.Strategy, cfg.AbortAt, cfg.Faults, cfg.AbortRamp = "incremental", 12*time.Second, true, ramp
		out := runSim(t, cfg)
		rs := reports(t, out)
		r := rs[0]
		if r.Phase != "Aborted" || r.AbortAt != 12*time.Second || r.WalkBack <= 0 || r.Plan != 0 || r.Dropped != 0 || r.Overloaded != 0 {
			t.Errorf("%s: want aborted at 12s, walked back in some time, no plan, nothing dropped; got %+v", ramp, r)
		}
		if !strings.Contains(out, "faults injected") {
			t.Errorf("%s: faults not reported", ramp)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []Config{
		func() Config { c := defaultConfig(); c.Strategy = "bogus"; return c }(),
		func() Config { c := defaultConfig(); c.Step = 0; return c }(),
		func() Config { c := defaultConfig(); c.AbortRamp = "sideways"; return c }(),
		func() Config { c := defaultConfig(); c.Replicas = 0; return c }(),
		func() Config { c := defaultConfig(); c.CanaryErrors = -0.1; return c }(),
		func() Config { c := defaultConfig(); c.CanaryErrors = 1.5; return c }(),
		func() Config { c := defaultConfig(); c.CanaryErrors = math.NaN(); return c }(),
	} {
		if err := run(context.Background(), cfg, io.Discard); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}

// TestCheck: the surge budget is the strategy's own, and each problem is
// named.
func TestCheck(t *testing.T) {
	sim := &simulation{}
	for _, tc := range []struct {
		name       string
		res        result
		peak       int32 // PeakCapacity
		dropped    int64
		abortAsked bool
		want       []string
	}{
		{name: "bluegreen at its budget", res: result{name: "bluegreen", phase: strategy.PhaseSucceeded, surge: 100}, peak: 200},
		{name: "aborted on request", abortAsked: true, res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20}, peak: 120},
		{name: "aborted unasked", res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20}, peak: 120,
			want: []string{"canary: ended Aborted"}},
		{name: "over budget", res: result{name: "incremental", phase: strategy.PhaseSucceeded, surge: 20}, peak: 121,
			want: []string{"incremental: peak capacity 121 exceeds its surge budget (100 + 20)"}},
		{name: "dropped", res: result{name: "canary", phase: strategy.PhaseSucceeded, surge: 20}, peak: 120, dropped: 3,
			want: []string{"canary: 3 requests dropped and 0 overloaded"}},
		{name: "dropped in an emergency abort", abortAsked: true, peak: 120, dropped: 3,
			res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20, emergency: true}},
		{name: "deployed under traffic", peak: 120, res: result{name: "incremental", phase: strategy.PhaseSucceeded, surge: 20,
			violations: []string{`side B: deploy "v2" over "" at capacity 0 (0 of 10 replicas wanted) while serving 10% of traffic`}},
			want: []string{`incremental: side B: deploy "v2" over "" at capacity 0 (0 of 10 replicas wanted) while serving 10% of traffic`}},
		{name: "aborted by the analysis", peak: 120, res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20,
			expect: expectAnalysisAbort, aborted: true, abortReason: strategy.ReasonUnhealthy}},
		{name: "aborted by a failed gate", peak: 120, res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20,
			expect: expectAnalysisAbort, aborted: true, abortReason: strategy.ReasonGateFailed}},
		{name: "aborted on request before the analysis", abortAsked: true, peak: 120, res: result{name: "canary", phase: strategy.PhaseAborted,
			surge: 20, expect: expectAnalysisAbort, aborted: true, abortReason: "requested by -abort-at"}},
		{name: "aborted, not by the analysis", peak: 120, res: result{name: "canary", phase: strategy.PhaseAborted, surge: 20,
			expect: expectAnalysisAbort, aborted: true, abortReason: strategy.ReasonProgressDeadlineExceeded},
			want: []string{"canary: aborted (ProgressDeadlineExceeded), not by the analysis"}},
		{name: "let through by the analysis", peak: 120, res: result{name: "incremental", phase: strategy.PhaseSucceeded, surge: 20,
			expect: expectAnalysisAbort, canaryErrors: 0.1},
			want: []string{"incremental: ended Succeeded: the analysis should have aborted a canary failing 10% of its requests"}},
		{name: "next to the threshold, succeeded", peak: 120, res: result{name: "incremental", phase: strategy.PhaseSucceeded, surge: 20,
			expect: expectEither}},
		{name: "next to the threshold, aborted", peak: 120, res: result{name: "incremental", phase: strategy.PhaseAborted, surge: 20,
			expect: expectEither, aborted: true, abortReason: strategy.ReasonUnhealthy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			res.stats.PeakCapacity, res.stats.Dropped = tc.peak, tc.dropped
			if diff := cmp.Diff(tc.want, sim.check(&res, tc.abortAsked)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestSurgeBudget(t *testing.T) {
	for _, tc := range []struct {
		s    strategy.Strategy
		want int32
	}{
		{strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}, 30},
		{strategy.Canary{MaxSurgePercent: 25}, 25},
		{strategy.BlueGreen{}, 100},
	} {
		if got := surgeBudget(tc.s); got != tc.want {
			t.Errorf("%T: surge budget %d, want %d", tc.s, got, tc.want)
		}
	}
}

// TestDescribeError: an adapter failure names the adapter and the hop once,
// then the cause down the chain, with no repeated prefix.
func TestDescribeError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{
			name: "route conflict",
			err: &rollout.AdapterError{Adapter: "router", Op: "set weights", Hop: "weight 30 (A=70 B=30)",
				Err: fmt.Errorf("route update: %w", rollout.ErrConflict)},
			want: "router: could not apply weight 30 (A=70 B=30): route update: conflict",
		},
		{
			name: "capacity",
			err: &rollout.AdapterError{Adapter: "capacity B", Op: "set capacity", Hop: "canary capacity 0 (side B)",
				Err: errors.New("backend answered 503")},
			want: "side B: could not apply canary capacity 0: backend answered 503",
		},
		{
			name: "steady",
			err: &rollout.AdapterError{Adapter: "capacity A", Op: "set capacity", Hop: "canary capacity steady (side A)",
				Err: errors.New("backend answered 503")},
			want: "side A: could not apply canary back to its steady state (full capacity, nothing pinned): backend answered 503",
		},
		{
			name: "deploy",
			err: &rollout.AdapterError{Adapter: "revision B", Op: "deploy", Hop: "deploy v2 on side B",
				Err: errors.New("backend answered 503")},
			want: "side B: could not deploy v2: backend answered 503",
		},
		{
			name: "read revision",
			err: &rollout.AdapterError{Adapter: "revision A", Op: "read revision",
				Err: fmt.Errorf("get deployment shop/web-a: %w", rollout.ErrNotFound)},
			want: "side A: could not read revision: get deployment shop/web-a: not found",
		},
		{
			name: "read",
			err: &rollout.AdapterError{Adapter: "router", Op: "read weights",
				Err: fmt.Errorf("get route shop/web: %w", rollout.ErrNotFound)},
			want: "router: could not read weights: get route shop/web: not found",
		},
		{
			name: "permanent, detail after the sentinel",
			err: &rollout.AdapterError{Adapter: "router", Op: "set weights", Hop: "weight 10 (A=90 B=10)",
				Err: rollout.Permanent(fmt.Errorf("update: %w: route shop/web", rollout.ErrNotFound))},
			want: "router: could not apply weight 10 (A=90 B=10): update: not found: route shop/web",
		},
		{
			name: "detail run on after the sentinel",
			err: &rollout.AdapterError{Adapter: "capacity A", Op: "set capacity", Hop: "stable capacity 120 (side A)",
				Err: rollout.Permanent(fmt.Errorf("%w capacity request: Percent 120: must be 0..100", errors.New("rollout: invalid")))},
			want: "side A: could not apply stable capacity 120: invalid capacity request: Percent 120: must be 0..100",
		},
		{
			name: "a wrapper with its own rendering",
			err:  &rollout.AdapterError{Adapter: "health", Op: "read health", Err: wrapped{errors.New("timeout")}},
			want: "health: could not read health: probe failed (timeout)",
		},
		{
			name: "wrapped twice",
			err: fmt.Errorf("reconcile: %w", &rollout.AdapterError{Adapter: "store", Op: "load",
				Err: fmt.Errorf("read annotation: %w", fmt.Errorf("decode: %w", errors.New("unexpected EOF")))}),
			want: "store: could not load: read annotation: decode: unexpected EOF",
		},
		{
			name: "unknown hop rendering",
			err:  &rollout.AdapterError{Adapter: "router", Op: "set weights", Hop: "something new", Err: errors.New("x")},
			want: "router: could not apply something new: x",
		},
		{
			name: "not an adapter's",
			err:  fmt.Errorf("step: %w", errors.New("boom")),
			want: "step: boom",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, describeError(tc.err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// wrapped renders its cause in its own words.
type wrapped struct{ err error }

func (w wrapped) Error() string { return "probe failed (" + w.err.Error() + ")" }
func (w wrapped) Unwrap() error { return w.err }

func TestHopText(t *testing.T) {
	for _, tc := range []struct {
		hop      rollout.Hop
		withSide bool
		want     string
	}{
		{rollout.Hop{Kind: rollout.HopWeight, Role: "canary", Side: "B", Value: 30, Weights: rollout.Weights{A: 70, B: 30}}, true,
			"weight 30 (A=70 B=30)"},
		{rollout.Hop{Kind: rollout.HopCapacity, Role: "stable", Side: "A", Value: 80}, true, "stable capacity 80 (side A)"},
		{rollout.Hop{Kind: rollout.HopCapacity, Role: "stable", Side: "A", Value: 80}, false, "stable capacity 80"},
		{rollout.Hop{Kind: rollout.HopCapacity, Role: "canary", Side: "B", Value: 100, Steady: true}, true,
			"canary side B back to its steady state (full capacity, nothing pinned)"},
		{rollout.Hop{Kind: rollout.HopDeploy, Role: "canary", Side: "A", Revision: "v3"}, true, "deploy v3 on side A"},
		{rollout.Hop{Kind: rollout.HopDeploy, Role: "canary", Side: "A", Revision: "v3"}, false, "deploy v3"},
	} {
		if diff := cmp.Diff(tc.want, hopText(tc.hop, tc.withSide)); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.hop, diff)
		}
		// What rollout.Hop.String renders reads back as the same hop.
		h, ok := parseHop(tc.hop.String())
		if !ok {
			t.Errorf("%q does not parse", tc.hop.String())
		} else if diff := cmp.Diff(hopText(tc.hop, true), hopText(h, true)); diff != "" {
			t.Errorf("%q read back (-want +got):\n%s", tc.hop.String(), diff)
		}
	}
}

// svgDoc is the part of the timeline plot the tests read.
type svgDoc struct {
	XMLName   xml.Name `xml:"svg"`
	Title     string   `xml:"title"`
	Polylines []struct {
		Name    string `xml:"data-name,attr"`
		Points  string `xml:"points,attr"`
		Dash    string `xml:"stroke-dasharray,attr"`
		Stroke  string `xml:"stroke,attr"`
		Width   string `xml:"stroke-width,attr"`
		Opacity string `xml:"stroke-opacity,attr"`
	} `xml:"polyline"`
	Rects []struct {
		Class string  `xml:"class,attr"`
		Width float64 `xml:"width,attr"`
	} `xml:"rect"`
	Lines []struct {
		Class string  `xml:"class,attr"`
		X1    float64 `xml:"x1,attr"`
		X2    float64 `xml:"x2,attr"`
		Y1    float64 `xml:"y1,attr"`
		Y2    float64 `xml:"y2,attr"`
	} `xml:"line"`
	Texts []struct {
		Class string `xml:"class,attr"`
		Text  string `xml:",chardata"`
	} `xml:"text"`
}

// TestSVG parses the -svg plot and checks its structure: the series in
// drawing order (the weight last, on top, thinner than the capacity bands
// under it; ready capacity dashed), pauses shaded and in the legend only
// when there was a pause, a vertical marker with its label at each deploy,
// shaded until the revision is rolled out, and a vertical abort marker with
// its label only when the rollout was aborted.
func TestSVG(t *testing.T) {
	type series struct {
		Name   string
		Dashed bool
		Band   bool // wide and translucent
	}
	allSeries := []series{
		{"stable capacity", false, true},
		{"canary capacity", false, true},
		{"stable ready", true, false},
		{"canary ready", true, false},
		{"canary weight", false, false},
	}
	type shape struct {
		Series       []series
		Pauses       int
		Legend       []string
		Deploying    int
		DeployLines  int
		DeployLabels []string
		AbortLines   int
		AbortLabels  []string
	}
	seriesLegend := []string{"canary weight", "stable capacity", "stable ready", "canary capacity", "canary ready"}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want shape
	}{
		{
			name: "canary with two pauses",
			cfg:  func(c *Config) { c.Strategy = "canary" },
			want: shape{Series: allSeries, Pauses: 2, Legend: append(seriesLegend[:5:5], "paused", "deploy", "deploying"),
				Deploying: 1, DeployLines: 1, DeployLabels: []string{"deploy v2 on side B at 0.0s"}},
		},
		{
			name: "incremental, aborted",
			cfg:  func(c *Config) { c.Strategy, c.AbortAt = "incremental", 12*time.Second },
			want: shape{Series: allSeries, Legend: append(seriesLegend[:5:5], "deploy", "deploying", "abort"),
				Deploying: 1, DeployLines: 1, DeployLabels: []string{"deploy v2 on side B at 0.0s"},
				AbortLines: 1, AbortLabels: []string{"abort at 12.0s"}},
		},
		{
			name: "bluegreen",
			cfg:  func(c *Config) { c.Strategy = "bluegreen" },
			want: shape{Series: allSeries, Legend: append(seriesLegend[:5:5], "deploy", "deploying"),
				Deploying: 1, DeployLines: 1, DeployLabels: []string{"deploy v2 on side B at 0.0s"}},
		},
		{
			name: "all: the last rollout's deploy, with faults",
			cfg:  func(c *Config) { c.Faults = true },
			want: shape{Series: allSeries, Pauses: 2, Legend: append(seriesLegend[:5:5], "paused", "deploy", "deploying"),
				Deploying: 1, DeployLines: 1, DeployLabels: []string{"deploy v3 on side A at 0.5s"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.svg")
			cfg := defaultConfig()
			tc.cfg(&cfg)
			cfg.SVG = path
			runSim(t, cfg)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var doc svgDoc
			if err := xml.Unmarshal(data, &doc); err != nil {
				t.Fatalf("not well-formed XML: %v", err)
			}
			if doc.XMLName.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("namespace %q", doc.XMLName.Space)
			}
			var got shape
			for _, p := range doc.Polylines {
				w, _ := strconv.ParseFloat(p.Width, 64)
				got.Series = append(got.Series, series{p.Name, p.Dash != "", w >= 4 && p.Opacity != ""})
				checkPoints(t, p.Name, p.Points)
			}
			for _, r := range doc.Rects {
				switch r.Class {
				case "pause":
					got.Pauses++
				case "deploying":
					got.Deploying++
					if r.Width <= 0 {
						t.Errorf("deploy band of width %v", r.Width)
					}
				}
			}
			for _, l := range doc.Lines {
				switch l.Class {
				case "abort":
					got.AbortLines++
				case "deploy":
					got.DeployLines++
				default:
					continue
				}
				if l.X1 != l.X2 || l.Y1 >= l.Y2 {
					t.Errorf("%s marker not vertical: %+v", l.Class, l)
				}
			}
			for _, tx := range doc.Texts {
				switch tx.Class {
				case "legend":
					got.Legend = append(got.Legend, tx.Text)
				case "deploy":
					got.DeployLabels = append(got.DeployLabels, tx.Text)
				case "abort":
					got.AbortLabels = append(got.AbortLabels, tx.Text)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plot (-want +got):\n%s", diff)
			}
			// The weight is drawn in its own colour.
			colours := map[string]string{}
			for _, p := range doc.Polylines {
				colours[p.Name] = p.Stroke
			}
			for name, c := range colours {
				if name != "canary weight" && c == colours["canary weight"] {
					t.Errorf("%s has the weight's colour %s", name, c)
				}
			}
			if bytes.Contains(data, []byte("<script")) || bytes.Contains(data, []byte("href")) {
				t.Errorf("the SVG is not self-contained")
			}
		})
	}
}

func checkPoints(t *testing.T, name, points string) {
	t.Helper()
	pts := strings.Fields(points)
	if len(pts) < 10 {
		t.Errorf("series %q has %d points", name, len(pts))
	}
	for _, pt := range pts {
		xy := strings.Split(pt, ",")
		if len(xy) != 2 {
			t.Fatalf("series %q: bad point %q", name, pt)
		}
		for _, v := range xy {
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				t.Fatalf("series %q: bad coordinate %q", name, v)
			}
		}
	}
}

// TestDeploysAtZero runs each strategy, with and without faults, and reads
// the fake sides themselves: the Runner deployed each revision once on the
// canary side (with faults, after a failed attempt), each deploy rolled out
// before the rollout succeeded, the sides run the revisions of their roles
// afterwards, and no side recorded a deploy while serving or holding
// capacity.
func TestDeploysAtZero(t *testing.T) {
	for _, name := range []string{"all", "incremental", "canary", "bluegreen"} {
		for _, faults := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/faults=%t", name, faults), func(t *testing.T) {
				cfg := defaultConfig()
				cfg.Strategy, cfg.Faults, cfg.Speed = name, faults, 0
				var out bytes.Buffer
				sim, err := newSimulation(cfg, &out)
				if err != nil {
					t.Fatal(err)
				}
				names := []string{name}
				if name == "all" {
					names = []string{"incremental", "canary"}
				}
				for i, n := range names {
					rev := fmt.Sprintf("v%d", i+2)
					canary := sim.side.Other()
					res, err := sim.rollout(context.Background(), n, rev)
					if err != nil {
						t.Fatal(err)
					}
					if len(res.problems) > 0 {
						t.Errorf("%s: problems %q", n, res.problems)
					}
					want := []deploy{{revision: rev, side: canary, rolledOut: true}}
					var got []deploy
					for _, d := range res.deploys {
						got = append(got, deploy{revision: d.revision, side: d.side, rolledOut: d.rolledOut && d.rolledOutAt > d.at})
					}
					if diff := cmp.Diff(want, got, cmp.AllowUnexported(deploy{})); diff != "" {
						t.Errorf("%s: deploys (-want +got):\n%s", n, diff)
					}
					if got := sim.capacity(canary).RevisionStatus(); got.Revision != rev || !got.Updated {
						t.Errorf("%s: side %s runs %+v, want %s rolled out", n, canary, got, rev)
					}
				}
				calls := 0
				for _, c := range []*fake.Capacity{sim.a, sim.b} {
					calls += c.Deploys()
					if v := c.Violations(); v != nil {
						t.Errorf("violations: %q", v)
					}
				}
				if want := len(names); calls != want {
					t.Errorf("%d deploys reached the sides, want %d", calls, want)
				}
			})
		}
	}
}

// TestDeployViolation: a deploy on a side that serves traffic is a
// problem, and makes the program exit 1.
func TestDeployViolation(t *testing.T) {
	cfg := defaultConfig()
	cfg.Strategy, cfg.Speed = "incremental", 0
	sim, err := newSimulation(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sim.b.ServingFunc(func() int32 { return 10 }) // side B pretends to serve
	res, err := sim.rollout(context.Background(), "incremental", "v2")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`incremental: side B: deploy "v2" over "" at capacity 0 (0 of 10 replicas wanted) while serving 10% of traffic`}
	if diff := cmp.Diff(want, res.problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// failures is the line under a summary with -analysis or -canary-errors:
// the requests sent and failed, the new revision's error rate, when the
// first request failed, and how long after it the analysis aborted, or
// that it let the rollout through.
var failures = regexp.MustCompile(`(?m)^   requests sent (\d+), failed (\d+)(?: \((v\d+) answers (\S+) of its requests with a 500\))?(?:; the first failed at \+(\S+))?(?:, the analysis aborted (\S+) after it: (.*)|; (the analysis let it through))?$`)

// analysisReport is what the failures line says of a rollout.
type analysisReport struct {
	Sent, Failed int
	Revision     string
	ErrorRate    string
	FirstFailure time.Duration // -1: none
	ToAbort      time.Duration // -1: not aborted by the analysis
	Why          string
	Through      bool
}

func analysisReports(t *testing.T, out string) []analysisReport {
	t.Helper()
	var rs []analysisReport
	for _, m := range failures.FindAllStringSubmatch(out, -1) {
		dur := func(s string) time.Duration {
			if s == "" {
				return -1
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("duration %q: %v", s, err)
			}
			return d
		}
		num := func(s string) int { n, _ := strconv.Atoi(s); return n }
		rs = append(rs, analysisReport{Sent: num(m[1]), Failed: num(m[2]), Revision: m[3], ErrorRate: m[4],
			FirstFailure: dur(m[5]), ToAbort: dur(m[6]), Why: m[7], Through: m[8] != ""})
	}
	return rs
}

// TestAnalysis runs -analysis for every strategy, with and without faults:
// a new revision that fails 10% of its requests is aborted by the analysis
// alone (the success rate under 95% fails two evaluations a second apart),
// within a few seconds of its first failed request and before the
// rollout's first step is over; one that fails none, or 2%, is let through
// (for the canary, its gate passes too). The failures line reports the
// requests, and the default run prints none of it.
func TestAnalysis(t *testing.T) {
	strategies := map[string][]string{"all": {"incremental", "canary"}, "bluegreen": {"bluegreen"}}
	for _, name := range []string{"all", "bluegreen"} {
		for _, faults := range []bool{false, true} {
			for _, errorRate := range []float64{0.1, 0, 0.02} {
				t.Run(fmt.Sprintf("%s/faults=%t/errors=%v", name, faults, errorRate), func(t *testing.T) {
					cfg := defaultConfig()
					cfg.Strategy, cfg.Faults, cfg.Analysis, cfg.CanaryErrors = name, faults, true, errorRate
					out := runSim(t, cfg)
					rs, as := reports(t, out), analysisReports(t, out)
					if len(as) != len(rs) || len(rs) != len(strategies[name]) {
						t.Fatalf("%d rollouts and %d failures lines, want %d:\n%s", len(rs), len(as), len(strategies[name]), out)
					}
					for i, r := range rs {
						a := as[i]
						if a.Sent != r.Served+r.Overloaded+r.Dropped || r.Overloaded+r.Dropped != 0 {
							t.Errorf("%s: %d requests sent, %d served, %d overloaded, %d dropped", r.Strategy, a.Sent, r.Served, r.Overloaded, r.Dropped)
						}
						if errorRate == 0 {
							if r.Phase != "Succeeded" || !a.Through || a.Failed != 0 || a.FirstFailure != -1 || a.Revision != "" {
								t.Errorf("%s: a healthy canary: got %+v, %+v", r.Strategy, r, a)
							}
							continue
						}
						if a.Revision != r.To || a.ErrorRate != strconv.FormatFloat(errorRate*100, 'f', -1, 64)+"%" || a.Failed == 0 || a.FirstFailure <= 0 {
							t.Errorf("%s: got %+v", r.Strategy, a)
						}
						if errorRate < 1-minSuccess {
							if r.Phase != "Succeeded" || !a.Through {
								t.Errorf("%s: a canary failing %v of its requests: got %+v, %+v\n%s", r.Strategy, errorRate, r, a, out)
							}
							continue
						}
						if r.Phase != "Aborted" || r.AbortReason != strategy.ReasonUnhealthy || a.Through {
							t.Errorf("%s: got %+v, %+v: want aborted as unhealthy\n%s", r.Strategy, r, a, out)
							continue
						}
						// Two evaluations (a second apart, 3s windows, trailing the
						// clock by 2s) must fail after the first failed request.
						if a.ToAbort < 3*time.Second || a.ToAbort > 6*time.Second || r.AbortAt != a.FirstFailure+a.ToAbort {
							t.Errorf("%s: first failure at %s, aborted at %s, %s after it: want 3 to 6s", r.Strategy, a.FirstFailure, r.AbortAt, a.ToAbort)
						}
						if !strings.HasPrefix(a.Why, "success-rate Fail (2 of ") || !strings.HasSuffix(a.Why, "failed (limit 1): 0.9, 0.9)") {
							t.Errorf("%s: the analysis said %q", r.Strategy, a.Why)
						}
						// A tenth of the canary's requests failed, which are a
						// share of all.
						if a.Failed*10 > a.Sent {
							t.Errorf("%s: %d of %d requests failed", r.Strategy, a.Failed, a.Sent)
						}
					}
					lines := rolloutLines(t, out)
					for i, r := range rs {
						var health, gates []string
						for _, l := range lines[i] {
							if strings.HasPrefix(l.Event, "health ") {
								health = append(health, strings.SplitN(l.Event, ":", 2)[0])
							}
							if strings.HasPrefix(l.Event, "gate ") {
								gates = append(gates, l.Event)
							}
						}
						wantHealth := []string{"health Inconclusive", "health Healthy"}
						if r.Phase == "Aborted" {
							wantHealth = []string{"health Inconclusive", "health Unhealthy"}
						}
						if diff := cmp.Diff(wantHealth, health); diff != "" {
							t.Errorf("%s: the health shown (-want +got):\n%s", r.Strategy, diff)
						}
						var wantGates []string
						if r.Strategy == "canary" && r.Phase == "Succeeded" {
							wantGates = []string{"gate success-rate: Pass"}
						}
						if diff := cmp.Diff(wantGates, gates); diff != "" {
							t.Errorf("%s: the gates shown (-want +got):\n%s", r.Strategy, diff)
						}
					}
					checkDeploys(t, out)
				})
			}
		}
	}
	if out := runSim(t, defaultConfig()); failures.MatchString(out) || strings.Contains(out, "health ") || strings.Contains(out, "gate ") {
		t.Errorf("the default run shows the analysis:\n%s", out)
	}
}

// TestCanaryErrorsWithoutAnalysis: without -analysis nothing watches the
// canary: a new revision that fails 30% of its requests succeeds, and the
// failures are reported.
func TestCanaryErrorsWithoutAnalysis(t *testing.T) {
	cfg := defaultConfig()
	cfg.Strategy, cfg.CanaryErrors = "incremental", 0.3
	out := runSim(t, cfg)
	rs, as := reports(t, out), analysisReports(t, out)
	if len(rs) != 1 || len(as) != 1 || rs[0].Phase != "Succeeded" || as[0].Failed == 0 || as[0].Through || as[0].ToAbort != -1 {
		t.Errorf("got %+v, %+v:\n%s", rs, as, out)
	}
	// 30% of what the canary received, which is at least a tenth and at
	// most all of the requests: 3% to 30% of them.
	if f := float64(as[0].Failed) / float64(as[0].Sent); f < 0.03 || f > 0.3 {
		t.Errorf("%d of %d failed", as[0].Failed, as[0].Sent)
	}
}

func TestPercent(t *testing.T) {
	for share, want := range map[float64]string{0: "0%", 0.07: "7%", 0.1: "10%", 0.025: "2.5%", 0.29: "29%", 1: "100%"} {
		if got := percent(share); got != want {
			t.Errorf("percent(%v) = %q, want %q", share, got, want)
		}
	}
}

func TestExpect(t *testing.T) {
	for _, tc := range []struct {
		analysis bool
		errors   float64
		want     expectation
	}{
		{false, 0.5, expectSuccess},
		{true, 0, expectSuccess},
		{true, 0.03, expectSuccess},
		{true, 0.045, expectEither},
		{true, 0.05, expectEither},
		{true, 0.055, expectEither},
		{true, 0.07, expectAnalysisAbort},
		{true, 1, expectAnalysisAbort},
	} {
		sim := &simulation{cfg: Config{Analysis: tc.analysis, CanaryErrors: tc.errors}}
		if got := sim.expect(); got != tc.want {
			t.Errorf("analysis %t, errors %v: %v, want %v", tc.analysis, tc.errors, got, tc.want)
		}
	}
}
