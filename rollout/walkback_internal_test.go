package rollout

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

var (
	t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

// TestTowardStable: which hops may go without their state.
func TestTowardStable(t *testing.T) {
	hdr := &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "1"}}}
	other := &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "x-beta", Value: "2"}}}
	sticky := &strategy.Sticky{}
	routed := strategy.Observation{Weight: 30, Extras: strategy.TrafficExtras{HeaderRoute: hdr, MirrorPercent: 20, Sticky: sticky}}
	tests := []struct {
		name   string
		obs    strategy.Observation
		v      int32
		extras bool
		x      strategy.TrafficExtras
		want   bool
	}{
		{"weight down", strategy.Observation{Weight: 30}, 10, false, strategy.TrafficExtras{}, true},
		{"weight kept", strategy.Observation{Weight: 30}, 30, false, strategy.TrafficExtras{}, true},
		{"weight up", strategy.Observation{Weight: 30}, 40, false, strategy.TrafficExtras{}, false},
		{"invalid route", strategy.Observation{Weight: 30, WeightInvalid: true}, 0, false, strategy.TrafficExtras{}, false},
		{"invalid route, all to stable", strategy.Observation{Weight: 30, WeightInvalid: true}, 0, true, strategy.TrafficExtras{}, true},
		{"invalid route, extras kept", strategy.Observation{Weight: 30, WeightInvalid: true}, 0, true, strategy.TrafficExtras{Sticky: sticky}, false},
		{"extras dropped", routed, 30, true, strategy.TrafficExtras{Sticky: sticky}, true},
		{"all dropped, weight down", routed, 0, true, strategy.TrafficExtras{}, true},
		{"mirror lowered", routed, 30, true, strategy.TrafficExtras{HeaderRoute: hdr, MirrorPercent: 10, Sticky: sticky}, true},
		{"mirror raised", routed, 30, true, strategy.TrafficExtras{HeaderRoute: hdr, MirrorPercent: 30, Sticky: sticky}, false},
		{"another header route", routed, 10, true, strategy.TrafficExtras{HeaderRoute: other}, false},
		{"header route added", strategy.Observation{Weight: 30}, 10, true, strategy.TrafficExtras{HeaderRoute: hdr}, false},
		{"sticky added", strategy.Observation{Weight: 30}, 10, true, strategy.TrafficExtras{Sticky: sticky}, false},
		{"weight up with extras dropped", routed, 40, true, strategy.TrafficExtras{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := towardStable(&tt.obs, tt.v, tt.extras, &tt.x); got != tt.want {
				t.Errorf("towardStable = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWithRefusal: the Degraded condition names the refusal, keeps the
// strategy's reason in its message and keeps its transition time while it
// lasts, so that a state marked again at every reconcile is not a change.
func TestWithRefusal(t *testing.T) {
	refusal := &StateRefusedError{Object: "HTTPRoute shop/web", Field: "metadata.annotations", Key: "upshift.dev/rollout-state", Err: errors.New("Too long")}
	at := func(tm time.Time) metav1.Time { return metav1.Time{Time: tm} }
	progressing := metav1.Condition{Type: strategy.ConditionProgressing, Status: metav1.ConditionTrue, Reason: strategy.ReasonAborting, LastTransitionTime: at(t0)}
	aborted := metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: strategy.ReasonAborted, Message: "stop", LastTransitionTime: at(t0)}
	cleared := metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionFalse, Reason: strategy.ReasonAsExpected, LastTransitionTime: at(t1)}
	msg := "the state cannot be stored; traffic moves only toward the stable side until it can: " + refusal.Error()
	tests := []struct {
		name       string
		prev, next []metav1.Condition
		want       metav1.Condition
	}{
		{"no Degraded yet", nil, []metav1.Condition{progressing},
			metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonStateRefused, Message: msg, LastTransitionTime: at(t1)}},
		{"aborted", nil, []metav1.Condition{progressing, aborted},
			metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonStateRefused, Message: msg + "; also degraded: Aborted: stop", LastTransitionTime: at(t0)}},
		{"marked before, clear now", []metav1.Condition{{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonStateRefused, LastTransitionTime: at(t0)}}, []metav1.Condition{cleared},
			metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonStateRefused, Message: msg, LastTransitionTime: at(t0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := strategy.State{Conditions: tt.next}
			before := append([]metav1.Condition(nil), tt.next...)
			got := withRefusal(&strategy.State{Conditions: tt.prev}, next, refusal, t1)
			var degraded []metav1.Condition
			for _, c := range got.Conditions {
				if c.Type == strategy.ConditionDegraded {
					degraded = append(degraded, c)
				}
			}
			if diff := cmp.Diff([]metav1.Condition{tt.want}, degraded); diff != "" {
				t.Errorf("Degraded (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.next); diff != "" {
				t.Errorf("the input's conditions changed (-before +after):\n%s", diff)
			}
			again := withRefusal(&got, next, refusal, t1.Add(time.Hour))
			if strategy.Changed(&got, &again) {
				t.Errorf("marked again an hour later: changed\n%s", cmp.Diff(got.Conditions, again.Conditions))
			}
		})
	}
}

// TestReducedForms: the reduced forms of a state lose only what every
// Step sets again, and the first is no change at all for strategy.Changed.
func TestReducedForms(t *testing.T) {
	s := strategy.NewState("v1", "v2")
	s.Phase, s.Message = strategy.PhaseAborting, "walking back"
	s.Observed.At = strategy.Micro(t0)
	s.WeightAppliedAt, s.HealthCheckedAt = strategy.Micro(t0), strategy.Micro(t0)
	s.Conditions = []metav1.Condition{{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue, Reason: strategy.ReasonAborted}}
	f := reducedForms(s)
	if strategy.Changed(&s, &f[0]) {
		t.Errorf("the first reduced form is a change")
	}
	want := f[0]
	want.Conditions = nil
	if diff := cmp.Diff(want, f[1]); diff != "" {
		t.Errorf("the second reduced form (-want +got):\n%s", diff)
	}
	if !f[0].Observed.At.IsZero() || f[0].Message != "" || len(s.Conditions) != 1 || s.Message != "walking back" {
		t.Errorf("reduced %+v from %+v", f[0], s)
	}
}
