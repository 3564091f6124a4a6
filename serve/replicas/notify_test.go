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

// TestNotifyDeployment: the Setter and the Deployer of a Deployment share
// one watch, and wake on a write of its status (its controller answering) and of its replicas
// by someone else, not on their own writes of its replicas and template,
// nor on a status write that changes nothing they report;
// another Deployment wakes nobody; ctx stops the watch.
func TestNotifyDeployment(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		deployment(t, env.Kube, ns, "web", 0)
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
		w.Quiet(t, "the Deployer's own deploy", func() {
			if err := d.Deploy(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
		})
		wd.After(t, "status (Deployer)", func() { playDeployment(t, env.Kube, ns, "web", -1) })
		w.Drain()
		w.Quiet(t, "the Setter's own capacity", func() {
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
				t.Fatal(err)
			}
		})
		w.After(t, "status", func() { playDeployment(t, env.Kube, ns, "web", 1) })
		w.Quiet(t, "a status write that changes nothing the Setter reports", func() {
			d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			one := int32(1)
			d.Status.CollisionCount = &one
			if _, err := env.Kube.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		})
		w.After(t, "replicas written by someone else", func() {
			other := k.Deployment(ns, "web", 4)
			if err := other.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
				t.Fatal(err)
			}
		})

		w.Drain()
		deployment(t, env.Kube, ns, "other", 2)
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
// StatefulSet and of a scalable kind (through the dynamic client), and the
// scalable Setter's own writes (the scale subresource, then its
// annotation) do not.
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

		deployment(t, env.Kube, ns, "web", 4)
		sc := k.Scalable(ns, "web", 4)
		ws := kubetest.NewWaker()
		if err := sc.Notify(ctx, ws.Wake); err != nil {
			t.Fatal(err)
		}
		ws.Drain() // the first event of the watch
		ws.Quiet(t, "its own scale", func() {
			if err := sc.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
				t.Fatal(err)
			}
		})
		ws.After(t, "scalable status", func() { playDeployment(t, env.Kube, ns, "web", -1) })
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
		w.After(t, "status", func() { playDeployment(t, env.Kube, ns, "web", 1) })
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
		w.After(t, "status after the watch was re-established", func() { playDeployment(t, env.Kube, ns, "web", 1) })
		cancel()
		waitWatching(t, s, 0)
	})
}
