package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
)

// TestScreen runs `kubectl upshift get --watch` in a tmux pane, as a person
// sees it, against a Release mid-rollout, checks the captured pane, and
// writes it to $UPSHIFT_SCREEN_OUT when set (hack/plugin-screen.sh prints
// it). ./test.sh installs tmux; without it the test fails where the API
// server is required (UPSHIFT_REQUIRE_KUBE=1, CI) and is skipped elsewhere.
func TestScreen(t *testing.T) {
	outFile := os.Getenv("UPSHIFT_SCREEN_OUT")
	if outFile == "" {
		outFile = filepath.Join(t.TempDir(), "screen.txt")
	}
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		msg := fmt.Sprintf("tmux: %v (./test.sh and hack/plugin-screen.sh install it: apt-get install tmux)", err)
		if os.Getenv("UPSHIFT_REQUIRE_KUBE") == "1" || os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	createRelease(t, dc, p.ns, "web")
	startController(t, env, p.ns, "web")
	waitState(t, dc, p.ns, "web", pausedAt(1))

	bin := filepath.Join(t.TempDir(), "kubectl-upshift")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	session := fmt.Sprintf("upshift-screen-%d", os.Getpid())
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cmd := fmt.Sprintf("%s --kubeconfig %s -n %s get --watch release/web; echo exit code $?; sleep 600", bin, p.kubeconfig, p.ns)
	tm("new-session", "-d", "-s", session, "-x", "100", "-y", "40", "env", "TERM=xterm-256color", "sh", "-c", cmd)
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", socket, "kill-server").Run() })

	// The pane as it is once it shows what wants, read every 200ms for at
	// most a minute (the screen is drawn by another process).
	paneShows := func(wants ...string) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		var pane string
		for time.Now().Before(deadline) {
			pane = tm("capture-pane", "-p", "-t", session)
			ok := true
			for _, w := range wants {
				ok = ok && strings.Contains(pane, w)
			}
			if ok {
				return pane
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("the pane never showed %q:\n%s", wants, pane)
		return ""
	}
	// Mid-rollout: promoted past the first pause, paused at weight 60.
	p.mustRun("promote", "release/web")
	pane := paneShows("Phase:        Paused", "Step:         4/5: pause until resumed", "ControlPromote")
	if err := os.WriteFile(outFile, []byte(strings.TrimRight(pane, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Release " + p.ns + "/web", "SIDE  ROLE    REVISION", "A     stable  v1        40", "B     canary  v2        60", "Conditions:", "Events:"} {
		if !strings.Contains(pane, want) {
			t.Errorf("the pane lacks %q:\n%s", want, pane)
		}
	}
	// The screen follows the rollout to its end, and the command exits 0.
	p.mustRun("promote-full", "release/web")
	paneShows("Phase:        Succeeded", "exit code 0")
}
