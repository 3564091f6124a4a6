package strategy

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Changed reports whether next differs from prev in anything a person or a
// decision needs, that is in anything but the volatile fields:
//
//   - Observed, what the latest reconcile saw (the Runner observes again
//     before each Step; what matters of it shows in the fields that count);
//   - HealthCheckedAt, the instant of the latest observation counted;
//   - WeightAppliedAt and WeightPendingAt, when the latest weight hop was
//     first observed in force and last observed pending;
//   - Pace, what the rollout learned of how fast its sides become ready;
//   - Message, the line about what the rollout waits for.
//
// Store a state, or write an object's status, only when Changed says so:
// an upgrade then writes its state about once per hop. A state stored
// without its latest volatile fields makes the same decisions once observed
// again, but for two: without WeightAppliedAt and WeightPendingAt an
// Incremental strategy counts its interval from WeightChangedAt (or a later
// observation within the interval), so its wait ends no later than twice
// the interval after the hop; without Pace it prepares capacity as soon as
// a wait begins, which spends more surge, never less safety.
//
// A nil argument is a zero State. See docs/design/strategy.md.
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
