package ownwrite_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/internal/ownwrite"
)

var gr = schema.GroupResource{Group: "example.com", Resource: "things"}

// version is one version of an object: its resourceVersion, opaque, and
// its place in the object's history (Generation, which the Memory never
// reads).
func version(rv string, seq int) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.Namespace, o.Name, o.ResourceVersion, o.Generation = "ns", "obj", rv, int64(seq)
	return o
}

// store is an object's history on the API server, and a cache that shows
// its versions in order, late.
type store struct {
	hist     []*metav1.PartialObjectMetadata
	cached   int // the index of the version the cache shows
	apiReads int
	next     int
}

func newStore() *store {
	s := &store{}
	s.add()
	return s
}

// add appends a version with a fresh, opaque resourceVersion.
func (s *store) add() *metav1.PartialObjectMetadata {
	s.next++
	v := version(fmt.Sprintf("rv-%x", s.next*7919%10007), len(s.hist))
	s.hist = append(s.hist, v)
	return v
}

func (s *store) head() *metav1.PartialObjectMetadata { return s.hist[len(s.hist)-1] }

func (s *store) read(server bool) (ownwrite.Object, error) {
	if server {
		s.apiReads++
		return s.head().DeepCopy(), nil
	}
	return s.hist[s.cached].DeepCopy(), nil
}

// update writes obj if it is based on the current version, and fills obj
// with the answer.
func (s *store) update(obj *metav1.PartialObjectMetadata) error {
	if obj.ResourceVersion != s.head().ResourceVersion {
		return apierrors.NewConflict(gr, "obj", errors.New("the object has been modified"))
	}
	*obj = *s.add().DeepCopy()
	return nil
}

// fataler is a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// seq is obj's place in s's history.
func seq(t fataler, s *store, obj ownwrite.Object) int {
	t.Helper()
	n := int(obj.GetGeneration())
	if n < 0 || n >= len(s.hist) || s.hist[n].ResourceVersion != obj.GetResourceVersion() {
		t.Fatalf("read %s (seq %d), not a version of the object", obj.GetResourceVersion(), n)
	}
	return n
}

func TestMemory(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "obj"}
	// get reads through m and returns the version's place in s.
	get := func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) int {
		t.Helper()
		obj, err := m.Get(key, s.read)
		if err != nil {
			t.Fatal(err)
		}
		return seq(t, s, obj)
	}
	write := func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) error {
		t.Helper()
		obj, err := m.Get(key, s.read)
		if err != nil {
			t.Fatal(err)
		}
		o := obj.(*metav1.PartialObjectMetadata)
		return m.Update(key, o, func() error { return s.update(o) })
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store)
		// apiReads are the reads of the API server the run makes.
		apiReads int
	}{
		{"no write: the cache as it is", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			s.add()
			if got := get(t, m, s); got != 0 {
				t.Fatalf("read %d, want the cache's 0", got)
			}
		}, 0},
		{"own writes behind a lagging cache", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			for want := 1; want <= 3; want++ {
				if err := write(t, m, s); err != nil {
					t.Fatal(err)
				}
				if got := get(t, m, s); got != want {
					t.Fatalf("read %d after write %d", got, want)
				}
			}
			s.cached = 2 // an own write, not the last
			if got := get(t, m, s); got != 3 {
				t.Fatalf("read %d with the cache at 2, want 3", got)
			}
		}, 0},
		{"a foreign write seen once the cache shows it", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			if err := write(t, m, s); err != nil {
				t.Fatal(err)
			}
			s.add() // 2, another writer's
			if got := get(t, m, s); got != 1 {
				t.Fatalf("read %d with the cache at 0, want the own write 1", got)
			}
			s.cached = 2
			if got := get(t, m, s); got != 2 {
				t.Fatalf("read %d with the cache at 2, want 2", got)
			}
			s.cached = 2
			if got := get(t, m, s); got != 2 {
				t.Fatalf("read %d, want 2", got)
			}
		}, 0},
		{"a conflict: the retry reads the API server", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			if err := write(t, m, s); err != nil {
				t.Fatal(err)
			}
			s.add() // 2, another writer's, the cache still at 0
			if err := write(t, m, s); !apierrors.IsConflict(err) {
				t.Fatalf("write on a stale read: %v, want a conflict", err)
			}
			if err := write(t, m, s); err != nil { // reads 2 from the API server
				t.Fatal(err)
			}
			for _, c := range []int{0, 1, 2} { // all known older than 3
				s.cached = c
				if got := get(t, m, s); got != 3 {
					t.Fatalf("read %d with the cache at %d, want 3", got, c)
				}
			}
			s.cached = 3
			if got := get(t, m, s); got != 3 {
				t.Fatalf("read %d, want 3", got)
			}
		}, 1},
		{"after a conflict, a version the memory cannot place", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			if err := write(t, m, s); err != nil {
				t.Fatal(err)
			}
			s.add() // 2 and 3, another writer's
			s.add()
			if err := write(t, m, s); !apierrors.IsConflict(err) {
				t.Fatalf("write on a stale read: %v, want a conflict", err)
			}
			if err := write(t, m, s); err != nil { // reads 3 from the API server
				t.Fatal(err)
			}
			s.cached = 2 // older than 4, never seen: asked once, then known
			for range 2 {
				if got := get(t, m, s); got != 4 {
					t.Fatalf("read %d with the cache at 2, want 4", got)
				}
			}
			s.cached = 4
			if got := get(t, m, s); got != 4 {
				t.Fatalf("read %d, want 4", got)
			}
			s.add() // 5, and the memory has ended: no more reads of the server
			s.cached = 5
			if got := get(t, m, s); got != 5 {
				t.Fatalf("read %d, want 5", got)
			}
		}, 2},
		{"a deleted object", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			if err := write(t, m, s); err != nil {
				t.Fatal(err)
			}
			m.Conflicted(key, s.head().ResourceVersion)
			gone := apierrors.NewNotFound(gr, "obj")
			_, err := m.Get(key, func(bool) (ownwrite.Object, error) { return &metav1.PartialObjectMetadata{}, gone })
			if !apierrors.IsNotFound(err) {
				t.Fatalf("err %v, want the API server's NotFound", err)
			}
			if got := get(t, m, s); got != 0 {
				t.Fatalf("read %d after the NotFound, want the cache's 0", got)
			}
		}, 0},
		{"a failed read of the API server keeps the mark", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			m.Conflicted(key, s.head().ResourceVersion)
			down := errors.New("connection refused")
			if _, err := m.Get(key, func(bool) (ownwrite.Object, error) { return &metav1.PartialObjectMetadata{}, down }); !errors.Is(err, down) {
				t.Fatalf("err %v", err)
			}
			if got := get(t, m, s); got != 0 || s.apiReads != 1 {
				t.Fatalf("read %d, %d reads of the API server; want 0 from it", got, s.apiReads)
			}
		}, 1},
		{"beyond MaxReplaced the API server settles the cache's version", func(t *testing.T, m *ownwrite.Memory[types.NamespacedName], s *store) {
			for range ownwrite.MaxReplaced + 1 {
				if err := write(t, m, s); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := get(t, m, s), ownwrite.MaxReplaced+1; got != want {
				t.Fatalf("read %d, want the last own write %d", got, want)
			}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m ownwrite.Memory[types.NamespacedName]
			s := newStore()
			tc.run(t, &m, s)
			if s.apiReads != tc.apiReads {
				t.Errorf("%d reads of the API server, want %d", s.apiReads, tc.apiReads)
			}
		})
	}
}

