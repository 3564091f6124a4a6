package main_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
)

// shardLabel is the label the shards of TestShards select Releases by.
const shardLabel = "example.com/shard"

// TestShards: two operator replicas, each with -release-selector naming
// one shard and its own Lease, share one namespace. Each reconciles the
// Releases of its shard and none of the other's, both lead at once, a
// Release relabelled into the other shard is rolled out by that shard
// (its claims are the Release's, so they carry over), and a Release that
// no shard selects is left alone.
func TestShards(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	strat := incremental(50, 300*time.Millisecond)
	webRel := w.release("v1", strat)
	webRel.Labels = map[string]string{shardLabel: "a"}
	create(t, w.c, webRel)
	// A second application, in shard b, and a third in none.
	for _, app := range []struct{ name, shard string }{{"api", "b"}, {"docs", ""}} {
		for _, obj := range fleetObjects(w.ns, app.name, *strat.Incremental) {
			if rel, ok := obj.(*v1alpha1.Release); ok {
				rel.Spec.Replicas = 2
				if app.shard != "" {
					rel.Labels = map[string]string{shardLabel: app.shard}
				}
			}
			if d, ok := obj.(*appsv1.Deployment); ok && *d.Spec.Replicas > 0 {
				d.Spec.Replicas = new(int32(2))
			}
			create(t, w.c, obj)
		}
	}
	a := w.start("shard-a", "-release-selector", shardLabel+"=a")
	b := w.start("shard-b", "-release-selector", shardLabel+"=b")

	get := func(name string) *v1alpha1.Release {
		t.Helper()
		var rel v1alpha1.Release
		if err := w.c.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, &rel); err != nil {
			t.Fatal(err)
		}
		return &rel
	}
	waitReleased := func(name, revision string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			rel := get(name)
			if released(rel) && rel.Spec.Revision == revision && rel.Status.ObservedGeneration == rel.Generation {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not Released at %s: status %+v", name, revision, rel.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	edit := func(name string, change func(*v1alpha1.Release)) {
		t.Helper()
		rel := get(name)
		change(rel)
		if err := w.c.Update(ctx, rel); err != nil {
			t.Fatal(err)
		}
	}
	waitReleased("web", "v1")
	waitReleased("api", "v1")
	for _, name := range []string{"web", "api"} {
		edit(name, func(r *v1alpha1.Release) { r.Spec.Revision = "v2" })
	}
	waitReleased("web", "v2")
	waitReleased("api", "v2")

	reconciled := func(o *operator) []string {
		var names []string
		for _, name := range []string{"web", "api", "docs"} {
			if strings.Contains(o.scrape(t), `release="`+name+`"`) {
				names = append(names, name)
			}
		}
		return names
	}
	if got := reconciled(a); !slices.Equal(got, []string{"web"}) {
		t.Errorf("shard a reconciled %v, want [web]", got)
	}
	if got := reconciled(b); !slices.Equal(got, []string{"api"}) {
		t.Errorf("shard b reconciled %v, want [api]", got)
	}
	// Each shard holds a Lease of its own.
	var leases coordinationv1.LeaseList
	if err := w.c.List(ctx, &leases, client.InNamespace(w.ns)); err != nil {
		t.Fatal(err)
	}
	holders := map[string]string{}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			holders[l.Name] = *l.Spec.HolderIdentity
		}
	}
	if len(holders) != 2 {
		t.Errorf("held Leases %v, want two (one per shard)", holders)
	}
	// docs is in no shard: no one adopted it.
	if rel := get("docs"); rel.Status.ObservedGeneration != 0 || len(rel.Finalizers) > 0 {
		t.Errorf("a Release in no shard was reconciled: finalizers %v, status %+v", rel.Finalizers, rel.Status)
	}

	// api moves to shard a, and is rolled out there.
	edit("api", func(r *v1alpha1.Release) { r.Labels[shardLabel] = "a"; r.Spec.Revision = "v3" })
	waitReleased("api", "v3")
	if got := reconciled(a); !slices.Equal(got, []string{"web", "api"}) {
		t.Errorf("after the move, shard a reconciled %v, want [web api]", got)
	}
	if d := get("api").Status.Rollout; d.StableRevision != id("v3") {
		t.Errorf("api stable at %s, want %s", d.StableRevision, id("v3"))
	}
}
