package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/strategy"
)

func newPlan(o *options) *cobra.Command {
	var (
		file        string
		resumeAfter time.Duration
		verdicts    map[string]string
	)
	c := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Print the exact dry run of a strategy (strategy.Plan)",
		Long: `Print the dry run of a strategy, hop by hop, with its total time: what a
rollout does when every hop applies at once (strategy.Plan). FILE ("-" for
standard input) holds a manifest with the strategy at --strategy-path (a
Release), or a bare strategy: an object with one of incremental, canary and
blueGreen. Nothing is read from the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return plan(o, file, resumeAfter, verdicts)
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "the manifest or strategy to plan (- for standard input)")
	c.Flags().DurationVar(&resumeAfter, "resume-after", 0, "how long a person takes to resume a pause without end or an inconclusive gate")
	c.Flags().StringToStringVar(&verdicts, "verdict", nil, "a gate's verdict, NAME=Pass|Fail|Inconclusive (every other gate passes)")
	_ = c.MarkFlagRequired("filename")
	return c
}

func plan(o *options, file string, resumeAfter time.Duration, verdicts map[string]string) error {
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
	po := strategy.PlanOptions{ResumeAfter: resumeAfter, Verdicts: map[string]strategy.Verdict{}}
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
	fmt.Fprintln(o.out, "+OFFSET WHAT (STABLE,CANARY capacity) wWEIGHT")
	fmt.Fprintln(o.out, tl.String())
	fmt.Fprintf(o.out, "\ncapacities: %s\nends %s\n", tl.Capacities(), tl.Final.Phase)
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
