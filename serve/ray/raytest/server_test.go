package raytest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

const rayPath = "/api/serve/applications/"

// t0 is the instant the tests' clocks start at.
var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func rayDo(t *testing.T, srv *httptest.Server, method, query, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+rayPath+query, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func rayGet(t *testing.T, srv *httptest.Server) map[string]any {
	t.Helper()
	code, body := rayDo(t, srv, http.MethodGet, "?api_type=declarative", "")
	if code != 200 {
		t.Fatalf("GET: %d %s", code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("GET answered %q: %v", body, err)
	}
	return m
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

const rayConfig = `{"applications": [{"name": "app", "route_prefix": "/app", "import_path": "m:app", "runtime_env": {"pip": ["x"]},
  "deployments": [{"name": "D", "num_replicas": 4, "user_config": {"k": 1}}]}], "target_capacity": 50}`

func TestValidation(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string // fragments of the 400 text
	}{
		{"not JSON", `{`, []string{"(body)"}},
		{"no applications", `{"target_capacity": 10}`, []string{"applications: field required"}},
		{"applications not a list", `{"applications": {}}`, []string{"applications: want a list"}},
		{"duplicate names", `{"applications": [{"import_path": "a:b", "route_prefix": "/a"}, {"import_path": "c:d", "route_prefix": "/b"}]}`,
			[]string{`applications.1.name: "default" is already`}},
		{"duplicate prefixes", `{"applications": [{"name": "a", "import_path": "a:b"}, {"name": "b", "import_path": "c:d"}]}`,
			[]string{`applications.1.route_prefix: "/" is already`}},
		{"bad prefix", `{"applications": [{"name": "a", "import_path": "a:b", "route_prefix": "a/"}, {"name": "b", "import_path": "a:b", "route_prefix": "/b/"}]}`,
			[]string{"applications.0.route_prefix", "applications.1.route_prefix"}},
		{"no import path", `{"applications": [{"name": "a"}]}`, []string{"applications.0.import_path: field required"}},
		{"capacity too big", `{"applications": [], "target_capacity": 100.5}`, []string{"target_capacity: 100.5 is outside 0..100"}},
		{"capacity negative", `{"applications": [], "target_capacity": -1}`, []string{"target_capacity"}},
		{"capacity not a number", `{"applications": [], "target_capacity": "50"}`, []string{"target_capacity: want a number"}},
		{"both replica settings", `{"applications": [{"import_path": "a:b", "deployments": [{"name": "D", "num_replicas": 2, "autoscaling_config": {"max_replicas": 3}}]}]}`,
			[]string{"mutually exclusive"}},
		{"autoscaling bounds", `{"applications": [{"import_path": "a:b", "deployments": [{"name": "D", "autoscaling_config": {"min_replicas": 5, "max_replicas": 3, "initial_replicas": 9}}]}]}`,
			[]string{"min_replicas 5 is more than max_replicas 3", "initial_replicas: 9 is outside"}},
		{"bad replicas", `{"applications": [{"import_path": "a:b", "deployments": [{"name": "D", "num_replicas": 1.5}, {"num_replicas": 1}]}]}`,
			[]string{"deployments.0.num_replicas", "deployments.1.name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := raytest.New(raytest.Options{})
			srv := httptest.NewServer(rs)
			defer srv.Close()
			code, text := rayDo(t, srv, http.MethodPut, "", tc.body)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d (%s), want 400", code, text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("400 text %q lacks %q", text, w)
				}
			}
			if rs.Puts() != 0 || rs.LastPut() != nil {
				t.Error("an invalid config was applied")
			}
		})
	}
}

