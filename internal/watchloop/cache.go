package watchloop

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Cache keeps the latest version of one watched object, so that an adapter
// reads it from what its watch delivered instead of asking the API server
// on every reconcile. A Shared feeds its Cache while its loop runs.
//
// The watch lags: the answer to an adapter's own write (or to a read of
// the API server) may be newer than what the watch delivered so far. The
// adapter hands such answers to Saw, and Get reports the newest version
// known: the watch's, or the one Saw kept until the watch delivers it or
// a later one. Versions are ordered by their resourceVersions when both
// are integers (as the API server's are); otherwise the watch's version
// replaces the kept one unless it is one that the kept one's write
// replaced (the bases given to Saw), as with a cache-backed client.
//
// Get misses (the caller reads the API server) while no loop feeds the
// Cache, while its watch is down (between a watch ending and the next one
// opening), until a watch opened afresh has delivered the object, and
// once after Stale (a write based on a read from the Cache lost an
// optimistic-concurrency race: the retry must read the API server). A
// deleted object is reported absent until the watch delivers it again.
//
// Safe for concurrent use; the zero value is ready (and misses until fed).
type Cache struct {
	mu      sync.Mutex
	gen     uint64 // the generation being fed; 0: none
	next    uint64
	open    bool // a watch of the generation is open
	known   bool // the watch has delivered the object's state
	obj     runtime.Object
	kept    runtime.Object      // an answer of the API server newer than obj
	bases   map[string]struct{} // the versions kept replaced
	refresh bool                // the next Get misses
}

// maxBases bounds Cache.bases; beyond it the oldest are forgotten.
const maxBases = 64

// Get returns a copy of the newest version of the object known and ok, or
// ok false when the caller must read the API server. A nil object with ok
// means the object does not exist (the watch delivered its deletion).
func (c *Cache) Get() (obj runtime.Object, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == 0 || !c.open || !c.known || c.refresh {
		c.refresh = false
		return nil, false
	}
	if c.kept != nil {
		return c.kept.DeepCopyObject(), true
	}
	if c.obj == nil {
		return nil, true
	}
	return c.obj.DeepCopyObject(), true
}

// Saw hands the Cache a version of the object that the API server
// returned: the answer to a write (with bases, the resourceVersions the
// write replaced: the version it was based on) or to a read. Get reports
// it until the watch delivers it or a later version. A version older than
// the watch's is ignored, as is everything while no loop feeds the Cache.
func (c *Cache) Saw(obj runtime.Object, bases ...string) {
	rv := resourceVersionOf(obj)
	if rv == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == 0 {
		return
	}
	cur := c.kept
	if cur == nil && c.known {
		cur = c.obj
	}
	if cur != nil {
		crv := resourceVersionOf(cur)
		if crv == rv {
			return
		}
		if later, ok := after(crv, rv); ok && later {
			return // the Cache already knows a later version
		}
		bases = append(bases, crv)
	}
	if c.kept == nil || len(c.bases)+len(bases) > maxBases {
		c.bases = map[string]struct{}{}
	}
	for _, b := range bases {
		if b != "" {
			c.bases[b] = struct{}{}
		}
	}
	c.kept = obj.DeepCopyObject()
}

// Stale tells the Cache that a write based on its Get lost an
// optimistic-concurrency race: the next Get misses, so that the retry reads
// the API server (and hands its answer to Saw).
func (c *Cache) Stale() {
	c.mu.Lock()
	c.refresh = true
	c.mu.Unlock()
}

// Fed reports whether a loop feeds the Cache and its watch is open and has
// delivered the object's state: whether Get answers.
func (c *Cache) Fed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen != 0 && c.open && c.known
}

// Feed starts a new generation of the Cache: what it knew is forgotten,
// and observe (an Options.Observe) fills it until stop is called, which
// empties it. The observations of an earlier generation are ignored.
func (c *Cache) Feed() (observe func(Observation), stop func()) {
	c.mu.Lock()
	c.next++
	gen := c.next
	c.reset()
	c.gen = gen
	c.mu.Unlock()
	observe = func(o Observation) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen {
			c.observe(o)
		}
	}
	stop = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gen == gen {
			c.reset()
		}
	}
	return observe, stop
}

func (c *Cache) reset() {
	c.gen, c.open, c.known, c.obj, c.kept, c.bases, c.refresh = 0, false, false, nil, nil, nil, false
}

// observe applies one observation; c.mu is held.
func (c *Cache) observe(o Observation) {
	switch o.Kind {
	case KindOpened:
		c.open = true
	case KindOpenedAfresh:
		c.open, c.known, c.obj = true, false, nil
	case KindClosed:
		c.open = false
	case KindObject, KindDeleted:
		c.known = true
		if o.Kind == KindObject {
			c.obj = o.Object
		} else {
			c.obj = nil
		}
		if c.kept == nil {
			return
		}
		rv, krv := resourceVersionOf(o.Object), resourceVersionOf(c.kept)
		later, ordered := after(rv, krv)
		_, replaced := c.bases[rv]
		switch {
		case rv == krv, ordered && later, !ordered && !replaced:
			c.kept, c.bases = nil, nil // the watch caught up
		}
	}
}

// after reports whether resourceVersion a is later than b, and whether
// both are integers (ok): otherwise they cannot be ordered.
func after(a, b string) (later, ok bool) {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return false, false
	}
	return x > y, true
}

func resourceVersionOf(obj runtime.Object) string {
	if obj == nil {
		return ""
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}
