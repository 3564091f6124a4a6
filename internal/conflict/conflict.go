// Package conflict retries a Kubernetes read-modify-write that loses
// optimistic-concurrency races, for the adapters that write objects
// (gateway, serve/replicas).
package conflict

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"

	"github.com/upshift-dev/upshift/rollout"
)

// Retry runs attempt (a fresh read, a change, a write) until it does not
// fail with a conflict, at most retries+1 times, with client-go's
// RetryOnConflict and its short, flat DefaultRetry backoff: the writers an
// adapter races (a controller writing status, a GitOps tool) write once and
// move on, and a Runner retries the whole hop after its RetryInterval anyway,
// so a reconcile never stalls on a longer backoff here.
//
// ctx is checked before every attempt, and an ended ctx is returned as such
// (RetryOnConflict would answer it with the last conflict). Conflicts that
// outlast the retries return an error that matches rollout.ErrConflict and
// apierrors.IsConflict; other errors are returned as attempt made them.
func Retry(ctx context.Context, retries int, attempt func() error) error {
	backoff := retry.DefaultRetry
	backoff.Steps = retries + 1
	err := retry.RetryOnConflict(backoff, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return attempt()
	})
	switch {
	case !apierrors.IsConflict(err):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%w (%d in a row): %w", rollout.ErrConflict, backoff.Steps, err) // every attempt lost a race
}
