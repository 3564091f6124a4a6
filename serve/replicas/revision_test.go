package replicas_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
)

// image maps a revision to the image of the container "app".
var image = replicas.Image("app", func(rev string) string { return "example.com/app:" + rev })

func deployer(t testing.TB, s *replicas.Setter) *replicas.Deployer {
	t.Helper()
	d, err := s.Deployer(image)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func getDeployment(t testing.TB, cs kubernetes.Interface, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// updateDeployment applies change to Deployment name and writes it, again
// from a fresh read after a write conflict: its controller writes too.
func updateDeployment(t testing.TB, cs kubernetes.Interface, ns, name string, change func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	var out *appsv1.Deployment
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(d)
		out, err = cs.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitRevision polls d.Revision(expect) until done holds and returns it;
// every status seen on the way must be one of allowed.
func waitRevision(t testing.TB, d *replicas.Deployer, expect, what string, done func(rollout.RevisionStatus) bool, allowed ...rollout.RevisionStatus) rollout.RevisionStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var last rollout.RevisionStatus
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last, lastErr = d.Revision(ctx, expect)
		if lastErr != nil {
			return false, nil
		}
		if len(allowed) > 0 && !slices.Contains(allowed, last) {
			return false, fmt.Errorf("%+v on the way, want one of %+v", last, allowed)
		}
		return done(last), nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %+v, %v)", what, err, last, lastErr)
	}
	return last
}

func updated(rs rollout.RevisionStatus) bool { return rs.Updated }

// replicaSets returns the replicas of each ReplicaSet of Deployment app
// (its pods' label app), by the image of its template.
func replicaSets(t testing.TB, cs kubernetes.Interface, ns, app string) map[string]int32 {
	t.Helper()
	l, err := cs.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, r := range l.Items {
		got[r.Spec.Template.Spec.Containers[0].Image] += *r.Spec.Replicas
	}
	return got
}

// statefulSet creates StatefulSet name with n replicas, and writes the
// status its controller would once every pod is ready (the cluster runs no
// StatefulSet controller).
func statefulSet(t testing.TB, cs kubernetes.Interface, ns, name string, n int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:" + name}}}}},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(context.Background(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statefulSetObserved(t, cs, ns, name)
}

