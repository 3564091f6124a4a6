package gateway_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// goldenRecords are the values the Router keeps in a route's annotations
// (besides the State and the Control of AnnotationStore, whose golden
// files are the strategy package's), each with every field set, and at
// their zero value.
func goldenRecords() []struct {
	name string
	v    any
} {
	expected := int32(5)
	maxAge := metav1.Duration{Duration: 2 * time.Hour}
	extras := strategy.TrafficExtras{
		HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{
			{Name: "x-beta", Value: "1"},
			{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"},
		}, ExpectedPercent: &expected},
		MirrorPercent: 15,
		Sticky: &strategy.Sticky{Run: "0badf00d", Grid: []int32{10, 40, 100}, Cookie: strategy.SessionAffinity{
			CookieName: "shop-session", MaxAge: &maxAge, Path: "/shop", Domain: "example.com", Secure: true, SameSite: "None"}},
	}
	return []struct {
		name string
		v    any
	}{
		{"claim", gateway.ClaimRecord{
			Owner:    rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "6f1c2a8e-0000-4000-8000-000000000001"},
			Backends: "web-a:80, web-b:80"}},
		{"claim-zero", gateway.ClaimRecord{}},
		{"rules", gateway.RulesRecord{Canary: strategy.SideB, Extras: extras, Rules: []gateway.RuleHash{
			{Role: gateway.RoleHeader, SHA256: "1111111111111111111111111111111111111111111111111111111111111111"},
			{Role: gateway.RoleSplit, SHA256: "2222222222222222222222222222222222222222222222222222222222222222"},
		}, MirrorService: "upshift-0123456789abcdef-mirror"}},
		{"rules-zero", gateway.RulesRecord{}},
	}
}

// TestJSONGolden: the JSON of each record the Router keeps in a route's
// annotations is byte for byte the one in testdata/json (indented there),
// and reads back as the value it was written from, so that the records
// written by this version read the same in the next. -update rewrites
// the files; a change breaks what routes hold.
func TestJSONGolden(t *testing.T) {
	for _, g := range goldenRecords() {
		t.Run(g.name, func(t *testing.T) {
			path := filepath.Join("testdata", "json", g.name+".json")
			raw, err := json.Marshal(g.v)
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
			back := reflect.New(reflect.TypeOf(g.v))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatalf("%s does not decode: %v", path, err)
			}
			if diff := cmp.Diff(g.v, back.Elem().Interface()); diff != "" {
				t.Errorf("%s decodes to another value (-written +read):\n%s", path, diff)
			}
		})
	}
}

// TestJSONGoldenCoversEveryField: every exported field of the records, at
// every depth, is set in the fixtures (in at least one element of each
// slice), so that a new field fails here until its golden file holds it.
func TestJSONGoldenCoversEveryField(t *testing.T) {
	for _, g := range goldenRecords() {
		if strings.HasSuffix(g.name, "-zero") {
			continue
		}
		all, set := map[string]bool{}, map[string]bool{}
		fieldPaths(reflect.TypeOf(g.v), "", all)
		setPaths(reflect.ValueOf(g.v), "", set)
		var missing []string
		for p := range all {
			if !set[p] {
				missing = append(missing, p)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s: fields left zero: %v", g.name, missing)
		}
	}
}

func isLeafStruct(t reflect.Type) bool {
	return t == reflect.TypeFor[metav1.Time]() || t == reflect.TypeFor[metav1.MicroTime]() || t == reflect.TypeFor[time.Time]()
}

// fieldPaths adds the path of every leaf field of t to out.
func fieldPaths(t reflect.Type, path string, out map[string]bool) {
	switch {
	case t.Kind() == reflect.Pointer:
		fieldPaths(t.Elem(), path, out)
	case t.Kind() == reflect.Slice:
		fieldPaths(t.Elem(), path+"[]", out)
	case t.Kind() == reflect.Struct && !isLeafStruct(t):
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				fieldPaths(f.Type, path+"."+f.Name, out)
			}
		}
	default:
		out[path] = true
	}
}

// setPaths adds the path of every leaf field that v sets to out.
func setPaths(v reflect.Value, path string, out map[string]bool) {
	switch {
	case v.Kind() == reflect.Pointer:
		if !v.IsNil() {
			setPaths(v.Elem(), path, out)
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			setPaths(v.Index(i), path+"[]", out)
		}
	case v.Kind() == reflect.Struct && !isLeafStruct(v.Type()):
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				setPaths(v.Field(i), path+"."+f.Name, out)
			}
		}
	case !v.IsZero():
		out[path] = true
	}
}
