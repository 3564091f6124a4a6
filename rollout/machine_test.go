package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// machineSteps counts the actions the state machine ran, across checks.
var machineSteps atomic.Int64

// TestMain raises rapid's defaults for this package so that one run of the
// state machine covers at least 100k actions, unless flags say otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.checks"] {
		_ = flag.Set("rapid.checks", "1000")
	}
	checksSet = set["rapid.checks"]
	if !set["rapid.steps"] {
		_ = flag.Set("rapid.steps", "120")
	}
	code := m.Run()
	if n := machineSteps.Load(); n > 0 {
		fmt.Printf("runner state machine: %d actions in total\n", n)
	}
	os.Exit(code)
}

// checksSet reports whether -rapid.checks was given on the command line.
var checksSet bool

// withChecks runs f with rapid's checks at n, unless -rapid.checks was
// given: for properties whose every check runs whole processes (Run on a
// goroutine, a clock driven from the test), which the package's default
// would make slow. The package's tests do not run in parallel.
func withChecks(n int, f func()) {
	if checksSet {
		f()
		return
	}
	old := flag.Lookup("rapid.checks").Value.String()
	_ = flag.Set("rapid.checks", strconv.Itoa(n))
	defer func() { _ = flag.Set("rapid.checks", old) }()
	f()
}

var errTransient = errors.New("transient failure")

// machine is the Runner with fakes, driven by random actions. Check asserts
// the invariants stated in the strategy package documentation (# Invariants)
// on the applied values after every action.
type machine struct {
	strat     strategy.Strategy
	opts      strategy.Options
	surge     int32
	clock     *fake.Clock
	router    *fake.Router
	a, b      *fake.Capacity
	traffic   *fake.Traffic
	runner    *rollout.Runner
	s         strategy.State
	emergency bool // an emergency abort may drop requests, by design

	// crashedA/B: the side lost ready replicas and has not been whole since;
	// traffic above its ready capacity is then the world's doing.
	crashedA, crashedB bool
	// unsafeStart: the world began with traffic above ready capacity (a
	// stored state from elsewhere); cleared once traffic fits.
	unsafeStart bool
	stats       fake.TrafficStats
	// progressAt is the instant of the last visible progress (a write, a
	// change of phase or step), for the deadline check.
	progressAt time.Time
	writes     int
	// backDebt is how far the clock was moved back since the last progress:
	// recorded instants ahead of the clock count as no time passing.
	backDebt time.Duration

	// revisions: the sides report and deploy revisions (RevisionA/RevisionB):
	// the capacity fakes themselves, or in the fixed mode a fake.FixedSide
	// per side (da, db).
	revisions bool
	da, db    *fake.FixedSide
	// graceRevs: revisions a command just made abandoned; the traffic a
	// side running one carries is the world as it was, until a reconcile
	// has had the chance to walk it back and that walk back has ended
	// (endGrace).
	graceRevs []string

	// Other writers. foreign: a side another writer redeployed; the traffic
	// it carries is the world's doing until the Runner has reacted (a
	// canary side until it carries nothing, a stable side until it runs the
	// stable revision again). scaled: a side another writer scaled, with
	// the count of the Runner's writes to it then; traffic above its ready
	// capacity, and capacity above the surge budget, are the world's doing
	// until the Runner has written it again and it is whole.
	foreign map[strategy.Side]bool
	scaled  map[strategy.Side]int
	// scaledEver: another writer scaled a side in the replicas mode at some
	// point; the bound on the total ready capacity (MaxUnavailable) and the
	// count of overloaded requests are no longer checked, as the Runner,
	// holding what its state desires, may not restore them (the other
	// checks go on).
	scaledEver bool
	// saves are states a Store held earlier, for a status restored from an
	// older save.
	saves []strategy.State
}

