// Command gateway upgrades a service behind an existing Gateway API route in
// the cluster that KUBECONFIG names: it moves the route's weights from the
// stable backend to the canary backend with an upshift strategy, keeping the
// rollout's state in an annotation on the route, so that a killed run
// resumes where it stopped. Both backends stay as provisioned (the fixed
// capacity mode): make sure the canary can carry the traffic you send it.
//
// With -image it also deploys the canary revision itself: each backend's
// Deployment (-stable-deployment and -canary-deployment, by default named
// as the backend Services) is a side, and the revision's image is
// -image with {revision} replaced, in the container -container. Once
// every parent of the route has accepted weight 0 for the canary backend,
// the canary Deployment's pod template gets the canary image (and the
// annotation upshift.dev/revision), its controller replaces the pods, and
// the first weight moves only once the Deployment reports the new template
// fully rolled out. The stable Deployment must already run the stable
// revision's image; -stable-revision and -canary-revision are then the
// values of {revision}. At success the canary Deployment is the stable one.
//
//	go run ./examples/gateway -namespace shop -route web \
//	    -stable web-v1 -canary web-v2 -port 80 -strategy canary -steps 10,pause:1m,50,pause,100 \
//	    -stable-revision 1.4.0 -canary-revision 1.5.0 -image 'registry.example/shop:{revision}' -container app
//
// Without -image nothing is deployed: put the canary revision on the canary
// backend yourself before you run it, and the revisions are labels for the
// record.
//
// While it runs, type pause, resume, promote, promote-full or abort and
// Enter to command the rollout. It needs get and update on the route, and
// with -image get and update on the two Deployments.
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
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
	// StableDeployment and CanaryDeployment name the backends'
	// Deployments (default: Stable and Canary); used with Image.
	StableDeployment, CanaryDeployment string
	// Image maps a revision to an image, {revision} replaced by it; empty:
	// nothing is deployed. Container names the container it is set in.
	Image, Container string
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
	flag.DurationVar(&cfg.Deadline, "progress-deadline", 5*time.Minute, "abort when the gateway does not accept a change, or the canary Deployment does not roll out, in this time (0: never)")
	flag.StringVar(&cfg.StableDeployment, "stable-deployment", "", "with -image: Deployment of the stable backend (default: the -stable Service name)")
	flag.StringVar(&cfg.CanaryDeployment, "canary-deployment", "", "with -image: Deployment of the canary backend (default: the -canary Service name)")
	flag.StringVar(&cfg.Image, "image", "", "image of a revision, {revision} replaced by it, e.g. registry.example/app:{revision}: deploy the canary revision on the canary Deployment (default: none, you deploy it yourself)")
	flag.StringVar(&cfg.Container, "container", "app", "with -image: the container whose image is set")
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
	opts := strategy.Options{Capacity: strategy.CapacityFixed, PollInterval: metav1.Duration{Duration: cfg.Poll},
		ProgressDeadline: metav1.Duration{Duration: cfg.Deadline}, AbortOnProgressDeadline: cfg.Deadline > 0}
	var s strategy.Strategy
	switch cfg.Strategy {
	case "incremental":
		s = strategy.Incremental{StepPercent: int32(cfg.Step), Interval: metav1.Duration{Duration: cfg.Interval}, Options: opts}
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
	image, err := imageFor(cfg)
	if err != nil {
		return err
	}
	if cfg.StableDeployment == "" {
		cfg.StableDeployment = cfg.Stable
	}
	if cfg.CanaryDeployment == "" {
		cfg.CanaryDeployment = cfg.Canary
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
	// The state lives on the route, and each weight hop writes it with the
	// weights, in one update (a rollout.HopStore).
	store, err := router.AnnotationStore(ref)
	if err != nil {
		return err
	}
	deployments := map[strategy.Side]string{strategy.SideA: cfg.StableDeployment, strategy.SideB: cfg.CanaryDeployment}
	runner := &rollout.Runner{
		Strategy: strat, Router: router, Store: store,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			if rev := e.After.CanaryRevision; e.After.Observed.Revisions && rev != e.After.StableRevision &&
				e.After.Observed.Canary.RunsRevision(rev) && !e.Before.Observed.Canary.RunsRevision(rev) {
				side := e.After.StableSide.Other()
				fmt.Fprintf(out, "%s %-11s %s rolled out on side %s (Deployment %s)\n",
					e.Time.Format(time.TimeOnly), e.After.Phase, rev, side, deployments[side])
			}
			for _, h := range e.Applied {
				fmt.Fprintf(out, "%s %-11s %s\n", e.Time.Format(time.TimeOnly), e.After.Phase, h)
				if h.Kind == rollout.HopDeploy && image != nil {
					fmt.Fprintf(out, "%s %-11s   (image %s on Deployment %s, which the route sends weight 0)\n",
						e.Time.Format(time.TimeOnly), e.After.Phase, image(h.Revision), deployments[h.Side])
				}
			}
			if e.Err != nil {
				fmt.Fprintf(out, "%s %-11s ! %v\n", e.Time.Format(time.TimeOnly), e.After.Phase, e.Err)
			}
			if e.After.Phase != e.Before.Phase {
				msg := e.After.Message
				if e.After.Aborted != nil && e.Before.Aborted == nil {
					msg += " (abort reason " + e.After.Aborted.Reason + ")"
				}
				fmt.Fprintf(out, "%s %-11s %s\n", e.Time.Format(time.TimeOnly), e.After.Phase, msg)
			}
		}),
	}
	if image != nil {
		if runner.RevisionA, runner.RevisionB, err = deployers(ctx, rc, cfg, image, store); err != nil {
			return err
		}
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

// imageFor returns the image of a revision that -image describes, nil
// without -image.
func imageFor(cfg Config) (func(revision string) string, error) {
	switch {
	case cfg.Image == "":
		return nil, nil
	case !strings.Contains(cfg.Image, "{revision}"):
		return nil, fmt.Errorf("-image %q: want {revision} where the revision goes, e.g. registry.example/app:{revision}", cfg.Image)
	case cfg.Container == "":
		return nil, errors.New("-container is required with -image")
	}
	return func(revision string) string { return strings.ReplaceAll(cfg.Image, "{revision}", revision) }, nil
}

// deployers returns the Deployers of the stable (side A) and canary (side
// B) Deployments: each sets the revision's image in the container, even
// while the Deployment has replicas (the fixed capacity mode: the Runner
// deploys a side only while the route sends it weight 0). Before a new
// rollout (none saved on the route) it checks that the stable Deployment
// runs the stable revision: the strategy would otherwise hold the rollout
// until its progress deadline.
func deployers(ctx context.Context, rc *rest.Config, cfg Config, image func(string) string, store rollout.Store) (a, b rollout.Deployer, err error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	template := replicas.Image(cfg.Container, image)
	var ds [2]*replicas.Deployer
	for i, name := range []string{cfg.StableDeployment, cfg.CanaryDeployment} {
		d, err := replicas.ForDeployment(cs, replicas.Workload{Namespace: cfg.Namespace, Name: name, FullReplicas: 0}).Deployer(template)
		if err != nil {
			return nil, nil, err
		}
		d.FixedCapacity = true
		ds[i] = d
	}
	if _, err := store.Load(ctx); errors.Is(err, rollout.ErrNotFound) {
		st, err := ds[0].Revision(ctx, cfg.StableRev)
		if err != nil {
			return nil, nil, fmt.Errorf("the stable Deployment %s/%s: %w", cfg.Namespace, cfg.StableDeployment, err)
		}
		if st.Revision != cfg.StableRev {
			return nil, nil, fmt.Errorf("the stable Deployment %s/%s does not run the stable revision %s (image %s in container %q): deploy it first",
				cfg.Namespace, cfg.StableDeployment, cfg.StableRev, image(cfg.StableRev), cfg.Container)
		}
	} else if err != nil {
		return nil, nil, err
	}
	return ds[0], ds[1], nil
}

// readCommands turns lines of input into commands.
func readCommands(ctx context.Context, in io.Reader, cmds chan<- rollout.Command, out io.Writer) {
	// No more commands: Run no longer waits for one (a state already
	// finished in the route's annotation returns at once).
	defer close(cmds)
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
