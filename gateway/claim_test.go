package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var (
	owner1 = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "uid-1"}
	owner2 = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web-copy", UID: "uid-2"}
)

func readRoute(t *testing.T, c client.Client, ns, name string) *gwv1.HTTPRoute {
	t.Helper()
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &rt); err != nil {
		t.Fatal(err)
	}
	return &rt
}

func holder(t *testing.T, rt *gwv1.HTTPRoute, a, b gateway.Backend) rollout.Owner {
	t.Helper()
	raw, ok := rt.Annotations[gateway.ClaimAnnotation(rt.Namespace, a, b)]
	if !ok {
		return rollout.Owner{}
	}
	var o rollout.Owner
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		t.Fatalf("claim %q: %v", raw, err)
	}
	return o
}

// TestRouterClaimOnKube: a claim on the route rule; the holder claims
// again writing nothing; a second claimant is refused with a
// *ClaimedError naming the holder, and neither its claim, its weights nor
// its state are written; release by the holder frees the rule.
func TestRouterClaimOnKube(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	newRoute(t, env.Client, ns, "web")
	ref := gateway.RouteRef{Namespace: ns, Name: "web"}
	cfg := gateway.Config{Routes: []gateway.RouteRef{ref}, A: stable, B: canary}
	r1, err := gateway.NewRouter(env.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := gateway.NewRouterForClientset(env.Gateway, cfg)
	if err != nil {
		t.Fatal(err)
	}

	if err := r1.Claim(ctx, owner1, rollout.Owner{}); err != nil {
		t.Fatal(err)
	}
	rt := readRoute(t, env.Client, ns, "web")
	if got := holder(t, rt, stable, canary); got != owner1 {
		t.Fatalf("holder %v, want %v", got, owner1)
	}
	if got := holder(t, rt, canary, stable); got != owner1 {
		t.Errorf("the claim depends on the order of the backends: %v", got)
	}
	writes := r1.Counts().Writes
	if err := r1.Claim(rollout.WithReads(ctx), owner1, rollout.Owner{}); err != nil {
		t.Fatal(err)
	}
	if n := r1.Counts().Writes; n != writes {
		t.Errorf("claiming a held claim wrote %d times", n-writes)
	}
	if err := r1.SetWeights(rollout.WithOwner(ctx, owner1), rollout.Weights{A: 80, B: 20}); err != nil {
		t.Fatal(err)
	}
	rv := readRoute(t, env.Client, ns, "web").ResourceVersion

	err = r2.Claim(ctx, owner2, rollout.Owner{})
	var ce *rollout.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, rollout.ErrClaimed) || ce.Owner != owner1 || !strings.Contains(ce.Object, "HTTPRoute "+ns+"/web") {
		t.Fatalf("second claimant: %v, want a *ClaimedError naming %v and the route", err, owner1)
	}
	// The error says where the claim is and how to release it.
	wantOn := rollout.ObjectRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: ns, Name: "web"}
	key := gateway.ClaimAnnotation(ns, stable, canary)
	if diff := cmp.Diff(wantOn, ce.On); diff != "" || ce.Annotation != key {
		t.Errorf("second claimant: annotation %q, want %q; object (-want +got):\n%s", ce.Annotation, key, diff)
	}
	for _, want := range []string{key, "kubectl upshift claims release httproute.gateway.networking.k8s.io/web -n " + ns + " --holder " + string(owner1.UID),
		"kubectl annotate -n " + ns + " httproute.gateway.networking.k8s.io/web " + key + "-"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second claimant's error %q does not say %q", err, want)
		}
	}
	err = r2.SetWeights(rollout.WithOwner(ctx, owner2), rollout.Weights{A: 100})
	if !errors.As(err, &ce) || ce.Owner != owner1 {
		t.Errorf("second claimant's SetWeights: %v, want a *ClaimedError", err)
	}
	store := gateway.NewAnnotationStoreForClientset(env.Gateway, ref)
	store.Owner = owner2
	if err := store.Save(ctx, strategy.NewState("v1", "v3")); !errors.As(err, &ce) || ce.Owner != owner1 || ce.Annotation != key || ce.On != wantOn {
		t.Errorf("second claimant's Save: %v, want a *ClaimedError naming the claim annotation %s on the route", err, key)
	}
	if err := gateway.NewAnnotationStore(env.Client, ref).Save(ctx, strategy.NewState("v1", "v3")); !errors.Is(err, rollout.ErrClaimed) {
		t.Errorf("an ownerless Save on a claimed route: %v, want ErrClaimed", err)
	}
	rt = readRoute(t, env.Client, ns, "web")
	if rt.ResourceVersion != rv {
		t.Errorf("the refused claimant wrote the route (resourceVersion %s -> %s)", rv, rt.ResourceVersion)
	}
	if w := weightsIn(rt); w != (rollout.Weights{A: 80, B: 20}) {
		t.Errorf("weights %v, want 80/20", w)
	}
	store.Owner = owner1
	if err := store.Save(ctx, strategy.NewState("v1", "v2")); err != nil {
		t.Errorf("the holder's Save: %v", err)
	}

	if err := r2.Release(ctx, owner2); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, readRoute(t, env.Client, ns, "web"), stable, canary); got != owner1 {
		t.Errorf("a non-holder's Release changed the claim to %v", got)
	}
	if err := r1.Release(ctx, owner1); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, readRoute(t, env.Client, ns, "web"), stable, canary); !got.IsZero() {
		t.Errorf("holder %v after Release", got)
	}
	if err := r2.Claim(ctx, owner2, rollout.Owner{}); err != nil {
		t.Errorf("claim after release: %v", err)
	}
}