func newMachine(t *rapid.T) *machine {
	mode := rapid.SampledFrom([]strategy.CapacityMode{strategy.CapacityManaged, strategy.CapacityFixed, strategy.CapacityReplicas}).Draw(t, "mode")
	opts := strategy.Options{Capacity: mode}
	opts.AbortRamp = rapid.SampledFrom([]strategy.AbortRamp{strategy.AbortImmediate, strategy.AbortGradual, strategy.AbortEmergency}).Draw(t, "ramp")
	if mode == strategy.CapacityReplicas {
		opts.AbortRamp = strategy.AbortImmediate
		opts.MaxUnavailablePercent = rapid.Int32Range(0, 30).Draw(t, "maxUnavailable")
	}
	opts.UnhealthyAction = rapid.SampledFrom([]strategy.UnhealthyAction{strategy.UnhealthyAbort, strategy.UnhealthyPause}).Draw(t, "unhealthyAction")
	if rapid.Bool().Draw(t, "deadline") {
		opts.ProgressDeadline = metav1.Duration{Duration: time.Duration(rapid.IntRange(5, 60).Draw(t, "deadlineSec")) * time.Second}
		opts.AbortOnProgressDeadline = rapid.Bool().Draw(t, "abortOnDeadline")
	}
	opts.ScaleDownDelay = metav1.Duration{Duration: time.Duration(rapid.IntRange(0, 30).Draw(t, "scaleDownDelaySec")) * time.Second}
	surge := rapid.Int32Range(1, 100).Draw(t, "surge")
	var strat strategy.Strategy
	if rapid.Bool().Draw(t, "incremental") {
		strat = strategy.Incremental{StepPercent: rapid.Int32Range(1, surge).Draw(t, "step"),
			Interval: metav1.Duration{Duration: time.Duration(rapid.IntRange(1, 60).Draw(t, "intervalSec")) * time.Second}, MaxSurgePercent: surge, Options: opts}
	} else {
		var steps []strategy.CanaryStep
		for i, n := 0, rapid.IntRange(0, 5).Draw(t, "steps"); i < n; i++ {
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0, 1:
				steps = append(steps, strategy.SetWeight(rapid.Int32Range(0, 100).Draw(t, "w")))
			case 2:
				steps = append(steps, strategy.Pause(time.Duration(rapid.IntRange(1, 120).Draw(t, "pauseSec"))*time.Second))
			default:
				steps = append(steps, strategy.PauseUntilResumed())
			}
		}
		strat = strategy.Canary{Steps: steps, MaxSurgePercent: surge, Options: opts}
	}
	m := &machine{strat: strat, opts: opts, surge: surge, clock: fake.NewClock(t0)}
	m.router = fake.NewRouter(m.clock)
	m.a = fake.NewCapacity(m.clock, fake.CapacityOptions{Replicas: rapid.Int32Range(1, 20).Draw(t, "replicasA"), Percent: 100})
	m.b = fake.NewCapacity(m.clock, fake.CapacityOptions{Replicas: rapid.Int32Range(1, 20).Draw(t, "replicasB"), Percent: 0})
	for _, c := range []*fake.Capacity{m.a, m.b} {
		c.KeepHistory(false)
	}
	m.router.KeepHistory(false)
	m.runner = &rollout.Runner{Strategy: strat, Clock: m.clock}
	switch mode {
	case strategy.CapacityManaged:
		m.runner.Router, m.runner.A, m.runner.B = m.router, m.a, m.b
		m.traffic = fake.NewTraffic(m.router, m.a, m.b, 1000)
	case strategy.CapacityFixed:
		m.runner.Router = m.router
		m.traffic = fake.NewTraffic(m.router, nil, nil, 1000)
	case strategy.CapacityReplicas:
		m.runner.A, m.runner.B = m.a, m.b
		m.traffic = fake.NewTraffic(nil, m.a, m.b, 1000)
	}
	m.s = strategy.NewState("v1", "v2")
	m.revisions = rapid.Bool().Draw(t, "revisions")
	if m.revisions {
		m.a.SetRevision("v1")
		m.runner.RevisionA, m.runner.RevisionB = m.a, m.b
		if mode == strategy.CapacityFixed {
			m.da, m.db = fake.NewFixedSide(m.clock, m.a.Replicas(), "v1"), fake.NewFixedSide(m.clock, m.b.Replicas(), "")
			m.da.KeepHistory(false)
			m.db.KeepHistory(false)
			m.runner.RevisionA, m.runner.RevisionB = m.da, m.db
			m.traffic = fake.NewFixedTraffic(m.router, m.da, m.db, 1000)
		}
		for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
			if mode != strategy.CapacityReplicas {
				m.sideDeployer(side).ServingFunc(m.router.Serving(side))
			}
		}
	} else if rapid.Bool().Draw(t, "storedState") {
		m.s = genStoredState(t)
	}
	m.progressAt = t0
	m.foreign, m.scaled = map[strategy.Side]bool{}, map[strategy.Side]int{}
	return m
}

