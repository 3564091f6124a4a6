package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// The plugin tests run the kubectl plugin (go tool kubectl-upshift, the
// module's tool dependency), built once per package, as a subprocess with
// a kubeconfig for the test's API server, exactly as a user runs it,
// against the operator binary reconciling a Release of the world.

// Exit codes of the plugin (its package doc).
const (
	exitOK         = 0
	exitAborted    = 2
	exitRolledBack = 3
	exitTimeout    = 5
	exitIgnored    = 6
	exitSuspended  = 7
)

// pluginPackage is the plugin's package, a tool of this module (go.mod).
const pluginPackage = "github.com/upshift-dev/upshift/cmd/kubectl-upshift"

var (
	pluginBuild sync.Once
	pluginBin   string
	pluginErr   error
)

// pluginBinary builds the plugin once, with -race when the test runs with
// it.
func pluginBinary(t *testing.T) string {
	t.Helper()
	pluginBuild.Do(func() {
		pluginBin = filepath.Join(binDir, "kubectl-upshift")
		args := []string{"build", "-o", pluginBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, pluginPackage)...).CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("go build %s: %v\n%s", pluginPackage, err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginBin
}

// plugin runs the plugin binary against the world's namespace.
type plugin struct {
	t          *testing.T
	bin        string
	kubeconfig string
	ns         string
	ctx        context.Context
}

// result is what one run of the plugin ended with.
type result struct {
	args        []string
	code        int
	out, errOut string
}

func (r result) String() string {
	return fmt.Sprintf("kubectl upshift %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.out, r.errOut)
}

// newPlugin writes the administrator's kubeconfig for the plugin; the
// processes it starts are killed when the test ends.
func newPlugin(t *testing.T, w *world) *plugin {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, w.env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &plugin{t: t, bin: pluginBinary(t), kubeconfig: kc, ns: w.ns, ctx: ctx}
}

// output collects what a process writes; drawn is closed at its first
// write (or when the process ends).
type output struct {
	mu    sync.Mutex
	b     strings.Builder
	once  sync.Once
	drawn chan struct{}
}

func newOutput() *output { return &output{drawn: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.once.Do(func() { close(o.drawn) })
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// run runs kubectl-upshift --kubeconfig K -n NS args... to its end.
func (p *plugin) run(args ...string) result { return p.exec(newOutput(), args) }

func (p *plugin) exec(out *output, args []string) result {
	defer out.once.Do(func() { close(out.drawn) })
	r := result{args: args}
	cmd := exec.CommandContext(p.ctx, p.bin, append([]string{"--kubeconfig", p.kubeconfig, "-n", p.ns}, args...)...)
	var errOut strings.Builder
	cmd.Stdout, cmd.Stderr = out, &errOut
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	r.out, r.errOut = out.String(), errOut.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.errOut += "\n(run: " + err.Error() + ")"
	}
	return r
}

// watch starts get --watch in the background and returns once it drew
// its first screen, from the object as it was then: it follows the
// rollout from there, whatever the test does next. The channel gets its
// result.
func (p *plugin) watch(args ...string) <-chan result {
	p.t.Helper()
	out := newOutput()
	done := make(chan result, 1)
	go func() { done <- p.exec(out, append([]string{"get", "--watch"}, args...)) }()
	<-out.drawn
	return done
}

// expect runs the plugin and fails the test unless it exits with code.
func (p *plugin) expect(code int, args ...string) result {
	p.t.Helper()
	r := p.run(args...)
	if r.code != code {
		p.t.Fatalf("want exit %d, got\n%s", code, r)
	}
	return r
}

// wait waits for the get --watch that watch started, which ends by its
// own --timeout at the latest.
func (p *plugin) wait(done <-chan result, code int) result {
	p.t.Helper()
	r := <-done
	if r.code != code {
		p.t.Fatalf("want exit %d, got\n%s", code, r)
	}
	return r
}

// outputHas fails the test unless r's output has every one of want.
func outputHas(t *testing.T, r result, want ...string) {
	t.Helper()
	for _, s := range want {
		if !strings.Contains(r.out, s) {
			t.Errorf("no %q in the output of\n%s", s, r)
		}
	}
}

// outputMatches fails the test unless r's output matches every one of
// the regular expressions.
func outputMatches(t *testing.T, r result, exprs ...string) {
	t.Helper()
	for _, e := range exprs {
		if !regexp.MustCompile(e).MatchString(r.out) {
			t.Errorf("no match of %s in the output of\n%s", e, r)
		}
	}
}

// requested returns the token the control command r wrote, from its
// "KIND/NAME: COMMAND TOKEN requested" line.
func requested(t *testing.T, r result, ref, command string) string {
	t.Helper()
	m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(ref+": "+command+" ") + `(\S+) requested$`).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("no %q request in the output of\n%s", command, r)
	}
	return m[1]
}

// sideRow matches the row of side in the sides table of get: its role,
// revision and weight.
func sideRow(side, role, revision string, weight int) string {
	return fmt.Sprintf(`(?m)^%s\s+%s\s+%s\s+%d\s`, side, role, regexp.QuoteMeta(revision), weight)
}

// field matches the line "Name:  value" of get.
func field(name, value string) string {
	return `(?m)^` + regexp.QuoteMeta(name+":") + `\s+` + regexp.QuoteMeta(value) + `$`
}

// at: the operator reconciled the spec, and the rollout is in phase with
// the weight asked for and on the route.
func at(weight int32, phase strategy.Phase) func(*v1alpha1.Release) bool {
	return func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && s.Phase == phase && s.Observed.Weight == weight &&
			s.Desired.Weight == weight
	}
}

// refs names the world's Release the ways a user does: the kind's
// singular (release/web) and the resource with its group.
func refs() (short, qualified string) {
	kind := strings.ToLower(v1alpha1.Kind)
	return kind + "/web", kind + "s." + v1alpha1.Group + "/web"
}

// pluginWorld starts the operator on a world of its own, with a Release
// whose canary steps are steps (a 25% surge, polled every second)
// released at v1, and returns the world and the plugin for it.
func pluginWorld(t *testing.T, steps ...strategy.CanaryStep) (*world, *plugin) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{MaxSurgePercent: 25, Steps: steps,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
	create(t, w.c, w.release("v1", canary))
	w.waitFor("v1 released", time.Minute, released)
	return w, newPlugin(t, w)
}

const ignoredReason = "ignored: it does not apply to the rollout as it stands"

// TestPluginRollout: the plugin's get shows the idle Release; get --watch
// follows a canary rollout with pause steps, which the plugin's promote,
// pause, resume and promote-full drive through to success, and exits 0;
// each control command says what the operator did with its request, and
// exits 6 when the operator used it up without effect.
func TestPluginRollout(t *testing.T) {
	w, p := pluginWorld(t, strategy.SetWeight(25), strategy.PauseUntilResumed(),
		strategy.SetWeight(50), strategy.PauseUntilResumed(), strategy.SetWeight(75), strategy.Pause(time.Hour))
	ref, _ := refs()
	title := v1alpha1.Kind + " " + w.ns + "/web"

	// The idle Release: get shows it and exits 0; so does get --watch,
	// which has nothing to wait for.
	r := p.expect(exitOK, "get", ref)
	outputHas(t, r, title+"\n")
	outputMatches(t, r, field("Phase", "Idle"), field("Revisions", "stable "+id("v1")), field("Strategy", "canary, 6 steps"),
		field("Waiting for", "nothing: no rollout (a new revision starts one)"),
		`(?m)^SIDE\s+ROLE\s+REVISION\s+WEIGHT\s+CAPACITY\s+READY\s+SETTLED$`,
		sideRow("A", "stable", id("v1"), 100), `(?m)^B\s+idle\s`)
	p.expect(exitOK, "get", ref, "--watch", "--timeout", "2m")
	// Nothing to retry: the operator uses the request up, ignored.
	r = p.expect(exitIgnored, "retry", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Retry "+ignoredReason)
	containsAll(t, "events", w.eventNotes(), "ControlRetry: spec.control: Retry "+requested(t, r, ref, "Retry")+" "+ignoredReason)

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	watched := p.watch(ref, "--timeout", "10m")

	w.waitFor("the pause step at 25", time.Minute, at(25, strategy.PhasePaused))
	r = p.expect(exitOK, "get", ref)
	outputMatches(t, r, field("Phase", "Paused"), field("Revisions", "stable "+id("v1")+" -> canary "+id("v2")),
		field("Step", "2/7: pause until resumed"), `(?m)^Waiting for:\s+promote or resume: a pause step without end`,
		sideRow("A", "stable", id("v1"), 75), sideRow("B", "canary", id("v2"), 25))
	// Retry mid-rollout: nothing aborted, ignored; the rollout stays.
	r = p.expect(exitIgnored, "retry", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Retry "+ignoredReason+"; now Paused, canary weight 25")
	containsAll(t, "events", w.eventNotes(), "ControlRetry: spec.control: Retry "+requested(t, r, ref, "Retry")+" "+ignoredReason)

	r = p.expect(exitOK, "promote", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Promote applied; now ")
	containsAll(t, "events", w.eventNotes(), "ControlPromote: spec.control: Promote "+requested(t, r, ref, "Promote"))

	// pause holds the pause step at 50 with the spec's own pause; get
	// shows it; resume clears control.paused, then ends the step's pause.
	w.waitFor("the pause step at 50", time.Minute, at(50, strategy.PhasePaused))
	r = p.expect(exitOK, "pause", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Pause requested\n", ref+": Pause applied; now Paused, canary weight 50, paused ("+strategy.ReasonControlPause+")")
	r = p.expect(exitOK, "get", ref)
	outputMatches(t, r, field("Step", "4/7: pause until resumed"), `(?m)^Waiting for:\s+resume: spec.control.paused holds it`,
		field("Control", "spec.control.paused is true (resume clears it)"), sideRow("B", "canary", id("v2"), 50))
	r = p.expect(exitOK, "resume", ref, "--timeout", "2m")
	outputHas(t, r, ref+": control.paused cleared\n", ref+": Resume applied; now ")
	containsAll(t, "events", w.eventNotes(), "ControlResume: spec.control: Resume "+requested(t, r, ref, "Resume"))

	// promote-full skips the hour's pause at 75 and the rest.
	w.waitFor("the hour's pause at 75", time.Minute, at(75, strategy.PhasePaused))
	r = p.expect(exitOK, "promote-full", ref, "--timeout", "2m")
	outputHas(t, r, ref+": PromoteFull applied; now ")

	r = p.wait(watched, exitOK)
	outputHas(t, r, title+"\n")
	outputMatches(t, r, field("Phase", "Progressing"), field("Phase", "Paused"),
		field("Step", "2/7: pause until resumed"), field("Step", "4/7: pause until resumed"), field("Step", "6/7: pause 1h0m0s"),
		field("Control", "spec.control.paused is true (resume clears it)"),
		sideRow("B", "canary", id("v2"), 25), sideRow("B", "canary", id("v2"), 50), sideRow("B", "canary", id("v2"), 75),
		field("Phase", "Succeeded"), field("Revisions", "stable "+id("v2")+" (rolled out)"), sideRow("B", "stable", id("v2"), 100))
	if rel := w.get(); rel.Status.Rollout.Phase != strategy.PhaseSucceeded || rel.Status.Rollout.StableRevision != id("v2") {
		t.Fatalf("get --watch exited 0 with the Release %s on %s", rel.Status.Rollout.Phase, rel.Status.Rollout.StableRevision)
	}
	checkForward(t, w.history(), "B", 25)

	// The rollout is finished: promote-full and abort are used up without
	// effect (exit 6); pause has nothing to hold, and resume un-pauses the
	// spec again.
	for _, c := range []struct{ cmd, command string }{{"promote-full", "PromoteFull"}, {"abort", "Abort"}} {
		r = p.expect(exitIgnored, c.cmd, ref, "--timeout", "2m")
		outputHas(t, r, ref+": "+c.command+" "+ignoredReason+"; now Succeeded")
		containsAll(t, "events", w.eventNotes(), "Control"+c.command+": spec.control: "+c.command+" "+requested(t, r, ref, c.command)+" "+ignoredReason)
	}
	r = p.expect(exitOK, "pause", ref, "--timeout", "2m")
	outputHas(t, r, ref+": nothing to hold now (Succeeded); the spec stays paused for the next rollout")
	if !w.get().Spec.Control.Paused {
		t.Error("pause did not set spec.control.paused")
	}
	r = p.expect(exitOK, "resume", ref, "--timeout", "2m")
	outputHas(t, r, ref+": control.paused cleared\n")
	if w.get().Spec.Control.Paused {
		t.Error("resume did not clear spec.control.paused")
	}
}

// TestPluginAbort: the plugin's abort mid-rollout walks the traffic back;
// get --watch exits 2 (Aborted); retry starts the rollout again, which
// resume and promote take to success, and get --watch exits 0.
func TestPluginAbort(t *testing.T) {
	w, p := pluginWorld(t, strategy.SetWeight(25), strategy.PauseUntilResumed(),
		strategy.SetWeight(50), strategy.PauseUntilResumed())
	ref, qualified := refs()

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	watched := p.watch(qualified, "--timeout", "10m")
	w.waitFor("the pause step at 25", time.Minute, at(25, strategy.PhasePaused))
	r := p.expect(exitOK, "abort", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Abort applied; now ")
	containsAll(t, "events", w.eventNotes(), "ControlAbort: spec.control: Abort "+requested(t, r, ref, "Abort"))

	r = p.wait(watched, exitAborted)
	outputMatches(t, r, field("Phase", "Paused"), sideRow("B", "canary", id("v2"), 25),
		field("Phase", "Aborted"), `(?m)^Waiting for:\s+nothing: Aborted .*\(retry starts it again\)$`, `(?m)^Aborted:\s+Aborted, `,
		sideRow("A", "stable", id("v1"), 100), sideRow("B", "canary", id("v2"), 0))
	rel := w.get()
	if s := rel.Status.Rollout; s.Phase != strategy.PhaseAborted || s.StableRevision != id("v1") || s.StableSide != strategy.SideA {
		t.Fatalf("get --watch exited %d with the Release %s, stable %s on side %s", exitAborted, s.Phase, s.StableRevision, s.StableSide)
	}
	// A promote does not move an aborted rollout: used up, exit 6.
	r = p.expect(exitIgnored, "promote", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Promote "+ignoredReason+"; now Aborted, canary weight 0")

	r = p.expect(exitOK, "retry", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Retry applied; now ")
	containsAll(t, "events", w.eventNotes(), "ControlRetry: spec.control: Retry "+requested(t, r, ref, "Retry"))
	watched = p.watch(ref, "--timeout", "10m")
	w.waitFor("retried to the pause step at 25", time.Minute, at(25, strategy.PhasePaused))
	r = p.expect(exitOK, "resume", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Resume applied; now ")
	if strings.Contains(r.out, "control.paused cleared") {
		t.Errorf("resume cleared control.paused, which was not set:\n%s", r)
	}
	w.waitFor("the pause step at 50", time.Minute, at(50, strategy.PhasePaused))
	r = p.expect(exitOK, "promote", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Promote applied; now ")

	r = p.wait(watched, exitOK)
	outputMatches(t, r, field("Step", "2/5: pause until resumed"), field("Step", "4/5: pause until resumed"),
		field("Phase", "Succeeded"), field("Revisions", "stable "+id("v2")+" (rolled out)"), sideRow("B", "stable", id("v2"), 100))
	if s := w.get().Status.Rollout; s.Phase != strategy.PhaseSucceeded || s.StableRevision != id("v2") || s.StableSide != strategy.SideB {
		t.Fatalf("get --watch exited 0 with the Release %s, stable %s on side %s", s.Phase, s.StableRevision, s.StableSide)
	}
	if h := w.history(); h[len(h)-1] != "0/100" {
		t.Errorf("route %v: want all traffic on side B at the end", h)
	}
}

// TestPluginRollback: get --watch --timeout gives up on a rollout held at a
// pause step (exit 5); spec.revision set back to the stable revision
// mid-rollout walks the canary back, and get --watch exits 3
// (RolledBack).
func TestPluginRollback(t *testing.T) {
	w, p := pluginWorld(t, strategy.SetWeight(25), strategy.PauseUntilResumed())
	ref, _ := refs()

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("the pause step at 25", time.Minute, at(25, strategy.PhasePaused))
	// The pause step holds the rollout until a promote: it cannot end
	// within the --timeout.
	r := p.expect(exitTimeout, "get", ref, "--watch", "--timeout", "3s")
	if !strings.Contains(r.errOut, ref+": the rollout did not end within --timeout 3s") {
		t.Errorf("no timeout message in\n%s", r)
	}

	watched := p.watch(ref, "--timeout", "10m")
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v1" })
	r = p.wait(watched, exitRolledBack)
	outputMatches(t, r, field("Phase", "Paused"), sideRow("B", "canary", id("v2"), 25),
		field("Phase", "RolledBack"), sideRow("A", "stable", id("v1"), 100))
	if s := w.get().Status.Rollout; s.Phase != strategy.PhaseRolledBack || s.StableRevision != id("v1") || s.StableSide != strategy.SideA {
		t.Fatalf("get --watch exited %d with the Release %s, stable %s on side %s", exitRolledBack, s.Phase, s.StableRevision, s.StableSide)
	}
}
