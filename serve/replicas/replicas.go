// Package replicas is a rollout.CapacitySetter for Kubernetes workloads: a
// side's capacity is its replica count as a share of the full count, set
// with ceil(full * capacity / 100) replicas, and its ready capacity is the
// share of the full count that the workload's status reports available.
// Its [Deployer] puts each revision on its side by changing the pod template.
//
//	a := replicas.ForDeployment(cs, replicas.Workload{Namespace: ns, Name: "web-a", FullReplicas: 10})
//	b := replicas.ForDeployment(cs, replicas.Workload{Namespace: ns, Name: "web-b", FullReplicas: 10})
//	image := replicas.Image("app", func(rev string) string { return "registry.example/app:" + rev })
//	da, err := a.Deployer(image) // and db from b
//	r := &rollout.Runner{Strategy: strat, Router: router, A: a, B: b, RevisionA: da, RevisionB: db}
//
// [ForDeployment], [ForStatefulSet], [ForScalable] (any kind with a scale
// subresource) or [ForClient] (a controller-runtime client) build a
// [Setter]; [Setter.Deployer] with a [TemplateFunc] ([Image], [Identity])
// builds its Deployer; [Autoscale] makes the Setters follow
// HorizontalPodAutoscalers; with no traffic router,
// strategy.CapacityReplicas moves two Setters like a rolling update.
//
// Rules: a revision is deployed only at 0 replicas and recognised from the
// live pod template, never from an annotation, so a TemplateFunc must set,
// not add; upshift owns spec.replicas, its annotations and the template
// fields the TemplateFunc sets (tell a GitOps tool to ignore them:
// [Setter]); Setters and Deployers claim their workload for one rollout
// ([ClaimAnnotation]) and watch it by name, so RBAC needs get, update and
// watch on that name only; they share one watch, and read from it while
// subscribed ([Setter.Notify]). See docs/design/replicas.md.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/upshift-dev/upshift/internal/conflict"
	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// CapacityAnnotation holds the capacity last asked for, in percent, or
// "steady".
const CapacityAnnotation = "upshift.dev/capacity"

// ErrInvalid is matched by configuration errors.
var ErrInvalid = errors.New("replicas: invalid")

// liveWorkload is the part of a liveWorkload the setter reads and writes.
type liveWorkload struct {
	meta     *metav1.ObjectMeta
	replicas int32 // spec
	status   status
	// template is the pod template, changed in place before update; nil
	// for ForScalable.
	template *corev1.PodTemplateSpec
	// paused is a Deployment's spec.paused.
	paused     bool
	setReplica func(int32)
	update     func(ctx context.Context) error
	// confirm, when set, checks with the API server that the workload
	// was read at its current version (a conflict if not), for clients
	// that read from a cache.
	confirm func(ctx context.Context) error
}

type status struct {
	observedGeneration       int64
	replicas, updated, ready int32
	available                int32
	terminating              int32 // pods shutting down, when reported
	revisionsMatch           bool
	failing                  bool
	failMessage              string
}

