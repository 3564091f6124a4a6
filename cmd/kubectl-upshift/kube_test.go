package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/cmd/kubectl-upshift/internal/object"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

// The tests run the plugin's commands (run, in process) against a real
// kube-apiserver with the example operator's Release CRD installed. The
// operator's part is played by releaseController below: on every change of
// a Release it does what the operator's reconcile does with the state
// (Retarget to spec.revision, Control with spec.control, an Event for
// every request applied, Warning when ignored) and steps the real strategy
// with every hop applied at once, writing status.rollout. The Deployments,
// the route and the data plane are not involved: the screens and the
// control round trips are what is tested here.

func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard()) // the test environment's clients log nothing
	os.Exit(kubetest.Main(m))
}

var releases = schema.GroupVersionResource{Group: "operator.upshift.dev", Version: "v1alpha1", Resource: "releases"}

var crdOnce struct {
	sync.Once
	err error
}

// installCRD installs the example operator's Release CRD, once.
func installCRD(t *testing.T, env *kubetest.Env) {
	t.Helper()
	crdOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "operator", "config", "crd", "operator.upshift.dev_releases.yaml"))
		if err != nil {
			crdOnce.err = err
			return
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			crdOnce.err = err
			return
		}
		dc := dynamic.NewForConfigOrDie(env.Config)
		crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := crds.Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			crdOnce.err = err
			return
		}
		w, err := crds.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + u.GetName()})
		if err != nil {
			crdOnce.err = err
			return
		}
		defer w.Stop()
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return
				}
			}
		}
		crdOnce.err = fmt.Errorf("CRD %s not established: %w", u.GetName(), ctx.Err())
	})
	if crdOnce.err != nil {
		t.Fatal(crdOnce.err)
	}
}

// plugin runs the plugin's commands as a user would.
type plugin struct {
	t          *testing.T
	kubeconfig string
	ns         string
}

func newPlugin(t *testing.T) (*plugin, *kubetest.Env) {
	env := kubetest.Get(t)
	installCRD(t, env)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return &plugin{t: t, kubeconfig: kc, ns: env.Namespace(t)}, env
}

// run runs the plugin with args and returns its exit code and output.
func (p *plugin) run(ctx context.Context, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	args = append([]string{"--kubeconfig", p.kubeconfig, "-n", p.ns}, args...)
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func (p *plugin) mustRun(args ...string) string {
	p.t.Helper()
	code, out, errOut := p.run(context.Background(), args...)
	if code != 0 {
		p.t.Fatalf("kubectl upshift %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

const releaseYAML = `
apiVersion: operator.upshift.dev/v1alpha1
kind: Release
metadata: {name: %s}
spec:
  revision: v2
  image: {container: app, template: "registry.example/shop:{revision}"}
  replicas: 4
  a: {deployment: web-a, service: web-a}
  b: {deployment: web-b, service: web-b}
  route: {name: web}
  strategy:
    canary:
      maxSurgePercent: 25
      steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 60
      - pause: {}
`

func createRelease(t *testing.T, dc dynamic.Interface, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(releaseYAML, name)), &u.Object); err != nil {
		t.Fatal(err)
	}
	out, err := dc.Resource(releases).Namespace(ns).Create(context.Background(), &u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseController plays the operator's part for one Release (see the
// comment at the top) until ctx ends.
func releaseController(ctx context.Context, t *testing.T, env *kubetest.Env, ns, name string) {
	dc := dynamic.NewForConfigOrDie(env.Config)
	ri := dc.Resource(releases).Namespace(ns)
	now := time.Now()
	reconcile := func(u *unstructured.Unstructured) error {
		st, _, err := object.State(u, object.Path{"status", "rollout"})
		if err != nil {
			return err
		}
		strat, err := object.Strategy(u.Object, object.Path{"spec", "strategy"})
		if err != nil {
			return err
		}
		c, err := object.Control(u, object.Path{"spec", "control"})
		if err != nil {
			return err
		}
		rev, _, _ := unstructured.NestedString(u.Object, "spec", "revision")
		if st.StableRevision == "" { // a new Release: side A runs v1
			st = strategy.NewState("v1", "v1")
		}
		if n := time.Now(); n.After(now) {
			now = n
		}
		st = st.Retarget(rev, now)
		st, applied := st.Control(c, now)
		for _, a := range applied {
			typ, note := corev1.EventTypeNormal, "spec.control: "+a.Command
			if a.Token != "" {
				note += " " + a.Token
			}
			if a.Ignored {
				typ, note = corev1.EventTypeWarning, note+" ignored: it does not apply to the rollout as it stands"
			}
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: name + ".", Namespace: ns},
				InvolvedObject: corev1.ObjectReference{APIVersion: releases.GroupVersion().String(), Kind: "Release", Namespace: ns, Name: name, UID: u.GetUID()},
				Type:           typ, Reason: "Control" + a.Command, Message: note,
				FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now), Count: 1,
				Source: corev1.EventSource{Component: "test-operator"},
			}
			if _, err := env.Kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		st, now = stepInstantly(strat, st, now)
		raw, err := json.Marshal(st)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, m, "status", "rollout"); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration"); err != nil {
			return err
		}
		_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return nil // a newer version follows on the watch
		}
		return err
	}
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("controller: %v", err)
		}
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og == u.GetGeneration() {
			continue // only its own status write
		}
		if err := reconcile(u); err != nil && ctx.Err() == nil {
			t.Errorf("controller: %v", err)
			return
		}
	}
}

