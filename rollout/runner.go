package rollout

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/strategy"
)

// Runner applies a Strategy's decisions through the adapters: one call to
// Reconcile observes every adapter, steps the strategy once and applies the
// hops in the safe order (capacity increases, then the weight, then capacity
// decreases).
//
// Sides: A and B are the two physical sides; State.StableSide says which
// one holds the stable role, and it flips when a rollout succeeds. Which
// adapters are set must match the strategy's capacity mode:
//
//	managed:  Router, A and B
//	fixed:    Router only (both sides stay provisioned)
//	replicas: A and B only (traffic follows ready replicas)
//
// A Runner holds no per-rollout state: one Runner may reconcile many
// rollouts that share its adapters' configuration, and it is safe for
// concurrent use when its adapters are. Its zero value is not usable: set
// Strategy and the adapters; Validate reports what is missing. An operator
// whose objects each have their own route and workloads uses a Runner per
// object (building adapters makes no request); either way, name the object
// in the context (WithName).
//
// With controller-runtime, give the adapters the manager's client: their
// reads come from its cache, which lags writes, so a write based on a stale
// read fails with a conflict and is retried (ErrConflict, and the hop asked
// again, when that outlasts the retries); set Watched, since Notify needs a
// client that can watch. RBAC then needs get, list and watch on each kind
// the cache reads; without a cache, get, update and watch on the names the
// adapters manage suffice. See docs/design/rollout.md for many objects,
// cache-backed clients and the RBAC of an operator.
type Runner struct {
	Strategy strategy.Strategy
	Router   TrafficRouter
	A, B     CapacitySetter
	// RevisionA and RevisionB report the revision each side runs and, when
	// they also implement Deployer, put a revision on it (serve/ray,
	// serve/replicas and fake each offer one per side). Set both or
	// neither. With both, the observation reports revisions
	// (strategy.Observation.Revisions) and the strategy keeps each side on
	// its role's revision: it deploys the canary revision on the canary
	// side at weight 0 and capacity 0, and routes nothing to a side before
	// it is observed running its role's revision. With neither, the caller
	// puts each revision on its side and nothing is checked. This works the
	// same in every capacity mode; in the fixed mode (no CapacitySetter)
	// the Deployer redeploys a side while it carries weight 0.
	//
	// The Runner passes each reader the revision its role should run, and
	// applies the strategy's deploy hops after the others. serve/ray
	// deploys a revision's Serve config, serve/replicas a revision's pod
	// template. The first revision is the one the workload of side A is
	// created with; every later one is deployed by the Runner. A caller
	// who deploys by itself implements only RevisionReader (RevisionFunc
	// adapts a function): the rollout then waits, bounded by the progress
	// deadline, until the side reports what it should run.
	RevisionA, RevisionB RevisionReader
	// Analyzer answers gate steps; without one, a gate waits for Promote.
	Analyzer Analyzer
	// Health reports the canary's health; without one, the canary side's
	// CapacityStatus.Health is used.
	Health HealthChecker
	// Observer receives an Event after every reconcile.
	Observer Observer
	// Store keeps the state for Run.
	Store Store
	// Clock is the source of time of Reconcile and Run; nil means
	// clock.Real. Tests use fake.Clock.
	Clock clock.Clock
	// Watched says the caller reconciles again on every change of what the
	// adapters observe (controller-runtime watches on the route and the
	// workloads, say), so ReconcileAt returns the strategy's
	// WatchedRequeueAfter: no fast polls after a hop. Run needs no such
	// flag: it uses that requeue by itself when every adapter that observes
	// the world notifies it (Notifier).
	//
	// With controller-runtime, watch the objects the adapters read (the
	// HTTPRoutes, the Deployments) and map each event to the rollout object
	// that owns them (Watches with handler.EnqueueRequestsFromMapFunc, or
	// Owns when it owns them), so that a data plane writing a route's
	// status, or a Deployment's pods becoming ready, reconciles the rollout
	// at once. Write the object's status only when strategy.Changed reports
	// a change: the observation and the message are volatile, so a rollout
	// that waits writes nothing, and an upgrade writes its state about once
	// per hop (Run does the same with its Store).
	Watched bool
	// RetryInterval is the requeue after a transient adapter error (and
	// between retries of a failed Store.Save in Run); 0 means the strategy's
	// poll interval. A set value must be at least strategy.MinPollInterval.
	RetryInterval time.Duration
	// Owner is who moves the objects of the rollouts this Runner
	// reconciles (see Owner and Claimer): before it applies anything of a
	// non-idle state, the Runner claims every adapter that is a Claimer,
	// and a claim another owner holds stops the reconcile with a
	// *ClaimedError (Degraded, reason strategy.ReasonClaimed) and nothing
	// written. Runner.Release removes the claims. The zero Owner takes no
	// claims. In an operator, the owner is the rollout object (its kind,
	// namespace, name and UID); for a standalone program, a name and a UID
	// that stay the same across restarts (kept next to its Store), so a
	// restarted program finds its own claims.
	Owner Owner
	// OwnerGone reports whether the owner of a claim that refuses Owner no
	// longer exists (its object is deleted, or re-created with another
	// UID); the Runner then takes the claim over. An operator checks its
	// own kind by name and UID. nil means no claim is stale: a claim is
	// taken over only once its owner releases it.
	OwnerGone func(ctx context.Context, holder Owner) (bool, error)
}