// side returns the capacity fake of a side.
func (m *machine) side(sd strategy.Side) *fake.Capacity {
	if sd == strategy.SideB {
		return m.b
	}
	return m.a
}

// Redeploy is another writer redeploying a side with any revision, the one
// it runs included (a restart), or a template no revision maps to ("x"):
// what the side reports follows its content (revisions only; in the fixed
// mode the side is its fake.FixedSide).
func (m *machine) Redeploy(t *rapid.T) {
	if !m.revisions {
		t.Skip("no revisions on the sides")
	}
	sd := rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, "redeploySide")
	m.sideDeployer(sd).Redeploy(rapid.SampledFrom([]string{"v1", "v2", "v3", "x"}).Draw(t, "redeployRev"))
	m.foreign[sd] = true
	if sd == strategy.SideA {
		m.crashedA = true // its replicas restart
	} else {
		m.crashedB = true
	}
}

// Scale is another writer (a person, an autoscaler) scaling a side.
func (m *machine) Scale(t *rapid.T) {
	if m.opts.Capacity == strategy.CapacityFixed {
		t.Skip("no capacity setters")
	}
	sd := rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, "scaleSide")
	c := m.side(sd)
	if err := c.SetCapacity(context.Background(), rollout.CapacityRequest{Percent: rapid.Int32Range(0, 100).Draw(t, "scaleTo")}); err != nil {
		return // the side fails on purpose (AdapterError)
	}
	m.scaled[sd] = c.Writes()
	if m.opts.Capacity == strategy.CapacityReplicas {
		m.scaledEver = true
		m.foreign[sd] = true // ready replicas serve: its traffic is the world's doing until walked out
	}
}

// Wipe loses the stored state, as a controller whose status was wiped (or
// whose object was deleted and re-created with the same spec) sees it: the
// zero state and a Retarget to the spec's revision, or a state restored
// from an older save (through JSON) and the spec's Retarget. The spec's
// revision is the one the state names last.
func (m *machine) Wipe(t *rapid.T) {
	now := m.clock.Now()
	spec := m.s.PendingRevision
	if spec == "" {
		spec = m.s.CanaryRevision
	}
	if spec == "" {
		spec = "v1"
	}
	m.graceRevs = append(m.graceRevs, m.s.CanaryRevision, m.s.PendingRevision, m.s.StableRevision)
	if len(m.saves) == 0 || rapid.Bool().Draw(t, "wipe") {
		m.s = strategy.State{}.Retarget(spec, now)
		return
	}
	old := m.saves[rapid.IntRange(0, len(m.saves)-1).Draw(t, "save")]
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var s strategy.State
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	// A side that runs another revision than the restored state names for
	// it carries traffic by the world's doing.
	m.foreign[strategy.SideA], m.foreign[strategy.SideB] = true, true
	m.s = s.Retarget(spec, now)
}

// stored records a state a reconcile returned, for Wipe's older saves.
func (m *machine) stored(s strategy.State) {
	if len(m.saves) < 32 && !s.Unobserved {
		m.saves = append(m.saves, s)
	}
}

// checkReconcile checks what one reconcile from before did: a state that had
// not observed the world (Unobserved) wrote nothing and deployed nothing,
// and a rollout reported released by it (adopted as idle, or Succeeded) is
// observed released: all traffic on the stable side, which runs the stable
// revision.
func (m *machine) checkReconcile(t *rapid.T, before strategy.State, writes, deploys int) {
	if before.Unobserved && (m.router.Writes()+m.a.Writes()+m.b.Writes() != writes || m.deploys() != deploys) {
		t.Fatalf("a state that had not observed the world wrote to the adapters: %s -> %s (%s)", before.Phase, m.s.Phase, m.s.Message)
	}
	released := before.Unobserved && m.s.Idle() || before.Phase != strategy.PhaseSucceeded && m.s.Phase == strategy.PhaseSucceeded
	if !released || !before.Unobserved && !before.Phase.Known() {
		return
	}
	stable := m.s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	if m.opts.Capacity != strategy.CapacityReplicas {
		if rs, err := m.router.Status(); err == nil && rs.Weights.Of(stable) != 100 {
			t.Fatalf("reported released (%s -> %s, idle %v) with the route at %+v, stable side %s", before.Phase, m.s.Phase, m.s.Idle(), rs.Weights, stable)
		}
	}
	if m.revisions {
		if got := m.sideDeployer(stable).RevisionStatus(); got.Revision != m.s.StableRevision {
			t.Fatalf("reported released (%s -> %s) with the stable side %s running %+v, not %s", before.Phase, m.s.Phase, stable, got, m.s.StableRevision)
		}
	}
}

