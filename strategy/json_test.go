package strategy_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// allOptions sets every option (NoProgressDeadline excepted: it excludes
// ProgressDeadline and AbortOnProgressDeadline).
func allOptions(mode strategy.CapacityMode) strategy.Options {
	o := strategy.Options{
		Capacity: mode, AbortRamp: strategy.AbortGradual,
		UnhealthyThreshold: 4, UnhealthyAction: strategy.UnhealthyPause,
		ProgressDeadline: dur(5*time.Minute + 30*time.Second), AbortOnProgressDeadline: true,
		ScaleDownDelay: dur(90 * time.Second), PollInterval: dur(3 * time.Second), InitialPollInterval: dur(250 * time.Millisecond),
	}
	if mode != strategy.CapacityReplicas {
		o.SessionAffinity = &strategy.SessionAffinity{CookieName: "s", MaxAge: &metav1.Duration{Duration: time.Hour}, Path: "/app", Domain: "example.com", Secure: true, SameSite: "None"}
	}
	if mode == strategy.CapacityReplicas {
		o.MaxUnavailablePercent = 25
	}
	return o
}

// TestStrategyJSONRoundTrip: each strategy with every option set survives a
// JSON round trip, and its durations read as Kubernetes durations ("1m30s").
func TestStrategyJSONRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		strat strategy.Strategy
		want  []string // fragments of the JSON
	}{
		{"incremental", strategy.Incremental{StepPercent: 10, Interval: dur(time.Minute + 30*time.Second), MaxSurgePercent: 30,
			Options: allOptions(strategy.CapacityReplicas)},
			[]string{`"interval":"1m30s"`, `"progressDeadline":"5m30s"`, `"scaleDownDelay":"1m30s"`, `"pollInterval":"3s"`,
				`"initialPollInterval":"250ms"`, `"capacity":"Replicas"`, `"maxUnavailablePercent":25`}},
		{"canary", strategy.Canary{Steps: []strategy.CanaryStep{
			strategy.SetWeight(20), strategy.Pause(90 * time.Second), strategy.Gate("latency"), strategy.PauseUntilResumed(), strategy.SetWeight(60),
		}, MaxSurgePercent: 20, Options: allOptions(strategy.CapacityManaged)},
			[]string{`{"pause":{"duration":"1m30s"}}`, `{"pause":{}}`, `{"gate":{"name":"latency"}}`, `{"setWeight":20}`, `"pollInterval":"3s"`}},
		{"bluegreen", strategy.BlueGreen{Options: allOptions(strategy.CapacityFixed)},
			[]string{`"capacity":"Fixed"`, `"scaleDownDelay":"1m30s"`, `"abortRamp":"Gradual"`, `"unhealthyAction":"Pause"`}},
		{"bluegreen without deadline", strategy.BlueGreen{Options: strategy.Options{NoProgressDeadline: true}},
			[]string{`{"noProgressDeadline":true}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.strat.Validate(); err != nil {
				t.Fatal(err)
			}
			if tc.name != "bluegreen without deadline" {
				// Every option is set but NoProgressDeadline, and those the
				// capacity mode excludes or has as its zero value.
				for _, f := range zeroFields(reflect.ValueOf(tc.strat.Shared()), "") {
					if f != ".NoProgressDeadline" && f != ".Capacity" && f != ".MaxUnavailablePercent" &&
						(f != ".SessionAffinity" || tc.strat.Shared().Capacity != strategy.CapacityReplicas) {
						t.Errorf("option %s left zero", f)
					}
				}
			}
			raw, err := json.Marshal(tc.strat)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("JSON %s lacks %s", raw, w)
				}
			}
			back := reflect.New(reflect.TypeOf(tc.strat))
			if err := json.Unmarshal(raw, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.strat, back.Elem().Interface()); diff != "" {
				t.Errorf("round trip differs (-before +after):\n%s\nJSON %s", diff, raw)
			}
		})
	}
	// A duration written by hand, as in a CRD's YAML.
	var in strategy.Incremental
	if err := json.Unmarshal([]byte(`{"stepPercent":10,"interval":"1m30s","maxSurgePercent":10,"pollInterval":"500ms"}`), &in); err != nil {
		t.Fatal(err)
	}
	if in.Interval.Duration != 90*time.Second || in.PollInterval.Duration != 500*time.Millisecond || in.Validate() != nil {
		t.Errorf("parsed %+v (%v)", in, in.Validate())
	}
}

// TestStrategyDeepCopy: the generated DeepCopy of each strategy is equal to
// the original and shares no memory with it.
func TestStrategyDeepCopy(t *testing.T) {
	c := strategy.Canary{Steps: []strategy.CanaryStep{
		strategy.SetWeight(20), strategy.Pause(time.Minute), strategy.Gate("g"), strategy.PauseUntilResumed(),
	}, MaxSurgePercent: 20, Options: allOptions(strategy.CapacityManaged)}
	cp := c.DeepCopy()
	if diff := cmp.Diff(c, *cp); diff != "" {
		t.Fatalf("copy differs:\n%s", diff)
	}
	*cp.Steps[0].SetWeight = 99
	cp.Steps[1].Pause.Duration.Duration = time.Hour
	cp.Steps[2].Gate.Name = "other"
	cp.Steps[3].Pause.Duration = &metav1.Duration{}
	cp.Steps[0] = strategy.Gate("replaced")
	if *c.Steps[0].SetWeight != 20 || c.Steps[1].Pause.Duration.Duration != time.Minute || c.Steps[2].Gate.Name != "g" ||
		c.Steps[3].Pause.Duration != nil {
		t.Errorf("changing the copy changed the original: %+v", c.Steps)
	}
	inc := strategy.Incremental{StepPercent: 10, Interval: dur(time.Minute), MaxSurgePercent: 10, Options: allOptions(strategy.CapacityManaged)}
	ic := inc.DeepCopy()
	if diff := cmp.Diff(inc, *ic); diff != "" {
		t.Errorf("Incremental copy differs:\n%s", diff)
	}
	ic.SessionAffinity.CookieName = "changed"
	bg := strategy.BlueGreen{Options: allOptions(strategy.CapacityFixed)}
	bc := bg.DeepCopy()
	if diff := cmp.Diff(bg, *bc); diff != "" {
		t.Errorf("BlueGreen copy differs:\n%s", diff)
	}
	bc.SessionAffinity.MaxAge.Duration = time.Minute
	if inc.SessionAffinity.CookieName != "s" || bg.SessionAffinity.MaxAge.Duration != time.Hour {
		t.Error("changing a copy's session affinity changed the original")
	}
	if (*strategy.Canary)(nil).DeepCopy() != nil || (*strategy.Options)(nil).DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}
