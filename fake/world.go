package fake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// WorldOptions configure a World. Strategy and Revision are required; every
// other field has a default, and the fault fields (RouterLag, SideLag,
// Partial, FailEvery, UnhealthyCanary) are off at their zero values. The
// strategy's Options.Capacity picks the capacity mode: managed (a Router and
// a Capacity per side), fixed (a Router and a Deployment per side) or
// replicas (a Capacity per side, no Router: traffic follows ready replicas).
//
// The zero value is not valid (see Validate). A WorldOptions is a plain
// value: safe for concurrent use as long as nobody writes it.
type WorldOptions struct {
	// Strategy is the strategy the World's Runner steps.
	Strategy strategy.Strategy
	// Revision is the revision side A runs, and serves all traffic with,
	// when the World is built (side B runs none).
	Revision string
	// Replicas is the full replica count of each side; 0 means 10.
	Replicas int32
	// Requests is the number of requests sent at every Tick; 0 means 1000.
	Requests int64
	// Tick is the simulated time between two ticks of traffic (and two
	// observations); 0 means 100ms.
	Tick time.Duration
	// Now is the instant the World's Clock starts at; the zero value means
	// 2026-01-01T00:00:00Z.
	Now time.Time
	// Deadline bounds each RunUntil in simulated time; 0 means one hour
	// plus twice the strategy's Plan run with the World's lags, polls and
	// failed writes as its ready and route delays (a strategy of many small
	// hops on slow sides takes long, and is still live).
	Deadline time.Duration
	// Reconcile is the reconciler under test: RunUntil calls it with the
	// World's Runner, the state and the clock's time, and stores the state
	// it returns; it reconciles again after the duration returned (0: at
	// the next tick). nil means r.ReconcileAt(ctx, s, now).
	Reconcile func(ctx context.Context, r *rollout.Runner, s strategy.State, now time.Time) (strategy.State, time.Duration, error)

	// RouterLag delays every change of the route's weights (Router.SetLag).
	RouterLag Lag
	// SideLag delays new replicas and deploys on both sides
	// (Capacity.SetLag, FixedSide.SetLag).
	SideLag Lag
	// Partial makes new replicas become ready one per observation
	// (Capacity.SetPartial).
	Partial bool
	// FailEvery makes every FailEvery-th write of the Runner to the route,
	// and to each side's capacity (each counted apart), fail with a
	// transient error; 0 means none fails.
	FailEvery int
	// UnhealthyCanary makes the canary side of every rollout begun with
	// Start or Command report strategy.HealthUnhealthy (Capacity.SetHealth)
	// once it runs the canary revision: the World sets the Runner's Health
	// to report it.
	UnhealthyCanary bool
}

// Validate reports every problem with the options, each naming its field
// and matching rollout.ErrInvalid (or strategy.ErrInvalid for the
// strategy's own options).
func (o *WorldOptions) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w fake world: "+format, append([]any{rollout.ErrInvalid}, args...)...))
	}
	if o.Strategy == nil {
		bad("WorldOptions.Strategy is required")
	} else if err := o.Strategy.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("fake world: WorldOptions.Strategy: %w", err))
	}
	if o.Revision == "" {
		bad("WorldOptions.Revision is required: the revision side A runs and serves at the start")
	}
	if o.Replicas < 0 {
		bad("WorldOptions.Replicas %d: must be 0 (10) or more", o.Replicas)
	}
	if o.Requests < 0 {
		bad("WorldOptions.Requests %d: must be 0 (1000) or more", o.Requests)
	}
	if o.Tick < 0 {
		bad("WorldOptions.Tick %s: must be 0 (100ms) or more", o.Tick)
	}
	if o.Deadline < 0 {
		bad("WorldOptions.Deadline %s: must be 0 (the default) or more", o.Deadline)
	}
	if o.FailEvery < 0 || o.FailEvery == 1 {
		bad("WorldOptions.FailEvery %d: must be 0 (no failure) or at least 2", o.FailEvery)
	}
	for _, l := range []struct {
		name string
		lag  Lag
	}{{"RouterLag", o.RouterLag}, {"SideLag", o.SideLag}} {
		if l.lag.Reads < 0 || l.lag.Duration < 0 {
			bad("WorldOptions.%s %+v: must not be negative", l.name, l.lag)
		}
	}
	return errors.Join(errs...)
}