// deploys counts the deploys asked of the sides.
func (m *machine) deploys() int {
	switch {
	case !m.revisions:
		return 0
	case m.da != nil:
		return m.da.Deploys() + m.db.Deploys()
	}
	return m.a.Deploys() + m.b.Deploys()
}

// revisionSide is what the machine needs of a side that deploys revisions.
type revisionSide interface {
	RevisionStatus() rollout.RevisionStatus
	Redeploy(string)
	Status() rollout.CapacityStatus
	ServingFunc(func() int32)
	StallDeploys(bool)
	Violations() []string
}

// sideDeployer returns the deployer of a side (revisions only).
func (m *machine) sideDeployer(side strategy.Side) revisionSide {
	switch {
	case m.da != nil && side == strategy.SideB:
		return m.db
	case m.da != nil:
		return m.da
	case side == strategy.SideB:
		return m.b
	}
	return m.a
}

// StallDeploy makes a side's deploys never roll out, or roll out again
// (revisions only).
func (m *machine) StallDeploy(t *rapid.T) {
	if !m.revisions {
		t.Skip("no revisions")
	}
	side := rapid.SampledFrom([]strategy.Side{strategy.SideA, strategy.SideB}).Draw(t, "stallSide")
	m.sideDeployer(side).StallDeploys(rapid.Bool().Draw(t, "stall"))
}

// checkRevisions: no deploy was made on a side that served traffic or held
// capacity, and traffic only reaches a side whose observed revision is the
// one its role should run.
func (m *machine) checkRevisions(t *rapid.T, stA, stB rollout.CapacityStatus) {
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		if v := m.sideDeployer(side).Violations(); len(v) > 0 {
			t.Fatalf("side %s: %v", side, v)
		}
	}
	if m.s.Unobserved {
		return // no roles yet: nothing is asked before the adoption
	}
	stable := m.s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	for _, side := range []strategy.Side{strategy.SideA, strategy.SideB} {
		var carries bool
		switch m.opts.Capacity {
		case strategy.CapacityReplicas:
			st := stA
			if side == strategy.SideB {
				st = stB
			}
			carries = st.Ready > 0
		default:
			carries = m.router.Applied().Of(side) > 0
		}
		if !carries {
			idle := m.opts.Capacity != strategy.CapacityReplicas && m.router.Serving(side)() == 0 ||
				m.opts.Capacity == strategy.CapacityReplicas && m.side(side).Status().Capacity == 0
			if side != stable && idle {
				m.foreign[side] = false // walked out, nothing on its way to it
			}
			continue
		}
		// The canary role may also run the pending revision: a reconcile
		// whose state was lost (AdvanceToRequeue) may have finished the
		// walk back and ramped it, while the stored state still walks the
		// abandoned one back.
		want, pending := m.s.StableRevision, ""
		if side != stable {
			want, pending = m.s.CanaryRevision, m.s.PendingRevision
		}
		got := m.sideDeployer(side).RevisionStatus()
		if side != stable && got.Revision != "" && slices.Contains(m.graceRevs, got.Revision) {
			continue
		}
		if _, scaled := m.scaled[side]; scaled && m.opts.Capacity == strategy.CapacityReplicas {
			continue // ready replicas serve: another writer scaled this side up
		}
		if m.foreign[side] {
			if side == stable && got.Revision == want && got.Updated {
				m.foreign[side] = false // put back
			} else {
				continue // the other writer's doing, until the Runner has reacted
			}
		}
		if got.Revision != want && (pending == "" || got.Revision != pending) {
			t.Fatalf("side %s carries traffic and runs %q (%+v), its role's revision is %q (%s, %s)",
				side, got.Revision, got, want, m.s.Phase, m.s.Message)
		}
	}
}

