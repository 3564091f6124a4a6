package render

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/strategy"
)

// load reads a strategy from the plugin's testdata, as plan -f does.
func load(t *testing.T, name string) strategy.Strategy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s, err := object.Manifest(doc, object.Path{"spec", "strategy"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type planCase struct {
	name  string
	file  string
	title string
	opts  strategy.PlanOptions
}

var planCases = []planCase{
	{"plan-incremental", "incremental.yaml", "incremental plan of incremental.yaml", strategy.PlanOptions{}},
	// A timed pause, a gate that passes and a pause until resumed.
	{"plan-canary", "release.yaml", "canary plan of Release/web", strategy.PlanOptions{ResumeAfter: 10 * time.Minute}},
	// The gate is inconclusive: a person resumes it.
	{"plan-canary-inconclusive", "release.yaml", "canary plan of Release/web",
		strategy.PlanOptions{ResumeAfter: 10 * time.Minute, Verdicts: map[string]strategy.Verdict{"errors": strategy.VerdictInconclusive}}},
	{"plan-canary-gate-fails", "release.yaml", "canary plan of Release/web",
		strategy.PlanOptions{Verdicts: map[string]strategy.Verdict{"errors": strategy.VerdictFail}}},
	// Every hop at +0s.
	{"plan-bluegreen", "bluegreen.yaml", "blue-green plan of bluegreen.yaml", strategy.PlanOptions{}},
	// A header route, a mirror and sticky sessions: the canary's load
	// above its weight.
	{"plan-canary-extras", "release-extras.yaml", "canary plan of Release/web", strategy.PlanOptions{ResumeAfter: 5 * time.Minute}},
}

func drawCase(t *testing.T, c planCase) []byte {
	t.Helper()
	s := load(t, c.file)
	tl, err := strategy.Plan(s, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := (PlanChart{Title: c.title, Timeline: tl, Gates: PlanGates(s, c.opts, tl)}).WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestPlanSVGGolden(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			got := drawCase(t, c)
			golden := filepath.Join("testdata", c.name+".svg")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("PlanSVG (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanSVGDrawsWhatHappens: the labels and legend entries that each plan
// calls for, and none it does not.
func TestPlanSVGDrawsWhatHappens(t *testing.T) {
	cases := map[string]struct{ want, not []string }{
		"plan-incremental": {
			want: []string{"incremental plan of incremental.yaml, 1m30s in all", ">Succeeded at +1m30s<", ">end: Succeeded<", ">30s<", ">1m<"},
			not:  []string{"canary load", "timed pause", "until resumed", "gate"},
		},
		"plan-canary": {
			want: []string{"11m in all", ">pause 1m<", ">until resumed<", ">timed pause<", ">pause until resumed<", ">gate errors passes<", ">gate passes<", ">Succeeded at +11m<"},
			not:  []string{"canary load", "inconclusive", "gate fails"},
		},
		"plan-canary-inconclusive": {
			want: []string{"21m in all", ">gate errors: inconclusive<", ">gate inconclusive<", ">pause until resumed<", ">timed pause<"},
			not:  []string{"canary load", "gate passes", "gate fails"},
		},
		"plan-canary-gate-fails": {
			want: []string{"1m in all", ">gate errors fails<", ">gate fails<", ">Aborted at +1m<", ">end: Aborted<", ">timed pause<"},
			not:  []string{"canary load", "until resumed", "gate passes", "Succeeded"},
		},
		"plan-bluegreen": {
			want: []string{"blue-green plan of bluegreen.yaml, 0s in all", "drawn apart, in order", ">Succeeded at +0s<"},
			not:  []string{"canary load", "pause", "gate"},
		},
		"plan-canary-extras": {
			want: []string{"5m in all", ">canary load<", `stroke-dasharray="6,3"`, ">pause until resumed<", ">Succeeded at +5m<"},
			not:  []string{"gate", "timed pause"},
		},
	}
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) {
			svg := string(drawCase(t, c))
			for _, w := range cases[c.name].want {
				if !strings.Contains(svg, w) {
					t.Errorf("no %q in the SVG", w)
				}
			}
			for _, w := range cases[c.name].not {
				if strings.Contains(svg, w) {
					t.Errorf("%q in the SVG", w)
				}
			}
		})
	}
}

// TB is what checkSVG needs of a test: *testing.T or *rapid.T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// checkSVG fails t unless svg is a well-formed, self-contained SVG whose
// polylines go right (never left) and stay within the plot area.
func checkSVG(t TB, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	d.Strict = true
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if x.Name.Local != "svg" || x.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", x.Name)
				}
				for _, a := range []string{"width", "height", "viewBox"} {
					if attr(x, a) == "" {
						t.Errorf("root <svg> has no %s", a)
					}
				}
			}
			depth++
			switch strings.ToLower(x.Name.Local) {
			case "script", "foreignobject", "image", "use", "a", "style", "font", "font-face":
				t.Errorf("element <%s>: not self-contained", x.Name.Local)
			case "polyline":
				checkPolyline(t, attr(x, "points"))
			}
			for _, a := range x.Attr {
				name := strings.ToLower(a.Name.Local)
				if name == "href" || strings.HasPrefix(name, "on") || name == "style" {
					t.Errorf("attribute %s=%q on <%s>", a.Name.Local, a.Value, x.Name.Local)
				}
				if strings.Contains(a.Value, "url(") {
					t.Errorf("attribute %s=%q refers to something", a.Name.Local, a.Value)
				}
			}
		case xml.EndElement:
			depth--
		case xml.ProcInst, xml.Directive:
			t.Errorf("unexpected %T in the SVG", x)
		}
	}
	if roots != 1 {
		t.Fatalf("%d root elements, want 1", roots)
	}
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func checkPolyline(t TB, points string) {
	t.Helper()
	fields := strings.Fields(points)
	if len(fields) < 2 {
		t.Errorf("polyline with %d points", len(fields))
	}
	lastX := -1.0
	for _, p := range fields {
		xs, ys, ok := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("polyline point %q", p)
		}
		if x < lastX {
			t.Errorf("polyline goes left: %v after %v in %q", x, lastX, points)
		}
		lastX = x
		if x < plotLeft || x > plotRight || y < plotTop || y > plotBottom {
			t.Errorf("polyline point %q outside the plot area (%d..%d, %d..%d)", p, plotLeft, plotRight, plotTop, plotBottom)
		}
	}
}

