package strategy

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Strategy decides the next hop of a rollout. Implementations are pure:
// Step does no I/O, reads no clock but now, does not modify s (its
// Conditions slice included) and returns deep-equal decisions for equal
// inputs. Invalid options never panic: Step returns the state unchanged but
// for a Degraded condition naming every problem.
//
// The interface is open: a strategy of your own (often one that builds an
// Incremental or a Canary from its own parameters and delegates Step to it,
// see the Example) works with the Runner and Plan exactly as the ones here.
//
// Every strategy only picks a target weight; one capacity-safe mover walks
// there in hops that keep rules 1 to 5 of the package's invariants on
// observed values: a weight hop goes no further than the receiving side's
// observed ready capacity, and is asked for only once the previous one is
// observed applied. Capacity is spent only while it is needed: the stable
// side shrinks to its traffic once a weight is in force, and the canary
// grows during a wait, just in time for the next weight (State.Pace).
// Moving down (an abort, a rollback) is the same walk with the roles
// swapped; a walk back does not wait for the data plane to accept its hops,
// and AbortEmergency moves all traffic at once (the one exception to rule
// 1). Repairs of hops left undone are checked against the world as observed
// now, never trusted because they were once recorded.
//
// Step reports what holds a rollout up: see DefaultProgressDeadline for
// deadlines, failing adapters and lost readiness, and Decision for when to
// step again. See docs/design/strategy.md for the mover in full.
type Strategy interface {
	Step(s State, now time.Time) Decision
	// Validate reports every problem with the strategy (an *InvalidError
	// for the ones here), or nil.
	Validate() error
	// Shared returns the options every strategy shares. The Runner checks
	// its adapters against Shared().Capacity, polls at its PollInterval and
	// validates stored states for its capacity mode; Plan starts a fixed
	// capacity rollout with both sides provisioned.
	Shared() Options
	// Gates names every gate Step may wait on (see Observation.Gates), in
	// step order, for Plan's verdicts and a caller's Analyzer; nil if none.
	Gates() []string
}

// Incremental raises the canary weight by at most StepPercent at most once per
// Interval. Capacity follows the weight one step at a time: once a weight is
// observed in force the stable side shrinks to the traffic it carries, and
// the canary grows to what the next weight needs just before the interval
// ends (State.Pace times it), within MaxSurgePercent. With StepPercent 10
// the capacities go (100,0) -> (100,10) -> weight 10 -> (90,10) -> (90,20)
// -> weight 20 -> (80,20) -> ... -> (0,100): one step above full, for about
// a ready delay and a data-plane lag per step, whatever MaxSurgePercent
// allows.
//
// The zero value is invalid (StepPercent, Interval and MaxSurgePercent must
// be set, except MaxSurgePercent in the Fixed capacity mode). Safe for
// concurrent use once built: Step does not modify it.
//
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="(has(self.capacity) && self.capacity == 'Fixed') || !has(self.maxSurgePercent) || self.maxSurgePercent < 1 || self.maxSurgePercent >= self.stepPercent",message="must not exceed maxSurgePercent (when that is set) unless capacity is Fixed: traffic could never catch up with capacity",fieldPath=".stepPercent",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="(has(self.capacity) && self.capacity in ['Fixed', 'Replicas']) || (has(self.maxSurgePercent) && self.maxSurgePercent >= 1)",message="must be at least 1 in the managed capacity mode",fieldPath=".maxSurgePercent",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || self.capacity != 'Replicas' || (has(self.maxSurgePercent) ? self.maxSurgePercent : 0) + (has(self.maxUnavailablePercent) ? self.maxUnavailablePercent : 0) >= 1",message="maxSurgePercent + maxUnavailablePercent must be at least 1 or replicas can never move",fieldPath=".maxUnavailablePercent",reason="FieldValueInvalid"
type Incremental struct {
	// The most the canary weight rises per interval, in percent.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	StepPercent int32 `json:"stepPercent"`
	// The least time between two weight hops ("1m30s"), counted from the
	// instant the earlier hop's weight was first observed in force
	// (status weightAppliedAt), or from the hop itself when that was not
	// seen within the interval.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive",reason="FieldValueInvalid"
	Interval metav1.Duration `json:"interval"`
	// The most capacity provisioned beyond 100 percent while traffic
	// moves (a bound: a rollout spends about one step of it); at least
	// stepPercent unless capacity is Fixed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxSurgePercent int32 `json:"maxSurgePercent"`
	Options         `json:",inline"`
}

