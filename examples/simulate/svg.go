package main

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"time"
)

// series is one line of the timeline plot.
type series struct {
	name  string
	v     func(sample) int32
	style string // SVG presentation attributes of the line
}

// timelineSeries lists the plotted series in drawing order: the capacities
// each side is set to as wide translucent bands, the capacity each side has
// ready as dashed lines of the same colours, and the canary weight last, a
// thin dark line on top, so that it stays visible where it equals a
// capacity (as it does whenever traffic uses all the canary's capacity).
var timelineSeries = []series{
	{"stable capacity", func(s sample) int32 { return s.stable },
		`stroke="#1f77b4" stroke-width="6" stroke-opacity="0.45"`},
	{"canary capacity", func(s sample) int32 { return s.canary },
		`stroke="#2ca02c" stroke-width="6" stroke-opacity="0.45"`},
	{"stable ready", func(s sample) int32 { return s.readyStable },
		`stroke="#1f77b4" stroke-width="1.5" stroke-dasharray="6,4"`},
	{"canary ready", func(s sample) int32 { return s.readyCanary },
		`stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="6,4"`},
	{"canary weight", func(s sample) int32 { return s.weight },
		`stroke="#b2182b" stroke-width="2"`},
}

// extraSeries is a line of the plot of a rollout with traffic extras; v
// reports no value where the line has none (sessions without sticky
// sessions applied), where the line breaks.
type extraSeries struct {
	name  string
	v     func(r *result, i int) (float64, bool)
	style string
}

// extrasSeries lists the lines of the extras, drawn under the others: the
// canary's load (its clients' requests and the mirrored copies), the
// share of sessions on the canary, and what the re-draw model would give.
var extrasSeries = []extraSeries{
	{"canary load", func(r *result, i int) (float64, bool) { return float64(r.samples[i].extras.canaryLoad), true },
		`stroke="#ff7f0e" stroke-width="1.5"`},
	{"sessions on canary", func(r *result, i int) (float64, bool) {
		e := r.samples[i].extras
		return e.sessionShare, e.sticky
	}, `stroke="#9467bd" stroke-width="2.5"`},
	{"re-draw model", func(r *result, i int) (float64, bool) {
		if !r.sticky {
			return 0, false
		}
		return r.redraw[i], true
	}, `stroke="#9467bd" stroke-width="1.5" stroke-dasharray="2,3"`},
}

const (
	pauseFill    = "#f2e6c9"
	abortStroke  = `stroke="#000" stroke-width="1.5" stroke-dasharray="2,3"`
	deployStroke = `stroke="#7b3294" stroke-width="2"`
	deployFill   = "#e7d4e8"
)

