package fake_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// sideView is what a side reports about its capacity and its revision.
type sideView struct {
	Capacity, Ready int32
	Settled         bool
	Revision        string
	Updated         bool
}

func viewOf(st rollout.CapacityStatus, rs rollout.RevisionStatus) sideView {
	return sideView{Capacity: st.Capacity, Ready: st.Ready, Settled: st.Settled, Revision: rs.Revision, Updated: rs.Updated}
}

func TestCapacityDeploy(t *testing.T) {
	ctx := context.Background()
	type action func(*testing.T, *fake.Capacity)
	deploy := func(rev string) action {
		return func(t *testing.T, c *fake.Capacity) {
			if err := c.Deploy(ctx, rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	set := func(p int32) action {
		return func(t *testing.T, c *fake.Capacity) {
			if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stall := func(on bool) action { return func(_ *testing.T, c *fake.Capacity) { c.StallDeploys(on) } }
	loop := func(on bool) action { return func(_ *testing.T, c *fake.Capacity) { c.CrashLoop(on) } }
	crash := func(n int32) action { return func(_ *testing.T, c *fake.Capacity) { c.Crash(n) } }
	setRev := func(rev string) action { return func(_ *testing.T, c *fake.Capacity) { c.SetRevision(rev) } }
	// A step sets the clock to t0+at, runs do, then observes the side:
	// with Capacity and Revision (one read) when read is set, with Status
	// and RevisionStatus otherwise.
	type step struct {
		at   time.Duration
		do   []action
		read bool
		want sideView
	}
	v := func(capacity, ready int32, settled bool, rev string, updated bool) sideView {
		return sideView{capacity, ready, settled, rev, updated}
	}
	violation := func(rev, over string, capacity, want int32, serving int32) string {
		return fmt.Sprintf("deploy %q over %q at capacity %d (%d of 10 replicas wanted) while serving %d%% of traffic", rev, over, capacity, want, serving)
	}
	cases := []struct {
		name       string
		start      int32 // percent; 10 replicas
		rev        string
		lag        fake.Lag
		partial    bool
		steps      []step
		violations []string
	}{
		{
			name: "no revision until one is deployed", start: 0,
			steps: []step{
				{read: true, want: v(0, 0, true, "", false)},
			},
		},
		{
			name: "at zero, rolled out after a duration", start: 0, rev: "v1", lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{want: v(0, 0, true, "v1", true)},
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: 29 * time.Second, read: true, want: v(0, 0, true, "v2", false)},
				{at: 30 * time.Second, want: v(0, 0, true, "v2", true)},
				// Scaling up after the deploy: the revision stays rolled out.
				{at: 30 * time.Second, do: []action{set(50)}, want: v(50, 0, false, "v2", true)},
				{at: time.Minute, want: v(50, 50, true, "v2", true)},
			},
		},
		{
			name: "at zero, rolled out after reads", start: 0, rev: "v1", lag: fake.Lag{Reads: 2},
			steps: []step{
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{want: v(0, 0, true, "v2", false)}, // Status is not a read
				{read: true, want: v(0, 0, true, "v2", false)},
				{read: true, want: v(0, 0, true, "v2", true)},
			},
		},
		{
			name: "under capacity: readiness is lost until the replicas are replaced", start: 100, rev: "v1", lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: []action{deploy("v2")}, want: v(100, 0, false, "v2", false)},
				{at: 29 * time.Second, read: true, want: v(100, 0, false, "v2", false)},
				{at: 30 * time.Second, want: v(100, 100, true, "v2", true)},
			},
			violations: []string{violation("v2", "v1", 100, 10, 0)},
		},
		{
			name: "partial: one replica per read", start: 30, rev: "v1", partial: true,
			steps: []step{
				{do: []action{deploy("v2")}, want: v(30, 0, false, "v2", false)},
				{read: true, want: v(30, 10, false, "v2", false)},
				{read: true, want: v(30, 20, false, "v2", false)},
				{want: v(30, 20, false, "v2", false)},
				{read: true, want: v(30, 30, true, "v2", true)},
			},
			violations: []string{violation("v2", "v1", 30, 3, 0)},
		},
		{
			name: "the revision running, or rolling out, is not deployed again", start: 0, rev: "v1", lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: []action{deploy("v1")}, want: v(0, 0, true, "v1", true)},
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: 20 * time.Second, do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: 30 * time.Second, want: v(0, 0, true, "v2", true)}, // the lag counts from the first
				{at: 40 * time.Second, do: []action{deploy("v2")}, want: v(0, 0, true, "v2", true)},
			},
		},
		{
			name: "back to the previous revision: a deploy like any other", start: 0, rev: "v1", lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: 5 * time.Second, do: []action{deploy("v1")}, want: v(0, 0, true, "v1", false)},
				{at: 10 * time.Second, want: v(0, 0, true, "v1", false)},
				{at: 15 * time.Second, want: v(0, 0, true, "v1", true)},
			},
		},
		{
			name: "a stalled deploy never rolls out", start: 0, rev: "v1", lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: []action{stall(true)}, want: v(0, 0, true, "v1", true)}, // nothing is being deployed
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: time.Hour, read: true, want: v(0, 0, true, "v2", false)},
				{at: time.Hour, do: []action{set(50)}, want: v(50, 0, false, "v2", false)},
				{at: 2 * time.Hour, read: true, want: v(50, 0, false, "v2", false)},
				{at: 2 * time.Hour, do: []action{stall(false)}, want: v(50, 0, false, "v2", false)},
				{at: 2*time.Hour + 10*time.Second, want: v(50, 50, true, "v2", true)},
			},
		},
		{
			name: "a stall holds back a deploy under way", start: 0, rev: "v1", lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: []action{deploy("v2")}, want: v(0, 0, true, "v2", false)},
				{at: 20 * time.Second, do: []action{stall(true)}, want: v(0, 0, true, "v2", false)},
				{at: time.Minute, want: v(0, 0, true, "v2", false)},
				{at: time.Minute, do: []action{stall(false)}, want: v(0, 0, true, "v2", false)},
				{at: time.Minute + 30*time.Second, want: v(0, 0, true, "v2", true)},
			},
		},
		{
			name: "a crash-looping revision never rolls out", start: 100, rev: "v1", lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: []action{loop(true), deploy("v2")}, want: v(100, 0, false, "v2", false)},
				{at: time.Hour, want: v(100, 0, false, "v2", false)},
				{at: time.Hour, do: []action{loop(false)}, want: v(100, 0, false, "v2", false)},
				{at: time.Hour + 10*time.Second, want: v(100, 100, true, "v2", true)},
			},
			violations: []string{violation("v2", "v1", 100, 10, 0)},
		},
		{
			name: "a scale-up under way restarts with the new revision", start: 0, rev: "v1", lag: fake.Lag{Duration: 30 * time.Second},
			steps: []step{
				{do: []action{set(50)}, want: v(50, 0, false, "v1", true)},
				{at: 20 * time.Second, do: []action{deploy("v2")}, want: v(50, 0, false, "v2", false)},
				{at: 30 * time.Second, want: v(50, 0, false, "v2", false)},
				{at: 50 * time.Second, want: v(50, 50, true, "v2", true)},
			},
			violations: []string{violation("v2", "v1", 50, 5, 0)},
		},
		{
			name: "crashes after the roll-out keep the revision", start: 100, rev: "v1", lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: []action{crash(4)}, want: v(100, 60, false, "v1", true)},
				{at: 10 * time.Second, want: v(100, 100, true, "v1", true)},
			},
		},
		{
			name: "SetRevision ends a deploy at once", start: 100, rev: "v1", lag: fake.Lag{Duration: 10 * time.Second},
			steps: []step{
				{do: []action{stall(true), deploy("v2")}, want: v(100, 0, false, "v2", false)},
				{at: time.Minute, do: []action{setRev("v3")}, want: v(100, 0, false, "v3", true)},
				{at: time.Minute + 10*time.Second, want: v(100, 100, true, "v3", true)},
			},
			violations: []string{violation("v2", "v1", 100, 10, 0)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0)
			c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: tc.start})
			c.SetLag(tc.lag)
			c.SetPartial(tc.partial)
			if tc.rev != "" {
				c.SetRevision(tc.rev)
			}
			for i, s := range tc.steps {
				clock.Set(t0.Add(s.at))
				for _, a := range s.do {
					a(t, c)
				}
				got := viewOf(c.Status(), c.RevisionStatus())
				if s.read {
					st, err := c.Capacity(ctx)
					if err != nil {
						t.Fatal(err)
					}
					rs, err := c.Revision(ctx, "")
					if err != nil {
						t.Fatal(err)
					}
					got = viewOf(st, rs)
				}
				if diff := cmp.Diff(s.want, got); diff != "" {
					t.Fatalf("step %d at +%v (-want +got):\n%s", i, s.at, diff)
				}
			}
			if diff := cmp.Diff(tc.violations, c.Violations()); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCapacityDeployServing: a deploy on a side the route sends requests to,