// Setter is a rollout.CapacitySetter for one workload. Build it with
// ForDeployment, ForStatefulSet or ForScalable (client-go clients), or
// ForClient (a controller-runtime client). Safe for concurrent use.
//
// The capacity asked for is kept in CapacityAnnotation on the workload, so
// the Setter reports exactly what it was asked even though replica counts
// round, and a restarted controller reads it back.
//
// Claims: a Setter and its Deployers are rollout.Claimers. Claim records
// the rollout's owner in ClaimAnnotation with the workload's
// resourceVersion, writing nothing when the owner already holds it; a
// workload another owner claims is refused with a *rollout.ClaimedError
// naming that owner, and so is every SetCapacity and Deploy for another
// owner (rollout.OwnerFrom), before anything is written. Release removes
// the claim.
//
// A GitOps tool should ignore what upshift writes on the workload:
// spec.replicas; the annotations upshift.dev/capacity (CapacityAnnotation),
// upshift.dev/full-replicas and upshift.dev/claim (ClaimAnnotation) on its
// metadata; upshift.dev/revision (RevisionAnnotation, a hint) on its
// metadata and pod template; and the template fields the TemplateFunc sets,
// which only Deploy writes (at 0 replicas, or with FixedCapacity while the
// side carries no traffic). A tool that also writes those template fields
// fights the rollout: the Deployer sees another revision, and a rollout
// that observes one on the canary side walks it back. See
// docs/design/replicas.md for the list in full.
type Setter struct {
	ref  string
	name string // the workload's
	// ns and kind are the workload's namespace and kind ("" when only
	// its resource is known), to find its HorizontalPodAutoscaler.
	ns, kind, group string
	// resource is the workload's resource when its kind is unknown
	// (ForScalable), to name it in a ClaimedError.
	resource string
	// auto follows the workload's HorizontalPodAutoscaler (hpa.go); nil
	// until Autoscale links the Setter.
	auto *autoSide
	get  func(ctx context.Context) (*liveWorkload, error)
	// from reads a workload from an object of the watch (nil if it is not
	// one), without the write functions.
	from func(obj runtime.Object) *liveWorkload
	// templated: the workload has a pod template (a Deployment or a
	// StatefulSet), so a Deployer can be built.
	templated bool
	// watch starts a watch of the workload (a name field selector in
	// its namespace), for Notify.
	watch watchloop.Func
	// shared is the one watch of the workload, shared by the Setter's
	// and its Deployers' subscriptions; its Cache serves their reads
	// while it runs (readThrough).
	shared             watchloop.Shared
	reads, cachedReads atomic.Int64
	conflicts          atomic.Int64
	watches            watchloop.Stats
	watchOpts          watchloop.Options // tests shorten them
	// own remembers the resourceVersions of the Setter's (and its
	// Deployers') writes, whose watch events wake nobody.
	own watchloop.Own
	// written keeps what the Setter wrote, for a client that reads from
	// a cache (ForClient).
	written written
	mu      sync.Mutex
	full    int32
	// MaxConflictRetries bounds re-reads after a write conflict; 0 means
	// 5. Conflicts that outlast them return an error matching
	// rollout.ErrConflict.
	MaxConflictRetries int
}

var (
	_ rollout.CapacitySetter = (*Setter)(nil)
	_ rollout.Notifier       = (*Setter)(nil)
)

// Workload names the object a Setter manages and its size.
type Workload struct {
	// Namespace and Name name the object.
	Namespace, Name string
	// FullReplicas is the replica count at 100 percent; 0 reads it once
	// from the object's spec.replicas at the Setter's first call.
	FullReplicas int32
}

// ForDeployment manages the Deployment w names:
//
//	a := replicas.ForDeployment(cs, replicas.Workload{Namespace: "shop", Name: "web-a", FullReplicas: 10})
func ForDeployment(cs kubernetes.Interface, w Workload) *Setter {
	namespace, name, full := w.Namespace, w.Name, w.FullReplicas
	s := &Setter{ref: "Deployment " + namespace + "/" + name, name: name, full: full, templated: true,
		ns: namespace, kind: "Deployment", group: "apps"}
	s.watch = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return cs.AppsV1().Deployments(namespace).Watch(ctx, opts)
	}
	s.from = func(obj runtime.Object) *liveWorkload {
		if d, ok := obj.(*appsv1.Deployment); ok {
			return deploymentWorkload(d)
		}
		return nil
	}
	s.get = func(ctx context.Context) (*liveWorkload, error) {
		d, err := readThrough(s, func() (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		})
		if err != nil {
			return nil, err
		}
		w := deploymentWorkload(d)
		w.setReplica = func(n int32) { d.Spec.Replicas = &n }
		w.update = func(ctx context.Context) error {
			base := d.ResourceVersion
			end := s.own.Begin()
			out, err := cs.AppsV1().Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{})
			end(resourceVersion(out, err))
			s.wrote(out, err, base)
			return err
		}
		return w, nil
	}
	return s
}

// deploymentWorkload reads a Deployment (without the write functions).
func deploymentWorkload(d *appsv1.Deployment) *liveWorkload {
	w := &liveWorkload{meta: &d.ObjectMeta, replicas: replicasOf(d.Spec.Replicas), template: &d.Spec.Template, paused: d.Spec.Paused}
	w.status = status{
		observedGeneration: d.Status.ObservedGeneration, replicas: d.Status.Replicas,
		updated: d.Status.UpdatedReplicas, ready: d.Status.ReadyReplicas, available: d.Status.AvailableReplicas,
		revisionsMatch: true,
	}
	if d.Status.TerminatingReplicas != nil {
		w.status.terminating = *d.Status.TerminatingReplicas
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse ||
			c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			w.status.failing, w.status.failMessage = true, c.Reason+": "+c.Message
		}
	}
	return w
}