func TestPlanSVGSelfContained(t *testing.T) {
	for _, c := range planCases {
		t.Run(c.name, func(t *testing.T) { checkSVG(t, drawCase(t, c)) })
	}
	// A title that needs escaping, and characters XML cannot hold.
	var b bytes.Buffer
	if err := PlanSVG(&b, "a <b> & \"c\" \x00\x1b", strategy.Timeline{}); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes())
}

// TestPlanSVGPolylines: each line steps through its values in order, as
// checkPolyline reads them (a guard that checkPolyline reads anything).
func TestPlanSVGPolylines(t *testing.T) {
	svg := drawCase(t, planCases[0])
	n := bytes.Count(svg, []byte("<polyline "))
	if n != 3 {
		t.Fatalf("%d polylines, want 3 (stable capacity, canary capacity, canary weight)", n)
	}
	// The canary weight of the incremental plan: 0, 25, 50, 75, 100.
	i := bytes.Index(svg, []byte(`stroke="`+colWeight+`"`))
	if i < 0 {
		t.Fatal("no canary weight line")
	}
	rest := svg[i:]
	pts := string(rest[bytes.Index(rest, []byte(`points="`))+len(`points="`):])
	pts = pts[:strings.IndexByte(pts, '"')]
	var ys []string
	for _, p := range strings.Fields(pts) {
		_, y, _ := strings.Cut(p, ",")
		if len(ys) == 0 || ys[len(ys)-1] != y {
			ys = append(ys, y)
		}
	}
	var want []string
	for _, w := range []int32{0, 25, 50, 75, 100} {
		want = append(want, num(yAt(w)))
	}
	if diff := cmp.Diff(want, ys); diff != "" {
		t.Errorf("canary weight levels (-want +got):\n%s", diff)
	}
}

// levels returns the distinct y levels, in order, of the polyline drawn
// with style (its first attribute after the common ones).
func levels(t *testing.T, svg []byte, style string) []string {
	t.Helper()
	i := bytes.Index(svg, []byte(style))
	if i < 0 {
		t.Fatalf("no polyline %s", style)
	}
	rest := svg[i:]
	pts := string(rest[bytes.Index(rest, []byte(`points="`))+len(`points="`):])
	pts = pts[:strings.IndexByte(pts, '"')]
	var ys []string
	for _, p := range strings.Fields(pts) {
		_, y, _ := strings.Cut(p, ",")
		if len(ys) == 0 || ys[len(ys)-1] != y {
			ys = append(ys, y)
		}
	}
	return ys
}

