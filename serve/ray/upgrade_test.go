package ray_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
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

// upgradeConfigs are three revisions of a shop: v2 changes the code's
// version, v3 changes it again and adds an application.
func upgradeConfigs() map[string]json.RawMessage {
	shop := func(version string) string {
		return `{"name": "shop", "route_prefix": "/", "import_path": "shop.app:build",
		  "runtime_env": {"env_vars": {"VERSION": "` + version + `"}},
		  "deployments": [
		    {"name": "Ingress", "num_replicas": 10},
		    {"name": "Ranker", "num_replicas": 5},
		    {"name": "Model", "num_replicas": 3},
		    {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}]}`
	}
	search := `{"name": "search", "route_prefix": "/search", "import_path": "search.app:build",
	  "deployments": [{"name": "Index", "num_replicas": 4}]}`
	return map[string]json.RawMessage{
		"v1": json.RawMessage(`{"proxy_location": "EveryNode", "applications": [` + shop("1") + `]}`),
		"v2": json.RawMessage(`{"proxy_location": "EveryNode", "applications": [` + shop("2") + `]}`),
		"v3": json.RawMessage(`{"proxy_location": "EveryNode", "applications": [` + shop("3") + `, ` + search + `]}`),
	}
}

// configWatch sits in front of an emulated cluster and checks every
// accepted PUT: a change of the Serve config (anything but
// target_capacity) must land on a cluster at target_capacity 0, ask 0,
// and find the cluster serving no traffic. It records which revision each
// change put on the cluster.
type configWatch struct {
	rs      *raytest.Server
	serving func() int32
	names   map[string]any // revision -> config without target_capacity

	mu         sync.Mutex
	last       any
	changes    []string // the revisions the config became, in order
	violations []string
}