// statefulSetObserved writes the status of StatefulSet name as its
// controller would once it has observed the spec and every pod is ready.
func statefulSetObserved(t testing.TB, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ss, err := cs.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n := *ss.Spec.Replicas
		ss.Status = appsv1.StatefulSetStatus{ObservedGeneration: ss.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n, UpdatedReplicas: n}
		_, err = cs.AppsV1().StatefulSets(ns).UpdateStatus(context.Background(), ss, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func getStatefulSet(t testing.TB, cs kubernetes.Interface, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	ss, err := cs.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func revisionOf(t testing.TB, d *replicas.Deployer) rollout.RevisionStatus {
	t.Helper()
	rs, err := d.Revision(context.Background(), "ignored")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestDeployAtZero: at 0 replicas Deploy writes the template and the
// annotation in one write; Updated waits for the controller (which makes a
// ReplicaSet of the new template, at 0 replicas); deploying the recorded
// revision writes nothing; a workload with replicas is refused, untouched;
// scaled to 0 with a pod still stopping, the deploy goes ahead and Updated
// waits until the pod is gone.
func TestDeployAtZero(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		// Each pod is ready 2 s after it starts: Updated cannot come
		// before.
		deploymentWith(t, env.Kube, ns, "web", 0, map[string]string{kubetest.AnnotationReadyAfter: "2s"})
		waitRolledOut(t, env.Kube, ns, "web")
		s := k.Deployment(ns, "web", 4)
		d := deployer(t, s)
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{}) {
			t.Fatalf("before any deploy: %+v, want no revision", rs)
		}
		before := getDeployment(t, env.Kube, ns, "web")
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		after := getDeployment(t, env.Kube, ns, "web")
		if got := after.Spec.Template.Spec.Containers[0].Image; got != "example.com/app:v2" {
			t.Fatalf("image %q", got)
		}
		if after.Annotations[replicas.RevisionAnnotation] != "v2" || after.Spec.Template.Annotations[replicas.RevisionAnnotation] != "v2" {
			t.Fatalf("annotations %v, template %v", after.Annotations, after.Spec.Template.Annotations)
		}
		if after.Generation == before.Generation {
			t.Fatal("the template changed and the generation did not")
		}
		// Not Updated until the controller has observed the template; then
		// Updated at 0 replicas.
		waitRevision(t, d, "ignored", "observed at 0 replicas", updated,
			rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})
		if got, want := replicaSets(t, env.Kube, ns, "web"), map[string]int32{"example.com/app:web": 0, "example.com/app:v2": 0}; !cmp.Equal(got, want) {
			t.Fatalf("ReplicaSets by image %v, want %v: one per template, both at 0", got, want)
		}
		// Deploying it again writes nothing.
		rv := waitRolledOut(t, env.Kube, ns, "web").ResourceVersion
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		if got := getDeployment(t, env.Kube, ns, "web").ResourceVersion; got != rv {
			t.Fatal("deploying the recorded revision wrote the Deployment")
		}

		// Scaled up: Updated follows the pods until every one is available.
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
			t.Fatal(err)
		}
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v2"}) {
			t.Fatalf("scaled, no pod ready yet: %+v", rs)
		}
		waitRevision(t, d, "ignored", "2 of 2 available", updated,
			rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})
		if dep := getDeployment(t, env.Kube, ns, "web"); dep.Status.AvailableReplicas != 2 {
			t.Fatalf("Updated with %d pods available, want 2", dep.Status.AvailableReplicas)
		}

		// With replicas, another revision is refused and nothing is written;
		// the recorded one is still a no-op.
		rv = waitRolledOut(t, env.Kube, ns, "web").ResourceVersion
		err := d.Deploy(ctx, "v3")
		var refused *replicas.DeployRefusedError
		if !errors.As(err, &refused) || !errors.Is(err, replicas.ErrDeployRefused) || !rollout.IsPermanent(err) {
			t.Fatalf("deploy at 2 replicas: %v; want a permanent *DeployRefusedError", err)
		}
		want := replicas.DeployRefusedError{Workload: "Deployment " + ns + "/web", Revision: "v3", Running: "v2", Field: "spec.replicas", Replicas: 2}
		if *refused != want || !strings.Contains(err.Error(), "spec.replicas is 2") {
			t.Fatalf("refusal %+v (%v), want %+v", *refused, err, want)
		}
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatalf("the recorded revision at 2 replicas: %v", err)
		}
		if got := getDeployment(t, env.Kube, ns, "web").ResourceVersion; got != rv {
			t.Fatal("a refused deploy wrote the Deployment")
		}

		// Scaled to 0 with a pod still stopping (a finalizer holds it
		// Terminating): the deploy goes ahead (the controller starts no pod
		// at 0 replicas), and Updated waits until the pod is gone.
		release := holdPod(t, env.Kube, ns, "web")
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
			t.Fatal(err)
		}
		if err := d.Deploy(ctx, "v3"); err != nil {
			t.Fatal(err)
		}
		waitDeployment(t, env.Kube, ns, "web", "observed with a pod terminating", func(d *appsv1.Deployment) bool {
			st := d.Status
			return st.ObservedGeneration >= d.Generation && st.Replicas == 0 && st.TerminatingReplicas != nil && *st.TerminatingReplicas == 1
		})
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v3"}) {
			t.Fatalf("a pod terminating: %+v", rs)
		}
		release()
		waitRevision(t, d, "ignored", "no pod left", updated,
			rollout.RevisionStatus{Revision: "v3"}, rollout.RevisionStatus{Revision: "v3", Updated: true})
		if got := getDeployment(t, env.Kube, ns, "web").Spec.Template.Spec.Containers[0].Image; got != "example.com/app:v3" {
			t.Fatalf("image %q", got)
		}
	})
}

// holdFinalizer keeps a pod Terminating once it is deleted, until the test
// removes it.
const holdFinalizer = "upshift.dev/test-hold"

