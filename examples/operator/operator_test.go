package main_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
	"github.com/upshift-dev/upshift/strategy"
)

// elected is what a replica logs when it becomes the leader.
// series is one series of the operator's metrics, as Prometheus' text
// format writes it (labels sorted by name): the metric, the Release's
// namespace and name as labels, and more label pairs.
func series(name, namespace string, labels ...string) string {
	pairs := []string{`namespace="` + namespace + `"`, `release="web"`}
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+`="`+labels[i+1]+`"`)
	}
	slices.Sort(pairs)
	return controller.MetricsPrefix + "_" + name + "{" + strings.Join(pairs, ",") + "}"
}

const elected = "elected: this replica reconciles"

func incremental(step int32, interval time.Duration) v1alpha1.ReleaseStrategy {
	return v1alpha1.ReleaseStrategy{Incremental: &strategy.Incremental{
		StepPercent: step, Interval: metav1.Duration{Duration: interval}, MaxSurgePercent: step,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
}

// TestUpgrade: a Release created at v1 adopts what side A runs; v2
// deploys on side B at 0 replicas, ramps in steps of 25 and ends with all
// traffic on side B. The status, the Events and the metrics tell it.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("operator")
	create(t, w.c, w.release("v1", incremental(25, 500*time.Millisecond)))
	w.waitFor("v1 released", 30*time.Second, released)
	writes := w.countWrites()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	rel := w.waitFor("v2 released", 60*time.Second, released)
	nWrites := writes() - 1 // the edit of the spec
	s := rel.Status.Rollout
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != id("v2") || s.StableSide != strategy.SideB {
		t.Fatalf("ended %s on %s (side %s): %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	if rel.Status.ObservedGeneration != rel.Generation {
		t.Errorf("observedGeneration %d, generation %d", rel.Status.ObservedGeneration, rel.Generation)
	}
	checkForward(t, w.history(), "B", 25)
	if got := w.templatesOf("web-b"); strings.Join(got, " ") != "example.com/app:none example.com/app:v2" {
		t.Errorf("web-b ran %q, want none then v2", got)
	}
	// Events tell the phases; the hops are in the metrics (and, with
	// -hop-events, in Events too: TestImageTemplateEdited).
	notes := w.eventNotes()
	for _, n := range notes {
		if strings.HasPrefix(n, "Hop: ") {
			t.Errorf("an Event for a hop without -hop-events: %s", n)
		}
	}
	containsAll(t, "events", notes,
		"PhaseProgressing: Idle -> Progressing ("+id("v1")+" to "+id("v2")+")",
		"PhaseCompleting: Progressing -> Completing",
		"PhaseSucceeded: Completing -> Succeeded ("+id("v2")+" to "+id("v2")+")")
	m := op.scrape(t)
	containsAll(t, "metrics", strings.Split(m, "\n"),
		series("phase", w.ns, "phase", "Succeeded")+" 1",
		series("phase", w.ns, "phase", "Progressing")+" 0",
		series("weight_percent", w.ns)+" 0",
		series("capacity_percent", w.ns, "role", "stable")+" 100",
		series("ready_capacity_percent", w.ns, "role", "stable")+" 100",
		series("hops_total", w.ns, "kind", "deploy")+" 1",
		series("hops_total", w.ns, "kind", "weight")+" 4",
		series("reconcile_seconds_count", w.ns),
		`controller_runtime_reconcile_total{controller="release"`)
	var reconciles int
	for _, line := range strings.Split(m, "\n") {
		if rest, ok := strings.CutPrefix(line, series("reconcile_seconds_count", w.ns)+" "); ok {
			reconciles, _ = strconv.Atoi(rest)
		}
	}
	// The status is written when the state changes (strategy.Changed),
	// about once per hop, not on every reconcile.
	t.Logf("%d status writes, %d reconciles (both releases), route %v", nWrites, reconciles, w.history())
	if nWrites >= reconciles-1 {
		t.Errorf("%d status writes for %d reconciles: want fewer writes than reconciles", nWrites, reconciles)
	}
	if strings.Contains(m, series("aborts_total", w.ns)+" 1") {
		t.Error("an abort was counted")
	}
}

// TestControls: pause, resume, promote, abort, retry and promote-full, each
// by editing spec.control, on a Canary with pauses; each request acts once,
// also after the operator restarts.
func TestControls(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("operator")
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{
		MaxSurgePercent: 25,
		Steps: []strategy.CanaryStep{strategy.SetWeight(25), strategy.PauseUntilResumed(),
			strategy.SetWeight(50), strategy.Pause(time.Hour), strategy.SetWeight(75), strategy.Pause(time.Hour),
			strategy.SetWeight(100)},
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
	create(t, w.c, w.release("v1", canary))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	at := func(weight int32, phase strategy.Phase) func(*v1alpha1.Release) bool {
		return func(rel *v1alpha1.Release) bool {
			s := &rel.Status.Rollout
			return rel.Status.ObservedGeneration == rel.Generation && s.Phase == phase && s.Observed.Weight == weight &&
				s.Desired.Weight == weight
		}
	}
	w.waitFor("the pause step at 25", 30*time.Second, at(25, strategy.PhasePaused))

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p1" })
	w.waitFor("promoted to the 1h pause at 50", 30*time.Second, at(50, strategy.PhasePaused))

	// paused holds the rollout: the step's pause is taken over by the
	// spec's, and handed back when the spec is un-paused.
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Paused = true })
	w.waitFor("held by spec.control.paused", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return rel.Status.Rollout.AwaitingResume && rel.Status.Rollout.PauseReason == strategy.ReasonControlPause &&
			condition(rel, strategy.ConditionPaused, metav1.ConditionTrue)
	})
	// A promote asked while paused is kept until the spec is un-paused.
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p2" })
	w.waitFor("p2 seen", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Handled.Promote == "p2" })
	time.Sleep(time.Second)
	if rel := w.get(); !rel.Status.Rollout.AwaitingResume || rel.Status.Rollout.Desired.Weight != 50 {
		t.Fatalf("a promote moved a paused rollout: weight %d, paused %v", rel.Status.Rollout.Desired.Weight, rel.Status.Rollout.AwaitingResume)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Paused = false })
	w.waitFor("un-paused, promoted to the 1h pause at 75", 30*time.Second, at(75, strategy.PhasePaused))

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Abort = "a1" })
	rel := w.waitFor("aborted", 30*time.Second, at(0, strategy.PhaseAborted))
	if s := rel.Status.Rollout; s.StableRevision != id("v1") || s.StableSide != strategy.SideA || s.Aborted == nil {
		t.Fatalf("aborted with stable %s on side %s, aborted %+v", s.StableRevision, s.StableSide, s.Aborted)
	}
	if released(rel) {
		t.Error("Released while v2 is aborted")
	}

	// Each request acts once: a retry, then a restart of the operator
	// with abort still set in the spec, aborts nothing again.
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Retry = "r1" })
	w.waitFor("retried to the pause step at 25", 30*time.Second, at(25, strategy.PhasePaused))
	containsAll(t, "metrics", strings.Split(op.scrape(t), "\n"),
		series("aborts_total", w.ns)+" 1")
	op.kill()
	w.start("restarted")
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Retry = "r2" }) // nothing to retry: ignored
	w.waitFor("r2 seen", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Handled.Retry == "r2" })
	if rel := w.get(); rel.Status.Rollout.Phase != strategy.PhasePaused || rel.Status.Rollout.Aborted != nil {
		t.Fatalf("after the restart: phase %s, aborted %+v", rel.Status.Rollout.Phase, rel.Status.Rollout.Aborted)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.PromoteFull = "f1" })
	rel = w.waitFor("v2 released", 30*time.Second, released)
	if s := rel.Status.Rollout; s.StableRevision != id("v2") || s.StableSide != strategy.SideB {
		t.Fatalf("ended with stable %s on side %s", s.StableRevision, s.StableSide)
	}
	t.Logf("route: %v", w.history())
	containsAll(t, "events", w.eventNotes(),
		"ControlPromote: spec.control: Promote p1",
		"ControlPause: spec.control: Pause",
		"ControlPromote: spec.control: Promote p2",
		"ControlResume: spec.control: Resume",
		"ControlAbort: spec.control: Abort a1",
		"PhaseAborting: Paused -> Aborting",
		"Aborted: "+id("v1")+" to "+id("v2")+" aborted",
		"PhaseAborted: Aborting -> Aborted",
		"ControlRetry: spec.control: Retry r1",
		"ControlRetry: spec.control: Retry r2 ignored",
		"ControlPromoteFull: spec.control: PromoteFull f1")
}

