package ray_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// Revisions of one application: v2 changes the model, v2near differs from
// v2 in one number, v3 adds an application and renames nothing.
var (
	revV1 = `{"proxy_location": "EveryNode", "applications": [{"name": "llm", "route_prefix": "/llm", "import_path": "serving.llm:app",
  "runtime_env": {"env_vars": {"MODEL": "m-7b"}},
  "deployments": [{"name": "Ingress", "num_replicas": 4}, {"name": "Model", "num_replicas": 2}]}]}`
	revV2     = strings.Replace(revV1, "m-7b", "m-8b", 1)
	revV2Near = strings.Replace(revV2, `"num_replicas": 2`, `"num_replicas": 3`, 1)
	revV3     = `{"applications": [
  {"name": "llm", "route_prefix": "/llm", "import_path": "serving.llm:app", "runtime_env": {"env_vars": {"MODEL": "m-9b"}},
   "deployments": [{"name": "Ingress", "num_replicas": 4}, {"name": "Model", "num_replicas": 2}]},
  {"name": "embed", "route_prefix": "/embed", "import_path": "serving.embed:app", "deployments": [{"name": "Embedder", "num_replicas": 2}]}]}`
)

func revisionMap() func(string) (json.RawMessage, error) {
	return ray.RevisionMap(map[string]json.RawMessage{
		"v1": json.RawMessage(revV1), "v2": json.RawMessage(revV2), "v2near": json.RawMessage(revV2Near), "v3": json.RawMessage(revV3),
	})
}

// revAdapter builds an adapter with the test revisions and its Deployer.
func revAdapter(t TB, dashboard string, edit ...func(*ray.Config)) (*ray.Ray, *ray.Deployer) {
	t.Helper()
	c := ray.Config{Dashboard: dashboard, Revisions: revisionMap()}
	for _, e := range edit {
		e(&c)
	}
	r, err := ray.New(c)
	if err != nil {
		t.Fatalf("ray.New: %v", err)
	}
	d, err := r.Deployer()
	if err != nil {
		t.Fatalf("Deployer: %v", err)
	}
	return r, d
}

// putBody decodes the last PUT: its config without target_capacity, and
// the target capacity (nil for null).
func putBody(t *testing.T, rs *raytest.Server) (map[string]any, *float64) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rs.LastPut(), &m); err != nil {
		t.Fatalf("last PUT: %v", err)
	}
	tc, ok := m["target_capacity"]
	if !ok {
		t.Fatal("the last PUT has no target_capacity")
	}
	delete(m, "target_capacity")
	if tc == nil {
		return m, nil
	}
	f := tc.(float64)
	return m, &f
}

