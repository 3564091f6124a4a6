package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"math"
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
	cfg.Sticky, cfg.Header, cfg.Mirror = true, "x-beta=1:5", 20
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
	Load, Ready  int
}

var (
	stepsHeader = regexp.MustCompile(`(?m)^   steps \((\d+) users; re-draw model: `)
	stepLine    = regexp.MustCompile(`^ +\+\S+s +(\d+)  (.*?) +(?:-|([\d.]+)% of (\d+)) +(?:-|([\d.]+)%) +(\d+) +(\d+)(?: \((\d+) lost\))? +\S+ +(\d+)/(\d+)(?: over)?$`)
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
			rows = append(rows, stepRow{Weight: num(m[1]), Extras: m[2], Share: pct(m[3]), Sessions: num(m[4]), Model: pct(m[5]),
				Flips: num(m[6]), Copies: num(m[7]), Lost: num(m[8]), Load: num(m[9]), Ready: num(m[10])})
		}
		if len(rows) == 0 {
			t.Fatalf("a steps table without rows:\n%s", out)
		}
		tables = append(tables, rows)
	}
	return tables
}

// TestExtrasFlags runs the canary with every extras flag through the
// Runner as it is: each rollout must end cleanly, with its steps table.
func TestExtrasFlags(t *testing.T) {
	for _, name := range []string{"canary", "all"} {
		cfg := defaultConfig()
		cfg.Strategy, cfg.Sticky, cfg.Users, cfg.Header, cfg.Mirror = name, true, 2000, "x-beta=1:5", 20
		out := runSim(t, cfg)
		tables := stepTables(t, out)
		if len(tables) != len(reports(t, out)) {
			t.Fatalf("%s: %d steps tables for %d rollouts:\n%s", name, len(tables), len(reports(t, out)), out)
		}
		for _, rows := range tables {
			if rows[0].Weight != 0 || rows[len(rows)-1].Weight != 100 {
				t.Errorf("%s: steps from weight %d to %d, want 0 to 100", name, rows[0].Weight, rows[len(rows)-1].Weight)
			}
			for _, r := range rows {
				if r.Flips != 0 || r.Lost != 0 || r.Load > r.Ready {
					t.Errorf("%s: step %+v: want no flips, no lost copy, load within ready", name, r)
				}
			}
		}
	}
}

// emulatedExtras wraps the route so that every write of the Runner
// programs the extras x (with the write's weights, toward canary), and
// after writes, calls after (with the number of the write): the
// simulation's own machinery (traffic, table, checks, plot) is tested
// with extras whatever the Runner asks.
func emulatedExtras(x strategy.TrafficExtras, after func(n int, r *fake.Router)) func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter {
	return func(next rollout.TrafficRouter, canary strategy.Side) rollout.TrafficRouter {
		rs := next.(rollout.RouteShaper)
		writes := 0
		write := func(ctx context.Context, w rollout.Weights) error {
			writes++
			err := rs.SetRoutes(ctx, rollout.Routes{Weights: w, Canary: canary, Extras: x})
			if err == nil && after != nil {
				after(writes, next.(*fake.Router))
			}
			return err
		}
		return fake.InterceptRouter(next, fake.RouterFuncs{
			SetWeights: func(ctx context.Context, _ rollout.TrafficRouter, w rollout.Weights) error { return write(ctx, w) },
			SetRoutes:  func(ctx context.Context, _ rollout.RouteShaper, r rollout.Routes) error { return write(ctx, r.Weights) },
		})
	}
}

func runEmulated(t *testing.T, cfg Config, wrap func(rollout.TrafficRouter, strategy.Side) rollout.TrafficRouter) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cfg.Speed = 0
	sim, err := newSimulation(cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	sim.wrapRouter = wrap
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
	if len(res.problems) > 0 {
		return out.String(), &problemsError{res.problems}
	}
	return out.String(), nil
}

type problemsError struct{ p []string }

func (e *problemsError) Error() string { return strings.Join(e.p, "; ") }