// genStoredState draws a state a Store could hand back: plausible rollouts
// in any phase, some corrupt in one or more fields.
func genStoredState(t *rapid.T) strategy.State {
	pct := func(label string) int32 {
		if rapid.IntRange(0, 9).Draw(t, label+"Wild") == 0 {
			return rapid.Int32Range(-100, 500).Draw(t, label)
		}
		return rapid.Int32Range(0, 100).Draw(t, label)
	}
	at := func(label string) metav1.MicroTime {
		return metav1.NewMicroTime(t0.Add(-time.Duration(rapid.IntRange(0, 3600).Draw(t, label)) * time.Second))
	}
	s := strategy.State{
		StableRevision: "v1",
		CanaryRevision: rapid.SampledFrom([]string{"v1", "v2"}).Draw(t, "canaryRev"),
		StableSide:     rapid.SampledFrom([]strategy.Side{"", strategy.SideA, strategy.SideB, "Z"}).Draw(t, "side"),
		Phase: rapid.SampledFrom([]strategy.Phase{"", strategy.PhaseProgressing, strategy.PhasePaused, strategy.PhaseAborting,
			strategy.PhaseAborted, strategy.PhaseCompleting, strategy.PhaseSucceeded, "Bogus"}).Draw(t, "phase"),
		StepIndex:      rapid.Int32Range(-1, 6).Draw(t, "stepIndex"),
		Desired:        strategy.Allocation{Weight: pct("weight"), StableCapacity: pct("stable"), CanaryCapacity: pct("canary")},
		StartedAt:      at("startedAt"),
		HopAt:          at("hopAt"),
		AwaitingResume: rapid.Bool().Draw(t, "paused"),
	}
	if rapid.Bool().Draw(t, "aborted") {
		s.Aborted = &strategy.AbortStatus{Reason: "stored", At: at("abortedAt"), Emergency: rapid.Bool().Draw(t, "emergency")}
	}
	return s
}

// endGrace ends the grace of the revisions a command abandoned once a
// reconcile has had the chance to walk them back: at once, unless that
// reconcile is walking back (Aborting), in which case the grace lasts until
// the walk back ends, nor after a reconcile that failed (it could not
// observe, so it walked nothing back). A data plane that applies the walk back's weight
// later still routes to an abandoned revision (one that reconciles whose
// state was lost had ramped) until it does.
func (m *machine) endGrace(err error) {
	if err == nil && m.s.Phase != strategy.PhaseAborting {
		m.graceRevs = nil
	}
}

func (m *machine) canarySide() *fake.Capacity {
	if m.s.StableSide == strategy.SideB {
		return m.a
	}
	return m.b
}

func (m *machine) Reconcile(t *rapid.T) {
	before, writes, deploys := m.s, m.router.Writes()+m.a.Writes()+m.b.Writes(), m.deploys()
	next, _, err := m.runner.Reconcile(context.Background(), m.s) // errors are injected on purpose
	if next.Aborted != nil && next.Aborted.Emergency {
		m.emergency = true
	}
	m.s = next
	m.checkReconcile(t, before, writes, deploys)
	m.stored(next)
	m.endGrace(err)
	m.traffic.Tick()
}

// Progress runs the reconcile loop as a controller would, for a while:
// reconcile, requeue, reconcile... checking the invariants at every turn.
func (m *machine) Progress(t *rapid.T) {
	for i, n := 0, rapid.IntRange(1, 40).Draw(t, "turns"); i < n && !m.s.Phase.Terminal(); i++ {
		before, writes, deploys := m.s, m.router.Writes()+m.a.Writes()+m.b.Writes(), m.deploys()
		next, requeue, err := m.runner.Reconcile(context.Background(), m.s)
		if next.Aborted != nil && next.Aborted.Emergency {
			m.emergency = true
		}
		m.s = next
		m.checkReconcile(t, before, writes, deploys)
		m.stored(next)
		m.endGrace(err)
		m.traffic.Tick()
		m.Check(t)
		m.checkProgress(t, before)
		if err != nil || requeue <= 0 {
			requeue = time.Second
		}
		m.clock.Advance(requeue)
		m.traffic.Tick()
		m.Check(t)
	}
}

// AdvanceToRequeue reconciles and loses the resulting state, as a
// controller whose status write failed would, then waits for the requeue.
func (m *machine) AdvanceToRequeue(t *rapid.T) {
	lost, requeue, _ := m.runner.Reconcile(context.Background(), m.s)
	if lost.Aborted != nil && lost.Aborted.Emergency {
		m.emergency = true
	}
	m.clock.Advance(requeue)
}

func (m *machine) Advance(t *rapid.T) {
	m.clock.Advance(time.Duration(rapid.Int64Range(0, int64(2*time.Minute)).Draw(t, "advance")))
	m.traffic.Tick()
}

