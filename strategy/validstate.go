package strategy

import (
	"errors"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ErrInvalidState is matched (errors.Is) by every error of State.Validate.
var ErrInvalidState = errors.New("strategy: invalid state")

// StateError lists every problem found in a stored State, each with the path
// of its field (for example "desired.weight").
type StateError struct {
	Errors field.ErrorList
}

func (e *StateError) Error() string { return joinErrors("strategy: invalid state: ", e.Errors) }

// Is makes errors.Is(err, ErrInvalidState) true.
func (e *StateError) Is(target error) bool { return target == ErrInvalidState }

// Validate checks a state (typically one just loaded from storage) for
// strategies in the given capacity mode, and returns a *StateError naming
// every problem, or nil. Every Step runs the same check before anything else:
// an invalid state asks for nothing and reports the Degraded condition with
// reason InvalidState, so a corrupt state can never be applied.
//
// A state is invalid when it has an unknown phase or side, a percentage
// outside 0..100, a negative counter, or a desired allocation that breaks
// the invariants the engine keeps:
//   - managed capacity: the canary's capacity covers its weight and the
//     stable's covers the rest (an emergency walk back, in PhaseAborting,
//     may leave the stable short while it scales up);
//   - replicas: the weight mirrors the canary's capacity;
//   - PhaseCompleting has all traffic on the canary.
//
// An idle state (see Idle) and an unobserved one (see State.Unobserved, which
// must have no phase) are valid whatever their allocation: nothing is ever
// applied from them. A state that fails validation stays as it is; replace it
// (for example with the zero State and a Retarget) to recover.
func (s State) Validate(mode CapacityMode) error { return s.validate(moverFor(mode)) }

// validate is Validate for the mover of a capacity mode (nil for an unknown
// mode).
func (s *State) validate(m mover) error {
	var errs field.ErrorList
	s.valid(m, func(path string, value any, detail string) {
		errs = append(errs, field.Invalid(field.NewPath(path), value, detail))
	})
	if len(errs) == 0 {
		return nil
	}
	return &StateError{Errors: errs}
}

// check is valid for a capacity mode, mapped to its mover as Validate does.
func (s *State) check(mode CapacityMode, bad func(path string, value any, detail string)) bool {
	return s.valid(moverFor(mode), bad)
}

// valid reports whether s is valid for the mover of a capacity mode (the
// rules every mode shares, and the mover's own; nil has none); with bad set
// it reports every problem to it. With bad nil it allocates nothing.
func (s *State) valid(m mover, bad func(path string, value any, detail string)) bool {
	ok := true
	fail := func() bool { ok = false; return bad != nil }
	if !s.Phase.Known() && fail() {
		bad("phase", string(s.Phase), "unknown phase")
	}
	if s.StableSide != "" && s.StableSide != SideA && s.StableSide != SideB && fail() {
		bad("stableSide", string(s.StableSide), "must be A or B")
	}
	if s.StepIndex < 0 && fail() {
		bad("stepIndex", s.StepIndex, "must not be negative")
	}
	if s.UnhealthyCount < 0 && fail() {
		bad("unhealthyCount", s.UnhealthyCount, "must not be negative")
	}
	inRange := true
	pct := func(path string, v int32) {
		if v < 0 || v > 100 {
			inRange = false
			if fail() {
				bad(path, v, "must be between 0 and 100")
			}
		}
	}
	pct("desired.weight", s.Desired.Weight)
	pct("desired.stableCapacity", s.Desired.StableCapacity)
	pct("desired.canaryCapacity", s.Desired.CanaryCapacity)
	pct("observed.weight", s.Observed.Weight)
	pct("observed.stable.capacity", s.Observed.Stable.Capacity)
	pct("observed.stable.ready", s.Observed.Stable.Ready)
	pct("observed.canary.capacity", s.Observed.Canary.Capacity)
	pct("observed.canary.ready", s.Observed.Canary.Ready)
	pct("desiredExtras.mirrorPercent", s.DesiredExtras.MirrorPercent)
	pct("resumeWeight", s.ResumeWeight)
	if h := s.DesiredExtras.HeaderRoute; h != nil && h.ExpectedPercent != nil {
		pct("desiredExtras.headerRoute.expectedPercent", *h.ExpectedPercent)
	}
	if k := s.DesiredExtras.Sticky; k != nil {
		if !gridValid(k.Grid) && fail() {
			bad("desiredExtras.sticky.grid", k.Grid, "must be at most 16 ascending values in 1..100 ending in 100")
		}
		if k.Run == "" && fail() {
			bad("desiredExtras.sticky.run", k.Run, "must name the rollout's tickets")
		}
	}
	if !ok && bad == nil || !inRange {
		return false // the allocation is not worth checking further
	}
	if s.Unobserved && s.Phase != "" && fail() {
		bad("unobserved", s.Unobserved, "must be false once the rollout has a phase ("+string(s.Phase)+")")
	}
	if s.Idle() || s.Unobserved {
		return ok // nothing is ever applied from it
	}
	a := &s.Desired
	if s.Phase == PhaseCompleting && a.Weight != 100 && fail() {
		bad("desired.weight", a.Weight, "must be 100 in phase Completing")
	}
	if m == nil {
		return ok
	}
	emergency := s.Phase == PhaseAborting && s.Aborted != nil && s.Aborted.Emergency
	for rules, i := m.broken(*a, emergency), 0; rules != 0; rules, i = rules>>1, i+1 {
		if rules&1 != 0 && fail() {
			path, value, detail := m.breach(*a, i)
			bad(path, value, detail)
		}
	}
	return ok
}

// gridValid reports whether grid is a sticky ticket grid: ascending values
// in 1..100, the last 100, at most 16.
func gridValid(grid []int32) bool {
	if len(grid) == 0 || len(grid) > maxStickyGrid || grid[len(grid)-1] != 100 {
		return false
	}
	for i, g := range grid {
		if g < 1 || i > 0 && g <= grid[i-1] {
			return false
		}
	}
	return true
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }
