package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Capacity is an in-memory rollout.CapacitySetter for one side: a workload of
// Replicas replicas, of which ceil(Replicas * percent / 100) are wanted.
// Replicas stop at once when scaled down; new ones become ready after a Lag,
// all together or, with SetPartial, one more per observation. Ready is the
// ready replicas as a share of the full count, rounded down, so a side
// settled at c percent reports Ready >= c.
//
// Replicas can crash after becoming ready: Crash takes ready replicas out,
// replaced after the Lag; CrashLoop keeps every new replica from becoming
// ready. While any wanted replica is not ready, Ready is the share that is
// and Settled is false. Crashes do not change Health: the side reports what
// SetHealth set, Unknown by default, as many real adapters do.
//
// Capacity is also a rollout.Deployer (see Deploy and Revision): a deploy
// replaces the side's replicas with ones of the new revision, and a deploy
// while the side holds capacity or serves traffic (ServingFunc) is recorded
// in Violations. It is a rollout.Notifier (see Notify) and a
// rollout.Claimer (see Claim).
//
// Test-only controls: SetLag, SetPartial, SetHealth, FailWith, Crash,
// CrashLoop, SetRevision, Overwrite, StallDeploys, ServingFunc,
// DropNotifications, History. The zero value is not usable: use
// NewCapacity. Safe for concurrent use. See docs/design/fake.md for crashes
// in full and an example that checks deploys.
type Capacity struct {
	mu       sync.Mutex
	clock    *Clock
	replicas int32
	percent  int32
	steady   bool
	ready    int32 // ready replicas
	crashed  int32 // wanted replicas down after a crash; ready+crashed <= want
	loop     bool  // crash loop: no replica becomes ready
	lag      Lag
	partial  bool
	change   *pending // a scale change waiting for its lag
	restart  *pending // replacements of crashed replicas waiting for the lag
	health   strategy.Health
	msg      string
	err      error
	claim    claim
	hist     history

	// Revisions (revision.go).
	rev        string       // the revision the workload's template runs; "" for none
	recorded   string       // the revision upshift's last Deploy recorded (an annotation): a hint, never reported
	rolling    bool         // a deploy of rev not rolled out yet
	deploy     *pending     // the deploy's lag: the controller observes it after
	stall      bool         // deploys never roll out
	serving    func() int32 // the side's share of traffic, for the deploy check
	violations []string
	// fixed: a Deployment's side, fully provisioned. Its capacity is not
	// checked on a deploy, and Revision counts as an observation.
	fixed bool

	note notifier
}

var (
	_ rollout.CapacitySetter = (*Capacity)(nil)
	_ rollout.Deployer       = (*Capacity)(nil)
	_ rollout.Notifier       = (*Capacity)(nil)
)

// CapacityOptions describe a Capacity side as it starts. The zero value is
// a side of one replica set to 0 percent.
type CapacityOptions struct {
	// Replicas is the side's replica count at 100 percent (at least 1).
	Replicas int32
	// Percent is the capacity the side is set to, and fully ready at, when
	// it starts (clamped to 0..100): 100 for a side serving everything, 0
	// for a side deployed at zero.
	Percent int32
}

// NewCapacity returns a side as o describes it. clock may be nil when no
// Lag uses a Duration.
//
//	stable := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 100})
//	canary := fake.NewCapacity(clock, fake.CapacityOptions{Replicas: 10, Percent: 0})
func NewCapacity(clock *Clock, o CapacityOptions) *Capacity {
	c := &Capacity{clock: clock, replicas: max(o.Replicas, 1), percent: min(max(o.Percent, 0), 100)}
	c.ready = c.want()
	return c
}

func (c *Capacity) now() time.Time {
	if c.clock == nil {
		return time.Time{}
	}
	return c.clock.Now()
}

// want is the replica count the current percent asks for.
func (c *Capacity) want() int32 {
	if c.percent <= 0 {
		return 0
	}
	return (c.replicas*c.percent + 99) / 100
}

// SetCapacity asks for a share of the full capacity.
func (c *Capacity) SetCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	arg := fmt.Sprintf("%d", r.Percent)
	if r.Steady {
		arg = "steady"
	}
	if err := ctx.Err(); err != nil {
		c.hist.add(c.clock, "SetCapacity", arg, err)
		return err
	}
	if c.err != nil {
		c.hist.add(c.clock, "SetCapacity", arg, c.err)
		return c.err
	}
	if err := r.Validate(); err != nil {
		err = rollout.Permanent(fmt.Errorf("fake capacity: %w", err))
		c.hist.add(c.clock, "SetCapacity", arg, err)
		return err
	}
	if err := c.claim.check(ctx); err != nil {
		c.hist.add(c.clock, "SetCapacity", arg, err)
		c.hist.owned(ctx)
		return err
	}
	c.hist.add(c.clock, "SetCapacity", arg, nil)
	c.hist.owned(ctx)
	if r.Steady != c.steady {
		c.note.change()
	}
	c.steady = r.Steady
	if r.Percent == c.percent {
		return nil
	}
	c.note.change()
	c.percent = r.Percent
	w := c.want()
	c.ready = min(c.ready, w)             // replicas stop at once
	c.crashed = min(c.crashed, w-c.ready) // crashed replicas go first
	if c.crashed == 0 {
		c.restart = nil
	}
	c.change = c.newPending()
	c.settle(false)
	return nil
}

// newPending starts the lag of a change made now.
func (c *Capacity) newPending() *pending {
	p := &pending{reads: c.lag.Reads}
	if c.lag.Duration > 0 {
		p.due = c.now().Add(c.lag.Duration)
		c.note.due(c.clock, p.due)
	}
	return p
}

