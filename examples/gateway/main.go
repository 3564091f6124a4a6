// Command gateway upgrades a service behind an existing Gateway API route in
// the cluster that KUBECONFIG names: it moves the route's weights from the
// stable backend to the canary backend with an upshift strategy, keeping the
// rollout's state in an annotation on the route, so that a killed run
// resumes where it stopped. Both backends stay as provisioned (the fixed
// capacity mode): make sure the canary can carry the traffic you send it.
//
//	go run ./examples/gateway -namespace shop -route web \
//	    -stable web-v1 -canary web-v2 -port 80 -strategy canary -steps 10,pause:1m,50,pause,100
//
// While it runs, type pause, resume, promote, promote-full or abort and
// Enter to command the rollout. It needs get and update on the route.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Config holds the flags.
type Config struct {
	Kubeconfig     string
	Namespace      string
	Route          string
	Kind           string
	Stable, Canary string
	Port           int
	StableRev      string
	CanaryRev      string
	Strategy       string
	Step           int
	Interval       time.Duration
	Steps          string
	Settle         time.Duration
	Poll           time.Duration
	Deadline       time.Duration
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default $KUBECONFIG, then in-cluster)")
	flag.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the route")
	flag.StringVar(&cfg.Route, "route", "", "name of the route (required)")
	flag.StringVar(&cfg.Kind, "kind", gateway.KindHTTPRoute, "HTTPRoute or GRPCRoute")
	flag.StringVar(&cfg.Stable, "stable", "", "Service name of the stable backend (required)")
	flag.StringVar(&cfg.Canary, "canary", "", "Service name of the canary backend (required)")
	flag.IntVar(&cfg.Port, "port", 0, "backend port as the route names it (0: the refs have no port)")
	flag.StringVar(&cfg.StableRev, "stable-revision", "stable", "revision label of the stable side, for the record")
	flag.StringVar(&cfg.CanaryRev, "canary-revision", "canary", "revision label of the canary side, for the record")
	flag.StringVar(&cfg.Strategy, "strategy", "incremental", "incremental, canary or bluegreen")
	flag.IntVar(&cfg.Step, "step", 10, "incremental: weight step in percent")
	flag.DurationVar(&cfg.Interval, "interval", 30*time.Second, "incremental: least time between weight steps")
	flag.StringVar(&cfg.Steps, "steps", "10,pause:1m,50,pause:1m", "canary: comma-separated weights and pauses (pause:DURATION, or pause alone to wait for resume)")
	flag.DurationVar(&cfg.Settle, "settle", 500*time.Millisecond, "wait after the gateway reports the route accepted")
	flag.DurationVar(&cfg.Poll, "poll", 2*time.Second, "poll interval while waiting for the gateway")
	flag.DurationVar(&cfg.Deadline, "progress-deadline", 5*time.Minute, "abort when the gateway does not accept a change in this time (0: never)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// strategyFor builds the strategy the flags describe, in the fixed capacity
// mode.
func strategyFor(cfg Config) (strategy.Strategy, error) {
	opts := strategy.Options{Capacity: strategy.CapacityFixed, PollInterval: cfg.Poll,
		ProgressDeadline: cfg.Deadline, AbortOnProgressDeadline: cfg.Deadline > 0}
	var s strategy.Strategy
	switch cfg.Strategy {
	case "incremental":
		s = strategy.Incremental{StepPercent: int32(cfg.Step), Interval: cfg.Interval, Options: opts}
	case "bluegreen":
		s = strategy.BlueGreen{Options: opts}
	case "canary":
		steps, err := parseSteps(cfg.Steps)
		if err != nil {
			return nil, err
		}
		s = strategy.Canary{Steps: steps, Options: opts}
	default:
		return nil, fmt.Errorf("-strategy %q: want incremental, canary or bluegreen", cfg.Strategy)
	}
	return s, s.Validate()
}

// parseSteps reads "10,pause:1m,50,pause,gate:errors".
func parseSteps(s string) ([]strategy.CanaryStep, error) {
	var steps []strategy.CanaryStep
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == "pause":
			steps = append(steps, strategy.PauseUntilResumed())
		case strings.HasPrefix(f, "pause:"):
			d, err := time.ParseDuration(strings.TrimPrefix(f, "pause:"))
			if err != nil {
				return nil, fmt.Errorf("-steps %q: %w", f, err)
			}
			steps = append(steps, strategy.Pause(d))
		default:
			w, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("-steps %q: want a weight, pause or pause:DURATION", f)
			}
			steps = append(steps, strategy.SetWeight(int32(w)))
		}
	}
	return steps, nil
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

func run(ctx context.Context, cfg Config, stdin io.Reader, out io.Writer) error {
	if cfg.Route == "" || cfg.Stable == "" || cfg.Canary == "" {
		return errors.New("-route, -stable and -canary are required")
	}
	strat, err := strategyFor(cfg)
	if err != nil {
		return err
	}
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := gwv1.Install(scheme); err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ref := gateway.RouteRef{Kind: cfg.Kind, Namespace: cfg.Namespace, Name: cfg.Route}
	router, err := gateway.NewRouter(c, gateway.Config{
		Routes: []gateway.RouteRef{ref}, SettleDelay: cfg.Settle,
		A: gateway.Backend{Name: cfg.Stable, Port: int32(cfg.Port)},
		B: gateway.Backend{Name: cfg.Canary, Port: int32(cfg.Port)},
	})
	if err != nil {
		return err
	}
	runner := &rollout.Runner{
		Strategy: strat, Router: router, Store: gateway.NewAnnotationStore(c, ref),
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			for _, h := range e.Applied {
				fmt.Fprintf(out, "%s %-11s %s\n", e.Time.Format(time.TimeOnly), e.After.Phase, h)
			}
			if e.Err != nil {
				fmt.Fprintf(out, "%s %-11s ! %v\n", e.Time.Format(time.TimeOnly), e.After.Phase, e.Err)
			}
			if e.After.Phase != e.Before.Phase {
				fmt.Fprintf(out, "%s %-11s %s\n", e.Time.Format(time.TimeOnly), e.After.Phase, e.After.Message)
			}
		}),
	}
	cmds := make(chan rollout.Command)
	go readCommands(ctx, stdin, cmds, out)
	end, err := runner.Run(ctx, strategy.NewState(cfg.StableRev, cfg.CanaryRev), cmds)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s is now the stable revision\n", end.Phase, end.StableRevision)
	if end.Phase != strategy.PhaseSucceeded {
		return fmt.Errorf("the rollout ended %s", end.Phase)
	}
	return nil
}

// readCommands turns lines of input into commands.
func readCommands(ctx context.Context, in io.Reader, cmds chan<- rollout.Command, out io.Writer) {
	if in == nil {
		return
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var cmd rollout.Command
		switch strings.TrimSpace(sc.Text()) {
		case "pause":
			cmd = strategy.State.Pause
		case "resume":
			cmd = strategy.State.Resume
		case "promote":
			cmd = strategy.State.Promote
		case "promote-full":
			cmd = strategy.State.PromoteFull
		case "abort":
			cmd = func(s strategy.State, t time.Time) strategy.State { return s.Abort("aborted by the operator", t) }
		default:
			fmt.Fprintln(out, "commands: pause, resume, promote, promote-full, abort")
			continue
		}
		select {
		case cmds <- cmd:
		case <-ctx.Done():
			return
		}
	}
}
