package ray

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// fuzzConfig has two fixed deployments and an autoscaling one.
const fuzzConfig = `{"applications": [{"name": "llm", "route_prefix": "/llm", "import_path": "serving.llm:app",
  "deployments": [{"name": "Ingress", "num_replicas": 10}, {"name": "Model", "num_replicas": 3},
    {"name": "Embed", "autoscaling_config": {"min_replicas": 2, "max_replicas": 6, "initial_replicas": 4}}]}]}`

// FuzzDecodeStatus feeds the GET decoder arbitrary bytes: it must return
// details or an error, never panic, and what it accepts must evaluate to
// percents within 0..100.
func FuzzDecodeStatus(f *testing.F) {
	rs := raytest.New(raytest.Options{StartPolls: 1, StopPolls: 1})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	side, err := New(Config{Dashboard: srv.URL, ServeConfig: []byte(fuzzConfig)})
	if err != nil {
		f.Fatal(err)
	}
	get := func() []byte {
		resp, err := http.Get(srv.URL + applicationsPath + "?api_type=declarative")
		if err != nil {
			f.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	f.Add(get())
	for _, p := range []int32{0, 40, 100} {
		if err := side.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: p}); err != nil {
			f.Fatal(err)
		}
		f.Add(get())
	}
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"target_capacity": 101}`, `{"target_capacity": -1}`,
		`{"target_capacity": "x"}`, `{"applications": {"a": null}}`,
		`{"applications": {"a": {"deployments": {"d": {"target_num_replicas": -1}}}}}`,
		`{"applications": {"a": {"deployments": {"d": {"deployment_config": {"num_replicas": 1e30}}}}}}`,
		`{"applications": {"a": {"deployments": {"d": {"deployment_config": {"num_replicas": 2.5}}}}}}`,
		`{"applications": {"a": {"deployments": {"d": {"deployment_config": {"autoscaling_config": {"min_replicas": -2}}}}}}}`,
		`{"applications": {"a": {"status": "RUNNING", "deployments": {"d": {"status": "HEALTHY", "target_num_replicas": 2, "deployment_config": {"num_replicas": "auto"}, "replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}]}}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeInstanceDetails(b)
		if err != nil {
			if d != nil {
				t.Fatalf("details %+v with error %v", d, err)
			}
			return
		}
		names := []string{"llm", "a"}
		for name := range d.Applications {
			names = append(names, name)
		}
		o := evaluate(d, names)
		if o.Ready < 0 || o.Ready > 100 || o.Capacity < 0 || o.Capacity > 100 {
			t.Fatalf("out of range: %+v", o.CapacityStatus)
		}
		for _, a := range o.Applications {
			for _, dep := range a.Deployments {
				if dep.Ready < 0 || dep.Ready > 100 || dep.Target > dep.Full {
					t.Fatalf("deployment out of range: %+v", dep)
				}
			}
		}
	})
}