// TestNeverOlder: own writes (each based on a read through the Memory, and
// conflicting when that read was not the current version), other writers'
// writes, and a cache that shows every version in order but late: a read
// is never older than the last own write, than an earlier read, or than
// what the cache shows (so another writer's change after the last own
// write is seen as soon as the cache shows it); with no conflict, the
// API server is never read and a read is exactly the newer of the cache's
// version and the last own write; and a cache that has caught up is read
// as it is.
func TestNeverOlder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m ownwrite.Memory[string]
		const key = "obj"
		s := newStore()
		own, floor, conflicts := 0, 0, 0
		read := func() *metav1.PartialObjectMetadata {
			obj, err := m.Get(key, s.read)
			if err != nil {
				t.Fatal(err)
			}
			got := seq(t, s, obj)
			switch {
			case got < own:
				t.Fatalf("read %d, older than the last own write %d", got, own)
			case got < floor:
				t.Fatalf("read %d, older than an earlier read %d", got, floor)
			case got < s.cached:
				t.Fatalf("read %d, older than the cache's %d", got, s.cached)
			// Exact, and without the API server, while there is neither a
			// conflict nor more versions than MaxReplaced to remember.
			case conflicts == 0 && len(s.hist) <= ownwrite.MaxReplaced && got != max(own, s.cached):
				t.Fatalf("read %d with no conflict, want %d (own %d, cache %d)", got, max(own, s.cached), own, s.cached)
			case conflicts == 0 && len(s.hist) <= ownwrite.MaxReplaced && s.apiReads > 0:
				t.Fatalf("%d reads of the API server with no conflict", s.apiReads)
			}
			floor = got
			return obj.(*metav1.PartialObjectMetadata)
		}
		t.Repeat(map[string]func(*rapid.T){
			"own write": func(t *rapid.T) {
				o := read()
				switch err := m.Update(key, o, func() error { return s.update(o) }); {
				case err == nil:
					own = seq(t, s, o)
				case apierrors.IsConflict(err):
					conflicts++
				default:
					t.Fatal(err)
				}
			},
			"other write": func(*rapid.T) { s.add() },
			"cache catches up": func(t *rapid.T) {
				s.cached += rapid.IntRange(0, len(s.hist)-1-s.cached).Draw(t, "step")
			},
			"read": func(*rapid.T) { read() },
			"": func(*rapid.T) {
				if s.cached == len(s.hist)-1 {
					if got := seq(t, s, read()); got != s.cached {
						t.Fatalf("read %d from a cache that has caught up at %d", got, s.cached)
					}
				}
			},
		})
	})
}

// TestConcurrent: keys are independent, and concurrent use is safe (run
// with -race).
func TestConcurrent(t *testing.T) {
	var m ownwrite.Memory[string]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := fmt.Sprint(i)
			var mu sync.Mutex
			s := newStore()
			readLocked := func(server bool) (ownwrite.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				return s.read(server)
			}
			for range 50 {
				obj, err := m.Get(key, readLocked)
				if err != nil {
					t.Error(err)
					return
				}
				o := obj.(*metav1.PartialObjectMetadata)
				err = m.Update(key, o, func() error {
					mu.Lock()
					defer mu.Unlock()
					return s.update(o)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
			obj, _ := m.Get(key, readLocked)
			if got := obj.GetGeneration(); got != 50 || s.apiReads != 0 {
				t.Errorf("key %s: read %d with %d reads of the API server, want 50 and none", key, got, s.apiReads)
			}
		})
	}
	wg.Wait()
}
