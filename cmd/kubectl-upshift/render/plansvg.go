package render

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/upshift-dev/upshift/strategy"
)

// ErrBadPlan is returned by PlanSVG and PlanChart.WriteSVG for a timeline
// that cannot be drawn: an event before the one ahead of it, a percentage
// outside 0..100, a gate that points nowhere. The message names the field.
var ErrBadPlan = errors.New("render: plan cannot be drawn")

// The What of the Timeline events that the plot reads (see strategy.Plan).
const (
	whatUntilResumed = "pause until resumed"
	whatResume       = "resume"
	whatTimedPrefix  = "pause "
)

// PlanGate is a gate of a planned Canary as PlanChart marks it. The zero
// value is a gate without a name asked at the start of the plan; a PlanGate
// is a plain value, safe for concurrent reads.
type PlanGate struct {
	// Name is the gate's name.
	Name string
	// Offset is when the gate is asked, from the start of the plan.
	Offset time.Duration
	// Verdict is the verdict the plan gives it.
	Verdict strategy.Verdict
	// Event is, for an inconclusive gate, the index in Timeline.Entries of
	// the "pause until resumed" that waits for a person; -1 otherwise.
	Event int
}

// PlanChart is a dry run to draw: PlanSVG's input with gates. The zero value
// draws an empty plot (nothing to roll out); a PlanChart is a plain value,
// safe for concurrent reads.
type PlanChart struct {
	// Title heads the drawing, followed by the total time; empty means
	// "plan".
	Title string
	// Timeline is the plan, as strategy.Plan returns it.
	Timeline strategy.Timeline
	// Gates marks the plan's gates (see PlanGates); nil marks none.
	Gates []PlanGate
}

// PlanSVG writes to w a self-contained SVG (no scripts, fonts or external
// references) that plots tl: x is the time from the start of the plan, y a
// percentage. Three step lines show the capacity the plan sets on the
// stable and on the canary side and the canary's traffic weight; when
// header-routed or mirrored requests load the canary beyond its weight
// somewhere (strategy.PlanEntry.CanaryLoad), a dashed fourth line shows
// that load; timed
// pauses and pauses until a resume are shaded spans; the end is a marker
// labelled with the phase the plan reaches (Succeeded, Aborted,
// RolledBack...). The heading is title followed by the total time. The x
// axis has ticks at round durations; hops that happen at one instant are
// drawn a few pixels apart, in their order, so that each stays visible (a
// blue-green plan happens all at +0s). The legend lists only what is drawn.
//
// PlanSVG draws the same bytes for the same input. It returns an error
// wrapping ErrBadPlan for a timeline strategy.Plan cannot return, and the
// error of w.
func PlanSVG(w io.Writer, title string, tl strategy.Timeline) error {
	return PlanChart{Title: title, Timeline: tl}.WriteSVG(w)
}

// PlanGates returns the gates of s that a plan from a fresh state (o.State
// nil) reaches, in order, with the instant each is asked and its verdict
// (o.Verdicts; a gate not listed passes): tl is Plan(s, o). It returns nil
// for a strategy without gates or for a plan from a given state.
func PlanGates(s strategy.Strategy, o strategy.PlanOptions, tl strategy.Timeline) []PlanGate {
	c, ok := s.(strategy.Canary)
	if !ok || o.State != nil || len(c.Gates()) == 0 {
		return nil
	}
	start := o.Start
	if start.IsZero() {
		start = time.Unix(0, 0).UTC()
	}
	// The plan's waits for a person, in order: each is a pause step without
	// end or an inconclusive gate.
	var waits []int
	for i, e := range tl.Entries {
		if e.What == whatUntilResumed {
			waits = append(waits, i)
		}
	}
	resumed := func(i int) (time.Duration, bool) {
		for _, e := range tl.Entries[i+1:] {
			if e.What == whatResume {
				return e.Offset, true
			}
		}
		return 0, false
	}
	var (
		gates []PlanGate
		at    time.Duration // the instant the current step is entered
	)
	for _, st := range c.Steps {
		if at > tl.Duration {
			break // the plan ended (aborted) before this step
		}
		switch {
		case st.Pause != nil && st.Pause.Duration != nil:
			// Timed from the step's start as the state records it (to the
			// microsecond).
			entered := start.Add(at).Truncate(time.Microsecond).Sub(start)
			at = max(at, entered+st.Pause.Duration.Duration)
		case st.Pause != nil:
			if len(waits) == 0 {
				return gates
			}
			end, ok := resumed(waits[0])
			if !ok {
				return gates
			}
			at, waits = end, waits[1:]
		case st.Gate != nil:
			g := PlanGate{Name: st.Gate.Name, Offset: at, Verdict: strategy.VerdictPass, Event: -1}
			if v, ok := o.Verdicts[g.Name]; ok {
				g.Verdict = v
			}
			switch g.Verdict {
			case strategy.VerdictFail:
				return append(gates, g)
			case strategy.VerdictInconclusive:
				if len(waits) == 0 {
					return gates
				}
				end, ok := resumed(waits[0])
				if !ok {
					return gates
				}
				g.Event, g.Offset = waits[0], tl.Entries[waits[0]].Offset
				at, waits = end, waits[1:]
			}
			gates = append(gates, g)
		}
	}
	return gates
}