// TestPlanSVGCanaryLoad: a plan whose header route and mirror load the
// canary beyond its weight draws a fourth, dashed line at that load,
// beside the weight's; the plans without extras draw three lines.
func TestPlanSVGCanaryLoad(t *testing.T) {
	for _, c := range planCases {
		svg := drawCase(t, c)
		n := bytes.Count(svg, []byte("<polyline "))
		if c.name != "plan-canary-extras" {
			if n != 3 {
				t.Errorf("%s: %d polylines, want 3", c.name, n)
			}
			continue
		}
		if n != 4 {
			t.Fatalf("%s: %d polylines, want 4 (capacities, weight, load)", c.name, n)
		}
		tl, err := strategy.Plan(load(t, c.file), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		add := func(v int32) {
			if y := num(yAt(v)); len(want) == 0 || want[len(want)-1] != y {
				want = append(want, y)
			}
		}
		add(tl.Initial.Weight)
		for _, e := range tl.Entries {
			add(max(e.CanaryLoad, e.Allocation.Weight))
		}
		got := levels(t, svg, `stroke="`+colCanary+`" stroke-width="1.8" stroke-dasharray="6,3"`)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("canary load levels (-want +got):\n%s", diff)
		}
		// The load differs from the weight somewhere, or the line would
		// say nothing.
		if cmp.Equal(got, levels(t, svg, `stroke="`+colWeight+`"`)) {
			t.Error("the canary load line is the weight line")
		}
	}
}

func TestPlanSVGBadTimeline(t *testing.T) {
	good := strategy.Timeline{Duration: time.Minute, Entries: []strategy.PlanEntry{
		{Offset: 0, What: "weight 10", Allocation: strategy.Allocation{Weight: 10, StableCapacity: 100, CanaryCapacity: 10}},
		{Offset: time.Minute, What: "Succeeded", Allocation: strategy.Allocation{Weight: 100, CanaryCapacity: 100}},
	}}
	cases := []struct {
		name  string
		edit  func(c *PlanChart)
		field string
	}{
		{"offset back", func(c *PlanChart) { c.Timeline.Entries[1].Offset = -time.Second }, "Timeline.Entries[1].Offset"},
		{"weight", func(c *PlanChart) { c.Timeline.Entries[0].Allocation.Weight = 101 }, "Timeline.Entries[0].Allocation.Weight"},
		{"initial", func(c *PlanChart) { c.Timeline.Initial.StableCapacity = -1 }, "Timeline.Initial.StableCapacity"},
		{"canary load", func(c *PlanChart) { c.Timeline.Entries[0].CanaryLoad = 101 }, "Timeline.Entries[0].CanaryLoad"},
		{"duration", func(c *PlanChart) { c.Timeline.Duration = time.Second }, "Timeline.Duration"},
		{"gate offset", func(c *PlanChart) { c.Gates = []PlanGate{{Name: "g", Offset: time.Hour}} }, "Gates[0].Offset"},
		{"gate event", func(c *PlanChart) {
			c.Gates = []PlanGate{{Name: "g", Verdict: strategy.VerdictInconclusive, Event: 1}}
		}, "Gates[0].Event"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := PlanChart{Timeline: good}
			ch.Timeline.Entries = append([]strategy.PlanEntry(nil), good.Entries...)
			c.edit(&ch)
			var b bytes.Buffer
			err := ch.WriteSVG(&b)
			if !errors.Is(err, ErrBadPlan) || !strings.Contains(err.Error(), c.field+":") {
				t.Fatalf("got %v, want %v naming %s", err, ErrBadPlan, c.field)
			}
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes with an error", b.Len())
			}
		})
	}
	var b bytes.Buffer
	if err := PlanSVG(&b, "good", good); err != nil {
		t.Fatalf("the unedited timeline: %v", err)
	}
}

type failWriter struct{}

var errWrite = errors.New("disk full")

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestPlanSVGWriteError(t *testing.T) {
	if err := PlanSVG(failWriter{}, "x", strategy.Timeline{}); !errors.Is(err, errWrite) {
		t.Fatalf("got %v, want %v", err, errWrite)
	}
}

func TestReadable(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		500 * time.Millisecond:         "500ms",
		1500 * time.Millisecond:        "1.5s",
		45 * time.Second:               "45s",
		90 * time.Second:               "1m30s",
		time.Hour:                      "1h",
		26*time.Hour + 30*time.Minute:  "1d2h30m",
		3*24*time.Hour + 5*time.Second: "3d5s",
		-time.Second:                   "-1s",
		time.Duration(1<<63 - 1):       "106751d23h47m16.854775807s",
		time.Duration(1<<63-1) / time.Second * time.Second: "106751d23h47m16s",
	} {
		if got := readable(d); got != want {
			t.Errorf("readable(%v) = %q, want %q", int64(d), got, want)
		}
	}
}

