package strategy

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The DeepCopy functions below follow the shape controller-gen generates, so
// State embeds in a CRD status type whose own DeepCopy calls them.

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *GateResult) DeepCopyInto(out *GateResult) {
	*out = *in
	in.At.DeepCopyInto(&out.At)
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *Observation) DeepCopyInto(out *Observation) {
	*out = *in
	in.At.DeepCopyInto(&out.At)
	if in.Gates != nil {
		out.Gates = make([]GateResult, len(in.Gates))
		for i := range in.Gates {
			in.Gates[i].DeepCopyInto(&out.Gates[i])
		}
	}
	in.Extras.DeepCopyInto(&out.Extras)
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *Observation) DeepCopy() *Observation {
	if in == nil {
		return nil
	}
	out := new(Observation)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *AbortStatus) DeepCopyInto(out *AbortStatus) {
	*out = *in
	in.At.DeepCopyInto(&out.At)
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *AbortStatus) DeepCopy() *AbortStatus {
	if in == nil {
		return nil
	}
	out := new(AbortStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *State) DeepCopyInto(out *State) {
	*out = *in
	in.Observed.DeepCopyInto(&out.Observed)
	in.DesiredExtras.DeepCopyInto(&out.DesiredExtras)
	for _, t := range [...]struct{ from, to *metav1.MicroTime }{
		{&in.StartedAt, &out.StartedAt}, {&in.HopAt, &out.HopAt}, {&in.WeightChangedAt, &out.WeightChangedAt},
		{&in.WeightAppliedAt, &out.WeightAppliedAt}, {&in.WeightPendingAt, &out.WeightPendingAt},
		{&in.StepStartedAt, &out.StepStartedAt}, {&in.ReachedAt, &out.ReachedAt}, {&in.FinishedAt, &out.FinishedAt},
		{&in.PausedAt, &out.PausedAt}, {&in.HealthCheckedAt, &out.HealthCheckedAt}, {&in.LastCommandAt, &out.LastCommandAt},
		{&in.Pace.StableAskedAt, &out.Pace.StableAskedAt}, {&in.Pace.CanaryAskedAt, &out.Pace.CanaryAskedAt},
	} {
		t.from.DeepCopyInto(t.to)
	}
	if in.Aborted != nil {
		out.Aborted = in.Aborted.DeepCopy()
	}
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *State) DeepCopy() *State {
	if in == nil {
		return nil
	}
	out := new(State)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *Control) DeepCopyInto(out *Control) { *out = *in }

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *Control) DeepCopy() *Control {
	if in == nil {
		return nil
	}
	out := new(Control)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *Requests) DeepCopyInto(out *Requests) { *out = *in }

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *Requests) DeepCopy() *Requests {
	if in == nil {
		return nil
	}
	out := new(Requests)
	in.DeepCopyInto(out)
	return out
}
