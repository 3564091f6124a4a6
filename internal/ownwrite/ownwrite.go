// Package ownwrite keeps what a client's own writes returned, for an
// adapter that reads objects from an informer cache (a controller-runtime
// manager's client) and writes them to the API server: the cache may still
// show a version that the adapter's last write replaced, and acting on it
// would undo that write or lose the next one to a conflict.
//
// A Memory remembers, per object key, the latest version the adapter knows
// (what its last write returned, or its last read of the API server) and
// the resourceVersions known to be older (those its writes replaced). A
// read from the cache that returns one of those older versions is answered
// with a copy of the latest; a read that returns any other version (the
// latest itself, or a newer one written by someone else) ends the
// substitution and is returned as it is. Resource versions are compared
// for equality only, never ordered.
//
// A write that loses an optimistic-concurrency race marks the key: the
// next read goes to the API server, and its answer is returned as it is.
// The cache may then still show versions between the one it showed and
// the one the API server returned, which the Memory cannot place; until
// the cache shows a version it knows, such a version is checked with one
// more read of the API server (and remembered as older when the server
// has moved on). Without a conflict, and within MaxReplaced versions, the
// API server is never read.
package ownwrite

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is a Kubernetes object; a controller-runtime client.Object is one.
type Object interface {
	metav1.Object
	runtime.Object
}

// MaxReplaced bounds the versions remembered as older per key: past it, a
// cached version other than the latest is settled with a read of the API
// server until the cache shows the latest.
const MaxReplaced = 64

// Memory keeps the own writes of the objects of one adapter, keyed by K
// (a types.NamespacedName, a string, or the adapter's own reference).
// Safe for concurrent use; the zero value is ready.
type Memory[K comparable] struct {
	mu sync.Mutex
	m  map[K]*entry
}

type entry struct {
	// latest is the newest version known; nil when the cache is read as
	// it is.
	latest Object
	// replaced are resourceVersions known to be older than latest (or,
	// while stale, than what the API server holds).
	replaced map[string]struct{}
	// behind: latest came from the API server, so the cache may show
	// versions older than it that are not in replaced.
	behind bool
	// stale: the next read goes to the API server.
	stale bool
}

func (m *Memory[K]) entry(key K) *entry {
	if m.m == nil {
		m.m = map[K]*entry{}
	}
	e := m.m[key]
	if e == nil {
		e = &entry{}
		m.m[key] = e
	}
	return e
}

// tidy forgets key's entry when it holds nothing; m.mu is held.
func (m *Memory[K]) tidy(key K, e *entry) {
	if e.latest == nil && !e.stale {
		delete(m.m, key)
	}
}

// know makes obj the latest version of e, the versions older names
// replaced by it; m.mu is held.
func (e *entry) know(obj Object, older ...string) {
	rv := obj.GetResourceVersion()
	if e.latest != nil {
		older = append(older, e.latest.GetResourceVersion())
	}
	if e.replaced == nil {
		e.replaced = map[string]struct{}{}
	}
	for _, o := range older {
		if o != "" && o != rv {
			e.replaced[o] = struct{}{}
		}
	}
	delete(e.replaced, rv)
	e.latest = obj.DeepCopyObject().(Object)
	if len(e.replaced) > MaxReplaced {
		// Too many to remember: any version but the latest is settled by
		// the API server until the cache shows the latest.
		clear(e.replaced)
		e.behind = true
	}
}

// forget ends the substitution: the cache is read as it is.
func (e *entry) forget() { e.latest, e.replaced, e.behind = nil, nil, false }

// Wrote records that an own write of key succeeded: obj is what the API
// server returned, bases the resourceVersions the write replaced (the one
// it was based on).
func (m *Memory[K]) Wrote(key K, obj Object, bases ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(key)
	e.know(obj, bases...)
	m.tidy(key, e)
}

// Conflicted records that an own write of key, based on the version base,
// lost an optimistic-concurrency race: the next Get reads the API server.
func (m *Memory[K]) Conflicted(key K, base string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(key)
	e.stale = true
	if base == "" || (e.latest != nil && base == e.latest.GetResourceVersion()) {
		return
	}
	if e.replaced == nil {
		e.replaced = map[string]struct{}{}
	}
	e.replaced[base] = struct{}{} // older than what the server holds
}

// Update runs write, an update of obj that sends obj's resourceVersion as
// its precondition and fills obj with the answer, and records the outcome
// with Wrote or Conflicted.
func (m *Memory[K]) Update(key K, obj Object, write func() error) error {
	base := obj.GetResourceVersion()
	err := write()
	switch {
	case err == nil:
		m.Wrote(key, obj, base)
	case apierrors.IsConflict(err):
		m.Conflicted(key, base)
	}
	return err
}

// Get answers a read of key. read reads a fresh object, from the API
// server when server is true, else from the cache. An error is returned as
// read made it. The object returned is read's or a copy of the latest
// version known.
func (m *Memory[K]) Get(key K, read func(server bool) (Object, error)) (Object, error) {
	m.mu.Lock()
	stale := m.m[key] != nil && m.m[key].stale
	m.mu.Unlock()
	if stale {
		return m.fromServer(key, read, "")
	}
	obj, err := read(false)
	if err != nil {
		return obj, err
	}
	out, ask := m.resolve(key, obj)
	if !ask {
		return out, nil
	}
	return m.fromServer(key, read, obj.GetResourceVersion())
}

// fromServer reads key from the API server and learns from its answer;
// cached is the version the cache showed ("" if not read).
func (m *Memory[K]) fromServer(key K, read func(server bool) (Object, error), cached string) (Object, error) {
	obj, err := read(true)
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(key)
	defer m.tidy(key, e)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		e.stale = false
		e.forget()
		return obj, err
	default:
		return obj, err // the mark stays for the next read
	}
	e.stale = false
	if cached != "" && cached == obj.GetResourceVersion() {
		e.forget() // the cache has caught up
		return obj, nil
	}
	e.know(obj, cached)
	if e.latest != nil {
		e.behind = true
	}
	return obj, nil
}

// resolve answers a read of key from the cache that returned obj: ask
// reports that the cache shows a version that cannot be placed, which the
// API server must settle.
func (m *Memory[K]) resolve(key K, obj Object) (out Object, ask bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[key]
	if e == nil || e.latest == nil {
		return obj, false
	}
	rv := obj.GetResourceVersion()
	if _, old := e.replaced[rv]; old {
		return e.latest.DeepCopyObject().(Object), false
	}
	if e.behind && rv != e.latest.GetResourceVersion() {
		return nil, true
	}
	e.forget()
	m.tidy(key, e)
	return obj, false
}
