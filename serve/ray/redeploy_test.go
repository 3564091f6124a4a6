package ray_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

// runsConfig reports whether the emulated cluster runs exactly the
// applications of config (JSON), as their deployed_app_config.
func runsConfig(t *testing.T, rs *raytest.Server, config json.RawMessage) bool {
	t.Helper()
	var c struct {
		Applications []struct {
			Name string `json:"name"`
		} `json:"applications"`
	}
	var apps struct {
		Applications []json.RawMessage `json:"applications"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(config, &apps); err != nil {
		t.Fatal(err)
	}
	for i, a := range c.Applications {
		got, ok := rs.DeployedConfig(a.Name)
		if !ok || !sameJSON(t, got, apps.Applications[i]) {
			return false
		}
	}
	return true
}

// withTargetCapacity returns config with "target_capacity" set to tc (JSON:
// a number or null), or without the field for "".
func withTargetCapacity(t *testing.T, config json.RawMessage, tc string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(config, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "target_capacity")
	if tc != "" {
		m["target_capacity"] = json.RawMessage(tc)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunWalksBackACanaryClusterRedeployedByAnother: a rollout v1 -> v2
// between two emulated Ray clusters, the Runner deploying v2 on cluster B,
// is at weight 40 when another writer PUTs v3's Serve config onto B. The
// strategy walks back: the weight leaves B at once and B's target capacity
// goes to 0 with v3's config left as it is (SetCapacity may always take
// capacity away, whatever the cluster runs); the rollout ends Aborted
// (RevisionChanged). Retry deploys v2 on B at target_capacity 0, observes
// it, ramps again and succeeds. Traffic never reaches B while it runs
// anything but v2 after the walk back's first reconcile, and every config
// upshift puts on a cluster lands at target_capacity 0 on a cluster that
// serves nothing (the emulators' guard). The other writer's PUT keeps B's
// target capacity (40), or sets it to null (100).
func TestRunWalksBackACanaryClusterRedeployedByAnother(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other string // the other writer's target_capacity: JSON, "" for none
		// after are upshift's PUTs to B after the other writer's: the walk
		// back over v3's config, then the deploy of v2 at 0.
		after []string
	}{
		// B held 50 for the 40 asked (Ray's rounding); the other writer
		// kept it. The walk back takes it to 0.
		{"target capacity kept", "50", []string{"target_capacity=0", "target_capacity=0"}},
		// null is 100: the canary is brought back to what its traffic
		// needs (40, written 50), then to 0.
		{"no target capacity", "", []string{"target_capacity=50", "target_capacity=0", "target_capacity=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			walkBackRedeployedCanary(t, tc.other, tc.after)
		})
	}
}

func walkBackRedeployedCanary(t *testing.T, otherTC string, after []string) {
	ctx := context.Background()
	revisions := upgradeConfigs()
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	router := fake.NewRouter(clock)
	type side struct {
		rs  *raytest.Server
		r   *ray.Ray
		dep *ray.Deployer
	}
	sides := map[strategy.Side]*side{}
	for s, opts := range map[strategy.Side]raytest.Options{
		strategy.SideA: {BuildPolls: 1, StartPolls: 2, StopPolls: 1},
		strategy.SideB: {BuildPolls: 2, StartPolls: 3, StopPolls: 2},
	} {
		opts.Clock, opts.GuardRedeploys = clock, true
		rs := raytest.New(opts)
		rs.ServingFunc(router.Serving(s))
		srv := httptest.NewServer(rs)
		t.Cleanup(srv.Close)
		// Every read is a GET (ReadMaxAge negative): the test pins the
		// walk back that the first reconcile after the other writer's PUT
		// starts, to the PUT. With answers reused the Runner sees that
		// PUT up to ReadMaxAge later, and may first ask B for more
		// capacity, which SetCapacity's own GET refuses or turns into a
		// write of B's config as it runs (TestReuseAndAnotherWriter).
		r, err := ray.New(ray.Config{Dashboard: srv.URL, Revisions: ray.RevisionMap(revisions), ReadMaxAge: -1})
		if err != nil {
			t.Fatal(err)
		}
		dep, err := r.Deployer()
		if err != nil {
			t.Fatal(err)
		}
		sides[s] = &side{rs: rs, r: r, dep: dep}
	}
	a, b := sides[strategy.SideA], sides[strategy.SideB]
	if err := a.dep.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := a.r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	a.rs.Advance(4)

	runner := &rollout.Runner{
		Strategy: strategy.Canary{
			Steps:           []strategy.CanaryStep{strategy.SetWeight(40), strategy.Pause(time.Minute)},
			MaxSurgePercent: 40,
			Options:         strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}},
		},
		Router: router, A: a.r, B: b.r, RevisionA: a.dep, RevisionB: b.dep, Clock: clock,
	}
	if err := runner.Validate(); err != nil {
		t.Fatal(err)
	}
	// reconcile runs one reconcile and checks that traffic reaches B only
	// while B runs v2: while it runs anything else (another writer's
	// config, until the walk back has moved its traffic away) B's share of
	// traffic never grows.
	reconciles := 0
	lastB := int32(0) // B's share of traffic after the previous reconcile
	reconcile := func(s strategy.State) strategy.State {
		t.Helper()
		next, requeue, err := runner.Reconcile(ctx, s)
		if err != nil {
			t.Fatalf("reconcile %d: %v", reconciles, err)
		}
		reconciles++
		share := router.Serving(strategy.SideB)()
		if share > lastB && !runsConfig(t, b.rs, revisions["v2"]) {
			st, _ := router.Status()
			t.Fatalf("reconcile %d (%s, desired %+v): cluster B may receive %d%% of traffic (weights %+v applied, %+v asked; %d%% before) while it runs another config than v2's",
				reconciles, next.Phase, next.Desired, share, router.Applied(), st.Weights, lastB)
		}
		lastB = share
		if requeue <= 0 {
			requeue = time.Second
		}
		clock.Advance(requeue)
		return next
	}
	until := func(s strategy.State, what string, done func(strategy.State) bool) strategy.State {
		t.Helper()
		for i := 0; !done(s); i++ {
			if i > 500 {
				tcB, _ := b.rs.TargetCapacity()
				t.Fatalf("%s: not reached after %d reconciles: %s %+v observed %+v (%s); B at target_capacity %v, PUTs to B %v",
					what, i, s.Phase, s.Desired, s.Observed, s.Message, fmtTC(tcB), puts(b.rs))
			}
			s = reconcile(s)
		}
		return s
	}

	s := strategy.State{}.Retarget("v1", clock.Now()).Retarget("v2", clock.Now())
	// Weight 40 in force: the pause has begun (or begins at the next
	// reconcile), the stable side shrinking to its traffic.
	s = until(s, "weight 40 on v2", func(s strategy.State) bool {
		return s.Observed.Weight == 40 && s.Desired.Weight == 40 && (s.Phase == strategy.PhaseProgressing || s.Phase == strategy.PhasePaused)
	})
	atRedeploy := s.Phase
	if !runsConfig(t, b.rs, revisions["v2"]) {
		t.Fatal("cluster B does not run v2 at weight 40")
	}

	// Another writer puts v3 on cluster B, which serves 40% of traffic.
	if err := b.rs.PutByOther(withTargetCapacity(t, revisions["v3"], otherTC)); err != nil {
		t.Fatal(err)
	}
	redeployedAt := reconciles
	var phases []strategy.Phase
	s = until(s, "the walk back", func(s strategy.State) bool {
		if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
			phases = append(phases, s.Phase)
		}
		return s.Phase == strategy.PhaseAborted
	})
	if diff := cmp.Diff([]strategy.Phase{atRedeploy, strategy.PhaseAborting, strategy.PhaseAborted}, phases); diff != "" {
		t.Errorf("phases after the redeploy (-want +got):\n%s", diff)
	}
	if s.Aborted == nil || s.Aborted.Reason != strategy.ReasonRevisionChanged {
		t.Errorf("aborted %+v, want reason %s", s.Aborted, strategy.ReasonRevisionChanged)
	}
	if tcB, _ := b.rs.TargetCapacity(); tcB == nil || *tcB != 0 {
		t.Errorf("cluster B at target_capacity %v after the walk back, want 0", fmtTC(tcB))
	}
	if !runsConfig(t, b.rs, revisions["v3"]) {
		t.Error("the walk back changed the config of cluster B: it should run v3's, as the other writer left it")
	}
	if w := router.Applied(); w != (rollout.Weights{A: 100}) {
		t.Errorf("weights %+v after the walk back, want all on A", w)
	}

	// Retry: v2 is deployed on B at target_capacity 0 and ramped again.
	s = s.Retry(clock.Now())
	s = until(s, "success after Retry", func(s strategy.State) bool { return s.Phase.Terminal() })
	if s.Phase != strategy.PhaseSucceeded || s.StableRevision != "v2" || s.StableSide != strategy.SideB {
		t.Fatalf("ended %s with %s stable on side %s: %s", s.Phase, s.StableRevision, s.StableSide, s.Message)
	}
	if w := router.Applied(); w != (rollout.Weights{B: 100}) {
		t.Errorf("weights %+v, want all on B", w)
	}
	if !runsConfig(t, b.rs, revisions["v2"]) {
		t.Error("cluster B does not run v2 at the end")
	}
	if _, ok := b.rs.DeployedConfig("search"); ok {
		t.Error("cluster B still runs search, which only v3 has")
	}
	if tcB, _ := b.rs.TargetCapacity(); tcB != nil {
		t.Errorf("cluster B at target_capacity %v, want null", fmtTC(tcB))
	}
	if tcA, _ := a.rs.TargetCapacity(); tcA == nil || *tcA != 0 {
		t.Errorf("cluster A at target_capacity %v, want 0", fmtTC(tcA))
	}
	for name, sd := range map[string]*side{"A": a, "B": b} {
		for _, v := range sd.rs.Violations() {
			t.Errorf("cluster %s, emulator's guard: %s", name, v)
		}
	}
	// On B, after the other writer's PUT: the walk back to 0 over v3's
	// config, then the deploy of v2 at 0 on Retry.
	t.Logf("redeployed after reconcile %d of %d; PUTs to B %v", redeployedAt, reconciles, puts(b.rs))
	otherPut := "target_capacity=null"
	if otherTC != "" {
		otherPut = "target_capacity=" + otherTC
	}
	all := puts(b.rs)
	i := indexOf(all, otherPut+" by another writer")
	if i < 0 || i+len(after) >= len(all) {
		t.Fatalf("PUTs to B %v: no other writer's PUT followed by %d of upshift's", all, len(after))
	}
	if diff := cmp.Diff(after, all[i+1:i+1+len(after)]); diff != "" {
		t.Errorf("PUTs to B after the other writer's (-want +got):\n%s", diff)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
