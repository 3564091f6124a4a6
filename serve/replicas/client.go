package replicas

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

// ForClient manages the workload that obj names (its namespace and name;
// nothing else of obj is read) through a controller-runtime client, such
// as a manager's:
//
//   - a *appsv1.Deployment or a *appsv1.StatefulSet: like ForDeployment and
//     ForStatefulSet, and the Setter can build a Deployer;
//   - any other object, typically an *unstructured.Unstructured with its
//     apiVersion and kind set (or a typed object of a kind in the client's
//     scheme): like ForScalable, read as unstructured and scaled through
//     its scale subresource.
//
// full is the replica count at 100 percent, as for ForDeployment. The
// Setter and its Deployers behave as those of the clientset constructors.
// Notify needs a client.WithWatch (client.NewWithWatch); with any other
// client it returns an error, and the caller polls (rollout.Runner.Run
// does). Its watch goes to the API server, not through a cache.
//
// With a cache-backed client, reads may lag writes: the Setter keeps what
// each of its writes returned and reports that until the cache catches up,
// so it never writes again what is already in place; a write on a stale
// read conflicts and is retried from a fresh read, and Deploy confirms a
// refusal against the API server before it reports the Permanent
// *DeployRefusedError. RBAC: a cache needs get, list and watch on the kind
// (resourceNames cannot narrow it), and the Setter update on the workload
// (and on <resource>/scale for a scaled kind); without a cache, get,
// update and watch on the workload's name suffice. Unstructured objects
// are read from the API server unless client.CacheOptions.Unstructured is
// set. See docs/design/replicas.md for cache-backed clients.
func ForClient(c client.Client, obj client.Object, full int32) (*Setter, error) {
	if c == nil || obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil, fmt.Errorf("%w: ForClient: the client and the object are required", ErrInvalid)
	}
	ns, name := obj.GetNamespace(), obj.GetName()
	if name == "" {
		return nil, fmt.Errorf("%w: ForClient: the object has no name", ErrInvalid)
	}
	switch obj.(type) {
	case *appsv1.Deployment:
		return crTyped(c, "Deployment", ns, name, full,
			func() *appsv1.Deployment { return &appsv1.Deployment{} },
			func() client.ObjectList { return &appsv1.DeploymentList{} },
			deploymentWorkload,
			func(d *appsv1.Deployment, n int32) { d.Spec.Replicas = &n }), nil
	case *appsv1.StatefulSet:
		return crTyped(c, "StatefulSet", ns, name, full,
			func() *appsv1.StatefulSet { return &appsv1.StatefulSet{} },
			func() client.ObjectList { return &appsv1.StatefulSetList{} },
			statefulSetWorkload,
			func(ss *appsv1.StatefulSet, n int32) { ss.Spec.Replicas = &n }), nil
	}
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil || gvk.Kind == "" || gvk.Version == "" {
		return nil, fmt.Errorf("%w: ForClient: the kind of %s/%s: %v (set the apiVersion and kind of an unstructured object)", ErrInvalid, ns, name, err)
	}
	return crScalable(c, gvk, ns, name, full), nil
}

// crWatch starts a watch of the collection newList lists in ns, for Notify.
func crWatch(c client.Client, ns string, newList func() client.ObjectList) watchloop.Func {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		wc, ok := c.(client.WithWatch)
		if !ok {
			return nil, errNoWatch
		}
		// The field selector travels in Raw, as watchloop built it.
		return wc.Watch(ctx, newList(), &client.ListOptions{Namespace: ns, Raw: &opts})
	}
}

// errNoWatch is Notify's error for a controller-runtime client that cannot
// watch.
var errNoWatch = fmt.Errorf("%w: the controller-runtime client is not a client.WithWatch (build it with client.NewWithWatch)", watchloop.ErrUnsupported)

// crTyped is ForClient for a Deployment or a StatefulSet.
func crTyped[T client.Object](c client.Client, kind, ns, name string, full int32,
	newObj func() T, newList func() client.ObjectList, read func(T) *liveWorkload, setReplicas func(T, int32)) *Setter {
	s := &Setter{ref: kind + " " + ns + "/" + name, name: name, full: full, templated: true, ns: ns, kind: kind, group: "apps"}
	key := types.NamespacedName{Namespace: ns, Name: name}
	s.watch = crWatch(c, ns, newList)
	s.from = func(obj runtime.Object) *liveWorkload {
		if o, ok := obj.(T); ok {
			return read(o)
		}
		return nil
	}
	s.get = func(ctx context.Context) (*liveWorkload, error) {
		o, err := readThrough(s, func() (T, error) {
			o := newObj()
			return o, c.Get(ctx, key, o)
		})
		if err != nil {
			return nil, err
		}
		if k, ok := s.written.resolve(o).(T); ok {
			o = k
		}
		w := read(o)
		w.setReplica = func(n int32) { setReplicas(o, n) }
		w.update = func(ctx context.Context) error {
			base := o.GetResourceVersion()
			end := s.own.Begin()
			err := c.Update(ctx, o)
			end(resourceVersion(o, err))
			if err == nil {
				s.written.wrote(o, base)
			}
			s.wrote(o, err, base)
			return err
		}
		w.confirm = func(ctx context.Context) error {
			// The workload as read, written back unchanged: the API
			// server writes nothing, or answers a stale read with a
			// conflict.
			err := c.Update(ctx, o.DeepCopyObject().(T))
			s.wrote(nil, err)
			return err
		}
		return w, nil
	}
	return s
}

