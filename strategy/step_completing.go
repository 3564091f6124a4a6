package strategy

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
	st.becomeSucceeded()
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
