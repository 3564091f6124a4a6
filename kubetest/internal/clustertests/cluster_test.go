// Package clustertests checks a kubetest cluster (kubetest.ClusterOptions)
// against what a real cluster does: the real Deployment and ReplicaSet
// controllers, the scheduler, the garbage collector and node lifecycle, and
// kwok's simulated kubelets with their faults. It is a package of its own
// because each test package runs one control plane, and this one is a whole
// cluster.
package clustertests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/upshift-dev/upshift/kubetest"
)

func TestMain(m *testing.M) {
	os.Exit(kubetest.MainWith(m, kubetest.Options{Cluster: &kubetest.ClusterOptions{}}))
}

// waitTimeout bounds every wait: generous, for a loaded two-core machine.
const waitTimeout = 90 * time.Second

func deployment(t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32, annotations map[string]string) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:v1"}}},
			},
		},
	}
	d, err := cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor polls cond until it holds, failing t with the last reason.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	var why string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var ok bool
		ok, why = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", what, err, why)
	}
}

func available(cs kubernetes.Interface, ns, name string, want int32) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want,
			fmt.Sprintf("generation %d, status %+v", d.Generation, s)
	}
}

func pods(t *testing.T, cs kubernetes.Interface, ns, app string) []corev1.Pod {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// A Deployment goes through the real controllers: pods scheduled on the
// simulated nodes with loopback addresses, a new template rolled out as a
// new ReplicaSet, the old one scaled to zero.
func TestDeploymentRollsOut(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	deployment(t, env.Kube, ns, "web", 3, nil)
	waitFor(t, "3 available", available(env.Kube, ns, "web", 3))

	nodes := map[string]bool{}
	for _, n := range env.Cluster.Nodes {
		nodes[n] = true
	}
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	for _, p := range pods(t, env.Kube, ns, "web") {
		if !nodes[p.Spec.NodeName] {
			t.Errorf("pod %s on node %q, not one of %v", p.Name, p.Spec.NodeName, env.Cluster.Nodes)
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !loopback.Contains(ip) {
			t.Errorf("pod %s has IP %q, want one in %v", p.Name, p.Status.PodIP, loopback)
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			t.Errorf("pod %s: phase %s, ready %v", p.Name, p.Status.Phase, podReady(&p))
		}
	}

	d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "example.invalid/app:v2"
	if _, err := env.Kube.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "v2 rolled out", available(env.Kube, ns, "web", 3))
	rs, err := env.Kube.AppsV1().ReplicaSets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Items) != 2 {
		t.Fatalf("%d ReplicaSets, want 2 (one per template)", len(rs.Items))
	}
	for _, r := range rs.Items {
		want := int32(0)
		if r.Spec.Template.Spec.Containers[0].Image == "example.invalid/app:v2" {
			want = 3
		}
		if *r.Spec.Replicas != want {
			t.Errorf("ReplicaSet %s (%s): %d replicas, want %d", r.Name, r.Spec.Template.Spec.Containers[0].Image, *r.Spec.Replicas, want)
		}
	}
}

// AnnotationReadyAfter holds a pod's readiness: running at once, ready
// after the delay.
func TestReadyAfter(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	const delay = 2 * time.Second
	deployment(t, env.Kube, ns, "slow", 1, map[string]string{kubetest.AnnotationReadyAfter: delay.String()})
	waitFor(t, "available", available(env.Kube, ns, "slow", 1))
	p := pods(t, env.Kube, ns, "slow")[0]
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
	var readyAt time.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			readyAt = c.LastTransitionTime.Time
		}
	}
	// Condition times have a resolution of a second.
	if got := readyAt.Sub(started); got < delay-time.Second {
		t.Errorf("ready %v after the container started, want about %v", got, delay)
	}
}

// FaultNeverReady: the pods run and never become ready, so the Deployment
// never has an available replica.
func TestNeverReady(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	deployment(t, env.Kube, ns, "stuck", 2, map[string]string{kubetest.AnnotationFault: kubetest.FaultNeverReady})
	waitFor(t, "2 pods running", func(ctx context.Context) (bool, string) {
		ps := pods(t, env.Kube, ns, "stuck")
		running := 0
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d of %d pods running", running, len(ps))
	})
	time.Sleep(5 * env.Cluster.Options.PodReadyDelay)
	d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ReadyReplicas != 0 || d.Status.AvailableReplicas != 0 || d.Status.Replicas != 2 {
		t.Errorf("status %+v, want 2 replicas, none ready", d.Status)
	}
}

