package ray

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRevisionConfig feeds a revision's config and a GET answer arbitrary
// bytes. Parsing and recognition never panic; an accepted config's PUT
// body at target_capacity 0 is a JSON object with the config's fields and
// target_capacity 0; a cluster that reports exactly the config's
// applications as deployed runs it, and a GET answer that runs it names
// every application with its config.
func FuzzRevisionConfig(f *testing.F) {
	f.Add([]byte(fuzzConfig), []byte(`{"target_capacity": 0, "applications": {}}`))
	f.Add([]byte(`{"applications": [{"name": "a", "import_path": "m:a"}, {"import_path": "m:b", "x": [1, 2.50, "é"]}], "target_capacity": 30}`),
		[]byte(`{"applications": {"a": {"status": "RUNNING", "deployed_app_config": {"name": "a", "import_path": "m:a"}}}}`))
	f.Add([]byte(`{"applications": []}`), []byte(`{"applications": {"a": {"status": "DELETING"}}}`))
	f.Add([]byte(`{"applications": [{"name": ""}]}`), []byte(`null`))
	f.Add([]byte(`[]`), []byte(`{"applications": {"a": {"deployed_app_config": 1e400}}}`))
	f.Fuzz(func(t *testing.T, config, get []byte) {
		c, errs := parseServeConfig("r", `Revisions["r"]`, config)
		if (c == nil) == (len(errs) == 0) {
			t.Fatalf("config %v with errors %v", c, errs)
		}
		d, derr := decodeInstanceDetails(get)
		if c == nil {
			return
		}
		var put map[string]any
		if err := json.Unmarshal(c.body(false, 0), &put); err != nil {
			t.Fatalf("PUT body %q: %v", c.body(false, 0), err)
		}
		if put["target_capacity"] != 0.0 {
			t.Fatalf("PUT body target_capacity %v", put["target_capacity"])
		}
		var in map[string]any
		if err := json.Unmarshal(config, &in); err != nil {
			t.Fatal(err)
		}
		in["target_capacity"] = 0.0
		if !reflect.DeepEqual(in, put) {
			t.Fatalf("PUT body %v, config %v", put, in)
		}
		// A cluster that echoes the config runs it.
		echo := &instanceDetails{Applications: map[string]applicationDetails{}}
		for _, a := range c.apps {
			raw, err := json.Marshal(a.config)
			if err != nil {
				t.Fatal(err)
			}
			echo.Applications[a.name] = applicationDetails{Name: a.name, Status: appRunning, DeployedAppConfig: raw}
		}
		if !runs(echo, c) {
			t.Fatalf("an echo of the config does not run it")
		}
		if derr != nil {
			return
		}
		updated := rolledOut(d, c)
		if runs(d, c) {
			if len(liveApps(d)) != len(c.apps) {
				t.Fatalf("runs with %v live, config has %d applications", liveApps(d), len(c.apps))
			}
			for _, a := range c.apps {
				if !deployedAs(d, a) {
					t.Fatalf("runs without application %q deployed as configured", a.name)
				}
			}
			for _, a := range c.apps {
				if updated && d.Applications[a.name].Status != appRunning {
					t.Fatalf("updated with application %q %s", a.name, d.Applications[a.name].Status)
				}
			}
		}
	})
}
