package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

var (
	ownerOne = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "one", UID: "uid-1"}
	ownerTwo = rollout.Owner{Kind: "Release", Namespace: "shop", Name: "two", UID: "uid-2"}
)

// claimRig is one route and two sides, each a fake.Capacity that also
// deploys, shared by the Runners of two owners.
type claimRig struct {
	clock  *fake.Clock
	router *fake.Router
	a, b   *fake.Capacity
}

func newClaimRig() *claimRig {
	clk := fake.NewClock(t0)
	g := &claimRig{clock: clk, router: fake.NewRouter(clk), a: fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 10, Percent: 100}), b: fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 10, Percent: 0})}
	g.a.SetRevision("v1")
	return g
}

func (g *claimRig) runner(o rollout.Owner) *rollout.Runner {
	return &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 20, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 100},
		Router:   g.router, A: g.a, B: g.b, RevisionA: g.a, RevisionB: g.b, Clock: g.clock, Owner: o,
	}
}

// writes counts the successful writes (weights, capacity, deploys) made
// for each owner.
func (g *claimRig) writes() map[string]int {
	n := map[string]int{}
	var calls []fake.Call
	calls = append(calls, g.router.History()...)
	calls = append(calls, g.a.History()...)
	calls = append(calls, g.b.History()...)
	for _, c := range calls {
		switch c.Op {
		case "SetWeights", "SetCapacity", "Deploy":
			if c.Err == nil {
				n[c.Owner.Name]++
			}
		}
	}
	return n
}

// reconcileUntil reconciles s with r, advancing the clock by each requeue,
// until done(s) or n reconciles.
func reconcileUntil(t *testing.T, r *rollout.Runner, clk *fake.Clock, s strategy.State, n int, done func(strategy.State) bool) strategy.State {
	t.Helper()
	for i := 0; i < n && !done(s); i++ {
		next, requeue, err := r.ReconcileAt(context.Background(), s, clk.Now())
		if err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		s = next
		clk.Advance(max(requeue, 100*time.Millisecond))
	}
	return s
}

func degraded(s strategy.State) metav1.Condition {
	for _, c := range s.Conditions {
		if c.Type == strategy.ConditionDegraded {
			return c
		}
	}
	return metav1.Condition{}
}

// TestRunnerClaimRefusesASecondOwner: a second Runner on the objects a
// first one moves (at 80/20) gets a *ClaimedError naming the first owner,
// reports Degraded with reason Claimed, and writes nothing: the route stays
// at 80/20, and the first rollout then completes.
func TestRunnerClaimRefusesASecondOwner(t *testing.T) {
	g := newClaimRig()
	one, two := g.runner(ownerOne), g.runner(ownerTwo)
	s1 := reconcileUntil(t, one, g.clock, strategy.NewState("v1", "v2"), 100, func(s strategy.State) bool {
		st, _ := g.router.Status()
		return st.Weights == rollout.Weights{A: 80, B: 20} && st.Accepted
	})
	for _, c := range []interface{ Claimant() rollout.Owner }{g.router, g.a, g.b} {
		if got := c.Claimant(); got != ownerOne {
			t.Fatalf("claimant %v, want %v", got, ownerOne)
		}
	}
	before := g.writes()

	s2, _, err := two.ReconcileAt(context.Background(), strategy.NewState("v1", "v3"), g.clock.Now())
	var ce *rollout.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, rollout.ErrClaimed) {
		t.Fatalf("second owner: err %v, want a *ClaimedError", err)
	}
	if ce.Owner != ownerOne {
		t.Errorf("ClaimedError.Owner %v, want %v", ce.Owner, ownerOne)
	}
	c := degraded(s2)
	if c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonClaimed || !strings.Contains(c.Message, "shop/one") || !strings.Contains(c.Message, "fake route") {
		t.Errorf("Degraded %+v, want True, reason Claimed, naming shop/one and the route", c)
	}
	if s2.Phase != "" || !s2.FailingSince.IsZero() {
		t.Errorf("refused state: phase %q failingSince %v, want not started and no failure", s2.Phase, s2.FailingSince)
	}
	if diff := cmp.Diff(before, g.writes()); diff != "" {
		t.Errorf("writes changed by the refused owner (-want +got):\n%s", diff)
	}
	if st, _ := g.router.Status(); st.Weights != (rollout.Weights{A: 80, B: 20}) {
		t.Errorf("route %v after the refusal, want 80/20", st.Weights)
	}

	s1 = reconcileUntil(t, one, g.clock, s1, 200, func(s strategy.State) bool { return s.Phase.Terminal() })
	if s1.Phase != strategy.PhaseSucceeded {
		t.Fatalf("first owner ended %s, want Succeeded", s1.Phase)
	}
	if n := g.writes()["two"]; n != 0 {
		t.Errorf("owner two wrote %d times", n)
	}
}