// statefulSetWorkload reads a StatefulSet (without the write functions).
func statefulSetWorkload(ss *appsv1.StatefulSet) *liveWorkload {
	w := &liveWorkload{meta: &ss.ObjectMeta, replicas: replicasOf(ss.Spec.Replicas), template: &ss.Spec.Template}
	w.status = status{
		observedGeneration: ss.Status.ObservedGeneration, replicas: ss.Status.Replicas,
		updated: ss.Status.UpdatedReplicas, ready: ss.Status.ReadyReplicas, available: ss.Status.AvailableReplicas,
		revisionsMatch: ss.Status.UpdateRevision == "" || ss.Status.CurrentRevision == ss.Status.UpdateRevision,
	}
	return w
}

// scalableWorkload reads a workload of any kind with a scale subresource
// (without the write functions).
func scalableWorkload(u *unstructured.Unstructured) *liveWorkload {
	meta := &metav1.ObjectMeta{Generation: u.GetGeneration(), Annotations: u.GetAnnotations(), ResourceVersion: u.GetResourceVersion()}
	spec, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	st := func(f string) int32 { v, _, _ := unstructured.NestedInt64(u.Object, "status", f); return int32(v) }
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	w := &liveWorkload{meta: meta, replicas: int32(spec)}
	w.status = status{observedGeneration: og, replicas: st("replicas"), updated: st("updatedReplicas"),
		ready: st("readyReplicas"), available: st("availableReplicas"), revisionsMatch: true}
	if _, found, _ := unstructured.NestedInt64(u.Object, "status", "availableReplicas"); !found {
		w.status.available = w.status.ready
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "status", "updatedReplicas"); !found {
		w.status.updated = w.status.replicas
	}
	return w
}

// ForStatefulSet manages the StatefulSet w names, like ForDeployment.
func ForStatefulSet(cs kubernetes.Interface, w Workload) *Setter {
	namespace, name, full := w.Namespace, w.Name, w.FullReplicas
	s := &Setter{ref: "StatefulSet " + namespace + "/" + name, name: name, full: full, templated: true,
		ns: namespace, kind: "StatefulSet", group: "apps"}
	s.watch = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return cs.AppsV1().StatefulSets(namespace).Watch(ctx, opts)
	}
	s.from = func(obj runtime.Object) *liveWorkload {
		if ss, ok := obj.(*appsv1.StatefulSet); ok {
			return statefulSetWorkload(ss)
		}
		return nil
	}
	s.get = func(ctx context.Context) (*liveWorkload, error) {
		ss, err := readThrough(s, func() (*appsv1.StatefulSet, error) {
			return cs.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		})
		if err != nil {
			return nil, err
		}
		w := statefulSetWorkload(ss)
		w.setReplica = func(n int32) { ss.Spec.Replicas = &n }
		w.update = func(ctx context.Context) error {
			base := ss.ResourceVersion
			end := s.own.Begin()
			out, err := cs.AppsV1().StatefulSets(namespace).Update(ctx, ss, metav1.UpdateOptions{})
			end(resourceVersion(out, err))
			s.wrote(out, err, base)
			return err
		}
		return w, nil
	}
	return s
}

// ForScalable manages any workload with a scale subresource, through the
// dynamic client: replicas at spec.replicas, readiness from
// status.observedGeneration, status.readyReplicas and
// status.availableReplicas (the ready count when available is absent).
func ForScalable(dyn dynamic.Interface, gvr schema.GroupVersionResource, w Workload) *Setter {
	namespace, name, full := w.Namespace, w.Name, w.FullReplicas
	s := &Setter{ref: gvr.Resource + " " + namespace + "/" + name, name: name, full: full, ns: namespace, group: gvr.Group, resource: gvr.Resource}
	res := dyn.Resource(gvr).Namespace(namespace)
	s.watch = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return res.Watch(ctx, opts)
	}
	s.from = func(obj runtime.Object) *liveWorkload {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return scalableWorkload(u)
		}
		return nil
	}
	s.get = func(ctx context.Context) (*liveWorkload, error) {
		u, err := readThrough(s, func() (*unstructured.Unstructured, error) {
			return res.Get(ctx, name, metav1.GetOptions{})
		})
		if err != nil {
			return nil, err
		}
		w := scalableWorkload(u)
		meta := w.meta
		var replicas int32
		w.setReplica = func(n int32) { replicas = n }
		w.update = func(ctx context.Context) error {
			// Replicas through the scale subresource, then the annotation.
			sc, err := res.Get(ctx, name, metav1.GetOptions{}, "scale")
			if err != nil {
				return err
			}
			if err := unstructured.SetNestedField(sc.Object, int64(replicas), "spec", "replicas"); err != nil {
				return err
			}
			sc.SetResourceVersion(meta.ResourceVersion)
			end := s.own.Begin()
			scaled, err := res.Update(ctx, sc, metav1.UpdateOptions{}, "scale")
			end(resourceVersion(scaled, err))
			if err != nil {
				s.wrote(nil, err)
				return err
			}
			fresh, err := res.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			fresh.SetAnnotations(meta.Annotations)
			end = s.own.Begin()
			out, err := res.Update(ctx, fresh, metav1.UpdateOptions{})
			end(resourceVersion(out, err))
			s.wrote(out, err, meta.ResourceVersion, scaled.GetResourceVersion(), fresh.GetResourceVersion())
			return err
		}
		return w, nil
	}
	return s
}