// crScalable is ForClient for any kind with a scale subresource.
func crScalable(c client.Client, gvk schema.GroupVersionKind, ns, name string, full int32) *Setter {
	s := &Setter{ref: gvk.Kind + " " + ns + "/" + name, name: name, full: full, ns: ns, kind: gvk.Kind, group: gvk.Group}
	key := types.NamespacedName{Namespace: ns, Name: name}
	newObj := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u
	}
	s.watch = crWatch(c, ns, func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		return l
	})
	s.from = func(obj runtime.Object) *liveWorkload {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return scalableWorkload(u)
		}
		return nil
	}
	s.get = func(ctx context.Context) (*liveWorkload, error) {
		u, err := readThrough(s, func() (*unstructured.Unstructured, error) {
			u := newObj()
			return u, c.Get(ctx, key, u)
		})
		if err != nil {
			return nil, err
		}
		if k, ok := s.written.resolve(u).(*unstructured.Unstructured); ok {
			u = k
		}
		w := scalableWorkload(u)
		meta := w.meta
		var replicas int32
		w.setReplica = func(n int32) { replicas = n }
		w.update = func(ctx context.Context) error {
			// Replicas through the scale subresource, with the version
			// read as its precondition, then the annotation on the
			// object as read, at the version the scale write returned:
			// no read in between, which a cache would serve stale. A
			// controller that answers the scale with a write of its own
			// first (a Deployment's: the scale is a new generation, whose
			// observation it writes at once) makes the annotation write
			// conflict; it is retried from a new read, which fails the
			// same way until the cache has seen that write (then
			// rollout.ErrConflict, and the Runner tries the hop again).
			base := u.GetResourceVersion()
			sc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "autoscaling/v1", "kind": "Scale",
				"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": base},
				"spec":     map[string]any{"replicas": int64(replicas)},
			}}
			end := s.own.Begin()
			err := c.SubResource("scale").Update(ctx, u.DeepCopy(), client.WithSubResourceBody(sc))
			end(resourceVersion(sc, err))
			if err != nil {
				s.wrote(nil, err)
				return err
			}
			next := u.DeepCopy()
			if err := unstructured.SetNestedField(next.Object, int64(replicas), "spec", "replicas"); err != nil {
				return err
			}
			scaled := sc.GetResourceVersion()
			next.SetResourceVersion(scaled)
			next.SetManagedFields(nil) // the server keeps its own
			next.SetAnnotations(meta.Annotations)
			end = s.own.Begin()
			err = c.Update(ctx, next)
			end(resourceVersion(next, err))
			if err == nil {
				s.written.wrote(next, base, scaled)
			}
			s.wrote(next, err, base, scaled)
			return err
		}
		return w, nil
	}
	return s
}

// written keeps what a Setter's own writes returned, for clients that read
// from a cache: a read that returns a version one of those writes replaced
// is answered with the latest written version instead. A read from the
// API server never returns a replaced version, so it is never changed.
// Safe for concurrent use; the zero value is ready.
type written struct {
	mu sync.Mutex
	// replaced holds the resourceVersions that the Setter's writes
	// replaced since the cache last showed a version of its own.
	replaced map[string]struct{}
	latest   client.Object
}

// maxReplaced bounds written.replaced: a cache that falls further behind
// is read as it is.
const maxReplaced = 64

// wrote records that the Setter's writes replaced the versions bases
// with obj.
func (k *written) wrote(obj client.Object, bases ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.replaced == nil || len(k.replaced)+len(bases) > maxReplaced {
		k.replaced = map[string]struct{}{}
	}
	for _, b := range bases {
		if b != "" {
			k.replaced[b] = struct{}{}
		}
	}
	k.latest = obj.DeepCopyObject().(client.Object)
}

// resolve returns the latest written version when obj is one that a write
// replaced, else obj; a read that shows any other version (the written
// one, or one written after it) ends the substitution.
func (k *written) resolve(obj client.Object) client.Object {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.latest == nil {
		return obj
	}
	if _, stale := k.replaced[obj.GetResourceVersion()]; stale {
		return k.latest.DeepCopyObject().(client.Object)
	}
	k.replaced, k.latest = nil, nil
	return obj
}
