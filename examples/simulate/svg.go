package main

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// writeSVG plots a rollout's timeline: the canary weight and both
// capacities over time, with pauses shaded. The SVG is self-contained (no
// scripts, fonts or external references).
func writeSVG(w io.Writer, r *result) error {
	const (
		width, height = 900, 360
		left, right   = 60, 20
		top, bottom   = 40, 50
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

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<title>upshift %s rollout: %s in %s</title>
<rect x="0" y="0" width="%d" height="%d" fill="white"/>
`, width, height, width, height, r.name, r.phase, r.took.Round(time.Millisecond), width, height)

	// Pauses, shaded.
	var pauseFrom time.Duration
	inPause := false
	for i, s := range r.samples {
		last := i == len(r.samples)-1
		if s.paused && !inPause {
			pauseFrom, inPause = s.at, true
		}
		if inPause && (!s.paused || last) {
			fmt.Fprintf(b, `<rect class="pause" x="%.1f" y="%d" width="%.1f" height="%d" fill="#f2e6c9"/>`+"\n",
				x(pauseFrom), top, x(s.at)-x(pauseFrom), plotH)
			inPause = false
		}
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

	// The three series as step lines.
	series := []struct {
		name, color string
		v           func(sample) int32
	}{
		{"canary weight", "#d62728", func(s sample) int32 { return s.weight }},
		{"stable capacity", "#1f77b4", func(s sample) int32 { return s.stable }},
		{"canary capacity", "#2ca02c", func(s sample) int32 { return s.canary }},
	}
	for i, s := range series {
		fmt.Fprintf(b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="2" points="`, s.name, s.color)
		for j, p := range r.samples {
			if j > 0 {
				fmt.Fprintf(b, "%.1f,%.1f ", x(p.at), y(s.v(r.samples[j-1])))
			}
			fmt.Fprintf(b, "%.1f,%.1f ", x(p.at), y(s.v(p)))
		}
		fmt.Fprintf(b, "\"/>\n")
		fmt.Fprintf(b, `<rect x="%d" y="12" width="14" height="4" fill="%s"/><text x="%d" y="18">%s</text>`+"\n",
			left+i*170, s.color, left+i*170+18, s.name)
	}
	fmt.Fprintf(b, `<rect x="%d" y="10" width="14" height="8" fill="#f2e6c9"/><text x="%d" y="18">paused</text>`+"\n", left+510, left+528)
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
