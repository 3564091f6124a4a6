package ray_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

// These tests run whole upgrades through rollout.Runner.Run on the real
// clock. The emulated clusters move by polls, not by time (every GET of the
// applications is one step of theirs), so an upgrade takes as long as the
// Runner and the adapters' polls make it take, and nothing else: the
// durations measured are those of Run's waits and of the Ray adapter's
// notifications, which is what is under test. A fake clock would need a
// lockstep with Run and with the adapter's poller; the real clock needs
// none, and the bounds below leave more than a second of slack per hop on
// a loaded machine, where the distinction is between tens of milliseconds
// (a wake) and 10 s (a poll) per hop.

// runPollInterval is the strategies' PollInterval: long, so that a Runner
// that only polls would take about that long per hop.
const runPollInterval = 10 * time.Second

// runHopBound is the most a hop may add to the plan when notifications
// drive Run: the adapter sees the change within a few of its fast polls
// (50, 100, 200... ms after the write), far below one PollInterval.
const runHopBound = 1500 * time.Millisecond

// waitClock is the wall clock, recording the waits Run asks for: each
// requeue, and how many waits ended because their timer fired (a poll)
// rather than because an adapter woke Run. Run uses the clock's timer for
// its requeue only, and sets a new one for every wait.
type waitClock struct {
	mu     sync.Mutex
	latest int
	waits  []time.Duration
	fired  []time.Duration // the requeues whose timer ended the wait
}

func (c *waitClock) Now() time.Time { return time.Now() }

func (c *waitClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	c.latest++
	id := c.latest
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return time.AfterFunc(d, func() {
		c.mu.Lock()
		if id == c.latest { // Run is still in this wait
			c.fired = append(c.fired, d)
		}
		c.mu.Unlock()
		f()
	}).Stop
}

// woken returns the longest of Run's waits that asked for d (a wait for
// the world, when d is the PollInterval) and ended before d: how long Run
// waited for a wake. Run waits once after every reconcile but the last, so
// wait i lasts from reconcile i to reconcile i+1.
func (u *runUpgrade) woken(d time.Duration) (longest time.Duration, n int) {
	for i, w := range u.clk.waits {
		if w != d || i+1 >= len(u.at) {
			continue
		}
		if gap := u.at[i+1].Sub(u.at[i]); gap < d {
			longest, n = max(longest, gap), n+1
		}
	}
	return longest, n
}

// count returns how many of ds are d, and how many are not.
func count(ds []time.Duration, d time.Duration) (eq, other int) {
	for _, x := range ds {
		if x == d {
			eq++
		} else {
			other++
		}
	}
	return eq, other
}

// loud is a side's capacity setter, checked at every read (watched), that
// keeps the Ray adapter's notifications. watched alone hides them: it
// forwards only the rollout.CapacitySetter methods.
type loud struct {
	*watched
	rollout.Notifier
}

// quietDeployer forwards only the rollout.Deployer methods of a side's
// Deployer, hiding its Notify.
type quietDeployer struct{ rollout.Deployer }

// quietRouter forwards only the rollout.TrafficRouter methods of the fake
// router, hiding its Notify.
type quietRouter struct{ rollout.TrafficRouter }

// runUpgrade is one upgrade v1 -> v2 through Run, and what it measured.
type runUpgrade struct {
	end        strategy.State
	took       time.Duration
	reconciles int
	rounds     int // reconciles that applied hops
	hops       int
	at         []time.Time // the instant of each reconcile
	gets       [2]int      // GETs of the applications, side A and side B
	clk        *waitClock
	// pendingPolls is the number of the adapters' poll timers pending
	// right after Run returned; getsSince counts the GETs the adapters
	// have sent since then.
	pendingPolls int
	getsSince    func() [2]int
}

// sentGETs counts the GETs of the applications that an adapter sends, at
// the instant its client starts each one. The emulated cluster counts a
// GET when its handler runs, which for a GET cancelled in flight (as the
// adapter's poll is when its last subscriber leaves) may be after the
// adapter has moved on; what the adapter promises is about what it sends.
type sentGETs struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (s *sentGETs) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == "/api/serve/applications/" {
		s.n.Add(1)
	}
	return s.base.RoundTrip(req)
}