func decoded(t *testing.T, config string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(config), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func revision(t *testing.T, d *ray.Deployer, expect string) rollout.RevisionStatus {
	t.Helper()
	st, err := d.Revision(context.Background(), expect)
	if err != nil {
		t.Fatalf("Revision(%q): %v", expect, err)
	}
	return st
}

// TestDeployAtZero: a deploy is one PUT of the revision's config at
// target_capacity 0; the revision is reported once Ray has built it.
func TestDeployAtZero(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{BuildPolls: 2, StartPolls: 1})
	r, d := revAdapter(t, srv.URL, noReuse) // each Revision is a poll of the emulator
	if st := revision(t, d, "v1"); st != (rollout.RevisionStatus{}) {
		t.Fatalf("an empty cluster reports %+v", st)
	}
	if err := d.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	cfg, tc := putBody(t, rs)
	if tc == nil || *tc != 0 {
		t.Fatalf("deployed at target_capacity %v, want 0", fmtTC(tc))
	}
	if diff := cmp.Diff(decoded(t, revV1), cfg); diff != "" {
		t.Errorf("deployed config (-want +got):\n%s", diff)
	}
	// Ray imports the code for two polls: the config is deployed, not yet
	// rolled out.
	want := []rollout.RevisionStatus{{Revision: "v1"}, {Revision: "v1", Updated: true}, {Revision: "v1", Updated: true}}
	for i, w := range want {
		if got := revision(t, d, "v1"); got != w {
			t.Errorf("poll %d: %+v, want %+v", i+1, got, w)
		}
	}
	st, err := r.Capacity(ctx)
	if err != nil || st.Capacity != 0 || st.Ready != 0 || !st.Settled {
		t.Errorf("after the deploy: %+v %v, want capacity 0, settled", st, err)
	}
	if diff := cmp.Diff([]string{"llm"}, r.Applications()); diff != "" {
		t.Errorf("applications (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"target_capacity=0"}, puts(rs)); diff != "" {
		t.Errorf("PUTs (-want +got):\n%s", diff)
	}
}

// TestDeployRefusesServingCluster: a cluster at a target capacity other
// than 0 that runs another config is never redeployed.
func TestDeployRefusesServingCluster(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r, d := revAdapter(t, srv.URL)
	if err := d.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, req := range []rollout.CapacityRequest{{Percent: 30}, {Percent: 100, Steady: true}} {
		if err := r.SetCapacity(ctx, req); err != nil {
			t.Fatal(err)
		}
		before := rs.Puts()
		err := d.Deploy(ctx, "v2")
		var serr *ray.ServingError
		if !errors.As(err, &serr) || !errors.Is(err, ray.ErrServing) || !rollout.IsPermanent(err) {
			t.Fatalf("deploy at %+v: %v, want a permanent *ServingError", req, err)
		}
		if serr.Revision != "v2" || serr.Running != "v1" || (serr.TargetCapacity == nil) != req.Steady {
			t.Errorf("deploy at %+v: %+v", req, serr)
		}
		if msg := err.Error(); !strings.Contains(msg, `refusing to deploy revision "v2": the cluster runs revision "v1" at target_capacity`) {
			t.Errorf("message %q", msg)
		}
		if rs.Puts() != before {
			t.Errorf("deploy at %+v wrote", req)
		}
	}
	// A cluster serving a config nobody here deployed is refused too, by a
	// new adapter that knows nothing.
	_, fresh := revAdapter(t, srv.URL)
	err := fresh.Deploy(ctx, "v3")
	var serr *ray.ServingError
	if !errors.As(err, &serr) || serr.Running != "" {
		t.Fatalf("fresh adapter: %v", err)
	}
	// At target capacity 0 the deploy goes through.
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	if err := d.Deploy(ctx, "v2"); err != nil {
		t.Fatalf("at 0: %v", err)
	}
	if cfg, tc := putBody(t, rs); tc == nil || *tc != 0 || !cmp.Equal(decoded(t, revV2), cfg) {
		t.Errorf("at 0: PUT %v at %v", cfg, tc)
	}
}

// TestDeployIdempotent: deploying the revision the cluster runs writes
// nothing, at any target capacity.
func TestDeployIdempotent(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r, d := revAdapter(t, srv.URL)
	for range 2 {
		if err := d.Deploy(ctx, "v1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	if err := d.Deploy(ctx, "v1"); err != nil {
		t.Fatalf("the running revision at 50%%: %v", err)
	}
	_, other := revAdapter(t, srv.URL) // another process recognises it too
	if err := other.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"target_capacity=0", "target_capacity=50"}, puts(rs)); diff != "" {
		t.Errorf("PUTs (-want +got):\n%s", diff)
	}
}