// readThrough reads the workload from what the Setter's watch delivered
// (watchloop.Cache) while a Notify subscription keeps it running, open and
// filled, and otherwise with get, whose answer the Cache keeps.
func readThrough[T runtime.Object](s *Setter, get func() (T, error)) (T, error) {
	if obj, ok := s.shared.Cache.Get(); ok {
		if obj == nil {
			var zero T
			s.cachedReads.Add(1)
			return zero, apierrors.NewNotFound(schema.GroupResource{Group: s.group, Resource: strings.ToLower(s.kind) + "s"}, s.name)
		}
		if t, ok := obj.(T); ok {
			s.cachedReads.Add(1)
			return t, nil
		}
	}
	s.reads.Add(1)
	t, err := get()
	if err == nil {
		s.shared.Cache.Saw(t)
	}
	return t, err
}

// wrote hands the answer of a write of the workload to the Cache (with
// bases, the versions it replaced), or, when the write lost a race, makes
// the next read, the retry's, go to the API server.
func (s *Setter) wrote(out runtime.Object, err error, bases ...string) {
	switch {
	case apierrors.IsConflict(err):
		s.conflicts.Add(1)
		s.shared.Cache.Stale()
	case err == nil && out != nil && !reflect.ValueOf(out).IsNil():
		s.shared.Cache.Saw(out, bases...)
	}
}

// Counts are the API requests a Setter and its Deployers made for the
// workload. The zero value counts nothing.
type Counts struct {
	// Reads are the GETs of the workload sent to the API server (the
	// reads of a write through the scale subresource excluded).
	Reads int
	// CachedReads are the reads answered from what the watch delivered.
	CachedReads int
	// Conflicts are the writes refused with a conflict (each retried
	// from a GET).
	Conflicts int
	// Watches are the watch requests: one for the Setter and all its
	// Deployers, and one more each time it is re-established or started
	// again after every subscription ended.
	Watches int
}

// Counts returns the requests made so far.
func (s *Setter) Counts() Counts {
	return Counts{Reads: int(s.reads.Load()), CachedReads: int(s.cachedReads.Load()), Conflicts: int(s.conflicts.Load()),
		Watches: int(s.watches.Watches.Load())}
}

// resourceVersion is the resourceVersion a write returned, "" if it failed.
func resourceVersion(obj metav1.Object, err error) string {
	if err != nil || obj == nil || reflect.ValueOf(obj).IsNil() {
		return ""
	}
	return obj.GetResourceVersion()
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// Replicas returns the replica count for a capacity: ceil(full * c / 100).
func Replicas(full, capacity int32) int32 {
	if capacity <= 0 || full <= 0 {
		return 0
	}
	return (full*capacity + 99) / 100
}

func (s *Setter) wrap(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("replicas: %s: %w", s.ref, rollout.ErrNotFound)
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		return rollout.Permanent(fmt.Errorf("replicas: %s: %w", s.ref, err))
	}
	return fmt.Errorf("replicas: %s: %w", s.ref, err)
}

// fullCount returns the full replica count, reading it from w the first
// time when it was not given.
func (s *Setter) fullCount(w *liveWorkload) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full == 0 {
		if v, ok := w.meta.Annotations[fullAnnotation]; ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				s.full = int32(n)
			}
		}
	}
	if s.full == 0 {
		if w.replicas <= 0 {
			return 0, rollout.Permanent(fmt.Errorf("%w: %s has 0 replicas: give the full count", ErrInvalid, s.ref))
		}
		s.full = w.replicas
	}
	return s.full, nil
}

// fullAnnotation records the full count the setter works with, so that a
// restarted controller that reads it "once at start" reads the same.
const fullAnnotation = "upshift.dev/full-replicas"

