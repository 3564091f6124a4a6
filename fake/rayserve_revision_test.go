package fake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// rayRevConfig is a Serve config of one application whose user_config
// names a revision, at a target capacity ("null" or a number), with more
// applications (names) when given.
func rayRevConfig(rev, tc string, more ...string) string {
	apps := []string{fmt.Sprintf(`{"name": "app", "route_prefix": "/app", "import_path": "m:app",
	  "deployments": [{"name": "D", "num_replicas": 2, "user_config": {"revision": %q}}]}`, rev)}
	for _, name := range more {
		apps = append(apps, fmt.Sprintf(`{"name": %q, "route_prefix": "/%s", "import_path": "m:x"}`, name, name))
	}
	return fmt.Sprintf(`{"applications": [%s], "target_capacity": %s}`, strings.Join(apps, ", "), tc)
}

// TestRayServeGuardRedeploys walks one guarded cluster through PUTs: a
// config change is taken only at target_capacity 0, onto a cluster at 0,
// that serves nothing.
func TestRayServeGuardRedeploys(t *testing.T) {
	rs := fake.NewRayServe(fake.RayServeOptions{GuardRedeploys: true})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	var serving int32
	rs.ServingFunc(func() int32 { return serving })
	steps := []struct {
		what    string
		serving int32
		put     string // "" sends a DELETE
		ok      bool
		running string // the revision in app's deployed config afterwards
	}{
		{"the first config, at any capacity", 0, rayRevConfig("v1", "null"), true, "v1"},
		{"a capacity change at null", 0, rayRevConfig("v1", "50"), true, "v1"},
		{"a config change at 50", 0, rayRevConfig("v2", "50"), false, "v1"},
		{"a config change asking 0 from 50", 0, rayRevConfig("v2", "0"), false, "v1"},
		{"down to 0", 0, rayRevConfig("v1", "0"), true, "v1"},
		{"a config change at 0 that asks 30", 0, rayRevConfig("v2", "30"), false, "v1"},
		{"a config change at 0 while serving", 10, rayRevConfig("v2", "0"), false, "v1"},
		{"a config change at 0", 0, rayRevConfig("v2", "0"), true, "v2"},
		{"an application added at 0", 0, rayRevConfig("v2", "0", "other"), true, "v2"},
		{"up to 100", 0, rayRevConfig("v2", "100", "other"), true, "v2"},
		{"an application removed at 100", 0, rayRevConfig("v2", "100"), false, "v2"},
		{"a top-level field changed at 100", 0, strings.Replace(rayRevConfig("v2", "100", "other"), `{"applications"`, `{"proxy_location": "HeadOnly", "applications"`, 1), false, "v2"},
		{"a reformatted config at null", 0, strings.ReplaceAll(rayRevConfig("v2", "null", "other"), " ", ""), true, "v2"},
		{"after a shutdown", 0, "", true, ""},
		{"the first config again, at any capacity", 0, rayRevConfig("v3", "100"), true, "v3"},
	}
	for _, s := range steps {
		serving = s.serving
		before := rs.Puts()
		var code int
		var text string
		if s.put == "" {
			code, text = rayDo(t, srv, http.MethodDelete, "", "")
		} else {
			code, text = rayDo(t, srv, http.MethodPut, "", s.put)
		}
		switch {
		case s.ok && code != 200:
			t.Fatalf("%s: %d %s", s.what, code, text)
		case !s.ok && (code != 400 || !strings.Contains(text, "refusing to redeploy")):
			t.Fatalf("%s: %d %q, want 400 refusing to redeploy", s.what, code, text)
		case !s.ok && rs.Puts() != before:
			t.Fatalf("%s: a refused PUT counted", s.what)
		}
		running := ""
		if raw, ok := rs.DeployedConfig("app"); ok {
			var cfg struct {
				Deployments []struct {
					UserConfig struct{ Revision string } `json:"user_config"`
				}
			}
			if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg.Deployments) != 1 {
				t.Fatalf("%s: deployed config %s: %v", s.what, raw, err)
			}
			running = cfg.Deployments[0].UserConfig.Revision
		}
		if running != s.running {
			t.Fatalf("%s: deployed revision %q, want %q", s.what, running, s.running)
		}
	}
	want := []string{
		`PUT changes application "app" while the cluster is at target_capacity 50 and the PUT asks target_capacity 50`,
		`PUT changes application "app" while the cluster is at target_capacity 50`,
		`PUT changes application "app" while the PUT asks target_capacity 30`,
		`PUT changes application "app" while the cluster serves 10% of traffic`,
		`PUT changes application "other" (removed) while the cluster is at target_capacity 100 and the PUT asks target_capacity 100`,
		`PUT changes field "proxy_location" while the cluster is at target_capacity 100 and the PUT asks target_capacity 100`,
	}
	if diff := cmp.Diff(want, rs.Violations()); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	var refused int
	for _, c := range rs.History() {
		if c.Op == "PUT" && c.Arg == "redeploy" && c.Err != nil {
			refused++
		}
	}
	if refused != len(want) {
		t.Errorf("%d refused PUTs in the history, want %d", refused, len(want))
	}
}