func (m *machine) ClockBack(t *rapid.T) {
	back := time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "back"))
	m.clock.Advance(-back)
	m.backDebt += back
}

func (m *machine) Lag(t *rapid.T) {
	l := fake.Lag{Reads: rapid.IntRange(0, 6).Draw(t, "reads"), Duration: time.Duration(rapid.IntRange(0, 10).Draw(t, "lagSec")) * time.Second}
	m.router.SetLag(l)
	m.a.SetLag(l)
	m.b.SetLag(l)
	m.a.SetPartial(rapid.Bool().Draw(t, "partialA"))
	m.b.SetPartial(rapid.Bool().Draw(t, "partialB"))
}

func (m *machine) AdapterError(t *rapid.T) {
	var err error
	if rapid.Bool().Draw(t, "fail") {
		err = errTransient
	}
	switch rapid.IntRange(0, 2).Draw(t, "which") {
	case 0:
		m.router.FailWith(err)
	case 1:
		m.a.FailWith(err)
	default:
		m.b.FailWith(err)
	}
}

func (m *machine) Conflict(t *rapid.T) {
	m.router.Conflicts(rapid.IntRange(1, 3).Draw(t, "conflicts"))
}

func (m *machine) Reject(t *rapid.T) {
	if rapid.Bool().Draw(t, "reject") {
		m.router.Reject("parent gateway not accepting")
	} else {
		m.router.Reject("")
	}
}

func (m *machine) Unhealthy(t *rapid.T) {
	h := rapid.SampledFrom([]strategy.Health{strategy.HealthHealthy, strategy.HealthUnhealthy, strategy.HealthInconclusive}).Draw(t, "health")
	m.canarySide().SetHealth(h, "")
}

func (m *machine) Command(t *rapid.T) {
	now := m.clock.Now()
	// Commands in a row before a reconcile each abandon revisions: the
	// grace covers all of them (a retarget to v3, then back to v1, then a
	// pause leaves v3 running where a lost reconcile ramped it).
	m.graceRevs = append(m.graceRevs, m.s.CanaryRevision, m.s.PendingRevision)
	switch rapid.IntRange(0, 6).Draw(t, "command") {
	case 0:
		m.s = m.s.Pause(now)
	case 1:
		m.s = m.s.Resume(now)
	case 2:
		m.s = m.s.Abort("test", now)
	case 3:
		m.s = m.s.Promote(now)
	case 4:
		m.s = m.s.PromoteFull(now)
	case 5:
		m.s = m.s.Retry(now)
	default:
		m.s = m.s.Retarget(rapid.SampledFrom([]string{"v1", "v2", "v3"}).Draw(t, "revision"), now)
	}
}

// Restart is a crash: the state goes through JSON into a new Runner.
// Crash takes ready replicas away on one side, and may leave it crash-looping
// (pods that never become ready again until the loop ends).
func (m *machine) Crash(t *rapid.T) {
	c := m.a
	if rapid.Bool().Draw(t, "crashB") {
		c = m.b
	}
	if rapid.IntRange(0, 3).Draw(t, "loopToggle") == 0 {
		c.CrashLoop(rapid.Bool().Draw(t, "loop"))
		return
	}
	c.Crash(rapid.Int32Range(1, c.Replicas()).Draw(t, "crashed"))
	if c == m.a {
		m.crashedA = true
	} else {
		m.crashedB = true
	}
}

