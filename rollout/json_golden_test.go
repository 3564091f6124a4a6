package rollout_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/rollout"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/json")

// TestOwnerJSONGolden: an Owner, which adapters keep as the claim on what
// they move (serve/replicas as a workload's annotation, the gateway Router
// inside its claim record), encodes byte for byte as testdata/json holds
// (indented there), with every field set and at its zero value, and reads
// back as written. -update rewrites the files.
func TestOwnerJSONGolden(t *testing.T) {
	full := rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "6f1c2a8e-0000-4000-8000-000000000001"}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("the fixture leaves Owner.%s zero: its golden file would not hold it", v.Type().Field(i).Name)
		}
	}
	for name, o := range map[string]rollout.Owner{"owner": full, "owner-zero": {}} {
		path := filepath.Join("testdata", "json", name+".json")
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := json.Indent(&got, raw, "", "  "); err != nil {
			t.Fatal(err)
		}
		got.WriteByte('\n')
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to write it)", err)
		}
		if diff := cmp.Diff(string(want), got.String()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
		var back rollout.Owner
		if err := json.Unmarshal(want, &back); err != nil || back != o {
			t.Errorf("%s reads back as %+v (%v), want %+v", path, back, err, o)
		}
	}
}
