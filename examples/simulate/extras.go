package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// headerFlag is -header name=value:PCT: a header route step matching
// header name with value, PCT both its ExpectedPercent and the true share
// of requests that carry it.
type headerFlag struct {
	name, value string
	percent     int32
}

// parseHeader reads -header name=value:PCT.
func parseHeader(s string) (headerFlag, error) {
	bad := func(why string) (headerFlag, error) {
		return headerFlag{}, fmt.Errorf("-header %q: %s (want name=value:PCT, such as x-beta=1:5)", s, why)
	}
	spec, pct, ok := strings.Cut(s, ":")
	if !ok {
		return bad("no :PCT")
	}
	name, value, ok := strings.Cut(spec, "=")
	if !ok || name == "" || value == "" {
		return bad("no name=value")
	}
	if strings.ContainsAny(name, " \t:;,\"()<>@[]{}/?=\\") || http.CanonicalHeaderKey(name) == "" {
		return bad("the name is not a header name")
	}
	p, err := strconv.Atoi(pct)
	if err != nil || p < 0 || p > 100 {
		return bad("PCT must be a whole percent from 0 to 100")
	}
	return headerFlag{name: name, value: value, percent: int32(p)}, nil
}

// extrasOn reports whether any extras flag is set: the simulation then
// sends requests from users and shows the extras per step.
func (cfg *Config) extrasOn() bool { return cfg.Sticky || cfg.Header != "" || cfg.Mirror > 0 }

// extrasSteps are the canary steps of -header and -mirror, taken before the
// first weight: a header route sends the beta testers to the canary first,
// a mirror copies requests to it before it serves any.
func (cfg *Config) extrasSteps() ([]strategy.CanaryStep, error) {
	var steps []strategy.CanaryStep
	if cfg.Header != "" {
		h, err := parseHeader(cfg.Header)
		if err != nil {
			return nil, err
		}
		steps = append(steps, strategy.SetHeaderRoute(h.percent, strategy.HeaderMatch{Name: h.name, Value: h.value}))
	}
	if cfg.Mirror > 0 {
		steps = append(steps, strategy.SetMirror(int32(cfg.Mirror)))
	}
	return steps, nil
}

// configureTraffic gives traffic the users of -users (with -sticky, or
// whenever an extras flag is set: flips need users) and the marked
// requests of -header.
func (sim *simulation) configureTraffic(traffic *fake.Traffic) error {
	if !sim.cfg.extrasOn() {
		return nil
	}
	traffic.SetSeed(sim.cfg.Seed)
	if err := traffic.SetUsers(fake.Users{N: sim.cfg.Users, Clock: sim.clock}); err != nil {
		return err
	}
	if sim.cfg.Header != "" {
		h, err := parseHeader(sim.cfg.Header)
		if err != nil {
			return err
		}
		traffic.SetHeaderShare(float64(h.percent)/100, http.Header{http.CanonicalHeaderKey(h.name): {h.value}})
	}
	return nil
}

// extrasSample is what the extras did at one tick: the extras applied,
// the share of sessions on the canary (when sticky sessions are applied),
// the canary's load (its clients' requests and the mirrored copies, in
// percent of the tick's requests) and the running counts.
type extrasSample struct {
	applied              string // extrasText of the applied extras
	sticky               bool
	grid                 []int32
	sessions             int64
	sessionShare         float64
	canaryLoad           int32
	flips, copies, lost  int64
	headerRouted, marked int64
}

// extrasText renders the extras a route applies: "header route x-beta=1
// (at most 5%), mirror 20%, sticky sessions (tickets 20,50,80,100)", "no
// extras".
func extrasText(x strategy.TrafficExtras) string {
	text := x.String()
	if s := x.Sticky; s != nil {
		g := make([]string, len(s.Grid))
		for i, v := range s.Grid {
			g[i] = strconv.Itoa(int(v))
		}
		text += " (tickets " + strings.Join(g, ",") + ")"
	}
	return text
}

// extrasNow samples the extras at a tick: st is the traffic's stats, prev
// those of the tick before.
func extrasNow(routes rollout.Routes, canary strategy.Side, st, prev fake.TrafficStats, perTick int64) extrasSample {
	e := extrasSample{applied: extrasText(routes.Extras), sessions: st.Sessions, flips: st.Flips,
		copies: st.Of(canary).Mirrored, lost: st.Of(canary).MirrorLost, headerRouted: st.HeaderRouted, marked: st.HeaderMarked}
	if s := routes.Extras.Sticky; s != nil {
		e.sticky, e.grid, e.sessionShare = true, s.Grid, st.SessionShare()
	}
	if perTick > 0 && st.Ticks > prev.Ticks {
		c, p := st.Of(canary), prev.Of(canary)
		e.canaryLoad = int32((c.Requests - p.Requests + c.Mirrored - p.Mirrored) * 100 / perTick)
	}
	return e
}

// step is a stretch of a rollout at one applied weight and extras.
type step struct {
	from, to int // sample indexes, to exclusive
	weight   int32
	extras   extrasSample // at the step's last sample
	// The counts during the step.
	flips, copies, lost, headerRouted, marked int64
	// The canary's load and ready capacity at the tick with the least
	// room (load minus ready the highest).
	peakLoad, readyAtPeak int32
	// redraw is the share of sessions on the canary in the re-draw model
	// after this step, in percent.
	redraw float64
}

