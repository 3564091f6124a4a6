package main_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestSuspendAndResume: spec.control.suspended set mid-rollout (at a pause
// step at weight 25) walks traffic back to the stable side, scales the
// canary side to 0 replicas and ends Suspended, with Degraded clear and
// the phase in the printer columns and the metrics; set false again, the
// rollout walks back up to 25, holds at the pause step again (it is
// entered again), and a resume takes it past 25 to Succeeded.
func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	op := w.start("operator")
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{
		MaxSurgePercent: 25,
		Steps:           []strategy.CanaryStep{strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(50), strategy.SetWeight(100)},
		Options:         strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
	create(t, w.c, w.release("v1", canary))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	pausedAt25 := func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && s.Phase == strategy.PhasePaused && s.StepIndex == 1 &&
			s.PauseReason == strategy.ReasonPauseStep && s.Observed.Weight == 25 && s.Desired.Weight == 25
	}
	w.waitFor("the pause step at 25", 60*time.Second, pausedAt25)

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Suspended = true })
	var degraded string
	rel := w.waitFor("suspended", 60*time.Second, func(rel *v1alpha1.Release) bool {
		if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
			degraded = c.Reason + ": " + c.Message
		}
		return rel.Status.ObservedGeneration == rel.Generation && rel.Status.Rollout.Phase == strategy.PhaseSuspended
	})
	if degraded != "" {
		t.Errorf("Degraded was True on the way to Suspended: %s", degraded)
	}
	s := rel.Status.Rollout
	if s.StableRevision != id("v1") || s.CanaryRevision != id("v2") || s.StableSide != strategy.SideA || s.ResumeWeight != 25 || s.StepIndex != 1 {
		t.Errorf("suspended: stable %s on side %s, canary %s, resume weight %d, step %d; want v1 on A, v2, 25, step 1",
			s.StableRevision, s.StableSide, s.CanaryRevision, s.ResumeWeight, s.StepIndex)
	}
	if s.Observed.Weight != 0 || s.Desired.Weight != 0 || s.Desired.CanaryCapacity != 0 || s.Observed.Canary.Capacity != 0 {
		t.Errorf("suspended: weight %d (desired %d), canary capacity %d (desired %d); want all 0",
			s.Observed.Weight, s.Desired.Weight, s.Observed.Canary.Capacity, s.Desired.CanaryCapacity)
	}
	if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionSuspended); c == nil ||
		c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonSuspended {
		t.Errorf("condition Suspended: %+v, want True, reason Suspended", c)
	}
	if condition(rel, strategy.ConditionDegraded, metav1.ConditionTrue) {
		t.Errorf("Degraded True while suspended: %+v", apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded))
	}
	// All traffic on the stable side, as the route says, and no replica
	// left on the canary side.
	var rt gwv1.HTTPRoute
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "web"}, &rt); err != nil {
		t.Fatal(err)
	}
	if snap := snapshot(w.ns, &rt); snap.a != 100 || snap.b != 0 {
		t.Errorf("route while suspended: %d/%d, want 100/0", snap.a, snap.b)
	}
	w.waitSide("web-b", 0)
	w.waitSide("web-a", fullReplicas)
	_, cells := w.table(t)
	if cells["Phase"] != "Suspended" || cells["Step"] != "2/4 pause until resumed, suspended (resume continues from weight 25)" ||
		cells["A-Weight"] != "100" || cells["B-Weight"] != "0" {
		t.Errorf("kubectl get while suspended: %v", cells)
	}
	containsAll(t, "metrics", strings.Split(op.scrape(t), "\n"),
		series("phase", w.ns, "phase", "Suspended")+" 1",
		series("phase", w.ns, "phase", "Paused")+" 0")
	suspendedAt := len(w.history())

	// Resumed: back up to 25, the pause step entered again (it holds), then
	// a resume request passes it.
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Suspended = false })
	rel = w.waitFor("back at the pause step at 25", 60*time.Second, pausedAt25)
	if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionSuspended); c == nil ||
		c.Status != metav1.ConditionFalse || c.Reason != strategy.ReasonResumed {
		t.Errorf("condition Suspended after resuming: %+v, want False, reason Resumed", c)
	}
	if rel.Status.Rollout.Aborted != nil || rel.Status.Rollout.ResumeWeight != 0 {
		t.Errorf("resumed: aborted %+v, resume weight %d", rel.Status.Rollout.Aborted, rel.Status.Rollout.ResumeWeight)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Resume = "r1" })
	rel = w.waitFor("v2 released", 60*time.Second, released)
	if s := rel.Status.Rollout; s.Phase != strategy.PhaseSucceeded || s.StableRevision != id("v2") || s.StableSide != strategy.SideB {
		t.Fatalf("ended %s with stable %s on side %s", s.Phase, s.StableRevision, s.StableSide)
	}
	if condition(rel, strategy.ConditionDegraded, metav1.ConditionTrue) {
		t.Errorf("Degraded True at the end: %+v", apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionDegraded))
	}

	// The route: up to 75/25, back to 100/0 for the suspension, up to
	// 75/25 again and on past it to 0/100.
	hist := w.history()
	t.Logf("route %v (suspended after %d splits)", hist, suspendedAt)
	if suspendedAt == 0 || hist[suspendedAt-1] != "100/0" || !slices.Contains(hist[:suspendedAt], "75/25") {
		t.Errorf("route %v: want 75/25, then 100/0 when suspended", hist)
	} else {
		after := hist[suspendedAt:]
		if i := slices.Index(after, "75/25"); i < 0 || !slices.Contains(after[i:], "50/50") || after[len(after)-1] != "0/100" {
			t.Errorf("route after the suspension %v: want back to 75/25, past it to 50/50, and 0/100", after)
		}
	}
	if got := w.templatesOf("web-b"); strings.Join(got, " ") != "example.com/app:none example.com/app:v2" {
		t.Errorf("web-b ran %q, want none then v2 (deployed once, kept while suspended)", got)
	}
	containsAll(t, "events", w.eventNotes(),
		"ControlSuspend: spec.control: Suspend",
		"ControlResume: spec.control: Resume",
		"PhaseSuspended: Aborting -> Suspended")
}