// ErrNotReached is the sentinel of a RunUntil that did not reach its phase
// (see NotReachedError).
var ErrNotReached = errors.New("fake: phase not reached")

// NotReachedError is returned by World.RunUntil when the rollout ended in
// another terminal phase, or the deadline in simulated time passed, before
// the phase asked for. It matches ErrNotReached and wraps the Runner's last
// error, if any. The zero value reports nothing useful; it is a plain
// value, safe for concurrent use once returned.
type NotReachedError struct {
	// Want is the phase RunUntil waited for; Phase the one reached, and
	// Message the state's message then.
	Want, Phase strategy.Phase
	Message     string
	// After is the simulated time RunUntil ran; Deadline is true when it
	// gave up at the deadline, false when the rollout ended in Phase.
	After    time.Duration
	Deadline bool
	// Err is the error of the Runner's last reconcile, nil if it had none.
	Err error
}

func (e *NotReachedError) Error() string {
	phase := string(e.Phase)
	if phase == "" {
		phase = "idle (no phase)"
	}
	why := "the rollout ended " + phase
	if e.Deadline {
		why = fmt.Sprintf("still %s at the deadline", phase)
	}
	msg := fmt.Sprintf("fake world: phase %s not reached after %s: %s (message %q)", e.Want, e.After, why, e.Message)
	if e.Err != nil {
		msg += "; last reconcile error: " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrNotReached and the Runner's last error.
func (e *NotReachedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotReached}
	}
	return []error{ErrNotReached, e.Err}
}

// TB is the part of testing.TB that World.AssertSafe uses; *testing.T,
// *testing.B and *rapid.T satisfy it. AssertSafe calls it from the
// goroutine that called AssertSafe only.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// World is a whole in-memory world for one rollout at a time: two sides
// with revisions, a Router (except in the replicas mode), Traffic, a
// manual Clock and a rollout.Runner wired to them, and the rollout's
// state. Side A runs WorldOptions.Revision and serves every request; side
// B runs nothing until the Runner deploys the canary revision on it. Start
// begins a rollout, RunUntil drives the clock, the traffic and the Runner
// until a phase, and AssertSafe checks every observation the World
// recorded on the way.
//
// The World records an observation after every reconcile, every tick of
// traffic and every command: the weights the data plane applied, each
// side's capacity, readiness and revision, the requests of the last tick
// and the state. A test reaches into the pieces for anything the options do
// not offer (Side(strategy.SideB).Crash(3), Router().Reject("...")); what
// it breaks shows in the next observation.
//
// Build one with NewWorld; the zero value is not usable. Safe for
// concurrent use: its methods take turns, a RunUntil holding the World
// until it returns.
type World struct {
	mu      sync.Mutex
	opts    WorldOptions
	mode    strategy.CapacityMode
	began   time.Time
	clock   *Clock
	router  *Router // nil in the replicas mode
	sides   [2]*Capacity
	traffic *Traffic
	runner  *rollout.Runner
	state   strategy.State
	lastErr error

	stats      TrafficStats // at the last observation
	violations [2]int       // deploy violations seen so far, per side
	findings   [ruleCount]finding

	health *canaryHealth // the Runner's Health with UnhealthyCanary
}

