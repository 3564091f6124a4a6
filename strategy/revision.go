package strategy

import "strings"

// Revisions on sides. While the observation reports the revisions the sides
// run (Observation.Revisions), the engine keeps every side on its role's
// revision:
//
//   - the canary revision is deployed on the canary side (Decision.Deploy)
//     only while that side carries weight 0, as observed on an accepted
//     route, and, where capacity setters exist, is settled at capacity 0:
//     a side's revision never changes under traffic, and an upgrade costs
//     no more than the surge budget;
//   - no capacity and no weight move onto the canary side before it is
//     observed running the canary revision, fully rolled out;
//   - a canary side observed running another revision while it carries
//     traffic or capacity (someone redeployed it) is walked back: the
//     rollout aborts with reason RevisionChanged;
//   - nothing moves forward while the stable side is observed running
//     another revision than the stable one (Degraded, StableRevisionMismatch);
//   - a deploy that never rolls out is bounded by the progress deadline.

// revisionChanged reports a canary side that carries traffic or capacity
// (asked, or in the route's spec and the side's status: a route the data
// plane has not accepted yet does not make a side at zero look busy)
// (in any phase but a walk back, which is already taking them away) while
// it is observed running another revision than the canary one: someone
// redeployed it. The caller aborts with ReasonRevisionChanged.
func (r *run) revisionChanged() bool {
	st := r.st
	o := &st.Observed
	return o.Revisions && o.Canary.Revision != st.CanaryRevision && !st.Phase.Terminal() &&
		st.Phase != "" && r.e.mode.carries(r.facts())
}

// keepHeld lets a walk back keep a canary side that already holds less
// capacity than desired (the write of a reconcile whose state was lost,
// landed after a later hop was recorded), as long as that covers the
// traffic it may receive: the walk back wants it lower anyway, and asking
// it back up would add capacity to a side that may not run the canary
// revision. (A stable side that holds more than desired counts as held:
// see sidesHeldBack.) In the Replicas mode the weight mirrors the canary's
// capacity and follows it down. The mover decides (nothing without
// capacity setters).
func (r *run) keepHeld() {
	st := r.st
	o := &st.Observed
	if st.Phase != PhaseAborting || o.Canary.Capacity >= st.Desired.CanaryCapacity {
		return
	}
	if a, ok := r.e.mode.keepHeld(r.facts()); ok {
		st.Desired = a
	}
}

// onRevision reports whether both sides run their roles' revisions, so that
// the walk toward the canary may go on. Otherwise it deploys the canary
// revision on the canary side (at zero), or waits for it to roll out.
func (r *run) onRevision() bool {
	st := r.st
	o := &st.Observed
	if !o.Revisions {
		return true
	}
	if o.Stable.Revision != st.StableRevision {
		r.stableRevision = true
		stableMismatch(&st.Message, st.StableSide, o.Stable.Revision, st.StableRevision)
		r.stableRevisionMsg = st.Message
		r.deadline(true)
		return false
	}
	want := st.CanaryRevision
	zero := r.e.mode.atZero(r.facts())
	if o.Canary.Revision == want && (o.Canary.Updated || !zero) {
		if st.Desired.CanaryRevision != want {
			st.Desired.CanaryRevision = want // observed running it: nothing to deploy
		}
		return true
	}
	// At zero (revisionChanged walked anything else back): deploy, or wait
	// for the deploy to roll out.
	asked := st.Desired.CanaryRevision == want
	if asked && (o.Canary.Revision == want ||
		!st.HopAt.IsZero() && r.now.Before(after(st.HopAt, r.e.opts.pollInterval()))) {
		st.Message = msgWaitingRevision
		r.deadline(true)
		return false
	}
	// Not asked yet, or asked and not observed after a poll interval (a
	// lost write): ask again. Deploy is idempotent. A repeat does not
	// restart the progress deadline.
	r.d.Deploy = DeployTarget{Set: true, Revision: want}
	if asked {
		st.Message = msgWaitingRevision
		r.deadline(true)
		return false
	}
	st.Desired.CanaryRevision = want
	r.hopped()
	st.Message = msgDeploying
	return false
}

// stableMismatch sets *msg to the message of a stable side observed
// running observed instead of the stable revision want, naming the side,
// what it was observed running and what it should run ("stable side A
// runs v0, want v1: holding"; for an empty observed, "stable side A runs
// no revision its adapter recognises (it reported ""), want v1:
// holding"). It joins the message only when *msg differs, so a Step that
// keeps holding allocates nothing.
func stableMismatch(msg *string, side Side, observed, want string) {
	if side == "" {
		side = SideA
	}
	if observed == "" {
		observed = `no revision its adapter recognises (it reported "")`
	}
	parts := [...]string{"stable side ", string(side), " runs ", observed, ", want ", want, ": holding"}
	n, at := 0, 0
	for _, p := range parts {
		n += len(p)
	}
	if len(*msg) == n {
		for _, p := range parts {
			if (*msg)[at:at+len(p)] != p {
				break
			}
			at += len(p)
		}
		if at == n {
			return
		}
	}
	*msg = strings.Join(parts[:], "")
}

// canaryRevisionOK reports whether the canary side may be given more
// capacity: revisions are not tracked, or it is observed running the canary
// revision.
func (r *run) canaryRevisionOK() bool {
	o := &r.st.Observed
	return !o.Revisions || o.Canary.Revision == r.st.CanaryRevision
}

// canaryFromZeroOK reports whether a repair may give capacity back to a
// canary side observed at capacity 0 (someone scaled it down): only once it
// is observed rolled out. A side at 0 rolls a new template out at once, so
// one that is not Updated has a rollout that is stuck or not yet observed
// (another writer's, perhaps), and the replicas a scale-up would start may
// be of any revision.
func (r *run) canaryFromZeroOK() bool {
	o := &r.st.Observed
	return !o.Revisions || o.Canary.Capacity > 0 || o.Canary.Updated
}

// swapRevisions records, at success, what the new canary side (the old
// stable side) runs: the old stable revision.
func (st *State) swapRevisions(oldStable string) {
	if st.Observed.Revisions || st.Desired.CanaryRevision != "" {
		st.Desired.CanaryRevision = oldStable
	}
}
