package strategy

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Adoption. A state that has not observed the world (State.Unobserved: the
// zero State after a Retarget, a status wiped or re-created) names only the
// revision the spec asks for. Its first Step with an observation adopts the
// world as it is, and asks for nothing:
//
//   - all traffic on one side (applied on an accepted route) whose observed
//     revision is the spec's, fully rolled out: the idle state, with that
//     side as the stable side;
//   - the spec's revision on one side while the other carries traffic: the
//     rollout in progress from the other side's observed revision, at the
//     observed weight and capacities (continuing at the first canary step
//     whose weight is >= the observed weight);
//   - the spec's revision on no side, all traffic on one side and the other
//     idle at zero (no traffic, no capacity: upshift installed on a serving
//     application): the rollout from the serving side, whatever it runs
//     (its observed revision, or "" for one its reader does not
//     recognise), toward the spec's revision at weight 0, which deploys it
//     on the idle side at zero, observes it and ramps;
//   - the spec's revision on no side otherwise: a walk back to the side
//     that carries the most traffic (its observed revision is the stable
//     one), after which the spec's revision is deployed and rolled out as
//     after a Retarget; with all traffic there already, the walk back only
//     takes the other side's capacity away;
//   - without revisions in the observation: all traffic on one side is
//     adopted as the idle state there; a split is held (below).
//
// Requests recorded before the adoption act on the adopted rollout: an Abort
// turns it into a walk back (one to a new revision then ends Aborted with
// that revision as the canary), Paused and Promote hold or pass its steps. On
// an adopted idle state they have nothing to act on and are dropped.
//
// A side whose reader recognises no revision (one that recognises only the
// revision it is asked about, as a template compared with the spec's) is
// adopted as the stable side of a rollout toward the spec's revision, with
// an unknown stable revision (""): traffic only moves off it, except in a
// walk back, which returns traffic to the stable side whatever it runs.
//
// What cannot be adopted safely is held, with nothing asked: an adapter
// error, a route the data plane has not accepted yet, the spec's revision
// still rolling out on the side with all traffic (Progressing, reason
// Adopting, until the progress deadline, then Degraded); weights that are
// not a split of 100, the spec's revision on no side while the side with
// the most traffic (but not all of it) runs no revision its reader
// recognises, a split route
// whose sides do not report revisions (Degraded, reason AdoptionBlocked,
// naming what was observed) until the world changes (a person moves all
// traffic to one side, say).

// adoptSide is one physical side as the adoption sees it.
type adoptSide struct {
	side  Side
	obs   SideObservation
	share int32 // the traffic it carries, in percent
}

// adopt is the Step of an Unobserved state.
func (r *run) adopt() {
	st, o := r.st, &r.st.Observed
	spec := st.CanaryRevision
	if o.Error != "" && o.Claimed {
		// Refused by another rollout's claim: nothing is observed, and
		// nothing of this one fails; it waits for the claim with no
		// deadline, Degraded with reason Claimed naming the holder.
		r.failed = true
		setJoined(&st.Message, "refused: ", o.Error)
		r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonAdopting, st.Message)
		r.setCond(ConditionDegraded, metav1.ConditionTrue, ReasonClaimed, o.Error)
		r.d.RequeueAfter, r.d.WatchedRequeueAfter = r.e.opts.pollInterval(), r.e.opts.pollInterval()
		return
	}
	if o.Error != "" {
		r.failed = true
		if st.FailingSince.IsZero() {
			st.FailingSince = micro(r.now)
		}
		r.adoptWait("cannot observe the adapters to adopt the rollout: "+o.Error, ReasonObservationFailed)
		return
	}
	st.FailingSince = metav1.MicroTime{}
	stableSide := st.stableSide()
	stable := adoptSide{side: stableSide, obs: o.Stable}
	canary := adoptSide{side: stableSide.Other(), obs: o.Canary}
	split := false
	switch {
	case r.e.opts.Capacity == CapacityReplicas:
		// Traffic follows ready replicas: a side serves, or may soon,
		// when it holds capacity or is still moving.
		onStable := o.Stable.Capacity > 0 || o.Stable.Ready > 0 || !o.Stable.Settled
		onCanary := o.Canary.Capacity > 0 || o.Canary.Ready > 0 || !o.Canary.Settled
		switch {
		case !onCanary:
			stable.share = 100
		case !onStable:
			canary.share = 100
		default:
			// Both serve: each its share of the ready replicas (of the
			// capacity while none is ready), never all.
			split = true
			sc, cc := max(o.Stable.Ready, 0), max(o.Canary.Ready, 0)
			if sc+cc == 0 {
				sc, cc = max(o.Stable.Capacity, 0), max(o.Canary.Capacity, 0)
			}
			canary.share = 50
			if sc+cc > 0 {
				canary.share = min(max(cc*100/(sc+cc), 1), 99)
			}
			stable.share = 100 - canary.share
		}
	case o.WeightInvalid:
		r.adoptHold(fmt.Sprintf("the route's weights are not a split of 100 (side %s at %d): fix the route to adopt it", canary.side, o.Weight))
		return
	case !o.WeightApplied:
		r.adoptWait("waiting for the data plane to accept the route before adopting it", "")
		return
	default:
		canary.share, stable.share = o.Weight, 100-o.Weight
		split = o.Weight != 0 && o.Weight != 100
	}
	all := &stable // the side with the most traffic; the stable role's on a tie
	other := &canary
	if canary.share > stable.share {
		all, other = &canary, &stable
	}
	if !o.Revisions {
		if split {
			r.adoptHold(fmt.Sprintf("traffic is split %d/%d between sides %s and %s, which do not report the revisions they run: move all traffic to the side that runs %s to adopt it",
				stable.share, canary.share, stable.side, canary.side, spec))
			return
		}
		r.adoptIdle(all.side)
		return
	}
	if all.share == 100 && all.obs.Revision == spec {
		if !all.obs.Updated {
			r.adoptWait(fmt.Sprintf("side %s carries all traffic and is rolling %s out: waiting for it to finish before adopting it", all.side, spec), "")
			return
		}
		r.adoptIdle(all.side)
		return
	}
	switch {
	case all.obs.Revision == spec && other.obs.Revision == spec:
		// Both run it: finish on the side that carries the most traffic.
		r.adoptRollout(other, all, spec, "")
	case all.obs.Revision == spec:
		// The other side may run a revision its reader does not recognise
		// (one that recognises only the revision it is asked about): the
		// stable revision is then unknown (""), and the rollout moves
		// traffic off it.
		r.adoptRollout(other, all, spec, "")
	case other.obs.Revision == spec:
		r.adoptRollout(all, other, spec, "")
	case all.share == 100 && r.idleAtZero(other):
		// Installed on a serving application: one side serves everything
		// (whatever it runs, recognised or not), the other is idle at
		// zero. The serving side is the stable one, and the spec's
		// revision rolls out on the idle side: deployed there at zero,
		// observed, then ramped.
		r.adoptRollout(all, other, spec, "")
	case all.obs.Revision == "" && all.share < 100:
		r.adoptHold(fmt.Sprintf("side %s carries %d%% of traffic and runs no revision it recognises, and no side runs %s: put a revision back on it to adopt the rollout", all.side, all.share, spec))
	default:
		// The spec's revision runs nowhere: walk back to the side with the
		// most traffic, then roll the spec's revision out on the other.
		r.adoptRollout(all, other, other.obs.Revision, spec)
	}
}