// The drawing's geometry, in SVG user units.
const (
	svgWidth, svgHeight = 920, 440
	plotLeft, plotTop   = 64, 70
	plotW, plotH        = 620, 300
	plotRight           = plotLeft + plotW
	plotBottom          = plotTop + plotH
	legendLeft          = plotRight + 24
	maxHopGap           = 14.0 // the most space between two hops at one instant
)

// Styles of what is drawn.
const (
	colStable    = "#3b6fb6"
	colCanary    = "#e07b24"
	colWeight    = "#1b1b1b"
	fillTimed    = "#f7e3a1"
	fillResume   = "#d9cdee"
	fillGateWait = "#c6e6d2"
	colGate      = "#23845a"
	colGateFail  = "#b3261e"
)

// span is a shaded interval of the plot.
type span struct {
	x0, x1 float64
	fill   string
	label  string
	tip    string
}

// WriteSVG writes the chart to w; see PlanSVG.
func (c PlanChart) WriteSVG(w io.Writer) error {
	tl := &c.Timeline
	if err := c.check(); err != nil {
		return err
	}
	n := len(tl.Entries)
	total := tl.Duration

	// x of every point: the initial allocation, then each event. A point
	// at the same instant as the one before it takes one gap more.
	gaps := make([]int, n+1)
	for i, e := range tl.Entries {
		prev := time.Duration(0)
		if i > 0 {
			prev = tl.Entries[i-1].Offset
		}
		gaps[i+1] = gaps[i]
		if e.Offset == prev {
			gaps[i+1]++
		}
	}
	hop := 0.0
	if g := gaps[n]; g > 0 {
		share, most := 0.3, maxHopGap
		if total == 0 {
			// Nothing but hops: wider apart, and still within the plot.
			share, most = 1, 4*maxHopGap
		}
		hop = math.Min(most, share*plotW/float64(g))
	}
	timeW := plotW - hop*float64(gaps[n])
	if total == 0 {
		timeW = 0
	}
	// xAt is where instant t starts: the gaps of the points before it.
	xAt := func(t time.Duration) float64 {
		g := 0
		for i := 1; i <= n && tl.Entries[i-1].Offset < t; i++ {
			g = gaps[i]
		}
		x := float64(plotLeft) + hop*float64(g)
		if total > 0 {
			x += timeW * float64(t) / float64(total)
		}
		return x
	}
	xs := make([]float64, n+1)
	xs[0] = plotLeft
	for i, e := range tl.Entries {
		xs[i+1] = float64(plotLeft) + hop*float64(gaps[i+1])
		if total > 0 {
			xs[i+1] += timeW * float64(e.Offset) / float64(total)
		}
	}
	xEnd := xs[n]
	if n == 0 {
		xEnd = plotRight
	}

	// Shaded spans.
	var spans []span
	gateWait := map[int]PlanGate{}
	for _, g := range c.Gates {
		if g.Verdict == strategy.VerdictInconclusive && g.Event >= 0 {
			gateWait[g.Event] = g
		}
	}
	for i, e := range tl.Entries {
		switch {
		case e.What == whatUntilResumed:
			j := i + 1
			for j < n && tl.Entries[j].What != whatResume {
				j++
			}
			end, endX := total, xEnd
			if j < n {
				end, endX = tl.Entries[j].Offset, xs[j+1]
			}
			s := span{x0: xs[i+1], x1: endX, fill: fillResume, label: "until resumed",
				tip: fmt.Sprintf("a pause until a person resumes it, %s to %s", offset(e.Offset), offset(end))}
			if g, ok := gateWait[i]; ok {
				s.fill, s.label = fillGateWait, "gate "+g.Name+": inconclusive"
				s.tip = fmt.Sprintf("gate %s inconclusive: paused until a person resumes it, %s to %s", g.Name, offset(e.Offset), offset(end))
			}
			spans = append(spans, s)
		case strings.HasPrefix(e.What, whatTimedPrefix):
			j := i + 1
			for j < n && tl.Entries[j].Offset == e.Offset {
				j++
			}
			end, endX := total, xEnd
			if j < n {
				end, endX = tl.Entries[j].Offset, xs[j+1]
			}
			spans = append(spans, span{x0: xs[i+1], x1: endX, fill: fillTimed, label: "pause " + readable(end-e.Offset),
				tip: fmt.Sprintf("a timed pause, %s to %s", offset(e.Offset), offset(end))})
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	heading := c.Title
	if heading == "" {
		heading = "plan"
	}
	heading += ", " + readable(total) + " in all"
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(heading))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, svgHeight)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="17" font-weight="bold">%s</text>`+"\n", plotLeft, esc(heading))
	sub := fmt.Sprintf("%d hops, peak capacity %d%%, ends %s; every hop taken as applied at once", tl.Hops, tl.PeakCapacity, orDash(string(tl.Final.Phase)))
	if n == 0 {
		sub = "nothing to roll out"
	}
	fmt.Fprintf(&b, `<text x="%d" y="48" fill="#444444">%s</text>`+"\n", plotLeft, esc(sub))

	// Spans below everything else.
	for _, s := range spans {
		wd := math.Max(s.x1-s.x0, 1.5)
		fmt.Fprintf(&b, `<rect x="%s" y="%d" width="%s" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
			num(s.x0), plotTop, num(wd), plotH, s.fill, esc(s.tip))
	}

	// Grid and y axis.
	for p := 0; p <= 100; p += 25 {
		y := yAt(int32(p))
		fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#dddddd"/>`+"\n", plotLeft, num(y), plotRight, num(y))
		fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%d%%</text>`+"\n", plotLeft-8, num(y), p)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom)

	// x axis ticks at round durations.
	if total > 0 {
		step := tickStep(total)
		for k := int64(0); k <= int64(total/step); k++ {
			t := time.Duration(k) * step
			x := xAt(t)
			fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333333"/>`+"\n", num(x), plotBottom, num(x), plotBottom+5)
			label := readable(t)
			if k == 0 {
				label = "0"
			}
			fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(x), plotBottom+19, esc(label))
		}
	} else {
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n", plotLeft, plotBottom, plotLeft, plotBottom+5)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">0</text>`+"\n", plotLeft, plotBottom+19)
	}
	caption := "time from the start"
	if gaps[n] > 0 {
		caption += " (hops at one instant are drawn apart, in order)"
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#444444">%s</text>`+"\n", plotLeft+plotW/2, plotBottom+40, caption)

	// Span labels, written down from the top of each span.
	for _, s := range spans {
		fmt.Fprintf(&b, `<text transform="translate(%s,%d) rotate(90)" font-size="11" fill="#333333">%s</text>`+"\n",
			num(s.x0+4), plotTop+4, esc(s.label))
	}

	// Gates that pass or fail: a dashed line at the instant they are asked.
	var passes, fails bool
	for _, g := range c.Gates {
		if g.Verdict == strategy.VerdictInconclusive {
			continue
		}
		col, what := colGate, "passes"
		if g.Verdict == strategy.VerdictFail {
			col, what, fails = colGateFail, "fails", true
		} else {
			passes = true
		}
		x := xAt(g.Offset)
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="5,3"><title>%s</title></line>`+"\n",
			num(x), plotTop, num(x), plotBottom, col, esc(fmt.Sprintf("gate %s %s at %s", g.Name, what, offset(g.Offset))))
		fmt.Fprintf(&b, `<text transform="translate(%s,%d) rotate(90)" font-size="11" fill="%s">%s</text>`+"\n",
			num(x+4), plotTop+4, col, esc("gate "+g.Name+" "+what))
	}

	// The three step lines, capacities under the weight.
	type line struct {
		name, style string
		v           func(strategy.PlanEntry) int32
	}
	lines := []line{
		{"stable capacity", `stroke="` + colStable + `" stroke-width="5" stroke-opacity="0.6"`, func(e strategy.PlanEntry) int32 { return e.Allocation.StableCapacity }},
		{"canary capacity", `stroke="` + colCanary + `" stroke-width="5" stroke-opacity="0.6"`, func(e strategy.PlanEntry) int32 { return e.Allocation.CanaryCapacity }},
		{"canary weight", `stroke="` + colWeight + `" stroke-width="1.8"`, func(e strategy.PlanEntry) int32 { return e.Allocation.Weight }},
	}
	if hasExtraLoad(*tl) {
		// Header-routed and mirrored requests: the load on the canary,
		// drawn beside its weight.
		lines = append(lines, line{"canary load", `stroke="` + colCanary + `" stroke-width="1.8" stroke-dasharray="6,3"`,
			func(e strategy.PlanEntry) int32 { return max(e.CanaryLoad, e.Allocation.Weight) }})
	}
	for _, l := range lines {
		initial := strategy.PlanEntry{Allocation: tl.Initial, CanaryLoad: tl.Initial.Weight}
		pts := []string{pt(xs[0], yAt(l.v(initial)))}
		last := l.v(initial)
		for i, e := range tl.Entries {
			v := l.v(e)
			if v == last {
				continue
			}
			pts = append(pts, pt(xs[i+1], yAt(last)), pt(xs[i+1], yAt(v)))
			last = v
		}
		pts = append(pts, pt(xEnd, yAt(last)))
		fmt.Fprintf(&b, `<polyline fill="none" stroke-linejoin="round" %s points="%s"><title>%s</title></polyline>`+"\n",
			l.style, strings.Join(dedupe(pts), " "), l.name)
	}

	// The end.
	var endCol string
	if n > 0 {
		endCol = phaseColour(tl.Final.Phase)
		last := tl.Entries[n-1]
		y := yAt(last.Allocation.Weight)
		label := fmt.Sprintf("%s at %s", orDash(string(tl.Final.Phase)), offset(total))
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-width="1.5"/>`+"\n", num(xEnd), plotTop, num(xEnd), plotBottom, endCol)
		fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="5.5" fill="%s" stroke="#ffffff" stroke-width="1.5"><title>%s</title></circle>`+"\n",
			num(xEnd), num(y), endCol, esc(label))
		anchor, lx := "start", xEnd+6
		if xEnd > plotLeft+plotW*0.7 {
			anchor, lx = "end", xEnd-6
		}
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="%s" font-weight="bold" fill="%s">%s</text>`+"\n",
			num(lx), plotTop-8, anchor, endCol, esc(label))
	}

	// The legend: only what is drawn.
	type entry struct{ swatch, name string }
	var legend []entry
	for _, l := range lines {
		legend = append(legend, entry{fmt.Sprintf(`<line x1="0" y1="0" x2="22" y2="0" %s/>`, l.style), l.name})
	}
	has := func(fill string) bool {
		for _, s := range spans {
			if s.fill == fill {
				return true
			}
		}
		return false
	}
	for _, f := range []struct{ fill, name string }{
		{fillTimed, "timed pause"},
		{fillResume, "pause until resumed"},
		{fillGateWait, "gate inconclusive"},
	} {
		if has(f.fill) {
			legend = append(legend, entry{fmt.Sprintf(`<rect x="0" y="-7" width="22" height="14" fill="%s"/>`, f.fill), f.name})
		}
	}
	if passes {
		legend = append(legend, entry{fmt.Sprintf(`<line x1="11" y1="-8" x2="11" y2="8" stroke="%s" stroke-width="1.5" stroke-dasharray="5,3"/>`, colGate), "gate passes"})
	}
	if fails {
		legend = append(legend, entry{fmt.Sprintf(`<line x1="11" y1="-8" x2="11" y2="8" stroke="%s" stroke-width="1.5" stroke-dasharray="5,3"/>`, colGateFail), "gate fails"})
	}
	if n > 0 {
		legend = append(legend, entry{fmt.Sprintf(`<circle cx="11" cy="0" r="5.5" fill="%s"/>`, endCol), "end: " + orDash(string(tl.Final.Phase))})
	}
	for i, e := range legend {
		fmt.Fprintf(&b, `<g transform="translate(%d,%d)">%s<text x="30" y="0" dominant-baseline="middle">%s</text></g>`+"\n",
			legendLeft, plotTop+8+22*i, e.swatch, esc(e.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// check reports the first thing in c that strategy.Plan never returns.
func (c *PlanChart) check() error {
	tl := &c.Timeline
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadPlan, field, fmt.Sprintf(format, args...))
	}
	pct := func(field string, a strategy.Allocation) error {
		for _, v := range []struct {
			name string
			v    int32
		}{{"Weight", a.Weight}, {"StableCapacity", a.StableCapacity}, {"CanaryCapacity", a.CanaryCapacity}} {
			if v.v < 0 || v.v > 100 {
				return bad(field+"."+v.name, "%d is not within 0..100", v.v)
			}
		}
		return nil
	}
	if err := pct("Timeline.Initial", tl.Initial); err != nil {
		return err
	}
	prev := time.Duration(0)
	for i, e := range tl.Entries {
		field := fmt.Sprintf("Timeline.Entries[%d]", i)
		if e.Offset < prev {
			return bad(field+".Offset", "%s is before the offset before it (%s)", e.Offset, prev)
		}
		prev = e.Offset
		if err := pct(field+".Allocation", e.Allocation); err != nil {
			return err
		}
		if e.CanaryLoad < 0 || e.CanaryLoad > 100 {
			return bad(field+".CanaryLoad", "%d is not within 0..100", e.CanaryLoad)
		}
	}
	if tl.Duration < prev {
		return bad("Timeline.Duration", "%s is before the last event (%s)", tl.Duration, prev)
	}
	for i, g := range c.Gates {
		field := fmt.Sprintf("Gates[%d]", i)
		if g.Offset < 0 || g.Offset > tl.Duration {
			return bad(field+".Offset", "%s is not within the plan (0 to %s)", g.Offset, tl.Duration)
		}
		if g.Verdict == strategy.VerdictInconclusive && g.Event >= 0 &&
			(g.Event >= len(tl.Entries) || tl.Entries[g.Event].What != whatUntilResumed) {
			return bad(field+".Event", "%d is not the index of a %q event", g.Event, whatUntilResumed)
		}
	}
	return nil
}

// yAt is the y of percentage p.
func yAt(p int32) float64 { return plotTop + plotH*(1-float64(p)/100) }

func pt(x, y float64) string { return num(x) + "," + num(y) }

// num writes a coordinate with one decimal at most.
func num(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	if s == "-0" {
		s = "0"
	}
	return s
}

// dedupe drops a point equal to the one before it.
func dedupe(pts []string) []string {
	out := pts[:0]
	for i, p := range pts {
		if i > 0 && p == pts[i-1] {
			continue
		}
		out = append(out, p)
	}
	return out
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func phaseColour(p strategy.Phase) string {
	switch p {
	case strategy.PhaseSucceeded:
		return "#2e8b3d"
	case strategy.PhaseAborted:
		return "#b3261e"
	case strategy.PhaseRolledBack:
		return "#c85a12"
	}
	return "#666666"
}

// offset writes an offset as the text output does: "+1m30s".
func offset(d time.Duration) string { return "+" + readable(d) }

// readable writes a duration for a reader, without zero units: "0s", "45s",
// "1m30s", "2h", "1d6h", "1m2.5s"; below a second as time.Duration writes
// it.
func readable(d time.Duration) string {
	if d < time.Second {
		return d.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if d >= u.d {
			fmt.Fprintf(&b, "%d%s", d/u.d, u.name)
			d %= u.d
		}
	}
	switch {
	case d%time.Second != 0:
		b.WriteString(d.String()) // seconds with a fraction
	case d > 0:
		fmt.Fprintf(&b, "%ds", d/time.Second)
	}
	return b.String()
}

// tickStep is a round step that puts at most 8 intervals on total (> 0).
func tickStep(total time.Duration) time.Duration {
	fits := func(s time.Duration) bool { return s > 0 && total/s <= 8 }
	if total < time.Second {
		for s := time.Duration(1); s < time.Second; s *= 10 {
			for _, m := range []time.Duration{1, 2, 5} {
				if fits(s * m) {
					return s * m
				}
			}
		}
	}
	for _, s := range []time.Duration{
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
	} {
		if fits(s) {
			return s
		}
	}
	day := 24 * time.Hour
	for s := 10 * day; s > 0 && s < math.MaxInt64/10; s *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if fits(s * m) {
				return s * m
			}
		}
	}
	return total
}
