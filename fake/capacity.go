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
// Test-only controls: SetLag, SetPartial, SetHealth, FailWith, Crash (ready
// replicas lost), History. Safe for concurrent use.
type Capacity struct {
	mu       sync.Mutex
	clock    *Clock
	replicas int32
	percent  int32
	steady   bool
	ready    int32 // ready replicas
	lag      Lag
	partial  bool
	change   *pending
	health   strategy.Health
	msg      string
	err      error
	hist     history
}

var _ rollout.CapacitySetter = (*Capacity)(nil)

// NewCapacity returns a side with the given full replica count (at least 1),
// set to percent and fully ready at it. clock may be nil when no Lag uses a
// Duration.
func NewCapacity(clock *Clock, replicas, percent int32) *Capacity {
	c := &Capacity{clock: clock, replicas: max(replicas, 1), percent: percent}
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
	if r.Percent < 0 || r.Percent > 100 || r.Steady && r.Percent != 100 {
		err := rollout.Permanent(fmt.Errorf("fake capacity: percent %d out of range", r.Percent))
		c.hist.add(c.clock, "SetCapacity", arg, err)
		return err
	}
	c.hist.add(c.clock, "SetCapacity", arg, nil)
	c.steady = r.Steady
	if r.Percent == c.percent {
		return nil
	}
	c.percent = r.Percent
	if w := c.want(); c.ready > w {
		c.ready = w // replicas stop at once
	}
	c.change = &pending{reads: c.lag.Reads}
	if c.lag.Duration > 0 {
		c.change.due = c.now().Add(c.lag.Duration)
	}
	c.settle(false)
	return nil
}

// settle moves ready replicas toward what is wanted once the lag has passed.
// read says whether this is an observation (which advances partial
// readiness by one replica).
func (c *Capacity) settle(read bool) {
	if c.change == nil {
		return
	}
	if !c.change.ready(c.now()) {
		return
	}
	w := c.want()
	switch {
	case c.ready > w:
		c.ready = w
	case c.ready < w && c.partial:
		if read {
			c.ready++
		}
	case c.ready < w:
		c.ready = w
	}
	if c.ready == w {
		c.change = nil
	}
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
	if c.change != nil {
		c.change.reads--
	}
	c.settle(true)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = on
}

// SetHealth sets the health the side reports.
func (c *Capacity) SetHealth(h strategy.Health, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.health, c.msg = h, msg
}

// FailWith makes every call fail with err until FailWith(nil).
func (c *Capacity) FailWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
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
