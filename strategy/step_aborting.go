package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// walkBack moves traffic and capacity back to the stable side, hop by hop,
// and ends the walk back once the stable allocation is observed: Aborted,
// RolledBack, or the revision a Retarget asked for started.
func (r *run) walkBack() {
	st, e := r.st, r.e
	if st.Phase != PhaseAborting {
		return // only a rollout walking back (see abort)
	}
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
	// A canary that lost readiness under its traffic is not walked back
	// step by step: its share of the requests is failing now. Each hop
	// goes as far back as the stable side's observed ready capacity
	// allows, with no interval between hops.
	dead := r.canaryDead()
	for {
		t := int32(0)
		if gradual && e.canary && !dead {
			for j := range e.steps {
				if w := e.steps[j].SetWeight; w != nil && *w < st.Desired.Weight && *w > t {
					t = *w
				}
			}
		}
		var limit int32
		var interval time.Duration
		if gradual && !dead {
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
	case st.suspending() && pending != st.StableRevision:
		st.becomeSuspended()
		st.Message = msgSuspended
		if pending != "" {
			// A Retarget during the suspension: Resume starts the new
			// revision from its first step.
			st.CanaryRevision = pending
			st.PendingRevision = ""
			st.StepIndex, st.StepsHash = 0, ""
			st.StartedAt = metav1.MicroTime{}
			st.ResumeWeight = 0
		}
	case pending == "":
		st.ResumeWeight = 0
		st.becomeAborted()
		st.Message = ReasonAborted
	case pending == st.StableRevision:
		st.ResumeWeight = 0
		st.becomeRolledBack()
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.Message = ReasonRolledBack
	case st.Aborted != nil && st.Aborted.Reason != ReasonRetarget:
		// An Abort came during the walk back to a new revision: the new
		// revision does not start; it is the canary a Retry starts.
		st.becomeAborted()
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.Message = ReasonAborted
	default:
		st.becomeProgressing()
		st.CanaryRevision = pending
		st.PendingRevision = ""
		st.FinishedAt = metav1.MicroTime{}
		st.UnhealthyCount = 0
		r.enter(0)
		r.progress()
	}
}

// canaryDead reports, for a walk back, a canary that lost readiness under
// the traffic the route sends it (pods crashed or failing their readiness
// checks, not settled): see readiness.
func (r *run) canaryDead() bool {
	if r.st.Observed.WeightInvalid {
		return false
	}
	_, canary := r.e.mode.readinessLost(r.facts())
	return canary
}

// abort starts the walk back for reason, now (see State.becomeAborting), an
// emergency one if the options ask for it. A rollout already walking back
// or finished is left as it is.
func (r *run) abort(reason string) {
	if r.st.Phase == PhaseAborting || r.st.Phase.Terminal() {
		return
	}
	r.st.becomeAborting(reason, micro(r.now))
	r.markEmergency()
}

// markEmergency marks the recorded abort an emergency when
// Options.AbortRamp asks for it; a Retarget's walk back never is one, nor
// a suspension's.
func (r *run) markEmergency() {
	if a := r.st.Aborted; a != nil && r.e.opts.AbortRamp == AbortEmergency && a.Reason != ReasonRetarget && !isSuspension(a.Reason) {
		r.st.markEmergency()
	}
}

// emergencyNow reports whether an emergency walk back asked for everything
// on the stable side in this Step (see emergency).
func (r *run) emergencyNow() bool {
	st := r.st
	return st.Phase == PhaseAborting && st.Aborted != nil && st.Aborted.Emergency && r.emergency()
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

// inPlace reports, for a walk back, whether every adapter holds what was
// asked, settled or not, and whether or not the data plane has accepted the
// route yet: a walk back only ever moves traffic toward a stable side that
// is ready for it, so a parent that rejects the route (or never writes its
// status) must not freeze it. Scaling the canary down below traffic it may
// still receive does wait for the route to be accepted (awaitRoute).
func (r *run) inPlace() bool { return r.e.mode.inPlace(r.facts()) && r.extrasApplied() }
