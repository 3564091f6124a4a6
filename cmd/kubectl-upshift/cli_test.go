package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// TestPlan: plan -f prints strategy.Plan of a Release's strategy or of a
// bare one; golden files under testdata.
func TestPlan(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"plan-release", []string{"plan", "-f", "testdata/release.yaml", "--resume-after", "10m"}, 0},
		{"plan-release-gate-fails", []string{"plan", "-f", "testdata/release.yaml", "--verdict", "errors=Fail"}, 0},
		{"plan-incremental", []string{"plan", "-f", "testdata/incremental.yaml"}, 0},
		{"plan-release-delays", []string{"plan", "-f", "testdata/release.yaml", "--resume-after", "10m", "--ready-delay", "20s", "--route-delay", "1s"}, 0},
		{"plan-negative-delay", []string{"plan", "-f", "testdata/release.yaml", "--ready-delay", "-1s"}, exitError},
		{"plan-release-extras", []string{"plan", "-f", "testdata/release-extras.yaml", "--resume-after", "5m"}, 0},
		{"plan-bad-verdict", []string{"plan", "-f", "testdata/release.yaml", "--verdict", "latency=Fail"}, exitError},
		{"plan-no-file", []string{"plan", "-f", "testdata/none.yaml"}, exitError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), c.args, &out, &errOut)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.code, out.String(), errOut.String())
			}
			got := out.String() + errOut.String()
			golden := filepath.Join("testdata", c.name+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("kubectl upshift %s (-want +got):\n%s", strings.Join(c.args, " "), diff)
			}
		})
	}
}

// TestEnded: the exit code of get --watch for each way a rollout stands.
func TestEnded(t *testing.T) {
	degraded := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason}}
	}
	cases := []struct {
		name  string
		r     rollout
		code  int
		ended bool
	}{
		{"no state yet", rollout{}, 0, false},
		{"stale status", rollout{found: true, stale: true, state: strategy.State{Phase: strategy.PhaseSucceeded}}, 0, false},
		{"idle", rollout{found: true, state: strategy.NewState("v1", "v1")}, exitOK, true},
		{"progressing", rollout{found: true, state: strategy.State{StableRevision: "v1", CanaryRevision: "v2", Phase: strategy.PhaseProgressing}}, 0, false},
		{"succeeded", rollout{found: true, state: strategy.State{Phase: strategy.PhaseSucceeded, StableRevision: "v2", CanaryRevision: "v2"}}, exitOK, true},
		{"aborted", rollout{found: true, state: strategy.State{Phase: strategy.PhaseAborted, StableRevision: "v1", CanaryRevision: "v2"}}, exitAborted, true},
		{"rolled back", rollout{found: true, state: strategy.State{Phase: strategy.PhaseRolledBack, StableRevision: "v1", CanaryRevision: "v1"}}, exitRolledBk, true},
		{"past the deadline", rollout{found: true, state: strategy.State{Phase: strategy.PhaseProgressing, StableRevision: "v1", CanaryRevision: "v2",
			Conditions: degraded(strategy.ReasonProgressDeadlineExceeded)}}, exitDegraded, true},
		{"suspended", rollout{found: true, state: strategy.State{Phase: strategy.PhaseSuspended, StableRevision: "v1", CanaryRevision: "v2", ResumeWeight: 20,
			Aborted: &strategy.AbortStatus{Reason: strategy.ReasonControlSuspend}}}, exitSuspended, true},
		{"suspending", rollout{found: true, state: strategy.State{Phase: strategy.PhaseAborting, StableRevision: "v1", CanaryRevision: "v2", ResumeWeight: 20,
			Aborted: &strategy.AbortStatus{Reason: strategy.ReasonControlSuspend}}}, 0, false},
		{"adapters failing", rollout{found: true, state: strategy.State{Phase: strategy.PhaseProgressing, StableRevision: "v1", CanaryRevision: "v2",
			Conditions: degraded(strategy.ReasonObservationFailed)}}, 0, false},
	}
	for _, c := range cases {
		code, ended := ended(c.r)
		if code != c.code || ended != c.ended {
			t.Errorf("%s: ended = %d, %v; want %d, %v", c.name, code, ended, c.code, c.ended)
		}
	}
}

func TestNewToken(t *testing.T) {
	a := newToken(t0)
	b := newToken(t0.Add(1))
	if a == b || len(a) > 253 {
		t.Fatalf("tokens %q and %q", a, b)
	}
}

// TestTimeoutDefaults: each command has its own --timeout default (get
// waits for ever, the steering commands 30s), whatever the order in which
// the commands define the flag.
func TestTimeoutDefaults(t *testing.T) {
	o := &options{}
	root := newRoot(o)
	for _, c := range []struct {
		cmd  string
		want string
	}{{"get", "0s"}, {"abort", "30s"}, {"resume", "30s"}} {
		sub, _, err := root.Find([]string{c.cmd})
		if err != nil {
			t.Fatal(err)
		}
		if got := sub.Flags().Lookup("timeout").DefValue; got != c.want {
			t.Errorf("%s --timeout default %s, want %s", c.cmd, got, c.want)
		}
		if err := sub.Flags().Parse(nil); err != nil {
			t.Fatal(err)
		}
		if got := sub.Flags().Lookup("timeout").Value.String(); got != c.want {
			t.Errorf("%s --timeout unset reads %s, want %s", c.cmd, got, c.want)
		}
	}
}

// TestPlanSVG: plan --svg writes the plot that render.PlanChart draws (its
// golden files) and says where, after the text it prints without --svg.
func TestPlanSVG(t *testing.T) {
	cases := []struct {
		name, golden string
		args         []string
	}{
		{"canary", "plan-canary", []string{"plan", "-f", "testdata/release.yaml", "--resume-after", "10m"}},
		{"canary gate inconclusive", "plan-canary-inconclusive", []string{"plan", "-f", "testdata/release.yaml", "--resume-after", "10m", "--verdict", "errors=Inconclusive"}},
		{"incremental", "plan-incremental", []string{"plan", "-f", "testdata/incremental.yaml"}},
		{"blue-green", "plan-bluegreen", []string{"plan", "-f", "testdata/bluegreen.yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var text, errOut bytes.Buffer
			if code := run(context.Background(), c.args, &text, &errOut); code != 0 {
				t.Fatalf("without --svg: exit %d\n%s", code, errOut.String())
			}
			path := filepath.Join(t.TempDir(), "plan.svg")
			var out bytes.Buffer
			errOut.Reset()
			if code := run(context.Background(), append(c.args, "--svg", path), &out, &errOut); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			want := text.String() + "plot written to " + path + "\n"
			if diff := cmp.Diff(want, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if errOut.Len() != 0 {
				t.Errorf("stderr: %q", errOut.String())
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wantSVG, err := os.ReadFile(filepath.Join("render", "testdata", c.golden+".svg"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(wantSVG), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// TestPlanSVGUnwritable: a path that cannot be written fails the command,
// naming --svg, and prints no plan.
func TestPlanSVGUnwritable(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "no", "such", "dir", "plan.svg"), dir} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"plan", "-f", "testdata/incremental.yaml", "--svg", path}, &out, &errOut)
		if code != exitError {
			t.Errorf("--svg %s: exit %d, want %d", path, code, exitError)
		}
		if msg := errOut.String(); !strings.HasPrefix(msg, "error: --svg: ") || !strings.Contains(msg, path) {
			t.Errorf("--svg %s: stderr %q, want an error naming --svg and the path", path, msg)
		}
		if out.Len() != 0 {
			t.Errorf("--svg %s: stdout %q, want nothing", path, out.String())
		}
	}
}
