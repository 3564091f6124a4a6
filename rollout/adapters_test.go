package rollout_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/upshift-dev/upshift/rollout"
)

func TestCapacityRequestValidate(t *testing.T) {
	cases := []struct {
		r    rollout.CapacityRequest
		want string // "" for valid; else a word the error must hold
	}{
		{rollout.CapacityRequest{Percent: 0}, ""},
		{rollout.CapacityRequest{Percent: 55}, ""},
		{rollout.CapacityRequest{Percent: 100}, ""},
		{rollout.CapacityRequest{Percent: 100, Steady: true}, ""},
		{rollout.CapacityRequest{Percent: -1}, "Percent -1"},
		{rollout.CapacityRequest{Percent: 101}, "Percent 101"},
		{rollout.CapacityRequest{Percent: 0, Steady: true}, "Steady"},
		{rollout.CapacityRequest{Percent: 120, Steady: true}, "Percent 120"},
	}
	for _, tc := range cases {
		err := tc.r.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: Validate() = %v, want nil", tc.r, err)
		case tc.want != "" && (!errors.Is(err, rollout.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: Validate() = %v, want an error matching ErrInvalid that names %q", tc.r, err, tc.want)
		}
	}
}