// settle moves ready replicas toward what is wanted once a lag has passed,
// and ends a deploy whose every wanted replica is ready. read says whether
// this is an observation (which advances partial readiness by one replica).
func (c *Capacity) settle(read bool) {
	now := c.now()
	step := read // partial readiness: one replica per observation
	if c.restart != nil && !c.blocked() && c.restart.ready(now) {
		switch {
		case c.partial && step:
			c.ready++
			c.crashed--
			step = false
		case !c.partial:
			c.ready += c.crashed
			c.crashed = 0
		}
		if c.crashed == 0 {
			c.restart = nil
		}
	}
	if c.change != nil && c.change.ready(now) {
		up := c.want() - c.crashed // what the scale change brings up
		switch {
		case c.ready > up:
			c.ready = up
		case c.ready < up && c.blocked():
			c.crashed += up - c.ready // the new replicas crash too
		case c.ready < up && c.partial:
			if step {
				c.ready++
			}
		case c.ready < up:
			c.ready = up
		}
		if c.ready+c.crashed >= c.want() {
			c.change = nil
		}
	}
	c.rollOut(now)
}

// blocked reports that no replica can become ready: the side crash-loops,
// or a deploy is stalled (its replicas never start).
func (c *Capacity) blocked() bool {
	return c.loop || c.stall && c.rolling
}

// observe is one observation of the side: every lag counts a read.
func (c *Capacity) observe() {
	for _, p := range [...]*pending{c.change, c.restart, c.deploy} {
		if p != nil {
			p.reads--
		}
	}
	c.settle(true)
}

// Capacity reports the side. Each call counts as one observation.
func (c *Capacity) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		c.hist.add(c.clock, "Capacity", "", err)
		return rollout.CapacityStatus{}, err
	}
	if c.err != nil {
		c.hist.add(c.clock, "Capacity", "", c.err)
		return rollout.CapacityStatus{}, c.err
	}
	c.hist.add(c.clock, "Capacity", "", nil)
	c.observe()
	return c.status(), nil
}

func (c *Capacity) status() rollout.CapacityStatus {
	return rollout.CapacityStatus{
		Capacity:      c.percent,
		Steady:        c.steady,
		Ready:         c.ready * 100 / c.replicas,
		Settled:       c.change == nil && c.ready == c.want(),
		Health:        c.health,
		HealthMessage: c.msg,
	}
}

// Status returns what Capacity would report, without counting a read.
func (c *Capacity) Status() rollout.CapacityStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	return c.status()
}

// SetLag sets the lag of later scale-ups.
func (c *Capacity) SetLag(l Lag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lag = l
}

// SetPartial makes new replicas become ready one per observation.
func (c *Capacity) SetPartial(on bool) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	if on != c.partial {
		c.note.change()
	}
	c.partial = on
}

// SetHealth sets the health the side reports.
func (c *Capacity) SetHealth(h strategy.Health, msg string) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.health, c.msg = h, msg
	c.note.change()
}

// FailWith makes every call fail with err until FailWith(nil).
func (c *Capacity) FailWith(err error) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	c.note.change()
}

// Crash makes n ready replicas (at most those ready) stop being ready at
// once, as pods that crash. The workload's controller replaces them: the
// replacements are ready after the side's Lag, counted from this crash (a
// crash restarts the lag of replacements still pending), unless CrashLoop
// is on. With the zero Lag they are back at the next observation, so a test
// that wants to see the loss sets a Lag or CrashLoop. Crash changes neither
// the capacity asked for nor Health.
func (c *Capacity) Crash(n int32) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	n = min(max(n, 0), c.ready)
	if n == 0 {
		return
	}
	c.note.change()
	c.ready -= n
	c.crashed += n
	if !c.loop {
		c.restart = c.newPending()
	}
}

// CrashLoop(true) makes the side crash-loop: from now on no replica
// becomes ready, neither one replacing a crashed replica nor one a
// scale-up adds, until CrashLoop(false); replicas ready now keep serving
// until Crash takes them. CrashLoop(false) lets the controller's next
// restarts succeed: every wanted replica that is down is ready after the
// side's Lag, counted from then.
func (c *Capacity) CrashLoop(on bool) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	if on == c.loop {
		return
	}
	c.note.change()
	c.loop = on
	c.restart = nil
	if !on && c.crashed > 0 {
		c.restart = c.newPending()
	}
}

// KeepHistory turns the recording of calls on (the default) or off.
func (c *Capacity) KeepHistory(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hist.off = !on
}

// History returns every call so far.
func (c *Capacity) History() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.hist.calls...)
}

// Writes counts successful SetCapacity calls; Reads successful Capacity calls.
func (c *Capacity) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hist.count("SetCapacity")
}

// Reads counts successful Capacity calls.
func (c *Capacity) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hist.count("Capacity")
}

// Replicas returns the full replica count.
func (c *Capacity) Replicas() int32 { return c.replicas }

// Notify calls wake whenever what Capacity, and Revision, report may have
// changed, until ctx ends (see Router.Notify for what wakes a subscriber).
// It fails only when ctx has already ended.
func (c *Capacity) Notify(ctx context.Context, wake func()) error {
	return c.note.subscribe(ctx, c.clock, wake)
}

// DropNotifications(true) stops delivering wakes, as a watch that is down:
// changes wake no one (a Runner then finds them at its next poll).
// DropNotifications(false) delivers them again, and wakes every subscriber
// once for what they missed.
func (c *Capacity) DropNotifications(on bool) { c.note.setDrop(on) }

// Subscriptions returns the number of Notify subscriptions (of the
// Capacity and of its Deployments) still live: those whose ctx has not
// ended, and for a moment those whose ctx has just ended. A Runner's Run
// leaves none behind once it has returned.
func (c *Capacity) Subscriptions() int { return c.note.live() }