// pendingClock is the wall clock, counting the timers set on it that are
// pending: neither stopped nor due. A timer whose instant has passed has
// fired as far as the clock is concerned, even if the goroutine that runs
// its function has not been scheduled yet (under load that can take a
// while): counting it until then made the count depend on the scheduler.
type pendingClock struct {
	mu     sync.Mutex
	timers map[*time.Timer]time.Time // not stopped: when each is due
}

func (c *pendingClock) Now() time.Time { return time.Now() }

func (c *pendingClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers == nil {
		c.timers = map[*time.Timer]time.Time{}
	}
	due := time.Now().Add(d) // no later than the runtime fires it
	t := time.AfterFunc(d, f)
	c.timers[t] = due
	return func() bool {
		stopped := t.Stop()
		c.mu.Lock()
		delete(c.timers, t)
		c.mu.Unlock()
		return stopped
	}
}

func (c *pendingClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, n := time.Now(), 0
	for _, due := range c.timers {
		if due.After(now) {
			n++
		}
	}
	return n
}

// rayPace is how many polls the clusters of sides A and B take to build an
// application, start a replica and stop one, as in
// TestRevisionUpgradesBetweenRayClusters.
var rayPace = [2]raytest.Options{
	{BuildPolls: 1, StartPolls: 2, StopPolls: 1},
	{BuildPolls: 2, StartPolls: 3, StopPolls: 2},
}

// runRayUpgrade builds two emulated Ray clusters moving at pace (A runs v1
// and serves everything), a Ray adapter and its Deployer per side and a
// fake router, and runs the upgrade to v2 through Run with st. With notify
// false the adapters' (and the router's) notifications are hidden: Run
// sees no Notifier and polls.
func runRayUpgrade(t *testing.T, st strategy.Strategy, pace [2]raytest.Options, notify bool, timeout time.Duration) runUpgrade {
	t.Helper()
	ctx := context.Background()
	revisions := upgradeConfigs()
	router := fake.NewRouter(nil)
	type side struct {
		rs  *raytest.Server
		cap *watched
		r   *ray.Ray
		dep *ray.Deployer
	}
	var sides [2]side
	var sent [2]*sentGETs
	var pollClk pendingClock // the adapters' fast polls
	for i, opts := range pace {
		name := []strategy.Side{strategy.SideA, strategy.SideB}[i]
		opts.GuardRedeploys = true
		rs := raytest.New(opts)
		rs.ServingFunc(router.Serving(name))
		srv := httptest.NewServer(rs)
		t.Cleanup(srv.Close)
		sent[i] = &sentGETs{base: srv.Client().Transport}
		c := ray.Config{Dashboard: srv.URL, Revisions: ray.RevisionMap(revisions), Clock: &pollClk, HTTPClient: &http.Client{Transport: sent[i]}}
		if !notify {
			// Without notifications nothing but Run's reads moves the
			// clusters (one step per GET): with answers reused, a
			// cluster would move once per ReadMaxAge however fast Run
			// polls, and the measure would be of the reuse, not of Run's
			// fast polls. With notifications (the default reuse) the
			// adapters' polls move them, and Run reads their answers.
			c.ReadMaxAge = -1
		}
		r, err := ray.New(c)
		if err != nil {
			t.Fatal(err)
		}
		dep, err := r.Deployer()
		if err != nil {
			t.Fatal(err)
		}
		sides[i] = side{rs: rs, cap: &watched{CapacitySetter: r, side: name, router: router}, r: r, dep: dep}
	}
	a, b := sides[0], sides[1]
	// Cluster A is created running v1 and serves everything.
	if err := a.dep.Deploy(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := a.r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	a.rs.Advance(4)

	clk := &waitClock{}
	var u runUpgrade
	u.clk = clk
	runner := &rollout.Runner{
		Strategy: st,
		Store:    &fake.Store{},
		Clock:    clk,
		Observer: rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
			u.reconciles++
			u.at = append(u.at, e.Time)
			if len(e.Applied) > 0 {
				u.rounds++
				u.hops += len(e.Applied)
			}
		}),
	}
	if notify {
		runner.Router = router
		runner.A, runner.B = loud{a.cap, a.r}, loud{b.cap, b.r}
		runner.RevisionA, runner.RevisionB = a.dep, b.dep
	} else {
		runner.Router = quietRouter{router}
		runner.A, runner.B = a.cap, b.cap
		runner.RevisionA, runner.RevisionB = quietDeployer{a.dep}, quietDeployer{b.dep}
	}
	for _, x := range []any{runner.Router, runner.A, runner.B, runner.RevisionA, runner.RevisionB} {
		if _, ok := x.(rollout.Notifier); ok != notify {
			t.Fatalf("%T: Notifier %v, want %v", x, ok, notify)
		}
	}
	gets := [2]int{a.rs.Polls(), b.rs.Polls()}
	initial := strategy.State{}.Retarget("v1", time.Now()).Retarget("v2", time.Now())
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel() // ends the subscriptions, and with them the adapters' polls
	start := time.Now()
	end, err := runner.Run(runCtx, initial, nil)
	u.took = time.Since(start)
	u.end = end
	u.gets = [2]int{a.rs.Polls() - gets[0], b.rs.Polls() - gets[1]}
	u.pendingPolls = pollClk.pending()
	// Every GET that Run's reconciles or a subscription's polls started
	// has been counted by now: Run returns only once the subscriptions
	// have ended (rollout.TrackNotify), after their polls have returned.
	sentAtEnd := [2]int64{sent[0].n.Load(), sent[1].n.Load()}
	u.getsSince = func() [2]int {
		return [2]int{int(sent[0].n.Load() - sentAtEnd[0]), int(sent[1].n.Load() - sentAtEnd[1])}
	}
	if err != nil {
		t.Fatalf("Run after %v (%d reconciles): %v; state %s %+v (%s)", u.took, u.reconciles, err, end.Phase, end.Desired, end.Message)
	}
	if end.Phase != strategy.PhaseSucceeded || end.StableRevision != "v2" || end.StableSide != strategy.SideB {
		t.Fatalf("ended %s with %s stable on side %s: %s", end.Phase, end.StableRevision, end.StableSide, end.Message)
	}
	if w := router.Applied(); w != (rollout.Weights{B: 100}) {
		t.Errorf("weights %+v, want all on B", w)
	}
	for i, s := range sides {
		for _, v := range s.rs.Violations() {
			t.Errorf("cluster %d, emulator's guard: %s", i, v)
		}
		for _, v := range s.cap.violations {
			t.Error(v)
		}
	}
	return u
}

