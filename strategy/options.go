package strategy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CapacityMode says how capacity moves during a rollout.
//
// CapacityManaged has a capacity setter per side. CapacityFixed keeps both
// sides provisioned and moves only weights: report each side as Capacity
// 100, Ready 100, Settled. With revisions observed, a side whose revision has
// not rolled out (Updated false) is trusted with no more traffic than the
// route sends it, since its pods may be restarting, so neither a step nor a
// walk back moves traffic onto it until it has. CapacityReplicas has no
// traffic router: traffic follows ready replicas, bounded by
// MaxSurgePercent and MaxUnavailablePercent like a rolling update; a side
// counts with its ready capacity only once it has settled at what was asked,
// so a side still moving never lets the other shrink beyond
// MaxUnavailablePercent.
//
// +kubebuilder:validation:Enum="";Fixed;Replicas
type CapacityMode string

const (
	// CapacityManaged (the zero value): a CapacitySetter per side; traffic
	// and capacity move together within the surge budget.
	CapacityManaged CapacityMode = ""
	// CapacityFixed: both sides stay as provisioned; only weights move,
	// still bounded by what each side reports ready.
	CapacityFixed CapacityMode = "Fixed"
	// CapacityReplicas: no traffic router; traffic follows ready replicas.
	// Capacities move like a Deployment rolling update, bounded by
	// MaxSurgePercent and Options.MaxUnavailablePercent. Decision.Weight is
	// never set; State.Desired.Weight holds the canary's capacity target.
	CapacityReplicas CapacityMode = "Replicas"
)

// AbortRamp chooses how an abort walks traffic back to the stable side.
// +kubebuilder:validation:Enum="";Gradual;Emergency
type AbortRamp string

const (
	// AbortImmediate (the zero value): as few hops as capacity allows, each
	// as soon as the stable side is ready for it.
	AbortImmediate AbortRamp = ""
	// AbortGradual: the strategy's own hops in reverse (Incremental: at most
	// StepPercent per Interval; Canary: through the earlier step weights),
	// as AbortImmediate once the canary has lost readiness under its
	// traffic (its share of the requests is failing).
	AbortGradual AbortRamp = "Gradual"
	// AbortEmergency: all traffic to the stable side at once while it scales
	// up; for a canary that is failing requests. It is the one documented
	// exception to "traffic never exceeds ready capacity".
	AbortEmergency AbortRamp = "Emergency"
)

// UnhealthyAction is what happens after UnhealthyThreshold unhealthy
// observations.
// +kubebuilder:validation:Enum="";Pause
type UnhealthyAction string

const (
	UnhealthyAbort UnhealthyAction = "" // the zero value
	UnhealthyPause UnhealthyAction = "Pause"
)

// DefaultPollInterval is used when Options.PollInterval is zero.
const DefaultPollInterval = 2 * time.Second

// DefaultInitialPollInterval is used when Options.InitialPollInterval is
// zero (or PollInterval, when that is shorter).
const DefaultInitialPollInterval = 100 * time.Millisecond

// MinPollInterval is the shortest PollInterval that validates: a shorter one
// would have a Runner read its adapters thousands of times a second.
const MinPollInterval = 100 * time.Millisecond

// DefaultProgressDeadline is used when Options.ProgressDeadline is zero, as a
// Kubernetes Deployment's progressDeadlineSeconds defaults to ten minutes: with
// default options no rollout waits for the world in silence.
//
// The progress deadline (Options.NoProgressDeadline turns it off) bounds
// every wait for the world (a hop not observed applied, ready capacity that
// does not come, a route no gateway reports on, a gate verdict that never
// arrives, a deploy that never rolls out), counted from the latest of the
// last hop, the start of the rollout, the start of the current step and the
// last command. When it passes the rollout reports Degraded
// (ReasonProgressDeadlineExceeded), and aborts if
// Options.AbortOnProgressDeadline. Pauses and step intervals are exempt; a
// hold on inconclusive health counts from when the rollout would have moved
// on without it. Adapters that fail (Observation.Error) report Degraded
// (ReasonObservationFailed) at once, ask for nothing, and count toward the
// deadline from their first failure (State.FailingSince), pauses included.
//
// Readiness lost under traffic (a side, not settled, whose observed ready
// capacity is below the traffic the route sends it) counts as unhealthy on
// the canary (ReasonCanaryReadinessLost) and holds progress on the stable
// side with Degraded (ReasonStableReadinessLost) until it recovers, in the
// managed and fixed modes. See docs/design/strategy.md for the details.
const DefaultProgressDeadline = 10 * time.Minute

