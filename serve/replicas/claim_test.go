package replicas_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/replicas"
)

var (
	owner1 = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "uid-1"}
	owner2 = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web-copy", UID: "uid-2"}
)

// claimOf reads the claim on a Deployment and its resourceVersion and
// replica count, once its controller has rolled it out: a change of a
// Deployment's annotations, as a claim, is a new generation, which the
// controller answers with a write of its status.
func claimOf(t *testing.T, cs kubernetes.Interface, ns, name string) (rollout.Owner, string, int32) {
	t.Helper()
	d := waitRolledOut(t, cs, ns, name)
	var o rollout.Owner
	if raw, ok := d.Annotations[replicas.ClaimAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			t.Fatalf("claim %q: %v", raw, err)
		}
	}
	return o, d.ResourceVersion, *d.Spec.Replicas
}

// TestClaimOnKube, for every flavour and kind: a claim on the workload;
// the holder claims again writing nothing; a second claimant is refused
// with a *ClaimedError naming the holder and writes nothing (no claim, no
// capacity, no deploy); a stale claim is taken over only by naming its
// owner; release frees the workload, and replicas are never changed by a
// claim.
func TestClaimOnKube(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		for _, kind := range []string{"Deployment", "Scalable"} {
			t.Run(kind, func(t *testing.T) {
				ns := k.env.Namespace(t)
				ctx := context.Background()
				cs := k.env.Kube
				deployment(t, cs, ns, "web", 3)
				build := k.Deployment
				if kind == "Scalable" {
					build = k.Scalable
				}
				s1, s2 := build(ns, "web", 4), build(ns, "web", 4)
				if err := s1.Claim(ctx, owner1, rollout.Owner{}); err != nil {
					t.Fatal(err)
				}
				got, rv, n := claimOf(t, cs, ns, "web")
				if got != owner1 || n != 3 {
					t.Fatalf("claim %v at %d replicas, want %v at 3", got, n, owner1)
				}
				if err := s1.Claim(rollout.WithReads(ctx), owner1, rollout.Owner{}); err != nil {
					t.Fatal(err)
				}
				if _, rv2, _ := claimOf(t, cs, ns, "web"); rv2 != rv {
					t.Errorf("claiming a held claim wrote the workload")
				}

				err := s2.Claim(ctx, owner2, rollout.Owner{})
				var ce *rollout.ClaimedError
				if !errors.As(err, &ce) || !errors.Is(err, rollout.ErrClaimed) || ce.Owner != owner1 {
					t.Fatalf("second claimant: %v, want a *ClaimedError naming %v", err, owner1)
				}
				// The error says where the claim is and how to release it.
				if ce.Annotation != replicas.ClaimAnnotation || ce.On.Namespace != ns || ce.On.Name != "web" || ce.On.Group != "apps" {
					t.Errorf("second claimant: annotation %q on %+v, want %s on the workload", ce.Annotation, ce.On, replicas.ClaimAnnotation)
				}
				if arg := ce.On.Arg(); arg != "deployment.apps/web" && arg != "deployments.apps/web" {
					t.Errorf("second claimant: the workload as kubectl names it: %q", arg)
				}
				for _, want := range []string{"annotation " + replicas.ClaimAnnotation, "kubectl upshift claims release " + ce.On.Arg() + " -n " + ns + " --holder " + string(owner1.UID),
					"kubectl annotate -n " + ns + " " + ce.On.Arg() + " " + replicas.ClaimAnnotation + "-"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("second claimant's error %q does not say %q", err, want)
					}
				}
				if err := s2.SetCapacity(rollout.WithOwner(ctx, owner2), rollout.CapacityRequest{Percent: 0}); !errors.As(err, &ce) {
					t.Errorf("second claimant's SetCapacity: %v, want a *ClaimedError", err)
				}
				if kind == "Deployment" {
					d, err := s2.Deployer(replicas.Image("app", func(rev string) string { return "example.com/app:" + rev }))
					if err != nil {
						t.Fatal(err)
					}
					if err := d.Deploy(rollout.WithOwner(ctx, owner2), "v3"); !errors.As(err, &ce) {
						t.Errorf("second claimant's Deploy: %v, want a *ClaimedError", err)
					}
					if err := d.Claim(ctx, owner2, rollout.Owner{}); !errors.As(err, &ce) {
						t.Errorf("second claimant's Deployer.Claim: %v, want a *ClaimedError", err)
					}
				}
				if got, rv2, n := claimOf(t, cs, ns, "web"); rv2 != rv || got != owner1 || n != 3 {
					t.Errorf("after the refusals: claim %v, %d replicas, resourceVersion %s -> %s; want nothing written", got, n, rv, rv2)
				}
				if err := s1.SetCapacity(rollout.WithOwner(ctx, owner1), rollout.CapacityRequest{Percent: 50}); err != nil {
					t.Errorf("the holder's SetCapacity: %v", err)
				}

				recreated := owner1
				recreated.UID = "uid-1-recreated"
				if err := s2.Claim(ctx, owner2, recreated); !errors.Is(err, rollout.ErrClaimed) {
					t.Errorf("replace naming another owner: %v, want ErrClaimed", err)
				}
				if err := s2.Claim(ctx, owner2, owner1); err != nil {
					t.Fatalf("take over: %v", err)
				}
				if err := s1.SetCapacity(rollout.WithOwner(ctx, owner1), rollout.CapacityRequest{Percent: 100}); !errors.As(err, &ce) || ce.Owner != owner2 {
					t.Errorf("the old owner's write after the takeover: %v, want a *ClaimedError naming %v", err, owner2)
				}
				if got, _, n := claimOf(t, cs, ns, "web"); got != owner2 || n != 2 {
					t.Errorf("after the takeover: claim %v at %d replicas, want %v at 2", got, n, owner2)
				}
				if err := s1.Release(ctx, owner1); err != nil {
					t.Fatal(err)
				}
				if got, _, _ := claimOf(t, cs, ns, "web"); got != owner2 {
					t.Errorf("a non-holder's Release left %v", got)
				}
				if err := s2.Release(ctx, owner2); err != nil {
					t.Fatal(err)
				}
				if got, _, n := claimOf(t, cs, ns, "web"); !got.IsZero() || n != 2 {
					t.Errorf("after Release: claim %v at %d replicas, want none at 2", got, n)
				}
				if err := cs.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := s2.Release(ctx, owner2); err != nil {
					t.Errorf("Release of a deleted workload: %v", err)
				}
			})
		}
	})
}

