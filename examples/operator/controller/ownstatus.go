package controller

import (
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
)

// Status changes. The status of a Release holds its rollout's state, and
// the operator is not its only writer: a person or a tool may wipe it
// (kubectl edit --subresource=status, a restore from a backup that had
// none, a GitOps tool re-applying the object with its status), and the
// next reconcile must adopt the world again at once, not when something
// else happens to change. So the watch of Releases passes a change of the
// status that the operator did not write, as well as changes of the spec
// (metadata.generation) and deletions. Its own writes pass nothing, or
// each would reconcile again: the operator remembers, per Release, the
// status it last wrote (ownStatus) and an update whose status is that one
// is its own. A change of the metadata only (labels, annotations, the
// finalizer) passes nothing, as before.

// ownStatus is the status the operator last wrote for each Release, in
// the form the API server stores (its JSON). Safe for concurrent use; the
// zero value remembers nothing.
type ownStatus struct {
	mu   sync.Mutex
	last map[types.NamespacedName]ownWrite
}

// ownWrite is one status write: the Release's UID (a Release re-created
// under the same name is another object), the status written and, once
// the write returned, the resourceVersion it made.
type ownWrite struct {
	uid             types.UID
	status          []byte
	resourceVersion string
}

// wrote records that the operator is about to write status for rel. It is
// called before the write, so that the watch event of the write, which
// may arrive before the write returns, is recognised. A write that fails
// leaves the record: a status that no one stored raises no event.
func (o *ownStatus) wrote(rel *v1alpha1.Release, status *v1alpha1.ReleaseStatus) {
	raw, err := json.Marshal(status)
	if err != nil {
		raw = nil // never its own: the next event reconciles once more
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[types.NamespacedName]ownWrite{}
	}
	o.last[client.ObjectKeyFromObject(rel)] = ownWrite{uid: rel.UID, status: raw}
}

// stored records the resourceVersion of the status write of rel that just
// returned: the event of that version is the operator's own, whatever the
// API server made of the status (a field its schema prunes, say).
func (o *ownStatus) stored(rel *v1alpha1.Release) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := client.ObjectKeyFromObject(rel)
	if w, ok := o.last[key]; ok && w.uid == rel.UID {
		w.resourceVersion = rel.ResourceVersion
		o.last[key] = w
	}
}

// own reports whether rel is the object of the operator's last status
// write, or carries the status that write wrote.
func (o *ownStatus) own(rel *v1alpha1.Release) bool {
	raw, err := json.Marshal(&rel.Status)
	if err != nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.last[client.ObjectKeyFromObject(rel)]
	if !ok || w.uid != rel.UID {
		return false
	}
	return w.resourceVersion != "" && w.resourceVersion == rel.ResourceVersion ||
		w.status != nil && string(w.status) == string(raw)
}

// forget drops what is remembered of a Release that is gone.
func (o *ownStatus) forget(key types.NamespacedName) {
	o.mu.Lock()
	delete(o.last, key)
	o.mu.Unlock()
}

// statusByOthers passes an update of a Release whose status changed to
// one the operator did not write (see ownStatus).
func (o *ownStatus) statusByOthers() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		prev, ok1 := e.ObjectOld.(*v1alpha1.Release)
		next, ok2 := e.ObjectNew.(*v1alpha1.Release)
		if !ok1 || !ok2 {
			return false
		}
		same, err := sameStatus(&prev.Status, &next.Status)
		if err != nil || same {
			return false
		}
		return !o.own(next)
	}}
}

// sameStatus reports whether two statuses are stored alike.
func sameStatus(a, b *v1alpha1.ReleaseStatus) (bool, error) {
	ra, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	rb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return string(ra) == string(rb), nil
}