// Options are the knobs every strategy shares. The zero value is valid:
// managed capacity, immediate aborts, a progress deadline of
// DefaultProgressDeadline that sets Degraded (without aborting), abort after
// three unhealthy observations, poll every DefaultPollInterval.
//
// Incremental, Canary and BlueGreen embed in a custom resource's spec as
// they are, a pointer field each: their durations are metav1.Duration,
// strings like "1m30s" (Pause still takes a time.Duration), each has a
// DeepCopy generated by controller-gen, and the markers below make the API
// server reject most of what Validate rejects, naming the field as Validate
// does ("spec.incremental.stepPercent"). Only Validate (and Step, which
// validates first) enforces every rule, also on a strategy built in Go or
// stored before the CRD had these rules; the schema may word a bad duration
// differently and report fewer problems at once. The e2e/crd tests hold the
// two to the same answers on a real API server. See docs/design/strategy.md
// for an example spec and the rules the schema carries.
//
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="!has(self.maxUnavailablePercent) || self.maxUnavailablePercent == 0 || (has(self.capacity) && self.capacity == 'Replicas')",message="only applies to the Replicas capacity mode",fieldPath=".maxUnavailablePercent",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.abortRamp) || self.abortRamp != 'Emergency' || !has(self.capacity) || self.capacity != 'Replicas'",message="Emergency needs a traffic router; the Replicas mode has none",fieldPath=".abortRamp",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.abortOnProgressDeadline) || !self.abortOnProgressDeadline || !has(self.noProgressDeadline) || !self.noProgressDeadline",message="needs a progress deadline; noProgressDeadline disables it",fieldPath=".abortOnProgressDeadline",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.noProgressDeadline) || !self.noProgressDeadline || !has(self.progressDeadline) || duration(self.progressDeadline) == duration('0s')",message="must be 0 when noProgressDeadline is set",fieldPath=".progressDeadline",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.initialPollInterval) || duration(self.initialPollInterval) <= (has(self.pollInterval) && duration(self.pollInterval) > duration('0s') ? duration(self.pollInterval) : duration('2s'))",message="must not exceed pollInterval (2s when unset)",fieldPath=".initialPollInterval",reason="FieldValueInvalid"
type Options struct {
	// The capacity mode: empty (managed), Fixed or Replicas.
	// +optional
	Capacity CapacityMode `json:"capacity,omitempty"`
	// How far the total ready capacity may dip below 100 percent while
	// replicas move (the Replicas capacity mode only).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxUnavailablePercent int32 `json:"maxUnavailablePercent,omitempty"`
	// How an abort walks traffic back: empty (immediate), Gradual or
	// Emergency.
	// +optional
	AbortRamp AbortRamp `json:"abortRamp,omitempty"`
	// The number of consecutive unhealthy observations that trigger
	// unhealthyAction; 0 means 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UnhealthyThreshold int32 `json:"unhealthyThreshold,omitempty"`
	// What unhealthyThreshold unhealthy observations do: empty (abort) or
	// Pause.
	// +optional
	UnhealthyAction UnhealthyAction `json:"unhealthyAction,omitempty"`
	// Bounds every wait for the world: for a hop to be
	// observed applied, for ready capacity, for a gate verdict, and for
	// adapters that keep failing to answer. A wait counts from the latest of
	// the last hop, the start of the rollout, the start of the current step
	// and the last command; failing adapters count from their first failure.
	// When it passes, the Degraded condition is set, and the rollout aborts
	// with abortOnProgressDeadline. Pauses (timed or waiting for a resume)
	// and step intervals are exempt. 0 means the default, 10m
	// (DefaultProgressDeadline); set noProgressDeadline to disable it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative",reason="FieldValueInvalid"
	ProgressDeadline metav1.Duration `json:"progressDeadline,omitzero"`
	// Abort the rollout when the progress deadline passes, rather than
	// only report Degraded.
	// +optional
	AbortOnProgressDeadline bool `json:"abortOnProgressDeadline,omitempty"`
	// Disables the progress deadline: a rollout may then wait for the
	// world without end, reported only by its message.
	// +optional
	NoProgressDeadline bool `json:"noProgressDeadline,omitempty"`
	// How long the stable side keeps its capacity after all traffic is
	// observed on the canary.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative",reason="FieldValueInvalid"
	ScaleDownDelay metav1.Duration `json:"scaleDownDelay,omitzero"`
	// The requeue while waiting for an observation; 0 means the default,
	// 2s (DefaultPollInterval), and a set value must be at least 100ms
	// (MinPollInterval).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('100ms')",message="must be 0 (the default) or at least 100ms",reason="FieldValueInvalid"
	PollInterval metav1.Duration `json:"pollInterval,omitzero"`
	// The first requeue while waiting for the world to show a hop (or to
	// act after a command or the start of a step): each later requeue
	// waits as long as it has been since then, so polls double, up to
	// pollInterval. A caller that is notified of every change of what the
	// adapters observe (Decision.WatchedRequeueAfter) never polls fast. 0
	// means the default, 100ms (DefaultInitialPollInterval); a set value
	// must be at least 100ms and at most pollInterval (equal to it: a fixed
	// poll).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('100ms')",message="must be 0 (the default) or at least 100ms",reason="FieldValueInvalid"
	InitialPollInterval metav1.Duration `json:"initialPollInterval,omitzero"`
	// Keeps each client session on one side while the weight moves (see
	// SessionAffinity). Needs a router that programs extras
	// (rollout.ExtrasRouter); not in the Replicas capacity mode.
	// +optional
	SessionAffinity *SessionAffinity `json:"sessionAffinity,omitempty"`
}