// SetCapacity sets the replicas for r and records r in the annotation. It
// writes nothing when both are already in place. A request that fails
// rollout.CapacityRequest.Validate is a Permanent error matching both
// ErrInvalid and rollout.ErrInvalid.
func (s *Setter) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	if err := r.Validate(); err != nil {
		return rollout.Permanent(fmt.Errorf("%w: %s: %w", ErrInvalid, s.ref, err))
	}
	if s.auto != nil {
		return s.auto.setCapacity(ctx, r)
	}
	return s.update(ctx, func(w *liveWorkload) error {
		full, err := s.fullCount(w)
		if err != nil {
			return err
		}
		want := Replicas(full, r.Percent)
		mark := strconv.Itoa(int(r.Percent))
		if r.Steady {
			mark = "steady"
		}
		fullMark := strconv.Itoa(int(full))
		if w.replicas == want && w.meta.Annotations[CapacityAnnotation] == mark && w.meta.Annotations[fullAnnotation] == fullMark {
			return nil
		}
		if w.meta.Annotations == nil {
			w.meta.Annotations = map[string]string{}
		}
		w.meta.Annotations[CapacityAnnotation] = mark
		w.meta.Annotations[fullAnnotation] = fullMark
		w.setReplica(want)
		return s.wrap(w.update(ctx)) // a wrapped conflict is still one
	})
}

// update reads the workload and calls fn to change and write it, again from
// a fresh read after a write conflict, at most MaxConflictRetries (0: 5)
// times (see conflict.Retry).
//
// A workload that another owner claims than ctx's (rollout.OwnerFrom) is
// refused with a *rollout.ClaimedError before fn sees it (claim.go).
func (s *Setter) update(ctx context.Context, fn func(w *liveWorkload) error) error {
	return s.write(ctx, func(w *liveWorkload) error {
		if err := s.checkWriter(ctx, w); err != nil {
			return err
		}
		return fn(w)
	})
}

// write is update without the claim check, for the claim itself.
func (s *Setter) write(ctx context.Context, fn func(w *liveWorkload) error) error {
	retries := s.MaxConflictRetries
	if retries == 0 {
		retries = 5
	}
	return conflict.Retry(ctx, retries, func() error {
		w, err := s.get(ctx)
		if err != nil {
			return s.wrap(err)
		}
		return fn(w)
	})
}

// Capacity reports the capacity asked for (from the annotation, or the
// replica share when the setter never wrote it), the ready share of the full
// count, and whether the workload has settled: its controller has seen the
// current generation and every wanted replica is updated and available.
// The API server counts a change of a Deployment's annotations as a new
// generation, so after any write of one (the capacity mark, a claim, a
// revision record) it is settled again only once its controller has
// observed that generation. Pods still terminating do not keep it from
// settling, as they do not count toward a Deployment's own rolling update
// (kubectl's revision check differs: see Deployer.Revision).
func (s *Setter) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	w, err := rollout.ReadOnce(ctx, s, s.get) // shared with the Deployer's read in one reconcile
	if err != nil {
		return rollout.CapacityStatus{}, s.wrap(err)
	}
	if s.auto != nil {
		return s.auto.capacityOf(ctx, w)
	}
	return s.capacityOf(w)
}

// capacityOf is what Capacity reports of w.
func (s *Setter) capacityOf(w *liveWorkload) (rollout.CapacityStatus, error) {
	full, err := s.fullCount(w)
	if err != nil {
		return rollout.CapacityStatus{}, err
	}
	st := rollout.CapacityStatus{Capacity: min(100, w.replicas*100/full)}
	switch mark := w.meta.Annotations[CapacityAnnotation]; mark {
	case "steady":
		st.Capacity, st.Steady = 100, true
	case "":
	default:
		if p, err := strconv.Atoi(mark); err == nil && Replicas(full, int32(p)) == w.replicas {
			st.Capacity = int32(p)
		}
	}
	current := w.status.observedGeneration >= w.meta.Generation
	available := w.status.available
	if !current {
		available = min(available, w.status.updated)
	}
	st.Ready = min(100, available*100/full)
	st.Settled = current && w.status.revisionsMatch && w.status.replicas == w.replicas &&
		w.status.updated == w.replicas && w.status.available == w.replicas
	if w.status.failing {
		st.Health, st.HealthMessage = strategy.HealthUnhealthy, w.status.failMessage
	}
	return st, nil
}
