package object

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/strategy"
)

func TestParsePath(t *testing.T) {
	cases := []struct {
		in   string
		want Path
		err  error
	}{
		{".status.rollout", Path{"status", "rollout"}, nil},
		{"spec.control", Path{"spec", "control"}, nil},
		{"", nil, ErrInvalidPath},
		{".", nil, ErrInvalidPath},
		{".status..rollout", nil, ErrInvalidPath},
		{".items[0]", nil, ErrInvalidPath},
	}
	for _, c := range cases {
		got, err := ParsePath("--state-path", c.in)
		if !errors.Is(err, c.err) {
			t.Errorf("ParsePath(%q): error %v, want %v", c.in, err, c.err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParsePath(%q) (-want +got):\n%s", c.in, diff)
		}
	}
}

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestStateAndControl(t *testing.T) {
	u := obj(t, `
kind: Release
spec:
  control: {paused: true, abort: "t1"}
  strategy:
    canary: {maxSurgePercent: 25, steps: [{setWeight: 20}, {pause: {}}]}
status:
  rollout: {stableRevision: v1, canaryRevision: v2, phase: Paused, stepIndex: 1, handled: {abort: t0}}
`)
	st, found, err := State(u, Path{"status", "rollout"})
	if err != nil || !found {
		t.Fatalf("State: %v, found %v", err, found)
	}
	if st.Phase != strategy.PhasePaused || st.StepIndex != 1 || st.Handled.Abort != "t0" {
		t.Errorf("State: got %+v", st)
	}
	if _, found, err := State(u, Path{"status", "other"}); found || err != nil {
		t.Errorf("State at a missing path: found %v, err %v", found, err)
	}
	if _, _, err := State(u, Path{"kind", "x"}); !errors.Is(err, ErrDecode) {
		t.Errorf("State under a string: got %v, want %v", err, ErrDecode)
	}
	c, err := Control(u, Path{"spec", "control"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strategy.Control{Paused: true, Abort: "t1"}, c); diff != "" {
		t.Errorf("Control (-want +got):\n%s", diff)
	}
	s, err := Strategy(u.Object, Path{"spec", "strategy"})
	if err != nil {
		t.Fatal(err)
	}
	cn, ok := s.(strategy.Canary)
	if !ok || len(cn.Steps) != 2 || cn.MaxSurgePercent != 25 {
		t.Errorf("Strategy: got %#v", s)
	}
}

func TestStrategyErrors(t *testing.T) {
	cases := []struct {
		name, doc string
		err       error
	}{
		{"missing", `kind: Release`, ErrNoStrategy},
		{"two", "kind: Release\nspec: {strategy: {canary: {}, blueGreen: {}}}", ErrDecode},
		{"none", "kind: Release\nspec: {strategy: {}}", ErrDecode},
		{"wrong type", "kind: Release\nspec: {strategy: {canary: {steps: 3}}}", ErrDecode},
		{"invalid", "kind: Release\nspec: {strategy: {incremental: {stepPercent: 0}}}", strategy.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Manifest(obj(t, c.doc).Object, Path{"spec", "strategy"})
			if !errors.Is(err, c.err) {
				t.Fatalf("got %v, want %v", err, c.err)
			}
		})
	}
}

func TestManifestBare(t *testing.T) {
	s, err := Manifest(obj(t, `incremental: {stepPercent: 10, interval: 1m, maxSurgePercent: 10}`).Object, Path{"spec", "strategy"})
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := s.(strategy.Incremental); !ok || in.StepPercent != 10 {
		t.Fatalf("got %#v", s)
	}
}

func TestMergePatch(t *testing.T) {
	b, err := MergePatch(Path{"spec", "control"}, map[string]any{"abort": "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"spec":{"control":{"abort":"t2"}}}`, string(b)); diff != "" {
		t.Errorf("MergePatch (-want +got):\n%s", diff)
	}
}

func FuzzStrategy(f *testing.F) {
	f.Add(`{"canary":{"steps":[{"setWeight":20}],"maxSurgePercent":20}}`)
	f.Add(`{"incremental":{"stepPercent":10,"interval":"1m"}}`)
	f.Add(`{"blueGreen":null}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var m map[string]any
		if yaml.Unmarshal([]byte(doc), &m) != nil || m == nil {
			return
		}
		s, err := Manifest(m, Path{"spec", "strategy"})
		if err == nil && s.Validate() != nil {
			t.Fatalf("Manifest returned an invalid strategy without error")
		}
	})
}