// Validate reports every problem with the options at once (an
// *InvalidError listing field paths), or nil.
func (in Incremental) Validate() error { return toError(in.validate()) }

func (in *Incremental) validate() field.ErrorList {
	if in.lookValid() {
		return nil // the common case, without allocating
	}
	return in.validateAll()
}

// lookValid is the allocation-free fast path of validateAll: true only if
// validateAll finds nothing, and for every such Incremental without
// SessionAffinity (fastpath_property_test.go holds both).
func (in *Incremental) lookValid() bool {
	return in.StepPercent >= 1 && in.StepPercent <= 100 && in.Interval.Duration > 0 &&
		in.MaxSurgePercent >= 0 && in.MaxSurgePercent <= 100 &&
		// A step may not outrun the surge, but in the Fixed mode, and with
		// no surge at all (the Replicas mode, where MaxUnavailablePercent
		// carries the move; optionsLookValid refuses 0 where it is not).
		(in.MaxSurgePercent >= in.StepPercent || in.MaxSurgePercent == 0 || in.Capacity == CapacityFixed) &&
		optionsLookValid(&in.Options, in.MaxSurgePercent)
}

// validateAll reports every problem with the options.
func (in *Incremental) validateAll() field.ErrorList {
	var errs field.ErrorList
	if e := validPercent(field.NewPath("incremental", "stepPercent"), in.StepPercent, 1); e != nil {
		errs = append(errs, e)
	}
	if in.Interval.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("incremental", "interval"), in.Interval.Duration.String(), "must be positive"))
	}
	errs = append(errs, validateSurge("incremental", in.MaxSurgePercent, in.Capacity)...)
	if in.Capacity != CapacityFixed && in.MaxSurgePercent >= 1 && in.MaxSurgePercent <= 100 &&
		in.StepPercent >= 1 && in.StepPercent <= 100 && in.StepPercent > in.MaxSurgePercent {
		errs = append(errs, field.Invalid(field.NewPath("incremental", "stepPercent"), in.StepPercent,
			"must not exceed maxSurgePercent ("+strconv.Itoa(int(in.MaxSurgePercent))+"): traffic could never catch up with capacity"))
	}
	if in.SessionAffinity != nil && in.StepPercent >= 1 && in.StepPercent <= 100 {
		if grid, ok := stickyGrid(in.weights(), 0); !ok {
			errs = append(errs, field.Invalid(field.NewPath("incremental", "stepPercent"), in.StepPercent,
				"sessionAffinity allows at most 16 weights: a step of at least 7 ("+strconv.Itoa(len(grid))+" weights now)"))
		}
	}
	return append(errs, in.Options.validate("incremental", in.MaxSurgePercent)...)
}

// weights are the weights an Incremental rollout walks through: multiples
// of StepPercent, and 100.
func (in *Incremental) weights() []int32 {
	var ws []int32
	for w := in.StepPercent; w < 100 && in.StepPercent > 0; w += in.StepPercent {
		ws = append(ws, w)
	}
	return append(ws, 100)
}

func validateSurge(root string, surge int32, mode CapacityMode) field.ErrorList {
	min := int32(1)
	if mode == CapacityFixed || mode == CapacityReplicas {
		min = 0 // fixed: nothing surges; replicas: MaxUnavailable may carry the move
	}
	if e := validPercent(field.NewPath(root, "maxSurgePercent"), surge, min); e != nil {
		return field.ErrorList{e}
	}
	return nil
}

