package rollout_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// TestEventNamesTheRollout: one Runner serves many objects at once, and
// every Event the Observer gets names the object (WithName) whose state
// it concerns; so do the log lines. A context that names none gives the
// zero name.
func TestEventNamesTheRollout(t *testing.T) {
	for _, perObject := range []bool{false, true} {
		mode := "one Runner"
		if perObject {
			mode = "a Runner per object"
		}
		t.Run(mode, func(t *testing.T) { testEventNames(t, perObject) })
	}
}

// testEventNames reconciles three objects at once, through one shared
// Runner or a Runner per object (its own adapters, the Observer shared).
func testEventNames(t *testing.T, perObject bool) {
	clock := fake.NewClock(t0)
	var mu sync.Mutex
	events := map[types.NamespacedName][]rollout.Event{}
	var lines []string
	observer := rollout.ObserverFunc(func(ctx context.Context, e rollout.Event) {
		mu.Lock()
		defer mu.Unlock()
		events[e.Rollout] = append(events[e.Rollout], e)
	})
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 20}
	newRunner := func() *rollout.Runner {
		return &rollout.Runner{Strategy: strat, Router: fake.NewRouter(clock),
			A: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), B: fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0}), Clock: clock, Observer: observer}
	}
	shared := newRunner()
	log := funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{Verbosity: 1})
	base := logr.NewContext(context.Background(), log)

	names := []types.NamespacedName{{Namespace: "shop", Name: "web"}, {Namespace: "shop", Name: "api"}, {Namespace: "blog", Name: "web"}}
	// Each object's rollout is to its own revision, so each Event's
	// state tells which object it came from.
	revision := func(n types.NamespacedName) string { return n.Namespace + "-" + n.Name + "-v2" }
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := rollout.WithName(base, n)
			if got, ok := rollout.NameFrom(ctx); !ok || got != n {
				t.Errorf("NameFrom = %v, %v; want %v", got, ok, n)
			}
			r := shared
			if perObject {
				r = newRunner()
			}
			s := strategy.NewState("v1", revision(n))
			for range 5 {
				next, _, err := r.Reconcile(ctx, s)
				if err != nil {
					t.Error(err)
					return
				}
				s = next
			}
		}()
	}
	wg.Wait()
	if _, _, err := shared.Reconcile(base, strategy.NewState("v1", "unnamed")); err != nil {
		t.Fatal(err)
	}

	for _, n := range names {
		evs := events[n]
		if len(evs) != 5 {
			t.Errorf("%v: %d events, want 5", n, len(evs))
		}
		for _, e := range evs {
			if e.Before.CanaryRevision != revision(n) {
				t.Errorf("an event named %v is of the rollout to %s", n, e.Before.CanaryRevision)
			}
		}
	}
	if evs := events[types.NamespacedName{}]; len(evs) != 1 || evs[0].Before.CanaryRevision != "unnamed" {
		t.Errorf("a context with no name: %d events under the zero name, want the 1 unnamed one", len(evs))
	}
	if _, ok := rollout.NameFrom(base); ok {
		t.Error("NameFrom of a context with no name reports one")
	}
	named := 0
	for _, l := range lines {
		if strings.Contains(l, `"rollout"="shop/web"`) {
			named++
		}
	}
	if named == 0 {
		t.Errorf("no log line names the rollout shop/web: %q", lines)
	}
}
