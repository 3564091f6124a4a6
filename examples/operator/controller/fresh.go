package controller

import (
	"context"
	"encoding/json"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// Reads and the state between writes. A reconcile reads its Release from
// the manager's cache, which may lag the API server. The one thing it must
// never do is act on a status older than the one it last wrote: that
// status holds the rollout's state, and an older one asks again for hops
// the world has moved past. So the operator remembers, per Release, the
// resourceVersions its own writes replaced (fresh): a cached Release that
// shows one of them is behind, and is read from the API server instead.
// Any other version is the operator's last write or someone's later one,
// but after a read from the API server: until the cache shows the version
// read, it may show versions in between, which are read live too. A
// write that conflicts means the cache showed a version someone else had
// replaced: the next read goes to the API server as well.
//
// The newest state lives in memory between writes (pending): a decision
// that only records a capacity hop is not written (see deferrable), and
// the next reconcile starts from the state in memory, as long as the
// stored status is still the one that state was derived from. A restart,
// or a status that someone else wrote, starts from what is stored: a
// state older than the world, from which the engine decides safely (it
// observes the sides again, never scales one below its traffic nor past
// the surge budget) and at worst asks again for a hop already made.

// fresh tracks what the operator's writes of each Release replaced.
// Safe for concurrent use; the zero value is ready.
type fresh struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*freshness
}

// freshness is what the operator knows of one Release's versions.
// current is the newest version it has read from the API server or
// written; replaced holds versions known to be older than current. After
// a read from the API server (catchUp) the cache may still show versions
// between the one it showed and current, which nothing names: until the
// cache shows current, any version but current is read from the API
// server again.
type freshness struct {
	uid      types.UID
	current  string
	replaced map[string]bool
	catchUp  bool
	conflict bool // the last write conflicted: the next read goes to the API server
}

// maxReplaced bounds what is remembered of one Release: past it, the
// Release is read from the API server until the cache catches up.
const maxReplaced = 64

// wrote records that a write of rel replaced version base (the version
// the write was based on); rel carries the version the write returned.
func (f *fresh) wrote(rel *v1alpha1.Release, base string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.entry(rel)
	x.older(base)
	x.older(x.current)
	x.now(rel.ResourceVersion)
}

// conflicted records that a write of rel, based on version base,
// conflicted: base is older than what the API server holds.
func (f *fresh) conflicted(rel *v1alpha1.Release, base string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.entry(rel)
	x.older(base)
	x.conflict = true
}

// behind reports whether the cached rel may be older than what the
// operator last wrote or read of it.
func (f *fresh) behind(rel *v1alpha1.Release) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.m[client.ObjectKeyFromObject(rel)]
	switch {
	case x == nil || x.uid != rel.UID:
		return false
	case x.conflict || x.replaced[rel.ResourceVersion]:
		return true
	case rel.ResourceVersion == x.current:
		// Caught up: the versions before it can never show again.
		clear(x.replaced)
		x.catchUp = false
		return false
	}
	// Another writer's later version, unless the cache is catching up.
	return x.catchUp
}

// readLive records a read from the API server, made while the cache
// showed version cached: rel is current, cached older (when it differs).
func (f *fresh) readLive(rel *v1alpha1.Release, cached string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.entry(rel)
	if cached != rel.ResourceVersion {
		x.older(cached)
		x.older(x.current)
		x.catchUp = true
	}
	x.now(rel.ResourceVersion)
}

// now records that v is the newest version known.
func (x *freshness) now(v string) {
	x.current, x.conflict = v, false
	delete(x.replaced, v)
}

// older records that version v is older than current.
func (x *freshness) older(v string) {
	if v == "" {
		return
	}
	if len(x.replaced) >= maxReplaced {
		// Too far behind to remember: read live until caught up.
		clear(x.replaced)
		x.catchUp = true
	}
	x.replaced[v] = true
}

func (f *fresh) entry(rel *v1alpha1.Release) *freshness {
	key := client.ObjectKeyFromObject(rel)
	if f.m == nil {
		f.m = map[types.NamespacedName]*freshness{}
	}
	x := f.m[key]
	if x == nil || x.uid != rel.UID {
		x = &freshness{uid: rel.UID, replaced: map[string]bool{}}
		f.m[key] = x
	}
	return x
}

func (f *fresh) forget(key types.NamespacedName) {
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
}