// TestPluginSuspend: the plugin's suspend on a Release at a pause step
// follows the operator's walk back until the rollout is Suspended (get
// --watch exits 7 there, 7 being its code for a suspended rollout); its
// resume clears spec.control.suspended and stops once the suspension
// ended; the rollout walks back up and holds at its pause step again,
// which promote-full then passes to success.
func TestPluginSuspend(t *testing.T) {
	w, p := pluginWorld(t, strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(50))
	ref, _ := refs()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("the pause step at 25", time.Minute, at(25, strategy.PhasePaused))

	watched := p.watch(ref, "--timeout", "3m")
	r := p.expect(exitOK, "suspend", ref, "--timeout", "2m")
	outputHas(t, r, ref+": Suspend requested",
		ref+": Suspend applied; now Suspended, canary weight 0", "(resume continues from weight 25)")
	r = p.wait(watched, exitSuspended)
	outputMatches(t, r, field("Phase", "Aborting (suspending)"), field("Phase", "Suspended"),
		`(?m)^Waiting for:\s+resume: suspended \(resume continues from weight 25\), walked back (now|\S+ ago)$`,
		sideRow("A", "stable", id("v1"), 100), sideRow("B", "canary", id("v2"), 0))
	if rel := w.get(); !rel.Spec.Control.Suspended || rel.Status.Rollout.Phase != strategy.PhaseSuspended {
		t.Fatalf("after suspend: spec.control %+v, phase %s", rel.Spec.Control, rel.Status.Rollout.Phase)
	}

	r = p.expect(exitOK, "resume", ref, "--timeout", "2m")
	outputHas(t, r, ref+": control.suspended cleared", ref+": Resume applied; now ")
	if strings.Contains(r.out, "Resume 2") {
		t.Errorf("resume of a suspension wrote a resume request too:\n%s", r)
	}
	rel := w.waitFor("back at the pause step at 25", time.Minute, at(25, strategy.PhasePaused))
	if rel.Spec.Control.Suspended || rel.Status.Rollout.PauseReason != strategy.ReasonPauseStep || rel.Status.Rollout.StepIndex != 1 {
		t.Fatalf("after resume: spec.control %+v, paused (%s) at step %d", rel.Spec.Control, rel.Status.Rollout.PauseReason, rel.Status.Rollout.StepIndex)
	}
	r = p.expect(exitOK, "promote-full", ref, "--timeout", "2m")
	outputHas(t, r, ref+": PromoteFull applied")
	w.waitFor("v2 released", time.Minute, released)
}