func TestShape(t *testing.T) {
	rs := raytest.New(raytest.Options{BuildPolls: 1, StartPolls: 2, StopPolls: 1})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	empty := rayGet(t, srv)
	if diff := cmp.Diff([]string{"applications", "controller_info", "deploy_mode", "proxies", "target_capacity"}, keys(empty)); diff != "" {
		t.Errorf("empty instance keys (-want +got):\n%s", diff)
	}
	if code, body := rayDo(t, srv, http.MethodPut, "", rayConfig); code != 200 || body != "" {
		t.Fatalf("PUT: %d %q, want 200 and an empty body", code, body)
	}
	type step struct {
		App, Dep      string
		Target, Count int
		States        string
	}
	var got []step
	for range 4 {
		m := rayGet(t, srv)
		app := m["applications"].(map[string]any)["app"].(map[string]any)
		s := step{App: app["status"].(string)}
		if d, ok := app["deployments"].(map[string]any)["D"].(map[string]any); ok {
			s.Dep, s.Target = d["status"].(string), int(d["target_num_replicas"].(float64))
			var states []string
			for _, r := range d["replicas"].([]any) {
				states = append(states, r.(map[string]any)["state"].(string))
			}
			s.Count, s.States = len(states), strings.Join(states, ",")
		}
		got = append(got, s)
	}
	want := []step{
		{App: "DEPLOYING", Dep: "UPDATING", Target: 2, Count: 2, States: "STARTING,STARTING"}, // built on this poll
		{App: "DEPLOYING", Dep: "UPDATING", Target: 2, Count: 2, States: "STARTING,STARTING"},
		{App: "RUNNING", Dep: "HEALTHY", Target: 2, Count: 2, States: "RUNNING,RUNNING"},
		{App: "RUNNING", Dep: "HEALTHY", Target: 2, Count: 2, States: "RUNNING,RUNNING"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("polls (-want +got):\n%s", diff)
	}
	m := rayGet(t, srv)
	wantTop := []string{"applications", "controller_info", "deploy_mode", "grpc_options", "http_options", "proxies", "proxy_location", "target_capacity", "target_groups"}
	if diff := cmp.Diff(wantTop, keys(m)); diff != "" {
		t.Errorf("instance keys (-want +got):\n%s", diff)
	}
	app := m["applications"].(map[string]any)["app"].(map[string]any)
	wantApp := []string{"deployed_app_config", "deployments", "docs_path", "external_scaler_enabled", "last_deployed_time_s", "message", "name", "route_prefix", "source", "status"}
	if diff := cmp.Diff(wantApp, keys(app)); diff != "" {
		t.Errorf("application keys (-want +got):\n%s", diff)
	}
	dep := app["deployments"].(map[string]any)["D"].(map[string]any)
	wantDep := []string{"deployment_config", "message", "name", "replicas", "required_resources", "status", "status_trigger", "target_num_replicas"}
	if diff := cmp.Diff(wantDep, keys(dep)); diff != "" {
		t.Errorf("deployment keys (-want +got):\n%s", diff)
	}
	var submitted map[string]any
	json.Unmarshal([]byte(rayConfig), &submitted)
	if diff := cmp.Diff(submitted["applications"].([]any)[0], app["deployed_app_config"]); diff != "" {
		t.Errorf("deployed_app_config (-want +got):\n%s", diff)
	}
	if m["target_capacity"] != 50.0 || dep["deployment_config"].(map[string]any)["num_replicas"] != 4.0 {
		t.Errorf("target_capacity %v, num_replicas %v", m["target_capacity"], dep["deployment_config"])
	}
	// Lowering the capacity stops replicas at once; they are listed as
	// STOPPING until the next poll.
	rayDo(t, srv, http.MethodPut, "", strings.Replace(rayConfig, `"target_capacity": 50`, `"target_capacity": 25`, 1))
	st, _ := rs.Deployment("app", "D")
	if diff := cmp.Diff(raytest.DeploymentState{Status: "DOWNSCALING", Target: 1, Running: 1, Stopped: 1}, st); diff != "" {
		t.Errorf("after scaling down (-want +got):\n%s", diff)
	}
	if code, _ := rayDo(t, srv, http.MethodGet, "?api_type=sideways", ""); code != 400 {
		t.Errorf("bad api_type: %d, want 400", code)
	}
	if code, body := rayDo(t, srv, http.MethodGet, "?api_type=imperative", ""); code != 200 || strings.Contains(body, `"app"`) {
		t.Errorf("imperative: %d %s", code, body)
	}
	if code, _ := rayDo(t, srv, http.MethodPost, "", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", code)
	}
	// Removing the application from the config deletes it.
	rayDo(t, srv, http.MethodPut, "", `{"applications": []}`)
	if status, _, ok := rs.AppStatus("app"); !ok || status != "DELETING" {
		t.Errorf("after removal: %s %v, want DELETING", status, ok)
	}
	rs.Advance(1)
	if _, _, ok := rs.AppStatus("app"); ok {
		t.Error("the application outlived its replicas")
	}
	if code, _ := rayDo(t, srv, http.MethodDelete, "", ""); code != 200 {
		t.Errorf("DELETE: %d", code)
	}
	if tc, running := rs.TargetCapacity(); tc != nil || running {
		t.Errorf("after shutdown: %v %v", tc, running)
	}
}

func TestFaults(t *testing.T) {
	rs := raytest.New(raytest.Options{StartPolls: 1})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	rs.FailRequests(503, 2)
	for range 2 {
		if code, _ := rayDo(t, srv, http.MethodPut, "", rayConfig); code != 503 {
			t.Fatalf("status %d, want 503", code)
		}
	}
	if code, _ := rayDo(t, srv, http.MethodPut, "", rayConfig); code != 200 {
		t.Fatalf("after the failures: %d", code)
	}
	rs.RequireToken("t")
	if code, _ := rayDo(t, srv, http.MethodGet, "", ""); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
	rs.RequireToken("")
	if err := rs.FailDeployment("app", "D", "DEPLOY_FAILED", "boom"); err != nil {
		t.Fatal(err)
	}
	if err := rs.FailDeployment("app", "D", "SAD", "boom"); err == nil {
		t.Error("an unknown status was accepted")
	}
	rs.Advance(3)
	st, _ := rs.Deployment("app", "D")
	status, msg, _ := rs.AppStatus("app")
	if st.Status != "DEPLOY_FAILED" || st.Running != 0 || status != "DEPLOY_FAILED" || !strings.Contains(msg, "boom") {
		t.Fatalf("failed deployment: %+v, app %s %q", st, status, msg)
	}
	rs.HealDeployment("app", "D")
	rs.Advance(1)
	if st, _ := rs.Deployment("app", "D"); st.Status != "HEALTHY" || st.Running != 2 {
		t.Fatalf("healed: %+v", st)
	}
	rs.Garbage(true)
	_, body := rayDo(t, srv, http.MethodGet, "", "")
	if json.Valid([]byte(body)) {
		t.Errorf("garbage is valid JSON: %s", body)
	}
	rs.Garbage(false)

	// Hang: a request waits for its context, or for Hang(false).
	rs.Hang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+rayPath, nil)
	if _, err := srv.Client().Do(req); err == nil {
		t.Fatal("a hung request answered")
	}
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + rayPath)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	time.Sleep(20 * time.Millisecond)
	rs.Hang(false)
	if code := <-done; code != 200 {
		t.Fatalf("released request: %d", code)
	}
	var ops []string
	for _, c := range rs.History() {
		ops = append(ops, fmt.Sprintf("%s %s %v", c.Op, c.Arg, c.Err != nil))
	}
	want := []string{"PUT  true", "PUT  true", "PUT target_capacity=50 false", "GET  true", "GET  false", "GET hung true", "GET  false"}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

