package ray

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzDeployedConfig feeds the rebuilding of the config a cluster runs
// (what SetCapacity writes back to lower the capacity of a cluster of no
// known revision) arbitrary GET answers. It never panics; it fails only
// with ErrUnknownRevision; a config it rebuilds is one the cluster runs
// (runs holds, so writing it back changes no application), and its PUT
// body carries every live application's deployed_app_config, the
// cluster-wide fields as reported, and the target capacity asked.
func FuzzDeployedConfig(f *testing.F) {
	f.Add([]byte(`{"target_capacity": 40, "proxy_location": "EveryNode", "http_options": {"port": 8000},
	  "applications": {"b": {"status": "RUNNING", "deployed_app_config": {"name": "b", "import_path": "m:b"}},
	  "a": {"status": "DEPLOYING", "deployed_app_config": {"name": "a", "import_path": "m:a", "x": [1, 2.5]}},
	  "old": {"status": "DELETING", "deployed_app_config": null}}}`))
	f.Add([]byte(`{"applications": {"default": {"status": "RUNNING", "deployed_app_config": {"import_path": "m:a"}}}}`))
	f.Add([]byte(`{"applications": {"a": {"status": "RUNNING", "deployed_app_config": {"name": "b"}}}}`))
	f.Add([]byte(`{"applications": {"a": {"status": "RUNNING"}}, "grpc_options": null}`))
	f.Add([]byte(`{"applications": {"a": {"status": "RUNNING", "deployed_app_config": [1]}}}`))
	r, err := New(Config{Dashboard: "http://ray.test", Revisions: RevisionMap(nil)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, get []byte) {
		d, err := decodeInstanceDetails(get)
		if err != nil {
			return
		}
		live := liveApps(d)
		c, err := r.deployedConfig(d, live)
		if err != nil {
			if c != nil || !errors.Is(err, ErrUnknownRevision) {
				t.Fatalf("deployedConfig = %v, %v", c, err)
			}
			return
		}
		if !runs(d, c) {
			t.Fatalf("the config rebuilt from %s is not the one the cluster runs", get)
		}
		var put map[string]json.RawMessage
		if err := json.Unmarshal(c.body(false, 7), &put); err != nil {
			t.Fatalf("PUT body %q: %v", c.body(false, 7), err)
		}
		if string(put["target_capacity"]) != "7" {
			t.Fatalf("PUT body target_capacity %s", put["target_capacity"])
		}
		var apps []json.RawMessage
		if err := json.Unmarshal(put["applications"], &apps); err != nil || len(apps) != len(live) {
			t.Fatalf("PUT body applications %s: %v, want %d", put["applications"], err, len(live))
		}
		for i, name := range live {
			if !sameValue(apps[i], d.Applications[name].DeployedAppConfig) {
				t.Fatalf("PUT body application %d: %s, want %q's deployed_app_config %s", i, apps[i], name, d.Applications[name].DeployedAppConfig)
			}
		}
		for field, want := range map[string]json.RawMessage{"proxy_location": d.ProxyLocation, "http_options": d.HTTPOptions, "grpc_options": d.GRPCOptions} {
			got, ok := put[field]
			if isNull(want) {
				if ok {
					t.Fatalf("PUT body has %s %s, the GET none", field, got)
				}
			} else if !sameValue(got, want) {
				t.Fatalf("PUT body %s %s, want %s", field, got, want)
			}
		}
		for field := range put {
			switch field {
			case "applications", "target_capacity", "proxy_location", "http_options", "grpc_options":
			default:
				t.Fatalf("PUT body has field %q", field)
			}
		}
	})
}

func isNull(raw json.RawMessage) bool {
	var v any
	return len(raw) == 0 || json.Unmarshal(raw, &v) == nil && v == nil
}

func sameValue(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
