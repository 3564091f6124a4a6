// Package crd tests upshift's strategies embedded in a CRD spec on a real
// kube-apiserver: the CRD that controller-gen generates from
// internal/v1alpha1 (committed under testdata, regenerated and compared by
// .ci/crdcheck) is installed, valid specs of each strategy are stored and
// read back unchanged, and invalid ones are rejected by the API server with
// a message naming the field, as Validate names it.
package crd

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upshift-dev/upshift/e2e/crd/internal/v1alpha1"
	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

const crdFile = "testdata/check.upshift.dev_rollouts.yaml"

var rolloutGVK = schema.GroupVersionKind{Group: "check.upshift.dev", Version: "v1alpha1", Kind: "Rollout"}

var install struct {
	once sync.Once
	err  error
}

// env starts the API server (once per package) and installs the CRD.
func env(t *testing.T) *kubetest.Env {
	t.Helper()
	e := kubetest.Get(t)
	install.once.Do(func() { install.err = installCRD(t.Context(), e.Client) })
	if install.err != nil {
		t.Fatal(install.err)
	}
	return e
}

func installCRD(ctx context.Context, c client.Client) error {
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &crd.Object); err != nil {
		return err
	}
	if err := c.Create(ctx, crd); err != nil {
		return err
	}
	// Established, and the new resource served.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(crd.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKey{Name: crd.GetName()}, got); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				list := &unstructured.UnstructuredList{}
				list.SetGroupVersionKind(rolloutGVK.GroupVersion().WithKind("RolloutList"))
				return c.List(ctx, list) == nil, nil
			}
		}
		return false, nil
	})
}

