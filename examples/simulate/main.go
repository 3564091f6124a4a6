// Command simulate runs upshift rollouts on in-memory fakes and shows them
// live: every hop with its time, phase, weights, capacities and ready
// capacity, then a summary: the time taken against the Plan (which assumes
// adapters that apply every hop at once), or for an aborted rollout when it
// was aborted and how long walking back took, the deploys, and the simulated
// traffic.
//
// Each side runs a revision: side A starts with v1. The Runner deploys each
// rollout's revision on the canary side itself (the fake sides are its
// RevisionA and RevisionB), at weight 0 and capacity 0: the deploy hop comes
// first ("deploy v2 on side B"), then the line where the side is observed
// running it fully rolled out, and only then do capacity and weight move.
// The program exits 1 when a rollout ends in an unexpected phase, drops or
// overloads requests, provisions more than 100 percent plus the strategy's
// surge budget (-surge for incremental and canary, 100 for bluegreen), or
// deploys on a side that serves traffic or holds capacity (the fake sides
// record it).
//
// With no flags it runs an incremental upgrade from v1 to v2 (step 10,
// interval 2s, MaxSurge 20) and then, on the same two sides, a canary to v3
// with a timed pause and a manual pause that the program resumes. Simulated
// time runs -speed times faster than the wall clock (0: as fast as
// possible). -svg plots the last rollout: weights, capacities, pauses, each
// deploy (a marker, shaded until rolled out) and the abort. -faults injects
// route conflicts, failed capacity changes, a failed first attempt of each
// deploy, slower replicas and deploys, and partial readiness.
//
// -analysis judges each canary by its success rate, as a controller would
// with package rollout/analysis: every simulated request is recorded into
// a fake.Metrics (a metrics backend that sees requests a second after
// they happen), and an analysis.Analysis requires that at least 95% of the
// canary's requests in a 3s window succeed, evaluated every second (the
// Runner's health; the canary strategy also gets a gate of the same check
// after its first step), tolerating one failed evaluation, with the
// strategy's UnhealthyThreshold at 1 so that the analysis decides alone.
// -canary-errors makes each rollout's new revision answer that share of its
// requests with a 500: above 5% the analysis must abort the rollout by
// itself (a rollout that succeeds then exits 1), below it the rollout must
// succeed. Each summary then adds the requests sent and failed and, for an
// abort, how long after the first failed request it came.
//
// Traffic extras: -sticky turns on sticky sessions (the strategies'
// SessionAffinity) for -users simulated users with cookie jars; -header
// name=value:PCT adds a header route step to the canary strategy, PCT
// percent being both its declared ExpectedPercent and the true share of
// requests (users) that carry the header; -mirror P adds a step that
// copies P percent of the stable side's requests to the canary. Both steps
// come before the canary's first weight. With any of them, each rollout
// ends with a table of its steps: the weight, the share of sessions on
// the canary beside what a re-draw model
// would give (a session on the stable side drawn again at every step with
// the step's weight as probability, 1-Π(1-w), which drifts above the
// weight), the sessions that flipped from the canary to the stable side,
// the mirrored copies, the header-routed requests, the canary's peak load
// against its ready capacity and the extras the route applies; -svg plots
// them too. The program exits
// 1 when a session flips while the weight does not fall, when the share
// of sessions on the canary strays from the weight beyond the Hoeffding
// bound (probability 1e-6), or when mirrored copies find the canary
// without ready capacity. The extras reach the route only through the
// Runner (the strategy decides when each applies): a route that applies
// none shows "no extras".
//
//	go run ./examples/simulate
//	go run ./examples/simulate -strategy canary -abort-at 15s -svg out.svg
//	go run ./examples/simulate -strategy canary -sticky -users 5000 -header x-beta=1:5 -mirror 20
//	go run ./examples/simulate -faults -speed 0
//	go run ./examples/simulate -analysis -canary-errors 0.1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Strategy, "strategy", cfg.Strategy, "what to run: all (incremental then canary), incremental, canary or bluegreen")
	flag.IntVar(&cfg.Step, "step", cfg.Step, "incremental: weight step in percent")
	flag.DurationVar(&cfg.Interval, "interval", cfg.Interval, "incremental: least time between weight steps")
	flag.IntVar(&cfg.Surge, "surge", cfg.Surge, "incremental and canary: max surge in percent of full capacity (bluegreen always surges 100: the whole canary next to the whole stable side)")
	flag.DurationVar(&cfg.Pause, "pause", cfg.Pause, "canary: the timed pause")
	flag.DurationVar(&cfg.ResumeAfter, "resume-after", cfg.ResumeAfter, "canary: when the program resumes the manual pause")
	flag.StringVar(&cfg.AbortRamp, "abort-ramp", cfg.AbortRamp, "how an abort walks back: immediate, gradual or emergency")
	flag.DurationVar(&cfg.AbortAt, "abort-at", 0, "abort each rollout this long after it starts (0: never)")
	flag.BoolVar(&cfg.Faults, "faults", false, "inject faults: route conflicts, transient adapter errors (a failed first attempt of each deploy among them), slow and partial readiness")
	flag.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of each side at full capacity")
	flag.Float64Var(&cfg.Speed, "speed", cfg.Speed, "simulated seconds per wall-clock second (0: no waiting)")
	flag.StringVar(&cfg.SVG, "svg", "", "write a timeline plot of the last rollout as SVG to this file")
	flag.BoolVar(&cfg.Analysis, "analysis", false, "judge each canary by its success rate (at least 95% of its requests in a 3s window, from metrics of the simulated traffic): a failing canary aborts by itself")
	flag.Float64Var(&cfg.CanaryErrors, "canary-errors", 0, "share of its requests (0..1) that each rollout's new revision answers with a 500")
	flag.BoolVar(&cfg.Sticky, "sticky", false, "sticky sessions: every new session gets a ticket that keeps it on one side while the weight moves")
	flag.IntVar(&cfg.Users, "users", cfg.Users, "simulated users with cookie jars sending the requests (with -sticky, -header or -mirror)")
	flag.StringVar(&cfg.Header, "header", "", "canary: a header route step, name=value:PCT (PCT: the declared expected percent and the true share of users carrying the header)")
	flag.IntVar(&cfg.Mirror, "mirror", 0, "canary: a mirror step copying this percent of the stable side's requests to the canary")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the simulated users' draws")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simulate:", err)
		os.Exit(1)
	}
}

