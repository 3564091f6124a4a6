// Command simulate runs upshift rollouts on in-memory fakes and shows them
// live: every hop with its time, phase, weights, capacities and ready
// capacity, then a summary against the Plan, the deploys, and the simulated
// traffic. The Runner deploys each revision on the canary side itself, at
// weight 0 and capacity 0, before capacity and weight move.
//
//	go run ./examples/simulate
//	go run ./examples/simulate -strategy canary -abort-at 15s -svg out.svg
//	go run ./examples/simulate -strategy canary -sticky -users 5000 -header x-beta=1:5 -mirror 20
//	go run ./examples/simulate -faults -speed 0
//	go run ./examples/simulate -analysis -canary-errors 0.1
//
// With no flags it runs an incremental upgrade from v1 to v2 and then a
// canary to v3 with a timed and a manual pause. -speed scales simulated
// time (0: as fast as possible); -svg plots the last rollout; -faults
// injects conflicts, failures, slow replicas and partial readiness;
// -analysis judges each canary by its success rate with package
// rollout/analysis, and -canary-errors makes the new revision fail that
// share of requests; -sticky, -users, -header and -mirror turn on the
// traffic extras and print a table of each rollout's steps.
//
// The program exits 1 when a rollout ends in an unexpected phase, drops or
// overloads requests, provisions more than 100 percent plus the surge
// budget, deploys on a side that serves traffic or holds capacity, or
// succeeds with -canary-errors above 5%; with extras, also when a session
// flips while the weight does not fall, the share of sessions on the
// canary strays from the weight beyond the Hoeffding bound, or mirrored
// copies find the canary without ready capacity. See
// docs/design/examples.md for each flag and check.
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
