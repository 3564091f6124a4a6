package strategy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/json")

// goldenT0 is the instant the golden fixtures count from.
var goldenT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// goldenAt is goldenT0 plus sec seconds and a fraction that a MicroTime
// keeps.
func goldenAt(sec int) metav1.MicroTime {
	return metav1.MicroTime{Time: goldenT0.Add(time.Duration(sec)*time.Second + 250001*time.Microsecond)}
}

func goldenDuration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// goldenAffinity sets every field of SessionAffinity.
func goldenAffinity() strategy.SessionAffinity {
	maxAge := goldenDuration(2 * time.Hour)
	return strategy.SessionAffinity{CookieName: "shop-session", MaxAge: &maxAge, Path: "/shop", Domain: "example.com",
		Secure: true, SameSite: "None"}
}

// goldenExtras sets every field of TrafficExtras, a match of every type.
func goldenExtras() strategy.TrafficExtras {
	expected := int32(5)
	return strategy.TrafficExtras{
		HeaderRoute: &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{
			{Name: "x-beta", Value: "1"},
			{Type: strategy.HeaderExact, Name: "x-team", Value: "core"},
			{Type: strategy.HeaderRegularExpression, Name: "x-user", Value: "^qa-.*"},
			{Type: strategy.HeaderCookie, Name: "beta", Value: "yes"},
		}, ExpectedPercent: &expected},
		MirrorPercent: 15,
		Sticky:        &strategy.Sticky{Run: "0badf00d", Grid: []int32{10, 40, 100}, Cookie: goldenAffinity()},
	}
}

// goldenOptions sets every field of Options. The fixtures need not
// validate (NoProgressDeadline with a ProgressDeadline does not): they
// hold the encoding.
func goldenOptions() strategy.Options {
	affinity := goldenAffinity()
	return strategy.Options{
		Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 25, AbortRamp: strategy.AbortGradual,
		UnhealthyThreshold: 4, UnhealthyAction: strategy.UnhealthyPause,
		ProgressDeadline: goldenDuration(5*time.Minute + 30*time.Second), AbortOnProgressDeadline: true, NoProgressDeadline: true,
		ScaleDownDelay: goldenDuration(90 * time.Second), PollInterval: goldenDuration(3 * time.Second),
		InitialPollInterval: goldenDuration(250 * time.Millisecond), SessionAffinity: &affinity,
	}
}

// goldenState sets every field of State, and of everything it holds.
func goldenState() strategy.State {
	return strategy.State{
		StableRevision: "v1", CanaryRevision: "v2", PendingRevision: "v3", Unobserved: true,
		StableSide: strategy.SideB, Phase: strategy.PhaseAborting, StepIndex: 3, StepsHash: "00112233445566ff",
		Desired:       strategy.Allocation{Weight: 20, StableCapacity: 90, CanaryCapacity: 30, CanaryRevision: "v2"},
		DesiredExtras: goldenExtras(),
		Observed: strategy.Observation{
			At: goldenAt(1), Weight: 10, WeightApplied: true, WeightInvalid: true,
			Stable:    strategy.SideObservation{Capacity: 90, Ready: 88, Settled: true, Revision: "v1", Updated: true},
			Canary:    strategy.SideObservation{Capacity: 30, Ready: 27, Settled: true, Revision: "v2", Updated: true},
			Revisions: true, Extras: goldenExtras(),
			Health: strategy.HealthUnhealthy, HealthMessage: "success rate 0.91 < 0.95",
			Gates: []strategy.GateResult{
				{Name: "p99", Verdict: strategy.VerdictPass, Message: "p99 120ms", At: goldenAt(2)},
				{Name: "errors", Verdict: strategy.VerdictInconclusive, Message: "no data", At: goldenAt(3)},
			},
			Error: "router: read weights: connection refused", Claimed: true,
		},
		StartedAt: goldenAt(4), HopAt: goldenAt(5),
		Pace: strategy.Pace{StableSettle: goldenDuration(1500 * time.Millisecond), CanarySettle: goldenDuration(4 * time.Second),
			StableAskedAt: goldenAt(6), CanaryAskedAt: goldenAt(7)},
		WeightChangedAt: goldenAt(8), WeightAppliedAt: goldenAt(9), WeightPendingAt: goldenAt(10),
		StepStartedAt: goldenAt(11), ReachedAt: goldenAt(12), FinishedAt: goldenAt(13),
		AwaitingResume: true, PauseReason: strategy.ReasonGateInconclusive, PausedAt: goldenAt(14),
		PromoteRequested: true, PromoteFullRequested: true, Resumed: true, SteadyRequested: true,
		Aborted:        &strategy.AbortStatus{Reason: "success rate 0.91 < 0.95", At: goldenAt(15), Emergency: true},
		ResumeWeight:   40,
		UnhealthyCount: 2, HealthCheckedAt: goldenAt(16), Gate: "errors", Message: "walking back",
		FailingSince:  goldenAt(17),
		Handled:       strategy.Requests{Abort: "a2", Retry: "r2", Promote: "p2", PromoteFull: "f2", Resume: "s2"},
		Ignored:       strategy.Requests{Abort: "a1", Retry: "r1", Promote: "p1", PromoteFull: "f1", Resume: "s1"},
		LastCommandAt: goldenAt(18),
		Conditions: []metav1.Condition{
			{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, ObservedGeneration: 7,
				LastTransitionTime: metav1.NewTime(goldenT0.Add(19 * time.Second)), Reason: strategy.ReasonAborting, Message: "walking back"},
			{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, ObservedGeneration: 7,
				LastTransitionTime: metav1.NewTime(goldenT0.Add(20 * time.Second)), Reason: strategy.ReasonObservationFailed,
				Message: "router: read weights: connection refused"},
		},
	}
}

