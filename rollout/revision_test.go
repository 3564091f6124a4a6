package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// revSide is a rollout.Deployer for one side of a rig: a deploy replaces the
// revision after lag reads, and is checked against the side's capacity and
// the traffic the router's data plane sends it at that moment.
type revSide struct {
	mu      sync.Mutex
	side    strategy.Side
	cap     *fake.Capacity
	router  *fake.Router
	running string
	next    string
	left    int // reads until next rolls out
	lag     int
	err     error
	deploys []string
	unsafe  []string // deploys made while the side served traffic or held capacity
}

func (r *revSide) Revision(_ context.Context, _ string) (rollout.RevisionStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next != "" {
		if r.left > 0 {
			r.left--
			return rollout.RevisionStatus{Revision: r.next}, nil
		}
		r.running, r.next = r.next, ""
	}
	return rollout.RevisionStatus{Revision: r.running, Updated: r.running != ""}, nil
}

func (r *revSide) Deploy(_ context.Context, revision string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if revision == r.running && r.next == "" || revision == r.next {
		return nil
	}
	st := r.cap.Status()
	if w := r.router.Applied().Of(r.side); w != 0 || st.Capacity != 0 || st.Ready != 0 {
		r.unsafe = append(r.unsafe, fmt.Sprintf("deploy %s on side %s at weight %d capacity %d ready %d",
			revision, r.side, w, st.Capacity, st.Ready))
	}
	r.deploys = append(r.deploys, revision)
	r.next, r.left = revision, r.lag
	return nil
}

// reader hides Deploy: a caller that deploys by itself.
type reader struct{ r *revSide }

func (x reader) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return x.r.Revision(ctx, expect)
}

func newRevRig(strat strategy.Strategy, lag int) (*rig, *revSide, *revSide) {
	g := newRig(strat, fake.Lag{Reads: lag})
	a := &revSide{side: strategy.SideA, cap: g.a, router: g.router, running: "v1", lag: lag}
	b := &revSide{side: strategy.SideB, cap: g.b, router: g.router, lag: lag}
	g.runner.RevisionA, g.runner.RevisionB = a, b
	return g, a, b
}

func TestRunnerValidateNeedsBothRevisionReaders(t *testing.T) {
	g, a, _ := newRevRig(strategy.BlueGreen{}, 0)
	g.runner.RevisionB = nil
	if err := g.runner.Validate(); !errors.Is(err, rollout.ErrInvalid) || !strings.Contains(err.Error(), "RevisionA and RevisionB") {
		t.Fatalf("Validate = %v, want ErrInvalid naming RevisionA and RevisionB", err)
	}
	g.runner.RevisionA, g.runner.RevisionB = nil, nil
	if err := g.runner.Validate(); err != nil {
		t.Fatalf("neither set: %v", err)
	}
	g.runner.RevisionA, g.runner.RevisionB = a, a
	if err := g.runner.Validate(); err != nil {
		t.Fatalf("both set: %v", err)
	}
}

// TestRunnerChainsRevisions: v1 -> v2 -> v3 -> v2 on the same two sides,
// each deployed by the Runner at zero, with no caller bookkeeping beyond
// Retarget.
func TestRunnerChainsRevisions(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 50}
	g, a, b := newRevRig(strat, 2)
	s := strategy.State{}.Retarget("v1", g.clock.Now())
	for _, rev := range []string{"v2", "v3", "v2"} {
		s = s.Retarget(rev, g.clock.Now())
		s, _ = g.run(t, s, 2000)
		if s.Phase != strategy.PhaseSucceeded || s.StableRevision != rev {
			t.Fatalf("to %s: ended %s on %s (%s)", rev, s.Phase, s.StableRevision, s.Message)
		}
	}
	// Back to v2: side B still runs it, at capacity 0, so nothing is
	// deployed; it is observed and ramped.
	if diff := cmp.Diff([]string{"v2"}, b.deploys); diff != "" {
		t.Errorf("side B deploys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v3"}, a.deploys); diff != "" {
		t.Errorf("side A deploys (-want +got):\n%s", diff)
	}
	if len(a.unsafe)+len(b.unsafe) > 0 {
		t.Errorf("deploys under traffic or capacity: %v %v", a.unsafe, b.unsafe)
	}
	if st := g.traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
		t.Errorf("traffic: %+v", st)
	}
	if s.StableSide != strategy.SideB || a.running != "v3" || b.running != "v2" {
		t.Errorf("stable side %s, A runs %s, B runs %s", s.StableSide, a.running, b.running)
	}
}

