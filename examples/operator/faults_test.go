package main_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

// Faults of the cluster under a rollout. Every test checks the harness's
// invariants at every move of traffic the gateway sees (world.checkMove:
// the side given more traffic had a ready pod running its template's image
// and no ready pod running another), and the outcome: the phase, the final
// split, which revision serves on which side. The tests that stop a part of
// the cluster (a node, the controller manager) do not run in parallel with
// others, and restart it in t.Cleanup.

// patchSide changes Deployment name, retrying conflicts.
func (w *world) patchSide(name string, change func(*appsv1.Deployment)) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &d); err != nil {
			return err
		}
		change(&d)
		return w.c.Update(context.Background(), &d)
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// sidePods lists the pods of Deployment name (its selector app=name).
func (w *world) sidePods(name string) []corev1.Pod {
	w.t.Helper()
	list, err := w.env.Kube.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

// pausedV2At25 starts the operator on a Release of v1 with a paused
// canary, moves it to v2 and returns once that rollout holds at 25%, with
// the Release as it was then.
func pausedV2At25(t *testing.T) (*world, *v1alpha1.Release) {
	t.Helper()
	w := newWorld(t)
	w.start("operator")
	create(t, w.c, w.release("v1", pausedCanary()))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	return w, w.pausedAt25()
}

// pausedAt25 waits until the rollout to v2 holds at 25% on its pause, the
// stable side shrunk to its traffic (75: 3 of web-a's 4 replicas) and both
// Deployments at rest, and returns the Release as it was then.
func (w *world) pausedAt25() *v1alpha1.Release {
	w.t.Helper()
	rel := w.waitFor("the pause at 25", 60*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && s.Phase == strategy.PhasePaused && s.Observed.Weight == 25 &&
			s.Desired.StableCapacity == 75
	})
	// The status is not written again once the pause holds: the
	// Deployments tell when the stable side has shrunk.
	deadline := time.Now().Add(20 * time.Second)
	for w.replicasOf("web-a") != "web-a=3" {
		if time.Now().After(deadline) {
			w.t.Fatalf("web-a not shrunk to its traffic: %s", w.replicasOf("web-a"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.atRest(20*time.Second, "web-a", "web-b")
	return rel
}

// atRest waits until the named Deployments are at rest: their status
// written for their latest spec, every replica updated and available,
// none terminating, and no pod of the namespace being deleted. Past that,
// their controllers write nothing more until something changes them.
func (w *world) atRest(within time.Duration, names ...string) {
	w.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		rest, why := true, ""
		for _, name := range names {
			var d appsv1.Deployment
			if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &d); err != nil {
				w.t.Fatal(err)
			}
			n := int32(1)
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			st := d.Status
			if st.ObservedGeneration < d.Generation || st.Replicas != n || st.UpdatedReplicas != n || st.AvailableReplicas != n ||
				st.TerminatingReplicas != nil && *st.TerminatingReplicas != 0 {
				rest, why = false, fmt.Sprintf("%s: %+v for %d replicas", name, st, n)
			}
		}
		var pods corev1.PodList
		if err := w.c.List(ctx, &pods, client.InNamespace(w.ns)); err != nil {
			w.t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				rest, why = false, "pod "+p.Name+" is being deleted"
			}
		}
		if rest {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("not at rest after %s: %s", within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkServes checks the end of a rollout: phase, the stable revision and
// side, the route's last split, and that the gateway saw moves (each one
// checked).
func (w *world) checkServes(rel *v1alpha1.Release, phase strategy.Phase, revision string, side strategy.Side, split string) {
	w.t.Helper()
	s := rel.Status.Rollout
	if s.Phase != phase || s.StableRevision != id(revision) || s.StableSide != side {
		w.t.Errorf("ended %s with %s on side %s (%s), want %s with %s on side %s", s.Phase, s.StableRevision, s.StableSide, s.Message,
			phase, id(revision), side)
	}
	h := w.history()
	if len(h) == 0 || h[len(h)-1] != split {
		w.t.Errorf("route %v, want it to end at %s", h, split)
	}
	w.t.Logf("route %v; moves %v", h, w.movesSeen())
}

// TestFaultCanaryCrashLoops: the new revision's pods become ready, then
// crash-loop (kubetest.FaultCrashLoop in web-b's template, which the
// operator's deploy keeps). web-b's minReadySeconds (30 s) is longer than
// a pod stays ready, so its pods are never available: the canary never
// has capacity, the route never gives it traffic, and the progress
// deadline aborts the rollout with all traffic on v1.
func TestFaultCanaryCrashLoops(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.patchSide("web-b", func(d *appsv1.Deployment) {
		d.Spec.MinReadySeconds = 30
		d.Spec.Template.Annotations = map[string]string{kubetest.AnnotationFault: kubetest.FaultCrashLoop}
	})
	w.start("operator")
	strat := v1alpha1.ReleaseStrategy{Incremental: &strategy.Incremental{
		StepPercent: 25, Interval: metav1.Duration{Duration: 500 * time.Millisecond}, MaxSurgePercent: 25,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second},
			ProgressDeadline: metav1.Duration{Duration: 15 * time.Second}, AbortOnProgressDeadline: true}}}
	create(t, w.c, w.release("v1", strat))
	w.waitFor("v1 released", 30*time.Second, released)
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	crashed := false // a v2 pod was ready, then restarted
	rel := w.waitFor("the abort", 120*time.Second, func(rel *v1alpha1.Release) bool {
		for _, p := range w.sidePods("web-b") {
			for _, c := range p.Status.ContainerStatuses {
				crashed = crashed || (c.RestartCount > 0 && appImage(p.Spec) == "example.com/app:v2")
			}
		}
		return rel.Status.Rollout.Phase == strategy.PhaseAborted
	})
	w.checkServes(rel, strategy.PhaseAborted, "v1", strategy.SideA, "100/0")
	if !crashed {
		t.Error("no v2 pod was seen restarted: the fault did not act")
	}
	if rel.Status.Rollout.Aborted == nil {
		t.Error("status.rollout.aborted is not set")
	}
	if got, want := w.history(), []string{"100/0"}; !cmp.Equal(got, want) {
		t.Errorf("route %v, want %v: the canary never had capacity", got, want)
	}
	if released(rel) {
		t.Error("Released while v2 is aborted")
	}
}

// TestFaultNodeLost: a node running pods of the stable side is lost while
// the rollout holds at 25%. Its pods turn NotReady, then are evicted, and
// web-a's ReplicaSet replaces them on the other nodes; promoted, the
// rollout completes on v2. It stops a node: not parallel.
func TestFaultNodeLost(t *testing.T) {
	w, _ := pausedV2At25(t)
	// A node under web-a, one that runs no canary pod when there is one.
	var canaryNodes, stableNodes []string
	for _, p := range w.sidePods("web-b") {
		canaryNodes = append(canaryNodes, p.Spec.NodeName)
	}
	for _, p := range w.sidePods("web-a") {
		if p.Spec.NodeName != "" {
			stableNodes = append(stableNodes, p.Spec.NodeName)
		}
	}
	if len(stableNodes) == 0 {
		t.Fatal("no web-a pod is on a node")
	}
	node := stableNodes[0]
	for _, n := range stableNodes {
		if !slices.Contains(canaryNodes, n) {
			node = n
			break
		}
	}
	cl := w.env.Cluster
	cl.LoseNode(t, node)
	t.Cleanup(func() { cl.RestoreNode(t, node) })
	// The node's pods stop being Ready or are evicted; replacements run
	// elsewhere.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		gone := false
		for _, p := range w.sidePods("web-a") {
			gone = gone || (p.Spec.NodeName == node && (p.DeletionTimestamp != nil || !podReady(&p)))
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pods of web-a on %s stayed Ready", node)
		}
	}
	w.waitSide("web-a", -1)
	if got, want := w.history(), []string{"100/0", "75/25"}; !cmp.Equal(got, want) {
		t.Errorf("route %v while paused, want %v", got, want)
	}
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p1" })
	rel := w.waitFor("v2 released", 120*time.Second, released)
	w.checkServes(rel, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
	for _, p := range w.sidePods("web-b") {
		if p.DeletionTimestamp == nil && p.Spec.NodeName == node {
			t.Errorf("pod %s of web-b was placed on the lost node %s", p.Name, node)
		}
	}
}

// TestFaultControllerManagerStopped: the controller manager (the
// Deployment and ReplicaSet controllers) stops while the rollout holds at
// 25%, and the rollout is promoted. The operator moves the sides'
// capacity, which nothing rolls out: the Deployment's status stays at an
// older generation and the route stays at 75/25. Started again, the controllers catch up
// and the rollout completes on v2. It stops a component: not parallel.
func TestFaultControllerManagerStopped(t *testing.T) {
	w, _ := pausedV2At25(t)
	cl := w.env.Cluster
	cl.StopControllerManager(t)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			cl.StartControllerManager(t)
		}
	})
	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p1" })
	// The operator's next capacity hop (web-a down, or web-b up) is not
	// observed by any controller.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		deps, err := w.env.Kube.AppsV1().Deployments(w.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unobserved := ""
		for _, d := range deps.Items {
			if d.Status.ObservedGeneration < d.Generation {
				unobserved = d.Name
			}
		}
		if unobserved != "" {
			t.Logf("%s changed, unobserved", unobserved)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator changed no Deployment after the promote: phase %s", w.get().Status.Rollout.Phase)
		}
	}
	// Some reconciles of the operator pass over the unobserved Deployment.
	time.Sleep(3 * time.Second)
	if got, want := w.history(), []string{"100/0", "75/25"}; !cmp.Equal(got, want) {
		t.Errorf("route %v while the controllers were stopped, want %v", got, want)
	}
	cl.StartControllerManager(t)
	stopped = false
	rel := w.waitFor("v2 released", 120*time.Second, released)
	w.checkServes(rel, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
}

