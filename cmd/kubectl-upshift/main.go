// Command kubectl-upshift is the kubectl plugin of upshift: `kubectl
// upshift get`, `pause`, `suspend`, `resume`, `promote`, `promote-full`,
// `abort`, `retry`, `claims` (and `claims release`) and `plan`. Installed on the
// PATH (go install github.com/upshift-dev/upshift/cmd/kubectl-upshift@latest)
// kubectl finds it. It reads any object whose status embeds a
// strategy.State (--state-path, .status.rollout by default), and routes
// whose state the gateway package's AnnotationStore keeps in an annotation.
//
// A control request counts as written only once the API server's answer
// to the patch holds it: a field the schema lacks is pruned (with a
// warning), and the command fails at once naming the field and the CRD.
// claims shows who holds the claims (rollout.ClaimedError) on a rollout's
// route rules and workloads, and whether each holder still exists; claims
// release removes those of a holder that is gone. See
// docs/design/kubectl-upshift.md. Exit codes, for scripts:
//
//	0  done: get --watch saw the rollout succeed (or nothing to roll
//	   out); a control request was applied
//	1  an error: bad arguments, the object or the API server unreachable,
//	   a request the API server did not keep, a claim not released
//	2  get --watch: the rollout ended Aborted
//	3  get --watch: the rollout ended RolledBack
//	4  get --watch: the rollout is Degraded and will not move by itself
//	   (reason ProgressDeadlineExceeded, InvalidState or InvalidOptions)
//	5  --timeout passed before the rollout ended (get --watch) or
//	   answered the control request
//	6  the rollout used up the control request without applying it
//	   (it did not apply to the rollout as it stood)
//	7  get --watch: the rollout is Suspended (all on the stable side,
//	   waiting for resume)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code != 0 {
		os.Exit(code)
	}
}
