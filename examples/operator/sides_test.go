package main_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The sides as the cluster runs them. The Deployment controller, the
// ReplicaSet controller and the nodes are real: the harness reads the
// Deployments' templates as they change (watchTemplates) and, at every move
// of traffic, the pods as they were when the route was written (checkMove).

// move is one move of traffic onto a side, and what its pods were at the
// route's resourceVersion.
type move struct {
	side     string
	weight   int32
	image    string // the Deployment's template
	ready    int    // ready pods running image, not being deleted
	problems []string
}

func (m move) String() string {
	return fmt.Sprintf("%s=%d (%d ready of %s)", m.side, m.weight, m.ready, m.image)
}

// watchTemplates records the image of every pod template each Deployment
// of the namespace is seen with, until the world ends.
func (w *world) watchTemplates() {
	f := informers.NewSharedInformerFactoryWithOptions(w.env.Kube, 0, informers.WithNamespace(w.ns))
	inf := f.Apps().V1().Deployments().Informer()
	seen := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		image := appImage(d.Spec.Template.Spec)
		w.mu.Lock()
		defer w.mu.Unlock()
		if ts := w.templates[d.Name]; len(ts) == 0 || ts[len(ts)-1] != image {
			w.templates[d.Name] = append(ts, image)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: seen,
		UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		w.t.Errorf("watching the Deployments: %v", err)
		return
	}
	f.Start(w.ctx.Done())
	f.WaitForCacheSync(w.ctx.Done())
	<-w.ctx.Done()
	f.Shutdown()
}

// appImage is the image of the container "app".
func appImage(spec corev1.PodSpec) string {
	for _, c := range spec.Containers {
		if c.Name == "app" {
			return c.Image
		}
	}
	return ""
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkMove checks the move of traffic onto Deployment side (weight now)
// that the route rt made, against the cluster exactly as it was when rt
// was written (a list at rt's resourceVersion): the side has a ready pod
// running its template's image, no ready pod of the side runs another
// image, and the Deployment's status reports an available replica. Traffic
// never goes to a side running the wrong revision, nor to one with no
// ready capacity.
func (w *world) checkMove(rt *gwv1.HTTPRoute, side string, weight int32) {
	at := metav1.ListOptions{ResourceVersion: rt.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	deps, err := w.env.Kube.AppsV1().Deployments(w.ns).List(w.ctx, at)
	if err != nil {
		if w.ctx.Err() == nil {
			w.t.Errorf("checking the move to %s=%d: listing the Deployments at %s: %v", side, weight, rt.ResourceVersion, err)
		}
		return
	}
	m := move{side: side, weight: weight}
	var d *appsv1.Deployment
	for i := range deps.Items {
		if deps.Items[i].Name == side {
			d = &deps.Items[i]
		}
	}
	if d == nil {
		m.problems = append(m.problems, "no Deployment "+side)
	} else {
		m.image = appImage(d.Spec.Template.Spec)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			w.t.Errorf("Deployment %s: spec.selector: %v", side, err)
			return
		}
		at.LabelSelector = sel.String()
		pods, err := w.env.Kube.CoreV1().Pods(w.ns).List(w.ctx, at)
		if err != nil {
			if w.ctx.Err() == nil {
				w.t.Errorf("checking the move to %s=%d: listing the pods at %s: %v", side, weight, rt.ResourceVersion, err)
			}
			return
		}
		m.ready, m.problems = judge(pods.Items, sel, m.image)
		if d.Status.AvailableReplicas == 0 {
			m.problems = append(m.problems, fmt.Sprintf("its status reports no available replica (status %+v, generation %d)", d.Status, d.Generation))
		}
	}
	w.mu.Lock()
	w.moves = append(w.moves, m)
	w.mu.Unlock()
	if len(m.problems) > 0 {
		w.t.Errorf("the route moved traffic to %s=%d (generation %d) while: %s", side, weight, rt.Generation, strings.Join(m.problems, "; "))
	}
}

// judge returns how many of pods are ready, not being deleted and run
// image, and what is wrong with a side that runs pods and gets traffic.
func judge(pods []corev1.Pod, sel labels.Selector, image string) (int, []string) {
	ready := 0
	var problems []string
	for i := range pods {
		p := &pods[i]
		if !sel.Matches(labels.Set(p.Labels)) || !podReady(p) || p.DeletionTimestamp != nil {
			continue
		}
		if got := appImage(p.Spec); got != image {
			problems = append(problems, fmt.Sprintf("pod %s is ready running %s, the template %s", p.Name, got, image))
			continue
		}
		ready++
	}
	if ready == 0 {
		problems = append(problems, "no pod running "+image+" is ready")
	}
	return ready, problems
}

// movesSeen returns the moves of traffic checked so far.
func (w *world) movesSeen() []move {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]move(nil), w.moves...)
}

// waitSide waits until Deployment name has rolled out its template on n
// pods, all available; n < 0: on spec.replicas pods.
func (w *world) waitSide(name string, n int32) {
	w.t.Helper()
	var d *appsv1.Deployment
	for deadline := time.Now().Add(90 * time.Second); ; {
		var err error
		d, err = w.env.Kube.AppsV1().Deployments(w.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		s := d.Status
		if n < 0 && d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		if s.ObservedGeneration == d.Generation && s.Replicas == n && s.UpdatedReplicas == n && s.AvailableReplicas == n {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("Deployment %s: waited for %d pods of its template available: status %+v", name, n, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