// Validate checks that the adapters set match the strategy's capacity mode,
// and that the strategy's options are valid. It names every problem; each
// matches ErrInvalid, or strategy.ErrInvalid for the strategy's options.
func (r *Runner) Validate() error {
	var errs []error
	if r.Strategy == nil {
		return fmt.Errorf("%w runner: Strategy is required", ErrInvalid)
	}
	if err := r.Strategy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if r.RetryInterval < 0 || r.RetryInterval > 0 && r.RetryInterval < strategy.MinPollInterval {
		errs = append(errs, fmt.Errorf("%w runner: RetryInterval %s: must be 0 (the poll interval) or at least %s",
			ErrInvalid, r.RetryInterval, strategy.MinPollInterval))
	}
	opts := r.Strategy.Shared()
	switch opts.Capacity {
	case strategy.CapacityManaged:
		if r.Router == nil {
			errs = append(errs, fmt.Errorf("%w runner: Router is required in the managed capacity mode", ErrInvalid))
		}
		if r.A == nil || r.B == nil {
			errs = append(errs, fmt.Errorf("%w runner: A and B capacity setters are required in the managed capacity mode", ErrInvalid))
		}
	case strategy.CapacityFixed:
		if r.Router == nil {
			errs = append(errs, fmt.Errorf("%w runner: Router is required in the fixed capacity mode", ErrInvalid))
		}
		if r.A != nil || r.B != nil {
			errs = append(errs, fmt.Errorf("%w runner: capacity setters are not used in the fixed capacity mode; use the managed mode", ErrInvalid))
		}
	case strategy.CapacityReplicas:
		if r.Router != nil {
			errs = append(errs, fmt.Errorf("%w runner: the replicas capacity mode has no Router; traffic follows ready replicas", ErrInvalid))
		}
		if r.A == nil || r.B == nil {
			errs = append(errs, fmt.Errorf("%w runner: A and B capacity setters are required in the replicas capacity mode", ErrInvalid))
		}
	}
	if _, ok := r.Router.(ExtrasRouter); r.Router != nil && !ok && strategy.UsesExtras(r.Strategy) {
		errs = append(errs, fmt.Errorf("%w runner: the strategy asks for header routes, mirrors or sticky sessions; Router must be an ExtrasRouter", ErrInvalid))
	}
	if err := r.Owner.Validate(); err != nil {
		errs = append(errs, err)
	}
	if (r.revisions(strategy.SideA) == nil) != (r.revisions(strategy.SideB) == nil) {
		errs = append(errs, fmt.Errorf("%w runner: only one of RevisionA and RevisionB is set; set both or neither", ErrInvalid))
	}
	return errors.Join(errs...)
}

// revisions returns the RevisionReader of a side, nil if none.
func (r *Runner) revisions(side strategy.Side) RevisionReader {
	if side == strategy.SideB {
		return r.RevisionB
	}
	return r.RevisionA
}

// tracksRevisions reports whether both sides report their revisions.
func (r *Runner) tracksRevisions() bool {
	return r.revisions(strategy.SideA) != nil && r.revisions(strategy.SideB) != nil
}

func (r *Runner) setter(side strategy.Side) CapacitySetter {
	if side == strategy.SideB {
		return r.B
	}
	return r.A
}

func (r *Runner) retryAfter() time.Duration {
	if r.RetryInterval > 0 {
		return r.RetryInterval
	}
	if opts := r.Strategy.Shared(); opts.PollInterval.Duration > 0 {
		return opts.PollInterval.Duration
	}
	return strategy.DefaultPollInterval
}

// Now is the Runner's clock (Clock, or clock.Real when nil). Give commands,
// State.Retarget and State.Control this instant, and ReconcileAt the same
// one: a state stamped by another clock is reported as a
// *strategy.ClockSkewError once its stamps run more than
// strategy.MaxClockSkew ahead of this one.
//
// Commands record when they happened, and every recorded instant bounds the
// strategy's clock from below. A command stamped by another clock than the
// Runner's (time.Now() in a controller whose Runner runs on a fake.Clock, or
// the controller's own clock field next to a Runner given another) puts the
// state ahead of the Runner, and every interval, pause and deadline then
// waits until the Runner's clock reaches the stamp. So take one Now per
// reconcile and give it to the commands and to ReconcileAt; Run applies its
// commands at this clock by itself.
func (r *Runner) Now() time.Time { return clock.OrReal(r.Clock).Now() }

// Reconcile is ReconcileAt with the Runner's clock.
func (r *Runner) Reconcile(ctx context.Context, s strategy.State) (strategy.State, time.Duration, error) {
	return r.ReconcileAt(ctx, s, clock.OrReal(r.Clock).Now())
}

// ReconcileAt observes, steps and applies once, at now. It returns the state
// to store and when to reconcile again (0: only on a command or an event).
//
// The returned state is always the one to store, also with an error:
//   - an idle state (strategy.State.Idle) reads no adapter and asks for
//     nothing; it comes back with only its Progressing condition (Idle) set;
//   - an unobserved state (strategy.State.Unobserved, the zero state after
//     a Retarget) reads every adapter and asks for nothing: it comes back
//     adopted from what was read, or still unobserved with the reason
//     (Adopting, AdoptionBlocked, an adapter error);
//   - a state that fails strategy.State.Validate is never applied: the
//     error is a *strategy.StateError and the state reports Degraded with
//     reason InvalidState;
//   - a state that records an instant more than strategy.MaxClockSkew
//     ahead of now (stamped by another clock) is reconciled as usual, the
//     strategy counting the stamp as now, so every time-gated event waits
//     until now reaches it; the error is a *strategy.ClockSkewError
//     (errors.Is strategy.ErrClockSkew), logged, and the state reports
//     Degraded with reason ClockSkew. Nothing is lost: give commands the
//     Runner's clock (Now) and the error ends once the clock reaches the
//     stamp;
//   - after an adapter error (reading, or applying a hop) the state is the
//     one before the failed hop, with Observed.Error naming the failure:
//     Degraded with reason ObservationFailed, and the time since the first
//     failure counts toward the progress deadline, so adapters that keep
//     failing (a deleted route, a workload gone) surface and can abort the
//     rollout. The next reconcile asks for the hop again; nothing is lost.
//
// An error marked Permanent aborts the rollout instead (or, during a walk
// back, is returned like a transient one).
func (r *Runner) ReconcileAt(ctx context.Context, s strategy.State, now time.Time) (strategy.State, time.Duration, error) {
	return r.reconcileAt(ctx, s, now, r.Watched, nil)
}

// requeue is the requeue of a decision for a caller that is (watched) or is
// not woken by every change of the adapters.
func requeue(d *strategy.Decision, watched bool) time.Duration {
	if watched {
		return d.WatchedRequeueAfter
	}
	return d.RequeueAfter
}

// hopWrite is how Run writes a weight hop: with the state that records it,
// in one update of a HopStore; saved is told the state so written, and
// refused why the whole state could not go with it (nil when it did).
type hopWrite struct {
	store   HopStore
	saved   func(strategy.State)
	refused func(error)
}

// ReasonStateRefused is the reason of the Degraded condition that Run
// sets while its Store refuses the state (ErrStateRefused): the message
// names the object and the field, and keeps the reason the strategy gave
// (an abort's, say). It lasts until the whole state is saved again.
const ReasonStateRefused = "StateRefused"

// towardStable reports whether writing canary weight v (with extras x
// when withExtras, else the extras the route holds) sends no request to
// the canary that the route, as observed, does not send there already: a
// weight no higher than the route's, no header route or sticky sessions
// other than the route's, no larger mirror. A route whose weights are not
// a split of 100 counts as sending all to the canary, so only weight 0
// with no extras moves toward the stable side from it.
func towardStable(o *strategy.Observation, v int32, withExtras bool, x *strategy.TrafficExtras) bool {
	if !withExtras {
		return !o.WeightInvalid && v <= o.Weight
	}
	if o.WeightInvalid {
		return v == 0 && x.IsZero()
	}
	if v > o.Weight || x.MirrorPercent > o.Extras.MirrorPercent {
		return false
	}
	if x.HeaderRoute != nil && !(strategy.TrafficExtras{HeaderRoute: x.HeaderRoute}).Equal(strategy.TrafficExtras{HeaderRoute: o.Extras.HeaderRoute}) {
		return false
	}
	if x.Sticky != nil && !(strategy.TrafficExtras{Sticky: x.Sticky}).Equal(strategy.TrafficExtras{Sticky: o.Extras.Sticky}) {
		return false
	}
	return true
}

// reducedForms returns what a store that refuses s is asked to keep
// instead, larger first: s without the volatile fields that
// strategy.Changed ignores (the observation, the message and the
// instants of the last observations), which the next Step observes again;
// then also without its conditions, which every Step sets again. A
// restarted process makes the same decisions from either.
func reducedForms(s strategy.State) [2]strategy.State {
	a := s
	a.Observed, a.Message = strategy.Observation{}, ""
	a.HealthCheckedAt, a.WeightAppliedAt, a.WeightPendingAt = metav1.MicroTime{}, metav1.MicroTime{}, metav1.MicroTime{}
	b := a
	b.Conditions = nil
	return [2]strategy.State{a, b}
}

// saveReduced asks save to keep the reduced forms of s, larger first,
// while it refuses them for what they are (ErrStateRefused). It returns
// nil once one is kept, otherwise the last error.
func saveReduced(s strategy.State, save func(strategy.State) error) error {
	var err error
	for _, f := range reducedForms(s) {
		if err = save(f); !errors.Is(err, ErrStateRefused) {
			return err
		}
	}
	return err
}

// withRefusal returns next reporting Degraded with reason
// ReasonStateRefused and refusal as the cause; the reason the strategy
// gave Degraded, if any, stays in the message. The condition keeps the
// transition time of a Degraded condition already true in prev or next.
func withRefusal(prev *strategy.State, next strategy.State, refusal error, now time.Time) strategy.State {
	c := metav1.Condition{
		Type:               strategy.ConditionDegraded,
		Status:             metav1.ConditionTrue,
		Reason:             ReasonStateRefused,
		Message:            "the state cannot be stored; traffic moves only toward the stable side until it can: " + refusal.Error(),
		LastTransitionTime: metav1.Time{Time: time.Unix(now.Unix(), 0).UTC()},
	}
	conds := make([]metav1.Condition, 0, len(next.Conditions)+1)
	found := false
	for _, n := range next.Conditions {
		if n.Type != strategy.ConditionDegraded {
			conds = append(conds, n)
			continue
		}
		if n.Status == metav1.ConditionTrue {
			c.LastTransitionTime = n.LastTransitionTime
			if n.Reason != ReasonStateRefused {
				c.Message += "; also degraded: " + n.Reason + ": " + n.Message
			}
		}
		conds, found = append(conds, c), true
	}
	if !found {
		conds = append(conds, c)
	}
	if prev != nil {
		for _, p := range prev.Conditions {
			if p.Type == strategy.ConditionDegraded && p.Status == metav1.ConditionTrue {
				for i := range conds {
					if conds[i].Type == strategy.ConditionDegraded {
						conds[i].LastTransitionTime = p.LastTransitionTime
					}
				}
			}
		}
	}
	next.Conditions = conds
	return next
}