// holdPod puts holdFinalizer on a pod of Deployment app, and returns the
// func that removes it (also called at the test's end).
func holdPod(t testing.TB, cs kubernetes.Interface, ns, app string) (release func()) {
	t.Helper()
	ctx := context.Background()
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("pods of %s: %d, %v", app, len(l.Items), err)
	}
	name := l.Items[0].Name
	setFinalizers := func(fs []string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
			p.Finalizers = fs
			_, err = cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			return err
		})
	}
	if err := setFinalizers([]string{holdFinalizer}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := setFinalizers(nil); err != nil {
				t.Errorf("releasing pod %s: %v", name, err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// TestDeployPausedAndFixedCapacity: a paused Deployment is refused (its
// controller would scale the old template) and never Updated; with
// FixedCapacity a Deployment with replicas takes the template, and
// Updated waits for the controller to replace its pods.
func TestDeployPausedAndFixedCapacity(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		// Each pod is ready 2 s after it starts, so the rolling update
		// (one pod more at a time, none unavailable) takes 6 s at least.
		deploymentWith(t, env.Kube, ns, "web", 3, map[string]string{kubetest.AnnotationReadyAfter: "2s"})
		waitRolledOut(t, env.Kube, ns, "web")
		d := deployer(t, k.Deployment(ns, "web", 3))
		d.FixedCapacity = true

		updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Spec.Paused = true })
		err := d.Deploy(ctx, "v2")
		var refused *replicas.DeployRefusedError
		if !errors.As(err, &refused) || refused.Field != "spec.paused" || !rollout.IsPermanent(err) {
			t.Fatalf("paused: %v; want a permanent refusal naming spec.paused", err)
		}
		if rs := revisionOf(t, d); rs.Updated {
			t.Fatalf("paused: %+v, want not Updated", rs)
		}
		updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Spec.Paused = false })
		waitRolledOut(t, env.Kube, ns, "web")

		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatalf("FixedCapacity at 3 replicas: %v", err)
		}
		// The controller has seen the template and replaces the pods one
		// at a time.
		waitDeployment(t, env.Kube, ns, "web", "mid rolling update", func(d *appsv1.Deployment) bool {
			return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= 1 && d.Status.UpdatedReplicas < 3
		})
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v2"}) {
			t.Fatalf("mid rolling update: %+v", rs)
		}
		waitRevision(t, d, "ignored", "rolled out", updated,
			rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})
		if got, want := replicaSets(t, env.Kube, ns, "web"), map[string]int32{"example.com/app:web": 0, "example.com/app:v2": 3}; !cmp.Equal(got, want) {
			t.Fatalf("ReplicaSets by image %v, want %v", got, want)
		}
	})
}

// TestStatefulSetRevision: a StatefulSet is Updated once its controller has
// observed the template and its current revision is the update revision.
// The cluster runs no StatefulSet controller: the test writes the
// StatefulSet's status itself.
func TestStatefulSetRevision(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		labels := map[string]string{"app": "db"}
		ss := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Annotations: map[string]string{replicas.RevisionAnnotation: "v1"}},
			Spec: appsv1.StatefulSetSpec{
				Replicas: new(int32(0)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:v1"}}},
				},
			},
		}
		if _, err := env.Kube.AppsV1().StatefulSets(ns).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setStatus := func(current, update string) {
			t.Helper()
			ss, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ss.Status = appsv1.StatefulSetStatus{ObservedGeneration: ss.Generation, CurrentRevision: current, UpdateRevision: update}
			if _, err := env.Kube.AppsV1().StatefulSets(ns).UpdateStatus(ctx, ss, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		setStatus("db-1", "db-1")
		d := deployer(t, k.StatefulSet(ns, "db", 3))
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v1", Updated: true}) {
			t.Fatalf("created with v1: %+v", rs)
		}
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		ss, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ss.Spec.Template.Spec.Containers[0].Image != "example.com/app:v2" || ss.Spec.Template.Annotations[replicas.RevisionAnnotation] != "v2" {
			t.Fatalf("template %+v", ss.Spec.Template)
		}
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v2"}) {
			t.Fatalf("not observed: %+v", rs)
		}
		setStatus("db-1", "db-2")
		if rs := revisionOf(t, d); rs.Updated {
			t.Fatalf("current revision behind the update revision: %+v", rs)
		}
		setStatus("db-2", "db-2")
		if rs := revisionOf(t, d); rs != (rollout.RevisionStatus{Revision: "v2", Updated: true}) {
			t.Fatalf("rolled out: %+v", rs)
		}
		// The StatefulSet with replicas refuses.
		ss, _ = env.Kube.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		ss.Spec.Replicas = new(int32(1))
		if _, err := env.Kube.AppsV1().StatefulSets(ns).Update(ctx, ss, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var refused *replicas.DeployRefusedError
		if err := d.Deploy(ctx, "v3"); !errors.As(err, &refused) || refused.Workload != "StatefulSet "+ns+"/db" {
			t.Fatalf("StatefulSet at 1 replica: %v", err)
		}
	})
}