// TestExtrasSticky: with sticky sessions on the route, every step shows
// the share of sessions on the canary within the Hoeffding bound of the
// weight's ticket share, the re-draw model's drift beside it, no flip;
// the plot draws the sessions and the model.
func TestExtrasSticky(t *testing.T) {
	// The weights the canary walks (capacity-bound hops included): tickets
	// off them would send the stable side more than its capacity.
	grid := []int32{20, 40, 50, 60, 80, 100}
	cfg := defaultConfig()
	cfg.Strategy, cfg.Sticky, cfg.Users = "canary", true, 3000
	cfg.SVG = filepath.Join(t.TempDir(), "sticky.svg")
	out, err := runEmulated(t, cfg, emulatedExtras(strategy.TrafficExtras{Sticky: &strategy.Sticky{Run: "5eed0001", Grid: grid}}, nil))
	// Sessions are drawn, not dealt: the canary's share of each tick's
	// requests scatters around the weight, and a canary whose ready
	// capacity equals the weight, with no headroom, overloads a little.
	// That is the only problem allowed here.
	var pe *problemsError
	if err != nil && (!errors.As(err, &pe) || len(pe.p) != 1 || !strings.Contains(pe.p[0], ": 0 requests dropped and ")) {
		t.Fatalf("%v\n%s", err, out)
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
	for i, r := range tables[0] {
		if i == 0 && r.Weight == 0 && r.Extras == "none" {
			continue // before the first write
		}
		if r.Share < 0 || r.Flips != 0 || !strings.Contains(r.Extras, "sticky 5eed0001 grid 20,40,50,60,80,100") {
			t.Errorf("step %+v: want sessions shown, no flips, the sticky extras", r)
			continue
		}
		want := float64(ticketShare(grid, int32(r.Weight)))
		if b := hoeffding(int64(r.Sessions)); math.Abs(r.Share-want) > b+0.05 {
			t.Errorf("step at weight %d: %.1f%% of %d sessions on the canary, want %.0f%% ± %.1f", r.Weight, r.Share, r.Sessions, want, b)
		}
		if math.Abs(r.Model-model[i]) > 0.05 {
			t.Errorf("step at weight %d: re-draw model %.1f%%, want %.1f%%", r.Weight, r.Model, model[i])
		}
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
// flipping once another writer drops the extras mid-rollout, and mirrored
// copies or header-routed requests a canary without the capacity for them
// cannot serve (what the engine's capacity rule prevents).
func TestExtrasFaults(t *testing.T) {
	s := &strategy.Sticky{Run: "5eed0001", Grid: []int32{20, 40, 50, 60, 80, 100}}
	for _, tt := range []struct {
		name   string
		cfg    func(*Config)
		x      strategy.TrafficExtras
		after  func(n int, r *fake.Router)
		errors []string
	}{
		{name: "extras dropped", cfg: func(c *Config) { c.Sticky = true }, x: strategy.TrafficExtras{Sticky: s},
			after: func(n int, r *fake.Router) {
				if n == 3 {
					r.DropExtras()
				}
			},
			errors: []string{"went from the canary to the stable side while the weight did not fall"}},
		{name: "mirror without capacity", cfg: func(c *Config) { c.Mirror = 20 }, x: strategy.TrafficExtras{MirrorPercent: 20},
			errors: []string{"mirrored copies found the canary without ready capacity"}},
		{name: "header route without capacity", cfg: func(c *Config) { c.Header = "x-beta=1:5" },
			x:      strategy.TrafficExtras{HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}},
			errors: []string{"requests dropped"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.Strategy, cfg.Users = "canary", 1000
			tt.cfg(&cfg)
			out, err := runEmulated(t, cfg, emulatedExtras(tt.x, tt.after))
			if err == nil {
				t.Fatalf("no problem found:\n%s", out)
			}
			for _, e := range tt.errors {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("problems %q do not say %q", err, e)
				}
			}
		})
	}
}
