package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a rollout stands. The zero value ("") is a rollout that has
// not been stepped yet: when the state names a canary revision other than the
// stable one, the first Step moves it to PhaseProgressing; otherwise the state
// is idle (see State.Idle) and Step asks for nothing.
type Phase string

const (
	// PhaseProgressing: moving toward the current step's target weight.
	PhaseProgressing Phase = "Progressing"
	// PhasePaused: waiting on a pause step, a manual pause or an
	// inconclusive gate. Resume (or the end of a timed pause) continues.
	PhasePaused Phase = "Paused"
	// PhaseAborting: walking traffic and capacity back to the stable side.
	PhaseAborting Phase = "Aborting"
	// PhaseAborted: all traffic is back on the stable side and the canary is
	// scaled to zero. Retry starts the rollout again from the first step.
	PhaseAborted Phase = "Aborted"
	// PhaseRolledBack: the canary revision was retargeted to the stable one
	// and the walk back has finished. Nothing is left to do.
	PhaseRolledBack Phase = "RolledBack"
	// PhaseCompleting: all traffic is on the canary; the stable side is being
	// scaled down and the canary returned to its steady-state capacity. A
	// rollout enters it when weight 100 and canary capacity 100 are
	// observed; after Options.ScaleDownDelay the stable side is scaled to 0
	// and the canary asked to return to its steady state (Target.Steady).
	// Once that is observed the rollout is PhaseSucceeded.
	PhaseCompleting Phase = "Completing"
	// PhaseSucceeded: the canary is the new stable. The roles have been
	// swapped (State.StableSide flipped to the other physical side) and the
	// allocation reads weight 0, stable capacity 100, canary capacity 0,
	// ready for the next Retarget.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseSuspended: a suspended rollout (State.Suspend, Control.Suspended)
	// has walked all traffic and capacity back to the stable side and
	// released the canary (capacity 0, extras dropped). The state keeps
	// where the rollout stood: Resume walks the canary back up to that
	// weight, capacity first, and goes on from the same step.
	PhaseSuspended Phase = "Suspended"
)

// Terminal reports whether Step will never again ask for a hop in this phase
// without a command (Retry, Resume or Retarget). A suspended rollout is
// terminal in this sense: it waits for a Resume.
func (p Phase) Terminal() bool {
	return p == PhaseAborted || p == PhaseRolledBack || p == PhaseSucceeded || p == PhaseSuspended
}

// Known reports whether p is one of the phases above or the empty phase.
func (p Phase) Known() bool {
	switch p {
	case "", PhaseProgressing, PhasePaused, PhaseAborting, PhaseAborted,
		PhaseRolledBack, PhaseCompleting, PhaseSucceeded, PhaseSuspended:
		return true
	}
	return false
}

// Side names one of the two physical sides a rollout moves between. The
// roles "stable" and "canary" alternate between them: when a rollout
// succeeds the canary side becomes the stable side of the next rollout.
// The zero value is SideA.
type Side string

const (
	SideA Side = "A"
	SideB Side = "B"
)

// Other returns the opposite side. The zero value counts as SideA.
func (s Side) Other() Side {
	if s == SideB {
		return SideA
	}
	return SideB
}

// Health is the canary's health as the last observation reported it.
type Health string

const (
	// HealthUnknown: nothing reported. Treated as healthy.
	HealthUnknown Health = ""
	HealthHealthy Health = "Healthy"
	// HealthUnhealthy: the canary is failing. No progress is made while it
	// lasts; after Options.UnhealthyThreshold consecutive unhealthy
	// observations the rollout aborts (or pauses, by option).
	HealthUnhealthy Health = "Unhealthy"
	// HealthInconclusive: the canary's health cannot be told now (an
	// analysis without data, or whose metrics source is down). While the
	// canary has traffic (weight above 0) no progress is made: no weight,
	// capacity or completion hop, as for an unhealthy canary; but it does
	// not count toward Options.UnhealthyThreshold, nor end a streak of
	// unhealthy observations, and the rollout goes on by itself once the
	// health is known again. The hold is bounded: it counts toward
	// Options.ProgressDeadline from when the rollout would have moved on
	// without it (the last hop applied, or later the end of the step
	// interval or of the timed pauses ahead), so once the deadline passes
	// the state reports Degraded (ProgressDeadlineExceeded) and, with
	// AbortOnProgressDeadline, the rollout aborts; NoProgressDeadline lets
	// it hold for ever, and so does a PauseUntilResumed step next (the
	// rollout would wait for a Resume there, with no deadline either). At weight 0 (before the first weight hop, or while
	// walking back) it is treated as unknown.
	HealthInconclusive Health = "Inconclusive"
)

