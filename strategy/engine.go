package strategy

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// engine is the machinery shared by every strategy: commands in the state,
// health, deadlines, steps, the capacity-safe mover and completion. What
// depends on the capacity mode is asked of mode, never tested here.
type engine struct {
	opts     Options
	mode     mover // the capacity mode's behaviour, picked once (moverFor)
	surge    int32
	stepPct  int32         // Incremental: largest weight hop; 0 = unlimited
	interval time.Duration // Incremental: least time between weight hops
	steps    []CanaryStep
	canary   bool
	// Session affinity (Options.SessionAffinity) and its ticket values:
	// the weights the rollout walks through, each weight hop rounded to
	// one of them.
	affinity *SessionAffinity
	grid     []int32
	mask     gridMask
}

// run is one Step in progress.
type run struct {
	e          *engine
	d          *Decision
	st         *State
	now        time.Time
	condCopied bool
	overdue    bool // ProgressDeadline passed while waiting
	failed     bool // the observation is an adapter error: nothing else is known
	// skewed: the state records an instant more than MaxClockSkew ahead of
	// the caller's now (see State.CheckClock).
	skewed bool

	// Readiness lost under traffic (managed and fixed modes, outside a walk
	// back): the side's observed ready capacity is below the traffic the
	// route sends it.
	canaryShort, stableShort bool
	// stableRevision: the stable side runs another revision than the
	// stable one; stableRevisionMsg says which (see stableMismatch).
	stableRevision    bool
	stableRevisionMsg string
	// polling: the requeue pollFull was set to wait for the world for
	// pollWaited so far; Step shortens it to a backed-off poll
	// (Options.pollWait) unless something else set the requeue since. (A
	// duration rather than an instant: a time.Time stored here would move
	// the run to the heap.)
	polling    bool
	pollWaited time.Duration
	pollFull   time.Duration
	// prepIn: a wait (a timed pause, an interval) will ask for the capacity
	// its next weight needs this long from now (see overlap); 0 when not.
	prepIn time.Duration
}

// poll sets the requeue to wait for the world since the instant since:
// full for a caller notified of every change, a backed-off poll otherwise
// (see finish).
func (r *run) poll(since time.Time, full time.Duration) {
	r.d.RequeueAfter = full
	r.polling, r.pollWaited, r.pollFull = true, r.now.Sub(since), full
}

// finish sets the requeues of the decision: WatchedRequeueAfter is the one
// Step decided; RequeueAfter is shortened to a backed-off poll when that
// decision is a wait for the world.
func (r *run) finish() {
	d := r.d
	d.WatchedRequeueAfter = d.RequeueAfter
	if r.polling && d.RequeueAfter == r.pollFull && d.RequeueAfter > 0 {
		d.RequeueAfter = min(d.RequeueAfter, r.e.opts.pollWait(r.pollWaited))
	}
}

// setShort sets *dst to "<role> ready capacity <ready> is below its traffic
// <traffic>: holding", building the string only when *dst differs.
func setShort(dst *string, role string, ready, traffic int32) {
	var buf [80]byte
	b := append(buf[:0], role...)
	b = append(b, " ready capacity "...)
	b = strconv.AppendInt(b, int64(ready), 10)
	b = append(b, " is below its traffic "...)
	b = strconv.AppendInt(b, int64(traffic), 10)
	b = append(b, ": holding"...)
	if string(b) != *dst {
		*dst = string(b)
	}
}

// micro is the recorded form of an instant: UTC, microseconds, exactly what a
// JSON round trip of metav1.MicroTime preserves.
//
// It is built from an integer so that no *time.Location of the caller's is
// written into the state: that keeps Step free of heap allocations.
func micro(t time.Time) metav1.MicroTime {
	return metav1.MicroTime{Time: time.UnixMicro(t.UnixMicro()).UTC()}
}

// Micro returns an instant in the form a State records it: UTC, to the
// microsecond, which is what a JSON round trip of metav1.MicroTime keeps.
// Write instants into a State (observations, gate verdicts) with it, so that
// storing the state changes no decision.
func Micro(t time.Time) metav1.MicroTime { return micro(t) }

func after(t metav1.MicroTime, d time.Duration) time.Time { return t.Time.Add(d) }

// clock returns now, or the latest instant recorded in s if now is earlier:
// time that runs backwards counts as no time passing.
func clock(s *State, now time.Time) time.Time {
	for _, t := range [...]*metav1.MicroTime{&s.StartedAt, &s.HopAt, &s.WeightChangedAt, &s.WeightAppliedAt, &s.WeightPendingAt, &s.StepStartedAt,
		&s.ReachedAt, &s.FinishedAt, &s.PausedAt, &s.HealthCheckedAt, &s.LastCommandAt, &s.FailingSince} {
		if t.Time.After(now) {
			now = t.Time
		}
	}
	if s.Aborted != nil && s.Aborted.At.Time.After(now) {
		now = s.Aborted.At.Time
	}
	return now
}

func (e *engine) invalid(s State, now time.Time, err error) Decision {
	d := Decision{State: s}
	r := run{e: e, d: &d, st: &d.State, now: clock(&s, now)}
	r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonInvalidOptions, err.Error())
	return d
}

func (e *engine) step(s State, now time.Time) Decision {
	d := Decision{State: s}
	r := run{e: e, d: &d, st: &d.State, now: clock(&s, now)}
	switch {
	case s.Idle():
		// Nothing to roll out: ask for nothing, whatever the allocation says.
		d.State.Message = msgIdle
		r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonIdle, msgIdle)
		return d
	case !s.valid(e.mode, nil):
		// A corrupt state is never applied, not even repaired.
		err := s.validate(e.mode)
		d.State.Message = err.Error()
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonInvalidState, err.Error())
		return d
	case s.Unobserved:
		// A state that has not looked at the world: adopt it from this
		// observation, asking for nothing.
		r.skewed = r.now.Sub(now) > MaxClockSkew
		r.adopt()
		if r.skewed {
			r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonClockSkew, msgClockSkew)
		}
		return d
	}
	r.skewed = r.now.Sub(now) > MaxClockSkew
	r.step()
	r.conditions()
	r.finish()
	return d
}

