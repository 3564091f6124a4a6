package strategy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/strategy"
)

// side is a side observation for the adoption tables: capacity and ready
// at c, settled, running rev (rolled out unless rolling).
func sideObs(c int32, rev string, rolling bool) strategy.SideObservation {
	return strategy.SideObservation{Capacity: c, Ready: c, Settled: true, Revision: rev, Updated: rev != "" && !rolling}
}

// TestAdoptUnobserved: the zero state after a Retarget (a new object, a
// status wiped or re-created) adopts the world from its first observation,
// asking for nothing: the idle state only when all traffic is on a side
// that runs the spec revision, else the rollout or walk back the world
// shows, or a hold naming what it saw.
func TestAdoptUnobserved(t *testing.T) {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30}
	route := func(weightB int32, a, b strategy.SideObservation) strategy.Observation {
		return strategy.Observation{At: mt(t1), Weight: weightB, WeightApplied: true, Revisions: true, Stable: a, Canary: b}
	}
	noRev := func(o strategy.Observation) strategy.Observation {
		o.Revisions = false
		for _, s := range []*strategy.SideObservation{&o.Stable, &o.Canary} {
			s.Revision, s.Updated = "", false
		}
		return o
	}
	type want struct {
		idle, unobserved bool
		side             strategy.Side
		stable, canary   string
		pending          string
		phase            strategy.Phase
		desired          strategy.Allocation
		reason           string // of the Degraded condition when true, else of Progressing
	}
	for _, tc := range []struct {
		name  string
		spec  string
		abort bool
		obs   strategy.Observation
		want  want
	}{
		{"all traffic on A running the spec", "v1", false, route(0, sideObs(100, "v1", false), sideObs(0, "", false)),
			want{idle: true, side: strategy.SideA, stable: "v1", canary: "v1", desired: strategy.Allocation{StableCapacity: 100}, reason: strategy.ReasonIdle}},
		{"all traffic on B running the spec", "v2", false, route(100, sideObs(0, "v1", false), sideObs(100, "v2", false)),
			want{idle: true, side: strategy.SideB, stable: "v2", canary: "v2", desired: strategy.Allocation{StableCapacity: 100}, reason: strategy.ReasonIdle}},
		{"80/20, A v1, B v2: the rollout in progress", "v2", false, route(20, sideObs(80, "v1", false), sideObs(30, "v2", false)),
			want{side: strategy.SideA, stable: "v1", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{Weight: 20, StableCapacity: 80, CanaryCapacity: 30, CanaryRevision: "v2"}, reason: strategy.ReasonProgressing}},
		{"80/20, A v2, B v1: the rollout toward A", "v2", false, route(80, sideObs(30, "v2", false), sideObs(100, "v1", false)),
			want{side: strategy.SideB, stable: "v1", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{Weight: 20, StableCapacity: 100, CanaryCapacity: 30, CanaryRevision: "v2"}, reason: strategy.ReasonProgressing}},
		{"80/20 with an abort written with the wipe", "v2", true, route(20, sideObs(80, "v1", false), sideObs(30, "v2", false)),
			want{side: strategy.SideA, stable: "v1", canary: "v2", phase: strategy.PhaseAborting,
				desired: strategy.Allocation{Weight: 20, StableCapacity: 80, CanaryCapacity: 30, CanaryRevision: "v2"}, reason: strategy.ReasonAborted}},
		{"the spec at weight 0 on B", "v2", false, route(0, sideObs(100, "v1", false), sideObs(0, "v2", false)),
			want{side: strategy.SideA, stable: "v1", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100, CanaryRevision: "v2"}, reason: strategy.ReasonProgressing}},
		{"the spec on no side: walk back to the side with most traffic", "v3", false, route(20, sideObs(80, "v1", false), sideObs(30, "v2", false)),
			want{side: strategy.SideA, stable: "v1", canary: "v2", pending: "v3", phase: strategy.PhaseAborting,
				desired: strategy.Allocation{Weight: 20, StableCapacity: 80, CanaryCapacity: 30, CanaryRevision: "v2"}, reason: strategy.ReasonAborting}},
		// Installed on a serving application: all traffic on A, which runs
		// the old revision (recognised or not), B idle at zero running
		// nothing, the spec's revision or something else: the rollout from
		// A toward the spec at weight 0, which deploys it on B at zero.
		{"installed: all traffic on A running v1, B idle at zero running nothing", "v2", false, route(0, sideObs(100, "v1", false), sideObs(0, "", false)),
			want{side: strategy.SideA, stable: "v1", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100}, reason: strategy.ReasonProgressing}},
		{"installed: all traffic on A running no revision it recognises, B idle at zero running nothing", "v2", false, route(0, sideObs(100, "", false), sideObs(0, "", false)),
			want{side: strategy.SideA, stable: "", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100}, reason: strategy.ReasonProgressing}},
		{"installed: all traffic on A unrecognised, B idle at zero already running the spec", "v2", false, route(0, sideObs(100, "", false), sideObs(0, "v2", false)),
			want{side: strategy.SideA, stable: "", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100, CanaryRevision: "v2"}, reason: strategy.ReasonProgressing}},
		{"installed: all traffic on A unrecognised, B idle at zero running something else", "v2", false, route(0, sideObs(100, "", false), sideObs(0, "v0", false)),
			want{side: strategy.SideA, stable: "", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100, CanaryRevision: "v0"}, reason: strategy.ReasonProgressing}},
		{"installed: all traffic on B running v1, A idle at zero running v1 too", "v2", false, route(100, sideObs(0, "v1", false), sideObs(100, "v1", false)),
			want{side: strategy.SideB, stable: "v1", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{StableCapacity: 100, CanaryRevision: "v1"}, reason: strategy.ReasonProgressing}},
		// The idle side still holds capacity of another revision: a walk
		// back takes it away before the spec is deployed there.
		{"installed: all traffic on A unrecognised, B holding capacity of something else", "v2", false, route(0, sideObs(100, "", false), sideObs(40, "v0", false)),
			want{side: strategy.SideA, stable: "", canary: "v0", pending: "v2", phase: strategy.PhaseAborting,
				desired: strategy.Allocation{StableCapacity: 100, CanaryCapacity: 40, CanaryRevision: "v0"}, reason: strategy.ReasonAborting}},
		{"the spec rolling out on the side with all traffic: wait", "v1", false, route(0, sideObs(100, "v1", true), sideObs(0, "", false)),
			want{unobserved: true, stable: "v1", canary: "v1", reason: strategy.ReasonAdopting}},
		{"a side with traffic running no revision it recognises, the spec on the other: the rollout toward it", "v2", false, route(20, sideObs(80, "", false), sideObs(30, "v2", false)),
			want{side: strategy.SideA, stable: "", canary: "v2", phase: strategy.PhaseProgressing,
				desired: strategy.Allocation{Weight: 20, StableCapacity: 80, CanaryCapacity: 30, CanaryRevision: "v2"}, reason: strategy.ReasonProgressing}},
		{"the spec on no side, the side with most traffic unrecognised: held", "v3", false, route(20, sideObs(80, "", false), sideObs(30, "v2", false)),
			want{unobserved: true, stable: "v3", canary: "v3", reason: strategy.ReasonAdoptionBlocked}},
		{"no revisions, all traffic on B", "v2", false, noRev(route(100, sideObs(0, "", false), sideObs(100, "", false))),
			want{idle: true, side: strategy.SideB, stable: "v2", canary: "v2", desired: strategy.Allocation{StableCapacity: 100}, reason: strategy.ReasonIdle}},
		{"no revisions, a split route: held", "v2", false, noRev(route(20, sideObs(80, "", false), sideObs(30, "", false))),
			want{unobserved: true, stable: "v2", canary: "v2", reason: strategy.ReasonAdoptionBlocked}},
		{"weights that are not a split of 100: held", "v2", false, func() strategy.Observation {
			o := route(20, sideObs(80, "v1", false), sideObs(30, "v2", false))
			o.WeightInvalid, o.WeightApplied = true, false
			return o
		}(), want{unobserved: true, stable: "v2", canary: "v2", reason: strategy.ReasonAdoptionBlocked}},
		{"a route not accepted yet: wait", "v2", false, func() strategy.Observation {
			o := route(20, sideObs(80, "v1", false), sideObs(30, "v2", false))
			o.WeightApplied = false
			return o
		}(), want{unobserved: true, stable: "v2", canary: "v2", reason: strategy.ReasonAdopting}},
		{"adapters that fail: wait", "v2", false, strategy.Observation{At: mt(t1), Error: "route not found"},
			want{unobserved: true, stable: "v2", canary: "v2", reason: strategy.ReasonObservationFailed}},
		{"another rollout holds the claim: wait, Degraded Claimed", "v2", false,
			strategy.Observation{At: mt(t1), Error: "router: claim: HTTPRoute shop/web is claimed by Release shop/other", Claimed: true},
			want{unobserved: true, stable: "v2", canary: "v2", reason: strategy.ReasonClaimed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := strategy.State{}.Retarget(tc.spec, t0)
			if tc.abort {
				s, _ = s.Control(strategy.Control{Abort: "a1"}, t0)
			}
			if !s.Unobserved || s.Idle() {
				t.Fatalf("Retarget on the zero state: unobserved %v, idle %v", s.Unobserved, s.Idle())
			}
			s.Observed = tc.obs
			d := stepChecked(t, inc, s, t1)
			if d.HasHops() {
				t.Fatalf("the adoption asks for %s", hops(d))
			}
			st := &d.State
			got := want{idle: st.Idle(), unobserved: st.Unobserved, side: st.StableSide, stable: st.StableRevision,
				canary: st.CanaryRevision, pending: st.PendingRevision, phase: st.Phase, desired: st.Desired}
			if c := apimeta.FindStatusCondition(st.Conditions, strategy.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
				got.reason = c.Reason
			} else if c := apimeta.FindStatusCondition(st.Conditions, strategy.ConditionProgressing); c != nil {
				got.reason = c.Reason
			}
			w := tc.want
			if w.unobserved {
				w.side, w.desired = s.StableSide, s.Desired
			}
			if diff := cmp.Diff(w, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Fatalf("adopted (-want +got):\n%s\nmessage: %s", diff, st.Message)
			}
			if st.Unobserved && (d.RequeueAfter <= 0 || st.Message == "") {
				t.Fatalf("held without a requeue (%s) or a message (%q)", d.RequeueAfter, st.Message)
			}
		})
	}
}

