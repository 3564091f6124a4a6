package ray_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// otherConfig is a Serve config of no test revision, as another writer
// would PUT it: cluster-wide fields of its own, two applications listed
// out of name order.
const otherConfig = `{"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": 8123},
  "logging_config": {"log_level": "DEBUG"},
  "applications": [
    {"name": "zeta", "route_prefix": "/z", "import_path": "other.z:app", "deployments": [{"name": "Z", "num_replicas": 4}]},
    {"name": "alpha", "route_prefix": "/a", "import_path": "other.a:app", "runtime_env": {"env_vars": {"K": "v"}},
     "deployments": [{"name": "A", "num_replicas": 2, "max_ongoing_requests": 7}]}]}`

// otherWritten is what writing otherConfig back looks like, target_capacity
// aside: every application's deployed_app_config (by name), and the
// cluster-wide fields as GET reports them (grpc_options at Ray's default,
// no logging_config, which GET does not report and a PUT without one
// keeps).
const otherWritten = `{"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": 8123},
  "grpc_options": {"port": 9000, "grpc_servicer_functions": []},
  "applications": [
    {"name": "alpha", "route_prefix": "/a", "import_path": "other.a:app", "runtime_env": {"env_vars": {"K": "v"}},
     "deployments": [{"name": "A", "num_replicas": 2, "max_ongoing_requests": 7}]},
    {"name": "zeta", "route_prefix": "/z", "import_path": "other.z:app", "deployments": [{"name": "Z", "num_replicas": 4}]}]}`

// TestSetCapacityOnUnknownConfig: on a cluster that runs a config of no
// revision the adapter knows (another writer's), SetCapacity takes
// capacity away by writing back the config the cluster runs, as GET
// reported it, with the new target_capacity; it never raises the
// capacity. The adapter either deployed v1 before the other writer's PUT
// (known) or is new (it never knew a revision).
func TestSetCapacityOnUnknownConfig(t *testing.T) {
	steady := rollout.CapacityRequest{Percent: 100, Steady: true}
	for _, tc := range []struct {
		name  string
		known bool
		held  string // the other writer's target_capacity, JSON ("" for none: null)
		req   rollout.CapacityRequest
		// put is the target_capacity written ("" for no PUT); refused an
		// ErrUnknownRevision.
		put     string
		refused bool
		// capacity is what Capacity reports afterwards.
		capacity int32
	}{
		{name: "to 0", held: "60", req: rollout.CapacityRequest{Percent: 0}, put: "0", capacity: 0},
		{name: "to 0, known", known: true, held: "60", req: rollout.CapacityRequest{Percent: 0}, put: "0", capacity: 0},
		// 30% of 4 replicas needs 2, which Ray gives from 38 on.
		{name: "down, rounded up", held: "60", req: rollout.CapacityRequest{Percent: 30}, put: "38", capacity: 30},
		{name: "down, known", known: true, held: "60", req: rollout.CapacityRequest{Percent: 30}, put: "38", capacity: 30},
		// Never above the cluster's own: 35 stays, as nothing is taken away.
		{name: "rounding kept below the cluster's", held: "35", req: rollout.CapacityRequest{Percent: 30}, capacity: 30},
		{name: "from null", req: rollout.CapacityRequest{Percent: 90}, put: "90", capacity: 90},
		{name: "from null to 0", known: true, req: rollout.CapacityRequest{Percent: 0}, put: "0", capacity: 0},
		{name: "the same", held: "60", req: rollout.CapacityRequest{Percent: 60}, capacity: 60},
		{name: "steady at null", req: steady, capacity: 100},
		{name: "up", held: "60", req: rollout.CapacityRequest{Percent: 61}, refused: true, capacity: 60},
		{name: "up, known", known: true, held: "60", req: rollout.CapacityRequest{Percent: 100}, refused: true, capacity: 60},
		{name: "steady from 100", held: "100", req: steady, refused: true, capacity: 100},
		{name: "steady from 0", known: true, held: "0", req: steady, refused: true, capacity: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rs, srv := cluster(t, raytest.Options{})
			r, d := revAdapter(t, srv.URL)
			if tc.known {
				if err := d.Deploy(ctx, "v1"); err != nil {
					t.Fatal(err)
				}
				if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 70}); err != nil {
					t.Fatal(err)
				}
			}
			other := json.RawMessage(otherConfig)
			if tc.held != "" {
				other = withTargetCapacity(t, other, tc.held)
			}
			put(t, srv.URL, string(other))
			before := rs.Puts()

			err := r.SetCapacity(ctx, tc.req)
			switch {
			case tc.refused && (!errors.Is(err, ray.ErrUnknownRevision) || rollout.IsPermanent(err)):
				t.Fatalf("SetCapacity(%+v) = %v, want a retryable ErrUnknownRevision", tc.req, err)
			case !tc.refused && err != nil:
				t.Fatalf("SetCapacity(%+v): %v", tc.req, err)
			}
			if tc.refused {
				t.Log(err)
			}
			switch n := rs.Puts() - before; {
			case tc.put == "" && n != 0:
				t.Fatalf("%d PUTs, want none (last: %s)", n, rs.LastPut())
			case tc.put != "" && n != 1:
				t.Fatalf("%d PUTs, want 1", n)
			case tc.put != "":
				want := withTargetCapacity(t, json.RawMessage(otherWritten), tc.put)
				if diff := cmp.Diff(decoded(t, string(want)), decoded(t, string(rs.LastPut()))); diff != "" {
					t.Errorf("PUT body (-want +got):\n%s", diff)
				}
			}
			// The cluster runs the other writer's applications as it left
			// them, and keeps its logging_config.
			for _, app := range []string{"zeta", "alpha"} {
				got, ok := rs.DeployedConfig(app)
				var want struct{ Applications []json.RawMessage }
				if err := json.Unmarshal([]byte(otherConfig), &want); err != nil {
					t.Fatal(err)
				}
				if !ok || !sameJSON(t, got, want.Applications[map[string]int{"zeta": 0, "alpha": 1}[app]]) {
					t.Errorf("application %s runs %s (%v), want the other writer's config", app, got, ok)
				}
			}
			st, err := r.Capacity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Capacity != tc.capacity {
				t.Errorf("capacity %d afterwards, want %d (%+v)", st.Capacity, tc.capacity, st)
			}
			// Nothing is recognised, and capacity is still never added.
			if rev := revision(t, d, "v1"); rev.Revision != "" {
				t.Errorf("Revision(v1) = %+v over another config", rev)
			}
			if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); tc.capacity < 100 && !errors.Is(err, ray.ErrUnknownRevision) {
				t.Errorf("raising to 100 afterwards: %v, want ErrUnknownRevision", err)
			}
		})
	}
}