func newConfigWatch(rs *raytest.Server, serving func() int32, revisions map[string]json.RawMessage) *configWatch {
	w := &configWatch{rs: rs, serving: serving, names: map[string]any{}}
	for name, raw := range revisions {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			panic(err)
		}
		w.names[name] = m
	}
	return w
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (w *configWatch) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPut {
		w.rs.ServeHTTP(rw, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	w.mu.Lock()
	defer w.mu.Unlock()
	before, _ := w.rs.TargetCapacity()
	serving := w.serving()
	sw := &statusWriter{ResponseWriter: rw, code: http.StatusOK}
	w.rs.ServeHTTP(sw, req)
	if sw.code != http.StatusOK {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		w.violations = append(w.violations, fmt.Sprintf("accepted PUT is not JSON: %v", err))
		return
	}
	asked := m["target_capacity"]
	delete(m, "target_capacity")
	if w.last != nil && reflect.DeepEqual(w.last, m) {
		return // a capacity change
	}
	name := "unknown config"
	for n, c := range w.names {
		if reflect.DeepEqual(c, m) {
			name = n
		}
	}
	if w.last != nil && (before == nil || *before != 0 || asked != 0.0 || serving != 0) {
		w.violations = append(w.violations, fmt.Sprintf("config changed to %s at target_capacity %v (PUT asks %v) serving %d%%",
			name, fmtTC(before), asked, serving))
	}
	w.last = m
	w.changes = append(w.changes, name)
}

// upgradeSide is one emulated cluster behind its watch, and the adapters
// a process builds for it.
type upgradeSide struct {
	side  strategy.Side
	rs    *raytest.Server
	watch *configWatch
	url   string
	// clock is the Runner's, on which the adapters age the answers they
	// reuse.
	clock *fake.Clock
	cap   *watched
	dep   *ray.Deployer
}

// connect builds the adapters anew, as a process does when it starts.
func (u *upgradeSide) connect(t *testing.T, router *fake.Router, revisions map[string]json.RawMessage) {
	t.Helper()
	r, err := ray.New(ray.Config{Dashboard: u.url, Revisions: ray.RevisionMap(revisions), Clock: u.clock})
	if err != nil {
		t.Fatal(err)
	}
	if u.dep, err = r.Deployer(); err != nil {
		t.Fatal(err)
	}
	prev := u.cap
	u.cap = &watched{CapacitySetter: r, side: u.side, router: router}
	if prev != nil {
		u.cap.polls, u.cap.violations = prev.polls, prev.violations
	}
}

// TestRevisionUpgradesBetweenRayClusters: v1 -> v2 -> v3 across two
// emulated Ray clusters in the managed capacity mode, the Runner deploying
// each revision on the canary cluster. At every poll each side is ready
// for the traffic the data plane sends it, and a cluster's Serve config
// changes only at target_capacity 0 while it serves nothing (checked in
// front of each cluster and by the emulator's guard). The process
// restarts (new adapter values) in the middle of the v3 ramp.
func TestRevisionUpgradesBetweenRayClusters(t *testing.T) {
	ctx := context.Background()
	revisions := upgradeConfigs()
	clock := fake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	router := fake.NewRouter(clock)
	sides := map[strategy.Side]*upgradeSide{}
	for side, opts := range map[strategy.Side]raytest.Options{
		strategy.SideA: {BuildPolls: 1, StartPolls: 2, StopPolls: 1},
		strategy.SideB: {BuildPolls: 2, StartPolls: 3, StopPolls: 2},
	} {
		opts.Clock, opts.GuardRedeploys = clock, true
		rs := raytest.New(opts)
		rs.ServingFunc(router.Serving(side))
		w := newConfigWatch(rs, router.Serving(side), revisions)
		srv := httptest.NewServer(w)
		t.Cleanup(srv.Close)
		u := &upgradeSide{side: side, rs: rs, watch: w, url: srv.URL, clock: clock}
		u.connect(t, router, revisions)
		sides[side] = u
	}
	a, b := sides[strategy.SideA], sides[strategy.SideB]

	// Cluster A is created running v1 and serves everything.
	if err := a.dep.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := a.cap.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	a.rs.Advance(4)

	runner := func() *rollout.Runner {
		return &rollout.Runner{
			Strategy: strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: 5 * time.Second}, MaxSurgePercent: 30,
				Options: strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}},
			Router: router, A: a.cap, B: b.cap, RevisionA: a.dep, RevisionB: b.dep, Clock: clock,
		}
	}
	r := runner()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	s := strategy.State{}.Retarget("v1", clock.Now())
	restarted := false
	reconciles := 0
	for _, rev := range []string{"v2", "v3"} {
		s = s.Retarget(rev, clock.Now())
		for i := 0; !s.Phase.Terminal(); i++ {
			if i > 2000 {
				t.Fatalf("to %s: not finished after %d reconciles: %s %+v (%s)", rev, i, s.Phase, s.Desired, s.Message)
			}
			if rev == "v3" && !restarted && s.Observed.Weight >= 30 {
				a.connect(t, router, revisions) // the process restarts
				b.connect(t, router, revisions)
				r, restarted = runner(), true
			}
			next, requeue, err := r.Reconcile(ctx, s)
			if err != nil {
				t.Fatalf("to %s, reconcile %d: %v", rev, i, err)
			}
			reconciles++
			s = next
			if requeue <= 0 {
				requeue = time.Second
			}
			clock.Advance(requeue)
		}
		if s.Phase != strategy.PhaseSucceeded || s.StableRevision != rev {
			t.Fatalf("to %s: ended %s on %s: %s", rev, s.Phase, s.StableRevision, s.Message)
		}
	}
	if !restarted {
		t.Error("the process never restarted")
	}

	// v3 serves on A with a null target capacity; B keeps v2 at 0.
	if s.StableSide != strategy.SideA {
		t.Errorf("stable side %s, want A", s.StableSide)
	}
	if w := router.Applied(); w != (rollout.Weights{A: 100}) {
		t.Errorf("weights %+v, want all on A", w)
	}
	if tc, running := a.rs.TargetCapacity(); tc != nil || !running {
		t.Errorf("cluster A at target_capacity %v (running %v), want null", fmtTC(tc), running)
	}
	if tc, _ := b.rs.TargetCapacity(); tc == nil || *tc != 0 {
		t.Errorf("cluster B at target_capacity %v, want 0", fmtTC(tc))
	}
	for _, c := range []struct {
		u    *upgradeSide
		rev  string
		apps []string
	}{{a, "v3", []string{"shop", "search"}}, {b, "v2", []string{"shop"}}} {
		var want struct{ Applications []json.RawMessage }
		if err := json.Unmarshal(revisions[c.rev], &want); err != nil {
			t.Fatal(err)
		}
		for i, app := range c.apps {
			got, ok := c.u.rs.DeployedConfig(app)
			if !ok || !sameJSON(t, got, want.Applications[i]) {
				t.Errorf("cluster %s application %s: %s (deployed %v), want %s's", c.u.side, app, got, ok, c.rev)
			}
		}
		if st, err := c.u.dep.Revision(ctx, c.rev); err != nil || st != (rollout.RevisionStatus{Revision: c.rev, Updated: true}) {
			t.Errorf("cluster %s: Revision = %+v, %v", c.u.side, st, err)
		}
	}
	if _, ok := b.rs.DeployedConfig("search"); ok {
		t.Error("cluster B runs search, which only v3 has")
	}
	for _, dep := range []string{"Ingress", "Ranker", "Model", "Embedder"} {
		if st, ok := a.rs.Deployment("shop", dep); !ok || st.Running != st.Target || st.Target == 0 {
			t.Errorf("cluster A shop %s: %+v", dep, st)
		}
		if st, ok := b.rs.Deployment("shop", dep); !ok || st.Target != 0 || st.Running != 0 {
			t.Errorf("cluster B shop %s: %+v", dep, st)
		}
	}

	// Every config change put the next revision on a cluster at zero.
	if diff := cmp.Diff([]string{"v1", "v3"}, a.watch.changes); diff != "" {
		t.Errorf("configs of cluster A (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"v2"}, b.watch.changes); diff != "" {
		t.Errorf("configs of cluster B (-want +got):\n%s", diff)
	}
	for _, u := range []*upgradeSide{a, b} {
		for _, v := range u.watch.violations {
			t.Errorf("cluster %s: %s", u.side, v)
		}
		for _, v := range u.rs.Violations() {
			t.Errorf("cluster %s, emulator's guard: %s", u.side, v)
		}
		for _, v := range u.cap.violations {
			t.Error(v)
		}
	}
	t.Logf("%d reconciles; %d polls of A, %d of B; PUTs to A %v, to B %v", reconciles, a.cap.polls, b.cap.polls, puts(a.rs), puts(b.rs))
}

func sameJSON(t *testing.T, x, y []byte) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(x, &a); err != nil {
		return false
	}
	if err := json.Unmarshal(y, &b); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(a, b)
}
