package strategy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/upshift-dev/upshift/strategy"
)

// problems lists the problems of a validation error as "path type", in
// order, after checking that it is an *InvalidError matching ErrInvalid.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, strategy.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var invalid *strategy.InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("errors.As(%v, *InvalidError) = false", err)
	}
	var got []string
	for _, fe := range invalid.Errors {
		got = append(got, fe.Field+" "+string(fe.Type))
		if !strings.Contains(err.Error(), fe.Field) {
			t.Errorf("Error() %q does not name %s", err.Error(), fe.Field)
		}
	}
	if !strings.HasPrefix(err.Error(), "strategy: invalid options: ") {
		t.Errorf("Error() = %q, want the package prefix", err.Error())
	}
	return got
}

const (
	invalid      = string(field.ErrorTypeInvalid)
	required     = string(field.ErrorTypeRequired)
	notSupported = string(field.ErrorTypeNotSupported)
)

// badOptions has every option wrong at once.
var badOptions = strategy.Options{
	Capacity:                "Elastic",
	MaxUnavailablePercent:   101,
	AbortRamp:               "Sideways",
	UnhealthyThreshold:      -1,
	UnhealthyAction:         "Shrug",
	ProgressDeadline:        metav1.Duration{Duration: -time.Second},
	ScaleDownDelay:          metav1.Duration{Duration: -time.Second},
	PollInterval:            metav1.Duration{Duration: -time.Second},
	AbortOnProgressDeadline: true,
}

// badOptionsProblems is what badOptions gives under root.
func badOptionsProblems(root string) []string {
	return []string{
		root + ".capacity " + notSupported,
		root + ".maxUnavailablePercent " + invalid, // out of range
		root + ".maxUnavailablePercent " + invalid, // not the Replicas mode
		root + ".abortRamp " + notSupported,
		root + ".unhealthyThreshold " + invalid,
		root + ".unhealthyAction " + notSupported,
		root + ".progressDeadline " + invalid,
		root + ".scaleDownDelay " + invalid,
		root + ".pollInterval " + invalid,
	}
}

