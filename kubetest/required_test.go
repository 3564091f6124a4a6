package kubetest

import "testing"

// TestRequired: missing binaries fail the tests under CI=true or
// UPSHIFT_REQUIRE_KUBE=1, and by default under MainRequired, which only
// an explicit UPSHIFT_REQUIRE_KUBE=0 turns into skips.
func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ci, require  string
		mainRequired bool
		want         bool
	}{
		{"Main, nothing set", "", "", false, false},
		{"Main, UPSHIFT_REQUIRE_KUBE=1", "", "1", false, true},
		{"Main, CI=true", "true", "", false, true},
		{"Main, UPSHIFT_REQUIRE_KUBE=0", "", "0", false, false},
		{"MainRequired, nothing set", "", "", true, true},
		{"MainRequired, UPSHIFT_REQUIRE_KUBE=0", "", "0", true, false},
		{"MainRequired, UPSHIFT_REQUIRE_KUBE=false", "", "false", true, false},
		{"MainRequired, UPSHIFT_REQUIRE_KUBE=0 but CI=true", "true", "0", true, true},
		{"MainRequired, UPSHIFT_REQUIRE_KUBE unreadable", "", "maybe", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv("UPSHIFT_REQUIRE_KUBE", tc.require)
			shared.mu.Lock()
			prev := shared.required
			shared.required = tc.mainRequired
			shared.mu.Unlock()
			t.Cleanup(func() {
				shared.mu.Lock()
				shared.required = prev
				shared.mu.Unlock()
			})
			if got := Required(); got != tc.want {
				t.Errorf("Required() = %v, want %v", got, tc.want)
			}
		})
	}
}