// steps splits a rollout's samples into steps: a new one whenever the
// applied weight or extras change.
func steps(samples []sample) []step {
	var out []step
	for i, s := range samples {
		if len(out) == 0 || s.weight != samples[i-1].weight || s.extras.applied != samples[i-1].extras.applied {
			out = append(out, step{from: i, weight: s.weight})
		}
		st := &out[len(out)-1]
		st.to = i + 1
		st.extras = s.extras
		// The tick nearest to (or furthest over) the canary's ready
		// capacity, the higher load first.
		if i == st.from || s.extras.canaryLoad-s.readyCanary > st.peakLoad-st.readyAtPeak ||
			s.extras.canaryLoad-s.readyCanary == st.peakLoad-st.readyAtPeak && s.extras.canaryLoad > st.peakLoad {
			st.peakLoad, st.readyAtPeak = s.extras.canaryLoad, s.readyCanary
		}
	}
	for i := range out {
		var before extrasSample
		if out[i].from > 0 {
			before = samples[out[i].from-1].extras
		}
		end := out[i].extras
		out[i].flips, out[i].copies, out[i].lost = end.flips-before.flips, end.copies-before.copies, end.lost-before.lost
		out[i].headerRouted, out[i].marked = end.headerRouted-before.headerRouted, end.marked-before.marked
	}
	ws := make([]int32, len(out))
	for i := range out {
		ws[i] = out[i].weight
	}
	for i, r := range redrawModel(ws) {
		out[i].redraw = r
	}
	return out
}

// redrawModel is the share of sessions on the canary, in percent, after
// each of the weights ws (percent) in a model where a session on the
// canary keeps it and a session on the stable side is drawn again at every
// step, going to the canary with the step's weight as probability:
// 1 - Π(1 - w_i) over the steps so far. It drifts above the weight; with
// tickets the share is the weight itself.
func redrawModel(ws []int32) []float64 {
	out := make([]float64, len(ws))
	stay := 1.0
	for i, w := range ws {
		stay *= 1 - float64(min(max(w, 0), 100))/100
		out[i] = 100 * (1 - stay)
	}
	return out
}

// ticketShare is the share of sessions, in percent, that tickets drawn
// over grid send to a canary at weight w: the largest grid value at most
// w (w itself when the weights walk the grid).
func ticketShare(grid []int32, w int32) int32 {
	share := int32(0)
	for _, g := range grid {
		if g <= w {
			share = g
		}
	}
	return share
}

// hoeffding is the largest deviation, in percent, of the share of n
// sessions holding tickets from its expectation, with probability at
// least 1 - 1e-6 (it holds at every weight at once: the tickets are drawn
// once).
func hoeffding(n int64) float64 {
	if n <= 0 {
		return 100
	}
	return 100 * math.Sqrt(math.Log(2/1e-6)/(2*float64(n)))
}

// printSteps prints the per-step table of a rollout with extras.
func printSteps(out io.Writer, res *result, cfg *Config) {
	fmt.Fprintf(out, "   steps (%d users; re-draw model: a session on the stable side is drawn again at every step with the step's weight as probability, 1-Π(1-w)):\n", cfg.Users)
	fmt.Fprintf(out, "     %7s %6s  %-22s %-13s %5s %-16s %-13s %-17s %s\n",
		"from", "weight", "sessions on canary", "re-draw model", "flips", "mirrored copies", "header-routed", "canary load/ready", "extras applied")
	for _, st := range steps(res.samples) {
		sessions, model := "-", "-"
		if st.extras.sticky {
			sessions = fmt.Sprintf("%.1f%% of %d", st.extras.sessionShare, st.extras.sessions)
		}
		if cfg.Sticky {
			model = fmt.Sprintf("%.1f%%", st.redraw)
		}
		header := "-"
		if cfg.Header != "" {
			header = fmt.Sprintf("%d/%d", st.headerRouted, st.marked)
		}
		copies := strconv.FormatInt(st.copies, 10)
		if st.lost > 0 {
			copies += fmt.Sprintf(" (%d lost)", st.lost)
		}
		load := fmt.Sprintf("%d/%d", st.peakLoad, st.readyAtPeak)
		if st.peakLoad > st.readyAtPeak {
			load += " over"
		}
		fmt.Fprintf(out, "     %7s %6d  %-22s %-13s %5d %-16s %-13s %-17s %s\n",
			"+"+seconds(res.samples[st.from].at), st.weight, sessions, model, st.flips, copies, header, load, st.extras.applied)
	}
}

// checkExtras lists what went wrong with the extras of a finished rollout:
// with sticky sessions, sessions that flipped from the canary to the
// stable side (without, users flip all the time: the table shows how
// often), a share of
// sessions on the canary outside the Hoeffding bound (probability 1e-6)
// of what the tickets give at the end of a step, mirrored copies the
// canary had no capacity for.
func checkExtras(res *result) []string {
	var problems []string
	if res.sticky && res.stats.Flips > 0 {
		problems = append(problems, fmt.Sprintf("%s: %d requests of a session went from the canary to the stable side while the weight did not fall", res.name, res.stats.Flips))
	}
	for _, st := range steps(res.samples) {
		e := st.extras
		if !e.sticky || e.sessions == 0 {
			continue
		}
		want := float64(ticketShare(e.grid, st.weight))
		if b := hoeffding(e.sessions); math.Abs(e.sessionShare-want) > b {
			problems = append(problems, fmt.Sprintf("%s: at weight %d, %.1f%% of %d sessions on the canary, want %.0f%% ± %.1f",
				res.name, st.weight, e.sessionShare, e.sessions, want, b))
		}
	}
	if lost := res.stats.A.MirrorLost + res.stats.B.MirrorLost; lost > 0 {
		problems = append(problems, fmt.Sprintf("%s: %d mirrored copies found the canary without ready capacity", res.name, lost))
	}
	return problems
}
