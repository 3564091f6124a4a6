package retry_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/serve/drain"
	"github.com/upshift-dev/upshift/serve/retry"
)

// The two packages do not import each other; their marker constants must
// still be the same strings.
func TestMarkerMatchesDrain(t *testing.T) {
	want := []string{drain.MarkerHeader, drain.MarkerRefused, drain.MarkerCancelled, drain.MarkerResumable}
	got := []string{retry.MarkerHeader, retry.MarkerRefused, retry.MarkerCancelled, retry.MarkerResumable}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("marker constants (-want drain +got retry):\n%s", diff)
	}
}