func TestTickStep(t *testing.T) {
	for total, want := range map[time.Duration]time.Duration{
		time.Nanosecond:          time.Nanosecond,
		900 * time.Millisecond:   200 * time.Millisecond,
		90 * time.Second:         15 * time.Second,
		11 * time.Minute:         2 * time.Minute,
		21 * time.Minute:         5 * time.Minute,
		50 * time.Hour:           6 * time.Hour,
		100 * 24 * time.Hour:     20 * 24 * time.Hour,
		time.Duration(1<<63 - 1): 20000 * 24 * time.Hour,
	} {
		got := tickStep(total)
		if got != want {
			t.Errorf("tickStep(%v) = %v, want %v", total, got, want)
		}
		if total/got > 8 {
			t.Errorf("tickStep(%v) = %v: %d intervals", total, got, total/got)
		}
	}
}

// genStrategy draws a strategy of any kind; it may be invalid.
func genStrategy(t *rapid.T) strategy.Strategy {
	opts := strategy.Options{
		Capacity:              rapid.SampledFrom([]strategy.CapacityMode{strategy.CapacityManaged, strategy.CapacityFixed, strategy.CapacityReplicas}).Draw(t, "capacity"),
		MaxUnavailablePercent: rapid.Int32Range(0, 100).Draw(t, "maxUnavailable"),
		AbortRamp:             rapid.SampledFrom([]strategy.AbortRamp{"", strategy.AbortGradual, strategy.AbortEmergency}).Draw(t, "abortRamp"),
	}
	if opts.Capacity != strategy.CapacityReplicas {
		opts.MaxUnavailablePercent = 0
	}
	opts.ScaleDownDelay.Duration = time.Duration(rapid.IntRange(0, 120).Draw(t, "scaleDownDelaySeconds")) * time.Second
	surge := rapid.Int32Range(0, 100).Draw(t, "maxSurge")
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0:
		return strategy.Incremental{
			StepPercent:     rapid.Int32Range(1, 100).Draw(t, "step"),
			Interval:        dur(time.Duration(rapid.Int64Range(1, 7200_000).Draw(t, "intervalMillis")) * time.Millisecond),
			MaxSurgePercent: surge,
			Options:         opts,
		}
	case 1:
		return strategy.BlueGreen{Options: opts}
	}
	steps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) strategy.CanaryStep {
		switch rapid.IntRange(0, 5).Draw(t, "what") {
		case 0:
			return strategy.SetWeight(rapid.Int32Range(0, 100).Draw(t, "weight"))
		case 1:
			return strategy.Pause(time.Duration(rapid.Int64Range(1, 3600_000_000).Draw(t, "pauseMicros")) * time.Microsecond)
		case 2:
			return strategy.PauseUntilResumed()
		case 3:
			// No match is a header route cleared.
			var m []strategy.HeaderMatch
			if rapid.Bool().Draw(t, "header") {
				m = append(m, strategy.HeaderMatch{Name: "X-Canary", Value: "always"})
			}
			return strategy.SetHeaderRoute(rapid.Int32Range(0, 100).Draw(t, "expected"), m...)
		case 4:
			return strategy.SetMirror(rapid.Int32Range(0, 100).Draw(t, "mirror"))
		}
		return strategy.Gate(rapid.SampledFrom([]string{"errors", "latency", "a&b <c>"}).Draw(t, "gate"))
	}), 0, 10).Draw(t, "steps")
	if rapid.Bool().Draw(t, "sessionAffinity") {
		opts.SessionAffinity = &strategy.SessionAffinity{}
	}
	return strategy.Canary{Steps: steps, MaxSurgePercent: surge, Options: opts}
}