// TestRevisionExact: a config that differs in one field is not the
// revision, and neither is the revision's config with another application
// beside it.
func TestRevisionExact(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r, d := revAdapter(t, srv.URL)
	if err := d.Deploy(ctx, "v2near"); err != nil {
		t.Fatal(err)
	}
	_, fresh := revAdapter(t, srv.URL, noReuse) // reads what the test PUTs behind its back at once
	if st := revision(t, fresh, "v2"); st != (rollout.RevisionStatus{}) {
		t.Errorf("v2near read as v2: %+v", st)
	}
	// The adapter that deployed v2near reports it, whatever is expected.
	if st := revision(t, d, "v2"); st != (rollout.RevisionStatus{Revision: "v2near", Updated: true}) {
		t.Errorf("the adapter that deployed it: %+v", st)
	}
	// Key order and spacing are not differences; values are.
	reordered := `{"target_capacity": 0, "applications": [{"deployments": [{"num_replicas": 4, "name": "Ingress"}, {"num_replicas": 2, "name": "Model"}],
	  "runtime_env": {"env_vars": {"MODEL": "m-8b"}}, "import_path": "serving.llm:app", "route_prefix": "/llm", "name": "llm"}]}`
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	put(t, srv.URL, reordered)
	if st := revision(t, fresh, "v2"); st.Revision != "v2" {
		t.Errorf("v2 with its keys reordered: %+v", st)
	}
	// v2's application and another one: not v2.
	withExtra := strings.Replace(revV2, `"applications": [`, `"target_capacity": 0, "applications": [{"name": "extra", "route_prefix": "/x", "import_path": "x:app"}, `, 1)
	put(t, srv.URL, withExtra)
	if st := revision(t, fresh, "v2"); st.Revision != "" {
		t.Errorf("v2 plus an application: %+v", st)
	}
	// The adapter forgot what it knew: the cluster runs no known revision.
	if err := fresh.Deploy(ctx, "v2"); err != nil {
		t.Fatalf("at 0: %v", err)
	}
	// The application "extra" is deleted; v2 is recognised at once, and
	// rolled out once the deletion is done.
	if st := revision(t, fresh, "v2"); st.Revision != "v2" {
		t.Errorf("after the redeploy: %+v", st)
	}
	if rs.Puts() != 4 {
		t.Errorf("%d PUTs, want 4 (deploy, two by hand, deploy; capacity 0 was in place)", rs.Puts())
	}
}

func fmtTC(tc *float64) any {
	if tc == nil {
		return "null"
	}
	return *tc
}

// put writes a config by hand, as another client would.
func put(t *testing.T, dashboard, config string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, dashboard+"/api/serve/applications/", strings.NewReader(config))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT by hand: status %d", resp.StatusCode)
	}
}

// TestRecognitionAfterRestart: a new adapter value knows no revision; it
// refuses to raise capacity until Revision recognises the cluster's
// config, and then writes that config.
func TestRecognitionAfterRestart(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{StartPolls: 1})
	r, d := revAdapter(t, srv.URL)
	if err := d.Deploy(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 30}); err != nil {
		t.Fatal(err)
	}
	rs.Advance(1)

	r2, d2 := revAdapter(t, srv.URL) // the process restarted
	before := rs.Puts()
	err := r2.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40})
	if !errors.Is(err, ray.ErrUnknownRevision) || rollout.IsPermanent(err) {
		t.Fatalf("SetCapacity before Revision: %v, want a retryable ErrUnknownRevision", err)
	}
	if rs.Puts() != before {
		t.Fatal("SetCapacity raised the capacity without knowing the revision")
	}
	// Capacity observes whatever the cluster runs meanwhile: both
	// applications, at the 38 written for the 30 asked (a new adapter
	// value has not asked anything).
	st, err := r2.Capacity(ctx)
	if err != nil || st.Steady || st.Capacity != 38 || st.Ready < 38 || !st.Settled {
		t.Fatalf("capacity before Revision: %+v %v", st, err)
	}
	if got := revision(t, d2, "v3"); got != (rollout.RevisionStatus{Revision: "v3", Updated: true}) {
		t.Fatalf("Revision(v3) = %+v", got)
	}
	if diff := cmp.Diff([]string{"llm", "embed"}, r2.Applications()); diff != "" {
		t.Errorf("applications (-want +got):\n%s", diff)
	}
	if err := r2.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
		t.Fatal(err)
	}
	cfg, tc := putBody(t, rs)
	if tc == nil || *tc != 40 {
		t.Errorf("target capacity %v, want 40", fmtTC(tc))
	}
	if diff := cmp.Diff(decoded(t, revV3), cfg); diff != "" {
		t.Errorf("written config (-want +got):\n%s", diff)
	}
	if st, _ := r2.Capacity(ctx); st.Capacity != 40 {
		t.Errorf("capacity %d, want the 40 asked", st.Capacity)
	}
}