// or is about to, is a violation even at capacity 0.
func TestCapacityDeployServing(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		weights   rollout.Weights // set on a route whose data plane takes them after one read
		read      bool            // the data plane took them
		violation string
	}{
		{name: "no weight", weights: rollout.Weights{A: 100}},
		{name: "weight written, not applied yet", weights: rollout.Weights{A: 90, B: 10},
			violation: `deploy "v2" over "v1" at capacity 0 (0 of 10 replicas wanted) while serving 10% of traffic`},
		{name: "weight applied", weights: rollout.Weights{A: 75, B: 25}, read: true,
			violation: `deploy "v2" over "v1" at capacity 0 (0 of 10 replicas wanted) while serving 25% of traffic`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			router := fake.NewRouter(nil)
			router.SetLag(fake.Lag{Reads: 1})
			b := fake.NewCapacity(nil, fake.CapacityOptions{Replicas: 10, Percent: 0})
			b.SetRevision("v1")
			b.ServingFunc(router.Serving(strategy.SideB))
			if err := router.SetWeights(ctx, tc.weights); err != nil {
				t.Fatal(err)
			}
			if tc.read {
				router.Weights(ctx)
			}
			if err := b.Deploy(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
			var want []string
			if tc.violation != "" {
				want = []string{tc.violation}
			}
			if diff := cmp.Diff(want, b.Violations()); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRouterServing(t *testing.T) {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	router.SetLag(fake.Lag{Reads: 1})
	type shares struct{ A, B int32 }
	get := func() shares {
		return shares{router.Serving(strategy.SideA)(), router.Serving(strategy.SideB)()}
	}
	steps := []struct {
		what string
		do   func()
		want shares
	}{
		{"a new route sends everything to A", func() {}, shares{100, 0}},
		{"written: both the old and the new share count", func() { router.SetWeights(ctx, rollout.Weights{A: 70, B: 30}) }, shares{100, 30}},
		{"applied", func() { router.Weights(ctx) }, shares{70, 30}},
		{"another writer's split is shared in proportion", func() { router.Overwrite(rollout.Weights{A: 100, B: 300}) }, shares{70, 75}},
		{"the proportions once applied", func() { router.Weights(ctx) }, shares{25, 75}},
		{"a tiny weight still serves", func() { router.Overwrite(rollout.Weights{A: 1000, B: 1}); router.Weights(ctx) }, shares{99, 1}},
		{"a deleted route serves nothing", func() { router.Delete() }, shares{0, 0}},
	}
	for _, s := range steps {
		s.do()
		if got := get(); got != s.want {
			t.Errorf("%s: %+v, want %+v", s.what, got, s.want)
		}
	}
}

func TestCapacityDeployFaults(t *testing.T) {
	clock := fake.NewClock(t0)
	c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 0})
	boom := errors.New("boom")
	c.FailWith(boom)
	if err := c.Deploy(context.Background(), "v2"); !errors.Is(err, boom) {
		t.Fatalf("Deploy with FailWith: %v", err)
	}
	if _, err := c.Revision(context.Background(), "v2"); !errors.Is(err, boom) {
		t.Fatalf("Revision with FailWith: %v", err)
	}
	c.FailWith(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Deploy(ctx, "v2"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Deploy with a canceled context: %v", err)
	}
	err := c.Deploy(context.Background(), "")
	if !errors.Is(err, rollout.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Fatalf("Deploy of no revision: %v, want a Permanent ErrInvalid", err)
	}
	if rs := c.RevisionStatus(); rs != (rollout.RevisionStatus{}) {
		t.Fatalf("failed deploys changed the side: %+v", rs)
	}
	clock.Advance(time.Second)
	for range 2 {
		if err := c.Deploy(context.Background(), "v2"); err != nil {
			t.Fatal(err)
		}
	}
	if rs, err := c.Revision(context.Background(), "v2"); err != nil || rs != (rollout.RevisionStatus{Revision: "v2", Updated: true}) {
		t.Fatalf("Revision = %+v, %v", rs, err)
	}
	type call struct {
		At      time.Duration
		Op, Arg string
		Err     bool
	}
	var got []call
	for _, h := range c.History() {
		got = append(got, call{h.At.Sub(t0), h.Op, h.Arg, h.Err != nil})
	}
	want := []call{
		{0, "Deploy", "v2", true},
		{0, "Revision", "v2", true},
		{0, "Deploy", "v2", true},
		{0, "Deploy", "", true},
		{time.Second, "Deploy", "v2", false},
		{time.Second, "Deploy", "v2", false},
		{time.Second, "Revision", "v2", false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if c.Deploys() != 2 || c.Violations() != nil {
		t.Errorf("Deploys %d, violations %v", c.Deploys(), c.Violations())
	}
}

// TestCapacityDeployProperty drives a side through random scaling,
// deploys, crashes, stalls, traffic and time, and checks that:
//   - Revision always names the revision last deployed (or set);
//   - a deploy of another revision stops every replica of the old one at
//     once, and is not Updated;
//   - Updated never turns on before every wanted replica runs the new
//     revision and is ready, and never while a deploy is stalled;
//   - a deploy of another revision is a violation exactly when the side
//     wants replicas or serves traffic;
//   - once nothing holds it back, the side rolls out and settles.
func TestCapacityDeployProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		clock := fake.NewClock(t0)
		replicas := rapid.Int32Range(1, 12).Draw(t, "replicas")
		percent := rapid.Int32Range(0, 100).Draw(t, "start")
		c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: replicas, Percent: percent})
		lag := fake.Lag{Reads: rapid.IntRange(0, 3).Draw(t, "lag reads"), Duration: time.Duration(rapid.IntRange(0, 3).Draw(t, "lag seconds")) * time.Second}
		c.SetLag(lag)
		c.SetPartial(rapid.Bool().Draw(t, "partial"))
		rev := rapid.SampledFrom([]string{"", "v1"}).Draw(t, "revision")
		if rev != "" {
			c.SetRevision(rev)
		}
		var serving int32
		c.ServingFunc(func() int32 { return serving })
		stalled, looping := false, false
		violations := 0
		wantShare := func() int32 {
			if percent <= 0 {
				return 0
			}
			return (replicas*percent + 99) / 100 * 100 / replicas
		}
		updated := c.RevisionStatus().Updated
		check := func(what string) {
			rs := c.RevisionStatus()
			st := c.Status()
			if rs.Revision != rev {
				t.Fatalf("%s: revision %q, want %q", what, rs.Revision, rev)
			}
			if rs.Updated && !updated {
				if st.Ready != wantShare() {
					t.Fatalf("%s: Updated with ready %d of %d wanted", what, st.Ready, wantShare())
				}
				if stalled {
					t.Fatalf("%s: a stalled deploy rolled out", what)
				}
			}
			updated = rs.Updated
			if n := len(c.Violations()); n != violations {
				t.Fatalf("%s: %d violations, want %d: %v", what, n, violations, c.Violations())
			}
		}
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			what := fmt.Sprintf("step %d", i)
			switch op := rapid.IntRange(0, 8).Draw(t, "op"); op {
			case 0:
				percent = rapid.Int32Range(0, 100).Draw(t, "percent")
				if err := c.SetCapacity(ctx, rollout.CapacityRequest{Percent: percent}); err != nil {
					t.Fatal(err)
				}
			case 1, 2:
				next := rapid.SampledFrom([]string{"v1", "v2", "v3"}).Draw(t, "deploy")
				if next != rev && (wantShare() > 0 || serving > 0) {
					violations++
				}
				changed := next != rev
				if err := c.Deploy(ctx, next); err != nil {
					t.Fatal(err)
				}
				if changed {
					rev, updated = next, false // Updated now speaks of next
					// With the zero Lag a deploy is done as soon as the
					// side is looked at.
					if lag != (fake.Lag{}) || stalled || looping {
						rs, st := c.RevisionStatus(), c.Status()
						if rs.Updated && (wantShare() > 0 || stalled) {
							t.Fatalf("%s: a deploy is at once rolled out", what)
						}
						if st.Ready != 0 {
							t.Fatalf("%s: %d%% ready right after a deploy", what, st.Ready)
						}
					}
				}
			case 3:
				if _, err := c.Capacity(ctx); err != nil {
					t.Fatal(err)
				}
			case 4:
				clock.Advance(time.Duration(rapid.IntRange(0, 3).Draw(t, "seconds")) * time.Second)
			case 5:
				c.Crash(rapid.Int32Range(0, replicas).Draw(t, "crash"))
			case 6:
				looping = rapid.Bool().Draw(t, "loop")
				c.CrashLoop(looping)
			case 7:
				stalled = rapid.Bool().Draw(t, "stall")
				c.StallDeploys(stalled)
			case 8:
				serving = rapid.SampledFrom([]int32{0, 0, 10, 100}).Draw(t, "serving")
			}
			check(what)
		}
		// Nothing holds the side back: it rolls out and settles.
		c.StallDeploys(false)
		c.CrashLoop(false)
		stalled = false
		for range 2*replicas + int32(lag.Reads) + 2 {
			clock.Advance(lag.Duration)
			if _, err := c.Capacity(ctx); err != nil {
				t.Fatal(err)
			}
			check("settling")
		}
		st, rs := c.Status(), c.RevisionStatus()
		if !st.Settled || st.Ready != wantShare() || rs.Updated != (rev != "") {
			t.Fatalf("did not settle: %+v %+v", st, rs)
		}
	})
}