// Verdict is the outcome of a gate's analysis.
type Verdict string

const (
	// VerdictPending (the zero value): no verdict yet; the gate keeps waiting.
	VerdictPending      Verdict = ""
	VerdictPass         Verdict = "Pass"
	VerdictFail         Verdict = "Fail"
	VerdictInconclusive Verdict = "Inconclusive"
)

// Allocation is a split of traffic and capacity between the two roles, all in
// percent (0..100): weight is the canary's share of requests, the stable side
// receives 100 - weight.
type Allocation struct {
	// The canary's share of requests, in percent; the stable side receives
	// the rest.
	Weight int32 `json:"weight"`
	// The stable side's capacity, in percent of its full capacity.
	StableCapacity int32 `json:"stableCapacity"`
	// The canary side's capacity, in percent of its full capacity.
	CanaryCapacity int32 `json:"canaryCapacity"`
	// The revision the canary side was last asked to run (a deploy hop), or
	// was observed running when nothing had to be deployed; empty until
	// then. Revisions are only tracked while the observation reports them
	// (observed.revisions).
	CanaryRevision string `json:"canaryRevision,omitempty"`
}

// Surge is the capacity provisioned above 100 percent.
func (a Allocation) Surge() int32 { return a.StableCapacity + a.CanaryCapacity - 100 }

// Pace records how long each side last took to settle after a capacity
// hop, as observed: from the hop to the first observation of the side
// settled at the capacity asked (for a scale-up, ready). A rollout that
// waits (a timed pause, an interval) asks for the capacity its next weight
// needs the canary's pace before the wait ends, never sooner than it must,
// so that the capacity is ready when the wait ends and the surge is spent
// for as short a time as the side allows; the stable side's pace tells
// whether there is time to shrink it first. The zero value knows nothing:
// capacity is then prepared as soon as the wait begins.
type Pace struct {
	// How long the stable and the canary side last took to settle after
	// a capacity hop; zero until observed. A side observed ready at once
	// records a microsecond, the state's resolution, and is asked to grow
	// when the wait ends.
	StableSettle metav1.Duration `json:"stableSettle,omitzero"`
	CanarySettle metav1.Duration `json:"canarySettle,omitzero"`
	// When the capacity hop being timed on each side was asked; absent
	// when none is.
	StableAskedAt metav1.MicroTime `json:"stableAskedAt,omitzero"`
	CanaryAskedAt metav1.MicroTime `json:"canaryAskedAt,omitzero"`
}

// SideObservation is what the adapters (a rollout.CapacitySetter, a
// rollout.RevisionReader) report for one side.
type SideObservation struct {
	// The capacity the side is currently set to, in percent (what the last
	// applied request asked for).
	Capacity int32 `json:"capacity"`
	// The share of the side's full capacity observed ready now, in percent,
	// whatever was asked (1 of 3 replicas ready is 33).
	Ready int32 `json:"ready"`
	// The side has finished moving to its capacity: nothing is starting or
	// stopping. ready may still be below capacity when the backend rounds
	// (3 replicas at 40 percent can settle at 33).
	Settled bool `json:"settled"`
	// The revision the side is observed running: the one its workload was
	// last deployed with, as the adapter recognises it; empty when it runs
	// none it recognises. Only read while the observation's revisions is
	// set.
	Revision string `json:"revision,omitempty"`
	// The revision is fully rolled out on the side: the
	// workload's controller has seen the change and no instance of another
	// revision is left (for a Deployment: observedGeneration caught up and
	// every replica updated; for Ray Serve: the config is the one deployed).
	Updated bool `json:"updated,omitempty"`
}