// NewWorld builds a World from opts (see WorldOptions), its state idle on
// the stable revision. It returns the options' errors (see
// WorldOptions.Validate) and the Runner's (rollout.Runner.Validate).
func NewWorld(opts WorldOptions) (*World, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Replicas == 0 {
		opts.Replicas = 10
	}
	if opts.Requests == 0 {
		opts.Requests = 1000
	}
	if opts.Tick == 0 {
		opts.Tick = 100 * time.Millisecond
	}
	if opts.Now.IsZero() {
		opts.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.Deadline == 0 {
		opts.Deadline = time.Hour + 2*slowPlan(opts)
	}
	w := &World{opts: opts, mode: opts.Strategy.Shared().Capacity, began: opts.Now, clock: NewClock(opts.Now)}
	w.state = strategy.NewState(opts.Revision, opts.Revision)
	r := &rollout.Runner{Strategy: opts.Strategy, Clock: w.clock}
	if w.mode != strategy.CapacityReplicas {
		w.router = NewRouter(w.clock)
		w.router.SetLag(opts.RouterLag)
		r.Router = w.router
		if opts.FailEvery > 0 {
			fails := &failEvery{n: opts.FailEvery}
			r.Router = InterceptRouter(w.router, RouterFuncs{
				SetWeights: func(ctx context.Context, next rollout.TrafficRouter, wt rollout.Weights) error {
					if err := fails.next("route weights"); err != nil {
						return err
					}
					return next.SetWeights(ctx, wt)
				},
				SetRoutes: func(ctx context.Context, next rollout.ExtrasRouter, rt rollout.Routes) error {
					if err := fails.next("route weights and extras"); err != nil {
						return err
					}
					return next.SetRoutes(ctx, rt)
				},
			})
		}
	}
	var deps [2]*FixedSide
	for i, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		rev := ""
		if side == strategy.SideA {
			rev = opts.Revision
		}
		var c *Capacity
		if w.mode == strategy.CapacityFixed {
			deps[i] = NewFixedSide(w.clock, opts.Replicas, rev)
			c = deps[i].c
		} else {
			percent := int32(0)
			if side == strategy.SideA {
				percent = 100
			}
			c = NewCapacity(w.clock, CapacityOptions{Replicas: opts.Replicas, Percent: percent})
			if rev != "" {
				c.SetRevision(rev)
			}
		}
		c.SetLag(opts.SideLag)
		c.SetPartial(opts.Partial)
		if w.router != nil {
			c.ServingFunc(w.router.Serving(side))
		}
		w.sides[i] = c
	}
	a, b := w.sides[0], w.sides[1]
	switch w.mode {
	case strategy.CapacityFixed:
		r.RevisionA, r.RevisionB = deps[0], deps[1]
		w.traffic = NewFixedTraffic(w.router, deps[0], deps[1], opts.Requests)
	default:
		r.RevisionA, r.RevisionB = a, b
		r.A, r.B = a, b
		if opts.FailEvery > 0 {
			r.A = (&failEvery{n: opts.FailEvery}).capacity(a)
			r.B = (&failEvery{n: opts.FailEvery}).capacity(b)
		}
		w.traffic = NewTraffic(w.router, a, b, opts.Requests)
	}
	if opts.UnhealthyCanary {
		w.health = &canaryHealth{}
		r.Health = w.health
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("fake world: %w", err)
	}
	w.runner = r
	w.record("built")
	return w, nil
}

// failEvery fails every n-th write to one adapter.
type failEvery struct {
	mu    sync.Mutex
	n     int
	calls int
}

func (f *failEvery) next(what string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.n > 0 && f.calls%f.n == 0 {
		return fmt.Errorf("fake world: write %d (%s) failed on purpose (WorldOptions.FailEvery %d)", f.calls, what, f.n)
	}
	return nil
}

func (f *failEvery) capacity(c *Capacity) rollout.CapacitySetter {
	return InterceptCapacity(c, CapacityFuncs{
		SetCapacity: func(ctx context.Context, next rollout.CapacitySetter, r rollout.CapacityRequest) error {
			if err := f.next("side capacity"); err != nil {
				return err
			}
			return next.SetCapacity(ctx, r)
		},
	})
}

// canaryHealth is the Runner's Health with UnhealthyCanary: the health
// the canary side reports (SetHealth) once it runs the canary revision,
// Unknown before.
type canaryHealth struct {
	mu       sync.Mutex
	side     *Capacity
	revision string
}

func (h *canaryHealth) Health(context.Context) (strategy.Health, string, error) {
	h.mu.Lock()
	side, revision := h.side, h.revision
	h.mu.Unlock()
	if side == nil || side.RevisionStatus().Revision != revision {
		return strategy.HealthUnknown, "", nil
	}
	st := side.Status()
	return st.Health, st.HealthMessage, nil
}

// Clock returns the World's manual clock. Advancing it by hand moves time
// without traffic; RunUntil sends traffic at every tick.
func (w *World) Clock() *Clock { return w.clock }

// Router returns the World's route, nil in the replicas capacity mode.
func (w *World) Router() *Router { return w.router }

// Side returns the workload of a physical side (strategy.SideB, or side A
// for any other value): in the fixed mode, the Capacity behind the side's FixedSide, which stays
// fully provisioned. Its test controls (Crash, CrashLoop, SetHealth,
// Redeploy, StallDeploys, FailWith...) inject faults into the World.
func (w *World) Side(side strategy.Side) *Capacity {
	if side == strategy.SideB {
		return w.sides[1]
	}
	return w.sides[0]
}

// Traffic returns the World's traffic simulator (SetErrorRate, RecordTo,
// Stats).
func (w *World) Traffic() *Traffic { return w.traffic }

