package v1alpha1

import "github.com/upshift-dev/upshift/strategy"

// TEMPORARY: hand-written DeepCopy for the wrappers of the strategy types,
// which have none yet. controller-gen generates everything else
// (zz_generated.deepcopy.go). Once the strategy types carry DeepCopy, drop
// this file and the wrappers, and let ReleaseStrategy hold the strategy
// types directly.

// DeepCopyInto copies the receiver into out.
func (in *IncrementalStrategy) DeepCopyInto(out *IncrementalStrategy) {
	*out = *in // value fields only
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *IncrementalStrategy) DeepCopy() *IncrementalStrategy {
	if in == nil {
		return nil
	}
	out := new(IncrementalStrategy)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out.
func (in *BlueGreenStrategy) DeepCopyInto(out *BlueGreenStrategy) {
	*out = *in // value fields only
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *BlueGreenStrategy) DeepCopy() *BlueGreenStrategy {
	if in == nil {
		return nil
	}
	out := new(BlueGreenStrategy)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out, the steps' pointers
// included.
func (in *CanaryStrategy) DeepCopyInto(out *CanaryStrategy) {
	*out = *in
	if in.Steps == nil {
		return
	}
	out.Steps = make([]strategy.CanaryStep, len(in.Steps))
	for i, st := range in.Steps {
		if st.SetWeight != nil {
			w := *st.SetWeight
			st.SetWeight = &w
		}
		if st.Pause != nil {
			p := *st.Pause
			if p.Duration != nil {
				d := *p.Duration
				p.Duration = &d
			}
			st.Pause = &p
		}
		if st.Gate != nil {
			g := *st.Gate
			st.Gate = &g
		}
		out.Steps[i] = st
	}
}

// DeepCopy returns a deep copy of the receiver, nil for nil.
func (in *CanaryStrategy) DeepCopy() *CanaryStrategy {
	if in == nil {
		return nil
	}
	out := new(CanaryStrategy)
	in.DeepCopyInto(out)
	return out
}