// TestAdoptWaitsWithinTheDeadline: a world that cannot be adopted yet (the
// spec revision still rolling out on the side with all traffic) holds with
// nothing asked and, once the progress deadline has passed since the
// Retarget, reports Degraded naming what it waits for.
func TestAdoptWaitsWithinTheDeadline(t *testing.T) {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Minute}, MaxSurgePercent: 30,
		Options: strategy.Options{ProgressDeadline: metav1.Duration{Duration: time.Minute}}}
	s := strategy.State{}.Retarget("v1", t0)
	s.Observed = strategy.Observation{At: mt(t0), WeightApplied: true, Revisions: true,
		Stable: sideObs(100, "v1", true), Canary: sideObs(0, "", false)}
	d := stepChecked(t, inc, s, t0.Add(59*time.Second))
	if c := apimeta.FindStatusCondition(d.State.Conditions, strategy.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("Degraded before the deadline: %+v", c)
	}
	d = stepChecked(t, inc, d.State, t0.Add(time.Minute))
	c := apimeta.FindStatusCondition(d.State.Conditions, strategy.ConditionDegraded)
	if d.HasHops() || !d.State.Unobserved || c == nil || c.Status != metav1.ConditionTrue || c.Reason != strategy.ReasonProgressDeadlineExceeded ||
		c.Message != "the rollout did not progress within the progress deadline: side A carries all traffic and is rolling v1 out: waiting for it to finish before adopting it" {
		t.Fatalf("after the deadline: hops %s, unobserved %v, Degraded %+v", hops(d), d.State.Unobserved, c)
	}
}

// physical is a world of two physical sides for the adoption walks: every
// hop applies at once, a deploy rolls out at once.
type physical struct {
	weightB int32 // the route's weight of side B
	cap     map[strategy.Side]int32
	rev     map[strategy.Side]string
}

func (w *physical) observe(s *strategy.State, now time.Time) {
	stable := s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	canary := stable.Other()
	weight := w.weightB
	if canary == strategy.SideA {
		weight = 100 - w.weightB
	}
	side := func(sd strategy.Side) strategy.SideObservation { return sideObs(w.cap[sd], w.rev[sd], false) }
	s.Observed = strategy.Observation{At: mt(now), Weight: weight, WeightApplied: true, Revisions: true,
		Stable: side(stable), Canary: side(canary)}
}

// apply applies d, decided on s (whose StableSide names the roles).
func (w *physical) apply(t *testing.T, s *strategy.State, d *strategy.Decision) {
	t.Helper()
	stable := s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	canary := stable.Other()
	if d.Deploy.Set {
		w.rev[canary] = d.Deploy.Revision
	}
	if d.StableCapacity.Set {
		w.cap[stable] = d.StableCapacity.Value
	}
	if d.CanaryCapacity.Set {
		w.cap[canary] = d.CanaryCapacity.Value
	}
	if d.Weight.Set {
		if canary == strategy.SideB {
			w.weightB = d.Weight.Value
		} else {
			w.weightB = 100 - d.Weight.Value
		}
	}
	// Invariant 6: traffic only on a side running its role's revision (the
	// canary role's during a walk back is what the side was adopted with).
	for _, sd := range []strategy.Side{strategy.SideA, strategy.SideB} {
		share := w.weightB
		if sd == strategy.SideA {
			share = 100 - w.weightB
		}
		role := d.State.CanaryRevision
		if sd == stable {
			role = d.State.StableRevision
		}
		if share > 0 && w.rev[sd] != role && d.Weight.Set {
			t.Fatalf("weight hop %d puts %d%% on side %s running %q, its role runs %q", d.Weight.Value, share, sd, w.rev[sd], role)
		}
	}
}