// Runner returns the World's Runner. A test may set its Analyzer, Health
// or Observer before RunUntil, or use its adapters in a Runner of its own.
func (w *World) Runner() *rollout.Runner { return w.runner }

// State returns the rollout's state as of the last reconcile or command.
func (w *World) State() strategy.State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Start begins a rollout toward revision: State.Retarget at the clock's
// time (see Command). Mid-rollout it retargets the rollout.
func (w *World) Start(revision string) {
	w.Command(func(s strategy.State, now time.Time) strategy.State { return s.Retarget(revision, now) })
}

// Command applies cmd to the state at the clock's time (a Pause, Resume,
// Abort, Promote or Retarget), and records an observation. With
// WorldOptions.UnhealthyCanary, the canary side of the resulting rollout
// reports unhealthy from then on. A nil cmd does nothing.
func (w *World) Command(cmd rollout.Command) {
	if cmd == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state = cmd(w.state, w.clock.Now())
	if w.opts.UnhealthyCanary && !w.state.Idle() {
		canary := w.Side(stableSide(&w.state).Other())
		canary.SetHealth(strategy.HealthUnhealthy, "unhealthy on purpose (WorldOptions.UnhealthyCanary)")
		w.Side(stableSide(&w.state)).SetHealth(strategy.HealthUnknown, "")
		w.health.mu.Lock()
		w.health.side, w.health.revision = canary, w.state.CanaryRevision
		w.health.mu.Unlock()
	}
	w.record("command")
}

func stableSide(s *strategy.State) strategy.Side {
	if s.StableSide == strategy.SideB {
		return strategy.SideB
	}
	return strategy.SideA
}

// reached reports whether s is in phase want (for PhasePaused, also a
// manual pause in another phase).
func reached(s *strategy.State, want strategy.Phase) bool {
	return s.Phase == want || want == strategy.PhasePaused && s.AwaitingResume
}

// RunUntil reconciles the rollout with the Runner (or
// WorldOptions.Reconcile), at the times it asks for, while the clock advances tick by tick with a Traffic tick each,
// until the state reaches phase want (PhasePaused: also a manual pause),
// and returns the state then. It gives up with a *NotReachedError when the
// rollout ends in another terminal phase, or when WorldOptions.Deadline of
// simulated time passes; it returns ctx's error when ctx ends. A state
// already in want returns at once. The Runner's own errors (an adapter
// that fails) do not stop it: the Runner retries, and the last error is in
// a NotReachedError.
func (w *World) RunUntil(ctx context.Context, want strategy.Phase) (strategy.State, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := w.clock.Now()
	deadline := start.Add(w.opts.Deadline)
	w.lastErr = nil
	for {
		if err := ctx.Err(); err != nil {
			return w.state, err
		}
		if reached(&w.state, want) {
			return w.state, nil
		}
		now := w.clock.Now()
		reconcile := w.opts.Reconcile
		if reconcile == nil {
			reconcile = func(ctx context.Context, r *rollout.Runner, s strategy.State, now time.Time) (strategy.State, time.Duration, error) {
				return r.ReconcileAt(ctx, s, now)
			}
		}
		next, requeue, err := reconcile(ctx, w.runner, w.state, now)
		w.state, w.lastErr = next, err
		w.record("reconcile")
		if reached(&w.state, want) {
			return w.state, nil
		}
		if w.state.Phase.Terminal() || !now.Before(deadline) {
			return w.state, &NotReachedError{Want: want, Phase: w.state.Phase, Message: w.state.Message,
				After: now.Sub(start), Deadline: !w.state.Phase.Terminal(), Err: w.lastErr}
		}
		wait := requeue
		if wait <= 0 {
			wait = w.opts.Tick
		}
		wait = min(wait, deadline.Sub(now))
		for wait > 0 {
			step := min(wait, w.opts.Tick)
			w.clock.Advance(step)
			wait -= step
			w.traffic.Tick()
			w.record("tick")
		}
	}
}

// The rules AssertSafe checks, in the order it reports them.
const (
	ruleOverload = iota
	ruleDrop
	ruleSurge
	ruleRevision
	ruleDeploy
	ruleDegraded
	ruleCount
)