// TestKilledMidRollout: the operator is killed (SIGKILL) mid-rollout and
// started again: the new process resumes from the Release's status, and
// the route's weights show every hop once, in order.
func TestKilledMidRollout(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("first")
	create(t, w.c, w.release("v1", incremental(10, 300*time.Millisecond)))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("weight 30", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Observed.Weight >= 30 })
	op.kill()
	time.Sleep(300 * time.Millisecond) // the watch delivers the last write before the kill
	at := w.history()
	time.Sleep(500 * time.Millisecond)
	if got := w.history(); len(got) != len(at) {
		t.Fatalf("the route changed after the kill: %v, then %v", at, got)
	}
	second := w.start("second")
	w.waitFor("v2 released", 60*time.Second, released)
	if !second.logHas(elected) {
		t.Error("the second process never logged that it acquired the lease")
	}
	t.Logf("killed at %v; route %v", at[len(at)-1], w.history())
	checkForward(t, w.history(), "B", 10)
	if got := w.templatesOf("web-b"); strings.Join(got, " ") != "example.com/app:none example.com/app:v2" {
		t.Errorf("web-b ran %q, want none then v2 (deployed once)", got)
	}
}

// TestLeaderTakeover: two replicas; the one that holds the lease rolls
// out, the other waits; the leader is killed mid-rollout and the other
// takes over when the lease expires, and finishes.
func TestLeaderTakeover(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ops := []*operator{w.start("one"), w.start("two")}
	create(t, w.c, w.release("v1", incremental(20, 500*time.Millisecond)))
	w.waitFor("v1 released", 30*time.Second, released)
	var leader, standby *operator
	switch {
	case ops[0].logHas(elected) && !ops[1].logHas(elected):
		leader, standby = ops[0], ops[1]
	case ops[1].logHas(elected) && !ops[0].logHas(elected):
		leader, standby = ops[1], ops[0]
	default:
		t.Fatal("want exactly one replica leading")
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("weight 20", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Observed.Weight >= 20 })
	if standby.logHas(elected) {
		t.Fatal("the standby acquired the lease while the leader ran")
	}
	leader.kill()
	killed := time.Now()
	w.waitFor("v2 released", 60*time.Second, released)
	if !standby.logHas(elected) {
		t.Fatal("the standby never acquired the lease")
	}
	t.Logf("the standby finished %v after the leader was killed; route %v", time.Since(killed).Round(time.Millisecond), w.history())
	checkForward(t, w.history(), "B", 20)
}