// idleAtZero reports whether the adoption's side sd carries nothing: no
// traffic and, with capacity setters, no capacity asked, none ready and
// none on its way (settled), so that a revision may be deployed on it at
// once.
func (r *run) idleAtZero(sd *adoptSide) bool {
	if sd.share != 0 {
		return false
	}
	if r.e.opts.Capacity == CapacityFixed {
		return true
	}
	return sd.obs.Capacity <= 0 && sd.obs.Ready <= 0 && sd.obs.Settled
}

// adoptIdle adopts the world as the idle state with side as the stable side.
func (r *run) adoptIdle(side Side) {
	st := r.st
	n := NewState(st.CanaryRevision, st.CanaryRevision)
	n.StableSide = side
	n.Conditions, n.Handled, n.LastCommandAt = st.Conditions, st.Handled, st.LastCommandAt
	n.Observed = st.Observed
	if side != st.stableSide() {
		n.Observed.swapRoles()
	}
	n.Message = msgIdle
	*st = n
	r.setCond(ConditionProgressing, metav1.ConditionFalse, ReasonIdle, msgIdle)
	r.setCond(ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, msgDegradedClear)
}

// stableSide is the physical side of the stable role: StableSide, SideA when
// unset.
func (s *State) stableSide() Side {
	if s.StableSide == "" {
		return SideA
	}
	return s.StableSide
}

// swapRoles exchanges the two roles of an observation.
func (o *Observation) swapRoles() {
	o.Stable, o.Canary = o.Canary, o.Stable
	o.Weight = 100 - o.Weight
}