var ruleNames = [ruleCount]string{
	ruleOverload: "overload",
	ruleDrop:     "dropped requests",
	ruleSurge:    "surge over budget",
	ruleRevision: "traffic to the wrong revision",
	ruleDeploy:   "deploy under traffic or capacity",
	ruleDegraded: "Degraded hold",
}

// finding is what one rule found: the first observation that broke it, how
// many did, and the last one's instant.
type finding struct {
	count       int
	first, last time.Time
	what        string
}

// surgeBudget is the capacity the strategy may hold above 100 percent in
// the managed and replicas modes; -1 when there is no bound to check.
func surgeBudget(s strategy.Strategy) int32 {
	switch s := s.(type) {
	case strategy.Incremental:
		return s.MaxSurgePercent
	case *strategy.Incremental:
		return s.MaxSurgePercent
	case strategy.Canary:
		return s.MaxSurgePercent
	case *strategy.Canary:
		return s.MaxSurgePercent
	}
	return 100 // BlueGreen and others: a whole canary next to the stable side
}

// record takes an observation of the world now and checks it against every
// rule. The caller holds w.mu.
func (w *World) record(event string) {
	now := w.clock.Now()
	stats := w.traffic.Stats()
	ticked := stats.Ticks > w.stats.Ticks
	sent := (stats.Served + stats.Overloaded + stats.Dropped) - (w.stats.Served + w.stats.Overloaded + w.stats.Dropped)
	overloaded, dropped := stats.Overloaded-w.stats.Overloaded, stats.Dropped-w.stats.Dropped
	lostCopies := stats.A.MirrorLost + stats.B.MirrorLost - w.stats.A.MirrorLost - w.stats.B.MirrorLost
	w.stats = stats

	type sideObs struct {
		side     strategy.Side
		st       rollout.CapacityStatus
		rev      rollout.RevisionStatus
		share    int32
		canary   bool
		wantRevs string
	}
	var obs [2]sideObs
	stable := stableSide(&w.state)
	var applied rollout.Routes
	if w.router != nil {
		applied = w.router.AppliedRoutes()
	}
	for i, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		c := w.sides[i]
		o := sideObs{side: side, st: c.Status(), rev: c.RevisionStatus(), canary: side != stable}
		o.wantRevs = w.state.StableRevision
		if o.canary {
			o.wantRevs = w.state.CanaryRevision
		}
		if w.router != nil {
			o.share = loadOf(applied.Weights, programmedOf(applied), side)
		}
		obs[i] = o
	}
	if w.router == nil { // traffic follows ready replicas
		if ra, rb := obs[0].st.Ready, obs[1].st.Ready; ra+rb > 0 {
			obs[0].share = max(ra*100/(ra+rb), min(ra, 1))
			obs[1].share = max(rb*100/(ra+rb), min(rb, 1))
		}
	}
	sidesText := func() string {
		parts := make([]string, 2)
		for i, o := range obs {
			parts[i] = fmt.Sprintf("side %s: %d%% of requests, capacity %d, ready %d%%", o.side, o.share, o.st.Capacity, o.st.Ready)
		}
		return strings.Join(parts, "; ")
	}
	if ticked && overloaded > 0 {
		w.found(ruleOverload, now, fmt.Sprintf("%d of %d requests overloaded a side (%s)", overloaded, sent, sidesText()))
	}
	if ticked && lostCopies > 0 {
		w.found(ruleOverload, now, fmt.Sprintf("%d mirrored copies found the canary without ready capacity for them (%s)", lostCopies, sidesText()))
	}
	if ticked && dropped > 0 {
		w.found(ruleDrop, now, fmt.Sprintf("%d of %d requests dropped (%s)", dropped, sent, sidesText()))
	}
	if w.mode != strategy.CapacityFixed {
		budget := surgeBudget(w.opts.Strategy)
		if total := obs[0].st.Capacity + obs[1].st.Capacity; total > 100+budget {
			w.found(ruleSurge, now, fmt.Sprintf("the sides hold %d%% of capacity (A %d, B %d), above 100 + the surge budget %d",
				total, obs[0].st.Capacity, obs[1].st.Capacity, budget))
		}
	}
	for _, o := range obs {
		if o.share > 0 && o.rev.Revision != o.wantRevs {
			role := "stable"
			if o.canary {
				role = "canary"
			}
			w.found(ruleRevision, now, fmt.Sprintf("side %s receives %d%% of requests and runs %s, but as the %s side it must run %q",
				o.side, o.share, revText(o.rev), role, o.wantRevs))
		}
	}
	for i, c := range w.sides {
		v := c.Violations()
		for _, line := range v[min(w.violations[i], len(v)):] {
			w.found(ruleDeploy, now, fmt.Sprintf("side %s: %s", obs[i].side, line))
		}
		w.violations[i] = len(v)
	}
	for _, c := range w.state.Conditions {
		if c.Type == strategy.ConditionDegraded && c.Status == metav1.ConditionTrue &&
			c.Reason != strategy.ReasonAborted && c.Reason != strategy.ReasonObservationFailed {
			w.found(ruleDegraded, now, fmt.Sprintf("Degraded (%s) after a %s: %s", c.Reason, event, c.Message))
		}
	}
}