func TestDeployment(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	a, b := fake.NewFixedSide(clock, 4, "v1"), fake.NewFixedSide(clock, 4, "")
	a.ServingFunc(router.Serving(strategy.SideA))
	b.ServingFunc(router.Serving(strategy.SideB))
	b.SetLag(fake.Lag{Reads: 1, Duration: 10 * time.Second})
	traffic := fake.NewFixedTraffic(router, a, b, 100)
	type view struct {
		Ready    int32
		Settled  bool
		Revision string
		Updated  bool
	}
	look := func(d *fake.FixedSide) view {
		st, rs := d.Status(), d.RevisionStatus()
		if st.Capacity != 100 || !st.Steady {
			t.Fatalf("a fixed side reports capacity %d, steady %v", st.Capacity, st.Steady)
		}
		return view{st.Ready, st.Settled, rs.Revision, rs.Updated}
	}
	read := func(d *fake.FixedSide) view {
		if _, err := d.Revision(ctx, ""); err != nil {
			t.Fatal(err)
		}
		return look(d)
	}
	steps := []struct {
		what string
		do   func() view
		want view
	}{
		{"a side starts fully ready", func() view { return look(b) }, view{100, true, "", false}},
		{"a deploy restarts its replicas", func() view { b.Deploy(ctx, "v2"); return look(b) }, view{0, false, "v2", false}},
		{"a read counts for the lag", func() view { return read(b) }, view{0, false, "v2", false}},
		{"then the duration", func() view { clock.Advance(10 * time.Second); return look(b) }, view{100, true, "v2", true}},
		{"the same revision again writes nothing", func() view { b.Deploy(ctx, "v2"); return look(b) }, view{100, true, "v2", true}},
		{"the stable side was not touched", func() view { return read(a) }, view{100, true, "v1", true}},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("%s: %+v, want %+v", s.what, got, s.want)
		}
	}
	traffic.Tick()
	if b.Violations() != nil {
		t.Fatalf("violations at weight 0: %v", b.Violations())
	}
	// A deploy of side A, which carries every request: a violation, and
	// requests are dropped while its replicas restart.
	a.SetLag(fake.Lag{Duration: time.Second})
	if err := a.Deploy(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	traffic.Tick()
	clock.Advance(time.Second)
	traffic.Tick()
	if diff := cmp.Diff([]string{`deploy "v3" over "v1" while serving 100% of traffic`}, a.Violations()); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(fake.TrafficStats{Ticks: 3, Served: 200, Dropped: 100, PeakCapacity: 200, A: fake.SideTraffic{Requests: 300}}, traffic.Stats()); diff != "" {
		t.Errorf("traffic (-want +got):\n%s", diff)
	}
	a.StallDeploys(true)
	a.Deploy(ctx, "v4")
	clock.Advance(time.Hour)
	if got := read(a); got != (view{0, false, "v4", false}) {
		t.Errorf("a stalled deploy: %+v", got)
	}
	a.FailWith(errors.New("down"))
	if err := a.Deploy(ctx, "v5"); err == nil {
		t.Error("Deploy ignored FailWith")
	}
	if a.Deploys() != 2 {
		t.Errorf("Deploys %d, want 2", a.Deploys())
	}
}