func (r *Runner) reconcileAt(ctx context.Context, s strategy.State, now time.Time, watched bool, hw *hopWrite) (strategy.State, time.Duration, error) {
	// The reconcile's timeline: now is the instant it starts, and a write
	// that returns lands at now plus the time clk saw pass since (the
	// reads and the decision included, so a landing is never stamped
	// before the instant the write really returned).
	clk := clock.OrReal(r.Clock)
	begun := landing{clk: clk, now: now, start: clk.Now()}
	ctx = r.withOwner(ctx) // claim.go
	log := logr.FromContextOrDiscard(ctx).WithValues("canary", s.CanaryRevision, "stable", s.StableRevision)
	ev := Event{Time: now, Before: s}
	if name, ok := NameFrom(ctx); ok {
		ev.Rollout = name
		log = log.WithValues("rollout", name.String())
	}
	if s.Idle() {
		d := r.Strategy.Step(s, now)
		ev.Decision, ev.After = d, d.State
		r.notify(ctx, ev)
		return d.State, requeue(&d, watched), nil
	}
	if err := s.Validate(r.Strategy.Shared().Capacity); err != nil {
		log.Error(err, "the stored state is invalid: nothing is applied")
		d := r.Strategy.Step(s, now)
		ev.Decision, ev.After, ev.Err = d, d.State, err
		r.notify(ctx, ev)
		return d.State, 0, err
	}
	// A state stamped by another clock (a command given time.Now() while
	// the Runner runs on another clock) holds every time-gated event until
	// now reaches its stamp. The reconcile goes on (the strategy counts the
	// stamp as now, which is safe), and the skew is reported: logged, in
	// the Degraded condition (ClockSkew) and as the error.
	skew := s.CheckClock(now)
	if skew != nil {
		log.Error(skew, "the state records an instant ahead of the Runner's clock")
	}
	failingSince := s.FailingSince
	rctx := WithReads(ctx)
	if done, next, requeue, err := r.claimOrRefuse(rctx, log, ev, s, now); done { // claim.go
		return next, requeue, err
	}
	obs, err := r.observe(rctx, &s, now)
	if err != nil {
		return r.failed(ctx, log, ev, s, failingSince, now, err)
	}
	s.Observed = obs
	d := r.Strategy.Step(s, now)
	ev.Decision = d
	applied, err := r.apply(ctx, log, &s, &d, hw, begun)
	ev.Applied = applied
	if err != nil {
		return r.failed(ctx, log, ev, s, failingSince, now, err)
	}
	ev.After = d.State
	if d.State.Phase != s.Phase {
		log.Info("phase", "from", s.Phase, "to", d.State.Phase, "message", d.State.Message)
	}
	ev.Err = skew
	r.notify(ctx, ev)
	if skew != nil {
		return d.State, requeue(&d, watched), skew
	}
	return d.State, requeue(&d, watched), nil
}

// failed turns an adapter error into the state to store: s (the state before
// any hop of this reconcile) with the error in its observation, stepped so
// that the failure shows in the conditions and counts toward the progress
// deadline from its first occurrence (since).
func (r *Runner) failed(ctx context.Context, log logr.Logger, ev Event, s strategy.State, since metav1.MicroTime, now time.Time, err error) (strategy.State, time.Duration, error) {
	if errors.Is(err, ErrClaimed) {
		return r.refused(ctx, log, ev, s, now, err) // claim.go: a write refused by another owner's claim
	}
	ev.Err = err
	permanent := IsPermanent(err) && s.Phase != strategy.PhaseAborting && !s.Phase.Terminal()
	if permanent {
		log.Error(err, "permanent adapter error: aborting the rollout")
		s = s.Abort("adapter error: "+err.Error(), now)
	} else {
		log.Error(err, "adapter error; will retry", "after", r.retryAfter())
	}
	s.Observed.Error = err.Error()
	s.FailingSince = since
	d := r.Strategy.Step(s, now)
	ev.Decision, ev.After = d, d.State
	r.notify(ctx, ev)
	requeue := r.retryAfter()
	if d.RequeueAfter > 0 && d.RequeueAfter < requeue {
		requeue = d.RequeueAfter // the progress deadline comes first
	}
	if permanent {
		return d.State, requeue, nil
	}
	return d.State, requeue, err
}

func (r *Runner) notify(ctx context.Context, ev Event) {
	if r.Observer != nil {
		r.Observer.Reconciled(ctx, ev)
	}
}