// TestRunnerReleaseLetsTheNextOwnerIn: after Release by the first owner, a
// second one claims every object.
func TestRunnerReleaseLetsTheNextOwnerIn(t *testing.T) {
	g := newClaimRig()
	one, two := g.runner(ownerOne), g.runner(ownerTwo)
	s1 := reconcileUntil(t, one, g.clock, strategy.NewState("v1", "v2"), 400, func(s strategy.State) bool { return s.Phase.Terminal() })
	if s1.Phase != strategy.PhaseSucceeded {
		t.Fatalf("first owner ended %s", s1.Phase)
	}
	if err := one.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Claimant() rollout.Owner }{g.router, g.a, g.b} {
		if got := c.Claimant(); !got.IsZero() {
			t.Fatalf("claimant %v after Release", got)
		}
	}
	// The second owner's rollout starts where the first left the world:
	// v2 stable on side B.
	s2 := strategy.NewState("v2", "v3")
	s2.StableSide = strategy.SideB
	s2 = reconcileUntil(t, two, g.clock, s2, 400, func(s strategy.State) bool { return s.Phase.Terminal() })
	if s2.Phase != strategy.PhaseSucceeded {
		t.Fatalf("second owner ended %s: %s", s2.Phase, s2.Message)
	}
	if got := g.router.Claimant(); got != ownerTwo {
		t.Errorf("claimant %v, want %v", got, ownerTwo)
	}
}

// TestRunnerTakesOverAStaleClaim: a claim whose owner OwnerGone reports
// gone is taken over; one whose owner lives is not, and a failing check is
// an error that takes nothing.
func TestRunnerTakesOverAStaleClaim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gone    func(context.Context, rollout.Owner) (bool, error)
		want    rollout.Owner
		wantErr error
	}{
		{"gone", func(_ context.Context, o rollout.Owner) (bool, error) { return o == ownerOne, nil }, ownerTwo, nil},
		{"alive", func(context.Context, rollout.Owner) (bool, error) { return false, nil }, ownerOne, rollout.ErrClaimed},
		{"no check", nil, ownerOne, rollout.ErrClaimed},
		{"check fails", func(context.Context, rollout.Owner) (bool, error) { return false, errors.New("api down") }, ownerOne, rollout.ErrClaimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newClaimRig()
			for _, c := range []interface{ SetClaimant(rollout.Owner) }{g.router, g.a, g.b} {
				c.SetClaimant(ownerOne) // left by a Release deleted without its finalizer
			}
			two := g.runner(ownerTwo)
			two.OwnerGone = tc.gone
			_, _, err := two.ReconcileAt(context.Background(), strategy.NewState("v1", "v2"), g.clock.Now())
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			for _, c := range []interface{ Claimant() rollout.Owner }{g.router, g.a, g.b} {
				if got := c.Claimant(); got != tc.want {
					t.Errorf("claimant %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestRunnerWithoutOwnerTakesNoClaim: the zero Owner claims nothing, and an
// idle state reads and claims nothing.
func TestRunnerWithoutOwnerTakesNoClaim(t *testing.T) {
	g := newClaimRig()
	r := g.runner(rollout.Owner{})
	reconcileUntil(t, r, g.clock, strategy.NewState("v1", "v2"), 5, func(strategy.State) bool { return false })
	if got := g.router.Claimant(); !got.IsZero() {
		t.Errorf("claimant %v without an owner", got)
	}
	g = newClaimRig()
	r = g.runner(ownerOne)
	if _, _, err := r.ReconcileAt(context.Background(), strategy.NewState("v1", "v1"), g.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if got := g.router.Claimant(); !got.IsZero() {
		t.Errorf("an idle state claimed: %v", got)
	}
}

// TestRunnerClaimsCheaply: once held, a claim is not written again.
func TestRunnerClaimsCheaply(t *testing.T) {
	g := newClaimRig()
	r := g.runner(ownerOne)
	reconcileUntil(t, r, g.clock, strategy.NewState("v1", "v2"), 10, func(strategy.State) bool { return false })
	var claims int
	for _, c := range g.router.History() {
		if c.Op == "Claim" {
			claims++
		}
	}
	if claims != 10 {
		t.Errorf("%d Claim calls in 10 reconciles, want 10 (each a check)", claims)
	}
	if got := g.router.Claimant(); got != ownerOne {
		t.Errorf("claimant %v", got)
	}
}

// TestOwnerValidate: an Owner needs a name and a UID.
func TestOwnerValidate(t *testing.T) {
	for _, tc := range []struct {
		o    rollout.Owner
		want string
	}{
		{rollout.Owner{}, ""},
		{rollout.Owner{Name: "web", UID: "u"}, ""},
		{rollout.Owner{UID: "u"}, "owner: name"},
		{rollout.Owner{Name: "web"}, "owner: uid"},
	} {
		err := tc.o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, rollout.ErrInvalid)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.o, err, tc.want)
		}
		r := &rollout.Runner{Strategy: strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 10}, Router: fake.NewRouter(nil), A: fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 1, Percent: 100}), B: fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 1, Percent: 0}), Owner: tc.o}
		if err := r.Validate(); (err != nil) != (tc.want != "") {
			t.Errorf("%+v: Runner.Validate() = %v", tc.o, err)
		}
	}
}