// TestClaimRaceOnKube: two claimants with their own clients race for a
// free workload, many times: exactly one wins each race and the other is
// refused naming it.
func TestClaimRaceOnKube(t *testing.T) {
	forEachFlavour(t, func(t *testing.T, k kinds) {
		ns := k.env.Namespace(t)
		ctx := context.Background()
		other := k.For(k.env.Config)
		for i := range 8 {
			name := fmt.Sprintf("web-%d", i)
			deployment(t, k.env.Kube, ns, name, 2)
			setters := []*replicas.Setter{k.Deployment(ns, name, 2), other.Deployment(ns, name, 2)}
			owners := []rollout.Owner{owner1, owner2}
			errs := make([]error, 2)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for j := range setters {
				wg.Go(func() {
					<-start
					errs[j] = setters[j].Claim(ctx, owners[j], rollout.Owner{})
				})
			}
			close(start)
			wg.Wait()
			got, _, _ := claimOf(t, k.env.Kube, ns, name)
			winner := 0
			if got == owner2 {
				winner = 1
			}
			var ce *rollout.ClaimedError
			switch {
			case got.IsZero():
				t.Fatalf("race %d: nobody holds the claim (%v)", i, errs)
			case errs[winner] != nil:
				t.Errorf("race %d: the winner failed: %v", i, errs[winner])
			case !errors.As(errs[1-winner], &ce) || ce.Owner != got:
				t.Errorf("race %d: the loser got %v, want a *ClaimedError naming %v", i, errs[1-winner], got)
			}
		}
	})
}