func TestAutoscalingAndConcurrency(t *testing.T) {
	rs := raytest.New(raytest.Options{})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	cfg := `{"applications": [{"import_path": "a:b", "deployments": [{"name": "A", "num_replicas": "auto"},
	  {"name": "B", "autoscaling_config": {"min_replicas": 2, "max_replicas": 8, "initial_replicas": 4}}]}], "target_capacity": %d}`
	rayDo(t, srv, http.MethodPut, "", fmt.Sprintf(cfg, 50))
	for _, c := range []struct {
		dep            string
		demand, target int64
	}{{"B", 0, 2}, {"B", 3, 3}, {"B", 100, 4}, {"A", 0, 1}, {"A", 500, 50}} {
		rs.SetDemand("default", c.dep, c.demand)
		if st, _ := rs.Deployment("default", c.dep); st.Target != c.target || st.Running != c.target {
			t.Errorf("%s with demand %d at 50%%: %+v, want target %d", c.dep, c.demand, st, c.target)
		}
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if (i+j)%2 == 0 {
					rayDo(t, srv, http.MethodPut, "", fmt.Sprintf(cfg, (i*10+j)%101))
				} else {
					rayGet(t, srv)
				}
			}
		}()
	}
	wg.Wait()
	if rs.Polls()+rs.Puts() != 81 {
		t.Errorf("%d polls and %d puts, want 81 in all", rs.Polls(), rs.Puts())
	}
}