// get reads a Release: from the cache, or from the API server when the
// cache is behind the operator's last write.
func (r *Reconciler) get(ctx context.Context, key types.NamespacedName, rel *v1alpha1.Release) error {
	if r.Reader == nil {
		return r.Client.Get(ctx, key, rel)
	}
	if err := r.Client.Get(ctx, key, rel); err != nil || !r.fresh.behind(rel) {
		// Not in the cache: gone, or (with a Selector) no longer this
		// replica's; the cache has every Release it is told of.
		return err
	}
	cached := rel.ResourceVersion
	*rel = v1alpha1.Release{}
	if err := r.Reader.Get(ctx, key, rel); err != nil {
		return err
	}
	r.fresh.readLive(rel, cached)
	if r.Selector != nil && !r.Selector.Matches(labels.Set(rel.Labels)) {
		// Relabelled into another shard since the cache saw it.
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("releases").GroupResource(), key.Name)
	}
	return nil
}

// apiReader reads from the API server: Reader, else Client.
func (r *Reconciler) apiReader() client.Reader {
	if r.Reader == nil {
		return r.Client
	}
	return r.Reader
}

// update writes rel (its status when status is set), recording what the
// write replaced or that it conflicted.
func (r *Reconciler) update(ctx context.Context, rel *v1alpha1.Release, status bool) error {
	base := rel.ResourceVersion
	var err error
	if status {
		err = r.Client.Status().Update(ctx, rel)
	} else {
		err = r.Client.Update(ctx, rel)
	}
	switch {
	case err == nil:
		r.fresh.wrote(rel, base)
	case apierrors.IsConflict(err):
		r.fresh.conflicted(rel, base)
	}
	return err
}

// pending is the newest state of one Release's rollout, kept in memory
// while it is not written, and the stored status it follows.
type pending struct {
	uid             types.UID
	resourceVersion string // of the Release the state follows
	status          []byte // that Release's status, as stored (JSON)
	state           strategy.State
}

// pendingStates keeps a pending state per Release. Safe for concurrent
// use; the zero value is ready.
type pendingStates struct {
	mu sync.Mutex
	m  map[types.NamespacedName]pending
}

// keep remembers state as the newest state of rel's rollout, which
// follows rel's status as stored.
func (p *pendingStates) keep(rel *v1alpha1.Release, state *strategy.State) {
	raw, err := json.Marshal(&rel.Status)
	if err != nil {
		raw = nil
	}
	// As a status stores it (instants to the microsecond), so that it
	// compares with a stored one as the stored one would.
	var st strategy.State
	if b, err := json.Marshal(state); err != nil || json.Unmarshal(b, &st) != nil {
		p.forget(client.ObjectKeyFromObject(rel))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[types.NamespacedName]pending{}
	}
	p.m[client.ObjectKeyFromObject(rel)] = pending{uid: rel.UID, resourceVersion: rel.ResourceVersion, status: raw, state: st}
}

// state returns the state to reconcile rel from: the pending one while
// rel's status is still the one it follows (a change of the spec alone
// keeps it), else the stored one.
func (p *pendingStates) state(rel *v1alpha1.Release) strategy.State {
	p.mu.Lock()
	x, ok := p.m[client.ObjectKeyFromObject(rel)]
	p.mu.Unlock()
	if ok && x.uid == rel.UID {
		if x.resourceVersion == rel.ResourceVersion {
			return *x.state.DeepCopy()
		}
		if raw, err := json.Marshal(&rel.Status); err == nil && x.status != nil && string(raw) == string(x.status) {
			return *x.state.DeepCopy()
		}
	}
	return rel.Status.Rollout
}

func (p *pendingStates) forget(key types.NamespacedName) {
	p.mu.Lock()
	delete(p.m, key)
	p.mu.Unlock()
}

// deferrable reports whether next differs from prev, as statusChanged
// sees them, only in the record of capacity hops (the sides' desired
// capacity and the instant of the last hop) while a rollout runs: a
// status that may wait for the next write that changes anything else.
// A finished or idle rollout is written as it is.
func deferrable(prev, next *v1alpha1.ReleaseStatus) bool {
	if p := next.Rollout.Phase; p == "" || p.Terminal() || next.Rollout.Unobserved {
		return false
	}
	a, b := *prev, *next
	a.Rollout, b.Rollout = *prev.Rollout.DeepCopy(), *next.Rollout.DeepCopy()
	for _, s := range []*strategy.State{&a.Rollout, &b.Rollout} {
		s.Desired.StableCapacity, s.Desired.CanaryCapacity = 0, 0
		s.HopAt = b.Rollout.HopAt
	}
	if a.Rollout.Desired.Weight != b.Rollout.Desired.Weight {
		return false
	}
	return !statusChanged(&a, &b)
}