func (r *run) step() {
	st := r.st
	if st.Phase.Terminal() {
		return
	}
	if st.Observed.Error != "" {
		r.failing()
		return
	}
	st.FailingSince = metav1.MicroTime{}
	r.noteWeightApplied()
	r.notePace()
	if st.Phase == "" {
		st.Phase = PhaseProgressing
		st.StartedAt = micro(r.now)
		st.Pace = Pace{}
		promote := st.PromoteRequested // a Promote written with the new revision passes its first step
		r.enter(0)
		st.PromoteRequested = promote
	}
	if r.e.canary && st.Phase != PhaseAborting {
		r.checkSteps()
	}
	r.readiness()
	applied := r.applied()
	if bad, reason := r.countHealth(); bad && st.Phase != PhaseAborting && st.Phase != PhaseCompleting {
		if r.e.opts.UnhealthyAction == UnhealthyPause {
			if !st.AwaitingResume {
				st.AwaitingResume, st.PauseReason, st.PausedAt = true, ReasonUnhealthy, micro(r.now)
			}
		} else {
			r.abort(reason)
		}
	}
	if st.Phase != PhaseAborting && r.revisionChanged() {
		r.abort(ReasonRevisionChanged)
	}
	if st.Phase == PhaseAborting {
		r.keepHeld()
		r.markEmergency()
	}
	if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency && r.emergency() {
		return
	}
	if st.Phase == PhaseAborting && r.takeRouteWeight() {
		return
	}
	if !applied && !(st.Phase == PhaseAborting && r.inPlace()) {
		// A walk back does not wait for capacity that may never come (a
		// canary whose pods never become ready): every hop it asks for moves
		// toward the stable side and is bounded by observed ready capacity,
		// so once the route holds the desired weight and each side holds the
		// desired capacity (settled or not) it may go on.
		r.waitApplied()
		if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency && r.emergency() {
			return // the deadline just aborted: all traffic to the stable side now
		}
		r.repair()
		return
	}
	switch st.Phase {
	case PhaseAborting:
		r.walkBack()
	case PhaseCompleting:
		r.complete()
	default:
		r.progress()
	}
}