// progressDeadline is the deadline in force; 0 when disabled.
func (o *Options) progressDeadline() time.Duration {
	switch {
	case o.NoProgressDeadline:
		return 0
	case o.ProgressDeadline.Duration == 0:
		return DefaultProgressDeadline
	}
	return o.ProgressDeadline.Duration
}

func (o *Options) unhealthyThreshold() int32 {
	if o.UnhealthyThreshold == 0 {
		return 3
	}
	return o.UnhealthyThreshold
}

func (o *Options) pollInterval() time.Duration {
	if o.PollInterval.Duration == 0 {
		return DefaultPollInterval
	}
	return o.PollInterval.Duration
}

// initialPollInterval is the first poll after a hop in force.
func (o *Options) initialPollInterval() time.Duration {
	if o.InitialPollInterval.Duration == 0 {
		return min(DefaultInitialPollInterval, o.pollInterval())
	}
	return o.InitialPollInterval.Duration
}

// pollWait is the requeue while polling for the world after waiting for
// it so long: as long again, at least the initial poll interval and at
// most the poll interval, so that polls double; a poll that would pass the
// end of the first poll interval (when a lost hop is asked again) lands on
// it instead.
func (o *Options) pollWait(waited time.Duration) time.Duration {
	poll, first := o.pollInterval(), o.initialPollInterval()
	w := min(max(waited, first), poll)
	if waited < poll && waited+w > poll {
		w = max(poll-waited, first)
	}
	return w
}