// RunsRevision reports whether the side is observed running revision, fully
// rolled out.
func (o SideObservation) RunsRevision(revision string) bool {
	return o.Updated && o.Revision == revision
}

// GateResult is a verdict reported for a named gate.
type GateResult struct {
	// The gate's name, as a canary gate step names it.
	Name string `json:"name"`
	// Pass, Fail or Inconclusive; empty while none is reached.
	Verdict Verdict `json:"verdict"`
	// Why, in words.
	Message string `json:"message,omitempty"`
	// When the verdict was reached. A verdict older than the start of the
	// current gate step is stale and ignored; one without a time is always
	// taken.
	At metav1.MicroTime `json:"at,omitzero"`
}

// Observation is what the adapters report, written into the State's
// observed field (State.Observed) by the caller before each Step.
type Observation struct {
	// When the observation was taken. Consecutive unhealthy observations
	// are counted by distinct times.
	At metav1.MicroTime `json:"at,omitzero"`
	// The canary weight the traffic router reports as programmed, in
	// percent.
	Weight int32 `json:"weight"`
	// The data plane accepted the weight (for the Gateway API: every parent
	// Accepted and ResolvedRefs for the route's current generation).
	WeightApplied bool `json:"weightApplied"`
	// The router holds weights that are not a split of 100 between the two
	// sides (0/0, 50/0, or 100/30 after another writer changed one of
	// them): requests do not see weight. Such weights are never applied;
	// the strategy asks for the desired split again once that is safe. The
	// Runner sets it from the weights it reads.
	WeightInvalid bool `json:"weightInvalid,omitempty"`
	// What the stable side reports. Without a capacity setter (fixed
	// capacity) the caller reports both sides as provisioned: capacity and
	// ready 100, settled.
	Stable SideObservation `json:"stable"`
	// What the canary side reports, as for stable.
	Canary SideObservation `json:"canary"`
	// The sides report the revisions they run (stable.revision,
	// canary.revision). While it is set the strategy keeps
	// every side on its role's revision: it deploys the canary revision on
	// the canary side only while that side carries weight 0 (and, with
	// capacity setters, capacity 0), and moves no traffic or capacity onto
	// it before it is observed running that revision. Without it revisions
	// are not checked and nothing is deployed: the caller puts each
	// revision on its side. The Runner sets it when both sides have a
	// rollout.RevisionReader.
	Revisions bool `json:"revisions,omitempty"`
	// The extras the router reports as programmed (a header route, a
	// mirror, sticky sessions), pointed at the canary side; the zero value
	// when it programs none. Extras are applied when they equal
	// desiredExtras on a route whose weight is applied.
	Extras TrafficExtras `json:"extras,omitzero"`
	// The canary's health: Healthy, Unhealthy, Inconclusive, or empty
	// (unknown, treated as healthy).
	Health Health `json:"health,omitempty"`
	// Why the canary has that health.
	HealthMessage string `json:"healthMessage,omitempty"`
	// The latest verdict of every gate analysed so far.
	Gates []GateResult `json:"gates,omitempty"`
	// When set, the adapters could not be observed (or a hop could not be
	// applied): the rest of the observation is stale. The strategy then
	// asks for nothing, sets Degraded with this message and counts the
	// time since the first such failure (failingSince) toward the progress
	// deadline. The Runner sets it from adapter errors.
	Error string `json:"error,omitempty"`
	// With error: another rollout holds the claim on the objects this one
	// would move (error names the object and the owner). The strategy asks
	// for nothing and sets Degraded with reason Claimed, and the time
	// refused does not count toward the progress deadline, since the
	// rollout waits for the claim to be released. The Runner sets it from
	// a rollout.ClaimedError.
	Claimed bool `json:"claimed,omitempty"`
}