// ExampleRunner_claims: two rollouts on one route and its workloads. The
// first claims them; the second is refused, names the first, and writes
// nothing; once the first releases its claims (its object is deleted), the
// second may move them.
func ExampleRunner_claims() {
	clk := fake.NewClock(t0)
	router := fake.NewRouter(clk)
	a, b := fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 4, Percent: 100}), fake.NewCapacity(clk, fake.CapacityOptions{Replicas: 4, Percent: 0})
	a.SetRevision("v1")
	runner := func(o rollout.Owner) *rollout.Runner {
		return &rollout.Runner{
			Strategy: strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 100},
			Router:   router, A: a, B: b, RevisionA: a, RevisionB: b, Clock: clk,
			Owner: o,
			// Is the holder of a claim still there? An operator looks
			// its object up by name and compares the UID.
			OwnerGone: func(context.Context, rollout.Owner) (bool, error) { return false, nil },
		}
	}
	web := runner(rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "1111"})
	web2 := runner(rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web-copy", UID: "2222"})

	ctx := context.Background()
	if _, _, err := web.Reconcile(ctx, strategy.NewState("v1", "v2")); err != nil {
		fmt.Println(err)
	}
	fmt.Println("web claims:", router.Claimant().Name)

	s2, _, err := web2.Reconcile(ctx, strategy.NewState("v1", "v3"))
	fmt.Println("web-copy:", errors.Is(err, rollout.ErrClaimed))
	for _, c := range s2.Conditions {
		if c.Type == strategy.ConditionDegraded {
			fmt.Println(c.Reason+":", c.Message)
		}
	}
	// web's rollout goes on; web is deleted, and its finalizer releases:
	if err := web.Release(ctx); err != nil {
		fmt.Println(err)
	}
	_, _, err = web2.Reconcile(ctx, strategy.NewState("v1", "v3"))
	fmt.Println("web-copy claims:", router.Claimant().Name, err)
	// Output:
	// web claims: web
	// web-copy: true
	// Claimed: router: claim: fake route is claimed by Release shop/web (uid 1111): another rollout moves it
	// web-copy claims: web-copy <nil>
}

// stolenRouter is a fake.Router whose claim another owner takes over
// between the Runner's claim and its write, as an operator that found the
// Runner's owner gone would.
type stolenRouter struct {
	*fake.Router
	by    rollout.Owner
	steal *bool
}

func (r stolenRouter) SetWeights(ctx context.Context, w rollout.Weights) error {
	if *r.steal {
		r.SetClaimant(r.by)
	}
	return r.Router.SetWeights(ctx, w)
}

// TestRunnerWriteRefusedByATakenOverClaim: a weight write that the
// adapter refuses because another owner now holds the claim reports
// Degraded with reason Claimed (not ObservationFailed), counts toward no
// deadline, and writes nothing.
func TestRunnerWriteRefusedByATakenOverClaim(t *testing.T) {
	g := newClaimRig()
	r := g.runner(ownerOne)
	steal := false
	r.Router = stolenRouter{Router: g.router, by: ownerTwo, steal: &steal}
	s := reconcileUntil(t, r, g.clock, strategy.NewState("v1", "v2"), 100, func(s strategy.State) bool {
		return s.Desired.CanaryCapacity > 0 && g.b.Status().Ready > 0 && g.b.RevisionStatus().Updated
	})
	steal = true
	next, _, err := r.ReconcileAt(context.Background(), s, g.clock.Now())
	if !errors.Is(err, rollout.ErrClaimed) {
		t.Fatalf("err %v, want ErrClaimed", err)
	}
	if c := degraded(next); c.Reason != strategy.ReasonClaimed || !strings.Contains(c.Message, "shop/two") {
		t.Errorf("Degraded %+v, want reason Claimed naming shop/two", c)
	}
	if !next.FailingSince.IsZero() {
		t.Errorf("failingSince %v, want none", next.FailingSince)
	}
	if st, _ := g.router.Status(); st.Weights != (rollout.Weights{A: 100}) {
		t.Errorf("weights %v, want 100/0", st.Weights)
	}
}
