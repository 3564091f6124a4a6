package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
)

// Exit codes (see the package doc).
const (
	exitOK       = 0
	exitError    = 1
	exitAborted  = 2
	exitRolledBk = 3
	exitDegraded = 4
	exitTimeout  = 5
	exitIgnored  = 6
	// exitSuspended: get --watch saw the rollout suspended; it waits for
	// a person (resume).
	exitSuspended = 7
)

// exitError carries an exit code out of a command.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// withCode returns err with an exit code; a nil err with a non-zero code
// exits silently with that code.
func withCode(code int, err error) error { return &codeError{code: code, err: err} }

var errSilent = errors.New("")

// options are the flags every command shares.
type options struct {
	kubeconfig   string
	overrides    clientcmd.ConfigOverrides
	statePath    string
	strategyPath string
	controlPath  string
	timeout      time.Duration
	out, errOut  io.Writer
	// tty reports whether out is a terminal: get --watch then redraws in
	// place, and every second.
	tty bool
	// now is the clock of the screens.
	now func() time.Time
}

func (o *options) paths() (state, strat, control object.Path, err error) {
	if state, err = object.ParsePath("--state-path", o.statePath); err != nil {
		return
	}
	if strat, err = object.ParsePath("--strategy-path", o.strategyPath); err != nil {
		return
	}
	control, err = object.ParsePath("--control-path", o.controlPath)
	return
}

// run runs the plugin with args and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{out: stdout, errOut: stderr, now: time.Now}
	if f, ok := stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			o.tty = true
		}
	}
	root := newRoot(o)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if errors.As(err, &ce) {
		if ce.err != nil && ce.err != errSilent {
			fmt.Fprintln(stderr, "error:", ce.err)
		}
		return ce.code
	}
	fmt.Fprintln(stderr, "error:", err)
	return exitError
}

func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-upshift",
		Short: "See and steer upshift rollouts",
		Long: `kubectl upshift shows where an upshift rollout stands and steers it.

It works on any object whose status embeds the rollout's state (the example
operator's Release, a CRD of your own: --state-path, --strategy-path and
--control-path say where), and on routes whose state a standalone rollout
keeps in the upshift.dev/rollout-state annotation. "claims" shows who holds
the claims on a rollout's objects, and releases those of a holder that is gone.

Exit codes: 0 done (succeeded, or a request applied), 1 error, 2 aborted,
3 rolled back, 4 degraded, 5 timeout, 6 request ignored by the rollout,
7 suspended (get --watch).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs it as `kubectl upshift`: its help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl upshift"},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	clientcmd.BindOverrideFlags(&o.overrides, pf, clientcmd.RecommendedConfigOverrideFlags(""))
	pf.StringVar(&o.statePath, "state-path", ".status.rollout", "field path of the rollout's state (strategy.State) in the object")
	pf.StringVar(&o.strategyPath, "strategy-path", ".spec.strategy", "field path of the strategy (an object with one of incremental, canary, blueGreen)")
	pf.StringVar(&o.controlPath, "control-path", ".spec.control", "field path of the rollout's control (strategy.Control) in the object's spec")
	root.AddCommand(newGet(o), newPlan(o), newClaims(o))
	for _, c := range controls {
		root.AddCommand(newControl(o, c))
	}
	return root
}
