package ray

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/rollout"
)

// Defaults for Config.NotifyMinInterval and Config.NotifyMaxInterval.
const (
	DefaultNotifyMinInterval = 50 * time.Millisecond
	DefaultNotifyMaxInterval = 2 * time.Second
)

var (
	_ rollout.Notifier = (*Ray)(nil)
	_ rollout.Notifier = (*Deployer)(nil)
)

// Notify implements rollout.Notifier. Ray Serve has no watch, so the
// adapter polls, but only after a write, and only until it sees what the
// write waits for: each SetCapacity or Deploy that sent a PUT starts (or
// restarts) a fast poll of the cluster, one GET of the applications per
// poll, the first Config.NotifyMinInterval after the write, the next ones
// twice as far apart up to Config.NotifyMaxInterval. A poll that sees a
// change of what the adapter reports calls every subscriber's wake and
// brings the interval back to the minimum. The goal ends the polls until
// the next write: after SetCapacity, the cluster at the target_capacity
// written and the side settled there; after Deploy, the revision deployed
// reported Updated. Goals of successive writes add up (a Deploy replaces
// them all). A goal never reached is polled for every NotifyMaxInterval;
// nothing is polled while nobody subscribes, nor while nothing was written.
//
// Notify returns nil (an error only for a nil wake); the subscription ends
// when ctx does, and counts as ended (rollout.TrackNotify, which a Runner's
// Run waits for) only once no poll it took part in is still running, so no
// GET and no wake of it follows. A Ray and its Deployer share one poller,
// and each poll's answer serves the reads (Config.ReadMaxAge). A GET that
// fails counts as no change. No goroutine waits between polls: each is a
// timer of Config.Clock. See docs/design/ray.md for what the polls cost.
func (r *Ray) Notify(ctx context.Context, wake func()) error {
	return r.poll.subscribe(ctx, wake)
}

// Notify implements rollout.Notifier with the poller of the Ray it came
// from: a Ray and its Deployer poll the cluster once for both.
func (dp *Deployer) Notify(ctx context.Context, wake func()) error {
	return dp.r.Notify(ctx, wake)
}

// view is what the adapter would report from one GET answer, the value the
// poller compares.
type view struct {
	capacity rollout.CapacityStatus
	// tc is the target_capacity (-1 for null).
	tc       float64
	revision rollout.RevisionStatus
}

// view derives what the adapter reports from d, without changing what the
// adapter knows.
func (r *Ray) view(d *instanceDetails) view {
	o := r.observe(d)
	v := view{capacity: o.CapacityStatus, tc: -1}
	if o.TargetCapacity != nil {
		v.tc = *o.TargetCapacity
	}
	if c := r.current(); c != nil && c.revision != "" && runs(d, c) {
		v.revision = rollout.RevisionStatus{Revision: c.revision, Updated: rolledOut(d, c)}
	}
	return v
}

// goal is what the writes polled for wait to see.
type goal struct {
	// capacity: a SetCapacity waits for the cluster at target capacity
	// tc (-1 for null), settled.
	capacity bool
	tc       float64
	// revision: a Deploy waits for this revision reported Updated ("":
	// none).
	revision string
}

// capacityGoal is the goal of a capacity write of req.
func capacityGoal(req rollout.CapacityRequest) goal {
	if req.Steady {
		return goal{capacity: true, tc: -1}
	}
	return goal{capacity: true, tc: float64(req.Percent)}
}

// deployGoal is the goal of a Deploy of revision.
func deployGoal(revision string) goal { return goal{revision: revision} }

// then returns the goal of the writes of g followed by one of next: a
// Deploy replaces every earlier goal, a capacity write the earlier
// capacity.
func (g goal) then(next goal) goal {
	if next.revision != "" {
		return next
	}
	g.capacity, g.tc = next.capacity, next.tc
	return g
}

// seen reports whether v shows everything g waits for.
func (g goal) seen(v view) bool {
	if g.capacity && (v.tc != g.tc || !v.capacity.Settled) {
		return false
	}
	return g.revision == "" || v.revision.Revision == g.revision && v.revision.Updated
}