// runRollout reconciles s until a terminal phase, advancing the clock by
// each requeue and ticking the traffic after every reconcile.
func runRollout(t *testing.T, r *rollout.Runner, clock *fake.Clock, traffic *fake.Traffic, s strategy.State) strategy.State {
	t.Helper()
	for i := 0; i < 5000; i++ {
		next, requeue, err := r.Reconcile(context.Background(), s)
		if err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		s = next
		traffic.Tick()
		if s.Phase.Terminal() {
			return s
		}
		clock.Advance(max(requeue, time.Second))
	}
	t.Fatalf("not finished: %s %s", s.Phase, s.Message)
	return s
}

// TestRunnerDeploysOnCapacity: a Runner in the managed capacity mode puts
// each revision on its canary side through fake.Capacity, v1 -> v2 -> v3,
// never on a side that holds capacity or serves, and never routes a
// request to capacity that is not ready.
func TestRunnerDeploysOnCapacity(t *testing.T) {
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	a.SetRevision("v1")
	for side, c := range map[strategy.Side]*fake.Capacity{strategy.SideA: a, strategy.SideB: b} {
		c.SetLag(fake.Lag{Reads: 1, Duration: 5 * time.Second})
		c.ServingFunc(router.Serving(side))
	}
	router.SetLag(fake.Lag{Reads: 1})
	traffic := fake.NewTraffic(router, a, b, 1000)
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50},
		Router:   router, A: a, B: b, RevisionA: a, RevisionB: b, Clock: clock,
	}
	s := strategy.State{}.Retarget("v1", clock.Now())
	for _, rev := range []string{"v2", "v3"} {
		s = runRollout(t, r, clock, traffic, s.Retarget(rev, clock.Now()))
		if s.Phase != strategy.PhaseSucceeded || s.StableRevision != rev {
			t.Fatalf("to %s: %s on %s (%s)", rev, s.Phase, s.StableRevision, s.Message)
		}
	}
	if got := [2]rollout.RevisionStatus{a.RevisionStatus(), b.RevisionStatus()}; got != [2]rollout.RevisionStatus{{Revision: "v3", Updated: true}, {Revision: "v2", Updated: true}} {
		t.Errorf("revisions A, B: %+v", got)
	}
	if a.Violations() != nil || b.Violations() != nil {
		t.Errorf("violations: A %v, B %v", a.Violations(), b.Violations())
	}
	if a.Deploys() != 1 || b.Deploys() != 1 {
		t.Errorf("deploys: A %d, B %d, want one each", a.Deploys(), b.Deploys())
	}
	// The redeploy restarts the canary's replicas under its 25 percent:
	// the stable side, shrunk to 75 while the weight held, grows back
	// (5 s of lag) before the walk back moves that traffic onto it, and
	// the canary's share is lost meanwhile. No request is sent beyond the
	// stable side's ready capacity.
	if st := traffic.Stats(); st.Overloaded != 0 || st.Dropped > 2000 {
		t.Errorf("traffic: %+v", st)
	}
}