// object is a Rollout with the spec given as JSON (a typed spec marshalled,
// or raw JSON for what the Go types cannot hold).
func object(t *testing.T, ns, name string, spec any) *unstructured.Unstructured {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": m}}
	u.SetGroupVersionKind(rolloutGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func i32(v int32) *int32 { return &v }

func d(v time.Duration) metav1.Duration { return metav1.Duration{Duration: v} }

func dp(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }

// validSpecs have every strategy with every option the schema checks set.
func validSpecs() map[string]v1alpha1.RolloutSpec {
	opts := strategy.Options{
		AbortRamp: strategy.AbortGradual, UnhealthyThreshold: 5, UnhealthyAction: strategy.UnhealthyPause,
		ProgressDeadline: d(5 * time.Minute), AbortOnProgressDeadline: true, ScaleDownDelay: d(90 * time.Second),
		PollInterval: d(3 * time.Second), InitialPollInterval: d(200 * time.Millisecond),
	}
	replicas := opts
	replicas.Capacity, replicas.MaxUnavailablePercent = strategy.CapacityReplicas, 25
	return map[string]v1alpha1.RolloutSpec{
		"incremental": {Revision: "v2", Incremental: &strategy.Incremental{
			StepPercent: 10, Interval: d(time.Minute + 30*time.Second), MaxSurgePercent: 30, Options: opts}},
		"incremental-replicas": {Revision: "v2", Incremental: &strategy.Incremental{
			StepPercent: 25, Interval: d(time.Minute), Options: replicas}},
		"incremental-fixed-no-deadline": {Revision: "v2", Incremental: &strategy.Incremental{
			StepPercent: 100, Interval: d(time.Second),
			Options: strategy.Options{Capacity: strategy.CapacityFixed, NoProgressDeadline: true, AbortRamp: strategy.AbortEmergency}}},
		"canary": {Revision: "v2", Canary: &strategy.Canary{
			Steps: []strategy.CanaryStep{
				strategy.SetWeight(0), strategy.SetWeight(20), strategy.Pause(30 * time.Second),
				strategy.Gate("latency"), strategy.PauseUntilResumed(), strategy.SetWeight(100),
			},
			MaxSurgePercent: 20, Options: opts}},
		"canary-fixed-no-steps": {Revision: "v2", Canary: &strategy.Canary{Options: strategy.Options{Capacity: strategy.CapacityFixed}}},
		"bluegreen":             {Revision: "v2", BlueGreen: &strategy.BlueGreen{Options: opts}},
		"bluegreen-zero":        {Revision: "v2", BlueGreen: &strategy.BlueGreen{}},
		"no-strategy":           {Revision: "v2"},
	}
}

// TestValidSpecsAccepted: valid specs of each strategy are stored and read
// back unchanged, their durations as strings.
func TestValidSpecsAccepted(t *testing.T) {
	e := env(t)
	ns := e.Namespace(t)
	for name, spec := range validSpecs() {
		t.Run(name, func(t *testing.T) {
			if s := strategyOf(spec); s != nil {
				if err := s.Validate(); err != nil {
					t.Fatalf("the test's spec is invalid: %v", err)
				}
			}
			obj := object(t, ns, name, spec)
			if err := e.Client.Create(t.Context(), obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(rolloutGVK)
			if err := e.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), got); err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(got.Object)
			if err != nil {
				t.Fatal(err)
			}
			var back v1alpha1.Rollout
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(normalize(spec), normalize(back.Spec)); diff != "" {
				t.Errorf("spec read back differs (-sent +stored):\n%s", diff)
			}
			if back.Spec.Incremental != nil {
				if iv, _, _ := unstructured.NestedString(got.Object, "spec", "incremental", "interval"); iv != spec.Incremental.Interval.Duration.String() {
					t.Errorf("stored interval %q, want %q", iv, spec.Incremental.Interval.Duration.String())
				}
			}
			// The copy controller-gen generated shares nothing with the original.
			cp := back.DeepCopy()
			if diff := cmp.Diff(back, *cp); diff != "" {
				t.Errorf("DeepCopy differs:\n%s", diff)
			}
		})
	}
}

// normalize makes nil and empty step lists equal: a nil list is sent as
// null, which the API server drops.
func normalize(s v1alpha1.RolloutSpec) v1alpha1.RolloutSpec {
	if s.Canary != nil && len(s.Canary.Steps) == 0 {
		c := *s.Canary
		c.Steps = nil
		s.Canary = &c
	}
	return s
}

func strategyOf(s v1alpha1.RolloutSpec) strategy.Strategy {
	switch {
	case s.Incremental != nil:
		return *s.Incremental
	case s.Canary != nil:
		return *s.Canary
	case s.BlueGreen != nil:
		return *s.BlueGreen
	}
	return nil
}

type invalidCase struct {
	name string
	spec any // a v1alpha1.RolloutSpec, or a map for what the types cannot hold
	// field is the path the API server must name ("spec." + the path
	// Validate names); msg a part of the message that only the marker
	// under test gives, so that the case fails if that marker is removed.
	field, msg string
}

func inc(mut func(*strategy.Incremental)) v1alpha1.RolloutSpec {
	s := &strategy.Incremental{StepPercent: 10, Interval: d(time.Minute), MaxSurgePercent: 30}
	mut(s)
	return v1alpha1.RolloutSpec{Revision: "v2", Incremental: s}
}

func can(mut func(*strategy.Canary)) v1alpha1.RolloutSpec {
	s := &strategy.Canary{Steps: []strategy.CanaryStep{strategy.SetWeight(20), strategy.Pause(time.Minute)}, MaxSurgePercent: 20}
	mut(s)
	return v1alpha1.RolloutSpec{Revision: "v2", Canary: s}
}

func bg(mut func(*strategy.BlueGreen)) v1alpha1.RolloutSpec {
	s := &strategy.BlueGreen{}
	mut(s)
	return v1alpha1.RolloutSpec{Revision: "v2", BlueGreen: s}
}

// raw is a valid incremental spec as JSON with one field of the strategy
// replaced.
func raw(key string, value any) map[string]any {
	return map[string]any{"revision": "v2", "incremental": map[string]any{
		"stepPercent": 10, "interval": "1m", "maxSurgePercent": 30, key: value}}
}

const (
	lte100   = "less than or equal to 100"
	gte0     = "greater than or equal to 0"
	gte1     = "greater than or equal to 1"
	notSupp  = "Unsupported value"
	required = "Required value"
)

// invalidCases has the options' cases once for each strategy, so that the
// test fails if a marker is lost from any of the three embeddings.
var invalidCases = append(ownCases, optionCases()...)

var ownCases = []invalidCase{
	// Incremental.
	{"step 0", inc(func(s *strategy.Incremental) { s.StepPercent = 0 }), "spec.incremental.stepPercent", gte1},
	{"step 101", inc(func(s *strategy.Incremental) {
		s.StepPercent, s.Capacity, s.MaxSurgePercent = 101, strategy.CapacityFixed, 0
	}),
		"spec.incremental.stepPercent", lte100},
	{"interval 0", inc(func(s *strategy.Incremental) { s.Interval = d(0) }), "spec.incremental.interval", "must be positive"},
	{"interval negative", inc(func(s *strategy.Incremental) { s.Interval = d(-time.Minute) }), "spec.incremental.interval", "must be positive"},
	{"interval missing", map[string]any{"revision": "v2", "incremental": map[string]any{"stepPercent": 10, "maxSurgePercent": 30}},
		"spec.incremental.interval", required},
	{"interval not a duration", raw("interval", "soon"), "spec.incremental.interval", "type conversion error"},
	{"surge 101", inc(func(s *strategy.Incremental) { s.MaxSurgePercent = 101 }), "spec.incremental.maxSurgePercent", lte100},
	{"surge negative", inc(func(s *strategy.Incremental) { s.MaxSurgePercent, s.Capacity = -1, strategy.CapacityFixed }),
		"spec.incremental.maxSurgePercent", gte0},
	{"surge below step, managed", inc(func(s *strategy.Incremental) { s.StepPercent, s.MaxSurgePercent = 40, 30 }),
		"spec.incremental.stepPercent", "must not exceed maxSurgePercent"},
	{"surge below step, replicas", inc(func(s *strategy.Incremental) {
		s.StepPercent, s.MaxSurgePercent, s.Capacity = 40, 30, strategy.CapacityReplicas
	}), "spec.incremental.stepPercent", "must not exceed maxSurgePercent"},
	{"surge 0, managed", inc(func(s *strategy.Incremental) { s.StepPercent, s.MaxSurgePercent = 1, 0 }),
		"spec.incremental.maxSurgePercent", "must be at least 1 in the managed capacity mode"},
	{"replicas that can never move", inc(func(s *strategy.Incremental) {
		s.Capacity, s.MaxSurgePercent = strategy.CapacityReplicas, 0
	}), "spec.incremental.maxUnavailablePercent", "replicas can never move"},
	// Canary steps.
	{"step with two actions", can(func(s *strategy.Canary) {
		s.Steps = append(s.Steps, strategy.CanaryStep{SetWeight: i32(50), Pause: &strategy.PauseStep{Duration: dp(time.Minute)}})
	}), "spec.canary.steps[2]", "exactly one of setWeight, pause, gate, setHeaderRoute and setMirror"},
	{"step with no action", can(func(s *strategy.Canary) { s.Steps = append(s.Steps, strategy.CanaryStep{}) }),
		"spec.canary.steps[2]", "exactly one of setWeight, pause, gate, setHeaderRoute and setMirror"},
	{"mirror and weight in one step", can(func(s *strategy.Canary) {
		s.Steps = append(s.Steps, strategy.CanaryStep{SetWeight: i32(50), SetMirror: &strategy.MirrorStep{Percent: 10}})
	}), "spec.canary.steps[2]", "exactly one of setWeight, pause, gate, setHeaderRoute and setMirror"},
	{"mirror 101", can(func(s *strategy.Canary) { s.Steps[0] = strategy.SetMirror(101) }), "spec.canary.steps[0].setMirror.percent", lte100},
	{"header match without a name", can(func(s *strategy.Canary) {
		s.Steps[0] = strategy.SetHeaderRoute(5, strategy.HeaderMatch{Value: "1"})
	}), "spec.canary.steps[0].setHeaderRoute.matches[0].name", "at least 1 chars long"},
	{"header match type Prefix", can(func(s *strategy.Canary) {
		s.Steps[0] = strategy.SetHeaderRoute(5, strategy.HeaderMatch{Type: "Prefix", Name: "x", Value: "1"})
	}), "spec.canary.steps[0].setHeaderRoute.matches[0].type", "Unsupported value"},
	{"sameSite Lenient", can(func(s *strategy.Canary) { s.SessionAffinity = &strategy.SessionAffinity{SameSite: "Lenient"} }),
		"spec.canary.sessionAffinity.sameSite", "Unsupported value"},
	{"set weight 101", can(func(s *strategy.Canary) { s.Steps[0] = strategy.SetWeight(101) }), "spec.canary.steps[0].setWeight", lte100},
	{"set weight negative", can(func(s *strategy.Canary) { s.Steps[0] = strategy.SetWeight(-1) }), "spec.canary.steps[0].setWeight", gte0},
	{"pause of 0", can(func(s *strategy.Canary) { s.Steps[1] = strategy.Pause(0) }), "spec.canary.steps[1].pause.duration", "must be positive"},
	{"gate without a name", can(func(s *strategy.Canary) { s.Steps[1] = strategy.Gate("") }), "spec.canary.steps[1].gate.name", "at least 1 chars long"},
	{"canary surge 0, managed", can(func(s *strategy.Canary) { s.MaxSurgePercent = 0 }),
		"spec.canary.maxSurgePercent", "must be at least 1 in the managed capacity mode"},
	{"canary surge negative", can(func(s *strategy.Canary) { s.MaxSurgePercent, s.Capacity = -1, strategy.CapacityFixed }),
		"spec.canary.maxSurgePercent", gte0},
	{"canary surge 101", can(func(s *strategy.Canary) { s.MaxSurgePercent = 101 }), "spec.canary.maxSurgePercent", lte100},
	{"canary replicas that can never move", can(func(s *strategy.Canary) { s.Capacity, s.MaxSurgePercent = strategy.CapacityReplicas, 0 }),
		"spec.canary.maxUnavailablePercent", "replicas can never move"},
	// The spec of the test type itself.
	{"two strategies", v1alpha1.RolloutSpec{Revision: "v2", BlueGreen: &strategy.BlueGreen{},
		Canary: &strategy.Canary{Options: strategy.Options{Capacity: strategy.CapacityFixed}}}, "spec", "at most one of incremental, canary and blueGreen"},
}

// optionCases are the rules of Options, each through each strategy.
func optionCases() []invalidCase {
	cases := []struct {
		name  string
		mut   func(*strategy.Options)
		field string
		msg   string
	}{
		{"unknown capacity mode", func(o *strategy.Options) { o.Capacity = "Sideways" }, "capacity", notSupp},
		{"maxUnavailable 101", func(o *strategy.Options) { o.Capacity, o.MaxUnavailablePercent = strategy.CapacityReplicas, 101 },
			"maxUnavailablePercent", lte100},
		{"maxUnavailable negative", func(o *strategy.Options) { o.Capacity, o.MaxUnavailablePercent = strategy.CapacityReplicas, -1 },
			"maxUnavailablePercent", gte0},
		{"maxUnavailable outside replicas", func(o *strategy.Options) { o.MaxUnavailablePercent = 10 },
			"maxUnavailablePercent", "only applies to the Replicas capacity mode"},
		{"unknown abort ramp", func(o *strategy.Options) { o.AbortRamp = "Slow" }, "abortRamp", notSupp},
		{"emergency without a router", func(o *strategy.Options) {
			o.AbortRamp, o.Capacity = strategy.AbortEmergency, strategy.CapacityReplicas
		},
			"abortRamp", "the Replicas mode has none"},
		{"unhealthy threshold negative", func(o *strategy.Options) { o.UnhealthyThreshold = -1 }, "unhealthyThreshold", gte0},
		{"unknown unhealthy action", func(o *strategy.Options) { o.UnhealthyAction = "Shrug" }, "unhealthyAction", notSupp},
		{"progress deadline negative", func(o *strategy.Options) { o.ProgressDeadline = d(-time.Second) },
			"progressDeadline", "must not be negative"},
		{"abort on a disabled deadline", func(o *strategy.Options) { o.AbortOnProgressDeadline, o.NoProgressDeadline = true, true },
			"abortOnProgressDeadline", "noProgressDeadline disables it"},
		{"deadline set and disabled", func(o *strategy.Options) { o.ProgressDeadline, o.NoProgressDeadline = d(time.Minute), true },
			"progressDeadline", "must be 0 when noProgressDeadline is set"},
		{"scale-down delay negative", func(o *strategy.Options) { o.ScaleDownDelay = d(-time.Second) },
			"scaleDownDelay", "must not be negative"},
		{"poll interval negative", func(o *strategy.Options) { o.PollInterval = d(-time.Second) }, "pollInterval", "at least 100ms"},
		{"poll interval too short", func(o *strategy.Options) { o.PollInterval = d(50 * time.Millisecond) }, "pollInterval", "at least 100ms"},
		{"initial poll interval too short", func(o *strategy.Options) { o.InitialPollInterval = d(50 * time.Millisecond) },
			"initialPollInterval", "at least 100ms"},
		{"initial poll above poll", func(o *strategy.Options) { o.PollInterval, o.InitialPollInterval = d(time.Second), d(2*time.Second) },
			"initialPollInterval", "must not exceed pollInterval"},
		{"initial poll above the default poll", func(o *strategy.Options) { o.InitialPollInterval = d(3 * time.Second) },
			"initialPollInterval", "must not exceed pollInterval"},
	}
	var out []invalidCase
	for _, c := range cases {
		out = append(out,
			invalidCase{c.name + ", incremental", inc(func(s *strategy.Incremental) { c.mut(&s.Options) }), "spec.incremental." + c.field, c.msg},
			invalidCase{c.name + ", canary", can(func(s *strategy.Canary) { c.mut(&s.Options) }), "spec.canary." + c.field, c.msg},
			invalidCase{c.name + ", bluegreen", bg(func(s *strategy.BlueGreen) { c.mut(&s.Options) }), "spec.blueGreen." + c.field, c.msg})
	}
	return out
}

// TestInvalidSpecsRejected: each invalid spec is rejected by the API server
// with the field's path and the message of the marker under test, and, when
// the Go types can hold it, Validate rejects it naming the same field.
func TestInvalidSpecsRejected(t *testing.T) {
	e := env(t)
	ns := e.Namespace(t)
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			if spec, ok := tc.spec.(v1alpha1.RolloutSpec); ok && tc.field != "spec" {
				err := strategyOf(spec).Validate()
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.field, "spec.")) {
					t.Errorf("Validate: %v; want an error naming %s", err, strings.TrimPrefix(tc.field, "spec."))
				}
			}
			obj := object(t, ns, "invalid-"+strconv.Itoa(i), tc.spec)
			err := e.Client.Create(t.Context(), obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("the API server accepted %s", tc.name)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("rejected, but not as invalid: %v", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field+":") || !strings.Contains(msg, tc.msg) {
				t.Errorf("rejected with %q; want the field %s and %q", msg, tc.field, tc.msg)
			}
			t.Log(err)
		})
	}
}
