package main_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

// Rollbacks: spec.revision changed mid-rollout, back to the stable
// revision or on to a third one. While the walk back that the change asks
// for runs, the Release's status has the condition RollbackInProgress
// (True, reason DesiredRevisionChanged); it is removed, never set False,
// once the walk back is cancelled or ends. Every move of traffic is
// checked by the harness (world.checkMove).

// rollbackStrategy ramps in steps of 25 every 2 s and walks back the
// same way (AbortGradual): long enough to act during a walk back on a
// loaded machine.
func rollbackStrategy() v1alpha1.ReleaseStrategy {
	return v1alpha1.ReleaseStrategy{Incremental: &strategy.Incremental{
		StepPercent: 25, Interval: metav1.Duration{Duration: 2 * time.Second}, MaxSurgePercent: 25,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}, AbortRamp: strategy.AbortGradual}}}
}

// statusSeen is one status of the Release as a watch delivered it.
type statusSeen struct {
	generation int64
	phase      strategy.Phase
	weight     int32 // the desired canary weight
	rollback   *metav1.Condition
	released   bool
}

func (s statusSeen) String() string {
	r := "-"
	if s.rollback != nil {
		r = string(s.rollback.Status)
	}
	return fmt.Sprintf("g%d %s w%d rollback=%s released=%v", s.generation, s.phase, s.weight, r, s.released)
}

// watchStatus records every status of the Release written from now on,
// until the returned func is called, which returns them.
func (w *world) watchStatus() func() []statusSeen {
	w.t.Helper()
	wi := w.watchReleases()
	var (
		mu   sync.Mutex
		seen []statusSeen
		rvs  = map[string]bool{} // the resourceVersions seen
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			rel, ok := ev.Object.(*v1alpha1.Release)
			if !ok || ev.Type != watch.Modified || rel.Name != "web" {
				continue
			}
			s := statusSeen{generation: rel.Status.ObservedGeneration, phase: rel.Status.Rollout.Phase,
				weight: rel.Status.Rollout.Desired.Weight, released: released(rel)}
			if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionRollbackInProgress); c != nil {
				s.rollback = c.DeepCopy()
			}
			mu.Lock()
			seen = append(seen, s)
			rvs[rel.ResourceVersion] = true
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop := func() []statusSeen {
		once.Do(func() {
			// The watch delivers every write in order, but later than a
			// read: wait for the write the Release holds now.
			rv := w.get().ResourceVersion
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				mu.Lock()
				caught := rvs[rv]
				mu.Unlock()
				if caught {
					break
				}
			}
			wi.Stop()
			<-done
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]statusSeen(nil), seen...)
	}
	w.t.Cleanup(func() { stop() })
	return stop
}

// rollingBack: the Release's current generation says RollbackInProgress
// True, with its reason, and a message that mentions want.
func rollingBack(want string) func(*v1alpha1.Release) bool {
	return func(rel *v1alpha1.Release) bool {
		c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionRollbackInProgress)
		return condition(rel, strategy.ConditionRollbackInProgress, metav1.ConditionTrue) &&
			c.Reason == strategy.ReasonDesiredRevisionChanged && strings.Contains(c.Message, want) &&
			rel.Status.Rollout.Phase == strategy.PhaseAborting
	}
}

// Parts of RollbackInProgress's messages: back to the stable revision, or
// on to a third one.
const (
	msgToStable = "went back to the stable revision"
	msgToThird  = "then rolling out the new one"
)

// checkRollbackSeen checks the statuses written: RollbackInProgress is
// present exactly while the rollout walks back (Aborting) with a
// rollback asked, and absent in every status that says Released or a
// finished phase; it is never False.
func checkRollbackSeen(t *testing.T, seen []statusSeen) {
	t.Helper()
	set := false
	for _, s := range seen {
		if s.rollback == nil {
			continue
		}
		set = true
		if s.rollback.Status != metav1.ConditionTrue || s.rollback.Reason != strategy.ReasonDesiredRevisionChanged {
			t.Errorf("RollbackInProgress %+v, want True %s", *s.rollback, strategy.ReasonDesiredRevisionChanged)
		}
		if s.phase != strategy.PhaseAborting || s.released {
			t.Errorf("RollbackInProgress in the status %v", s)
		}
	}
	if !set {
		t.Errorf("no status written had RollbackInProgress: %v", seen)
	}
	if n := len(seen); n == 0 || seen[n-1].rollback != nil {
		t.Errorf("RollbackInProgress not removed at the end: %v", seen)
	}
}

