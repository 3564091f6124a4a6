package raytest_test

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
	"github.com/upshift-dev/upshift/serve/ray/raytest"
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

// TestGuardRedeploys walks one guarded cluster through PUTs: a
// config change is taken only at target_capacity 0, onto a cluster at 0,
// that serves nothing.
func TestGuardRedeploys(t *testing.T) {
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
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

// TestUnguarded: without GuardRedeploys the emulator takes a config
// change at any capacity, as Ray does, and records no violation.
func TestUnguarded(t *testing.T) {
	rs := raytest.New(raytest.Options{})
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

// TestGuardServingRouter: the guard reads a Router's share of the
// cluster's side, and the check happens when a PUT arrives.
func TestGuardServingRouter(t *testing.T) {
	ctx := context.Background()
	router := fake.NewRouter(nil)
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
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
func ExampleOptions_guardRedeploys() {
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
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

// TestPutByOther: another writer's PUT is applied whatever the
// guard, counted, and recorded as another writer's; one Ray would refuse
// changes nothing.
func TestPutByOther(t *testing.T) {
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	rs.ServingFunc(func() int32 { return 100 })
	if code, text := rayDo(t, srv, http.MethodPut, "", rayRevConfig("v1", "100")); code != 200 {
		t.Fatalf("first PUT: %d %s", code, text)
	}
	// The guard refuses the client under test a redeploy of a serving
	// cluster, and lets another writer make it.
	if code, _ := rayDo(t, srv, http.MethodPut, "", rayRevConfig("v2", "100")); code != 400 {
		t.Fatalf("a redeploy of a serving cluster: %d, want 400", code)
	}
	if err := rs.PutByOther(json.RawMessage(rayRevConfig("v2", "40"))); err != nil {
		t.Fatal(err)
	}
	if raw, ok := rs.DeployedConfig("app"); !ok || !strings.Contains(string(raw), `"v2"`) {
		t.Errorf("after another writer's PUT the cluster runs %s (%v), want v2", raw, ok)
	}
	if tc, _ := rs.TargetCapacity(); tc == nil || *tc != 40 {
		t.Errorf("target capacity %v, want 40", tc)
	}
	err := rs.PutByOther(json.RawMessage(`{"applications": [{"name": "app"}]}`))
	if err == nil || !strings.Contains(err.Error(), "import_path") {
		t.Errorf("an invalid config by another writer: %v, want an error naming import_path", err)
	}
	if raw, _ := rs.DeployedConfig("app"); !strings.Contains(string(raw), `"v2"`) {
		t.Errorf("an invalid config changed the cluster: %s", raw)
	}
	if rs.Puts() != 2 {
		t.Errorf("%d PUTs, want 2 (the first, another writer's)", rs.Puts())
	}
	var got []string
	for _, c := range rs.History() {
		if c.Op == "PUT" {
			got = append(got, fmt.Sprintf("%s %v", c.Arg, c.Err != nil))
		}
	}
	want := []string{"target_capacity=100 false", "redeploy true", "target_capacity=40 by another writer false", "invalid by another writer true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PUTs in the history (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{`PUT changes application "app" while the cluster is at target_capacity 100 and the PUT asks target_capacity 100 and the cluster serves 100% of traffic`}, rs.Violations()); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// TestGuardWriteBack: a client that writes back the config GET
// reports (the cluster-wide fields as reported, no logging_config, which
// GET does not report) with another target_capacity changes nothing the
// guard counts, as with Ray, whose dashboard ignores HTTP and gRPC options
// a running Serve already has and applies a logging_config only when a
// PUT carries one. A different logging_config is a change.
func TestGuardWriteBack(t *testing.T) {
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	app := `{"name": "app", "route_prefix": "/app", "import_path": "m:app", "deployments": [{"name": "D", "num_replicas": 2}]}`
	first := `{"logging_config": {"log_level": "DEBUG"}, "applications": [` + app + `], "target_capacity": 100}`
	if code, text := rayDo(t, srv, http.MethodPut, "", first); code != 200 {
		t.Fatalf("first PUT: %d %s", code, text)
	}
	got := rayGet(t, srv)
	back := map[string]any{"applications": []any{}, "target_capacity": 50}
	for _, f := range []string{"proxy_location", "http_options", "grpc_options"} {
		if got[f] == nil {
			t.Fatalf("GET reports no %s: %v", f, got)
		}
		back[f] = got[f]
	}
	back["applications"] = []any{got["applications"].(map[string]any)["app"].(map[string]any)["deployed_app_config"]}
	body, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := rayDo(t, srv, http.MethodPut, "", string(body)); code != 200 {
		t.Fatalf("writing back what GET reported at 50: %d %s", code, text)
	}
	// The logging_config was kept: the same one is no change, another is.
	same := `{"logging_config": {"log_level": "DEBUG"}, "applications": [` + app + `], "target_capacity": 40}`
	if code, text := rayDo(t, srv, http.MethodPut, "", same); code != 200 {
		t.Fatalf("the same logging_config at 40: %d %s", code, text)
	}
	other := `{"logging_config": {"log_level": "INFO"}, "applications": [` + app + `], "target_capacity": 40}`
	if code, _ := rayDo(t, srv, http.MethodPut, "", other); code != 400 {
		t.Fatalf("another logging_config at 40: %d, want 400", code)
	}
	if diff := cmp.Diff([]string{`PUT changes field "logging_config" while the cluster is at target_capacity 40 and the PUT asks target_capacity 40`}, rs.Violations()); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// Another writer may redeploy a serving cluster; the guard, which checks
// the client under test, lets it through and records no violation.
func ExampleServer_PutByOther() {
	rs := raytest.New(raytest.Options{GuardRedeploys: true})
	config := `{"applications": [{"name": "app", "import_path": "m:%s"}], "target_capacity": 100}`
	if err := rs.PutByOther(json.RawMessage(fmt.Sprintf(config, "v1"))); err != nil {
		fmt.Println(err)
	}
	if err := rs.PutByOther(json.RawMessage(fmt.Sprintf(config, "v2"))); err != nil { // a redeploy at 100
		fmt.Println(err)
	}
	raw, _ := rs.DeployedConfig("app")
	fmt.Println(string(raw), rs.Violations())
	fmt.Println(rs.PutByOther(json.RawMessage(`{"applications": [{"name": "app"}]}`)))
	// Output:
	// {"name": "app", "import_path": "m:v2"} []
	// raytest: 1 validation error(s) for ServeDeploySchema: applications.0.import_path: field required
}