// TestSetCapacityOnUnknownConfigEmpty: a cluster that runs no application
// has no capacity to take away: 0 writes nothing, anything else is
// refused.
func TestSetCapacityOnUnknownConfigEmpty(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	put(t, srv.URL, `{"applications": [], "target_capacity": 40}`)
	r, _ := revAdapter(t, srv.URL)
	before := rs.Puts()
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatalf("SetCapacity(0) on an empty cluster: %v", err)
	}
	for _, req := range []rollout.CapacityRequest{{Percent: 10}, {Percent: 100, Steady: true}} {
		if err := r.SetCapacity(ctx, req); !errors.Is(err, ray.ErrUnknownRevision) {
			t.Errorf("SetCapacity(%+v) on an empty cluster: %v, want ErrUnknownRevision", req, err)
		}
	}
	if n := rs.Puts() - before; n != 0 {
		t.Errorf("%d PUTs to an empty cluster, want none", n)
	}
}

// staticRay answers GET with a fixed body and records PUTs.
type staticRay struct {
	get  string
	mu   sync.Mutex
	puts []string
}

func (s *staticRay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.puts = append(s.puts, string(b))
		s.mu.Unlock()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, s.get)
}

// TestSetCapacityOnUnknownConfigNotWritable: an application Ray reports
// without a deployed_app_config (or with one naming another application)
// cannot be written back as it runs, so lowering the capacity is refused
// with ErrUnknownRevision, and nothing is written.
func TestSetCapacityOnUnknownConfigNotWritable(t *testing.T) {
	for _, tc := range []struct{ name, deployed, want string }{
		{"no deployed_app_config", `null`, `application "app" reports no deployed_app_config`},
		{"another name", `{"name": "other", "import_path": "m:app"}`, `names application "other"`},
		{"not an object", `[1]`, `want an object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &staticRay{get: `{"target_capacity": 50, "applications": {"app": {"name": "app", "status": "RUNNING", "deployed_app_config": ` + tc.deployed + `,
			  "deployments": {"D": {"name": "D", "status": "HEALTHY", "deployment_config": {"num_replicas": 2}, "target_num_replicas": 1, "replicas": [{"replica_id": "r", "state": "RUNNING"}]}}}}}`}
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			r, _ := revAdapter(t, srv.URL)
			err := r.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: 0})
			if !errors.Is(err, ray.ErrUnknownRevision) || rollout.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetCapacity(0) = %v, want a retryable ErrUnknownRevision saying %q", err, tc.want)
			}
			if len(s.puts) != 0 {
				t.Errorf("PUTs %q, want none", s.puts)
			}
		})
	}
}

// TestUnknownConfigProperty: on a cluster that runs another writer's
// config (random applications and replica counts, at a random or null
// target capacity), with an adapter that knew a revision before or none,
// a series of SetCapacity requests never raises the cluster's target
// capacity, never changes the config it runs (the emulator's guard sees
// no redeploy), and never fails
// permanently; a request at or below the cluster's capacity is carried
// out (the value written at least the one asked, unless the cluster held
// less), and one above it is refused with ErrUnknownRevision, writing
// nothing.
func TestUnknownConfigProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		rs := raytest.New(raytest.Options{StartPolls: rapid.IntRange(0, 2).Draw(t, "start"), GuardRedeploys: true})
		r, d := revAdapter(t, "http://ray.test", inProcess(rs))
		if rapid.Bool().Draw(t, "known") {
			if err := d.Deploy(ctx, "v1"); err != nil {
				t.Fatal(err)
			}
		}
		var apps []any
		for i := range rapid.IntRange(1, 3).Draw(t, "apps") {
			var deps []any
			for j := range rapid.IntRange(1, 3).Draw(t, "deployments") {
				deps = append(deps, map[string]any{"name": fmt.Sprintf("d%d", j), "num_replicas": rapid.IntRange(0, 12).Draw(t, "num")})
			}
			apps = append(apps, map[string]any{"name": fmt.Sprintf("app%d", i), "route_prefix": fmt.Sprintf("/a%d", i),
				"import_path": "other:app", "deployments": deps})
		}
		other := map[string]any{"applications": apps}
		if rapid.Bool().Draw(t, "pinned") {
			other["target_capacity"] = rapid.IntRange(0, 100).Draw(t, "held")
		}
		raw, err := json.Marshal(other)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.PutByOther(raw); err != nil {
			t.Fatal(err)
		}
		configs := map[string]json.RawMessage{}
		for i := range apps {
			name := fmt.Sprintf("app%d", i)
			configs[name], _ = rs.DeployedConfig(name)
		}
		for range rapid.IntRange(1, 6).Draw(t, "requests") {
			req := rollout.CapacityRequest{Percent: int32(rapid.IntRange(0, 100).Draw(t, "percent"))}
			if req.Percent == 100 && rapid.Bool().Draw(t, "steady") {
				req.Steady = true
			}
			rs.Advance(rapid.IntRange(0, 2).Draw(t, "polls"))
			before, _ := rs.TargetCapacity()
			held := 100.0
			if before != nil {
				held = *before
			}
			puts := rs.Puts()
			err := r.SetCapacity(ctx, req)
			after, _ := rs.TargetCapacity()
			raise := req.Steady && before != nil || !req.Steady && float64(req.Percent) > held
			switch {
			case rollout.IsPermanent(err):
				t.Fatalf("SetCapacity(%+v) at %v: a permanent error: %v", req, fmtTC(before), err)
			case raise && !errors.Is(err, ray.ErrUnknownRevision):
				t.Fatalf("SetCapacity(%+v) at %v: %v, want ErrUnknownRevision", req, fmtTC(before), err)
			case raise && rs.Puts() != puts:
				t.Fatalf("SetCapacity(%+v) at %v wrote, refusing", req, fmtTC(before))
			case !raise && err != nil:
				t.Fatalf("SetCapacity(%+v) at %v: %v", req, fmtTC(before), err)
			}
			switch {
			case before != nil && after == nil:
				t.Fatalf("SetCapacity(%+v): target capacity %v -> %v", req, fmtTC(before), fmtTC(after))
			case after != nil && *after > held:
				t.Fatalf("SetCapacity(%+v): target capacity raised %v -> %v", req, fmtTC(before), fmtTC(after))
			case !raise && !req.Steady && after != nil && *after < float64(req.Percent):
				t.Fatalf("SetCapacity(%+v): target capacity %v -> %v, below the %d asked", req, fmtTC(before), fmtTC(after), req.Percent)
			}
			for name, want := range configs {
				if got, ok := rs.DeployedConfig(name); !ok || !bytes.Equal(got, want) {
					t.Fatalf("SetCapacity(%+v): application %s runs %s (%v), want %s", req, name, got, ok, want)
				}
			}
			if _, ok := rs.DeployedConfig("llm"); ok {
				t.Fatalf("SetCapacity(%+v) put v1's application back", req)
			}
			if n := len(rs.Violations()); n > 0 {
				t.Fatalf("violations: %v", rs.Violations())
			}
		}
	})
}
