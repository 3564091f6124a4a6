package controller

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// laggingCache is a manager's client whose reads of the Release come from
// a cache that shows the API server's versions in order, late: shown is
// how many of the versions so far it has seen.
type laggingCache struct {
	client.Client // the API server: writes, and the versions
	versions      []*v1alpha1.Release
	shown         int
}

func (c *laggingCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if c.shown == 0 {
		return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("releases").GroupResource(), key.Name)
	}
	c.versions[c.shown-1].DeepCopyInto(obj.(*v1alpha1.Release))
	return nil
}

// record appends the API server's current version.
func (c *laggingCache) record(t interface{ Fatal(...any) }, api client.Client, key client.ObjectKey) {
	var rel v1alpha1.Release
	if err := api.Get(context.Background(), key, &rel); err != nil {
		t.Fatal(err)
	}
	c.versions = append(c.versions, &rel)
}

func version(rel *v1alpha1.Release) int {
	n, _ := strconv.Atoi(rel.ResourceVersion)
	return n
}

// TestGetNeverBehind: whatever the cache's lag, and whoever else writes
// the Release, a reconcile never reads a Release older than the
// operator's last write of it, and it reads the API server only when the
// cache shows a version that write replaced (or after a conflict).
func TestGetNeverBehind(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		scheme := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		key := types.NamespacedName{Namespace: "shop", Name: "web"}
		api := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.Release{}).
			WithObjects(&v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: "u1"}}).Build()
		cache := &laggingCache{Client: api}
		cache.record(t, api, key)
		cache.shown = 1
		var live int
		reader := client.Reader(readerFunc(func(ctx context.Context, k client.ObjectKey, obj client.Object) error {
			live++
			return api.Get(ctx, k, obj)
		}))
		r := &Reconciler{Client: cache, Reader: reader}
		ctx := context.Background()
		lastOwn := 0 // the version of the operator's last successful write
		for i := range rapid.IntRange(1, 40).Draw(t, "actions") {
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0: // a reconcile: read, then write the status
				var rel v1alpha1.Release
				before := live
				if err := r.get(ctx, key, &rel); err != nil {
					t.Fatalf("get: %v", err)
				}
				if version(&rel) < lastOwn {
					t.Fatalf("read version %d, older than the operator's last write %d", version(&rel), lastOwn)
				}
				if live > before && cache.shown == len(cache.versions) && !cache.versions[cache.shown-1].Status.Rollout.Unobserved &&
					rel.ResourceVersion != cache.versions[cache.shown-1].ResourceVersion {
					t.Fatalf("read the API server while the cache was current")
				}
				rel.Status.Rollout.Message = "own " + strconv.Itoa(i)
				err := r.update(ctx, &rel, true)
				switch {
				case err == nil:
					lastOwn = version(&rel)
					cache.record(t, api, key)
				case !apierrors.IsConflict(err):
					t.Fatalf("update: %v", err)
				}
			case 1: // someone else writes
				var rel v1alpha1.Release
				if err := api.Get(ctx, key, &rel); err != nil {
					t.Fatal(err)
				}
				rel.Labels = map[string]string{"edit": strconv.Itoa(i)}
				if err := api.Update(ctx, &rel); err != nil {
					t.Fatal(err)
				}
				cache.record(t, api, key)
			default: // the cache hears of some versions
				cache.shown += rapid.IntRange(0, len(cache.versions)-cache.shown).Draw(t, "heard")
			}
		}
	})
}

type readerFunc func(ctx context.Context, key client.ObjectKey, obj client.Object) error

func (f readerFunc) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return f(ctx, key, obj)
}

func (f readerFunc) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("not used")
}