// stepInstantly steps st with every hop applied at once until the rollout
// waits for a person or ends (the strategies here have no timed waits but
// the polls for what was asked, which answer at once).
func stepInstantly(strat strategy.Strategy, st strategy.State, now time.Time) (strategy.State, time.Time) {
	st.Observed.Revisions = true
	for range 200 {
		if st.Idle() {
			break
		}
		st.Observed.Stable.Revision, st.Observed.Stable.Updated = st.StableRevision, true
		st.Observed.At = metav1.NewMicroTime(now)
		d := strat.Step(st, now)
		st = d.State
		o := &st.Observed
		if d.Weight.Set {
			o.Weight, o.WeightApplied = d.Weight.Value, true
		}
		if d.StableCapacity.Set {
			o.Stable.Capacity, o.Stable.Ready, o.Stable.Settled = d.StableCapacity.Value, d.StableCapacity.Value, true
		}
		if d.CanaryCapacity.Set {
			o.Canary.Capacity, o.Canary.Ready, o.Canary.Settled = d.CanaryCapacity.Value, d.CanaryCapacity.Value, true
		}
		if d.Deploy.Set {
			o.Canary.Revision, o.Canary.Updated = d.Deploy.Revision, true
		}
		if !d.HasHops() {
			if d.RequeueAfter <= 0 || st.AwaitingResume || st.Phase == strategy.PhasePaused || st.Phase.Terminal() {
				break
			}
			now = now.Add(d.RequeueAfter)
		}
	}
	return st, now
}

// waitState waits, from a watch, until the Release's status.rollout
// satisfies cond.
func waitState(t *testing.T, dc dynamic.Interface, ns, name string, cond func(*strategy.State) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dc.Resource(releases).Namespace(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last strategy.State
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok {
			st, _, err := object.State(u, object.Path{"status", "rollout"})
			if err != nil {
				t.Fatal(err)
			}
			if last = st; cond(&st) {
				return
			}
		}
	}
	t.Fatalf("%s/%s: the rollout never got there; last phase %s, step %d", ns, name, last.Phase, last.StepIndex)
}

func pausedAt(step int32) func(*strategy.State) bool {
	return func(s *strategy.State) bool { return s.Phase == strategy.PhasePaused && s.StepIndex == step }
}