// TestFaultRolloutRestart: kubectl rollout restart (a new
// kubectl.kubernetes.io/restartedAt annotation in the pod template) of
// either side while the rollout holds at 25%: the Deployment controller
// replaces the side's pods, with the same image, and the promoted rollout
// completes on v2.
func TestFaultRolloutRestart(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"web-a", "web-b"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			w, _ := pausedV2At25(t)
			before := map[string]bool{}
			for _, p := range w.sidePods(side) {
				before[p.Name] = true
			}
			w.patchSide(side, func(d *appsv1.Deployment) {
				if d.Spec.Template.Annotations == nil {
					d.Spec.Template.Annotations = map[string]string{}
				}
				d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
			})
			// The restart rolls out: every pod of the side is new.
			for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				fresh, old := 0, 0
				for _, p := range w.sidePods(side) {
					switch {
					case before[p.Name]:
						old++
					case p.DeletionTimestamp == nil && podReady(&p):
						fresh++
					}
				}
				if old == 0 && fresh > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %d old pods left, %d new ready", side, old, fresh)
				}
			}
			w.waitSide(side, -1)
			w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Promote = "p1" })
			rel := w.waitFor("v2 released", 120*time.Second, released)
			w.checkServes(rel, strategy.PhaseSucceeded, "v2", strategy.SideB, "0/100")
			if got, want := w.templatesOf("web-b"), []string{"example.com/app:none", "example.com/app:v2"}; !cmp.Equal(got, want) {
				t.Errorf("web-b ran %v, want %v", got, want)
			}
		})
	}
}
