package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

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
	if !set["rapid.steps"] {
		_ = flag.Set("rapid.steps", "120")
	}
	code := m.Run()
	if n := machineSteps.Load(); n > 0 {
		fmt.Printf("runner state machine: %d actions in total\n", n)
	}
	os.Exit(code)
}

var errTransient = errors.New("transient failure")

// machine is the Runner with fakes, driven by random actions. Check asserts
// the invariants of DESIGN 6 on the applied values after every action.
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
		opts.ProgressDeadline = time.Duration(rapid.IntRange(5, 60).Draw(t, "deadlineSec")) * time.Second
		opts.AbortOnProgressDeadline = rapid.Bool().Draw(t, "abortOnDeadline")
	}
	opts.ScaleDownDelay = time.Duration(rapid.IntRange(0, 30).Draw(t, "scaleDownDelaySec")) * time.Second
	surge := rapid.Int32Range(1, 100).Draw(t, "surge")
	var strat strategy.Strategy
	if rapid.Bool().Draw(t, "incremental") {
		strat = strategy.Incremental{StepPercent: rapid.Int32Range(1, surge).Draw(t, "step"),
			Interval: time.Duration(rapid.IntRange(1, 60).Draw(t, "intervalSec")) * time.Second, MaxSurgePercent: surge, Options: opts}
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
	m.a = fake.NewCapacity(m.clock, rapid.Int32Range(1, 20).Draw(t, "replicasA"), 100)
	m.b = fake.NewCapacity(m.clock, rapid.Int32Range(1, 20).Draw(t, "replicasB"), 0)
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
	return m
}

func (m *machine) canarySide() *fake.Capacity {
	if m.s.StableSide == strategy.SideB {
		return m.a
	}
	return m.b
}

func (m *machine) Reconcile(t *rapid.T) {
	next, _, _ := m.runner.Reconcile(context.Background(), m.s) // errors are injected on purpose
	if next.Aborted != nil && next.Aborted.Emergency {
		m.emergency = true
	}
	m.s = next
	m.traffic.Tick()
}

// Progress runs the reconcile loop as a controller would, for a while:
// reconcile, requeue, reconcile... checking the invariants at every turn.
func (m *machine) Progress(t *rapid.T) {
	for i, n := 0, rapid.IntRange(1, 40).Draw(t, "turns"); i < n && !m.s.Phase.Terminal(); i++ {
		next, requeue, err := m.runner.Reconcile(context.Background(), m.s)
		if next.Aborted != nil && next.Aborted.Emergency {
			m.emergency = true
		}
		m.s = next
		m.traffic.Tick()
		m.Check(t)
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
	m.clock.Advance(-time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "back")))
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
	h := rapid.SampledFrom([]strategy.Health{strategy.HealthHealthy, strategy.HealthUnhealthy}).Draw(t, "health")
	m.canarySide().SetHealth(h, "")
}

func (m *machine) Command(t *rapid.T) {
	now := m.clock.Now()
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
	if m.opts.Capacity != strategy.CapacityReplicas {
		w := m.router.Applied()
		if w.A+w.B != 100 || w.A < 0 || w.B < 0 {
			t.Fatalf("applied weights %+v", w)
		}
		if !m.emergency {
			readyA, readyB := int32(100), int32(100)
			if m.opts.Capacity == strategy.CapacityManaged {
				readyA, readyB = m.a.Status().Ready, m.b.Status().Ready
			}
			if w.A > readyA || w.B > readyB {
				t.Fatalf("traffic exceeds ready capacity: weights %+v, ready A %d B %d", w, readyA, readyB)
			}
		}
	} else if ready := m.a.Status().Ready + m.b.Status().Ready; ready < 100-m.opts.MaxUnavailablePercent {
		t.Fatalf("replicas: total ready %d below 100 - maxUnavailable %d", ready, m.opts.MaxUnavailablePercent)
	}
	if m.opts.Capacity != strategy.CapacityFixed {
		if total := m.a.Status().Capacity + m.b.Status().Capacity; total > 100+m.surge {
			t.Fatalf("capacity %d exceeds 100 + maxSurge %d", total, m.surge)
		}
	}
	st := m.traffic.Stats()
	if !m.emergency && st.Dropped != 0 {
		t.Fatalf("traffic dropped %d requests: %+v", st.Dropped, st)
	}
	if !m.emergency && st.Overloaded != 0 && m.opts.MaxUnavailablePercent == 0 {
		t.Fatalf("traffic overloaded %d requests: %+v", st.Overloaded, st)
	}
}

func TestRunnerStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(newMachine(t)))
	})
}