// optionsLookValid is the allocation-free fast path of Options.validate
// together with validateSurge's lower bound for the capacity mode (the
// callers check its upper bound, or pass 100): true only if
// Options.validate finds nothing, and, for surge in 0..100 and no
// SessionAffinity, exactly when neither finds anything
// (fastpath_property_test.go holds both).
func optionsLookValid(o *Options, surge int32) bool {
	return o.SessionAffinity == nil && (o.Capacity == CapacityManaged && surge >= 1 || o.Capacity == CapacityFixed ||
		o.Capacity == CapacityReplicas && surge+o.MaxUnavailablePercent >= 1) &&
		o.MaxUnavailablePercent >= 0 && o.MaxUnavailablePercent <= 100 &&
		(o.MaxUnavailablePercent == 0 || o.Capacity == CapacityReplicas) &&
		(o.AbortRamp == AbortImmediate || o.AbortRamp == AbortGradual ||
			o.AbortRamp == AbortEmergency && o.Capacity != CapacityReplicas) &&
		o.UnhealthyThreshold >= 0 &&
		(o.UnhealthyAction == UnhealthyAbort || o.UnhealthyAction == UnhealthyPause) &&
		o.ProgressDeadline.Duration >= 0 &&
		(!o.NoProgressDeadline || !o.AbortOnProgressDeadline && o.ProgressDeadline.Duration == 0) &&
		o.ScaleDownDelay.Duration >= 0 &&
		(o.PollInterval.Duration == 0 || o.PollInterval.Duration >= MinPollInterval) &&
		(o.InitialPollInterval.Duration == 0 ||
			o.InitialPollInterval.Duration >= MinPollInterval && o.InitialPollInterval.Duration <= o.pollInterval())
}

// Step decides the next hop. See Strategy.
func (in Incremental) Step(s State, now time.Time) Decision {
	e := engine{
		opts:     in.Options,
		mode:     moverFor(in.Capacity),
		surge:    in.MaxSurgePercent,
		stepPct:  in.StepPercent,
		interval: in.Interval.Duration,
	}
	if errs := in.validate(); errs != nil {
		return e.invalid(s, now, toError(errs))
	}
	if in.SessionAffinity != nil {
		e.affinity = in.SessionAffinity
		e.grid, _ = stickyGrid(in.weights(), 0)
		e.mask = maskOf(e.grid)
	}
	return e.step(s, now)
}

// BlueGreen provisions the whole canary next to the stable side, moves all
// traffic in one hop, then scales the stable side down: Incremental with
// StepPercent 100 and MaxSurgePercent 100. The zero value is valid.
//
// +kubebuilder:object:generate=true
type BlueGreen struct {
	Options `json:",inline"`
}

// Validate reports every problem with the options at once, or nil.
func (b BlueGreen) Validate() error { return toError(b.validate()) }

func (b *BlueGreen) validate() field.ErrorList {
	if optionsLookValid(&b.Options, 100) {
		return nil // the common case, without allocating
	}
	return b.validateAll()
}

// validateAll reports every problem with the options.
func (b *BlueGreen) validateAll() field.ErrorList { return b.Options.validate("blueGreen", 100) }

// Step decides the next hop. See Strategy.
func (b BlueGreen) Step(s State, now time.Time) Decision {
	e := engine{opts: b.Options, mode: moverFor(b.Capacity), surge: 100, stepPct: 100}
	if b.SessionAffinity != nil {
		e.affinity, e.grid, e.mask = b.SessionAffinity, []int32{100}, maskOf([]int32{100})
	}
	if errs := b.validate(); errs != nil {
		return e.invalid(s, now, toError(errs))
	}
	return e.step(s, now)
}

// CanaryStep is one step of a Canary strategy. Exactly one field is set;
// build steps with SetWeight, Pause, PauseUntilResumed, Gate, SetHeaderRoute
// and SetMirror.
//
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="(has(self.setWeight) ? 1 : 0) + (has(self.pause) ? 1 : 0) + (has(self.gate) ? 1 : 0) + (has(self.setHeaderRoute) ? 1 : 0) + (has(self.setMirror) ? 1 : 0) == 1",message="exactly one of setWeight, pause, gate, setHeaderRoute and setMirror must be set",reason="FieldValueInvalid"
type CanaryStep struct {
	// Walks traffic (and capacity, safely) to this canary weight.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SetWeight *int32 `json:"setWeight,omitempty"`
	// Waits. With a duration it is timed from the moment the previous step
	// was observed complete; without one it waits for a resume.
	// +optional
	Pause *PauseStep `json:"pause,omitempty"`
	// Waits for a verdict on the named gate: pass -> next step, fail ->
	// abort, inconclusive -> pause until a resume.
	// +optional
	Gate *GateStep `json:"gate,omitempty"`
	// Sends the requests that match to the canary from this step on (no
	// matches: stops). A hop like a weight's: applied only once the
	// canary's ready capacity covers the load (see HeaderRoute), observed
	// before the next step, cleared by an abort and at completion.
	// +optional
	SetHeaderRoute *HeaderRoute `json:"setHeaderRoute,omitempty"`
	// Copies a share of the stable side's requests to the canary from this
	// step on (0: stops), under the same rules.
	// +optional
	SetMirror *MirrorStep `json:"setMirror,omitempty"`
}