// TestRunnerDeploysFixed: in the fixed capacity mode the Runner redeploys
// a fake.FixedSide only while it serves nothing, so no request meets a
// restarting side.
func TestRunnerDeploysFixed(t *testing.T) {
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	a, b := fake.NewFixedSide(clock, 4, "v1"), fake.NewFixedSide(clock, 4, "")
	for side, d := range map[strategy.Side]*fake.FixedSide{strategy.SideA: a, strategy.SideB: b} {
		d.SetLag(fake.Lag{Reads: 2, Duration: 5 * time.Second})
		d.SetPartial(true)
		d.ServingFunc(router.Serving(side))
	}
	router.SetLag(fake.Lag{Reads: 1})
	traffic := fake.NewFixedTraffic(router, a, b, 1000)
	r := &rollout.Runner{
		Strategy: strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed}},
		Router:   router, RevisionA: a, RevisionB: b, Clock: clock,
	}
	s := strategy.State{}.Retarget("v1", clock.Now())
	for _, rev := range []string{"v2", "v3"} {
		s = runRollout(t, r, clock, traffic, s.Retarget(rev, clock.Now()))
		if s.Phase != strategy.PhaseSucceeded || s.StableRevision != rev {
			t.Fatalf("to %s: %s on %s (%s)", rev, s.Phase, s.StableRevision, s.Message)
		}
	}
	if a.Violations() != nil || b.Violations() != nil {
		t.Errorf("violations: A %v, B %v", a.Violations(), b.Violations())
	}
	if a.Deploys() != 1 || b.Deploys() != 1 {
		t.Errorf("deploys: A %d, B %d, want one each", a.Deploys(), b.Deploys())
	}
	if st := traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
		t.Errorf("traffic: %+v", st)
	}
}

