package conflict_test

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/upshift-dev/upshift/internal/conflict"
	"github.com/upshift-dev/upshift/rollout"
)

func TestRetry(t *testing.T) {
	lost := apierrors.NewConflict(schema.GroupResource{Resource: "httproutes"}, "web", errors.New("changed"))
	other := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		conflicts int   // attempts that lose a race before one succeeds
		fail      error // returned once the races are over
		wantCalls int
		want      func(error) bool
	}{
		{"no race", context.Background(), 0, nil, 1, func(err error) bool { return err == nil }},
		{"two races then a write", context.Background(), 2, nil, 3, func(err error) bool { return err == nil }},
		{"every attempt loses", context.Background(), 100, nil, 4, func(err error) bool {
			return errors.Is(err, rollout.ErrConflict) && apierrors.IsConflict(err)
		}},
		{"another error stops at once", context.Background(), 0, other, 1, func(err error) bool { return errors.Is(err, other) }},
		{"an ended ctx is said as such", cancelled, 100, nil, 0, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := conflict.Retry(tt.ctx, 3, func() error {
				calls++
				if calls <= tt.conflicts {
					return lost
				}
				return tt.fail
			})
			if !tt.want(err) || calls != tt.wantCalls {
				t.Fatalf("err %v after %d calls, want %d calls", err, calls, tt.wantCalls)
			}
		})
	}
}