// Config holds the flags.
type Config struct {
	Strategy    string
	Step        int
	Interval    time.Duration
	Surge       int
	Pause       time.Duration
	ResumeAfter time.Duration
	AbortRamp   string
	AbortAt     time.Duration
	Faults      bool
	Replicas    int
	Speed       float64
	SVG         string
	// Analysis judges each canary by its success rate; CanaryErrors is the
	// share of requests each rollout's new revision fails.
	Analysis     bool
	CanaryErrors float64
	// Sticky turns on sticky sessions; Users is the number of simulated
	// users; Header is -header name=value:PCT; Mirror the percent of
	// -mirror; Seed seeds the users' draws.
	Sticky bool
	Users  int
	Header string
	Mirror int
	Seed   uint64
}

func defaultConfig() Config {
	return Config{
		Strategy:    "all",
		Step:        10,
		Interval:    2 * time.Second,
		Surge:       20,
		Pause:       4 * time.Second,
		ResumeAfter: 3 * time.Second,
		AbortRamp:   "immediate",
		Replicas:    10,
		Speed:       10,
		Users:       5000,
		Seed:        1,
	}
}

func run(ctx context.Context, cfg Config, out io.Writer) error {
	sim, err := newSimulation(cfg, out)
	if err != nil {
		return err
	}
	var names []string
	switch cfg.Strategy {
	case "all":
		names = []string{"incremental", "canary"}
	case "incremental", "canary", "bluegreen":
		names = []string{cfg.Strategy}
	default:
		return fmt.Errorf("-strategy %q: want all, incremental, canary or bluegreen", cfg.Strategy)
	}
	var last *result
	var problems []string
	for i, name := range names {
		res, err := sim.rollout(ctx, name, fmt.Sprintf("v%d", i+2))
		if err != nil {
			return err
		}
		last = res
		problems = append(problems, res.problems...)
	}
	if cfg.SVG != "" && last != nil {
		f, err := os.Create(cfg.SVG)
		if err != nil {
			return err
		}
		if err := writeSVG(f, last); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "timeline written to %s\n", cfg.SVG)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