// TestPlanSVGProperty: for any valid strategy and plan options, PlanSVG
// draws what strategy.Plan returns without an error, well-formed and
// self-contained, and PlanGates finds the gates the plan reaches.
func TestPlanSVGProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genStrategy(t)
		if err := s.Validate(); err != nil {
			t.Skip("invalid strategy")
		}
		o := strategy.PlanOptions{
			ResumeAfter: time.Duration(rapid.Int64Range(0, 48*3600).Draw(t, "resumeAfterSeconds")) * time.Second,
			Verdicts:    map[string]strategy.Verdict{},
		}
		for _, g := range s.Gates() {
			o.Verdicts[g] = rapid.SampledFrom([]strategy.Verdict{strategy.VerdictPass, strategy.VerdictFail, strategy.VerdictInconclusive}).Draw(t, "verdict "+g)
		}
		tl, err := strategy.Plan(s, o)
		if err != nil {
			t.Fatalf("Plan of a valid strategy: %v", err)
		}
		gates := PlanGates(s, o, tl)
		var b bytes.Buffer
		title := rapid.String().Draw(t, "title")
		if err := (PlanChart{Title: title, Timeline: tl, Gates: gates}).WriteSVG(&b); err != nil {
			t.Fatalf("WriteSVG: %v", err)
		}
		checkSVG(t, b.Bytes())
		// A fourth line, the canary's load, only when header-routed or
		// mirrored requests put it above the weight; the table says so on
		// exactly those entries.
		lines := 3
		if hasExtraLoad(tl) {
			lines = 4
		}
		if n := bytes.Count(b.Bytes(), []byte("<polyline ")); n != lines {
			t.Fatalf("%d polylines, want %d", n, lines)
		}
		rows := strings.Split(PlanText(tl), "\n")
		if len(rows) != len(tl.Entries)+2 {
			t.Fatalf("PlanText has %d lines for %d entries", len(rows), len(tl.Entries))
		}
		for i, e := range tl.Entries {
			suffix := fmt.Sprintf(" load %d%%", e.CanaryLoad)
			if got, want := strings.HasSuffix(rows[i+1], suffix), e.CanaryLoad > e.Allocation.Weight; got != want {
				t.Fatalf("entry %d %+v: line %q ends with %q: %v, want %v", i, e, rows[i+1], suffix, got, want)
			}
		}
		checkGates(t, s, o, tl, gates)
	})
}

// checkGates: the gates come in step order, each at an instant of the plan;
// all of them when none fails, else up to the failing one, which aborts
// the rollout.
func checkGates(t *rapid.T, s strategy.Strategy, o strategy.PlanOptions, tl strategy.Timeline, gates []PlanGate) {
	names := s.Gates()
	if len(gates) > len(names) {
		t.Fatalf("%d gates of %d", len(gates), len(names))
	}
	var last time.Duration
	failed := false
	for i, g := range gates {
		if g.Name != names[i] || g.Verdict != o.Verdicts[g.Name] {
			t.Fatalf("gate %d: %+v, want %s %s", i, g, names[i], o.Verdicts[names[i]])
		}
		if g.Offset < last || g.Offset > tl.Duration {
			t.Fatalf("gate %d at %v: before %v or after the end %v", i, g.Offset, last, tl.Duration)
		}
		last = g.Offset
		if g.Verdict == strategy.VerdictFail {
			failed = true
			if i != len(gates)-1 {
				t.Fatalf("gates after the failing gate %d: %+v", i, gates)
			}
		}
	}
	switch {
	case failed && tl.Final.Phase != strategy.PhaseAborted:
		t.Fatalf("a gate fails and the plan ends %s", tl.Final.Phase)
	case !failed && tl.Final.Phase == strategy.PhaseSucceeded && len(gates) != len(names):
		t.Fatalf("the plan succeeds with %d of %d gates marked: %+v", len(gates), len(names), gates)
	}
	if failed {
		// The failing gate is where the walk back starts: no weight rises
		// after it.
		g := gates[len(gates)-1]
		w := tl.Initial.Weight
		for _, e := range tl.Entries {
			if e.Offset > g.Offset && e.Allocation.Weight > w {
				t.Fatalf("weight rises to %d at %v, after gate %s failed at %v", e.Allocation.Weight, e.Offset, g.Name, g.Offset)
			}
			w = e.Allocation.Weight
		}
	}
}

func ExamplePlanSVG() {
	s := strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(50), strategy.Pause(time.Minute)}, MaxSurgePercent: 50}
	tl, err := strategy.Plan(s, strategy.PlanOptions{})
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	if err := PlanSVG(&b, "canary plan", tl); err != nil {
		panic(err)
	}
	// The first two lines: the root element and the heading.
	lines := strings.SplitN(b.String(), "\n", 3)
	fmt.Println(lines[0])
	fmt.Println(lines[1])
	// Output:
	// <svg xmlns="http://www.w3.org/2000/svg" width="920" height="440" viewBox="0 0 920 440" role="img" font-family="sans-serif" font-size="12">
	// <title>canary plan, 1m in all</title>
}