// canaryWeights returns side B's weight at each split of the route from
// index from on.
func canaryWeights(t *testing.T, history []string, from int) []int32 {
	t.Helper()
	var out []int32
	for _, split := range history[from:] {
		var a, b int32
		if _, err := fmt.Sscanf(split, "%d/%d", &a, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkNoRise checks that side B's weight never rose in the route's
// splits from index from on.
func checkNoRise(t *testing.T, history []string, from int, what string) {
	t.Helper()
	ws := canaryWeights(t, history, from)
	for i := 1; i < len(ws); i++ {
		if ws[i] > ws[i-1] {
			t.Errorf("route %v: side B's weight rose from %d to %d %s", history, ws[i-1], ws[i], what)
		}
	}
}

// v2AtHalf creates a Release of v1, moves it to v2, and returns once v2
// carries at least half of the traffic, the rollout still moving forward.
func v2AtHalf(t *testing.T) (*world, *operator) {
	t.Helper()
	w := newWorld(t)
	op := w.start("operator")
	create(t, w.c, w.release("v1", rollbackStrategy()))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("v2 at weight 50", 60*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return s.Observed.Weight >= 50 && s.Observed.WeightApplied && s.Phase == strategy.PhaseProgressing
	})
	return w, op
}

// TestRollback: A->B->A. The spec goes back to v1 while v2 carries half
// of the traffic: RollbackInProgress is True while v2 is walked back, and
// removed when the rollout ends RolledBack, v1 Released on side A, side B
// at zero, v1 never deployed on it.
func TestRollback(t *testing.T) {
	t.Parallel()
	w, op := v2AtHalf(t)
	seen := w.watchStatus()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v1" })
	w.waitFor("RollbackInProgress", 30*time.Second, rollingBack(msgToStable))
	back := len(w.history())
	rel := w.waitFor("v1 released", 60*time.Second, released)
	w.checkServes(rel, strategy.PhaseRolledBack, "v1", strategy.SideA, "100/0")
	if c := apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionRollbackInProgress); c != nil {
		t.Errorf("RollbackInProgress after the rollback: %+v", *c)
	}
	checkRollbackSeen(t, seen())
	checkNoRise(t, w.history(), back-1, "after the spec went back to v1")
	if got, want := w.templatesOf("web-b"), []string{"example.com/app:none", "example.com/app:v2"}; !cmp.Equal(got, want) {
		t.Errorf("web-b ran %v, want %v", got, want)
	}
	if got := w.replicasOf("web-b"); got != "web-b=0" {
		t.Errorf("side B after the rollback: %s, want 0 replicas", got)
	}
	containsAll(t, "metrics", strings.Split(op.scrape(t), "\n"), series("phase", w.ns, "phase", "RolledBack")+" 1")
}

// TestRollbackCancelled: A->B->A->B. The spec goes back to v1, then to v2
// again during the walk back: the rollback is cancelled
// (RollbackInProgress removed as the rollout moves forward again) after a
// hop of the walk back, and v2 ramps on from where the walk back left it
// to Succeeded, never deployed again.
func TestRollbackCancelled(t *testing.T) {
	t.Parallel()
	w, op := v2AtHalf(t)
	seen := w.watchStatus()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v1" })
	from := w.waitFor("RollbackInProgress", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return rollingBack(msgToStable)(rel) && rel.Status.Rollout.Desired.Weight > 0
	}).Status.Rollout.Desired.Weight
	// A hop of the walk back is applied, and the canary still has traffic.
	w.waitFor("a hop of the walk back", 30*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rollingBack(msgToStable)(rel) && s.Observed.WeightApplied && s.Observed.Weight < from && s.Observed.Weight > 0
	})
	back := len(w.history())
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	w.waitFor("the rollback cancelled", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return rel.Status.ObservedGeneration == rel.Generation && rel.Status.Rollout.Phase == strategy.PhaseProgressing &&
			apimeta.FindStatusCondition(rel.Status.Conditions, strategy.ConditionRollbackInProgress) == nil
	})
	rel := w.waitFor("v2 released", 60*time.Second, released)
	w.checkServes(rel, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
	all := seen()
	checkRollbackSeen(t, all)
	// The cancel: the first status of the last generation has no
	// RollbackInProgress.
	for _, s := range all {
		if s.generation == rel.Generation {
			if s.rollback != nil || s.phase != strategy.PhaseProgressing {
				t.Errorf("the first status after the cancel: %v, want Progressing without RollbackInProgress", s)
			}
			break
		}
	}
	// From where the walk back left it, forward to 100.
	checkForward(t, w.history()[back-1:], "B", 25)
	if got, want := w.templatesOf("web-b"), []string{"example.com/app:none", "example.com/app:v2"}; !cmp.Equal(got, want) {
		t.Errorf("web-b ran %v, want %v", got, want)
	}
	containsAll(t, "metrics", strings.Split(op.scrape(t), "\n"), series("hops_total", w.ns, "kind", "deploy")+" 1")
}