// PauseStep is a pause; a nil Duration waits until Resume.
//
// +kubebuilder:object:generate=true
type PauseStep struct {
	// Duration of a timed pause ("30s"); unset waits for a resume.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive; leave it unset for a pause without end",reason="FieldValueInvalid"
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// GateStep waits for the verdict of the named gate (see Observation.Gates).
//
// +kubebuilder:object:generate=true
type GateStep struct {
	// Name of the gate whose verdict the step waits for.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SetWeight returns a step that walks to canary weight w.
func SetWeight(w int32) CanaryStep { return CanaryStep{SetWeight: &w} }

// Pause returns a step that waits d from the moment the previous step was
// observed complete.
func Pause(d time.Duration) CanaryStep {
	return CanaryStep{Pause: &PauseStep{Duration: &metav1.Duration{Duration: d}}}
}

// PauseUntilResumed returns a step that waits for the Resume command.
func PauseUntilResumed() CanaryStep { return CanaryStep{Pause: &PauseStep{}} }

// Gate returns a step that waits for a verdict on the named gate.
func Gate(name string) CanaryStep { return CanaryStep{Gate: &GateStep{Name: name}} }

// Canary walks through explicit steps; a final implicit step promotes to
// weight 100. Weights may go up or down between steps. MaxSurgePercent bounds
// the extra capacity provisioned while traffic moves (the canary side is
// provisioned up to the step's weight, no more). During a timed pause
// followed by a SetWeight (or the end) the stable side shrinks to its
// traffic at once and the canary grows to the next weight's need just
// before the pause ends (State.Pace times it); during a pause until
// resumed, or a gate, the stable side shrinks and nothing is prepared,
// since the wait's end cannot be timed.
//
// The zero value (no steps) is valid in the Fixed capacity mode and promotes
// straight to 100; otherwise MaxSurgePercent must be set. Safe for concurrent
// use once built.
//
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="(has(self.capacity) && self.capacity in ['Fixed', 'Replicas']) || (has(self.maxSurgePercent) && self.maxSurgePercent >= 1)",message="must be at least 1 in the managed capacity mode",fieldPath=".maxSurgePercent",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || self.capacity != 'Replicas' || (has(self.maxSurgePercent) ? self.maxSurgePercent : 0) + (has(self.maxUnavailablePercent) ? self.maxUnavailablePercent : 0) >= 1",message="maxSurgePercent + maxUnavailablePercent must be at least 1 or replicas can never move",fieldPath=".maxUnavailablePercent",reason="FieldValueInvalid"
type Canary struct {
	// Walked in order; an implicit last step promotes to 100. At most 64.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Steps []CanaryStep `json:"steps"`
	// The capacity provisioned beyond 100 percent while traffic moves; at
	// least 1 in the managed capacity mode.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxSurgePercent int32 `json:"maxSurgePercent"`
	Options         `json:",inline"`
}

// Validate reports every problem with the options at once, or nil.
func (c Canary) Validate() error { return toError(c.validate()) }

// stepsLookValid is the allocation-free check of the steps in lookValid;
// it leaves header route and mirror steps to validateAll.
func (c *Canary) stepsLookValid() bool {
	if len(c.Steps) > 64 {
		return false
	}
	for i := range c.Steps {
		st := &c.Steps[i]
		if st.SetHeaderRoute != nil || st.SetMirror != nil {
			return false // checked in full by validateAll
		}
		switch {
		case st.SetWeight != nil && st.Pause == nil && st.Gate == nil:
			if *st.SetWeight < 0 || *st.SetWeight > 100 {
				return false
			}
		case st.SetWeight == nil && st.Pause != nil && st.Gate == nil:
			if st.Pause.Duration != nil && st.Pause.Duration.Duration <= 0 {
				return false
			}
		case st.SetWeight == nil && st.Pause == nil && st.Gate != nil:
			if st.Gate.Name == "" {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func (c *Canary) validate() field.ErrorList {
	if c.lookValid() {
		return nil // the common case, without allocating
	}
	return c.validateAll()
}

// lookValid is the allocation-free fast path of validateAll: true only if
// validateAll finds nothing, and for every such Canary without
// SessionAffinity, header route or mirror steps (fastpath_property_test.go
// holds both).
func (c *Canary) lookValid() bool {
	return c.stepsLookValid() && c.MaxSurgePercent >= 0 && c.MaxSurgePercent <= 100 &&
		optionsLookValid(&c.Options, c.MaxSurgePercent)
}

// validateAll reports every problem with the options.
func (c *Canary) validateAll() field.ErrorList {
	var errs field.ErrorList
	for i := range c.Steps {
		st := &c.Steps[i]
		p := field.NewPath("canary", "steps").Index(i)
		n := 0
		if st.SetWeight != nil {
			n++
			if e := validPercent(p.Child("setWeight"), *st.SetWeight, 0); e != nil {
				errs = append(errs, e)
			}
		}
		if st.Pause != nil {
			n++
			if st.Pause.Duration != nil && st.Pause.Duration.Duration <= 0 {
				errs = append(errs, field.Invalid(p.Child("pause", "duration"), st.Pause.Duration.Duration.String(),
					"must be positive; use PauseUntilResumed for a pause without end"))
			}
		}
		if st.Gate != nil {
			n++
			if st.Gate.Name == "" {
				errs = append(errs, field.Required(p.Child("gate", "name"), "a gate needs a name"))
			}
		}
		if st.SetHeaderRoute != nil {
			n++
			errs = append(errs, st.SetHeaderRoute.validate(p.Child("setHeaderRoute"))...)
		}
		if st.SetMirror != nil {
			n++
			if e := validPercent(p.Child("setMirror", "percent"), st.SetMirror.Percent, 0); e != nil {
				errs = append(errs, e)
			}
		}
		if (st.SetHeaderRoute != nil || st.SetMirror != nil) && c.Capacity == CapacityReplicas {
			errs = append(errs, field.Invalid(p, "set", "needs a traffic router; the Replicas mode has none"))
		}
		if n != 1 {
			errs = append(errs, field.Invalid(p, n, "exactly one of setWeight, pause, gate, setHeaderRoute and setMirror must be set"))
		}
	}
	if len(c.Steps) > 64 {
		errs = append(errs, field.TooMany(field.NewPath("canary", "steps"), len(c.Steps), 64))
	}
	errs = append(errs, c.validateLoad()...)
	if c.SessionAffinity != nil {
		if grid, ok := stickyGrid(c.weights(), c.gridGap()); !ok {
			errs = append(errs, field.Invalid(field.NewPath("canary", "sessionAffinity"), len(grid),
				"allows at most 16 ticket values: the distinct step weights, 100, and in the managed capacity mode one every "+
					itoa(c.gridGap())+" between them (maxSurgePercent less the load header routes and mirrors add at weight 0)"))
		}
	}
	errs = append(errs, validateSurge("canary", c.MaxSurgePercent, c.Capacity)...)
	return append(errs, c.Options.validate("canary", c.MaxSurgePercent)...)
}

// Step decides the next hop. See Strategy.
func (c Canary) Step(s State, now time.Time) Decision {
	e := engine{opts: c.Options, mode: moverFor(c.Capacity), surge: c.MaxSurgePercent, steps: c.Steps, canary: true}
	if errs := c.validate(); errs != nil {
		return e.invalid(s, now, toError(errs))
	}
	if c.SessionAffinity != nil {
		e.affinity = c.SessionAffinity
		e.grid, _ = stickyGrid(c.weights(), c.gridGap())
		e.mask = maskOf(e.grid)
	}
	return e.step(s, now)
}

// stepsHash identifies a list of steps, written into buf without allocating.
func stepsHash(steps []CanaryStep, buf *[16]byte) []byte {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	for i := range steps {
		st := &steps[i]
		switch {
		case st.SetWeight != nil:
			mix(1)
			mix(uint64(*st.SetWeight))
		case st.Pause != nil:
			mix(2)
			if st.Pause.Duration != nil {
				mix(uint64(st.Pause.Duration.Duration))
			} else {
				mix(^uint64(0))
			}
		case st.Gate != nil:
			mix(3)
			for j := 0; j < len(st.Gate.Name); j++ {
				h ^= uint64(st.Gate.Name[j])
				h *= prime
			}
		case st.SetHeaderRoute != nil:
			mix(4)
			mix(uint64(st.SetHeaderRoute.share()))
			for _, m := range st.SetHeaderRoute.Matches {
				for _, str := range [...]string{string(m.Type), m.Name, m.Value} {
					mix(uint64(len(str)))
					for j := 0; j < len(str); j++ {
						h ^= uint64(str[j])
						h *= prime
					}
				}
			}
		case st.SetMirror != nil:
			mix(5)
			mix(uint64(st.SetMirror.Percent))
		}
	}
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		buf[i] = hex[h&0xf]
		h >>= 4
	}
	return buf[:]
}

// validateLoad checks, in the managed mode, that the load a header route
// or a mirror puts on the canary fits what the canary may be provisioned
// with at every step: the step's weight plus MaxSurgePercent, since the
// stable side keeps the capacity its own traffic needs; and that the
// weight can still rise from there, its next value (the next ticket value
// with sticky sessions) fitting the same budget before the stable side
// shrinks. A step beyond it could only wait until its progress deadline.
func (c *Canary) validateLoad() field.ErrorList {
	if c.Capacity != CapacityManaged {
		return nil
	}
	var grid []int32
	if c.SessionAffinity != nil {
		grid, _ = stickyGrid(c.weights(), c.gridGap())
	}
	var errs field.ErrorList
	var x TrafficExtras
	w := int32(0)
	for i := range c.Steps {
		st := &c.Steps[i]
		switch {
		case st.SetWeight != nil:
			w = min(max(*st.SetWeight, 0), 100)
		case st.SetHeaderRoute != nil:
			x.HeaderRoute = st.SetHeaderRoute
		case st.SetMirror != nil:
			x.MirrorPercent = st.SetMirror.Percent
		default:
			continue
		}
		budget := w + c.MaxSurgePercent
		if l := x.CanaryLoad(w); l > budget {
			errs = append(errs, field.Invalid(field.NewPath("canary", "steps").Index(i), x.String(),
				"puts a load of "+itoa(l)+" on the canary at weight "+itoa(w)+", above what it may be provisioned with (the weight plus maxSurgePercent, "+itoa(min(100, budget))+")"))
			return errs // the steps after it follow from it
		}
		if w == 100 || x.IsZero() {
			continue
		}
		next := w + 1
		for _, g := range grid {
			if g > w {
				next = g
				break
			}
		}
		if l := x.CanaryLoad(next); l > budget {
			errs = append(errs, field.Invalid(field.NewPath("canary", "steps").Index(i), x.String(),
				"leaves the weight no room to rise from "+itoa(w)+": weight "+itoa(next)+" would put a load of "+itoa(l)+
					" on the canary, above the weight plus maxSurgePercent ("+itoa(min(100, budget))+"); raise maxSurgePercent or lower the extras' share"))
			return errs
		}
	}
	return errs
}

// gridGap is the widest gap between two ticket values: in the managed mode,
// MaxSurgePercent less the most load a header route or mirror of the steps
// adds at weight 0 (a weight hop reaches no further while capacity moves
// within the surge budget); none in the fixed mode.
func (c *Canary) gridGap() int32 {
	if c.Capacity != CapacityManaged {
		return 0
	}
	var x TrafficExtras
	over := int32(0)
	for i := range c.Steps {
		if h := c.Steps[i].SetHeaderRoute; h != nil {
			x.HeaderRoute = h
		}
		if m := c.Steps[i].SetMirror; m != nil {
			x.MirrorPercent = m.Percent
		}
		over = max(over, x.CanaryLoad(0))
	}
	return max(c.MaxSurgePercent-over, 1)
}

// weights are the weights the steps name.
func (c *Canary) weights() []int32 {
	ws := make([]int32, 0, len(c.Steps))
	for i := range c.Steps {
		if w := c.Steps[i].SetWeight; w != nil {
			ws = append(ws, *w)
		}
	}
	return ws
}

// Shared returns the options every strategy shares. See Strategy.
func (in Incremental) Shared() Options { return in.Options }

// Shared returns the options every strategy shares. See Strategy.
func (b BlueGreen) Shared() Options { return b.Options }

// Shared returns the options every strategy shares. See Strategy.
func (c Canary) Shared() Options { return c.Options }

// Gates returns nil: an Incremental rollout waits on no gate.
func (in Incremental) Gates() []string { return nil }

// Gates returns nil: a BlueGreen rollout waits on no gate.
func (b BlueGreen) Gates() []string { return nil }

// Gates names the gates of the Gate steps, in step order.
func (c Canary) Gates() []string {
	var names []string
	for _, st := range c.Steps {
		if st.Gate != nil {
			names = append(names, st.Gate.Name)
		}
	}
	return names
}