func startController(t *testing.T, env *kubetest.Env, ns, name string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		releaseController(ctx, t, env, ns, name)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// watchResult is what get --watch ended with.
type watchResult struct {
	code        int
	out, errOut string
}

func (p *plugin) watch(args ...string) <-chan watchResult {
	done := make(chan watchResult, 1)
	go func() {
		code, out, errOut := p.run(context.Background(), append([]string{"get", "--watch"}, args...)...)
		done <- watchResult{code, out, errOut}
	}()
	return done
}

func mustContain(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: missing %q in:\n%s", what, w, out)
		}
	}
}

// TestEveryCommandOnARelease: get, pause, resume, promote, promote-full,
// abort and retry on a Release, and get --watch through a whole rollout.
func TestEveryCommandOnARelease(t *testing.T) {
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	createRelease(t, dc, p.ns, "web")
	startController(t, env, p.ns, "web")

	// The controller steps to the pause without end after weight 20.
	waitState(t, dc, p.ns, "web", pausedAt(1))
	watched := p.watch("release/web", "--timeout", "2m")
	out := p.mustRun("promote", "rel/web", "--timeout", "1m")
	mustContain(t, "promote", out, "release/web: Promote ", "requested", "Promote applied; now Paused, canary weight 60")

	out = p.mustRun("pause", "release/web")
	mustContain(t, "pause", out, "Pause applied; now Paused")
	out = p.mustRun("get", "release/web")
	mustContain(t, "get while paused", out, "Release "+p.ns+"/web", "Phase:", "Step:         4/5: pause until resumed",
		"spec.control.paused is true", "SIDE  ROLE", "Conditions:", "Events:", "ControlPromote")

	// Resume clears control.paused and ends the pause step too.
	out = p.mustRun("resume", "release/web")
	mustContain(t, "resume", out, "Resume applied")

	// The rollout succeeded: --watch saw it and exited 0.
	res := <-watched
	if res.code != exitOK {
		t.Fatalf("get --watch: exit %d, want 0\n%s\n%s", res.code, res.out, res.errOut)
	}
	mustContain(t, "get --watch", res.out, "Phase:        Paused", "Phase:        Succeeded", "stable v2 (rolled out)")

	// Retry and promote-full on a finished rollout: used up, exit 6.
	for _, cmd := range []string{"retry", "promote-full"} {
		code, out, errOut := p.run(context.Background(), cmd, "release/web")
		if code != exitIgnored {
			t.Fatalf("%s on a finished rollout: exit %d, want %d\n%s%s", cmd, code, exitIgnored, out, errOut)
		}
		mustContain(t, cmd, out, "ignored: it does not apply to the rollout as it stands")
	}
}

// TestWatchAnAbort: get --watch exits 2 when the rollout is aborted, and
// retry and promote-full start and finish it again.
func TestWatchAnAbort(t *testing.T) {
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	createRelease(t, dc, p.ns, "shop")
	startController(t, env, p.ns, "shop")
	waitState(t, dc, p.ns, "shop", pausedAt(1))

	watched := p.watch("releases.operator.upshift.dev/shop", "--timeout", "2m")
	out := p.mustRun("abort", "release/shop")
	mustContain(t, "abort", out, "Abort applied; now Aborted, canary weight 0")
	res := <-watched
	if res.code != exitAborted {
		t.Fatalf("get --watch of an abort: exit %d, want %d\n%s\n%s", res.code, exitAborted, res.out, res.errOut)
	}
	mustContain(t, "get --watch", res.out, "Phase:        Aborted", "retry starts it again")

	out = p.mustRun("retry", "release/shop")
	mustContain(t, "retry", out, "Retry applied; now Paused, canary weight 20")
	watched = p.watch("release/shop", "--timeout", "2m")
	out = p.mustRun("promote-full", "release/shop")
	mustContain(t, "promote-full", out, "PromoteFull applied; now Succeeded")
	if res := <-watched; res.code != exitOK {
		t.Fatalf("get --watch after promote-full: exit %d\n%s\n%s", res.code, res.out, res.errOut)
	}
}