// goldenCanary has a step of every kind, and header routes and mirrors
// that set and clear.
func goldenCanary() strategy.Canary {
	return strategy.Canary{Steps: []strategy.CanaryStep{
		strategy.SetWeight(20), strategy.Pause(90 * time.Second), strategy.PauseUntilResumed(), strategy.Gate("p99"),
		strategy.SetHeaderRoute(5, goldenExtras().HeaderRoute.Matches...),
		strategy.SetHeaderRoute(-1, strategy.HeaderMatch{Name: "x-canary", Value: "always"}),
		strategy.SetHeaderRoute(0), strategy.SetMirror(10), strategy.SetMirror(0), strategy.SetWeight(60),
	}, MaxSurgePercent: 25, Options: goldenOptions()}
}

// goldenValues are the values of every type a user stores, each fully
// populated, and each type's zero value (for what it leaves out).
func goldenValues() []struct {
	name string
	v    any
} {
	return []struct {
		name string
		v    any
	}{
		{"state", goldenState()},
		{"state-zero", strategy.State{}},
		{"control", strategy.Control{Paused: true, Suspended: true, Abort: "2026-03-01T12:00:00Z", Retry: "r1", Promote: "p1", PromoteFull: "f1", Resume: "s1"}},
		{"control-zero", strategy.Control{}},
		{"incremental", strategy.Incremental{StepPercent: 10, Interval: goldenDuration(time.Minute + 30*time.Second), MaxSurgePercent: 20,
			Options: goldenOptions()}},
		{"incremental-zero", strategy.Incremental{}},
		{"canary", goldenCanary()},
		{"canary-zero", strategy.Canary{}},
		{"bluegreen", strategy.BlueGreen{Options: goldenOptions()}},
		{"bluegreen-zero", strategy.BlueGreen{}},
		{"options", goldenOptions()},
		{"options-zero", strategy.Options{}},
		{"trafficextras", goldenExtras()},
		{"trafficextras-zero", strategy.TrafficExtras{}},
	}
}

// TestJSONGolden: the JSON of every type a user stores (a State in a
// status or an annotation, a Control, a strategy and its Options in a
// spec, TrafficExtras in a route's annotation) is byte for byte the one in
// testdata/json (indented there for people), and reads back as the value
// it was written from: a state or a spec stored by this version reads the
// same in the next. Run with -update to rewrite the files, and review the
// diff: a change breaks what users have stored.
func TestJSONGolden(t *testing.T) {
	for _, g := range goldenValues() {
		t.Run(g.name, func(t *testing.T) {
			checkJSONGolden(t, filepath.Join("testdata", "json", g.name+".json"), g.v)
		})
	}
}

// checkJSONGolden compares the JSON of v with the golden file at path and
// decodes the file back into v's type.
func checkJSONGolden(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
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
	back := reflect.New(reflect.TypeOf(v))
	if err := json.Unmarshal(want, back.Interface()); err != nil {
		t.Fatalf("%s does not decode: %v", path, err)
	}
	if diff := cmp.Diff(v, back.Elem().Interface()); diff != "" {
		t.Errorf("%s decodes to another value (-written +read):\n%s", path, diff)
	}
}

// TestJSONGoldenCoversEveryField: every exported field of the golden
// fixtures, at every depth, is set in at least one element of each slice,
// so that a field added to a stored type fails here until the fixture,
// and so its golden file, holds it.
func TestJSONGoldenCoversEveryField(t *testing.T) {
	for _, g := range goldenValues() {
		if strings.HasSuffix(g.name, "-zero") {
			continue
		}
		if missing := unsetFields(g.v); len(missing) > 0 {
			t.Errorf("%s: fields left zero: %v", g.name, missing)
		}
	}
}

// unsetFields lists the exported fields of v's type (through structs,
// pointers and slices; apimachinery's times are leaves) that are zero in
// v, a slice's field counting as set when any element sets it.
func unsetFields(v any) []string {
	all, set := map[string]bool{}, map[string]bool{}
	fieldPaths(reflect.TypeOf(v), "", all)
	setPaths(reflect.ValueOf(v), "", set)
	var missing []string
	for p := range all {
		if !set[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	return missing
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
