package replicas_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

func waitCached(t *testing.T, s *replicas.Setter) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !replicas.Cached(s) {
		if time.Now().After(deadline) {
			t.Fatal("the workload was not read from the watch within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadsFromTheWatch: while the Setter or its Deployer is subscribed
// (one watch for both), Capacity, Revision, SetCapacity and Deploy make no
// GET: right after its own write the Setter reports it, another writer's
// replicas are reported once the watch delivered them; once every
// subscription has ended, reads are GETs again.
func TestReadsFromTheWatch(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		env := kubetest.Get(t)
		ns := env.Namespace(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Pods ready 2 s after they start: right after a scale-up, the
		// Setter cannot be settled.
		deploymentWith(t, env.Kube, ns, "web", 4, map[string]string{kubetest.AnnotationReadyAfter: "2s"})
		waitRolledOut(t, env.Kube, ns, "web")
		s := k.Deployment(ns, "web", 4)
		d := deployer(t, s)
		w := kubetest.NewWaker()
		if err := s.Notify(ctx, w.Wake); err != nil {
			t.Fatal(err)
		}
		deployerCtx, endDeployer := context.WithCancel(ctx)
		if err := d.Notify(deployerCtx, func() {}); err != nil {
			t.Fatal(err)
		}
		waitWatching(t, s, 1)
		waitCached(t, s)
		before := s.Counts()

		for _, p := range []int32{50, 75, 0} {
			w.Drain()
			if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
				t.Fatal(err)
			}
			// Right after its own write the Setter reports it. A
			// scale-up (to 75%) cannot have settled yet; a scale-down
			// may have, once the watch delivered the controller's
			// answer.
			if st, err := s.Capacity(ctx); err != nil || st.Capacity != p || p == 75 && st.Settled {
				t.Fatalf("right after setting %d%%: %+v, %v", p, st, err)
			}
			// The controller's answers wake the Setter until it is
			// settled.
			for settled := false; !settled; {
				woken(t, w, fmt.Sprintf("the controller's answer to %d%%", p))
				st, err := s.Capacity(ctx)
				if err != nil || st.Capacity != p {
					t.Fatalf("%d%%: %+v, %v", p, st, err)
				}
				settled = st.Settled
			}
		}
		if err := d.Deploy(ctx, "v2"); err != nil {
			t.Fatal(err)
		}
		if st, err := d.Revision(ctx, "v2"); err != nil || st.Revision != "v2" {
			t.Fatalf("right after deploying v2: %+v, %v", st, err)
		}
		w.After(t, "replicas written by someone else", func() {
			other := k.Deployment(ns, "web", 4)
			if err := other.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
				t.Fatal(err)
			}
		})
		if st, err := s.Capacity(ctx); err != nil || st.Capacity != 100 {
			t.Fatalf("after another writer's 100%%: %+v, %v", st, err)
		}
		// Another writer's annotation and the Setter's capacity, one
		// right after the other: whether the Setter's read was stale (a
		// conflict, then a GET) or not, both land.
		updateDeployment(t, env.Kube, ns, "web", func(d *appsv1.Deployment) { d.Annotations["note"] = "theirs" })
		if err := s.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
			t.Fatal(err)
		}
		if dep := getDeployment(t, env.Kube, ns, "web"); dep.Annotations["note"] != "theirs" || *dep.Spec.Replicas != 2 {
			t.Fatalf("after a racing write: annotations %v, %d replicas", dep.Annotations, *dep.Spec.Replicas)
		}
		c := s.Counts()
		t.Logf("a write right after another writer's: %d conflicts", c.Conflicts)
		if c.Reads != before.Reads+c.Conflicts || c.CachedReads < before.CachedReads+8 || c.Watches != 1 {
			t.Fatalf("with live subscriptions: %+v, then %+v: want no GET (but one per conflict) and 1 watch", before, c)
		}

		endDeployer()
		if _, err := s.Capacity(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.Counts().Reads; got != c.Reads {
			t.Fatalf("%d GETs with the Setter still subscribed, want %d", got, c.Reads)
		}
		cancel()
		waitWatching(t, s, 0)
		if _, err := s.Capacity(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := s.Counts().Reads; got != c.Reads+1 {
			t.Fatalf("%d GETs after every subscription ended, want %d", got, c.Reads+1)
		}
	})
}

// TestUpgradeReadsFromTheWatch: an upgrade of two Deployments reconciled
// with live subscriptions of the Setters and their Deployers (one watch
// per Deployment) reads them from the watch: a GET per write that lost a
// race with the Deployment controller at most, not one per reconcile.
func TestUpgradeReadsFromTheWatch(t *testing.T) {
	g := newE2E(t, upgradeStrategy())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []rollout.Notifier{g.runner.A.(rollout.Notifier), g.runner.B.(rollout.Notifier),
		g.runner.RevisionA.(rollout.Notifier), g.runner.RevisionB.(rollout.Notifier)} {
		if err := n.Notify(ctx, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := g.runner.A.(*replicas.Setter), g.runner.B.(*replicas.Setter)
	waitCached(t, a)
	waitCached(t, b)
	// The controller's writes reach the watch before the next reconcile,
	// as they do between the reconciles of a Run woken by them.
	g.settle = func() {
		g.watch.caughtUp(t, g.env.Kube, g.ns)
		for _, s := range []*replicas.Setter{a, b} {
			waitDelivered(t, g, s)
		}
	}
	s := strategy.State{}.Retarget("v1", g.clock.Now())
	s = s.Retarget("v2", g.clock.Now())
	s = g.run(t, s, nil)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" {
		t.Fatalf("v1 -> v2 ended %s on %s: %s", s.Phase, s.StableRevision, s.Message)
	}
	ca, cb := a.Counts(), b.Counts()
	t.Logf("%d reconciles: A %+v, B %+v", g.n, ca, cb)
	for _, c := range []replicas.Counts{ca, cb} {
		if c.Reads > 1+c.Conflicts || c.CachedReads < g.n || c.Watches != 1 {
			t.Fatalf("%d reconciles: %+v: want at most 1 GET and one per conflict, a read from the watch per reconcile, 1 watch", g.n, c)
		}
	}
}

// waitDelivered waits until s's watch has delivered the current version
// of its Deployment.
func waitDelivered(t *testing.T, g *e2e, s *replicas.Setter) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, name := range []string{"web-a", "web-b"} {
		if replicas.Name(s) != name {
			continue
		}
		rv := getDeployment(t, g.env.Kube, g.ns, name).ResourceVersion
		for replicas.CachedVersion(s) != rv {
			if time.Now().After(deadline) {
				t.Fatalf("the watch of %s never delivered resourceVersion %s (has %s)", name, rv, replicas.CachedVersion(s))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