// TestRunDrivenByRayNotifications: an upgrade between two emulated Ray
// clusters through Run, with a strategy that polls every 10 s. The Ray
// adapters (and the fake router) notify, so Run waits for the world with
// the strategy's WatchedRequeueAfter, the PollInterval, and is woken by the
// adapter's fast polls after each write: the upgrade takes its plan and
// little more per hop, and no poll of Run's ever fires. With the
// notifications hidden, Run polls fast after each hop
// (Options.InitialPollInterval, 100 ms doubling), and finishes about as
// soon; with a fixed poll (InitialPollInterval = PollInterval) it takes at
// least one poll per hop, which shows the measure tells the two apart.
func TestRunDrivenByRayNotifications(t *testing.T) {
	incremental := strategy.Incremental{StepPercent: 50, Interval: metav1.Duration{Duration: time.Second}, MaxSurgePercent: 50,
		Options: strategy.Options{PollInterval: metav1.Duration{Duration: runPollInterval}}}
	plan, err := strategy.Plan(incremental, strategy.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("notify", func(t *testing.T) {
		t.Parallel()
		u := runRayUpgrade(t, incremental, rayPace, true, time.Minute)
		polls, other := count(u.clk.waits, runPollInterval)
		longest, woken := u.woken(runPollInterval)
		t.Logf("notify: %v for a plan of %v (%d hops in %d rounds, %d reconciles); Run's waits: %d of %v (%d ended by a wake, the longest after %v), %d shorter, %d ended by their timer %v; GETs A %d, B %d",
			u.took, plan.Duration, u.hops, u.rounds, u.reconciles, polls, runPollInterval, woken, longest, other, len(u.clk.fired), u.clk.fired, u.gets[0], u.gets[1])
		// Run waited for the world with the PollInterval: it knew it is
		// woken by every change (an unwatched Run asks 100 ms after a hop).
		if polls == 0 {
			t.Errorf("Run never waited %v: it did not rely on the notifications (waits %v)", runPollInterval, u.clk.waits)
		}
		if longest > runHopBound {
			t.Errorf("a wake came %v into a wait for the world, want at most %v", longest, runHopBound)
		}
		if fired, _ := count(u.clk.fired, runPollInterval); fired > 0 {
			t.Errorf("%d of Run's %v polls fired: notifications did not wake it", fired, runPollInterval)
		}
		if bound := plan.Duration + time.Duration(u.rounds)*runHopBound; u.took > bound {
			t.Errorf("took %v, want at most %v (plan %v + %v for each of %d rounds of hops)", u.took, bound, plan.Duration, runHopBound, u.rounds)
		}
	})

	t.Run("hidden", func(t *testing.T) {
		t.Parallel()
		u := runRayUpgrade(t, incremental, rayPace, false, time.Minute)
		polls, other := count(u.clk.waits, runPollInterval)
		t.Logf("hidden, fast polls: %v for a plan of %v (%d hops in %d rounds, %d reconciles); Run's waits: %d of %v, %d shorter, %d ended by their timer; GETs A %d, B %d",
			u.took, plan.Duration, u.hops, u.rounds, u.reconciles, polls, runPollInterval, other, len(u.clk.fired), u.gets[0], u.gets[1])
		// Without notifications only Run's timers end its waits, and it
		// polls fast after a hop rather than every 10 s.
		if len(u.clk.fired) != u.reconciles-1 {
			t.Errorf("%d waits ended by their timer, want every one (%d)", len(u.clk.fired), u.reconciles-1)
		}
		if bound := plan.Duration + time.Duration(u.rounds)*runHopBound; u.took > bound {
			t.Errorf("took %v, want at most %v (plan %v + %v for each of %d rounds of hops)", u.took, bound, plan.Duration, runHopBound, u.rounds)
		}
	})

	t.Run("fixed poll", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a poll of 10 s per hop: skipped with -short")
		}
		t.Parallel()
		// BlueGreen: the fewest hops, on clusters that move at once (at
		// rayPace each hop would need two of these polls: the clusters
		// move only when polled, and nothing else polls them here).
		// Nothing wakes Run and it never polls faster than every 10 s, so
		// every round of hops but the first waits a poll, and so does the
		// observation that ends the rollout.
		bg := strategy.BlueGreen{Options: strategy.Options{PollInterval: metav1.Duration{Duration: runPollInterval}, InitialPollInterval: metav1.Duration{Duration: runPollInterval}}}
		bgPlan, err := strategy.Plan(bg, strategy.PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := runRayUpgrade(t, bg, [2]raytest.Options{}, false, 2*time.Minute)
		t.Logf("hidden, fixed poll: %v for a plan of %v (%d hops in %d rounds, %d reconciles); %d waits ended by their timer; GETs A %d, B %d",
			u.took, bgPlan.Duration, u.hops, u.rounds, u.reconciles, len(u.clk.fired), u.gets[0], u.gets[1])
		if least := time.Duration(u.rounds) * runPollInterval; u.took < least {
			t.Errorf("took %v, want at least one %v poll per round of hops (%d rounds): %v", u.took, runPollInterval, u.rounds, least)
		}
		if u.rounds < 3 {
			t.Errorf("%d rounds of hops, want at least 3 (deploy, capacity, weight...)", u.rounds)
		}
	})
}

// TestRunLeavesNoRayPoll: the Ray adapters poll fast after each write
// while Run drives an upgrade; once Run has returned (its caller's ctx
// still live), no poll of theirs is pending or running, and they send no
// GET after that, however long one waits. GETs are counted as the adapters
// send them (sentGETs), not as the emulated clusters answer them: a poll
// cancelled in flight may reach the server after Run has returned, which
// is no poll of the adapter's left running.
func TestRunLeavesNoRayPoll(t *testing.T) {
	st := strategy.BlueGreen{Options: strategy.Options{PollInterval: metav1.Duration{Duration: runPollInterval}}}
	u := runRayUpgrade(t, st, rayPace, true, time.Minute)
	if u.pendingPolls != 0 {
		t.Errorf("%d of the adapters' polls pending right after Run returned, want 0", u.pendingPolls)
	}
	// The adapters' tail of fast polls after their last write lasts about
	// 4 s (50 ms doubling to 2 s): look for a GET over that long.
	time.Sleep(4 * time.Second)
	if got := u.getsSince(); got != [2]int{} {
		t.Errorf("GETs sent after Run returned: A %d, B %d, want none", got[0], got[1])
	}
}