// TestSetCapacityKeepsRevision: SetCapacity writes the config of the
// revision deployed, and refuses once the cluster runs another.
func TestSetCapacityKeepsRevision(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r, d := revAdapter(t, srv.URL)
	for i, rev := range []struct{ name, config string }{{"v1", revV1}, {"v2", revV2}} {
		if i > 0 {
			if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Deploy(ctx, rev.name); err != nil {
			t.Fatal(err)
		}
		for _, p := range []int32{30, 100} {
			if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
				t.Fatal(err)
			}
			if cfg, _ := putBody(t, rs); !cmp.Equal(decoded(t, rev.config), cfg) {
				t.Fatalf("%s at %d: wrote %v", rev.name, p, cfg)
			}
		}
	}
	// Someone puts v1 back by hand, at 20: the adapter does not raise the
	// capacity of a config it does not know, and never writes v2's again.
	put(t, srv.URL, strings.Replace(revV1, `{"proxy_location"`, `{"target_capacity": 20, "proxy_location"`, 1))
	before := rs.Puts()
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); !errors.Is(err, ray.ErrUnknownRevision) {
		t.Fatalf("SetCapacity over another config: %v, want ErrUnknownRevision", err)
	}
	if st := revision(t, d, "v2"); st.Revision != "" {
		t.Errorf("Revision(v2) over v1 = %+v", st)
	}
	if rs.Puts() != before {
		t.Error("raised the capacity of a config of another revision")
	}
	// Recognised as v1 when v1 is expected, then capacity follows v1.
	if st := revision(t, d, "v1"); st.Revision != "v1" {
		t.Fatalf("Revision(v1) = %+v", st)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := putBody(t, rs); !cmp.Equal(decoded(t, revV1), cfg) {
		t.Errorf("wrote %v, want v1", cfg)
	}
}