// A side of the managed capacity mode runs a revision. Deployed at capacity
// 0 and weight 0, the new revision rolls out once the lag has passed; a
// deploy on a side that serves is a violation, and loses its readiness
// until the new replicas are up.
func ExampleCapacity_Deploy() {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock) // all traffic on side A
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	a.SetRevision("v1")
	for side, c := range map[strategy.Side]*fake.Capacity{strategy.SideA: a, strategy.SideB: b} {
		c.SetLag(fake.Lag{Duration: 30 * time.Second})
		c.ServingFunc(router.Serving(side))
	}
	show := func(name string, c *fake.Capacity) {
		st, _ := c.Capacity(ctx)
		rs, _ := c.Revision(ctx, "")
		fmt.Printf("+%v %s: revision %q updated %v, ready %d%%\n", clock.Now().Sub(t0), name, rs.Revision, rs.Updated, st.Ready)
	}
	b.Deploy(ctx, "v2")
	show("B", b)
	clock.Advance(30 * time.Second)
	show("B", b)

	a.Deploy(ctx, "v2") // side A serves every request
	show("A", a)
	clock.Advance(30 * time.Second)
	show("A", a)
	fmt.Println("violations on B:", len(b.Violations()))
	fmt.Println("violations on A:", a.Violations())
	// Output:
	// +0s B: revision "v2" updated false, ready 0%
	// +30s B: revision "v2" updated true, ready 0%
	// +30s A: revision "v2" updated false, ready 0%
	// +1m0s A: revision "v2" updated true, ready 100%
	// violations on B: 0
	// violations on A: [deploy "v2" over "v1" at capacity 100 (10 of 10 replicas wanted) while serving 100% of traffic]
}