// adoptRollout adopts the world as a rollout from side from (the stable
// role, running what it is observed running) to side to (the canary role,
// running canaryRev), at the observed weight and capacities. With pending
// set it is a walk back from canaryRev, after which pending rolls out.
func (r *run) adoptRollout(from, to *adoptSide, canaryRev, pending string) {
	st, o := r.st, &r.st.Observed
	if from.side != st.stableSide() {
		o.swapRoles()
	}
	st.Unobserved = false
	st.StableSide = from.side
	st.StableRevision = from.obs.Revision
	if canaryRev == "" {
		canaryRev = pending
	}
	st.CanaryRevision, st.PendingRevision = canaryRev, pending
	w := to.share
	a := Allocation{Weight: w, CanaryRevision: to.obs.Revision}
	switch r.e.opts.Capacity {
	case CapacityFixed:
		a.StableCapacity, a.CanaryCapacity = o.Stable.Capacity, o.Canary.Capacity
	case CapacityReplicas:
		a.StableCapacity, a.CanaryCapacity = o.Stable.Capacity, o.Canary.Capacity
		a.Weight = a.CanaryCapacity
	default:
		a.StableCapacity, a.CanaryCapacity = max(o.Stable.Capacity, 100-w), max(o.Canary.Capacity, w)
	}
	a.StableCapacity, a.CanaryCapacity = min(max(a.StableCapacity, 0), 100), min(max(a.CanaryCapacity, 0), 100)
	st.Desired = a
	// Extras the router shows are what was asked: the steps move them on.
	st.DesiredExtras = *o.Extras.DeepCopy()
	now := micro(r.now)
	st.becomeProgressing()
	st.StartedAt, st.StepStartedAt, st.WeightChangedAt = now, now, metav1.MicroTime{}
	if w > 0 {
		// When the weight moved is unknown: an interval counts from now.
		// At weight 0 no weight has moved, and the first hop waits for none.
		st.WeightChangedAt = now
	}
	st.WeightAppliedAt, st.WeightPendingAt = metav1.MicroTime{}, metav1.MicroTime{}
	st.HopAt, st.ReachedAt, st.FinishedAt = metav1.MicroTime{}, metav1.MicroTime{}, metav1.MicroTime{}
	st.StepIndex, st.StepsHash = 0, ""
	if r.e.canary {
		i := int32(len(r.e.steps))
		for j := range r.e.steps {
			if r.e.effectiveWeight(j) >= a.Weight {
				i = int32(j)
				break
			}
		}
		promote := st.PromoteRequested
		r.enter(i)
		st.PromoteRequested = promote
	}
	switch {
	case pending != "":
		reason, at := ReasonRetarget, now
		if st.Aborted != nil {
			reason, at = st.Aborted.Reason, st.Aborted.At // an abort requested before the adoption
		}
		st.dropAbort()
		st.becomeAborting(reason, at)
		st.Message = fmt.Sprintf("adopted: %s runs on no side; walking traffic back to side %s (%s) before rolling it out", pending, from.side, from.obs.Revision)
	case st.Aborted != nil:
		a := *st.Aborted
		st.dropAbort()
		st.becomeAborting(a.Reason, a.At)
		st.Message = fmt.Sprintf("adopted the rollout from %s (side %s) to %s (side %s) at weight %d; aborting as requested", revName(st.StableRevision), from.side, canaryRev, to.side, w)
	default:
		if st.AwaitingResume {
			st.becomePaused()
		}
		st.Message = fmt.Sprintf("adopted the rollout from %s (side %s) to %s (side %s) at weight %d", revName(st.StableRevision), from.side, canaryRev, to.side, w)
	}
	r.markEmergency()
	r.conditions()
	r.adoptRequeue()
}

// revName names a revision in a message; "" is one no reader recognises.
func revName(rev string) string {
	if rev == "" {
		return "an unrecognised revision"
	}
	return rev
}

// adoptWait keeps the state unobserved while the world cannot be adopted
// yet; the progress deadline counts from the Retarget. degraded, when set,
// is the reason of a Degraded condition to report at once.
func (r *run) adoptWait(msg, degraded string) {
	st, o := r.st, r.e.opts
	st.Message = msg
	wait := o.pollInterval()
	since := st.LastCommandAt.Time
	if !st.FailingSince.IsZero() && st.FailingSince.Time.Before(since) {
		since = st.FailingSince.Time
	}
	if dl := o.progressDeadline(); dl > 0 && !since.IsZero() {
		if end := since.Add(dl); !r.now.Before(end) {
			r.overdue = true
		} else if left := end.Sub(r.now); left < wait {
			wait = left
		}
	}
	r.setCond(ConditionProgressing, metav1.ConditionTrue, ReasonAdopting, msg)
	switch {
	case r.overdue:
		r.setCondJoined(ConditionDegraded, metav1.ConditionTrue, ReasonProgressDeadlineExceeded, msgDeadline+": ", msg)
	case degraded != "":
		r.setCond(ConditionDegraded, metav1.ConditionTrue, degraded, msg)
	default:
		r.setCond(ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, msgDegradedClear)
	}
	r.d.RequeueAfter, r.d.WatchedRequeueAfter = wait, wait
	if degraded == "" && !r.overdue {
		// Waiting for the world to move by itself: poll as after a hop.
		r.d.RequeueAfter = min(wait, o.initialPollInterval())
	}
}

// adoptHold keeps the state unobserved on a world it cannot adopt: Degraded
// (AdoptionBlocked) naming what was observed.
func (r *run) adoptHold(msg string) { r.adoptWait(msg, ReasonAdoptionBlocked) }

// adoptRequeue asks for the next Step soon after an adoption: the adopted
// state has just been observed, and goes on from there.
func (r *run) adoptRequeue() {
	wait := r.e.opts.initialPollInterval()
	r.d.RequeueAfter, r.d.WatchedRequeueAfter = wait, wait
}