// TestRayServeUnguarded: without GuardRedeploys the emulator takes a config
// change at any capacity, as Ray does, and records no violation.
func TestRayServeUnguarded(t *testing.T) {
	rs := fake.NewRayServe(fake.RayServeOptions{})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	rs.ServingFunc(func() int32 { return 100 })
	for _, put := range []string{rayRevConfig("v1", "null"), rayRevConfig("v2", "50"), rayRevConfig("v3", "null", "other")} {
		if code, text := rayDo(t, srv, http.MethodPut, "", put); code != 200 {
			t.Fatalf("PUT: %d %s", code, text)
		}
	}
	if v := rs.Violations(); v != nil {
		t.Errorf("violations: %v", v)
	}
	raw, ok := rs.DeployedConfig("other")
	if !ok || !json.Valid(raw) {
		t.Errorf("DeployedConfig(other) = %s, %v", raw, ok)
	}
	if _, ok := rs.DeployedConfig("nope"); ok {
		t.Error("DeployedConfig of an unknown application")
	}
	// The config returned is a copy.
	raw[0] = 'x'
	if again, _ := rs.DeployedConfig("other"); !json.Valid(again) {
		t.Error("DeployedConfig returned the emulator's own bytes")
	}
}

// TestRayServeGuardServingRouter: the guard reads a Router's share of the
// cluster's side, and the check happens when a PUT arrives.
func TestRayServeGuardServingRouter(t *testing.T) {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	rs := fake.NewRayServe(fake.RayServeOptions{GuardRedeploys: true})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	rs.ServingFunc(router.Serving(strategy.SideB))
	rayDo(t, srv, http.MethodPut, "", rayRevConfig("v1", "0"))
	router.SetWeights(ctx, rollout.Weights{A: 95, B: 5})
	if code, _ := rayDo(t, srv, http.MethodPut, "", rayRevConfig("v2", "0")); code != 400 {
		t.Fatalf("a redeploy under 5%% of traffic: %d, want 400", code)
	}
	router.SetWeights(ctx, rollout.Weights{A: 100})
	if code, text := rayDo(t, srv, http.MethodPut, "", rayRevConfig("v2", "0")); code != 200 {
		t.Fatalf("a redeploy at weight 0: %d %s", code, text)
	}
	if diff := cmp.Diff([]string{`PUT changes application "app" while the cluster serves 5% of traffic`}, rs.Violations()); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// A guarded cluster takes a new config only at target_capacity 0: the way
// upshift deploys a revision on a Ray cluster.
func ExampleRayServeOptions_guardRedeploys() {
	rs := fake.NewRayServe(fake.RayServeOptions{GuardRedeploys: true})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	put := func(body string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/serve/applications/", strings.NewReader(body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	config := `{"applications": [{"name": "app", "import_path": "m:%s"}], "target_capacity": %d}`
	put(fmt.Sprintf(config, "v1", 100)) // the first config
	put(fmt.Sprintf(config, "v2", 100)) // a redeploy of a serving cluster
	put(fmt.Sprintf(config, "v1", 0))   // scaled to zero
	put(fmt.Sprintf(config, "v2", 0))   // a redeploy at zero
	fmt.Println(rs.Violations())
	// Output:
	// 200
	// 400
	// 200
	// 200
	// [PUT changes application "app" while the cluster is at target_capacity 100 and the PUT asks target_capacity 100]
}