// TestErrors: what the commands say about a missing object, a bad path,
// a Release without a controller and a --watch that times out.
func TestErrors(t *testing.T) {
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	createRelease(t, dc, p.ns, "idle")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", "release/none"}, exitError, `releases.operator.upshift.dev "none" not found`},
		{[]string{"get", "nothing/web"}, exitError, `the server has no resource "nothing"`},
		{[]string{"get", "release"}, exitError, "want KIND/NAME"},
		{[]string{"get", "--state-path", ".status..x", "release/idle"}, exitError, "--state-path"},
		{[]string{"abort", "release/idle", "--timeout", "1s"}, exitTimeout, "is its controller running?"},
		{[]string{"get", "--watch", "release/idle", "--timeout", "1s"}, exitTimeout, "did not end within --timeout"},
	}
	for _, c := range cases {
		code, out, errOut := p.run(context.Background(), c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q\nstdout:\n%s", strings.Join(c.args, " "), code, errOut, c.code, c.want, out)
		}
	}
}

// TestSuspendOnARelease: suspend walks a Release's rollout back and
// follows it until it is Suspended (get --watch exits 7 there); suspend
// again answers at once; resume clears control.suspended and the rollout
// walks back up to its weight and holds at its pause step again, which a
// second resume passes; on a finished rollout suspend has nothing to do.
func TestSuspendOnARelease(t *testing.T) {
	p, env := newPlugin(t)
	dc := dynamic.NewForConfigOrDie(env.Config)
	createRelease(t, dc, p.ns, "web")
	startController(t, env, p.ns, "web")
	waitState(t, dc, p.ns, "web", pausedAt(1))

	watched := p.watch("release/web", "--timeout", "2m")
	out := p.mustRun("suspend", "release/web", "--timeout", "1m")
	mustContain(t, "suspend", out, "release/web: Suspend requested",
		"Suspend applied; now Suspended, canary weight 0: suspended: all traffic and capacity on the stable side, the canary released (resume continues from weight 20)")
	res := <-watched
	if res.code != exitSuspended {
		t.Fatalf("get --watch of a suspension: exit %d, want %d\n%s\n%s", res.code, exitSuspended, res.out, res.errOut)
	}
	mustContain(t, "get --watch", res.out, "Phase:        Suspended", "Step:         2/5: pause until resumed (entered again on resume)",
		"Waiting for:  resume: suspended (resume continues from weight 20)", "spec.control.suspended is true (resume clears it)",
		"Suspended:    ControlSuspend", "Suspended    True    Suspended")
	waitState(t, dc, p.ns, "web", func(s *strategy.State) bool {
		return s.Phase == strategy.PhaseSuspended && s.Desired.Weight == 0 && s.Desired.CanaryCapacity == 0 && s.ResumeWeight == 20
	})
	// Already suspended: it answers at once.
	out = p.mustRun("suspend", "release/web")
	mustContain(t, "suspend again", out, "Suspend applied; now Suspended")

	out = p.mustRun("resume", "release/web")
	mustContain(t, "resume", out, "release/web: control.suspended cleared",
		"Resume applied; now Paused, canary weight 20, paused (PauseStep)")
	if strings.Contains(out, "Resume 2") {
		t.Errorf("resume of a suspension also wrote a resume request:\n%s", out)
	}
	waitState(t, dc, p.ns, "web", func(s *strategy.State) bool { return pausedAt(1)(s) && s.Aborted == nil && s.ResumeWeight == 0 })
	out = p.mustRun("resume", "release/web")
	mustContain(t, "resume at the pause step", out, "now Paused, canary weight 60, paused (PauseStep)")

	out = p.mustRun("promote-full", "release/web")
	mustContain(t, "promote-full", out, "PromoteFull applied; now Succeeded")
	out = p.mustRun("suspend", "release/web")
	mustContain(t, "suspend when finished", out, "nothing to suspend now (Succeeded); the spec stays suspended")
	u, err := dc.Resource(releases).Namespace(p.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := object.Control(u, object.Path{"spec", "control"}); !c.Suspended {
		t.Errorf("control after suspend: %+v, want suspended", c)
	}
	out = p.mustRun("resume", "release/web")
	mustContain(t, "resume when finished", out, "control.suspended cleared", "now Succeeded")
}
