package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/render"
	"github.com/upshift-dev/upshift/strategy"
)

func newPlan(o *options) *cobra.Command {
	var (
		file        string
		resumeAfter time.Duration
		verdicts    map[string]string
		svg         string
		delays      planDelays
	)
	c := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Print the exact dry run of a strategy (strategy.Plan)",
		Long: `Print the dry run of a strategy, hop by hop, with its total time: what a
rollout does when every hop applies at once (strategy.Plan). FILE ("-" for
standard input) holds a manifest with the strategy at --strategy-path (a
Release), or a bare strategy: an object with one of incremental, canary and
blueGreen. Nothing is read from the cluster.

With --svg FILE it also writes the plan as a self-contained SVG plot: the
capacity of each side and the canary weight over time, pauses and gates
shaded or marked, and the phase it ends in. Extras hops (header routes,
mirrors, sticky sessions) are listed with the rest; where header-routed and
mirrored requests load the canary beyond its weight, the table ends the
line with "load N%" and the plot draws the canary's load as a dashed line.

With --ready-delay (how long a side takes to become ready after it grows)
and --route-delay (how long the data plane takes to serve a route change)
the plan is what a rollout does with adapters that slow: capacity for the
next weight is asked that long before each pause or interval ends. The last
lines give the ramp (first to last weight move) and the surge cost: the
capacity above full integrated over time, in seconds of full capacity
(times a side's replicas, pod-seconds).

  kubectl upshift plan -f release.yaml --resume-after 10m --svg plan.svg
  kubectl upshift plan -f release.yaml --ready-delay 30s --route-delay 1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return plan(o, file, resumeAfter, verdicts, svg, delays)
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "the manifest or strategy to plan (- for standard input)")
	c.Flags().DurationVar(&resumeAfter, "resume-after", 0, "how long a person takes to resume a pause without end or an inconclusive gate")
	c.Flags().StringToStringVar(&verdicts, "verdict", nil, "a gate's verdict, NAME=Pass|Fail|Inconclusive (every other gate passes)")
	c.Flags().StringVar(&svg, "svg", "", "also write the plan as an SVG plot to this file")
	c.Flags().DurationVar(&delays.ready, "ready-delay", 0, "how long a side takes to become ready after it is asked to grow")
	c.Flags().DurationVar(&delays.route, "route-delay", 0, "how long the data plane takes to serve a route change")
	_ = c.MarkFlagRequired("filename")
	return c
}

// planDelays are the adapters' delays a plan is made with.
type planDelays struct{ ready, route time.Duration }

func plan(o *options, file string, resumeAfter time.Duration, verdicts map[string]string, svg string, delays planDelays) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--ready-delay", delays.ready}, {"--route-delay", delays.route}, {"--resume-after", resumeAfter}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: must not be negative", d.flag, d.v)
		}
	}
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	p, err := object.ParsePath("--strategy-path", o.strategyPath)
	if err != nil {
		return err
	}
	s, err := object.Manifest(doc, p)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	po := strategy.PlanOptions{ResumeAfter: resumeAfter, Verdicts: map[string]strategy.Verdict{},
		ReadyDelay: delays.ready, RouteDelay: delays.route}
	for name, v := range verdicts {
		switch verdict := strategy.Verdict(v); verdict {
		case strategy.VerdictPass, strategy.VerdictFail, strategy.VerdictInconclusive:
			po.Verdicts[name] = verdict
		default:
			return fmt.Errorf("--verdict %s=%s: want Pass, Fail or Inconclusive", name, v)
		}
	}
	for name := range po.Verdicts {
		if !contains(s.Gates(), name) {
			return fmt.Errorf("--verdict %s: the strategy has no gate %q (gates: %s)", name, name, strings.Join(s.Gates(), ", "))
		}
	}
	tl, err := strategy.Plan(s, po)
	if err != nil {
		return err
	}
	if svg != "" {
		var b bytes.Buffer
		title := fmt.Sprintf("%s plan of %s", kind(s), source(file, doc))
		if err := (render.PlanChart{Title: title, Timeline: tl, Gates: render.PlanGates(s, po, tl)}).WriteSVG(&b); err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
		if err := os.WriteFile(svg, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
	}
	fmt.Fprintln(o.out, render.PlanText(tl))
	fmt.Fprintf(o.out, "\ncapacities: %s\nramp %s (first to last weight move), surge cost %s of full capacity\nends %s\n",
		tl.Capacities(), tl.Ramp, tl.SurgeCost, tl.Final.Phase)
	if svg != "" {
		fmt.Fprintf(o.out, "plot written to %s\n", svg)
	}
	return nil
}

// kind names the kind of a strategy as the manifests spell it.
func kind(s strategy.Strategy) string {
	switch s.(type) {
	case strategy.Incremental:
		return "incremental"
	case strategy.Canary:
		return "canary"
	case strategy.BlueGreen:
		return "blue-green"
	}
	return fmt.Sprintf("%T", s)
}

// source names what a plan was read from: the object of a manifest
// (Release/web), else the file.
func source(file string, doc map[string]any) string {
	k, _ := doc["kind"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	switch {
	case k != "" && name != "":
		return k + "/" + name
	case file == "-":
		return "standard input"
	}
	return filepath.Base(file)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