// TestRollbackThenThird: A->B->A->C. The spec goes back to v1, then on to
// v3 during the walk back: RollbackInProgress says so, v2 is walked out
// first (the route back at 100/0), then v3 is deployed on side B and
// ramps forward to Succeeded; the condition is removed as v3 starts.
func TestRollbackThenThird(t *testing.T) {
	t.Parallel()
	w, _ := v2AtHalf(t)
	seen := w.watchStatus()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v1" })
	w.waitFor("RollbackInProgress", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return rollingBack(msgToStable)(rel) && rel.Status.Rollout.Desired.Weight > 0
	})
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v3" })
	w.waitFor("RollbackInProgress toward v3", 30*time.Second, rollingBack(msgToThird))
	rel := w.waitFor("v3 released", 90*time.Second, released)
	w.checkServes(rel, strategy.PhaseSucceeded, "v3", strategy.SideB, "0/100")
	checkRollbackSeen(t, seen())
	if got, want := w.templatesOf("web-b"), []string{"example.com/app:none", "example.com/app:v2", "example.com/app:v3"}; !cmp.Equal(got, want) {
		t.Errorf("web-b ran %v, want %v", got, want)
	}
	// v2 walked back to 100/0, then v3 forward from there.
	hist := w.history()
	last := -1
	for i, split := range hist {
		if split == "100/0" {
			last = i
		}
	}
	if last < 1 {
		t.Fatalf("route %v: v2 never walked back to 100/0", hist)
	}
	checkForward(t, hist[last:], "B", 25)
}

// TestRollbackCanaryCrashes: A->B->A, and side B's pods crash during the
// walk back (they lose readiness and stay in CrashLoopBackOff): the
// rollback still completes, RolledBack with v1 on side A, and once the
// crash is seen no traffic moves onto side B (every move, onto side A,
// checked against its ready pods by the harness).
func TestRollbackCanaryCrashes(t *testing.T) {
	t.Parallel()
	w, _ := v2AtHalf(t)
	seen := w.watchStatus()
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v1" })
	w.waitFor("RollbackInProgress", 30*time.Second, func(rel *v1alpha1.Release) bool {
		return rollingBack(msgToStable)(rel) && rel.Status.Rollout.Desired.Weight > 0
	})
	// Crash every pod of side B: ready, they crash at once and wait in
	// CrashLoopBackOff for an hour.
	crashed := map[string]bool{}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"10ms",%q:"1h"}}}`,
		kubetest.AnnotationFault, kubetest.FaultCrashLoop, kubetest.AnnotationCrashAfter, kubetest.AnnotationRestartAfter))
	for _, p := range w.sidePods("web-b") {
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := w.c.Patch(context.Background(), &p, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		crashed[p.Name] = true
	}
	if len(crashed) == 0 {
		t.Fatal("side B has no pod to crash")
	}
	// The crash is seen: no pod of side B is ready, and one of those
	// annotated has restarted (not merely been scaled away).
	var at int // the route's splits when it was seen
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ready, restarted := 0, false
		for _, p := range w.sidePods("web-b") {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
			for _, c := range p.Status.ContainerStatuses {
				restarted = restarted || crashed[p.Name] && c.RestartCount > 0
			}
		}
		if ready == 0 && restarted {
			at = len(w.history())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("side B: %d ready pods, a crash seen %v, route %v", ready, restarted, w.history())
		}
	}
	if rel := w.get(); rel.Status.Rollout.Phase != strategy.PhaseAborting {
		t.Logf("the walk back had ended (%s) when the crash was seen: route %v", rel.Status.Rollout.Phase, w.history())
	}
	rel := w.waitFor("v1 released", 90*time.Second, released)
	w.checkServes(rel, strategy.PhaseRolledBack, "v1", strategy.SideA, "100/0")
	checkRollbackSeen(t, seen())
	checkNoRise(t, w.history(), at-1, "after side B crashed")
}