func (m *machine) Restart(t *rapid.T) {
	b, err := json.Marshal(m.s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var s strategy.State
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	r := *m.runner
	m.runner = &r
	m.s = s
}

func (m *machine) Check(t *rapid.T) {
	machineSteps.Add(1)
	stA, stB := m.a.Status(), m.b.Status()
	// A side is whole again once nothing of it is missing (in the fixed
	// mode the replicas are the Deployment's).
	wholeA, wholeB := stA, stB
	if m.da != nil {
		wholeA, wholeB = m.da.Status(), m.db.Status()
	}
	if wholeA.Settled && wholeA.Ready >= wholeA.Capacity {
		m.crashedA = false
	}
	if wholeB.Settled && wholeB.Ready >= wholeB.Capacity {
		m.crashedB = false
	}
	for sd, n := range m.scaled {
		st := m.side(sd).Status()
		if m.side(sd).Writes() > n && st.Settled && st.Ready >= st.Capacity &&
			(m.opts.Capacity == strategy.CapacityFixed || stA.Capacity+stB.Capacity <= 100+m.surge) &&
			(m.opts.Capacity == strategy.CapacityReplicas || m.router.Applied().Of(sd) <= st.Ready) {
			delete(m.scaled, sd) // written again by the Runner, whole, and within the budget
		}
	}
	_, scaledA := m.scaled[strategy.SideA]
	_, scaledB := m.scaled[strategy.SideB]
	crashedA, crashedB := m.crashedA || scaledA, m.crashedB || scaledB
	if m.opts.Capacity != strategy.CapacityReplicas {
		w := m.router.Applied()
		if w.A+w.B != 100 || w.A < 0 || w.B < 0 {
			t.Fatalf("applied weights %+v", w)
		}
		readyA, readyB := int32(100), int32(100)
		if m.opts.Capacity == strategy.CapacityManaged {
			readyA, readyB = stA.Ready, stB.Ready
		}
		if m.da != nil {
			readyA, readyB = m.da.Status().Ready, m.db.Status().Ready
		}
		fits := w.A <= readyA && w.B <= readyB
		if fits {
			m.unsafeStart = false
		}
		explained := (w.A <= readyA || crashedA) && (w.B <= readyB || crashedB)
		if !fits && !m.emergency && !m.unsafeStart && !explained {
			t.Fatalf("traffic exceeds ready capacity: weights %+v, ready A %d B %d", w, readyA, readyB)
		}
	} else if ready := stA.Ready + stB.Ready; ready < 100-m.opts.MaxUnavailablePercent && !crashedA && !crashedB && len(m.scaled) == 0 && !m.scaledEver &&
		!m.s.Idle() && !m.s.Unobserved { // an idle or unobserved state manages nothing
		t.Fatalf("replicas: total ready %d below 100 - maxUnavailable %d", ready, m.opts.MaxUnavailablePercent)
	}
	if m.opts.Capacity != strategy.CapacityFixed {
		if total := stA.Capacity + stB.Capacity; total > 100+m.surge && !scaledA && !scaledB {
			t.Fatalf("capacity %d exceeds 100 + maxSurge %d", total, m.surge)
		}
	}
	if m.revisions {
		m.checkRevisions(t, stA, stB)
	}
	st := m.traffic.Stats()
	lost := st.Dropped - m.stats.Dropped
	over := st.Overloaded - m.stats.Overloaded
	m.stats = st
	if (lost != 0 || over != 0 && m.opts.MaxUnavailablePercent == 0) && !m.emergency && !m.unsafeStart && !crashedA && !crashedB && !m.scaledEver {
		t.Fatalf("%d requests dropped and %d overloaded with no crash to explain it: %+v", lost, over, st)
	}
}

// checkProgress: a rollout that is not finished, not paused for a person
// and has shown no progress for longer than its progress deadline (plus the
// longest wait its steps may ask for) reports Degraded with a reason.
func (m *machine) checkProgress(t *rapid.T, before strategy.State) {
	writes := m.router.Writes() + m.a.Writes() + m.b.Writes()
	now := m.clock.Now()
	if writes != m.writes || before.Phase != m.s.Phase || before.StepIndex != m.s.StepIndex || m.s.AwaitingResume ||
		m.s.Phase.Terminal() || m.s.Idle() {
		m.writes, m.progressAt, m.backDebt = writes, now, 0
		return
	}
	deadline := m.opts.ProgressDeadline.Duration
	if deadline == 0 {
		deadline = strategy.DefaultProgressDeadline
	}
	slack := 4*time.Minute + m.opts.ScaleDownDelay.Duration + 2*m.backDebt // intervals and timed pauses are at most 2 minutes here
	since := m.progressAt
	for _, at := range []metav1.MicroTime{m.s.StartedAt, m.s.HopAt, m.s.StepStartedAt, m.s.LastCommandAt, m.s.PausedAt, m.s.ReachedAt} {
		if at.Time.After(since) {
			since = at.Time // a recorded instant ahead of the clock: no time passes until it
		}
	}
	if now.Sub(since) <= deadline+slack {
		return
	}
	for _, c := range m.s.Conditions {
		if c.Type == strategy.ConditionDegraded && c.Status == metav1.ConditionTrue && c.Reason != "" {
			return
		}
	}
	t.Fatalf("no progress for %s (deadline %s) and not Degraded: %s: %s", now.Sub(since), deadline, m.s.Phase, m.s.Message)
}

func TestRunnerStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(newMachine(t)))
	})
}
