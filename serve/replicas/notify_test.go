package replicas_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
)

func waitWatching(t *testing.T, s *replicas.Setter, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, _ := replicas.Watching(s)
		if running == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watch loops running, want %d", running, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// woken waits for a wake that the Deployment controller's answer brings
// (not a write of the test's own, whose wake kubetest.WakeBound bounds).
func woken(t testing.TB, w kubetest.Waker, what string) {
	t.Helper()
	select {
	case <-w:
	case <-time.After(waitTimeout):
		t.Fatalf("%s: no wake within %v", what, waitTimeout)
	}
}

// TestNotifyDeployment: the Setter and the Deployer of a Deployment share
// one watch, and wake on its controller's answers and on a write of its
// replicas by someone else, not on their own writes, nor on a write of its
// controller that changes nothing they report (the generation observed,
// pods started and not ready yet); another Deployment wakes nobody; ctx
// stops the watch.
func TestNotifyDeployment(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Each pod is ready 4 s after it starts: until then, the first
		// answers of the controller to a scale-up, and to any later write
		// of the Deployment, change nothing the Setter reports.
		deploymentWith(t, env.Kube, ns, "web", 0, map[string]string{kubetest.AnnotationReadyAfter: "4s"})
		waitRolledOut(t, env.Kube, ns, "web")
		s := k.Deployment(ns, "web", 4)
		d := deployer(t, s)
		w := kubetest.NewWaker()
		if err := s.Notify(ctx, w.Wake); err != nil {
			t.Fatal(err)
		}
		wd := kubetest.NewWaker()
		if err := d.Notify(ctx, wd.Wake); err != nil {
			t.Fatal(err)
		}
		waitWatching(t, s, 1) // one watch, shared by the Setter and its Deployer
		if n := s.Counts().Watches; n != 1 {
			t.Fatalf("%d watch requests for the Setter and its Deployer, want 1", n)
		}
		w.Drain() // the first event of the watch
		wd.Drain()
		// The Deployer's deploy at 0 replicas is its own write; the wake
		// is the controller's answer, v2 rolled out.
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		woken(t, wd, "the controller observed v2 (Deployer)")
		waitRolledOut(t, env.Kube, ns, "web")
		w.After(t, "the revision annotation by someone else", func() {
			updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Annotations[replicas.RevisionAnnotation] = "theirs" })
		})
		// A Deployment's new annotations are a new generation: wait for
		// the controller's answer.
		waitRolledOut(t, env.Kube, ns, "web")
		// The Setter's scale-up is its own write; the controller's first
		// answers (the generation observed, pods created) change nothing
		// it reports, and neither do its own writes while the pods start,
		// nor the Deployer's record of the revision the template runs.
		w.Quiet(t, "the Setter's own capacity and its controller's first answers", func() {
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
				t.Fatal(err)
			}
		})
		w.Quiet(t, "the Setter's own capacity that keeps the replicas", func() {
			// 26% of 4 is 2 replicas, as 50%: only the annotation changes.
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 26}); err != nil {
				t.Fatal(err)
			}
		})
		w.Quiet(t, "the Deployer's own record of the revision", func() {
			if err := d.Deploy(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
		})
		woken(t, w, "the pods ready")
		waitRolledOut(t, env.Kube, ns, "web")
		w.After(t, "replicas written by someone else", func() {
			other := k.Deployment(ns, "web", 4)
			if err := other.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
				t.Fatal(err)
			}
		})

		waitRolledOut(t, env.Kube, ns, "web")
		w.Drain()
		deployment(t, env.Kube, ns, "other", 2) // created, and rolled out by its controller
		select {
		case <-w:
			t.Fatal("woken by a Deployment the Setter does not manage")
		case <-time.After(300 * time.Millisecond):
		}
		cancel()
		waitWatching(t, s, 0)
	})
}

// TestNotifyStatefulSetAndScalable: a status write wakes the Setter of a
// StatefulSet (written by the test: the cluster runs no StatefulSet
// controller) and of a scalable kind (through the dynamic client: its
// Deployment controller's), and the scalable Setter's own writes (the
// scale subresource, then its annotation) do not.
func TestNotifyStatefulSetAndScalable(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := int32(2)
		labels := map[string]string{"app": "db"}
		ss := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.com/db:v1"}}}}},
		}
		ss, err := env.Kube.AppsV1().StatefulSets(ns).Create(ctx, ss, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := k.StatefulSet(ns, "db", 2)
		w := kubetest.NewWaker()
		if err := st.Notify(ctx, w.Wake); err != nil {
			t.Fatal(err)
		}
		w.After(t, "StatefulSet status", func() {
			ss.Status = appsv1.StatefulSetStatus{ObservedGeneration: ss.Generation, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2}
			if _, err := env.Kube.AppsV1().StatefulSets(ns).UpdateStatus(ctx, ss, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		})

		// Pods ready 1 s after they start: the controller's first answers
		// to a scale-up change nothing the Setter reports.
		deploymentWith(t, env.Kube, ns, "web", 2, map[string]string{kubetest.AnnotationReadyAfter: "1s"})
		waitRolledOut(t, env.Kube, ns, "web")
		sc := k.Scalable(ns, "web", 4)
		ws := kubetest.NewWaker()
		if err := sc.Notify(ctx, ws.Wake); err != nil {
			t.Fatal(err)
		}
		ws.Drain() // the first event of the watch
		ws.Quiet(t, "its own scale", func() {
			if err := sc.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
				t.Fatal(err)
			}
		})
		woken(t, ws, "scalable status: the new pods ready")
		cancel()
		waitWatching(t, st, 0)
		waitWatching(t, sc, 0)
	})
}

// TestNotifyLeastPrivilege: a ServiceAccount allowed get, update and watch
// on the named Deployment only is notified of it; a Deployment outside
// resourceNames makes Notify fail with Forbidden.
func TestNotifyLeastPrivilege(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		deployment(t, env.Kube, ns, "web", 2)
		deployment(t, env.Kube, ns, "other", 2)
		sa := env.ServiceAccount(t, ns, "upshift-replicas")
		env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{
			APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{"web"},
			Verbs: []string{"get", "update", "watch"},
		})
		s := k.For(sa.Config).Deployment(ns, "web", 2)
		w := kubetest.NewWaker()
		if err := s.Notify(ctx, w.Wake); err != nil {
			t.Fatalf("Notify as the ServiceAccount: %v", err)
		}
		w.After(t, "a scale by someone else", func() {
			updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(3)) })
		})
		woken(t, w, "the controller's answer")
		o := k.For(sa.Config).Deployment(ns, "other", 2)
		if err := o.Notify(ctx, w.Wake); !apierrors.IsForbidden(err) {
			t.Fatalf("Notify on a Deployment the Role does not name: %v, want Forbidden", err)
		}
		waitWatching(t, o, 0)
	})
}

// TestNotifyReestablishes: a watch the server closes is opened again and
// still wakes.
func TestNotifyReestablishes(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		deployment(t, env.Kube, ns, "web", 2)
		s := k.Deployment(ns, "web", 2)
		replicas.SetWatchOptions(s, time.Second, 10*time.Millisecond)
		w := kubetest.NewWaker()
		if err := s.Notify(ctx, w.Wake); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, requests := replicas.Watching(s); requests >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the watch was not re-established twice within 10s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		w.After(t, "a scale after the watch was re-established", func() {
			updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(3)) })
		})
		cancel()
		waitWatching(t, s, 0)
	})
}