// observe reads every adapter into an Observation, in role terms.
func (r *Runner) observe(ctx context.Context, s *strategy.State, now time.Time) (strategy.Observation, error) {
	stableSide := s.StableSide
	if stableSide == "" {
		stableSide = strategy.SideA
	}
	canarySide := stableSide.Other()
	obs := strategy.Observation{At: strategy.Micro(now)}
	if r.Router != nil {
		var rs RouteStatus
		var err error
		if xr, ok := r.Router.(ExtrasRouter); ok {
			var st RoutesStatus
			st, err = xr.Routes(ctx)
			rs = st.RouteStatus
			if err == nil && (st.Canary == canarySide || st.Extras.IsZero()) {
				// Extras pointed at the stable side are not the canary's:
				// the strategy sees none and asks again for its own.
				obs.Extras = *st.Extras.DeepCopy()
			}
		} else {
			rs, err = r.Router.Weights(ctx)
		}
		if err != nil {
			return obs, &AdapterError{Adapter: "router", Op: "read weights", Err: err}
		}
		obs.Weight = rs.Weights.Of(canarySide)
		obs.WeightInvalid = rs.Weights.A+rs.Weights.B != 100 || rs.Weights.A < 0 || rs.Weights.B < 0
		obs.WeightApplied = rs.Accepted && rs.Rejected == nil && !obs.WeightInvalid
		if obs.WeightInvalid {
			obs.Weight = min(max(obs.Weight, 0), 100) // a percentage, whatever the route holds
		}
		if rs.Rejected != nil {
			logr.FromContextOrDiscard(ctx).Error(rs.Rejected, "the data plane refused the route")
		}
	}
	for _, side := range [2]strategy.Side{stableSide, canarySide} {
		so := strategy.SideObservation{Capacity: 100, Ready: 100, Settled: true} // fixed: as provisioned
		if c := r.setter(side); c != nil {
			cs, err := c.Capacity(ctx)
			if err != nil {
				return obs, &AdapterError{Adapter: "capacity " + string(side), Op: "read capacity", Err: err}
			}
			so = strategy.SideObservation{Capacity: cs.Capacity, Ready: cs.Ready, Settled: cs.Settled}
			if side == canarySide {
				obs.Health, obs.HealthMessage = cs.Health, cs.HealthMessage
			}
		}
		if side == stableSide {
			obs.Stable = so
		} else {
			obs.Canary = so
		}
	}
	if r.tracksRevisions() {
		obs.Revisions = true
		for _, side := range [2]strategy.Side{stableSide, canarySide} {
			so, expect := &obs.Stable, s.StableRevision
			if side == canarySide {
				so, expect = &obs.Canary, s.CanaryRevision
			}
			rs, err := r.revisions(side).Revision(ctx, expect)
			if err != nil {
				return obs, &AdapterError{Adapter: "revision " + string(side), Op: "read revision", Err: err}
			}
			so.Revision, so.Updated = rs.Revision, rs.Updated
		}
	}
	// The state is an argument of a StateHealthChecker and a StateAnalyzer;
	// only a HealthChecker or an Analyzer without it reads it from the
	// context (StateFrom), built once for both.
	var sctx context.Context
	withState := func() context.Context {
		if sctx == nil {
			sctx = context.WithValue(ctx, stateKey{}, s)
		}
		return sctx
	}
	if r.Health != nil {
		var h strategy.Health
		var msg string
		var err error
		if sh, ok := r.Health.(StateHealthChecker); ok {
			h, msg, err = sh.HealthState(ctx, *s)
		} else {
			h, msg, err = r.Health.Health(withState())
		}
		if err != nil {
			return obs, &AdapterError{Adapter: "health", Op: "read health", Err: err}
		}
		obs.Health, obs.HealthMessage = h, msg
	}
	if s.Gate != "" && r.Analyzer != nil {
		var v strategy.Verdict
		var err error
		if sa, ok := r.Analyzer.(StateAnalyzer); ok {
			v, err = sa.AnalyzeState(ctx, *s, s.Gate)
		} else {
			v, err = r.Analyzer.Analyze(withState(), s.Gate)
		}
		if err != nil {
			return obs, &AdapterError{Adapter: "analyzer", Op: "analyze gate " + s.Gate, Err: err}
		}
		obs.Gates = []strategy.GateResult{{Name: s.Gate, Verdict: v, At: strategy.Micro(now)}}
	}
	return obs, nil
}

// landing tells the instant, on the timeline of now (the reconcile's
// instant), at which a write that returns when landed is called has
// landed: now plus the time clk saw pass since start.
type landing struct {
	clk        clock.Clock
	now, start time.Time
}

func (l landing) landed() time.Time { return l.now.Add(l.clk.Now().Sub(l.start)) }