// TestRunnerCanaryOverwritten: mid-rollout another writer puts v1 back on
// the canary side, leaving upshift's record of v2: the side reports v1, so
// the Runner walks the canary back (RevisionChanged) with no request sent
// to it once it runs v1; a retry deploys v2 again and completes.
func TestRunnerCanaryOverwritten(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(t0)
	router := fake.NewRouter(clock)
	a, b := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100}), fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
	a.SetRevision("v1")
	for side, c := range map[strategy.Side]*fake.Capacity{strategy.SideA: a, strategy.SideB: b} {
		c.SetLag(fake.Lag{Reads: 1, Duration: 5 * time.Second})
		c.ServingFunc(router.Serving(side))
	}
	traffic := fake.NewTraffic(router, a, b, 1000)
	r := &rollout.Runner{
		Strategy: strategy.Incremental{StepPercent: 25, Interval: metav1.Duration{Duration: 10 * time.Second}, MaxSurgePercent: 50},
		Router:   router, A: a, B: b, RevisionA: a, RevisionB: b, Clock: clock,
	}
	s := strategy.State{}.Retarget("v1", clock.Now()).Retarget("v2", clock.Now())
	for i := 0; s.Observed.Weight < 25; i++ {
		if i > 500 {
			t.Fatalf("no weight on the canary: %s %s", s.Phase, s.Message)
		}
		next, requeue, err := r.Reconcile(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		s = next
		traffic.Tick()
		clock.Advance(max(requeue, time.Second))
	}
	b.Redeploy("v1")
	if got := b.Recorded(); got != "v2" {
		t.Fatalf("recorded %q after the overwrite, want v2 left in place", got)
	}
	if rs := b.RevisionStatus(); rs.Revision != "v1" {
		t.Fatalf("overwritten side reports %+v, want v1", rs)
	}
	s = runRollout(t, r, clock, traffic, s)
	if s.Phase != strategy.PhaseAborted || s.Aborted == nil || s.Aborted.Reason != strategy.ReasonRevisionChanged {
		t.Fatalf("after the overwrite: %s, aborted %+v", s.Phase, s.Aborted)
	}
	if w := router.Serving(strategy.SideB)(); w != 0 {
		t.Fatalf("side B still serves %d%%", w)
	}
	s, _ = s.Control(strategy.Control{Retry: "r1"}, clock.Now())
	s = runRollout(t, r, clock, traffic, s)
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" {
		t.Fatalf("retried: %s on %s (%s)", s.Phase, s.StableRevision, s.Message)
	}
	if rs := b.RevisionStatus(); rs != (rollout.RevisionStatus{Revision: "v2", Updated: true}) || b.Deploys() < 2 {
		t.Errorf("side B: %+v after %d deploys; want v2 deployed again", rs, b.Deploys())
	}
	if a.Violations() != nil || b.Violations() != nil {
		t.Errorf("violations: A %v, B %v", a.Violations(), b.Violations())
	}
	if st := traffic.Stats(); st.Dropped != 0 || st.Overloaded != 0 {
		t.Errorf("traffic: %+v", st)
	}
}