// revText names a side's observed revision: "v2", "v2 (not rolled out)",
// `no revision ("" reported)`.
func revText(r rollout.RevisionStatus) string {
	switch {
	case r.Revision == "":
		return `no revision ("" reported)`
	case !r.Updated:
		return fmt.Sprintf("%q (not rolled out)", r.Revision)
	}
	return fmt.Sprintf("%q", r.Revision)
}

// found notes that the observation at now broke rule: what, the first time.
func (w *World) found(rule int, now time.Time, what string) {
	f := &w.findings[rule]
	if f.count == 0 {
		f.first, f.what = now, fmt.Sprintf("phase %s: %s", phaseText(&w.state), what)
	}
	f.count++
	f.last = now
}

// phaseText names the phase of s: "idle" and "not started" for none.
func phaseText(s *strategy.State) string {
	switch {
	case s.Phase != "":
		return string(s.Phase)
	case s.Idle():
		return "idle"
	}
	return "not started"
}

// AssertSafe fails t (t.Errorf, once per broken rule) unless every
// observation the World recorded was safe:
//
//   - overload: no request found a side with ready capacity short of its
//     share (Traffic's Overloaded), and no mirrored copy found the canary
//     without ready capacity left for it (SideTraffic.MirrorLost);
//   - dropped requests: no request found a side with nothing ready, or no
//     route (Traffic's Dropped);
//   - surge over budget: in the managed and replicas modes, the two sides'
//     capacities never summed above 100 plus the strategy's
//     MaxSurgePercent (100 for BlueGreen);
//   - traffic to the wrong revision: a side that receives requests runs its
//     role's revision (the stable side the stable revision, the canary side
//     the canary one), as the side reports it;
//   - deploy under traffic or capacity: the sides recorded no Violations;
//   - Degraded hold: the state's Degraded condition was never True, except
//     with reason Aborted (an abort's record, which the phase shows) and
//     ObservationFailed (an adapter error the Runner retries; one that
//     lasts ends as ProgressDeadlineExceeded, which counts).
//
// Each message names the rule, the instant of the first observation that
// broke it (clock time and time since the World was built), the phase and
// what was observed, and how many observations broke it until when. An
// AbortEmergency abort overloads the stable side on purpose; AssertSafe
// reports it like any other overload.
func (w *World) AssertSafe(t TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for rule, f := range w.findings {
		if f.count == 0 {
			continue
		}
		msg := fmt.Sprintf("fake world: %s at %s (+%s), %s", ruleNames[rule], f.first.Format("15:04:05.000"), f.first.Sub(w.began), f.what)
		if f.count > 1 {
			msg += fmt.Sprintf(" [%d observations broke this rule, the last at +%s]", f.count, f.last.Sub(w.began))
		}
		t.Errorf("%s", msg)
	}
}

// slowPlan is how long the strategy's Plan takes when every change waits as
// long as the World's faults can make it: the lag, one poll per lagged read
// and two more to observe it, and with FailEvery one more poll for the write
// that fails. A strategy whose plan cannot be made counts zero.
func slowPlan(opts WorldOptions) time.Duration {
	poll := opts.Strategy.Shared().PollInterval.Duration
	if poll <= 0 {
		poll = strategy.DefaultPollInterval
	}
	slow := func(l Lag) time.Duration {
		d := l.Duration + time.Duration(l.Reads+2)*poll
		if opts.FailEvery > 0 {
			d += poll
		}
		return d
	}
	plan, err := strategy.Plan(opts.Strategy, strategy.PlanOptions{Start: opts.Now,
		ReadyDelay: slow(opts.SideLag), RouteDelay: slow(opts.RouterLag)})
	if err != nil {
		return 0
	}
	return plan.Duration
}