// apply carries out d's hops in the safe order and returns those applied.
// With hw, the weight hop is written with d.State (HopStore). A weight
// hop's write records in d.State.WeightAppliedAt the instant it returned
// (written.landed()): the weights have reached the data plane's API by then, and
// the strategy's interval counts from there.
func (r *Runner) apply(ctx context.Context, log logr.Logger, before *strategy.State, d *strategy.Decision, hw *hopWrite, written landing) ([]Hop, error) {
	if !d.HasHops() {
		return nil, nil
	}
	stableSide := before.StableSide
	if stableSide == "" {
		stableSide = strategy.SideA
	}
	type capHop struct {
		role   string
		side   strategy.Side
		t      strategy.Target
		before int32
	}
	caps := [2]capHop{
		{"stable", stableSide, d.StableCapacity, before.Desired.StableCapacity},
		{"canary", stableSide.Other(), d.CanaryCapacity, before.Desired.CanaryCapacity},
	}
	var applied []Hop
	setCap := func(h capHop) error {
		c := r.setter(h.side)
		hop := Hop{Kind: HopCapacity, Role: h.role, Side: h.side, Value: h.t.Value, Steady: h.t.Steady}
		if c == nil {
			return &AdapterError{Adapter: "capacity " + string(h.side), Op: "set capacity", Hop: hop.String(),
				Err: Permanent(fmt.Errorf("%w runner: no capacity setter for side %s", ErrInvalid, h.side))}
		}
		if err := c.SetCapacity(ctx, CapacityRequest{Percent: h.t.Value, Steady: h.t.Steady}); err != nil {
			return &AdapterError{Adapter: "capacity " + string(h.side), Op: "set capacity", Hop: hop.String(), Err: err}
		}
		log.V(1).Info("hop", "hop", hop.String())
		applied = append(applied, hop)
		return nil
	}
	// 1. capacity increases
	for _, h := range caps {
		if h.t.Set && h.t.Value >= h.before {
			if err := setCap(h); err != nil {
				return applied, err
			}
		}
	}
	// 2. the weight, and the extras with it (one update of the route)
	if d.Weight.Set || d.Extras {
		v := d.Weight.Value
		if !d.Weight.Set {
			v = d.State.Desired.Weight
		}
		w := Weights{A: 100 - v, B: v}
		if stableSide == strategy.SideB {
			w = Weights{A: v, B: 100 - v}
		}
		hop := Hop{Kind: HopWeight, Role: "canary", Side: stableSide.Other(), Value: v, Weights: w}
		xr, isXR := r.Router.(ExtrasRouter)
		extras := d.Extras || !d.State.DesiredExtras.IsZero() || !d.State.Observed.Extras.IsZero()
		if extras {
			hop.Kind, hop.Extras = HopRoutes, *d.State.DesiredExtras.DeepCopy()
		}
		var (
			op    = "set weights"
			write func(strategy.State) error // the hop and a state, in one update of the HopStore
			alone func() error               // the hop alone, through the Router
		)
		switch {
		case r.Router == nil:
			return applied, &AdapterError{Adapter: "router", Op: op, Hop: hop.String(),
				Err: Permanent(fmt.Errorf("%w runner: no router", ErrInvalid))}
		case extras && !isXR:
			return applied, &AdapterError{Adapter: "router", Op: "set routes", Hop: hop.String(),
				Err: Permanent(fmt.Errorf("%w runner: the router programs no extras (not an ExtrasRouter)", ErrUnsupported))}
		case extras:
			rs := Routes{Weights: w, Canary: stableSide.Other(), Extras: hop.Extras}
			op = "set routes"
			alone = func() error { return xr.SetRoutes(ctx, rs) }
			if hw != nil {
				write = func(st strategy.State) error { return hw.store.SaveRoutes(ctx, rs, st) }
			}
		default:
			alone = func() error { return r.Router.SetWeights(ctx, w) }
			if hw != nil {
				write = func(st strategy.State) error { return hw.store.SaveWeights(ctx, w, st) }
			}
		}
		var (
			err      error
			stored   = write != nil // the state travelled with the hop, whole or reduced
			refusal  error          // why the whole state could not travel with it
			toStable = towardStable(&before.Observed, v, extras, &hop.Extras)
		)
		if write != nil {
			err = write(d.State)
			if errors.Is(err, ErrStateRefused) && toStable {
				// A walk back does not wait on its bookkeeping: the state
				// goes as it can, reduced or not at all, and the traffic
				// goes back to the stable side anyway.
				refusal = err
				d.State = withRefusal(before, d.State, refusal, written.now)
				log.Error(refusal, "the store refuses the state: the walk back goes on with less of it", "hop", hop.String())
				err = saveReduced(d.State, write)
				if errors.Is(err, ErrStateRefused) {
					stored = false
					err = alone()
				}
			}
		} else {
			err = alone()
		}
		if err != nil {
			return applied, &AdapterError{Adapter: "router", Op: op, Hop: hop.String(), Err: err}
		}
		if d.Weight.Set {
			// Volatile (strategy.Changed): no save of its own.
			d.State.WeightAppliedAt = strategy.Micro(written.landed())
		}
		switch {
		case hw != nil && refusal != nil:
			hw.refused(refusal)
			if stored {
				hw.saved(d.State) // reduced, but nothing a decision needs is missing
				log.V(1).Info("hop", "hop", hop.String(), "state", "saved with it, reduced")
			} else {
				log.V(1).Info("hop", "hop", hop.String(), "state", "kept in memory")
			}
		case stored:
			hw.refused(nil)
			hw.saved(d.State) // the state travelled with the hop
			log.V(1).Info("hop", "hop", hop.String(), "state", "saved with it")
		default:
			log.V(1).Info("hop", "hop", hop.String())
		}
		applied = append(applied, hop)
	}
	// 3. capacity decreases
	for _, h := range caps {
		if h.t.Set && h.t.Value < h.before {
			if err := setCap(h); err != nil {
				return applied, err
			}
		}
	}
	// 4. a revision, on the canary side (asked alone, at weight 0)
	if d.Deploy.Set {
		side := stableSide.Other()
		hop := Hop{Kind: HopDeploy, Role: "canary", Side: side, Revision: d.Deploy.Revision}
		rr := r.revisions(side)
		if rr == nil {
			return applied, &AdapterError{Adapter: "revision " + string(side), Op: "deploy", Hop: hop.String(),
				Err: Permanent(fmt.Errorf("%w runner: no RevisionReader for side %s", ErrInvalid, side))}
		}
		dep, ok := rr.(Deployer)
		if !ok {
			// The caller deploys: the strategy waits until the side
			// reports the revision.
			log.V(1).Info("waiting for the caller to deploy", "revision", d.Deploy.Revision, "side", side)
			return applied, nil
		}
		if err := dep.Deploy(ctx, d.Deploy.Revision); err != nil {
			return applied, &AdapterError{Adapter: "revision " + string(side), Op: "deploy", Hop: hop.String(), Err: err}
		}
		log.V(1).Info("hop", "hop", hop.String())
		applied = append(applied, hop)
	}
	return applied, nil
}