func TestValidateIncremental(t *testing.T) {
	replicas := strategy.Options{Capacity: strategy.CapacityReplicas}
	fixed := strategy.Options{Capacity: strategy.CapacityFixed}
	tests := []struct {
		name string
		in   strategy.Incremental
		want []string
	}{
		{"valid", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}, nil},
		{"step equals surge", strategy.Incremental{StepPercent: 100, Interval: metav1.Duration{Duration: time.Nanosecond}, MaxSurgePercent: 100}, nil},
		{"zero value", strategy.Incremental{}, []string{
			"incremental.stepPercent " + invalid,
			"incremental.interval " + invalid,
			"incremental.maxSurgePercent " + invalid,
		}},
		{"over 100, negative interval", strategy.Incremental{StepPercent: 101, Interval: metav1.Duration{Duration: -time.Second}, MaxSurgePercent: 101}, []string{
			"incremental.stepPercent " + invalid,
			"incremental.interval " + invalid,
			"incremental.maxSurgePercent " + invalid,
		}},
		{"negative", strategy.Incremental{StepPercent: -1, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: -1}, []string{
			"incremental.stepPercent " + invalid,
			"incremental.maxSurgePercent " + invalid,
		}},
		{"step over surge", strategy.Incremental{StepPercent: 40, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}, []string{
			"incremental.stepPercent " + invalid,
		}},
		{"fixed needs no surge", strategy.Incremental{StepPercent: 40, Interval: metav1.Duration{Duration: time.Second}, Options: fixed}, nil},
		{"replicas: surge or unavailable", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, Options: replicas}, []string{
			"incremental.maxUnavailablePercent " + invalid,
		}},
		{"replicas: unavailable alone", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second},
			Options: strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 25}}, nil},
		{"replicas: no emergency", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 10,
			Options: strategy.Options{Capacity: strategy.CapacityReplicas, AbortRamp: strategy.AbortEmergency}}, []string{
			"incremental.abortRamp " + invalid,
		}},
		{"abort on no deadline", strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 10,
			Options: strategy.Options{AbortOnProgressDeadline: true, NoProgressDeadline: true}}, []string{
			"incremental.abortOnProgressDeadline " + invalid,
		}},
		{"everything", strategy.Incremental{Options: badOptions}, append([]string{
			"incremental.stepPercent " + invalid,
			"incremental.interval " + invalid,
			"incremental.maxSurgePercent " + invalid,
		}, badOptionsProblems("incremental")...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problems(t, tt.in.Validate())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateCanary(t *testing.T) {
	zero := metav1.Duration{}
	neg := metav1.Duration{Duration: -time.Second}
	w := int32(10)
	tests := []struct {
		name string
		c    strategy.Canary
		want []string
	}{
		{"valid", strategy.Canary{Steps: []strategy.CanaryStep{
			strategy.SetWeight(0), strategy.Pause(time.Second), strategy.PauseUntilResumed(), strategy.Gate("g"), strategy.SetWeight(100), strategy.SetWeight(5),
		}, MaxSurgePercent: 1}, nil},
		{"zero value", strategy.Canary{}, []string{"canary.maxSurgePercent " + invalid}},
		{"zero value, fixed", strategy.Canary{Options: strategy.Options{Capacity: strategy.CapacityFixed}}, nil},
		{"every step wrong", strategy.Canary{Steps: []strategy.CanaryStep{
			strategy.SetWeight(101),
			{Pause: &strategy.PauseStep{Duration: &zero}},
			strategy.Gate(""),
			{},
			{SetWeight: &w, Gate: &strategy.GateStep{Name: "g"}},
			strategy.SetWeight(-1),
			{Pause: &strategy.PauseStep{Duration: &neg}},
		}, MaxSurgePercent: 101}, []string{
			"canary.steps[0].setWeight " + invalid,
			"canary.steps[1].pause.duration " + invalid,
			"canary.steps[2].gate.name " + required,
			"canary.steps[3] " + invalid,
			"canary.steps[4] " + invalid,
			"canary.steps[5].setWeight " + invalid,
			"canary.steps[6].pause.duration " + invalid,
			"canary.maxSurgePercent " + invalid,
		}},
		{"options", strategy.Canary{MaxSurgePercent: 10, Options: badOptions}, badOptionsProblems("canary")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problems(t, tt.c.Validate())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateBlueGreen(t *testing.T) {
	tests := []struct {
		name string
		b    strategy.BlueGreen
		want []string
	}{
		{"zero value", strategy.BlueGreen{}, nil},
		{"fixed", strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityFixed}}, nil},
		{"replicas", strategy.BlueGreen{Options: strategy.Options{Capacity: strategy.CapacityReplicas}}, nil},
		{"emergency", strategy.BlueGreen{Options: strategy.Options{AbortRamp: strategy.AbortEmergency}}, nil},
		{"options", strategy.BlueGreen{Options: badOptions}, badOptionsProblems("blueGreen")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problems(t, tt.b.Validate())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateOptions checks each option alone, under the three roots.
func TestValidateOptions(t *testing.T) {
	tests := []struct {
		name string
		o    strategy.Options
		want []string // paths below the root
	}{
		{"zero value", strategy.Options{}, nil},
		{"all set", strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 100, AbortRamp: strategy.AbortGradual,
			UnhealthyThreshold: 1, UnhealthyAction: strategy.UnhealthyPause, ProgressDeadline: metav1.Duration{Duration: time.Second},
			AbortOnProgressDeadline: true, ScaleDownDelay: metav1.Duration{Duration: time.Second}, PollInterval: metav1.Duration{Duration: time.Second}}, nil},
		{"capacity", strategy.Options{Capacity: "Elastic"}, []string{"capacity " + notSupported}},
		{"unavailable outside replicas", strategy.Options{MaxUnavailablePercent: 10}, []string{"maxUnavailablePercent " + invalid}},
		{"unavailable over 100", strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: 101}, []string{"maxUnavailablePercent " + invalid}},
		{"unavailable negative", strategy.Options{Capacity: strategy.CapacityReplicas, MaxUnavailablePercent: -1}, []string{"maxUnavailablePercent " + invalid}},
		{"abort ramp", strategy.Options{AbortRamp: "Sideways"}, []string{"abortRamp " + notSupported}},
		{"threshold", strategy.Options{UnhealthyThreshold: -1}, []string{"unhealthyThreshold " + invalid}},
		{"action", strategy.Options{UnhealthyAction: "Shrug"}, []string{"unhealthyAction " + notSupported}},
		{"deadline", strategy.Options{ProgressDeadline: metav1.Duration{Duration: -1}}, []string{"progressDeadline " + invalid}},
		{"abort with the default deadline", strategy.Options{AbortOnProgressDeadline: true}, nil},
		{"abort without deadline", strategy.Options{AbortOnProgressDeadline: true, NoProgressDeadline: true}, []string{"abortOnProgressDeadline " + invalid}},
		{"deadline and no deadline", strategy.Options{ProgressDeadline: metav1.Duration{Duration: time.Minute}, NoProgressDeadline: true}, []string{"progressDeadline " + invalid}},
		{"poll below the floor", strategy.Options{PollInterval: metav1.Duration{Duration: time.Nanosecond}}, []string{"pollInterval " + invalid}},
		{"poll at the floor", strategy.Options{PollInterval: metav1.Duration{Duration: strategy.MinPollInterval}}, nil},
		{"delay", strategy.Options{ScaleDownDelay: metav1.Duration{Duration: -1}}, []string{"scaleDownDelay " + invalid}},
		{"poll", strategy.Options{PollInterval: metav1.Duration{Duration: -1}}, []string{"pollInterval " + invalid}},
		{"first poll", strategy.Options{InitialPollInterval: metav1.Duration{Duration: -1}}, []string{"initialPollInterval " + invalid}},
		{"first poll below the floor", strategy.Options{InitialPollInterval: metav1.Duration{Duration: time.Millisecond}}, []string{"initialPollInterval " + invalid}},
		{"first poll over the default poll", strategy.Options{InitialPollInterval: metav1.Duration{Duration: 3 * time.Second}}, []string{"initialPollInterval " + invalid}},
		{"first poll over the poll", strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}, InitialPollInterval: metav1.Duration{Duration: 2 * time.Second}}, []string{"initialPollInterval " + invalid}},
		{"fixed poll", strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}, InitialPollInterval: metav1.Duration{Duration: time.Second}}, nil},
		{"first poll at the floor", strategy.Options{InitialPollInterval: metav1.Duration{Duration: strategy.MinPollInterval}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefixed := func(root string) []string {
				var out []string
				for _, p := range tt.want {
					out = append(out, root+"."+p)
				}
				return out
			}
			for root, strat := range map[string]strategy.Strategy{
				"incremental": strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 10, Options: tt.o},
				"canary":      strategy.Canary{MaxSurgePercent: 10, Options: tt.o},
				"blueGreen":   strategy.BlueGreen{Options: tt.o},
			} {
				if diff := cmp.Diff(prefixed(root), problems(t, strat.Validate())); diff != "" {
					t.Errorf("%s (-want +got):\n%s", root, diff)
				}
			}
		})
	}
}