// TestCapacityRedeploy: another writer redeploying a side under traffic
// changes what the side reports (its content), restarts its replicas, and
// is neither a violation nor a Deploy; a template no revision maps to
// reports no revision.
func TestCapacityRedeploy(t *testing.T) {
	ctx := context.Background()
	clock := fake.NewClock(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	c := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 4, Percent: 100})
	c.SetLag(fake.Lag{Reads: 1})
	c.SetRevision("v2")
	c.ServingFunc(func() int32 { return 80 })
	for _, tc := range []struct {
		rev  string
		want rollout.RevisionStatus
	}{{"v1", rollout.RevisionStatus{Revision: "v1", Updated: true}}, {"", rollout.RevisionStatus{}}} {
		c.Redeploy(tc.rev)
		if got, _ := c.Revision(ctx, "v2"); got.Revision != tc.rev || got.Updated {
			t.Fatalf("right after the redeploy to %q: %+v", tc.rev, got)
		}
		if st := c.Status(); st.Ready != 0 {
			t.Fatalf("replicas did not restart: %+v", st)
		}
		for range 3 {
			_, _ = c.Capacity(ctx)
		}
		if got, _ := c.Revision(ctx, "v2"); got != tc.want {
			t.Fatalf("after the redeploy to %q rolled out: %+v, want %+v", tc.rev, got, tc.want)
		}
	}
	if v, n := c.Violations(), c.Deploys(); len(v) != 0 || n != 0 {
		t.Fatalf("another writer's redeploy counted as upshift's: violations %v, deploys %d", v, n)
	}
}