// TestRouterClaimTakeOverOnKube: a stale claim is replaced only when the
// caller names its exact owner.
func TestRouterClaimTakeOverOnKube(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	newRoute(t, env.Client, ns, "web")
	cfg := gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: "web"}}, A: stable, B: canary}
	r, err := gateway.NewRouter(env.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Claim(ctx, owner1, rollout.Owner{}); err != nil {
		t.Fatal(err)
	}
	recreated := owner1
	recreated.UID = "uid-1-recreated" // the same name, another object
	if err := r.Claim(ctx, owner2, recreated); !errors.Is(err, rollout.ErrClaimed) {
		t.Fatalf("replace naming another owner: %v, want ErrClaimed", err)
	}
	if err := r.Claim(ctx, owner2, owner1); err != nil {
		t.Fatalf("take over: %v", err)
	}
	if got := holder(t, readRoute(t, env.Client, ns, "web"), stable, canary); got != owner2 {
		t.Errorf("holder %v, want %v", got, owner2)
	}
	if err := r.Claim(ctx, rollout.Owner{Name: "x"}, rollout.Owner{}); !errors.Is(err, gateway.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Errorf("an owner without a uid: %v, want a Permanent ErrInvalid", err)
	}
}

// TestRouterClaimPerRuleOnKube: two rollouts on different rules of one
// route hold a claim each; neither refuses the other.
func TestRouterClaimPerRuleOnKube(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rt := newRoute(t, env.Client, ns, "web")
	api := gateway.Backend{Name: "api", Port: 80}
	apiCanary := gateway.Backend{Name: "api-canary", Port: 80}
	second := *rt.Spec.Rules[0].DeepCopy()
	second.BackendRefs[0].Name, second.BackendRefs[1].Name = gwv1.ObjectName(api.Name), gwv1.ObjectName(apiCanary.Name)
	p := "/api"
	second.Matches = []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Value: &p}}}
	rt = readRoute(t, env.Client, ns, "web")
	rt.Spec.Rules = append(rt.Spec.Rules, second)
	if err := env.Client.Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	refs := []gateway.RouteRef{{Namespace: ns, Name: "web"}}
	web, err := gateway.NewRouter(env.Client, gateway.Config{Routes: refs, A: stable, B: canary})
	if err != nil {
		t.Fatal(err)
	}
	apiRouter, err := gateway.NewRouter(env.Client, gateway.Config{Routes: refs, A: api, B: apiCanary})
	if err != nil {
		t.Fatal(err)
	}
	if err := web.Claim(ctx, owner1, rollout.Owner{}); err != nil {
		t.Fatal(err)
	}
	if err := apiRouter.Claim(ctx, owner2, rollout.Owner{}); err != nil {
		t.Fatalf("the other rule: %v", err)
	}
	if err := apiRouter.SetWeights(rollout.WithOwner(ctx, owner2), rollout.Weights{A: 50, B: 50}); err != nil {
		t.Fatal(err)
	}
	rt = readRoute(t, env.Client, ns, "web")
	got := []rollout.Owner{holder(t, rt, stable, canary), holder(t, rt, api, apiCanary)}
	if diff := cmp.Diff([]rollout.Owner{owner1, owner2}, got); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}
}

// TestRouterClaimRaceOnKube: two claimants with their own clients race for
// a free rule, many times: exactly one wins each race, the other is
// refused naming it, and the route names the winner.
func TestRouterClaimRaceOnKube(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	for i := range 8 {
		name := fmt.Sprintf("web-%d", i)
		newRoute(t, env.Client, ns, name)
		cfg := gateway.Config{Routes: []gateway.RouteRef{{Namespace: ns, Name: name}}, A: stable, B: canary}
		ra, err := gateway.NewRouter(env.Client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := gateway.NewRouterForClientset(env.Gateway, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for k, c := range []struct {
			r *gateway.Router
			o rollout.Owner
		}{{ra, owner1}, {rb, owner2}} {
			wg.Go(func() {
				<-start
				errs[k] = c.r.Claim(ctx, c.o, rollout.Owner{})
			})
		}
		close(start)
		wg.Wait()
		got := holder(t, readRoute(t, env.Client, ns, name), stable, canary)
		winner, loser := 0, 1
		if got == owner2 {
			winner, loser = 1, 0
		}
		var ce *rollout.ClaimedError
		switch {
		case got.IsZero():
			t.Fatalf("race %d: nobody holds the claim (%v)", i, errs)
		case errs[winner] != nil:
			t.Errorf("race %d: the winner %v failed: %v", i, got, errs[winner])
		case !errors.As(errs[loser], &ce) || ce.Owner != got:
			t.Errorf("race %d: the loser got %v, want a *ClaimedError naming %v", i, errs[loser], got)
		}
	}
}