// rayPoll is one GET of the emulator, reduced to application "app" and its
// deployment "D".
type rayPoll struct {
	App, Dep, Trigger string
	// Problem: the deployment has a message, which its application's
	// message carries.
	Problem bool
	States  string
}

func rayObserve(t *testing.T, srv *httptest.Server) rayPoll {
	t.Helper()
	app := rayGet(t, srv)["applications"].(map[string]any)["app"].(map[string]any)
	d := app["deployments"].(map[string]any)["D"].(map[string]any)
	var states []string
	for _, r := range d["replicas"].([]any) {
		states = append(states, r.(map[string]any)["state"].(string))
	}
	msg := d["message"].(string)
	return rayPoll{
		App: app["status"].(string), Dep: d["status"].(string), Trigger: d["status_trigger"].(string),
		Problem: msg != "" && strings.Contains(app["message"].(string), msg), States: strings.Join(states, ","),
	}
}

func TestKillReplicas(t *testing.T) {
	type action func(*testing.T, *raytest.Server, *httptest.Server)
	kill := func(n int) action {
		return func(t *testing.T, rs *raytest.Server, _ *httptest.Server) {
			if err := rs.KillReplicas("app", "D", n); err != nil {
				t.Fatal(err)
			}
		}
	}
	loop := func(on bool) action {
		return func(_ *testing.T, rs *raytest.Server, _ *httptest.Server) { rs.CrashLoop("app", "D", on) }
	}
	put := func(body string) action {
		return func(t *testing.T, _ *raytest.Server, srv *httptest.Server) {
			if code, text := rayDo(t, srv, http.MethodPut, "", body); code != 200 {
				t.Fatalf("PUT: %d %s", code, text)
			}
		}
	}
	// rayConfig at 100% with a new user_config: a config update to 4 replicas.
	update := strings.NewReplacer(`"target_capacity": 50`, `"target_capacity": 100`, `{"k": 1}`, `{"k": 2}`).Replace(rayConfig)
	newConfig := strings.Replace(rayConfig, `{"k": 1}`, `{"k": 2}`, 1)
	const (
		hcf     = "HEALTH_CHECK_FAILED"
		healthy = "HEALTHY"
	)
	recovered := func(states string) rayPoll {
		return rayPoll{App: "RUNNING", Dep: healthy, Trigger: "UNSPECIFIED", States: states}
	}
	// A step runs its actions, then polls once.
	type step struct {
		do   []action
		want rayPoll
	}
	cases := []struct {
		name   string
		opts   raytest.Options
		before []action // before the config is put
		settle int      // polls after the put
		steps  []step
	}{
		{
			name: "a killed replica is stopped and replaced", opts: raytest.Options{StartPolls: 3, StopPolls: 2}, settle: 3,
			steps: []step{
				{do: []action{kill(1)}, want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "STOPPING,RUNNING,STARTING"}},
				{want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "RUNNING,STARTING"}},
				{want: recovered("RUNNING,RUNNING")},
				{want: recovered("RUNNING,RUNNING")},
			},
		},
		{
			name: "kills are clamped to the running replicas", opts: raytest.Options{StartPolls: 2}, settle: 2,
			steps: []step{
				{do: []action{kill(5)}, want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "STARTING,STARTING"}},
				{want: recovered("RUNNING,RUNNING")},
				{do: []action{kill(0)}, want: recovered("RUNNING,RUNNING")},
			},
		},
		{
			name: "zero delays recover at once", settle: 1,
			steps: []step{
				{do: []action{kill(1)}, want: recovered("RUNNING,RUNNING")},
			},
		},
		{
			name: "a kill during an update fails the deploy", opts: raytest.Options{StartPolls: 2}, settle: 2,
			steps: []step{
				{do: []action{put(update), kill(1)}, want: rayPoll{App: "DEPLOY_FAILED", Dep: "DEPLOY_FAILED", Trigger: hcf, Problem: true, States: "RUNNING,STARTING,STARTING,STARTING"}},
				{want: recovered("RUNNING,RUNNING,RUNNING,RUNNING")},
			},
		},
		{
			name: "a config change ends the failure", opts: raytest.Options{StartPolls: 3}, settle: 3,
			steps: []step{
				{do: []action{kill(1)}, want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "RUNNING,STARTING"}},
				{do: []action{put(newConfig)}, want: rayPoll{App: "DEPLOYING", Dep: "UPDATING", Trigger: "CONFIG_UPDATE_STARTED", States: "RUNNING,STARTING"}},
				{want: rayPoll{App: "RUNNING", Dep: healthy, Trigger: "CONFIG_UPDATE_COMPLETED", States: "RUNNING,RUNNING"}},
			},
		},
		{
			name: "crash loop: replacements keep failing", opts: raytest.Options{StartPolls: 1, StopPolls: 1}, settle: 1,
			steps: []step{
				{do: []action{loop(true)}, want: rayPoll{App: "RUNNING", Dep: healthy, Trigger: "CONFIG_UPDATE_COMPLETED", States: "RUNNING,RUNNING"}},
				{do: []action{kill(2)}, want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "STOPPING,STOPPING,STARTING,STARTING"}},
				{want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "STOPPING,STOPPING,STARTING,STARTING"}},
				{want: rayPoll{App: "UNHEALTHY", Dep: "UNHEALTHY", Trigger: hcf, Problem: true, States: "STOPPING,STOPPING,STARTING,STARTING"}},
				{do: []action{loop(false)}, want: recovered("RUNNING,RUNNING")},
			},
		},
		{
			name: "crash loop from the first deploy", opts: raytest.Options{StartPolls: 1}, before: []action{loop(true)},
			steps: []step{
				{want: rayPoll{App: "DEPLOY_FAILED", Dep: "DEPLOY_FAILED", Trigger: hcf, Problem: true, States: "STARTING,STARTING"}},
				{want: rayPoll{App: "DEPLOY_FAILED", Dep: "DEPLOY_FAILED", Trigger: hcf, Problem: true, States: "STARTING,STARTING"}},
				{do: []action{loop(false)}, want: recovered("RUNNING,RUNNING")},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := fake.NewClock(t0)
			tc.opts.Clock = clock
			rs := raytest.New(tc.opts)
			srv := httptest.NewServer(rs)
			defer srv.Close()
			for _, a := range tc.before {
				a(t, rs, srv)
			}
			put(rayConfig)(t, rs, srv)
			rs.Advance(tc.settle)
			for i, s := range tc.steps {
				for _, a := range s.do {
					a(t, rs, srv)
				}
				if diff := cmp.Diff(s.want, rayObserve(t, srv)); diff != "" {
					t.Fatalf("step %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestKillReplicasErrors(t *testing.T) {
	rs := raytest.New(raytest.Options{})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	if err := rs.KillReplicas("app", "D", 1); err == nil {
		t.Error("killed replicas with Serve not started")
	}
	rayDo(t, srv, http.MethodPut, "", rayConfig)
	for _, c := range []struct {
		app, dep string
		n        int
	}{{"nope", "D", 1}, {"app", "nope", 1}, {"app", "D", -1}} {
		if err := rs.KillReplicas(c.app, c.dep, c.n); err == nil {
			t.Errorf("KillReplicas(%q, %q, %d) succeeded", c.app, c.dep, c.n)
		}
	}
	if st, _ := rs.Deployment("app", "D"); st != (raytest.DeploymentState{Status: "HEALTHY", Target: 2, Running: 2}) {
		t.Errorf("after refused kills: %+v", st)
	}
}

// TestCapacityFloors walks one cluster through the target
// capacities an upgrade writes and checks the direction Ray's controller
// derives and the targets that follow: an autoscaling deployment (min 2,
// initial 4, max 8, no load) sits on its capacity-adjusted initial_replicas
// while the direction is UP and on its min_replicas otherwise, and a
// fixed one (3 replicas) on its capacity-adjusted num_replicas.
func TestCapacityFloors(t *testing.T) {
	config := func(tc string, apps ...string) string {
		list := []string{`{"name": "app", "route_prefix": "/app", "import_path": "m:app", "deployments": [
		  {"name": "F", "num_replicas": 3},
		  {"name": "A", "autoscaling_config": {"min_replicas": 2, "max_replicas": 8, "initial_replicas": 4}}]}`}
		for _, a := range apps {
			list = append(list, fmt.Sprintf(`{"name": %q, "route_prefix": "/%s", "import_path": "m:x"}`, a, a))
		}
		return fmt.Sprintf(`{"applications": [%s], "target_capacity": %s}`, strings.Join(list, ","), tc)
	}
	type state struct {
		Direction string
		F, A      int64
	}
	steps := []struct {
		what   string
		put    string // a config to PUT; "" sends a DELETE first and PUTs none
		demand int64
		want   state
	}{
		{"first config at null: no direction, min_replicas", config("null"), 0, state{"", 3, 2}},
		{"null to 90: down", config("90"), 0, state{"DOWN", 3, 2}},             // 2.7 -> 3; 1.8 -> 2
		{"90 to 50: down", config("50"), 0, state{"DOWN", 2, 1}},               // 1.5 -> 2; 1.0
		{"50 to 70: up, initial_replicas", config("70"), 0, state{"UP", 2, 3}}, // 2.1 -> 2; 2.8 -> 3
		{"70 again: still up", config("70"), 0, state{"UP", 2, 3}},
		{"load within the bounds", config("70"), 5, state{"UP", 2, 5}},
		{"load above max_replicas at 70", config("70"), 20, state{"UP", 2, 6}}, // 5.6 -> 6
		{"back to null: none, the configured bounds", config("null"), 0, state{"", 3, 2}},
		{"after a shutdown", "", 0, state{"", 0, 0}},
		{"first config with a capacity: up", config("30"), 0, state{"UP", 1, 1}}, // 0.9 -> 1; 1.2 -> 1
		{"another application at the same capacity: up", config("30", "other"), 0, state{"UP", 1, 1}},
		{"30 to 20: down, at least one replica", config("20", "other"), 0, state{"DOWN", 1, 1}}, // 0.6 -> 1; 0.4 -> 1
		{"20 to 0: none at all", config("0", "other"), 0, state{"DOWN", 0, 0}},
		{"0 to 100: up", config("100", "other"), 0, state{"UP", 3, 4}},
		{"fewer applications at 100: up", config("100"), 0, state{"UP", 3, 4}},
		{"100 to null: none", config("null"), 0, state{"", 3, 2}},
	}
	rs := raytest.New(raytest.Options{})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	var got, want []state
	for _, s := range steps {
		if s.put == "" {
			rayDo(t, srv, http.MethodDelete, "", "")
		} else if code, text := rayDo(t, srv, http.MethodPut, "", s.put); code != 200 {
			t.Fatalf("%s: PUT %d %s", s.what, code, text)
		}
		rs.SetDemand("app", "A", s.demand)
		f, _ := rs.Deployment("app", "F")
		a, _ := rs.Deployment("app", "A")
		if f.Running != f.Target || a.Running != a.Target {
			t.Errorf("%s: not running the targets: %+v %+v", s.what, f, a)
		}
		got = append(got, state{rs.TargetCapacityDirection(), f.Target, a.Target})
		want = append(want, s.want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
}

// TestToken checks which credentials the emulator accepts, as
// Ray's dashboard reads them: Authorization, else X-Ray-Authorization, else
// the ray-authentication-token cookie; none is 401, a wrong one 403.
func TestToken(t *testing.T) {
	const (
		auth    = "Authorization"
		rayAuth = "X-Ray-Authorization"
	)
	cases := []struct {
		name    string
		headers []string // RequireToken's
		send    map[string]string
		cookie  string
		want    int
	}{
		{"Authorization", nil, map[string]string{auth: "Bearer t"}, "", 200},
		{"X-Ray-Authorization", nil, map[string]string{rayAuth: "Bearer t"}, "", 200},
		{"cookie", nil, nil, "t", 200},
		{"nothing", nil, nil, "", 401},
		{"wrong token", nil, map[string]string{auth: "Bearer x"}, "", 403},
		{"no Bearer", nil, map[string]string{auth: "t"}, "", 403},
		{"Authorization is read first", nil, map[string]string{auth: "Bearer t", rayAuth: "Bearer x"}, "", 200},
		{"another credential in Authorization hides X-Ray-Authorization", nil, map[string]string{auth: "Bearer k8s", rayAuth: "Bearer t"}, "", 403},
		{"behind a proxy that keeps Authorization: X-Ray-Authorization", []string{rayAuth}, map[string]string{auth: "Bearer k8s", rayAuth: "Bearer t"}, "", 200},
		{"behind a proxy that keeps Authorization: Authorization is not read", []string{rayAuth}, map[string]string{auth: "Bearer t"}, "", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := raytest.New(raytest.Options{})
			srv := httptest.NewServer(rs)
			defer srv.Close()
			rs.RequireToken("t", c.headers...)
			req, _ := http.NewRequest(http.MethodGet, srv.URL+rayPath, nil)
			for k, v := range c.send {
				req.Header.Set(k, v)
			}
			if c.cookie != "" {
				req.AddCookie(&http.Cookie{Name: "ray-authentication-token", Value: c.cookie})
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	rs := raytest.New(raytest.Options{})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	rs.RequireToken("t")
	rs.RequireToken("")
	if code, _ := rayDo(t, srv, http.MethodGet, "", ""); code != 200 {
		t.Errorf("with authentication off: %d", code)
	}
}

// TestZeroValue: a zero Server is a cluster with Serve not started, as
// New(Options{}) returns, whose faults and controls work before and after
// a DELETE.
func TestZeroValue(t *testing.T) {
	var rs raytest.Server
	if err := rs.FailDeployment("app", "D", "UNHEALTHY", "sick"); err != nil {
		t.Fatal(err)
	}
	rs.HealDeployment("app", "D")
	srv := httptest.NewServer(&rs)
	defer srv.Close()
	if code, text := rayDo(t, srv, http.MethodDelete, "", ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, text)
	}
	rs.CrashLoop("app", "D", true)
	rs.CrashLoop("app", "D", false)
	rs.SetDemand("app", "D", 1)
	rs.Hang(true)
	rs.Hang(false)
	config := `{"applications": [{"name": "app", "import_path": "m:app", "deployments": [{"name": "D", "num_replicas": 2}]}]}`
	if code, text := rayDo(t, srv, http.MethodPut, "", config); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, text)
	}
	rayGet(t, srv)
	if diff := cmp.Diff(raytest.DeploymentState{Status: "HEALTHY", Target: 2, Running: 2}, mustDeployment(t, &rs, "app", "D")); diff != "" {
		t.Errorf("deployment (-want +got):\n%s", diff)
	}
	if err := rs.FailDeployment("app", "D", "UNHEALTHY", "sick"); err != nil {
		t.Fatal(err)
	}
	if status, msg, _ := rs.AppStatus("app"); status != "UNHEALTHY" || !strings.Contains(msg, "sick") {
		t.Errorf("AppStatus = %s %q, want UNHEALTHY naming the fault", status, msg)
	}
}

func mustDeployment(t *testing.T, rs *raytest.Server, app, dep string) raytest.DeploymentState {
	t.Helper()
	st, ok := rs.Deployment(app, dep)
	if !ok {
		t.Fatalf("no deployment %s/%s", app, dep)
	}
	return st
}