// Run drives one rollout to a terminal phase in this process: it loads the
// state from Store (or starts from initial when nothing is saved), reconciles,
// saves after every change, and waits for the requeue, a command or ctx.
// Killed and restarted, it resumes where the Store says it was. A HopStore
// writing through the Runner's Router takes every weight hop with its state
// in one write; other hops and commands are saved alone.
//
// A state the Store refuses for what it is (ErrStateRefused) never holds a
// walk back: a hop toward the stable side goes with a reduced form of the
// state, or none, hops toward the canary wait until the whole state fits,
// and the state reports Degraded (ReasonStateRefused); a rollout that ends
// while only a reduced form is stored returns an error matching
// ErrStateRefused. A ControlStore's strategy.Control is applied before
// every reconcile. Commands are applied between reconciles to the state in
// memory, at the Runner's clock, and saved at once; a state stamped by
// another clock makes Run return strategy.ErrClockSkew with a terminal state.
//
// A failed save is retried every RetryInterval: no change is dropped, and
// no terminal state is returned before it is stored; when ctx ends with a
// change unsaved, Run returns an error wrapping ErrUnsaved. A reconcile that
// fails because ctx ended records nothing: Run returns the state before it,
// and ctx's error. On a finished state (terminal or idle) Run reconciles
// once and returns, or, with a commands channel, waits for commands until
// one starts a rollout (run to its end), commands is closed (nil error) or
// ctx ends. Once Run has returned, no watch, poll or goroutine it started is
// left and no wake of it is delivered, so Run may be called again and again.
// With a manual clock, a pending requeue timer of Run's means Run is blocked
// (or about to block) with nothing to do. See docs/design/rollout.md.
func (r *Runner) Run(ctx context.Context, initial strategy.State, commands <-chan Command) (strategy.State, error) {
	if err := r.Validate(); err != nil {
		return initial, err
	}
	if r.Store == nil {
		return initial, fmt.Errorf("%w runner: Run needs a Store", ErrInvalid)
	}
	ctx = r.withOwner(ctx) // claim.go: the Store's saves are the owner's too
	log := logr.FromContextOrDiscard(ctx)
	clk := clock.OrReal(r.Clock)
	s, err := r.Store.Load(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		s = initial
	case err != nil:
		return initial, &AdapterError{Adapter: "store", Op: "load", Err: err}
	}
	finished := func() bool { return s.Phase.Terminal() || s.Idle() }
	// await: Run started on a finished state with a commands channel, and
	// waits for a command that starts a rollout.
	await := commands != nil && finished()
	// saved is the state the Store holds; s the one in memory, which every
	// reconcile starts from. A state that differs from saved only in its
	// volatile fields (strategy.Changed) is not written.
	saved := s
	dirty := false // s holds changes the Store does not have yet
	// refused is why the Store last refused the whole state
	// (ErrStateRefused), nil once it took it: s then reports it Degraded,
	// and what the Store holds is a reduced form of saved, or an older
	// state when dirty.
	var refused error
	store := func(next strategy.State) {
		prev := s
		s = next
		if !dirty && !strategy.Changed(&saved, &s) {
			return
		}
		dirty = true
		err := r.Store.Save(ctx, s)
		if err == nil {
			saved, dirty, refused = s, false, nil
			return
		}
		if errors.Is(err, ErrStateRefused) {
			// Kept as it can be: reduced, or in memory only, and
			// Degraded with the reason until the whole state fits.
			refused = err
			s = withRefusal(&prev, s, err, clk.Now())
			if !strategy.Changed(&saved, &s) {
				dirty = false // the Store holds it already, reduced
				return
			}
			if err = saveReduced(s, func(f strategy.State) error { return r.Store.Save(ctx, f) }); err == nil {
				log.Error(refused, "the store refuses the state: saved a reduced form of it")
				saved, dirty = s, false
				return
			}
		} else if refused != nil {
			s = withRefusal(&prev, s, refused, clk.Now())
		}
		log.Error(&AdapterError{Adapter: "store", Op: "save", Err: err}, "saving the state failed; will retry", "after", r.retryAfter())
	}
	ended := func() (strategy.State, error) {
		if dirty {
			return s, fmt.Errorf("%w runner: %w", ErrUnsaved, ctx.Err())
		}
		return s, ctx.Err()
	}
	// The subscriptions live in subCtx, which ends before Run returns; Run
	// then waits for those that track their end.
	subCtx, cancel := context.WithCancel(ctx)
	subCtx, subs := withTracker(subCtx)
	defer subs.wait()
	defer cancel()
	wake, watched := r.notifications(subCtx)
	watched = watched || r.Watched
	controls, _ := r.Store.(ControlStore)
	// A HopStore that writes through the Router takes every weight hop
	// with the state that records it: one write, and nothing left to save.
	var hw *hopWrite
	if hs, ok := r.Store.(HopStore); ok && r.Router != nil && hs.Moves(r.Router) {
		hw = &hopWrite{store: hs, saved: func(st strategy.State) { saved, dirty = st, false }, refused: func(err error) { refused = err }}
	}
	for {
		if controls != nil {
			// The control written next to the state (ControlStore): its
			// requests act once each, like commands.
			c, err := controls.LoadControl(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return ended()
			case err != nil:
				log.Error(&AdapterError{Adapter: "store", Op: "load control", Err: err}, "reading the control failed; will retry")
			default:
				next, applied := s.Control(c, clk.Now())
				for _, a := range applied {
					log.Info("control", "command", a.Command, "token", a.Token, "ignored", a.Ignored)
				}
				if len(applied) > 0 {
					store(next)
					if !finished() {
						await = false // a rollout goes on: Run returns when it ends
					}
				}
			}
		}
		next, requeue, err := r.reconcileAt(ctx, s, clk.Now(), watched, hw)
		if err != nil && ctx.Err() != nil {
			// The reconcile failed because ctx ended: nothing it saw holds.
			return ended()
		}
		store(next)
		if dirty {
			requeue = min(requeue, r.retryAfter())
		}
		if err == nil && !dirty && finished() && !await {
			if refused != nil {
				// Stored, reduced: say why the whole state is not.
				return s, &AdapterError{Adapter: "store", Op: "save", Err: refused}
			}
			return s, nil
		}
		if errors.Is(err, strategy.ErrClockSkew) && !dirty && s.Phase.Terminal() && !await {
			return s, err // finished, but stamped by another clock: say so
		}
		if requeue <= 0 {
			requeue = r.retryAfter() // keep observing: a gate verdict or a new observation may arrive
		}
		if await && !dirty && finished() {
			requeue = 0 // nothing to observe until a command starts a rollout
		}
		// Take what is already pending first, so that the timer is armed
		// only when Run is about to block with nothing to do.
		var (
			cmd     Command
			got, ok bool // a command (ok), or the channel closed (!ok)
		)
		select {
		case <-ctx.Done():
			return ended()
		case cmd, ok = <-commands:
			got = true
		case <-wake:
		default:
			var fired chan struct{}
			stop := func() bool { return false }
			if requeue > 0 {
				fired = make(chan struct{})
				stop = clk.AfterFunc(requeue, func() { close(fired) })
			}
			select {
			case <-ctx.Done():
				stop()
				return ended()
			case cmd, ok = <-commands:
				got = true
				stop()
			case <-wake:
				// An adapter reports a change: reconcile now. Changes
				// that arrive meanwhile are coalesced into one more
				// reconcile.
				stop()
			case <-fired:
			}
		}
		if got {
			if !ok {
				commands, await = nil, false
				continue
			}
			store(cmd(s, clk.Now()))
			if !finished() {
				await = false // a rollout started: Run returns when it ends
			}
		}
	}
}