// TestRevisionConfigErrors: a revision's config is validated as
// ServeConfig is, with the same errors naming the revision.
func TestRevisionConfigErrors(t *testing.T) {
	ctx := context.Background()
	_, srv := cluster(t, raytest.Options{})
	bad := map[string]json.RawMessage{
		"empty":  json.RawMessage(``),
		"list":   json.RawMessage(`[1]`),
		"noapps": json.RawMessage(`{"proxy_location": "HeadOnly"}`),
		"dups":   json.RawMessage(`{"applications": [{"import_path": "a:b"}, {"name": "default", "import_path": "c:d"}, 3, {"name": 4}]}`),
	}
	want := map[string][]string{
		"empty":  {`Revisions["empty"]`},
		"list":   {`Revisions["list"]`},
		"noapps": {`Revisions["noapps"].applications`},
		"dups":   {`Revisions["dups"].applications[1].name`, `Revisions["dups"].applications[2]`, `Revisions["dups"].applications[3].name`},
		"v9":     {`Revisions["v9"]`},
	}
	r, d := revAdapter(t, srv.URL, func(c *ray.Config) { c.Revisions = ray.RevisionMap(bad) })
	for rev, fields := range want {
		for op, call := range map[string]func() error{
			"Deploy":   func() error { return d.Deploy(ctx, rev) },
			"Revision": func() error { _, err := d.Revision(ctx, rev); return err },
		} {
			err := call()
			if !errors.Is(err, ray.ErrInvalid) || !rollout.IsPermanent(err) {
				t.Errorf("%s(%q): %v, want a permanent ErrInvalid", op, rev, err)
				continue
			}
			var got []string
			for _, e := range flatten(err) {
				var ce *ray.ConfigError
				if errors.As(e, &ce) {
					got = append(got, ce.Field)
				}
			}
			if diff := cmp.Diff(fields, got); diff != "" {
				t.Errorf("%s(%q) fields (-want +got):\n%s\n%v", op, rev, diff, err)
			}
		}
	}
	if err := d.Deploy(ctx, ""); !errors.Is(err, ray.ErrInvalid) || !rollout.IsPermanent(err) {
		t.Errorf("Deploy(\"\"): %v", err)
	}
	// Revision("") is no revision expected: no error.
	if st, err := d.Revision(ctx, ""); err != nil || st != (rollout.RevisionStatus{}) {
		t.Errorf("Revision(\"\") = %+v, %v", st, err)
	}
	if len(r.Applications()) != 0 {
		t.Errorf("applications %v with no revision known", r.Applications())
	}

	// Config: ServeConfig and Revisions are exclusive, and a Deployer needs
	// Revisions.
	_, err := ray.New(ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(llmConfig), Revisions: revisionMap()})
	var ce *ray.ConfigError
	if !errors.As(err, &ce) || ce.Field != "ServeConfig" {
		t.Errorf("both set: %v", err)
	}
	plain := adapter(t, "http://h", llmConfig)
	if dep, err := plain.Deployer(); dep != nil || !errors.As(err, &ce) || ce.Field != "Revisions" {
		t.Errorf("Deployer without Revisions: %v, %v", dep, err)
	}
	// Without revisions the adapter is no RevisionReader.
	if _, ok := any(plain).(rollout.RevisionReader); ok {
		t.Error("*ray.Ray implements rollout.RevisionReader")
	}
}

// flatten returns the leaves of a tree of joined and wrapped errors.
func flatten(err error) []error {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, x := range e.Unwrap() {
			out = append(out, flatten(x)...)
		}
		return out
	case *ray.ConfigError:
		return []error{e}
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return flatten(inner)
		}
	}
	return []error{err}
}

// TestDeployRenamesApplications: a revision with other applications
// replaces the cluster's set; it is rolled out once the old ones are gone.
func TestDeployRenamesApplications(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{BuildPolls: 2, StartPolls: 1, StopPolls: 2})
	alone := `{"applications": [{"name": "old", "route_prefix": "/old", "import_path": "old:app", "deployments": [{"name": "D", "num_replicas": 2}]}]}`
	r, d := revAdapter(t, srv.URL, noReuse, func(c *ray.Config) { // each Revision is a poll of the emulator
		c.Revisions = ray.RevisionMap(map[string]json.RawMessage{"old": json.RawMessage(alone), "v3": json.RawMessage(revV3)})
	})
	if err := d.Deploy(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
		t.Fatal(err)
	}
	rs.Advance(4)
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	if err := d.Deploy(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	var seen []rollout.RevisionStatus
	for range 4 {
		st := revision(t, d, "v3")
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
	}
	if diff := cmp.Diff([]rollout.RevisionStatus{{Revision: "v3"}, {Revision: "v3", Updated: true}}, seen); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if _, _, ok := rs.AppStatus("old"); ok {
		t.Error("the old application is still there")
	}
}

// BenchmarkRevision is one Revision (a GET, and the comparison of the
// deployed configs) against the emulator on loopback, the expected
// revision running.
func BenchmarkRevision(b *testing.B) {
	ctx := context.Background()
	_, srv := cluster(b, raytest.Options{})
	_, d := revAdapter(b, srv.URL)
	if err := d.Deploy(ctx, "v3"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if st, err := d.Revision(ctx, "v3"); err != nil || st.Revision != "v3" {
			b.Fatal(st, err)
		}
	}
}