// TestPendingState: the state in memory is reconciled from while the
// stored status is the one it follows, a change of the spec alone
// included; a status someone else wrote, or another Release under the
// same name, is reconciled from as stored.
func TestPendingState(t *testing.T) {
	stored := strategy.NewState("v1", "v2")
	stored.Phase, stored.Desired = strategy.PhaseProgressing, strategy.Allocation{Weight: 20, StableCapacity: 90, CanaryCapacity: 30}
	rel := &v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", ResourceVersion: "5", Generation: 2},
		Status: v1alpha1.ReleaseStatus{Rollout: stored}}
	newer := stored
	newer.Desired.StableCapacity = 80
	var p pendingStates
	p.keep(rel, &newer)

	specEdited := rel.DeepCopy()
	specEdited.ResourceVersion, specEdited.Generation = "6", 3
	wiped := rel.DeepCopy()
	wiped.ResourceVersion, wiped.Status = "7", v1alpha1.ReleaseStatus{}
	recreated := rel.DeepCopy()
	recreated.UID = "u2"
	for _, tc := range []struct {
		name string
		rel  *v1alpha1.Release
		want int32 // the stable side's desired capacity reconciled from
	}{
		{"unchanged", rel, 80},
		{"spec edited", specEdited, 80},
		{"status wiped", wiped, 0},
		{"re-created", recreated, 90},
	} {
		if got := p.state(tc.rel).Desired.StableCapacity; got != tc.want {
			t.Errorf("%s: reconciled from stable capacity %d, want %d", tc.name, got, tc.want)
		}
	}
	p.forget(client.ObjectKeyFromObject(rel))
	if got := p.state(rel).Desired.StableCapacity; got != 90 {
		t.Errorf("forgotten: stable capacity %d, want the stored 90", got)
	}
}

// TestDeferrable: only a change of the capacity record while a rollout
// runs waits for the next write.
func TestDeferrable(t *testing.T) {
	base := strategy.NewState("v1", "v2")
	base.Phase, base.Desired = strategy.PhaseProgressing, strategy.Allocation{Weight: 20, StableCapacity: 90, CanaryCapacity: 30}
	status := func(edit func(s *strategy.State)) *v1alpha1.ReleaseStatus {
		s := *base.DeepCopy()
		edit(&s)
		return &v1alpha1.ReleaseStatus{Rollout: s}
	}
	prev := status(func(*strategy.State) {})
	got := map[string]bool{}
	for name, edit := range map[string]func(s *strategy.State){
		"stable released": func(s *strategy.State) { s.Desired.StableCapacity, s.HopAt = 80, metav1.NowMicro() },
		"canary prepared": func(s *strategy.State) { s.Desired.CanaryCapacity = 40 },
		"weight moved":    func(s *strategy.State) { s.Desired.Weight = 30 },
		"phase changed":   func(s *strategy.State) { s.Desired.StableCapacity, s.Phase = 80, strategy.PhasePaused },
		"succeeded":       func(s *strategy.State) { s.Desired.StableCapacity, s.Phase = 0, strategy.PhaseSucceeded },
	} {
		got[name] = deferrable(prev, status(edit))
	}
	want := map[string]bool{"stable released": true, "canary prepared": true}
	for k := range got {
		if !want[k] {
			want[k] = false
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("deferrable (-want +got):\n%s", d)
	}
}

// TestFreshSteady: the operator's own writes, the cache showing each a
// little late, cost no read of the API server but the one that finds the
// cache behind; once the cache shows the write, reads come from it.
func TestFreshSteady(t *testing.T) {
	rel := func(rv string) *v1alpha1.Release {
		return &v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", ResourceVersion: rv}}
	}
	var f fresh
	steps := []struct {
		do   func()
		read string
		want bool // behind
	}{
		{read: "1", want: false},                     // nothing known: the cache is trusted
		{do: func() { f.wrote(rel("2"), "1") }},      // own write 1 -> 2
		{read: "1", want: true},                      // the cache shows the replaced version
		{do: func() { f.readLive(rel("2"), "1") }},   // read live: 2
		{read: "2", want: false},                     // caught up
		{do: func() { f.wrote(rel("3"), "2") }},      // own write 2 -> 3
		{read: "3", want: false},                     // the cache shows it at once
		{read: "5", want: false},                     // someone else's later version
		{do: func() { f.conflicted(rel("5"), "5") }}, // own write based on 5 conflicted
		{read: "5", want: true},
		{do: func() { f.readLive(rel("7"), "5") }}, // the API server holds 7
		{read: "6", want: true},                    // catching up: 6 is unknown
		{read: "7", want: false},
		{read: "8", want: false},
	}
	for i, st := range steps {
		if st.do != nil {
			st.do()
			continue
		}
		if got := f.behind(rel(st.read)); got != st.want {
			t.Errorf("step %d: version %s behind %v, want %v", i, st.read, got, st.want)
		}
	}
}