// Gate returns the reported verdict for the named gate, VerdictPending if
// none was reported.
func (o *Observation) Gate(name string) GateResult {
	for _, g := range o.Gates {
		if g.Name == name {
			return g
		}
	}
	return GateResult{Name: name}
}

// AbortStatus records why and when a rollout was aborted.
type AbortStatus struct {
	// Why: the reason of the condition that aborted it (Aborted for an
	// abort request, Unhealthy, GateFailed, ...).
	Reason string `json:"reason"`
	// When the rollout was aborted.
	At metav1.MicroTime `json:"at,omitzero"`
	// All traffic was sent to the stable side at once.
	Emergency bool `json:"emergency,omitempty"`
}

// State is the whole, serialisable state of one rollout. It embeds in a CRD
// status: every field has a JSON tag, times are metav1.MicroTime (so a JSON
// round trip loses nothing that a decision depends on), and DeepCopy is
// provided.
//
// The zero value is idle and safe: Step asks no adapter for anything until a
// rollout is started, so a brand-new object whose status holds a zero (or
// null) state changes nothing in the cluster. Start an object with one line,
// called on every reconcile with the revision its spec asks for:
//
//	s = s.Retarget(spec.Revision, now)
//
// On the zero state this records the revision the spec asks for without
// looking (State.Unobserved): the next Step adopts the world from its
// observation, as the idle state on the side that runs the revision with
// all traffic, or as the rollout the route and the sides show (a status
// wiped mid-rollout). On any later state a different revision starts (or
// redirects) a rollout. NewState builds a rollout about to start directly.
//
// A stored state is validated by every Step before anything is applied (see
// State.Validate): a corrupt one asks for nothing and reports Degraded with
// reason InvalidState.
//
// State is a value: commands and Step return a new State and never modify
// the one they were given. It is not safe for concurrent mutation.
type State struct {
	// The revision that runs on the stable side.
	StableRevision string `json:"stableRevision"`
	// The revision the canary side should run now. While an abandoned
	// canary is walked back after a retarget (the spec asked for another
	// revision mid-rollout), it still names the abandoned one and
	// pendingRevision the one that will follow.
	CanaryRevision string `json:"canaryRevision"`
	// The revision asked for that follows once an abandoned canary is
	// walked back; empty otherwise.
	PendingRevision string `json:"pendingRevision,omitempty"`
	// The state names the revision the spec asks for but has not looked at
	// the world yet: what a retarget (Retarget) makes of the zero state (a
	// new object, or one whose status was wiped or re-created).
	// stableRevision and canaryRevision both hold that revision, and
	// nothing is known of the route or the sides. It is not
	// idle: the Runner observes it, and the next Step adopts the world as
	// observed (see State.Retarget): all traffic on a side that runs the revision becomes the
	// idle state on that side; anything else becomes the rollout (or walk
	// back) the world shows. Until then nothing is asked of any adapter.
	// false (the zero value) for every state a Step has adopted.
	Unobserved bool `json:"unobserved,omitempty"`
	// The physical side, A or B, that holds the stable role.
	StableSide Side `json:"stableSide,omitempty"`

	// The rollout's phase: Progressing, Paused, Aborting, Aborted,
	// RolledBack, Completing, Succeeded or Suspended; empty when no rollout
	// has run.
	Phase Phase `json:"phase,omitempty"`
	// The current canary step, counted from 0. The incremental and
	// blue-green strategies leave it at 0.
	StepIndex int32 `json:"stepIndex"`
	// Identifies the canary steps stepIndex refers to, so an edit of the
	// steps mid-rollout is detected.
	StepsHash string `json:"stepsHash,omitempty"`

	// The allocation last asked of the adapters.
	Desired Allocation `json:"desired"`
	// The extras last asked of the router, written with the weight.
	DesiredExtras TrafficExtras `json:"desiredExtras,omitzero"`
	// The latest observation of the route and the sides, written by the
	// caller.
	Observed Observation `json:"observed"`

	// When the rollout was first stepped.
	StartedAt metav1.MicroTime `json:"startedAt,omitzero"`
	// When the latest hop was asked for; the progress deadline counts from
	// here until the hop is observed applied.
	HopAt metav1.MicroTime `json:"hopAt,omitzero"`
	// What the rollout has learned of how fast its sides become ready: the
	// capacity the next weight needs is asked for that long before a pause
	// or an interval ends. Volatile (see Changed); reset when a rollout
	// starts.
	Pace Pace `json:"pace,omitzero"`
	// When the weight was last moved: the instant the hop was decided.
	WeightChangedAt metav1.MicroTime `json:"weightChangedAt,omitzero"`
	// When the weight asked for at weightChangedAt is known to have
	// landed: rollout.Runner records the instant its write of the weight
	// returned (on the reconcile's timeline: its now plus the time the
	// write took), when the weights have reached the API server; without
	// such a record, the instant it was first observed in
	// force (observed.at of the first Step that saw the route hold it and
	// the extras, accepted by the data plane; in the Replicas mode, the
	// canary settled at its capacity; the Step's now if observed.at is
	// absent), clamped to [weightChangedAt, the Step's now]; absent until
	// then. The strategy's interval (Incremental) counts from here, or from
	// weightChangedAt while it is absent or earlier. Step records it only
	// for a weight first seen in force within the interval since
	// weightChangedAt or since weightPendingAt: a caller that keeps the
	// state between Steps (Runner.Run) and looks at least once per interval
	// while the weight is pending has it recorded however slow the write;
	// one that loses it (a restart, a status read back each reconcile)
	// records it again from a later observation within the interval, or
	// counts from weightChangedAt, so its wait never ends later than twice
	// the interval after the hop (or after the latest weightPendingAt it
	// stored). It is volatile (see Changed): it is stored with the next
	// change. Recorded only by strategies with an interval.
	WeightAppliedAt metav1.MicroTime `json:"weightAppliedAt,omitzero"`
	// When a Step last observed the weight asked for at weightChangedAt
	// not yet in force (clamped as weightAppliedAt is), outside a walk
	// back; absent after each weight hop until then. Volatile, like weightAppliedAt; it lets a
	// write slower than the interval be recorded when it is seen in force.
	WeightPendingAt metav1.MicroTime `json:"weightPendingAt,omitzero"`
	// When the current step began: for a pause, the moment the previous
	// step was observed complete.
	StepStartedAt metav1.MicroTime `json:"stepStartedAt,omitzero"`
	// When all traffic was observed on the canary (completion; the
	// strategy's scaleDownDelay counts from here).
	ReachedAt metav1.MicroTime `json:"reachedAt,omitzero"`
	// When the rollout reached a terminal phase (Succeeded, Aborted,
	// RolledBack).
	FinishedAt metav1.MicroTime `json:"finishedAt,omitzero"`

	// The rollout is held until someone lets it go: by a pause command
	// (until Resume), the spec's control (until paused is false again), a
	// pause step without a duration, an inconclusive gate or an unhealthy
	// canary (until Resume or Promote); pauseReason says which. A timed
	// pause step holds the rollout too but ends by itself, so it leaves
	// this false: phase is Paused in both cases. (Stored as paused, the
	// name states written by earlier versions use.)
	AwaitingResume bool `json:"paused,omitempty"`
	// Why the rollout is held: ManualPause (the Pause command),
	// ControlPause (the spec's control, paused), PauseStep (a pause step
	// without a duration, until resumed), GateInconclusive or Unhealthy.
	PauseReason string `json:"pauseReason,omitempty"`
	// When the hold began.
	PausedAt metav1.MicroTime `json:"pausedAt,omitzero"`
	// A promote asks to finish the current step now. It stays
	// capacity-safe.
	PromoteRequested bool `json:"promoteRequested,omitempty"`
	// A full promote asks to walk to weight 100 now, skipping every
	// remaining step. It stays capacity-safe.
	PromoteFullRequested bool `json:"promoteFullRequested,omitempty"`
	// A resume during the current step: it ends a pause step without a
	// duration or an inconclusive gate. Entering a step clears it.
	Resumed bool `json:"resumed,omitempty"`
	// The winner was asked to return to its steady state (full capacity,
	// nothing pinned) during completion. (Stored as released, the name
	// states written by earlier versions use.)
	SteadyRequested bool `json:"released,omitempty"`

	// Why and when the rollout was aborted; absent unless it was. A
	// suspension (reason Suspended or ControlSuspend) is recorded here
	// too, from the start of its walk back until Resume.
	Aborted *AbortStatus `json:"aborted,omitempty"`
	// The canary weight a suspended rollout stood at when it was
	// suspended: Resume walks back up to it (capacity-safe, without the
	// strategy's intervals) before the current step goes on, entered
	// again (a pause timed again, a gate analysed again). 0 otherwise.
	ResumeWeight int32 `json:"resumeWeight,omitempty"`

	// Consecutive unhealthy observations counted.
	UnhealthyCount int32 `json:"unhealthyCount,omitempty"`
	// The time (observed.at) of the last observation counted.
	HealthCheckedAt metav1.MicroTime `json:"healthCheckedAt,omitzero"`

	// The gate the current step waits on, for the caller to analyse and
	// report in observed.gates; empty when no gate is pending.
	Gate string `json:"gate,omitempty"`

	// A line, for people, about what the rollout waits for.
	Message string `json:"message,omitempty"`

	// When the adapters first failed to be observed (or to apply a hop) in
	// the current run of failures; absent while they answer. The progress
	// deadline counts from here, pauses included: a rollout that cannot
	// see its route or its sides is never silently stuck.
	FailingSince metav1.MicroTime `json:"failingSince,omitzero"`

	// The last value of each one-shot request of the spec's control that the
	// rollout has seen: each request acts once, also after
	// the state is stored and read back. Commands keep it, across rollouts
	// too.
	Handled Requests `json:"handled,omitzero"`
	// For each one-shot request, its value in handled when that request
	// did not apply to the rollout as it stood (Applied.Ignored), else
	// empty: a client that wrote a request finds its value in handled once
	// the rollout has seen it, and also here when it was ignored.
	Ignored Requests `json:"ignored,omitzero"`

	// When the latest command was applied. Like every other recorded time
	// it bounds the clock from below: a now earlier than any recorded time
	// is treated as that time.
	LastCommandAt metav1.MicroTime `json:"lastCommandAt,omitzero"`

	// The rollout's conditions: Progressing, Paused, Degraded, Available,
	// and RollbackInProgress while a change of revision walks it back.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NewState returns the state of a rollout from stable to canary that has not
// started: all traffic and capacity on the stable side (SideA). With equal
// revisions there is nothing to roll out: the state is idle (see Idle) and
// Step asks for nothing until a Retarget to another revision.
func NewState(stableRevision, canaryRevision string) State {
	return State{
		StableRevision: stableRevision,
		CanaryRevision: canaryRevision,
		StableSide:     SideA,
		Desired:        Allocation{StableCapacity: 100},
		Observed: Observation{
			WeightApplied: true,
			Stable:        SideObservation{Capacity: 100, Ready: 100, Settled: true},
			Canary:        SideObservation{Settled: true},
		},
	}
}

// Idle reports that the state holds no rollout: nothing has been stepped and
// the canary revision is the stable one (the zero State, or NewState(v, v)).
// Step asks for nothing on an idle state, and the Runner does not even read
// the adapters. A state that has not observed the world yet (Unobserved, the
// zero State after a Retarget) is not idle: the Runner observes it and the
// next Step adopts what it sees.
func (s *State) Idle() bool {
	return s.Phase == "" && s.PendingRevision == "" && s.CanaryRevision == s.StableRevision && !s.Unobserved
}

// Target is one value an adapter is asked to apply. Set reports whether
// there is anything to apply.
type Target struct {
	Set   bool  `json:"set"`
	Value int32 `json:"value"`
	// Steady (capacities only) asks the side to return to its steady state:
	// full capacity with nothing pinned (for Ray Serve, target_capacity null).
	Steady bool `json:"steady,omitempty"`
}

// DeployTarget asks the canary side to run a revision. Set reports whether
// there is anything to deploy.
//
// When the observation reports what each side runs (Observation.Revisions,
// with SideObservation.Revision and Updated; the Runner sets them from its
// RevisionA and RevisionB), Step puts each revision on its side itself, with
// a DeployTarget, and keeps rules 6 to 8 of the package's invariants: the
// canary revision is deployed while its side carries weight 0 (and, with
// capacity setters, is settled at capacity 0, which keeps an upgrade within
// the surge budget), and no capacity or weight moves onto the canary until
// it is observed running that revision, fully rolled out (Updated).
//
// A canary side observed running another revision while it carries traffic
// or capacity (someone redeployed it) is walked back: the rollout aborts
// with ReasonRevisionChanged, and Retry deploys the canary revision again. A
// stable side running another revision than the stable one holds all
// forward progress with Degraded (ReasonStableRevisionMismatch), though a
// walk back still returns traffic to it. A deploy that never rolls out is
// bounded by the progress deadline. At success the roles swap, so a chain
// v1 -> v2 -> v3 -> v2 alternates between the same two sides. Without
// revisions in the observation nothing is checked or deployed, and the
// caller puts each revision on its side. See docs/design/strategy.md for
// Retargets and the first revision.
type DeployTarget struct {
	Set      bool   `json:"set"`
	Revision string `json:"revision,omitempty"`
}

// Decision is the result of one Step.
type Decision struct {
	// State is the next state; the caller stores it.
	State State
	// Weight, StableCapacity and CanaryCapacity are the hops to apply now.
	// Apply capacity increases before a weight change and capacity decreases
	// after it; the Runner in package rollout does exactly that.
	Weight         Target
	StableCapacity Target
	CanaryCapacity Target
	// Deploy asks the canary side to run a revision. It is only ever set
	// while that side carries weight 0 (and, with capacity setters, is at
	// capacity 0), and never together with another hop.
	Deploy DeployTarget
	// Extras asks the router to program State.DesiredExtras, set when they
	// changed. A router writes them in the same update as the weight
	// (State.Desired.Weight, set or not): with sticky sessions the weight
	// is also the sessions' threshold.
	Extras bool
	// RequeueAfter is when to call Step again: the exact time until the next
	// time-gated event, or a poll while waiting for the world to show a hop.
	// That poll starts at Options.InitialPollInterval after the hop and
	// doubles while nothing changes, up to PollInterval (never past the
	// progress deadline). Zero means nothing will happen without a new
	// observation or command (terminal phases, indefinite pauses).
	RequeueAfter time.Duration
	// WatchedRequeueAfter is the requeue for a caller that is woken by every
	// change of what its adapters observe (rollout.Notifier, or a
	// controller's watches on the route and the workloads): the same as
	// RequeueAfter, but waiting for the world polls only at PollInterval,
	// since the change itself wakes the caller.
	//
	// Neither requeue is stored in the State: both derive from the recorded
	// instants, so a restarted controller polls as the one before. The time
	// gated events are the end of a step interval, a timed pause, the
	// scale-down delay and the progress deadline. After the first poll,
	// InitialPollInterval after the hop, each comes as long after the one
	// before as the wait so far, the last landing on the instant a lost hop
	// is asked again: a hop the world applies in 300ms is seen within about
	// 400ms, and a slow one costs a handful of extra reads.
	WatchedRequeueAfter time.Duration
}

// HasHops reports whether the decision asks any adapter for anything.
func (d *Decision) HasHops() bool {
	return d.Weight.Set || d.StableCapacity.Set || d.CanaryCapacity.Set || d.Deploy.Set || d.Extras
}