// TestDeployerErrors: bad configuration and bad revisions are typed errors
// naming what is wrong, never panics; a missing workload is
// rollout.ErrNotFound; a template the API server rejects is permanent.
func TestDeployerErrors(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 0)
		s := k.Deployment(ns, "web", 2)

		scalable := k.Scalable(ns, "web", 2)
		for name, build := range map[string]func() (*replicas.Deployer, error){
			"ForScalable":  func() (*replicas.Deployer, error) { return scalable.Deployer(image) },
			"nil template": func() (*replicas.Deployer, error) { return s.Deployer(nil) },
			"nil Setter":   func() (*replicas.Deployer, error) { return (*replicas.Setter)(nil).Deployer(image) },
			"zero Setter":  func() (*replicas.Deployer, error) { return new(replicas.Setter).Deployer(image) },
		} {
			if d, err := build(); d != nil || !errors.Is(err, replicas.ErrInvalid) {
				t.Errorf("%s: %v, %v; want ErrInvalid", name, d, err)
			}
		}
		for name, d := range map[string]*replicas.Deployer{"nil": nil, "zero": {}} {
			if err := d.Deploy(ctx, "v1"); !errors.Is(err, replicas.ErrInvalid) || !rollout.IsPermanent(err) {
				t.Errorf("%s Deployer: Deploy = %v", name, err)
			}
			if _, err := d.Revision(ctx, "v1"); !errors.Is(err, replicas.ErrInvalid) {
				t.Errorf("%s Deployer: Revision = %v", name, err)
			}
		}

		d := deployer(t, s)
		if err := d.Deploy(ctx, ""); !errors.Is(err, replicas.ErrInvalid) || !rollout.IsPermanent(err) {
			t.Errorf("empty revision: %v", err)
		}
		noSuch, err := s.Deployer(replicas.Image("sidecar", func(rev string) string { return "x:" + rev }))
		if err != nil {
			t.Fatal(err)
		}
		if err := noSuch.Deploy(ctx, "v2"); !errors.Is(err, replicas.ErrInvalid) || !rollout.IsPermanent(err) ||
			!strings.Contains(err.Error(), `no container named "sidecar"`) {
			t.Errorf("no such container: %v", err)
		}
		empty, _ := s.Deployer(replicas.Image("app", func(string) string { return "" }))
		if err := empty.Deploy(ctx, "v2"); !rollout.IsPermanent(err) || !strings.Contains(err.Error(), "containers[0].image") {
			t.Errorf("empty image: %v", err)
		}
		nilImage, _ := s.Deployer(replicas.Image("app", nil))
		if err := nilImage.Deploy(ctx, "v2"); !rollout.IsPermanent(err) || !errors.Is(err, replicas.ErrInvalid) {
			t.Errorf("nil image func: %v", err)
		}
		invalid, _ := s.Deployer(func(_ string, t *corev1.PodTemplateSpec) error { t.Spec.Containers = nil; return nil })
		if err := invalid.Deploy(ctx, "v2"); !apierrors.IsInvalid(err) || !rollout.IsPermanent(err) {
			t.Errorf("a template the API server rejects: %v", err)
		}
		if got := getDeployment(t, env.Kube, ns, "web"); got.Annotations[replicas.RevisionAnnotation] != "" {
			t.Errorf("failed deploys recorded %q", got.Annotations[replicas.RevisionAnnotation])
		}
		missing := deployer(t, k.Deployment(ns, "missing", 2))
		if err := missing.Deploy(ctx, "v2"); !errors.Is(err, rollout.ErrNotFound) {
			t.Errorf("missing Deployment: Deploy = %v", err)
		}
		if _, err := missing.Revision(ctx, "v2"); !errors.Is(err, rollout.ErrNotFound) {
			t.Errorf("missing Deployment: Revision = %v", err)
		}
	})
}

// TestDeployConflicts: on the real API server, a write that loses races
// is retried from a fresh read, MaxConflictRetries times, then reported as
// rollout.ErrConflict.
func TestDeployConflicts(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		newDeployer := func(name string, conflicts int32) (*replicas.Deployer, *atomic.Int32) {
			deployment(t, env.Kube, ns, name, 0)
			cfg, puts := conflicting(env.Config, name, conflicts, nil)
			s := k.For(cfg).Deployment(ns, name, 4)
			s.MaxConflictRetries = 3
			return deployer(t, s), puts
		}
		d, puts := newDeployer("two", 2)
		if err := d.Deploy(ctx, "v2"); err != nil || puts.Load() != 3 {
			t.Fatalf("two conflicts: err %v after %d writes; want nil after 3", err, puts.Load())
		}
		if rs := revisionOf(t, d); rs.Revision != "v2" {
			t.Fatalf("after the retries: %+v", rs)
		}
		d, puts = newDeployer("endless", -1)
		err := d.Deploy(ctx, "v2")
		if !errors.Is(err, rollout.ErrConflict) || rollout.IsPermanent(err) || puts.Load() != 4 {
			t.Fatalf("endless conflicts: err %v after %d writes; want rollout.ErrConflict, not permanent, after 4", err, puts.Load())
		}
		if got := getDeployment(t, env.Kube, ns, "endless"); got.Annotations[replicas.RevisionAnnotation] != "" {
			t.Fatalf("a deploy that never won recorded %q", got.Annotations[replicas.RevisionAnnotation])
		}
	})
}

