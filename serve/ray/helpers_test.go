package ray_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"

	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// TB is the part of testing.TB the helpers need, so that they also run
// under rapid.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// llmConfig is a Serve config with two fixed deployments (10 and 3
// replicas) and fields upshift does not know about.
const llmConfig = `{
  "proxy_location": "EveryNode",
  "http_options": {"host": "0.0.0.0", "port": 8000},
  "logging_config": {"encoding": "JSON", "log_level": "INFO"},
  "future_field": {"kept": [1, 2.5, "x", null]},
  "applications": [{
    "name": "llm",
    "route_prefix": "/llm",
    "import_path": "serving.llm:app",
    "runtime_env": {"env_vars": {"MODEL": "m-7b"}},
    "deployments": [
      {"name": "Ingress", "num_replicas": 10, "max_ongoing_requests": 64},
      {"name": "Model", "num_replicas": 3, "user_config": {"temperature": 0.2},
       "ray_actor_options": {"num_gpus": 1}}
    ]
  }]
}`

// cluster starts an emulated Ray cluster on loopback.
func cluster(t TB, opts raytest.Options) (*raytest.Server, *httptest.Server) {
	t.Helper()
	rs := raytest.New(opts)
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	return rs, srv
}

// adapter builds the adapter for dashboard with config, after edit.
func adapter(t TB, dashboard, config string, edit ...func(*ray.Config)) *ray.Ray {
	t.Helper()
	c := ray.Config{Dashboard: dashboard, ServeConfig: json.RawMessage(config)}
	for _, e := range edit {
		e(&c)
	}
	r, err := ray.New(c)
	if err != nil {
		t.Fatalf("ray.New: %v", err)
	}
	return r
}

// noReuse turns the reuse of answers off (Config.ReadMaxAge negative), so
// that every read is a GET: for tests in which each read is one step of
// the emulated cluster (it moves one step per GET of its applications),
// or must see at once what the test changed behind the adapter's back
// (raytest's Advance, FailDeployment, SetDemand, another writer's PUT),
// which a reused answer would show only once it is ReadMaxAge old. What
// those tests check is what one answer means, not when it is read.
func noReuse(c *ray.Config) { c.ReadMaxAge = -1 }

// handlerTransport serves requests with a handler in process, without a
// network: for property tests that make thousands of requests.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// inProcess is an edit that sends the adapter's requests to h directly.
func inProcess(h http.Handler) func(*ray.Config) {
	return func(c *ray.Config) { c.HTTPClient = &http.Client{Transport: handlerTransport{h}} }
}
