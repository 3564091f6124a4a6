package strategy

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Changed reports whether next differs from prev in anything a person or a
// decision needs, that is in anything but the volatile fields: the instants
// of the latest observation (Observed.At, HealthCheckedAt and the At of each
// gate verdict), which every reconcile moves. Store a state, or write an
// object's status, only when Changed says so: while nothing else changes
// nothing is written, and a state stored without its latest instants makes
// the same decisions (they only bound the clock from below and tell
// observations apart, and the next observation replaces them).
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
	if len(a.Observed.Gates) != len(b.Observed.Gates) {
		return true
	}
	for i := range a.Observed.Gates {
		ga, gb := a.Observed.Gates[i], b.Observed.Gates[i]
		if ga.Name != gb.Name || ga.Verdict != gb.Verdict || ga.Message != gb.Message {
			return true
		}
	}
	for _, s := range []*State{&a, &b} {
		s.Observed.At, s.HealthCheckedAt, s.Observed.Gates = metav1.MicroTime{}, metav1.MicroTime{}, nil
	}
	return !reflect.DeepEqual(a, b)
}