// TestDeployRacesAScaleUp: on the real API server, a scale-up written
// between Deploy's read and its write makes the write conflict; the retry
// reads the replicas and refuses. The replica check and the template
// change are one atomic step.
func TestDeployRacesAScaleUp(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 0)
		var raced atomic.Bool
		cfg := rest.CopyConfig(env.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/deployments/web") && raced.CompareAndSwap(false, true) {
					// Another writer scales the Deployment first.
					updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(2)) })
				}
				return rt.RoundTrip(req)
			})
		})
		d := deployer(t, k.For(cfg).Deployment(ns, "web", 4))
		err := d.Deploy(ctx, "v2")
		var refused *replicas.DeployRefusedError
		if !raced.Load() || !errors.As(err, &refused) || refused.Replicas != 2 {
			t.Fatalf("raced %v: %v; want a refusal at 2 replicas", raced.Load(), err)
		}
		dep := getDeployment(t, env.Kube, ns, "web")
		if dep.Spec.Template.Spec.Containers[0].Image != "example.com/app:web" || dep.Annotations[replicas.RevisionAnnotation] != "" {
			t.Fatalf("the refused deploy changed the Deployment: %s %v", dep.Spec.Template.Spec.Containers[0].Image, dep.Annotations)
		}
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestFirstRevisionRecognised: a workload created with the first revision
// and no annotation runs expect when the TemplateFunc of expect leaves its
// template as it is, and nothing else.
func TestFirstRevisionRecognised(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		deployment(t, env.Kube, ns, "web", 2) // image example.com/app:web
		d := deployer(t, k.Deployment(ns, "web", 2))
		for _, tc := range []struct {
			expect string
			want   string
		}{
			{"web", "web"},
			{"v2", ""},
			{"", ""},
		} {
			got, err := d.Revision(ctx, tc.expect)
			if err != nil || got.Revision != tc.want {
				t.Errorf("Revision(%q) = %+v, %v; want revision %q", tc.expect, got, err, tc.want)
			}
		}
		if got, err := d.Revision(ctx, "web"); err != nil || got != (rollout.RevisionStatus{Revision: "web", Updated: true}) {
			t.Errorf("rolled out: %+v, %v", got, err)
		}
		// An annotation is a hint: the template decides. Annotated v1, it
		// still runs web, and not v1.
		updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations[replicas.RevisionAnnotation] = "v1"
		})
		for expect, want := range map[string]string{"web": "web", "v1": "", "v2": ""} {
			if got, err := d.Revision(ctx, expect); err != nil || got.Revision != want {
				t.Errorf("annotated v1, Revision(%q) = %+v, %v; want revision %q", expect, got, err, want)
			}
		}
	})
}