// notifications subscribes to every adapter that implements Notifier, once
// each, with ctx (which ends before Run returns), and returns a channel
// that holds at most one pending wake-up: a burst of changes is one
// reconcile. A wake that comes after ctx ended is dropped. Adapters that
// cannot notify are polled. watched reports whether every adapter that
// observes the world (the Router, the capacity setters, the revision
// readers that are set) notifies, so that Run need not poll fast after a
// hop.
func (r *Runner) notifications(ctx context.Context) (wakes <-chan struct{}, watched bool) {
	ch := make(chan struct{}, 1)
	wake := func() {
		if ctx.Err() != nil {
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	watched = true
	subscribed := map[any]bool{} // adapter value -> Notify succeeded
	for i, a := range []any{r.Router, r.A, r.B, r.RevisionA, r.RevisionB, r.Health, r.Analyzer} {
		observes := i < 5
		if a == nil || reflect.ValueOf(a).Kind() == reflect.Pointer && reflect.ValueOf(a).IsNil() {
			continue
		}
		n, ok := a.(Notifier)
		if !ok {
			watched = watched && !observes
			continue
		}
		key := any(n)
		if reflect.TypeOf(a).Kind() != reflect.Pointer { // one subscription per adapter value
			key = &struct{ int }{i} // not comparable or not shared: its own key
		}
		done, seen := subscribed[key]
		if !seen {
			err := n.Notify(ctx, wake)
			if err != nil {
				logr.FromContextOrDiscard(ctx).Error(err, "adapter notifications unavailable; polling")
			}
			done = err == nil
			subscribed[key] = done
		}
		watched = watched && (done || !observes)
	}
	return ch, watched
}

// ErrUnsaved is wrapped by Run's error when ctx ends before a change of the
// state (a command, a hop) could be saved.
var ErrUnsaved = errors.New("rollout: state not saved")

// Command changes a state at an instant: strategy.State.Resume,
// strategy.State.Pause, or a closure such as
// func(s strategy.State, t time.Time) strategy.State { return s.Abort("slow", t) }.
type Command func(strategy.State, time.Time) strategy.State
