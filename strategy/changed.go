package strategy

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Changed reports whether next differs from prev in anything a person or a
// decision needs, that is in anything but the volatile fields:
//
//   - Observed, what the latest reconcile saw: the Runner observes every
//     adapter again before each Step, so a stored observation only serves
//     the next Step when nothing else changed, and what it says that
//     matters (a hop applied, a side short of its traffic, a verdict) shows
//     in the fields that do count: Desired, Phase, the conditions, the
//     counters and the recorded instants;
//   - HealthCheckedAt, the instant of the latest observation counted;
//   - WeightAppliedAt and WeightPendingAt, the instants the latest weight
//     hop was first observed in force and last observed pending: the
//     interval counts from the first, but a state stored without them
//     counts from WeightChangedAt (or records it again from a later
//     observation within the interval), so its wait ends no later than
//     twice the interval after the hop (see State.WeightAppliedAt);
//   - Pace, what the rollout learned of how fast its sides become ready:
//     a state stored without it prepares capacity as soon as a wait begins
//     rather than just in time, which spends more surge, never less
//     safety;
//   - Message, the line about what the rollout waits for, which follows the
//     observation (the conditions carry the reasons).
//
// Store a state, or write an object's status, only when Changed says so:
// while nothing else changes nothing is written, and an upgrade writes its
// state about once per hop. A state stored without its latest volatile
// fields makes the same decisions once observed again, but for
// WeightAppliedAt and WeightPendingAt: without them an Incremental strategy
// counts its interval from WeightChangedAt, or from a later observation of
// the weight in force if one comes within the interval.
//
// A nil argument is a zero State.
func Changed(prev, next *State) bool {
	var a, b State
	if prev != nil {
		a = *prev
	}
	if next != nil {
		b = *next
	}
	for _, s := range []*State{&a, &b} {
		s.Observed, s.HealthCheckedAt, s.Message = Observation{}, metav1.MicroTime{}, ""
		s.WeightAppliedAt, s.WeightPendingAt = metav1.MicroTime{}, metav1.MicroTime{}
		s.Pace = Pace{}
	}
	return !reflect.DeepEqual(a, b)
}