// TestRevisionReadFromTemplate: after Deploy(v2), another writer puts the
// old image back (kubectl set image, a GitOps tool healing toward its own
// copy), or the whole old template, and leaves the annotation: Revision
// reports what the template runs, not v2, and Deploy(v2) writes the v2
// template again.
func TestRevisionReadFromTemplate(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		for _, revert := range []struct {
			name string
			put  func(now, before *appsv1.Deployment)
			// replicaSets: the controller keeps one per template (pod
			// template hash). The old image under the v2 annotation is a
			// third template; the whole old template is the first one
			// again, and gets its ReplicaSet back.
			replicaSets int
		}{
			{"image", func(now, _ *appsv1.Deployment) { now.Spec.Template.Spec.Containers[0].Image = "example.com/app:web" }, 3},
			{"template", func(now, before *appsv1.Deployment) { now.Spec.Template = before.Spec.Template }, 2},
		} {
			t.Run(revert.name, func(t *testing.T) {
				ns := env.Namespace(t)
				ctx := context.Background()
				deployment(t, env.Kube, ns, "web", 0) // runs revision "web"
				d := deployer(t, k.Deployment(ns, "web", 2))
				before := getDeployment(t, env.Kube, ns, "web")
				if err := d.Deploy(ctx, "v2"); err != nil {
					t.Fatal(err)
				}
				waitRevision(t, d, "v2", "deployed", updated,
					rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})

				updateDeployment(t, env.Kube, ns, "web", func(dep *appsv1.Deployment) { revert.put(dep, before) })
				waitRolledOut(t, env.Kube, ns, "web")
				if got := getDeployment(t, env.Kube, ns, "web").Annotations[replicas.RevisionAnnotation]; got != "v2" {
					t.Fatalf("the annotation is %q after the revert, want v2 left in place", got)
				}
				for expect, want := range map[string]rollout.RevisionStatus{
					"v2":  {},                               // not what it runs
					"web": {Revision: "web", Updated: true}, // what it runs
				} {
					if got, err := d.Revision(ctx, expect); err != nil || got != want {
						t.Errorf("reverted, Revision(%q) = %+v, %v; want %+v", expect, got, err, want)
					}
				}

				gen := getDeployment(t, env.Kube, ns, "web").Generation
				if err := d.Deploy(ctx, "v2"); err != nil {
					t.Fatal(err)
				}
				after := getDeployment(t, env.Kube, ns, "web")
				if img := after.Spec.Template.Spec.Containers[0].Image; img != "example.com/app:v2" || after.Generation == gen ||
					after.Spec.Template.Annotations[replicas.RevisionAnnotation] != "v2" {
					t.Fatalf("deploying v2 again: image %q, generation %d -> %d, template annotations %v",
						img, gen, after.Generation, after.Spec.Template.Annotations)
				}
				waitRevision(t, d, "v2", "deployed again", updated,
					rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})
				rs, err := env.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
				if err != nil {
					t.Fatal(err)
				}
				if len(rs.Items) != revert.replicaSets {
					t.Errorf("%d ReplicaSets, want %d, one per template", len(rs.Items), revert.replicaSets)
				}
			})
		}
	})
}

// fullContainer is a TemplateFunc that writes the whole container, with
// a port and a probe, leaving unset what the API server defaults
// (imagePullPolicy, terminationMessagePath, the port's protocol, the
// probe's periods and scheme).
func fullContainer(rev string, t *corev1.PodTemplateSpec) error {
	t.Spec.Containers = []corev1.Container{{
		Name: "app", Image: "example.com/app:" + rev,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
	}}
	return nil
}

// TestRevisionDefaulting: the API server fills in the fields a
// TemplateFunc leaves unset; a template it wrote (by Deploy, or by the
// caller for the first revision) is still recognised, and deploying it
// again writes nothing.
func TestRevisionDefaulting(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx := context.Background()
		labels := map[string]string{"app": "web"}
		first := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
		if err := fullContainer("v1", &first); err != nil {
			t.Fatal(err)
		}
		created := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec:       appsv1.DeploymentSpec{Replicas: new(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: first},
		}
		if _, err := env.Kube.AppsV1().Deployments(ns).Create(ctx, created, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRolledOut(t, env.Kube, ns, "web")
		live := getDeployment(t, env.Kube, ns, "web").Spec.Template.Spec.Containers[0]
		if live.ImagePullPolicy == "" || live.TerminationMessagePath == "" || live.Ports[0].Protocol == "" || live.ReadinessProbe.PeriodSeconds == 0 {
			t.Fatalf("the API server defaulted nothing: %+v", live)
		}
		s := k.Deployment(ns, "web", 2)
		d, err := s.Deployer(fullContainer)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.Revision(ctx, "v1"); err != nil || got != (rollout.RevisionStatus{Revision: "v1", Updated: true}) {
			t.Fatalf("the first revision as created, defaulted: %+v, %v", got, err)
		}
		if got, err := d.Revision(ctx, "v2"); err != nil || got.Revision != "" {
			t.Fatalf("Revision(v2) of v1: %+v, %v", got, err)
		}
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
			t.Fatal(err)
		}
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		waitRevision(t, d, "v2", "deployed, defaulted", updated,
			rollout.RevisionStatus{Revision: "v2"}, rollout.RevisionStatus{Revision: "v2", Updated: true})
		rv := waitRolledOut(t, env.Kube, ns, "web").ResourceVersion
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		if got := getDeployment(t, env.Kube, ns, "web").ResourceVersion; got != rv {
			t.Fatal("deploying the revision the template runs wrote the Deployment")
		}
	})
}
