// Command kubectl-upshift is the kubectl plugin of upshift: `kubectl
// upshift get`, `pause`, `resume`, `promote`, `promote-full`, `abort`,
// `retry`, `claims` (and `claims release`) and `plan`. Installed on the
// PATH, kubectl finds it:
//
//	go install github.com/upshift-dev/upshift/cmd/kubectl-upshift@latest
//	kubectl upshift get release/web --watch
//
// It reads any object whose status embeds a strategy.State (the path is
// --state-path, .status.rollout by default), and routes whose state the
// gateway package's AnnotationStore keeps in an annotation.
//
// A control request counts as written only once the API server's answer
// to the patch holds it: a field the resource's schema lacks is pruned by
// the server (with a warning), and the command then fails at once naming
// the field and the CRD, instead of waiting for a request that was never
// stored.
//
// claims shows who holds the claims (rollout.ClaimedError) on the route
// rules and workloads of a rollout and whether each holder still exists;
// claims release removes the claims of a holder that is gone.
//
// Exit codes, for scripts:
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