// FaultCrashLoop: a pod becomes ready, crashes, waits in CrashLoopBackOff
// with one restart more, and becomes ready again.
func TestCrashLoop(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	deployment(t, env.Kube, ns, "crashy", 1, map[string]string{
		kubetest.AnnotationFault:        kubetest.FaultCrashLoop,
		kubetest.AnnotationCrashAfter:   "500ms",
		kubetest.AnnotationRestartAfter: "1s",
	})
	sawReady, sawBackOff := false, false
	waitFor(t, "ready, crashed and ready again", func(ctx context.Context) (bool, string) {
		ps := pods(t, env.Kube, ns, "crashy")
		if len(ps) != 1 || len(ps[0].Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("%d pods", len(ps))
		}
		p := ps[0]
		cs := p.Status.ContainerStatuses[0]
		if podReady(&p) && cs.RestartCount == 0 {
			sawReady = true
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = !podReady(&p) && cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil
		}
		return sawReady && sawBackOff && podReady(&p) && cs.RestartCount >= 1,
			fmt.Sprintf("ready %v, restarts %d, state %+v; seen ready %v, back-off %v", podReady(&p), cs.RestartCount, cs.State, sawReady, sawBackOff)
	})
	// The pod stays the same pod: the ReplicaSet controller does not
	// replace a crashing pod, the kubelet restarts its container.
	if ps := pods(t, env.Kube, ns, "crashy"); len(ps) != 1 {
		t.Errorf("%d pods, want the one crashing pod", len(ps))
	}
}

// Deleting a Deployment deletes its ReplicaSets and pods: the garbage
// collector follows owner references.
func TestGarbageCollection(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	deployment(t, env.Kube, ns, "gone", 2, nil)
	waitFor(t, "available", available(env.Kube, ns, "gone", 2))
	if err := env.Kube.AppsV1().Deployments(ns).Delete(t.Context(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ReplicaSets and pods collected", func(ctx context.Context) (bool, string) {
		rs, err := env.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ps, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(rs.Items) == 0 && len(ps.Items) == 0, fmt.Sprintf("%d ReplicaSets, %d pods", len(rs.Items), len(ps.Items))
	})
}

// With the controller manager stopped, a Deployment's status is frozen; once
// it is started again, it catches up.
func TestControllerManagerStopped(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	deployment(t, env.Kube, ns, "frozen", 1, nil)
	waitFor(t, "available", available(env.Kube, ns, "frozen", 1))

	env.Cluster.StopControllerManager(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			env.Cluster.StartControllerManager(t)
		}
	})
	d, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "frozen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	three := int32(3)
	d.Spec.Replicas = &three
	if d, err = env.Kube.AppsV1().Deployments(ns).Update(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	got, err := env.Kube.AppsV1().Deployments(ns).Get(t.Context(), "frozen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration == d.Generation || got.Status.Replicas != 1 {
		t.Fatalf("with the controller manager stopped the status moved: %+v (generation %d)", got.Status, d.Generation)
	}
	env.Cluster.StartControllerManager(t)
	restarted = true
	waitFor(t, "3 available after the restart", available(env.Kube, ns, "frozen", 3))
}

// A lost node: NotReady after the grace period, its pods not ready, then
// evicted (and left Terminating, with no kubelet to confirm), and replaced
// on the other nodes. Restored, it deletes the Terminating pods.
func TestLoseNode(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	c := env.Cluster
	const replicas = 6
	deployment(t, env.Kube, ns, "spread", replicas, nil)
	waitFor(t, "available", available(env.Kube, ns, "spread", replicas))
	victim := pods(t, env.Kube, ns, "spread")[0].Spec.NodeName
	onVictim := 0
	for _, p := range pods(t, env.Kube, ns, "spread") {
		if p.Spec.NodeName == victim {
			onVictim++
		}
	}
	lostAt := time.Now()
	c.LoseNode(t, victim)
	restored := false
	t.Cleanup(func() {
		if !restored {
			c.RestoreNode(t, victim)
		}
	})

	waitFor(t, "node NotReady", func(ctx context.Context) (bool, string) {
		n, err := env.Kube.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, string(cond.Status)
			}
		}
		return false, "no Ready condition"
	})
	if got := time.Since(lostAt); got < c.Options.NodeGracePeriod-time.Second {
		t.Errorf("NotReady %v after the node was lost, before the %v grace period", got, c.Options.NodeGracePeriod)
	}
	waitFor(t, "replaced on the other nodes", func(ctx context.Context) (bool, string) {
		ps := pods(t, env.Kube, ns, "spread")
		terminating, readyElsewhere := 0, 0
		for _, p := range ps {
			switch {
			case p.DeletionTimestamp != nil:
				terminating++
			case p.Spec.NodeName != victim && podReady(&p):
				readyElsewhere++
			}
		}
		return terminating == onVictim && readyElsewhere == replicas,
			fmt.Sprintf("%d pods on %s, %d terminating, %d ready elsewhere", onVictim, victim, terminating, readyElsewhere)
	})

	c.RestoreNode(t, victim)
	restored = true
	waitFor(t, "Terminating pods gone once the node is back", func(ctx context.Context) (bool, string) {
		ps := pods(t, env.Kube, ns, "spread")
		var names []string
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				names = append(names, p.Name)
			}
		}
		return len(names) == 0, strings.Join(names, ", ")
	})
	// Leave the node Ready for the tests after this one.
	waitFor(t, "node Ready again", func(ctx context.Context) (bool, string) {
		n, err := env.Kube.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "gone"
		} else if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, string(cond.Status)
			}
		}
		return false, "no Ready condition"
	})
}