// TestImageTemplateEdited: spec.image.template is edited mid-rollout (a
// registry mirror for the same revision). The edit is a new revision
// identity: the canary side running v2 from the old registry is walked
// back, v2 from the new one is deployed on it at zero and ramped, and the
// rollout finishes with the new image on the serving side. The stable
// side, which runs v1 from the old registry, is still recognised
// throughout: no StableRevisionMismatch.
func TestImageTemplateEdited(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator", "-hop-events")
	create(t, w.c, w.release("v1", incremental(25, 500*time.Millisecond)))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("weight 25 on v2", 30*time.Second, func(rel *v1alpha1.Release) bool { return rel.Status.Rollout.Observed.Weight >= 25 })
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Image.Template = "mirror.example.com/app:{revision}" })
	mirrored := imageID("v2", "mirror.example.com/app:v2")
	var mismatch string
	rel := w.waitFor("mirrored v2 released", 60*time.Second, func(rel *v1alpha1.Release) bool {
		if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded); c != nil && c.Reason == strategy.ReasonStableRevisionMismatch {
			mismatch = c.Message
		}
		return released(rel)
	})
	if mismatch != "" {
		t.Errorf("the stable side was not recognised on the way: %s", mismatch)
	}
	s := rel.Status.Rollout
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != mirrored || s.StableSide != strategy.SideB {
		t.Fatalf("ended %s on %s (side %s), want %s on side B: %s", s.Phase, s.StableRevision, s.StableSide, mirrored, s.Message)
	}
	if got := w.templatesOf("web-b"); strings.Join(got, " ") != "example.com/app:none example.com/app:v2 mirror.example.com/app:v2" {
		t.Errorf("web-b ran %q, want none, v2, then the mirrored v2", got)
	}
	if got := w.templatesOf("web-a"); strings.Join(got, " ") != "example.com/app:v1" {
		t.Errorf("web-a ran %q, want v1 only", got)
	}
	// The canary weight went up, back to 0 for the walk back, and up to 100.
	hist := w.history()
	back := -1 // the end of the walk back: the last split with no canary weight
	for i, split := range hist {
		if split == "100/0" {
			back = i
		}
	}
	if back < 0 || !slices.Contains(hist[:back], "75/25") || hist[len(hist)-1] != "0/100" {
		t.Errorf("route %v: want the old v2 walked back to 100/0, then the new one to 0/100", hist)
	} else {
		checkForward(t, hist[back:], "B", 25)
	}
	// The spec's identity, and v1, which side A still runs (the canary
	// revision it was last asked to run).
	want := []v1alpha1.RevisionImage{{Identity: mirrored, Container: "app", Image: "mirror.example.com/app:v2"},
		{Identity: id("v1"), Container: "app", Image: "example.com/app:v1"}}
	if d := cmp.Diff(want, rel.Status.Revisions); d != "" {
		t.Errorf("status.revisions (-want +got):\n%s", d)
	}
	containsAll(t, "events", w.eventNotes(),
		"Retarget: spec.image.template changed what v2 means: spec asks for "+mirrored+" (image mirror.example.com/app:v2), was "+id("v2")+
			"; stable side A runs "+id("v1")+" (expected "+id("v1")+"), canary side B runs "+id("v2")+" (expected "+id("v2")+")",
		"Hop: deploy "+mirrored+" on side B")
}