func (o *Options) validate(root string, surge int32) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath(root)
	switch o.Capacity {
	case CapacityManaged, CapacityFixed, CapacityReplicas:
	default:
		errs = append(errs, field.NotSupported(p.Child("capacity"), o.Capacity,
			[]string{string(CapacityManaged), string(CapacityFixed), string(CapacityReplicas)}))
	}
	if o.MaxUnavailablePercent < 0 || o.MaxUnavailablePercent > 100 {
		errs = append(errs, field.Invalid(p.Child("maxUnavailablePercent"), o.MaxUnavailablePercent, "must be between 0 and 100"))
	}
	if o.MaxUnavailablePercent != 0 && o.Capacity != CapacityReplicas {
		errs = append(errs, field.Invalid(p.Child("maxUnavailablePercent"), o.MaxUnavailablePercent, "only applies to the Replicas capacity mode"))
	}
	switch o.AbortRamp {
	case AbortImmediate, AbortGradual, AbortEmergency:
	default:
		errs = append(errs, field.NotSupported(p.Child("abortRamp"), o.AbortRamp,
			[]string{string(AbortImmediate), string(AbortGradual), string(AbortEmergency)}))
	}
	if o.AbortRamp == AbortEmergency && o.Capacity == CapacityReplicas {
		errs = append(errs, field.Invalid(p.Child("abortRamp"), o.AbortRamp, "needs a traffic router; the Replicas mode has none"))
	}
	if o.UnhealthyThreshold < 0 {
		errs = append(errs, field.Invalid(p.Child("unhealthyThreshold"), o.UnhealthyThreshold, "must not be negative"))
	}
	switch o.UnhealthyAction {
	case UnhealthyAbort, UnhealthyPause:
	default:
		errs = append(errs, field.NotSupported(p.Child("unhealthyAction"), o.UnhealthyAction,
			[]string{string(UnhealthyAbort), string(UnhealthyPause)}))
	}
	if o.ProgressDeadline.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("progressDeadline"), o.ProgressDeadline.Duration.String(), "must not be negative"))
	}
	if o.AbortOnProgressDeadline && o.NoProgressDeadline {
		errs = append(errs, field.Invalid(p.Child("abortOnProgressDeadline"), true, "needs a progress deadline; noProgressDeadline disables it"))
	}
	if o.NoProgressDeadline && o.ProgressDeadline.Duration != 0 {
		errs = append(errs, field.Invalid(p.Child("progressDeadline"), o.ProgressDeadline.Duration.String(), "must be 0 when noProgressDeadline is set"))
	}
	if o.ScaleDownDelay.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("scaleDownDelay"), o.ScaleDownDelay.Duration.String(), "must not be negative"))
	}
	if o.PollInterval.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("pollInterval"), o.PollInterval.Duration.String(), "must not be negative"))
	} else if o.PollInterval.Duration > 0 && o.PollInterval.Duration < MinPollInterval {
		errs = append(errs, field.Invalid(p.Child("pollInterval"), o.PollInterval.Duration.String(), "must be 0 (the default) or at least "+MinPollInterval.String()))
	}
	switch ip := o.InitialPollInterval.Duration; {
	case ip < 0:
		errs = append(errs, field.Invalid(p.Child("initialPollInterval"), ip.String(), "must not be negative"))
	case ip > 0 && ip < MinPollInterval:
		errs = append(errs, field.Invalid(p.Child("initialPollInterval"), ip.String(), "must be 0 (the default) or at least "+MinPollInterval.String()))
	case o.PollInterval.Duration >= 0 && ip > o.pollInterval():
		errs = append(errs, field.Invalid(p.Child("initialPollInterval"), ip.String(), "must not exceed pollInterval ("+o.pollInterval().String()+")"))
	}
	if o.SessionAffinity != nil {
		errs = append(errs, o.SessionAffinity.validate(p.Child("sessionAffinity"))...)
		if o.Capacity == CapacityReplicas {
			errs = append(errs, field.Invalid(p.Child("sessionAffinity"), "set", "needs a traffic router; the Replicas mode has none"))
		}
	}
	if o.Capacity == CapacityReplicas && surge+o.MaxUnavailablePercent < 1 {
		errs = append(errs, field.Invalid(p.Child("maxUnavailablePercent"), o.MaxUnavailablePercent,
			"maxSurgePercent + maxUnavailablePercent must be at least 1 or replicas can never move"))
	}
	return errs
}

// ErrInvalid is matched (errors.Is) by every validation error.
var ErrInvalid = errors.New("strategy: invalid options")

// InvalidError lists every problem found in a strategy's options, each with
// the path of the field it concerns (for example "incremental.stepPercent").
type InvalidError struct {
	Errors field.ErrorList
}

func (e *InvalidError) Error() string { return joinErrors("strategy: invalid options: ", e.Errors) }

// joinErrors renders a list of field errors after a prefix, "; "-separated.
func joinErrors(prefix string, errs field.ErrorList) string {
	msgs := make([]string, len(errs))
	for i, fe := range errs {
		msgs[i] = fe.Error()
	}
	return prefix + strings.Join(msgs, "; ")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func toError(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &InvalidError{Errors: errs}
}

func validPercent(p *field.Path, v int32, min int32) *field.Error {
	if v < min || v > 100 {
		return field.Invalid(p, v, fmt.Sprintf("must be between %d and 100", min))
	}
	return nil
}