// TestRunnerDeployHop: the first reconcile of a rollout asks only for the
// deploy, applied on the canary side, and the Event names it.
func TestRunnerDeployHop(t *testing.T) {
	g, _, b := newRevRig(strategy.BlueGreen{}, 1)
	var applied []string
	g.runner.Observer = rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		for _, h := range e.Applied {
			applied = append(applied, h.String())
		}
	})
	s := strategy.NewState("v1", "v2")
	s, _, err := g.runner.Reconcile(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"deploy v2 on side B"}, applied); diff != "" {
		t.Fatalf("applied (-want +got):\n%s", diff)
	}
	if s.Desired.CanaryRevision != "v2" || g.b.Writes() != 0 || g.router.Writes() != 0 {
		t.Fatalf("desired %+v, capacity B writes %d, router writes %d", s.Desired, g.b.Writes(), g.router.Writes())
	}
	// While v2 rolls out, nothing else is asked.
	g.clock.Advance(time.Second)
	s, _, err = g.runner.Reconcile(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if g.b.Writes() != 0 || g.router.Writes() != 0 || len(b.deploys) != 1 {
		t.Fatalf("asked for more before v2 rolled out: B writes %d, router %d, deploys %v (%s)",
			g.b.Writes(), g.router.Writes(), b.deploys, s.Message)
	}
}

// TestRunnerCallerDeploys: with a RevisionReader that is not a Deployer the
// Runner deploys nothing and waits until the side reports the revision.
func TestRunnerCallerDeploys(t *testing.T) {
	g, a, b := newRevRig(strategy.BlueGreen{}, 0)
	g.runner.RevisionA, g.runner.RevisionB = reader{a}, reader{b}
	s := strategy.NewState("v1", "v2")
	ctx := context.Background()
	for range 3 {
		var err error
		s, _, err = g.runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(time.Second)
	}
	if g.b.Writes() != 0 || g.router.Writes() != 0 || len(b.deploys) != 0 {
		t.Fatalf("moved before the caller deployed: %s", s.Message)
	}
	b.running = "v2" // the caller deploys
	s, _ = g.run(t, s, 1000)
	if s.Phase != strategy.PhaseSucceeded {
		t.Fatalf("ended %s: %s", s.Phase, s.Message)
	}
}

// TestRunnerDeployError: a failed deploy is an AdapterError naming the side
// and the hop; the state keeps asking for it.
func TestRunnerDeployError(t *testing.T) {
	g, _, b := newRevRig(strategy.BlueGreen{}, 0)
	b.err = errors.New("image pull secret missing")
	s, _, err := g.runner.Reconcile(context.Background(), strategy.NewState("v1", "v2"))
	var ae *rollout.AdapterError
	if !errors.As(err, &ae) || ae.Adapter != "revision B" || ae.Hop != "deploy v2 on side B" {
		t.Fatalf("err = %v, want an AdapterError for revision B", err)
	}
	if want := "revision B: apply deploy v2 on side B: image pull secret missing"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if s.Observed.Error == "" || s.Desired.CanaryRevision != "" {
		t.Errorf("state after the failure: error %q, desired %+v", s.Observed.Error, s.Desired)
	}
	b.err = nil
	g.clock.Advance(time.Second)
	if _, _, err := g.runner.Reconcile(context.Background(), s); err != nil || len(b.deploys) != 1 {
		t.Fatalf("retry: %v, deploys %v", err, b.deploys)
	}
}

// TestRunnerRetargetMidWalk: A -> B -> (mid-walk) C. The abandoned revision
// is walked out, weight then capacity, C is deployed on the same side at
// zero, observed, and only then ramped.
func TestRunnerRetargetMidWalk(t *testing.T) {
	strat := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}
	g, a, b := newRevRig(strat, 1)
	ctx := context.Background()
	s := strategy.NewState("v1", "v2")
	for i := 0; s.Observed.Weight < 20; i++ {
		if i > 200 {
			t.Fatalf("weight never reached 20: %s", s.Message)
		}
		next, requeue, err := g.runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		s = next
		g.traffic.Tick()
		g.clock.Advance(requeue)
	}
	s = s.Retarget("v3", g.clock.Now())
	s, _ = g.run(t, s, 2000)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v3" {
		t.Fatalf("ended %s on %s: %s", s.Phase, s.StableRevision, s.Message)
	}
	if diff := cmp.Diff([]string{"v2", "v3"}, b.deploys); diff != "" {
		t.Errorf("side B deploys (-want +got):\n%s", diff)
	}
	if len(a.deploys) != 0 || len(a.unsafe)+len(b.unsafe) > 0 {
		t.Errorf("side A deploys %v; unsafe deploys %v %v", a.deploys, a.unsafe, b.unsafe)
	}
	if st := g.traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
		t.Errorf("traffic: %+v", st)
	}
}
