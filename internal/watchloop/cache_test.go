package watchloop_test

import (
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/internal/watchloop"
)

func version(rv string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", ResourceVersion: rv}}
}

func rvOf(obj runtime.Object) string {
	if obj == nil {
		return "absent"
	}
	return obj.(*appsv1.Deployment).ResourceVersion
}

// cacheStep is one thing that happens to a Cache in TestCache.
type cacheStep struct {
	kind  string // "observe", "saw", "stale", "stop"
	obs   watchloop.ObservationKind
	rv    string
	bases []string
	// want is what Get answers after the step: a resourceVersion,
	// "absent", or "miss".
	want string
}

func TestCache(t *testing.T) {
	obj := func(rv, want string) cacheStep {
		return cacheStep{kind: "observe", obs: watchloop.KindObject, rv: rv, want: want}
	}
	tests := []struct {
		name  string
		steps []cacheStep
	}{
		{"empty until the watch delivered the object", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh, want: "miss"},
			obj("5", "5"),
			obj("7", "7"),
		}},
		{"an own write is reported until the watch delivers it", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh, want: "miss"},
			obj("5", "5"),
			{kind: "saw", rv: "9", bases: []string{"5"}, want: "9"},
			obj("6", "9"), // another writer's, before the own write
			obj("9", "9"),
			obj("10", "10"),
		}},
		{"a later version replaces the own write", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("5", "5"),
			{kind: "saw", rv: "9", bases: []string{"5"}, want: "9"},
			obj("11", "11"), // the own write's event was skipped (a relist)
		}},
		{"an older answer is ignored", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("8", "8"),
			{kind: "saw", rv: "6", want: "8"},
		}},
		{"opaque versions: the watch's replaces the write's unless the write replaced it", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("a", "a"),
			{kind: "saw", rv: "c", bases: []string{"a"}, want: "c"},
			obj("a", "c"), // a replayed version the write replaced
			obj("d", "d"),
		}},
		{"a deletion is absent until the object comes back", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("5", "5"),
			{kind: "observe", obs: watchloop.KindDeleted, rv: "6", want: "absent"},
			obj("8", "8"),
		}},
		{"down: every read goes to the API server", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("5", "5"),
			{kind: "observe", obs: watchloop.KindClosed, want: "miss"},
			{kind: "observe", obs: watchloop.KindOpened, want: "5"}, // resumed: what it had still holds
			{kind: "observe", obs: watchloop.KindClosed},
			{kind: "observe", obs: watchloop.KindOpenedAfresh, want: "miss"},
			obj("9", "9"),
		}},
		{"stale: the next read misses, and its answer is kept", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("5", "5"),
			{kind: "stale", want: "miss"}, // Get after Stale misses once
			{kind: "saw", rv: "7", want: "7"},
			obj("6", "7"),
			obj("7", "7"),
		}},
		{"stopped: empty, and answers are not kept", []cacheStep{
			{kind: "observe", obs: watchloop.KindOpenedAfresh},
			obj("5", "5"),
			{kind: "stop", want: "miss"},
			{kind: "saw", rv: "9", want: "miss"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c watchloop.Cache
			if _, ok := c.Get(); ok {
				t.Fatal("the zero Cache answered")
			}
			observe, stop := c.Feed()
			for i, s := range tt.steps {
				switch s.kind {
				case "observe":
					var o runtime.Object
					if s.rv != "" {
						o = version(s.rv)
					}
					observe(watchloop.Observation{Kind: s.obs, Object: o})
				case "saw":
					c.Saw(version(s.rv), s.bases...)
				case "stale":
					c.Stale()
				case "stop":
					stop()
				}
				if s.want == "" {
					continue
				}
				got := "miss"
				if obj, ok := c.Get(); ok {
					got = rvOf(obj)
				}
				if got != s.want {
					t.Fatalf("step %d (%s %v %s): Get = %s, want %s", i, s.kind, s.obs, s.rv, got, s.want)
				}
			}
		})
	}
}

// TestCacheNeverOlder: an object written by the adapter and by others,
// whose versions a lagging watch delivers in order, closes and reopens
// (resuming or afresh), and reads that go to the API server when the Cache
// misses: a read never reports a version older than the adapter's last
// write, nor older than an earlier read; the write of a read that was not
// the latest version conflicts, and the next read misses; and once the
// watch has delivered everything, the Cache reports the latest version.
func TestCacheNeverOlder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c watchloop.Cache
		observe, stop := c.Feed()
		defer stop()
		server := []int{1} // the versions, in order; the last is current
		next := 2
		delivered := -1 // the index of the last version the watch delivered
		open := false
		openAfresh := func() {
			observe(watchloop.Observation{Kind: watchloop.KindOpenedAfresh})
			open = true
			delivered = len(server) - 1 // the initial state is delivered next
			observe(watchloop.Observation{Kind: watchloop.KindObject, Object: version(strconv.Itoa(server[delivered]))})
		}
		openAfresh()
		floor := 0 // the adapter's last write, or the last version a read reported
		read := func() (int, bool) {
			obj, ok := c.Get()
			if !ok {
				latest := server[len(server)-1]
				c.Saw(version(strconv.Itoa(latest)))
				return latest, false
			}
			n, err := strconv.Atoi(rvOf(obj))
			if err != nil {
				t.Fatalf("the Cache reported %q", rvOf(obj))
			}
			return n, true
		}
		t.Repeat(map[string]func(*rapid.T){
			"other writer": func(*rapid.T) {
				server = append(server, next)
				next += rapid.IntRange(1, 3).Draw(t, "gap")
			},
			"deliver": func(t *rapid.T) {
				if !open || delivered == len(server)-1 {
					t.Skip("nothing to deliver")
				}
				delivered++
				observe(watchloop.Observation{Kind: watchloop.KindObject, Object: version(strconv.Itoa(server[delivered]))})
			},
			"close": func(t *rapid.T) {
				if !open {
					t.Skip("closed")
				}
				observe(watchloop.Observation{Kind: watchloop.KindClosed})
				open = false
			},
			"reopen": func(t *rapid.T) {
				if open {
					t.Skip("open")
				}
				if rapid.Bool().Draw(t, "afresh") {
					openAfresh()
					return
				}
				observe(watchloop.Observation{Kind: watchloop.KindOpened})
				open = true
			},
			"read": func(t *rapid.T) {
				got, _ := read()
				if got < floor {
					t.Fatalf("read version %d, older than %d (the last write or read)", got, floor)
				}
				floor = got
			},
			"write": func(t *rapid.T) {
				base, _ := read()
				if base < floor {
					t.Fatalf("read version %d to write, older than %d", base, floor)
				}
				if base != server[len(server)-1] {
					c.Stale() // a conflict
					if _, ok := c.Get(); ok {
						t.Fatal("the read after a conflict was answered from the Cache")
					}
					floor = base
					return
				}
				server = append(server, next)
				next++
				c.Saw(version(strconv.Itoa(server[len(server)-1])), strconv.Itoa(base))
				floor = server[len(server)-1]
			},
		})
		for open && delivered < len(server)-1 {
			delivered++
			observe(watchloop.Observation{Kind: watchloop.KindObject, Object: version(strconv.Itoa(server[delivered]))})
		}
		if !open {
			openAfresh()
		}
		if got, cached := read(); !cached || got != server[len(server)-1] {
			t.Fatalf("after the watch delivered everything: read %d (from the Cache: %v), want %d", got, cached, server[len(server)-1])
		}
	})
}