// writeSVG plots a rollout's timeline: the canary weight, the capacity each
// side is set to and the capacity each side has ready, over time, with
// pauses shaded, a vertical line at each deploy of a revision (shaded until
// the side runs it fully rolled out) and, when the rollout was aborted, a
// vertical line at the abort. The legend lists only what the plot shows.
// The SVG is self-contained (no scripts, fonts or external references).
func writeSVG(w io.Writer, r *result) error {
	const (
		width, height = 900, 380
		left, right   = 60, 20
		top, bottom   = 70, 50
		plotW         = width - left - right
		plotH         = height - top - bottom
	)
	end := r.took
	if end <= 0 {
		end = time.Second
	}
	x := func(t time.Duration) float64 { return left + float64(plotW)*float64(t)/float64(end) }
	ymax := float64(100 + r.surge)
	if ymax < 100 {
		ymax = 100
	}
	y := func(v int32) float64 { return top + float64(plotH)*(1-float64(v)/ymax) }

	title := fmt.Sprintf("upshift %s rollout: %s in %s", r.name, r.phase, r.took.Round(time.Millisecond))
	if r.aborted {
		title = fmt.Sprintf("upshift %s rollout: %s at %s (%s), walked back in %s",
			r.name, r.phase, seconds(r.abortAt), r.abortReason, (r.took - r.abortAt).Round(time.Millisecond))
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<title>%s</title>
<rect x="0" y="0" width="%d" height="%d" fill="white"/>
`, width, height, width, height, html.EscapeString(title), width, height)

	// Pauses, shaded.
	var pauseFrom time.Duration
	inPause, paused := false, false
	for i, s := range r.samples {
		last := i == len(r.samples)-1
		if s.paused && !inPause {
			pauseFrom, inPause = s.at, true
		}
		if inPause && (!s.paused || last) {
			fmt.Fprintf(b, `<rect class="pause" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
				x(pauseFrom), top, x(s.at)-x(pauseFrom), plotH, pauseFill)
			inPause, paused = false, true
		}
	}

	// Deploys rolling out, shaded from the deploy until the side runs the
	// revision fully rolled out (or the end).
	for _, d := range r.deploys {
		until := end
		if d.rolledOut {
			until = d.rolledOutAt
		}
		fmt.Fprintf(b, `<rect class="deploying" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
			x(d.at), top, x(until)-x(d.at), plotH, deployFill)
	}

	// Axes and grid.
	for v := int32(0); float64(v) <= ymax; v += 20 {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), width-right, y(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", left-6, y(v)+4, v)
	}
	tickEvery := niceStep(end)
	for t := time.Duration(0); t <= end; t += tickEvery {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), height-bottom+18, t)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", left, top, plotW, plotH)

	// The deploys, under the series so that they stay readable: a line at
	// the deploy, over the band shaded until the revision is rolled out.
	for _, d := range r.deploys {
		dx := x(d.at)
		fmt.Fprintf(b, `<line class="deploy" x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", dx, top, dx, top+plotH, deployStroke)
		fmt.Fprintf(b, `<text class="deploy" x="%.1f" y="%d">%s</text>`+"\n",
			dx+4, top+28, html.EscapeString(fmt.Sprintf("deploy %s on side %s at %s", d.revision, d.side, seconds(d.at))))
	}

	// The abort, under the series so that they stay readable.
	if r.aborted {
		ax := x(r.abortAt)
		fmt.Fprintf(b, `<line class="abort" x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", ax, top, ax, top+plotH, abortStroke)
		fmt.Fprintf(b, `<text class="abort" x="%.1f" y="%d">abort at %s</text>`+"\n", ax+4, top+14, seconds(r.abortAt))
	}

	// The extras' lines, under the others, broken where they have no value.
	var extrasShown []extraSeries
	if r.extras {
		r.redraw = make([]float64, len(r.samples))
		for _, st := range steps(r.samples) {
			for i := st.from; i < st.to; i++ {
				r.redraw[i] = st.redraw
			}
		}
		yf := func(v float64) float64 { return top + float64(plotH)*(1-v/ymax) }
		for _, s := range extrasSeries {
			shown, open := false, false
			for j := range r.samples {
				v, ok := s.v(r, j)
				if !ok {
					if open {
						fmt.Fprintf(b, "\"/>\n")
						open = false
					}
					continue
				}
				if !open {
					fmt.Fprintf(b, `<polyline class="extras" data-name="%s" fill="none" stroke-linejoin="round" %s points="`, s.name, s.style)
					open, shown = true, true
				} else if pv, _ := s.v(r, j-1); pv != v {
					fmt.Fprintf(b, "%.1f,%.1f ", x(r.samples[j].at), yf(pv))
				}
				fmt.Fprintf(b, "%.1f,%.1f ", x(r.samples[j].at), yf(v))
			}
			if open {
				fmt.Fprintf(b, "\"/>\n")
			}
			if shown {
				extrasShown = append(extrasShown, s)
			}
		}
	}

	// The series as step lines, in drawing order.
	for _, s := range timelineSeries {
		fmt.Fprintf(b, `<polyline class="series" data-name="%s" fill="none" stroke-linejoin="round" %s points="`, s.name, s.style)
		for j, p := range r.samples {
			if j > 0 {
				fmt.Fprintf(b, "%.1f,%.1f ", x(p.at), y(s.v(r.samples[j-1])))
			}
			fmt.Fprintf(b, "%.1f,%.1f ", x(p.at), y(s.v(p)))
		}
		fmt.Fprintf(b, "\"/>\n")
	}

	// The legend: the series, then the shadings and the markers when shown.
	const perRow, colW, rowH = 5, 160, 20
	entry := 0
	next := func() (float64, float64) {
		ex, ey := float64(left+(entry%perRow)*colW), float64(16+(entry/perRow)*rowH)
		entry++
		return ex, ey
	}
	for _, i := range []int{4, 0, 2, 1, 3} { // the weight, then each side's set and ready capacity
		s := timelineSeries[i]
		ex, ey := next()
		fmt.Fprintf(b, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/><text class="legend" x="%.1f" y="%.1f">%s</text>`+"\n",
			ex, ey, ex+24, ey, s.style, ex+30, ey+4, s.name)
	}
	for _, s := range extrasShown {
		ex, ey := next()
		fmt.Fprintf(b, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/><text class="legend" x="%.1f" y="%.1f">%s</text>`+"\n",
			ex, ey, ex+24, ey, s.style, ex+30, ey+4, s.name)
	}
	if paused {
		ex, ey := next()
		fmt.Fprintf(b, `<rect class="legend" x="%.1f" y="%.1f" width="24" height="10" fill="%s"/><text class="legend" x="%.1f" y="%.1f">paused</text>`+"\n",
			ex, ey-5, pauseFill, ex+30, ey+4)
	}
	if len(r.deploys) > 0 {
		ex, ey := next()
		fmt.Fprintf(b, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/><text class="legend" x="%.1f" y="%.1f">deploy</text>`+"\n",
			ex+12, ey-6, ex+12, ey+6, deployStroke, ex+30, ey+4)
		ex, ey = next()
		fmt.Fprintf(b, `<rect class="legend" x="%.1f" y="%.1f" width="24" height="10" fill="%s"/><text class="legend" x="%.1f" y="%.1f">deploying</text>`+"\n",
			ex, ey-5, deployFill, ex+30, ey+4)
	}
	if r.aborted {
		ex, ey := next()
		fmt.Fprintf(b, `<line class="legend" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/><text class="legend" x="%.1f" y="%.1f">abort</text>`+"\n",
			ex+12, ey-6, ex+12, ey+6, abortStroke, ex+30, ey+4)
	}
	fmt.Fprintf(b, "</svg>\n")
	return b.Flush()
}

// niceStep picks a tick spacing that gives about eight labels.
func niceStep(total time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if total/s <= 8 {
			return s
		}
	}
	return total / 8
}