// failing handles an observation that is an adapter error: nothing is known
// about the world, so nothing is asked; the time since the first failure
// counts toward the progress deadline.
func (r *run) failing() {
	st, o := r.st, r.e.opts
	r.failed = true
	if st.Observed.Claimed {
		// Refused by another rollout's claim: nothing of this one is
		// failing, it waits for the claim, and no deadline runs.
		setJoined(&st.Message, "refused: ", st.Observed.Error)
		r.d.RequeueAfter = o.pollInterval()
		return
	}
	if st.FailingSince.IsZero() {
		st.FailingSince = micro(r.now)
	}
	setJoined(&st.Message, "cannot observe the adapters: ", st.Observed.Error)
	wait := o.pollInterval()
	if dl := o.progressDeadline(); dl > 0 {
		end := after(st.FailingSince, dl)
		if !r.now.Before(end) {
			r.overdue = true
			if o.AbortOnProgressDeadline {
				r.abort(ReasonProgressDeadlineExceeded)
			}
		} else if left := end.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.d.RequeueAfter = wait
}

// readiness notes a side that lost readiness under traffic: its observed
// ready capacity is below the traffic the route sends it while it is not
// settled (pods crashed, restarting or failing their readiness checks). A
// side that has settled a little below its traffic (a backend rounding to
// whole replicas) has lost nothing; the walk relieves it. A walk back is
// exempt (it is already moving traffic to where it fits), and so is a route
// whose weights are not a valid split; the mover decides the rest (the
// Replicas mode has no such signal: traffic follows ready replicas).
func (r *run) readiness() {
	if r.st.Observed.WeightInvalid || r.st.Phase == PhaseAborting {
		return
	}
	r.stableShort, r.canaryShort = r.e.mode.readinessLost(r.facts())
}

// takeRouteWeight lets a walk back take a route that already sends less to
// the canary than asked (another writer, a route re-created at 100/0) as its
// next hop, instead of writing the canary's share back up, as long as the
// stable side is ready for the traffic the route already sends it. It asks
// for that weight rather than only recording it: the write is a no-op when
// the route holds it, and it overrides an older write still on its way.
// The mover decides (there is no route to take without a router).
func (r *run) takeRouteWeight() bool {
	f := r.facts()
	if !r.e.mode.takesRoute(f) {
		if h := r.e.mode.growForRoute(f); h.scales() {
			r.take(h, 0) // the stable side first: the route is taken once it is ready
			r.st.Message = msgAborting
			return true
		}
		return false
	}
	r.hopWeight(r.st.Observed.Weight)
	r.st.Message = msgAborting
	return true
}

// facts are what the mover decides from, read from the state now.
func (r *run) facts() facts {
	st := r.st
	return facts{
		want:           st.Desired,
		weight:         st.Observed.Weight,
		weightApplied:  st.Observed.WeightApplied,
		weightInvalid:  st.Observed.WeightInvalid,
		stable:         st.Observed.Stable,
		canary:         st.Observed.Canary,
		revisions:      st.Observed.Revisions,
		surge:          r.e.surge,
		maxUnavailable: r.e.opts.MaxUnavailablePercent,
		hdr:            max(st.DesiredExtras.headerShare(), st.Observed.Extras.headerShare()),
		mirror:         min(max(st.DesiredExtras.MirrorPercent, st.Observed.Extras.MirrorPercent, 0), 100),
		grid:           r.e.mask,
	}
}

// applied reports whether the last hop is observed applied: the route
// programmed with the desired weight and extras, each side settled at its
// capacity.
func (r *run) applied() bool { return r.e.mode.applied(r.facts()) && r.extrasApplied() }

// extrasApplied reports whether the router reports the desired extras.
func (r *run) extrasApplied() bool { return r.st.DesiredExtras.Equal(r.st.Observed.Extras) }

// inPlace reports, for a walk back, whether every adapter holds what was
// asked, settled or not, and whether or not the data plane has accepted the
// route yet: a walk back only ever moves traffic toward a stable side that
// is ready for it, so a parent that rejects the route (or never writes its
// status) must not freeze it. Scaling the canary down below traffic it may
// still receive does wait for the route to be accepted (awaitRoute).
func (r *run) inPlace() bool { return r.e.mode.inPlace(r.facts()) && r.extrasApplied() }

func (r *run) waitApplied() {
	if r.st.Phase != PhasePaused {
		// A hop asked during a pause (capacity released or prepared)
		// leaves the pause's message, and so its condition, as it was.
		r.st.Message = msgWaitingHop
	}
	r.deadline(false)
}

// waitingSince is when the current wait for the world began: the latest of
// the last hop, the start of the rollout, the start of the current step and
// the last command.
func (r *run) waitingSince() time.Time {
	st := r.st
	t := st.HopAt.Time
	for _, x := range [...]*metav1.MicroTime{&st.StartedAt, &st.StepStartedAt, &st.LastCommandAt} {
		if x.Time.After(t) {
			t = x.Time
		}
	}
	return t
}

// deadline sets the requeue while waiting for the world (a hop to be
// applied, capacity to become ready, a gate verdict) and enforces the
// progress deadline, counted from waitingSince: Degraded when it passes,
// and an abort if asked.
//
// applied says every hop is in place, so an abort can start walking back in
// this same Step.
func (r *run) deadline(applied bool) {
	st, o := r.st, r.e.opts
	wait := o.pollInterval()
	if dl, since := o.progressDeadline(), r.waitingSince(); dl > 0 && !since.IsZero() {
		deadline := since.Add(dl)
		if !r.now.Before(deadline) {
			r.overdue = true
			if o.AbortOnProgressDeadline && st.Phase != PhaseAborting {
				r.abort(ReasonProgressDeadlineExceeded)
				r.d.RequeueAfter = wait
				if applied {
					r.walkBack()
				}
				return
			}
		} else if left := deadline.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.poll(r.waitingSince(), wait)
}

// repair asks again for what the adapters do not hold once a poll interval
// has passed since the hop: a write that was lost, overwritten by someone
// else, or made by a reconcile whose state was never stored, and weights
// that are not a valid split. Adapters are idempotent. It does not touch
// HopAt: the progress deadline keeps counting.
//
// A repair is checked against the world as observed now, never trusted
// because it was once recorded: the weight is written back only if both
// sides' observed ready capacity covers it; a side is scaled down only to
// at least the traffic it may carry (the larger of what the route holds and
// what was asked; none while the route's weights are invalid, as the real
// split is unknown); a side is scaled up only within the surge budget,
// counting the other side at the larger of its desired and observed
// capacity. In the Replicas mode a side is scaled down only while the other
// side's ready capacity keeps the total within MaxUnavailablePercent, the
// other side counted at what the same repair shrinks it to. The
// mover decides what its mode repairs (no route without a router, no side
// without capacity setters).
func (r *run) repair() {
	st := r.st
	if !st.HopAt.IsZero() && r.now.Before(after(st.HopAt, r.e.opts.pollInterval())) {
		return
	}
	want := &st.Desired
	weight, stable, canary := r.e.mode.repair(r.facts(), r.fits(want.Weight))
	if weight && st.Phase == PhaseAborting && want.Weight > st.Observed.Weight && st.Observed.WeightApplied && !st.Observed.WeightInvalid {
		// A walk back never writes the canary's share back onto a route
		// that already sends it less: it takes that route once the stable
		// side is ready for it (takeRouteWeight).
		weight = false
	}
	if weight && (want.Weight <= st.Observed.Weight || r.canaryRevisionOK()) {
		r.d.Weight = Target{Set: true, Value: want.Weight}
	}
	if stable {
		r.d.StableCapacity = Target{Set: true, Value: want.StableCapacity}
	}
	if canary && (want.CanaryCapacity < st.Observed.Canary.Capacity || r.canaryRevisionOK() && r.canaryFromZeroOK()) {
		c := want.CanaryCapacity
		r.d.CanaryCapacity = Target{Set: true, Value: c, Steady: st.SteadyRequested && c == 100}
	}
	if !r.extrasApplied() && r.extrasFit(st.DesiredExtras) {
		r.d.Extras = true
	}
}

// extrasFit reports whether the router may be asked for extras x now: they
// put no more load on the canary than the extras it reports, or the
// canary's observed ready capacity covers their load at the larger of the
// desired and the observed weight.
func (r *run) extrasFit(x TrafficExtras) bool {
	st := r.st
	w := max(st.Desired.Weight, st.Observed.Weight)
	need := x.CanaryLoad(w)
	if need <= st.Observed.Extras.CanaryLoad(w) {
		return true
	}
	_, canary := r.e.mode.ready(r.facts())
	return need <= canary
}

// extrasAt is the extras in force at step i: the last header route and the
// last mirror at or before it, and the sticky sessions of this rollout.
func (r *run) extrasAt(i int) TrafficExtras {
	e := r.e
	var x TrafficExtras
	if e.canary {
		hdr, mir := false, false
		for j := min(i, len(e.steps)-1); j >= 0 && !(hdr && mir); j-- {
			s := &e.steps[j]
			if s.SetHeaderRoute != nil && !hdr {
				hdr = true
				if len(s.SetHeaderRoute.Matches) > 0 {
					x.HeaderRoute = s.SetHeaderRoute
				}
			}
			if s.SetMirror != nil && !mir {
				mir = true
				x.MirrorPercent = s.SetMirror.Percent
			}
		}
	}
	if e.affinity != nil {
		x.Sticky = r.sticky()
	}
	return x
}

// sticky is the session affinity of this rollout: its tickets are named by
// the canary revision and the instant the rollout started. A run already
// in force keeps its name, whatever that instant: above all one recovered
// from the route when a lost state was adopted (the route records the run
// it programs), so that no session gets a new ticket and flips sides. A
// run ends only when the rollout drops its extras (at weight 0 after a
// walk back, or at the end), so a new rollout gets a new run.
func (r *run) sticky() *Sticky {
	st := r.st
	want := Sticky{Run: runID(st.CanaryRevision, st.StartedAt), Grid: r.e.grid, Cookie: r.e.affinity.withDefaults()}
	if cur := st.DesiredExtras.Sticky; cur != nil && cur.Run != "" {
		want.Run = cur.Run
		if cur.equal(&want) {
			return cur
		}
	}
	return &want
}

// extrasTo moves the router's extras to x, in a hop of its own, once the
// canary's observed ready capacity covers the load they put on it at the
// desired weight (see TrafficExtras.CanaryLoad); in the managed mode the
// canary is first asked for that capacity, within the surge budget. Extras
// that put less load on the canary go at once. It reports whether x is in
// place.
func (r *run) extrasTo(x TrafficExtras) bool {
	st := r.st
	if st.DesiredExtras.Equal(x) {
		return true
	}
	w := st.Desired.Weight
	if need := x.CanaryLoad(w); need > st.DesiredExtras.CanaryLoad(w) {
		f := r.facts()
		if _, ready := r.e.mode.ready(f); need > ready {
			if h := r.e.mode.provide(f, need); h.kind == scaleCanary || h.kind == scaleStable {
				r.take(h, 0)
				return false
			}
			r.waitCapacity()
			st.Message = "waiting for canary ready capacity " + itoa(need) + " (the load of the header route or mirror at weight " + itoa(w) + "), " + itoa(ready) + " ready"
			return false
		}
	}
	st.DesiredExtras = *x.DeepCopy()
	r.d.Extras = true
	r.hopped()
	return false
}

// clearExtras asks the router to drop the header route and the mirror,
// keeping sticky sessions (see walkBack); it reports whether that changes
// anything.
func (r *run) clearExtras() bool {
	st := r.st
	x := TrafficExtras{Sticky: st.DesiredExtras.Sticky}
	if st.DesiredExtras.Equal(x) {
		return false
	}
	st.DesiredExtras = x
	r.d.Extras = true
	return true
}

// fits reports whether canary weight w would keep traffic within the
// observed ready capacity of both sides. An emergency walk back may always
// lower the weight.
func (r *run) fits(w int32) bool {
	st := r.st
	if st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency &&
		(w == 0 || w < st.Observed.Weight && !st.Observed.WeightInvalid) {
		return true
	}
	f := r.facts()
	stable, canary := r.e.mode.ready(f)
	return f.load(w) <= canary && 100-w <= stable
}

// countHealth counts a new observation's health and reports whether the
// unhealthy threshold is reached, with the reason to abort for. A canary
// whose ready capacity is below its traffic counts as unhealthy, whatever
// its health says: pods that crash after becoming ready often give no other
// signal.
func (r *run) countHealth() (bool, string) {
	st := r.st
	at := micro(st.Observed.At.Time)
	if st.Observed.At.IsZero() || !at.Time.After(st.HealthCheckedAt.Time) {
		return false, ""
	}
	st.HealthCheckedAt = at
	if st.Observed.Health == HealthInconclusive && !r.canaryShort {
		return false, "" // neither counts nor clears the unhealthy streak
	}
	if st.Observed.Health != HealthUnhealthy && !r.canaryShort {
		st.UnhealthyCount = 0
		return false, ""
	}
	st.UnhealthyCount++
	reason := ReasonUnhealthy
	if st.Observed.Health != HealthUnhealthy {
		reason = ReasonCanaryReadinessLost
	}
	return st.UnhealthyCount >= r.e.opts.unhealthyThreshold(), reason
}

func (r *run) abort(reason string) {
	if r.st.Phase == PhaseAborting || r.st.Phase.Terminal() {
		return
	}
	r.st.beginAbort(reason, micro(r.now))
	r.markEmergency()
}

// markEmergency sets Abort.Emergency when the options ask for it, copying
// the AbortStatus so the caller's state is not modified.
func (r *run) markEmergency() {
	st := r.st
	if st.Aborted != nil && !st.Aborted.Emergency && r.e.opts.AbortRamp == AbortEmergency &&
		st.Aborted.Reason != ReasonRetarget {
		a := *st.Aborted
		a.Emergency = true
		st.Aborted = &a
	}
}

// emergency sends all traffic to the stable side at once, and scales the
// stable side up within the surge budget (as far as the mover has a router
// and capacity setters), without waiting for the last hop. It reports
// whether it asked for anything.
func (r *run) emergency() bool {
	st := r.st
	extras := !st.DesiredExtras.Equal(TrafficExtras{Sticky: st.DesiredExtras.Sticky})
	if st.Desired.Weight == 0 && !extras {
		return false
	}
	ok, stable := r.e.mode.emergency(r.facts())
	if !ok {
		return false
	}
	if r.clearExtras() {
		r.hopped() // in the same update as the weight
	}
	if st.Desired.Weight != 0 {
		r.hopWeight(0)
	}
	r.take(stable, 0)
	st.Message = msgAborting
	return true
}

// enter starts step i now.
func (r *run) enter(i int32) {
	st := r.st
	st.StepIndex = i
	st.StepStartedAt = micro(r.now)
	st.PromoteRequested = false
	st.Gate = ""
	if st.PauseReason == ReasonPauseStep || st.PauseReason == ReasonGateInconclusive {
		st.AwaitingResume, st.PauseReason = false, ""
	}
	st.Resumed = false
	if r.e.canary {
		var buf [16]byte
		n := min(int(i)+1, len(r.e.steps))
		if h := stepsHash(r.e.steps[:n], &buf); string(h) != st.StepsHash {
			st.StepsHash = string(h)
		}
		if int(i) < len(r.e.steps) {
			// A hold of another kind (the spec's pause, a manual pause, an
			// unhealthy canary) stays: a Promote passes the pause step, never
			// that hold. The step holds the rollout once the hold ends.
			if p := r.e.steps[i].Pause; p != nil && p.Duration == nil && !st.AwaitingResume {
				st.AwaitingResume, st.PauseReason, st.PausedAt = true, ReasonPauseStep, micro(r.now)
			}
		}
	}
}

// effectiveWeight is the weight in force at step i: that of the last
// SetWeight at or before it, 0 if none.
func (e *engine) effectiveWeight(i int) int32 {
	for j := min(i, len(e.steps)-1); j >= 0; j-- {
		if w := e.steps[j].SetWeight; w != nil {
			return *w
		}
	}
	return 0
}

// checkSteps re-places the rollout when the steps up to and including the
// current one changed (an edit mid-rollout, or a Retry): it continues at the
// first step whose weight is >= the current weight, never at step 0 by
// default. Edits after the current step take effect without disturbing it.
func (r *run) checkSteps() {
	st := r.st
	var buf [16]byte
	n := min(int(st.StepIndex)+1, len(r.e.steps))
	if n < 0 {
		n = 0
	}
	if string(stepsHash(r.e.steps[:n], &buf)) == st.StepsHash && int(st.StepIndex) <= len(r.e.steps) && st.StepIndex >= 0 {
		return
	}
	i := len(r.e.steps)
	for j := range r.e.steps {
		if r.e.effectiveWeight(j) >= st.Desired.Weight {
			i = j
			break
		}
	}
	r.enter(int32(i))
}

func (r *run) progress() {
	st, e := r.st, r.e
	if st.AwaitingResume && st.PromoteRequested && (st.PauseReason == ReasonPauseStep || st.PauseReason == ReasonGateInconclusive) {
		st.AwaitingResume, st.PauseReason = false, ""
	}
	if st.AwaitingResume {
		st.Phase = PhasePaused
		switch st.PauseReason {
		case ReasonPauseStep:
			st.Message = msgPausedStep
		case ReasonGateInconclusive:
			st.Message = msgPausedGate
		case ReasonUnhealthy:
			st.Message = msgPausedUnhealthy
		case ReasonControlPause:
			st.Message = msgPausedControl
		default:
			st.Message = msgPausedManual
		}
		return
	}
	st.Phase = PhaseProgressing
	if r.stableShort {
		// The stable side lost readiness under its traffic: move nothing
		// until it recovers (Degraded says why).
		o := &st.Observed
		setShort(&st.Message, "stable", o.Stable.Ready, 100-o.Weight)
		r.d.RequeueAfter = e.opts.pollInterval()
		return
	}
	if st.Observed.Health == HealthUnhealthy || r.canaryShort {
		st.Message = msgUnhealthy
		if r.canaryShort {
			o := &st.Observed
			setShort(&st.Message, "canary", o.Canary.Ready, o.Weight)
		}
		r.d.RequeueAfter = e.opts.pollInterval()
		return
	}
	if st.Observed.Health == HealthInconclusive && st.Observed.Weight > 0 {
		// The canary has traffic but its health cannot be told: give it
		// no more until it can, within the progress deadline.
		r.holdInconclusive()
		return
	}
	if !r.onRevision() {
		return
	}
	if !r.extrasTo(r.extrasAt(int(st.StepIndex))) {
		return
	}
	if st.PromoteFullRequested {
		if r.move(100, 0, 0) {
			r.reached()
		}
		return
	}
	if !e.canary {
		end, waiting := r.intervalRunning(e.interval)
		waiting = waiting && st.Desired.Weight < 100 // at 100 nothing waits
		if !waiting && r.release() {
			return
		}
		if waiting {
			if !r.overlap(100, e.stepPct, end) {
				st.Message = msgWaitingInterval
				r.d.RequeueAfter = r.waitUntil(end)
			}
			return
		}
		if r.move(100, e.stepPct, e.interval) {
			r.reached()
		}
		return
	}
	for int(st.StepIndex) < len(e.steps) {
		i := st.StepIndex
		s := &e.steps[i]
		if !r.extrasTo(r.extrasAt(int(i))) {
			return // a header route or mirror step, or a step edited
		}
		switch {
		case s.SetWeight != nil:
			st.PromoteRequested = false // nothing to skip in a walk
			if !r.atWeight(*s.SetWeight) && !r.move(*s.SetWeight, 0, 0) {
				return
			}
		case s.Pause != nil && s.Pause.Duration != nil:
			end := after(st.StepStartedAt, s.Pause.Duration.Duration)
			if !st.PromoteRequested && r.now.Before(end) {
				st.Phase = PhasePaused
				if !r.overlap(e.weightAfter(int(i)), 0, end) {
					r.d.RequeueAfter = r.waitUntil(end)
				}
				st.Message = msgPausedStep
				return
			}
		case s.Pause != nil:
			if !st.PromoteRequested && !st.Resumed {
				st.AwaitingResume, st.PauseReason, st.PausedAt = true, ReasonPauseStep, micro(r.now)
				st.Phase = PhasePaused
				r.release()
				st.Message = msgPausedStep
				return
			}
		case s.Gate != nil:
			st.Gate = s.Gate.Name
			g := st.Observed.Gate(s.Gate.Name)
			if !g.At.IsZero() && micro(g.At.Time).Time.Before(st.StepStartedAt.Time) {
				g.Verdict = VerdictPending // stale: from an earlier run of this gate
			}
			if !st.PromoteRequested && !st.Resumed {
				switch g.Verdict {
				case VerdictPass:
				case VerdictFail:
					st.Gate = ""
					r.abort(ReasonGateFailed)
					r.walkBack()
					return
				case VerdictInconclusive:
					st.AwaitingResume, st.PauseReason, st.PausedAt = true, ReasonGateInconclusive, micro(r.now)
					st.Phase = PhasePaused
					st.Message = msgPausedGate
					return
				default:
					if !r.release() {
						r.deadline(true) // a verdict that never comes is a stuck rollout too
					}
					st.Message = msgWaitingGate
					return
				}
			}
		}
		r.enter(i + 1)
	}
	if r.move(100, 0, 0) {
		r.reached()
	}
}

// atWeight reports whether the weight asked for is t and observed in force:
// a SetWeight step is complete then, even where the mover still has
// capacity to release (see release), which the wait that follows does.
func (r *run) atWeight(t int32) bool {
	return r.st.Desired.Weight == t && r.e.mode.weightApplied(r.facts())
}

// release asks for the scale-down of capacity the weight in force no longer
// needs, as soon as that weight is observed applied (see mover.release). It
// reports whether it asked for a hop.
func (r *run) release() bool {
	h := r.e.mode.release(r.facts())
	if !h.scales() {
		return false
	}
	r.take(h, 0)
	return true
}

// overlap puts a wait that ends at end (a timed pause, an interval) to use
// before the walk toward canary weight t, each weight hop bounded by limit,
// goes on: it releases what the weight in force no longer needs, then asks
// for the capacity the walk's next weight needs, within the surge budget,
// as late as it can be asked and still be ready when the wait ends (the
// canary's Pace; as soon as the wait begins while that is unknown). Until
// then it leaves r.prepIn set. A wait too short to release and then
// prepare (less left than both sides' paces: the stable side's taken as
// the canary's until observed) asks for both in one decision when
// preparing is due, if the budget holds them with the stable side counted
// at the capacity it still has. It reports whether it asked for a hop.
func (r *run) overlap(t, limit int32, end time.Time) bool {
	f := r.facts()
	rel := r.e.mode.release(f)
	if t <= f.want.Weight {
		// Nothing to prepare: only the release.
		return r.release()
	}
	lead, known := r.st.Pace.CanarySettle.Duration, r.st.Pace.CanarySettle.Duration > 0
	if lead <= time.Microsecond {
		lead = 0 // observed ready at once (see Pace): prepared when the wait ends
	}
	settle := r.st.Pace.StableSettle.Duration
	if settle <= 0 {
		settle = lead // unknown: a scale-down taken to settle no faster than a scale-up
	}
	if rel.scales() && (!known || end.Sub(r.now) >= settle+lead) {
		r.take(rel, 0) // time enough to release, then prepare
		return true
	}
	after := f
	if rel.kind == scaleStable {
		after.want.StableCapacity = rel.to
	}
	h := r.e.mode.next(after, t, limit)
	switch {
	case h.kind != scaleCanary || h.to <= f.want.CanaryCapacity:
		// The capacity is there, or the walk moves weight first.
		return r.release()
	case rel.scales() && h.to+max(f.stable.Capacity, f.want.StableCapacity) > 100+f.surge:
		return r.release() // no room for both: the release first
	}
	if start := end.Add(-lead); known && r.now.Before(start) {
		r.prepIn = start.Sub(r.now)
		return false
	}
	r.release()
	r.take(h, 0)
	return true
}

// waitUntil is the requeue of a wait that ends at end: then, or sooner when
// overlap prepares capacity before it.
func (r *run) waitUntil(end time.Time) time.Duration {
	d := end.Sub(r.now)
	if r.prepIn > 0 {
		d = min(d, r.prepIn)
	}
	return d
}

// intervalRunning reports whether a weight hop must wait for the interval
// (counted from intervalStart; a promote skips it), and when that wait
// ends.
func (r *run) intervalRunning(interval time.Duration) (time.Time, bool) {
	st := r.st
	if interval <= 0 || st.PromoteRequested || st.WeightChangedAt.IsZero() {
		return time.Time{}, false
	}
	end := st.intervalStart().Add(interval)
	return end, r.now.Before(end)
}

// weightAfter is the weight the steps walk to after step i, when what
// follows it is a SetWeight (or the end: 100); -1 when a gate, a pause or
// a change of extras comes first, whose end cannot be timed.
func (e *engine) weightAfter(i int) int32 {
	if i+1 >= len(e.steps) {
		return 100
	}
	if w := e.steps[i+1].SetWeight; w != nil {
		return *w
	}
	return -1
}

// holdInconclusive holds a canary with traffic whose health cannot be told
// (HealthInconclusive) and counts the hold toward the progress deadline
// from holdDue: once the deadline passes the rollout is Degraded
// (ProgressDeadlineExceeded), and aborts if AbortOnProgressDeadline. A hold
// that ends before then costs nothing more than its wait.
func (r *run) holdInconclusive() {
	st, o := r.st, r.e.opts
	st.Message = msgInconclusive
	wait := o.pollInterval()
	if due, bounded := r.holdDue(); bounded && o.progressDeadline() > 0 {
		end := due.Add(o.progressDeadline())
		if !r.now.Before(end) {
			r.overdue = true
			if o.AbortOnProgressDeadline {
				r.abort(ReasonProgressDeadlineExceeded)
				r.d.RequeueAfter = wait
				r.walkBack()
				return
			}
		} else if left := end.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.d.RequeueAfter = wait
}

// holdDue is when the rollout would have moved on had the canary's health
// been known: when the wait for the world began (waitingSince: the last
// hop, the start of the step, the last command), or later when the timed
// waits it was in end: the step interval since the last weight hop
// (Incremental) or the timed pauses the steps hold next (Canary: a pause
// step in progress counts from its start; the pauses that follow a
// SetWeight already reached, from the start of the wait). A promotion
// skips them. So an inconclusive health during a pause or an interval
// costs none of the deadline; only the time the hold adds does. It reports
// false when the steps ahead pause until resumed: the rollout would not
// have moved on by itself, and such a pause has no deadline either.
func (r *run) holdDue() (time.Time, bool) {
	st, e := r.st, r.e
	due := r.waitingSince()
	if st.PromoteRequested || st.PromoteFullRequested {
		return due, true
	}
	if !e.canary {
		if e.interval > 0 && !st.WeightChangedAt.IsZero() {
			if end := st.intervalStart().Add(e.interval); end.After(due) {
				due = end
			}
		}
		return due, true
	}
	for i := int(st.StepIndex); i >= 0 && i < len(e.steps); i++ {
		s := &e.steps[i]
		switch {
		case s.SetWeight != nil && *s.SetWeight == st.Desired.Weight:
			// Reached: the next step would begin.
		case s.Pause != nil && s.Pause.Duration != nil:
			start := due
			if i == int(st.StepIndex) {
				start = st.StepStartedAt.Time
			}
			if end := start.Add(s.Pause.Duration.Duration); end.After(due) {
				due = end
			}
		case s.Pause != nil:
			return due, i == int(st.StepIndex) && st.Resumed
		default:
			return due, true // a hop or a gate
		}
	}
	return due, true
}

// reached is called when all traffic is observed on the canary.
func (r *run) reached() {
	st := r.st
	st.Phase = PhaseCompleting
	st.ReachedAt = micro(r.now)
	st.PromoteRequested, st.PromoteFullRequested = false, false
	r.complete()
}

func (r *run) complete() {
	st, o := r.st, r.e.opts
	if st.AwaitingResume {
		st.Message = msgPausedManual
		if st.PauseReason == ReasonControlPause {
			st.Message = msgPausedControl
		}
		return
	}
	if !st.DesiredExtras.IsZero() {
		// All traffic is on the canary: the extras have nothing left to
		// do; the router removes them before the sides move.
		st.DesiredExtras = TrafficExtras{}
		r.d.Extras = true
		r.hopped()
		return
	}
	drain, release := r.e.mode.completion()
	if drain && st.Desired.StableCapacity > 0 {
		if end := after(st.ReachedAt, o.ScaleDownDelay.Duration); r.now.Before(end) {
			st.Message = msgScaleDownDelay
			r.d.RequeueAfter = end.Sub(r.now)
			return
		}
		r.hopStable(0)
	}
	if release && !st.SteadyRequested {
		st.SteadyRequested = true
		r.d.CanaryCapacity = Target{Set: true, Value: 100, Steady: true}
		st.Desired.CanaryCapacity = 100
		r.hopped()
		return
	}
	if r.d.HasHops() {
		return
	}
	r.succeed()
}

// succeed ends the rollout: the canary becomes the stable and the roles swap.
func (r *run) succeed() {
	st := r.st
	st.Phase = PhaseSucceeded
	st.FinishedAt = micro(r.now)
	oldStable := st.StableRevision
	st.StableRevision = st.CanaryRevision
	st.StableSide = st.StableSide.Other()
	st.Desired = Allocation{
		Weight:         100 - st.Desired.Weight,
		StableCapacity: st.Desired.CanaryCapacity,
		CanaryCapacity: st.Desired.StableCapacity,
	}
	st.Observed.Weight = 100 - st.Observed.Weight
	st.Observed.Stable, st.Observed.Canary = st.Observed.Canary, st.Observed.Stable
	st.swapRevisions(oldStable)
	st.SteadyRequested = false
	st.Pace = Pace{} // learned of the roles that just swapped
	st.Message = msgDone
}

// walkBack moves traffic and capacity back to the stable side.
func (r *run) walkBack() {
	st, e := r.st, r.e
	st.Phase = PhaseAborting
	st.Message = msgAborting
	if r.clearExtras() {
		// The header route and the mirror go first, in a hop of their own
		// observed before the weight walks back; sticky sessions follow the
		// weight down (a session leaves the canary once the weight falls
		// below its ticket) and go once it is 0.
		r.hopped()
		return
	}
	gradual := e.opts.AbortRamp == AbortGradual
	for {
		t := int32(0)
		if gradual && e.canary {
			for j := range e.steps {
				if w := e.steps[j].SetWeight; w != nil && *w < st.Desired.Weight && *w > t {
					t = *w
				}
			}
		}
		var limit int32
		var interval time.Duration
		if gradual {
			limit, interval = e.stepPct, e.interval
		}
		if !r.move(t, limit, interval) {
			return
		}
		if t == 0 {
			break
		}
	}
	if h := e.mode.restore(r.facts()); h.kind != arrived {
		r.take(h, 0)
		return
	}
	if !r.applied() {
		r.waitApplied() // the last hops of the walk back, observed before the end
		return
	}
	if !st.DesiredExtras.IsZero() {
		st.DesiredExtras = TrafficExtras{} // every session is on the stable side: drop the tickets' rules
		r.d.Extras = true
		r.hopped()
		return
	}
	r.d.RequeueAfter = 0
	st.FinishedAt = micro(r.now)
	st.Pace = Pace{} // a walk back that ends has nothing left to time
	switch pending := st.PendingRevision; {
	case pending == "":
		st.Phase = PhaseAborted
		st.Message = ReasonAborted
	case pending == st.StableRevision:
		st.Phase = PhaseRolledBack
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.Aborted = nil
		st.Message = ReasonRolledBack
	case st.Aborted != nil && st.Aborted.Reason != ReasonRetarget:
		// An Abort came during the walk back to a new revision: the new
		// revision does not start; it is the canary a Retry starts.
		st.Phase = PhaseAborted
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.Message = ReasonAborted
	default:
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.Aborted = nil
		st.FinishedAt = metav1.MicroTime{}
		st.Phase = PhaseProgressing
		st.UnhealthyCount = 0
		r.enter(0)
		r.progress()
	}
}

// move walks toward canary weight t, one hop at a time, and reports whether
// t is reached with nothing left to do. limit bounds one weight hop (0: no
// bound); interval is the least time between two weight hops. The mover
// decides each hop; move makes it.
func (r *run) move(t, limit int32, interval time.Duration) bool {
	h := r.e.mode.next(r.facts(), t, limit)
	if h.kind == arrived {
		return true
	}
	r.take(h, interval)
	return false
}

// take makes a hop a mover decided. A weight hop waits for interval first.
func (r *run) take(h hop, interval time.Duration) {
	switch h.kind {
	case shiftWeight:
		r.weightHop(h.to, interval)
	case shiftReplicas:
		r.replicaHop(h.to, interval)
	case scaleStable:
		r.hopStable(h.to)
	case scaleCanary:
		r.hopCanary(h.to)
	case awaitRoute:
		r.waitApplied()
	case awaitReady:
		r.waitCapacity()
	}
}

// noteWeightApplied records, for a strategy with an interval, what this
// Step's observation shows of the latest weight hop (see
// State.WeightAppliedAt and State.WeightPendingAt): the instant its weight
// was first observed in force, if that is within the interval since the
// hop or since a Step last saw it pending; else the instant it was seen
// pending.
func (r *run) noteWeightApplied() {
	st, iv := r.st, r.e.interval
	if iv <= 0 || st.WeightChangedAt.IsZero() || !st.WeightAppliedAt.Time.Before(st.WeightChangedAt.Time) {
		return
	}
	at := st.Observed.At.Time
	if st.Observed.At.IsZero() || at.After(r.now) {
		at = r.now
	}
	if at.Before(st.WeightChangedAt.Time) {
		at = st.WeightChangedAt.Time
	}
	if !r.e.mode.weightApplied(r.facts()) || !r.extrasApplied() {
		if st.Phase != PhaseAborting {
			// Only a Step that then waits for the hop to be applied (and
			// so looks again soon) notes it pending: a walk back goes on
			// once the route holds the weight, and sleeps the interval.
			st.WeightPendingAt = micro(at)
		}
		return
	}
	limit := after(st.WeightChangedAt, iv)
	if p := st.WeightPendingAt.Time; !p.Before(st.WeightChangedAt.Time) && p.Add(iv).After(limit) {
		limit = p.Add(iv)
	}
	if at.Before(limit) {
		st.WeightAppliedAt = micro(at)
	}
}

// intervalStart is the instant the interval since the latest weight hop
// counts from: when its weight was first observed in force, if recorded,
// else when it was decided.
func (s *State) intervalStart() time.Time {
	start := s.WeightChangedAt.Time
	if a := s.WeightAppliedAt.Time; a.After(start) {
		return a
	}
	return start
}

// NextWeightHopAt returns the earliest instant at which an Incremental
// strategy with this interval may move the weight again: the interval
// counted from the latest weight hop's weight first observed in force
// (WeightAppliedAt), or from the hop itself (WeightChangedAt) when that is
// not recorded. It returns the zero time when no weight hop is recorded.
// Step may move later (it waits for the world too) and a promote moves
// sooner.
func (s *State) NextWeightHopAt(interval time.Duration) time.Time {
	if s.WeightChangedAt.IsZero() {
		return time.Time{}
	}
	return s.intervalStart().Add(interval)
}

// intervalWait reports whether a weight hop must wait for the interval, and
// if so sets the exact requeue. The interval counts from intervalStart.
func (r *run) intervalWait(interval time.Duration) bool {
	end, waiting := r.intervalRunning(interval)
	if waiting {
		r.st.Message = msgWaitingInterval
		r.d.RequeueAfter = end.Sub(r.now)
	}
	return waiting
}

func (r *run) weightHop(w int32, interval time.Duration) {
	if r.intervalWait(interval) {
		return
	}
	r.hopWeight(w)
	r.st.PromoteRequested = false
}

func (r *run) waitCapacity() {
	r.st.Message = msgWaitingCapacity
	r.deadline(true)
}

func (r *run) hopped() {
	r.st.HopAt = micro(r.now)
	r.poll(r.now, r.e.opts.pollInterval())
	if r.st.Phase != PhaseAborting {
		r.st.Message = ReasonProgressing
	}
}

func (r *run) hopWeight(w int32) {
	r.d.Weight = Target{Set: true, Value: w}
	r.st.Desired.Weight = w
	r.st.WeightChangedAt, r.st.WeightAppliedAt, r.st.WeightPendingAt = micro(r.now), metav1.MicroTime{}, metav1.MicroTime{}
	r.hopped()
}

func (r *run) hopStable(c int32) {
	r.d.StableCapacity = Target{Set: true, Value: c}
	r.st.Pace.StableAskedAt = micro(r.now)
	r.st.Desired.StableCapacity = c
	r.hopped()
}

func (r *run) hopCanary(c int32) {
	r.d.CanaryCapacity = Target{Set: true, Value: c}
	r.st.Pace.CanaryAskedAt = micro(r.now)
	r.st.Desired.CanaryCapacity = c
	r.hopped()
}

// notePace records how long a capacity hop took, once its side is first
// observed settled at the capacity asked (see Pace).
func (r *run) notePace() {
	st := r.st
	at := st.Observed.At.Time
	if st.Observed.At.IsZero() || at.After(r.now) {
		at = r.now
	}
	for _, s := range [...]struct {
		asked *metav1.MicroTime
		took  *metav1.Duration
		side  *SideObservation
		want  int32
	}{
		{&st.Pace.StableAskedAt, &st.Pace.StableSettle, &st.Observed.Stable, st.Desired.StableCapacity},
		{&st.Pace.CanaryAskedAt, &st.Pace.CanarySettle, &st.Observed.Canary, st.Desired.CanaryCapacity},
	} {
		if s.asked.IsZero() || !s.side.Settled || s.side.Capacity != s.want {
			continue
		}
		// At least a microsecond, the State's resolution: zero means
		// not yet observed.
		*s.took = metav1.Duration{Duration: max(time.Microsecond, at.Sub(s.asked.Time))}
		*s.asked = metav1.MicroTime{}
	}
}