// poller polls one cluster after writes for the subscribers of a Ray and
// its Deployer.
type poller struct {
	r        *Ray
	clk      clock.Clock
	min, max time.Duration

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	// ctx bounds the polls; it ends when the last subscriber leaves.
	ctx    context.Context
	cancel context.CancelFunc
	// gen counts the writes and the ends of polling: a poll started in an
	// earlier generation neither compares nor schedules.
	gen uint64
	// stop cancels the pending poll (nil when none).
	stop func() bool
	// delay is the wait before the pending poll.
	delay time.Duration
	// last is the view of the last poll, or of the GET before the write.
	last view
	// goal is what the writes polled for wait to see; the zero goal while
	// nothing is polled.
	goal goal
}

// subscriber is one Notify call. busy counts the polls in flight that
// it takes part in; end (rollout.TrackNotify) is called once it has left
// and busy is 0.
type subscriber struct {
	wake func()
	end  func()
	busy int
	gone bool
}

func newPoller(r *Ray, c *Config) *poller {
	p := &poller{r: r, clk: clock.OrReal(c.Clock), min: c.NotifyMinInterval, max: c.NotifyMaxInterval}
	if p.min == 0 {
		p.min = DefaultNotifyMinInterval
	}
	if p.max == 0 {
		p.max = DefaultNotifyMaxInterval
	}
	p.max = max(p.max, p.min)
	return p
}

func (p *poller) subscribe(ctx context.Context, wake func()) error {
	if wake == nil {
		return errors.New("ray: Notify: wake is nil")
	}
	s := &subscriber{wake: wake, end: rollout.TrackNotify(ctx)}
	p.mu.Lock()
	if p.subs == nil {
		p.subs = map[*subscriber]struct{}{}
	}
	if len(p.subs) == 0 {
		p.ctx, p.cancel = context.WithCancel(context.Background())
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	context.AfterFunc(ctx, func() { p.unsubscribe(s) })
	return nil
}

func (p *poller) unsubscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[s]; !ok {
		return
	}
	delete(p.subs, s)
	s.gone = true
	if len(p.subs) == 0 {
		p.halt()
		p.goal = goal{}
		p.cancel() // ends a poll in flight
	}
	if s.busy == 0 {
		s.end()
	}
}

// release ends the part of in in a poll that has finished. p.mu is not
// held.
func (p *poller) release(in []*subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range in {
		if s.busy--; s.busy == 0 && s.gone {
			s.end()
		}
	}
}

// halt drops the pending poll. p.mu is held.
func (p *poller) halt() {
	p.gen++
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
}

// wrote starts a fast poll after a write whose goal is g; before is the
// cluster as read just before it.
func (p *poller) wrote(before *instanceDetails, g goal) {
	p.mu.Lock()
	idle := len(p.subs) == 0
	p.mu.Unlock()
	if idle {
		return // nobody listens: not even the view is computed
	}
	v := p.r.view(before)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.subs) == 0 {
		return
	}
	p.halt()
	p.last = v
	p.goal = p.goal.then(g)
	p.schedule(p.min)
}

// schedule sets the next poll d from now. p.mu is held.
func (p *poller) schedule(d time.Duration) {
	gen := p.gen
	p.delay = d
	p.stop = p.clk.AfterFunc(d, func() { p.poll(gen) })
}

// poll reads the cluster once, wakes the subscribers if what the adapter
// reports changed, and schedules the next poll unless it saw the goal.
func (p *poller) poll(gen uint64) {
	p.mu.Lock()
	if gen != p.gen {
		p.mu.Unlock()
		return
	}
	ctx := p.ctx
	p.stop = nil
	in := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		s.busy++
		in = append(in, s)
	}
	p.mu.Unlock()
	defer func() { p.release(in) }()

	d, err := p.r.get(ctx)
	var v view
	if err == nil {
		v = p.r.view(d)
	}

	p.mu.Lock()
	if gen != p.gen {
		p.mu.Unlock()
		return
	}
	changed := err == nil && v != p.last
	var wakes []func()
	if changed {
		p.last = v
		for s := range p.subs {
			if !slices.Contains(in, s) { // subscribed during the GET
				s.busy++
				in = append(in, s)
			}
			wakes = append(wakes, s.wake)
		}
	}
	switch {
	case err == nil && p.goal.seen(v): // wait for the next write
		p.gen++
		p.goal = goal{}
	case changed:
		p.schedule(p.min)
	default:
		p.schedule(min(2*p.delay, p.max))
	}
	p.mu.Unlock()
	for _, w := range wakes {
		w()
	}
}