// walkPhysical steps s against w until done, as an operator does: the
// spec's revision and control before every Step.
func walkPhysical(t *testing.T, strat strategy.Strategy, w *physical, s strategy.State, spec string, c strategy.Control, now time.Time, done func(*strategy.State) bool) strategy.State {
	t.Helper()
	for range 2000 {
		s = s.Retarget(spec, now)
		s, _ = s.Control(c, now)
		w.observe(&s, now)
		d := stepChecked(t, strat, s, now)
		w.apply(t, &s, &d)
		s = d.State
		if done(&s) {
			return s
		}
		if !d.HasHops() {
			now = now.Add(max(d.RequeueAfter, time.Second))
		}
	}
	t.Fatalf("no end: %s %s", s.Phase, s.Message)
	return s
}

// TestAdoptedRolloutsEnd: a status wiped at 80/20 (A v1, B v2) with the
// spec at v2 ends with all traffic on a side running v2; with an abort
// written in the same spec update it ends Aborted with all traffic on v1;
// with the spec at v3 (on no side) it walks back to v1, deploys v3 and
// ends on it.
func TestAdoptedRolloutsEnd(t *testing.T) {
	inc := strategy.Incremental{StepPercent: 10, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 30}
	for _, tc := range []struct {
		name      string
		spec      string
		abort     string
		phase     strategy.Phase
		onRev     string
		canaryRev string
	}{
		{"released", "v2", "", strategy.PhaseSucceeded, "v2", "v2"},
		{"aborted", "v2", "a1", strategy.PhaseAborted, "v1", "v2"},
		{"a third revision", "v3", "", strategy.PhaseSucceeded, "v3", "v3"},
		{"a third revision, aborted", "v3", "a1", strategy.PhaseAborted, "v1", "v3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &physical{weightB: 20, cap: map[strategy.Side]int32{strategy.SideA: 100, strategy.SideB: 30},
				rev: map[strategy.Side]string{strategy.SideA: "v1", strategy.SideB: "v2"}}
			c := strategy.Control{Abort: tc.abort}
			s := strategy.State{}.Retarget(tc.spec, t0)
			s, _ = s.Control(c, t0)
			first := true
			s = walkPhysical(t, inc, w, s, tc.spec, c, t0, func(s *strategy.State) bool {
				if first && w.weightB != 20 {
					t.Fatalf("the first Step moved traffic: weight of B %d", w.weightB)
				}
				first = false
				return s.Phase.Terminal()
			})
			all := strategy.SideA
			if w.weightB == 100 {
				all = strategy.SideB
			} else if w.weightB != 0 {
				t.Fatalf("ended %s with the route split: weight of B %d", s.Phase, w.weightB)
			}
			if s.Phase != tc.phase || w.rev[all] != tc.onRev || s.StableSide != all || s.StableRevision != tc.onRev || s.CanaryRevision != tc.canaryRev {
				t.Fatalf("ended %s, stable %s on %s, canary %s, all traffic on %s running %s; want %s on %s, canary %s",
					s.Phase, s.StableRevision, s.StableSide, s.CanaryRevision, all, w.rev[all], tc.phase, tc.onRev, tc.canaryRev)
			}
		})
	}
}
