package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

func TestParseHeader(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want headerFlag
		err  string
	}{
		{in: "x-beta=1:5", want: headerFlag{name: "x-beta", value: "1", percent: 5}},
		{in: "X-Group=internal:100", want: headerFlag{name: "X-Group", value: "internal", percent: 100}},
		{in: "x-beta=a=b:0", want: headerFlag{name: "x-beta", value: "a=b", percent: 0}},
		{in: "x-beta=1", err: "no :PCT"},
		{in: "x-beta:5", err: "no name=value"},
		{in: "=1:5", err: "no name=value"},
		{in: "x beta=1:5", err: "not a header name"},
		{in: "x-beta=1:101", err: "PCT must be"},
		{in: "x-beta=1:five", err: "PCT must be"},
	} {
		got, err := parseHeader(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "-header") {
				t.Errorf("%q: err %v, want one naming -header: %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// TestRedrawModel: a session on the stable side drawn again at each of
// the steps 10, 20, 30, 40, 50 ends on the canary with 1-Π(1-w): 49.6% at
// weight 30, 84.9% at 50.
func TestRedrawModel(t *testing.T) {
	got := redrawModel([]int32{0, 10, 20, 30, 40, 50, 100})
	want := []float64{0, 10, 28, 49.6, 69.76, 84.88, 100}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if ticketShare([]int32{20, 50, 80, 100}, 40) != 20 || ticketShare([]int32{20, 50, 80, 100}, 50) != 50 || ticketShare([]int32{20, 100}, 10) != 0 {
		t.Error("ticketShare: want the largest grid value at most the weight")
	}
}

func TestExtrasBadFlags(t *testing.T) {
	for _, tt := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Mirror = 101 }, "-mirror 101"},
		{func(c *Config) { c.Mirror = -1 }, "-mirror -1"},
		{func(c *Config) { c.Header = "x-beta" }, "-header"},
		{func(c *Config) { c.Header, c.Strategy = "x-beta=1:5", "incremental" }, "-strategy canary or all"},
		{func(c *Config) { c.Mirror, c.Strategy = 5, "bluegreen" }, "-strategy canary or all"},
		{func(c *Config) { c.Sticky, c.Users = true, 0 }, "-users 0"},
	} {
		cfg := defaultConfig()
		tt.set(&cfg)
		err := run(context.Background(), cfg, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want %q", cfg, err, tt.want)
		}
	}
}

