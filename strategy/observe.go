package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