// TestExtrasStrategy: -header and -mirror put their steps before the
// canary's first weight; -sticky sets SessionAffinity on every strategy.
func TestExtrasStrategy(t *testing.T) {
	cfg := defaultConfig()
	cfg.Sticky, cfg.Header, cfg.Mirror, cfg.Surge = true, "x-beta=1:5", 20, 50
	sim, err := newSimulation(cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.strategy("canary")
	if err != nil {
		t.Fatal(err)
	}
	c := s.(strategy.Canary)
	want := []strategy.CanaryStep{
		strategy.SetHeaderRoute(5, strategy.HeaderMatch{Name: "x-beta", Value: "1"}),
		strategy.SetMirror(20),
		strategy.SetWeight(20),
	}
	if diff := cmp.Diff(want, c.Steps[:3]); diff != "" {
		t.Errorf("first steps (-want +got):\n%s", diff)
	}
	for _, name := range []string{"incremental", "canary", "bluegreen"} {
		s, err := sim.strategy(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Shared().SessionAffinity == nil {
			t.Errorf("%s: no SessionAffinity with -sticky", name)
		}
	}
}

// stepRow is one row of a rollout's steps table.
type stepRow struct {
	Weight       int
	Extras       string
	Share        float64 // -1: no sessions shown
	Sessions     int
	Model        float64 // -1: not shown
	Flips        int
	Copies, Lost int
	Header       int // header-routed
	Marked       int
	Load, Ready  int
}

var (
	stepsHeader = regexp.MustCompile(`(?m)^   steps \((\d+) users; re-draw model: `)
	stepLine    = regexp.MustCompile(`^ +\+\S+s +(\d+)  (?:-|([\d.]+)% of (\d+)) +(?:-|([\d.]+)%) +(\d+) +(\d+)(?: \((\d+) lost\))? +(?:-|(\d+)/(\d+)) +(\d+)/(\d+)(?: over)? +(.*)$`)
)

// stepTables reads the steps table of every rollout in out.
func stepTables(t *testing.T, out string) [][]stepRow {
	t.Helper()
	var tables [][]stepRow
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		if !stepsHeader.MatchString(lines[i]) {
			continue
		}
		var rows []stepRow
		for i += 2; i < len(lines); i++ {
			m := stepLine.FindStringSubmatch(lines[i])
			if m == nil {
				break
			}
			num := func(s string) int { n, _ := strconv.Atoi(s); return n }
			pct := func(s string) float64 {
				if s == "" {
					return -1
				}
				f, _ := strconv.ParseFloat(s, 64)
				return f
			}
			rows = append(rows, stepRow{Weight: num(m[1]), Share: pct(m[2]), Sessions: num(m[3]), Model: pct(m[4]),
				Flips: num(m[5]), Copies: num(m[6]), Lost: num(m[7]), Header: num(m[8]), Marked: num(m[9]), Load: num(m[10]), Ready: num(m[11]), Extras: m[12]})
		}
		if len(rows) == 0 {
			t.Fatalf("a steps table without rows:\n%s", out)
		}
		tables = append(tables, rows)
	}
	return tables
}

// allowedOverload reports whether problems are only the overload that
// drawn sessions and users cause: the canary's share of each tick's
// requests scatters around its expectation, and a canary whose ready
// capacity equals that expectation, with no headroom, overloads (or loses
// copies) a little.
func allowedOverload(problems []string) bool {
	for _, p := range problems {
		if !strings.Contains(p, ": 0 requests dropped and ") && !strings.Contains(p, "mirrored copies found the canary without ready capacity") {
			return false
		}
	}
	return true
}

// TestExtrasFlags runs the canary with every extras flag through the
// Runner: each rollout must succeed with no session flipping, the share of
// sessions on the canary within its bound at every step (the program
// checks it), every header-routed request marked and every marked one
// header-routed once the header route applies, copies while the mirror
// applies, and the extras removed at the end.
func TestExtrasFlags(t *testing.T) {
	cfg := defaultConfig()
	cfg.Strategy, cfg.Sticky, cfg.Users, cfg.Header, cfg.Mirror, cfg.Surge, cfg.Speed = "canary", true, 2000, "x-beta=1:5", 20, 50, 0
	var out bytes.Buffer
	sim, err := newSimulation(cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.rollout(context.Background(), "canary", "v2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.phase != strategy.PhaseSucceeded || !allowedOverload(res.problems) {
		t.Fatalf("ended %s with problems %q\n%s", res.phase, res.problems, out.String())
	}
	tables := stepTables(t, out.String())
	if len(tables) != 1 {
		t.Fatalf("%d steps tables:\n%s", len(tables), out.String())
	}
	rows := tables[0]
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Flips != 0 {
			t.Errorf("step %+v: flips", r)
		}
		if strings.Contains(r.Extras, "header route x-beta=1") {
			seen["header"] = true
			if r.Header != r.Marked {
				t.Errorf("step %+v: header-routed %d of %d marked", r, r.Header, r.Marked)
			}
		} else if r.Header != 0 {
			t.Errorf("step %+v: header-routed without a header route", r)
		}
		if strings.Contains(r.Extras, "mirror 20%") && r.Weight < 100 {
			seen["mirror"] = true
			if r.Copies == 0 {
				t.Errorf("step %+v: no copies", r)
			}
		}
		if strings.Contains(r.Extras, "sticky sessions") {
			seen["sticky"] = true
			if r.Share < 0 {
				t.Errorf("step %+v: no session share", r)
			}
		}
	}
	if !seen["header"] || !seen["mirror"] || !seen["sticky"] {
		t.Errorf("extras applied at some step: %v; want all three\n%s", seen, out.String())
	}
	if last := rows[len(rows)-1]; last.Weight != 100 || last.Extras != "no extras" {
		t.Errorf("last step %+v: want weight 100 and no extras", last)
	}
}

// passThrough wraps the route so that after each successful SetRoutes of
// the Runner, after is called with its number.
func passThrough(after func(n int, r *fake.Router)) func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter {
	return func(next rollout.TrafficRouter, _ strategy.Side) rollout.TrafficRouter {
		n := 0
		return fake.InterceptRouter(next, fake.RouterFuncs{
			SetRoutes: func(ctx context.Context, rs rollout.ExtrasRouter, r rollout.Routes) error {
				err := rs.SetRoutes(ctx, r)
				if err == nil {
					n++
					after(n, next.(*fake.Router))
				}
				return err
			},
		})
	}
}

// programmedAs wraps the route so that the data plane programs change(r)
// for each SetRoutes r of the Runner, while Routes reports what the Runner
// asked for (a data plane that does more than its configuration says).
func programmedAs(change func(rollout.Routes) rollout.Routes) func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter {
	return func(next rollout.TrafficRouter, _ strategy.Side) rollout.TrafficRouter {
		var asked rollout.Routes
		return fake.InterceptRouter(next, fake.RouterFuncs{
			SetRoutes: func(ctx context.Context, rs rollout.ExtrasRouter, r rollout.Routes) error {
				err := rs.SetRoutes(ctx, change(r))
				if err == nil {
					asked = r
				}
				return err
			},
			Routes: func(ctx context.Context, rs rollout.ExtrasRouter) (rollout.RoutesStatus, error) {
				st, err := rs.Routes(ctx)
				if err == nil && !asked.Extras.IsZero() && st.Extras.Equal(change(asked).Extras) {
					st.Canary, st.Extras = asked.Canary, asked.Extras
				}
				return st, err
			},
		})
	}
}

func runWith(t *testing.T, cfg Config, wrap func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter, configure func(*fake.Traffic)) (*result, string) {
	t.Helper()
	var out bytes.Buffer
	cfg.Speed = 0
	sim, err := newSimulation(cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	sim.wrapRouter, sim.configure = wrap, configure
	res, err := sim.rollout(context.Background(), cfg.Strategy, "v2")
	if err != nil {
		t.Fatalf("rollout: %v\n%s", err, out.String())
	}
	if cfg.SVG != "" {
		f, err := os.Create(cfg.SVG)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeSVG(f, res); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return res, out.String()
}

// TestExtrasSticky: with sticky sessions, every step shows the share of
// sessions on the canary within the Hoeffding bound of its weight, the
// re-draw model's drift beside it, no flip; the plot draws the sessions,
// the model and the canary's load.
func TestExtrasSticky(t *testing.T) {
	cfg := defaultConfig()
	cfg.Strategy, cfg.Sticky, cfg.Users = "canary", true, 3000
	cfg.SVG = filepath.Join(t.TempDir(), "sticky.svg")
	res, out := runWith(t, cfg, nil, nil)
	if res.phase != strategy.PhaseSucceeded || !allowedOverload(res.problems) {
		t.Fatalf("ended %s with problems %q\n%s", res.phase, res.problems, out)
	}
	tables := stepTables(t, out)
	if len(tables) != 1 {
		t.Fatalf("%d steps tables:\n%s", len(tables), out)
	}
	var ws []int32
	for _, r := range tables[0] {
		ws = append(ws, int32(r.Weight))
	}
	model := redrawModel(ws)
	stickySteps := 0
	for i, r := range tables[0] {
		if math.Abs(r.Model-model[i]) > 0.05 {
			t.Errorf("step at weight %d: re-draw model %.1f%%, want %.1f%%", r.Weight, r.Model, model[i])
		}
		if !strings.Contains(r.Extras, "sticky sessions (tickets ") {
			continue
		}
		stickySteps++
		if r.Share < 0 || r.Flips != 0 {
			t.Errorf("step %+v: want sessions shown, no flips", r)
		}
		if b := hoeffding(int64(r.Sessions)); math.Abs(r.Share-float64(r.Weight)) > b+0.05 {
			t.Errorf("step at weight %d: %.1f%% of %d sessions on the canary, want %d%% ± %.1f", r.Weight, r.Share, r.Sessions, r.Weight, b)
		}
	}
	if stickySteps < 3 {
		t.Errorf("%d steps with sticky sessions:\n%s", stickySteps, out)
	}
	data, err := os.ReadFile(cfg.SVG)
	if err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, p := range doc.Polylines {
		names[p.Name] = true
		checkPoints(t, p.Name, p.Points)
	}
	var legend []string
	for _, tx := range doc.Texts {
		if tx.Class == "legend" {
			legend = append(legend, tx.Text)
		}
	}
	for _, n := range []string{"canary load", "sessions on canary", "re-draw model"} {
		if !names[n] || !strings.Contains(strings.Join(legend, "|"), n) {
			t.Errorf("the plot has no %q line in its series and legend (%v)", n, legend)
		}
	}
}

// TestExtrasFaults: the simulation catches what extras can break: sessions
// flipping once another writer drops the extras mid-rollout (until the
// Runner puts them back), a data plane that mirrors more than it was
// asked, and a header route matching far more requests than declared.
func TestExtrasFaults(t *testing.T) {
	for _, tt := range []struct {
		name      string
		cfg       func(*Config)
		wrap      func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter
		configure func(*fake.Traffic)
		problems  []string
	}{
		{name: "extras dropped", cfg: func(c *Config) { c.Sticky = true },
			wrap: passThrough(func(n int, r *fake.Router) {
				if n == 3 {
					r.DropExtras()
				}
			}),
			problems: []string{"went from the canary to the stable side while the weight did not fall"}},
		{name: "mirroring more than asked", cfg: func(c *Config) { c.Mirror, c.Surge = 10, 50 },
			wrap: programmedAs(func(r rollout.Routes) rollout.Routes {
				if r.Extras.MirrorPercent > 0 {
					r.Extras = *r.Extras.DeepCopy()
					r.Extras.MirrorPercent = 60
				}
				return r
			}),
			problems: []string{"mirrored copies found the canary without ready capacity"}},
		{name: "header share above the declared", cfg: func(c *Config) { c.Header, c.Surge = "x-beta=1:5", 50 },
			configure: func(tr *fake.Traffic) { tr.SetHeaderShare(0.4, http.Header{"X-Beta": {"1"}}) },
			problems:  []string{"overloaded"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.Strategy, cfg.Users = "canary", 1000
			tt.cfg(&cfg)
			res, out := runWith(t, cfg, tt.wrap, tt.configure)
			all := strings.Join(res.problems, "; ")
			for _, p := range tt.problems {
				if !strings.Contains(all, p) {
					t.Errorf("problems %q do not say %q\n%s", all, p, out)
				}
			}
		})
	}
}
