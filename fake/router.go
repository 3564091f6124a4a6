package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/rollout"
)

// Lag delays a change: it becomes visible after Reads observations, and
// after Duration on the adapter's Clock (both must pass). The zero Lag
// applies changes at once.
type Lag struct {
	Reads    int
	Duration time.Duration
}

// Call is one call recorded in an adapter's history. It is a plain value;
// the zero Call names no call.
type Call struct {
	At  time.Time
	Op  string // "SetWeights", "Weights", "SetRoutes", "Routes", "SetCapacity", "Capacity", "Deploy", "Revision", "Load", "Save", "Analyze"
	Arg string // the argument, formatted
	Err error
	// Routes is what a SetRoutes call asked for (a copy), nil for any
	// other call.
	Routes *rollout.Routes
	// Owner is the owner the call was made for (rollout.OwnerFrom of its
	// context; the claimant for Claim and Release), zero for none.
	Owner rollout.Owner
}

// pending is a change waiting for its lag.
type pending struct {
	reads int
	due   time.Time
}

func (p *pending) ready(now time.Time) bool {
	return p.reads <= 0 && (p.due.IsZero() || !now.Before(p.due))
}

// history is shared by the fakes: counts of successful calls by operation,
// and the calls themselves unless turned off.
type history struct {
	off   bool
	calls []Call
	ok    map[string]int
}

func (h *history) add(clock *Clock, op, arg string, err error) {
	if err == nil {
		if h.ok == nil {
			h.ok = map[string]int{}
		}
		h.ok[op]++
	}
	if h.off {
		return
	}
	var at time.Time
	if clock != nil {
		at = clock.Now()
	}
	h.calls = append(h.calls, Call{At: at, Op: op, Arg: arg, Err: err})
}

func (h *history) count(op string) int { return h.ok[op] }

// Router is an in-memory rollout.TrafficRouter and rollout.ExtrasRouter: a
// route whose spec holds the weights and the extras (a header route, a
// mirror, sticky sessions) last set, and whose data plane accepts them after
// a Lag. Applied and AppliedRoutes report what the data plane routes by,
// which is what the Traffic simulator uses. Test-only controls: SetLag,
// FailWith, Conflicts, Reject, Overwrite (another writer), Delete and Create
// (the route removed and re-created), DropExtras (a GitOps tool re-applying
// the route without the extras), Unsupported (a data plane without an
// extra), DropNotifications, History. It is a rollout.Notifier (see Notify)
// and a rollout.Claimer (see Claim).
//
// The zero value routes everything to side A and applies changes at once.
// Safe for concurrent use.
type Router struct {
	mu       sync.Mutex
	clock    *Clock
	lag      Lag
	spec     rollout.Weights
	applied  rollout.Weights
	extras   programmed // the extras in the route's spec
	live     programmed // the extras the data plane routes by
	refused  map[Extra]bool
	change   *pending
	err      error
	conflict int
	rejected string
	deleted  bool
	claim    claim
	hist     history
	note     notifier
	// state is the JSON of the state a RouteStore keeps on the route.
	state []byte
	// stateWrites counts the writes that carried the state.
	stateWrites int
	// others is the bytes of annotations other writers keep on the route
	// (see FillAnnotations).
	others int
}

var (
	_ rollout.TrafficRouter = (*Router)(nil)
	_ rollout.ExtrasRouter  = (*Router)(nil)
	_ rollout.Notifier      = (*Router)(nil)
)

// NewRouter returns a router that sends all traffic to side A. clock may be
// nil when no Lag uses a Duration.
func NewRouter(clock *Clock) *Router {
	return &Router{clock: clock, spec: rollout.Weights{A: 100}, applied: rollout.Weights{A: 100}}
}

func (r *Router) now() time.Time {
	if r.clock == nil {
		return time.Time{}
	}
	return r.clock.Now()
}

// SetWeights writes the weights into the route's spec. They are accepted by
// the data plane after the Lag. Extras programmed by SetRoutes stay as they
// are: only the weights are written.
func (r *Router) SetWeights(ctx context.Context, w rollout.Weights) error {
	return r.setWeights(ctx, w, nil)
}

// setWeights is SetWeights, writing the state st (JSON) in the same update
// when it is not nil.
func (r *Router) setWeights(ctx context.Context, w rollout.Weights, st []byte) error {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	arg := fmt.Sprintf("A=%d B=%d", w.A, w.B)
	if err := ctx.Err(); err != nil {
		r.hist.add(r.clock, "SetWeights", arg, err)
		return err
	}
	if r.err != nil {
		r.hist.add(r.clock, "SetWeights", arg, r.err)
		return r.err
	}
	if r.deleted {
		err := fmt.Errorf("fake router: route: %w", rollout.ErrNotFound)
		r.hist.add(r.clock, "SetWeights", arg, err)
		return err
	}
	if err := r.claim.check(ctx); err != nil {
		r.hist.add(r.clock, "SetWeights", arg, err)
		r.hist.owned(ctx)
		return err
	}
	if w.A < 0 || w.B < 0 || w.A+w.B != 100 {
		err := rollout.Permanent(fmt.Errorf("fake router: weights %s must be non-negative and sum to 100", arg))
		r.hist.add(r.clock, "SetWeights", arg, err)
		return err
	}
	if err := r.fits(st); err != nil {
		r.hist.add(r.clock, "SetWeights", arg, err)
		r.hist.owned(ctx)
		return err
	}
	if r.conflict > 0 {
		r.conflict--
		err := fmt.Errorf("fake router: %w", rollout.ErrConflict)
		r.hist.add(r.clock, "SetWeights", arg, err)
		return err
	}
	r.hist.add(r.clock, "SetWeights", arg, nil)
	r.hist.owned(ctx)
	if st != nil {
		r.state = st
		r.stateWrites++
	}
	if w == r.spec {
		return nil
	}
	r.write(w)
	return nil
}

// write puts w into the spec; the data plane takes it after the lag.
func (r *Router) write(w rollout.Weights) {
	r.settle() // a change whose lag is over was applied before this one
	r.spec = w
	r.change = &pending{reads: r.lag.Reads}
	if r.lag.Duration > 0 {
		r.change.due = r.now().Add(r.lag.Duration)
		r.note.due(r.clock, r.change.due)
	}
	r.settle()
	r.note.change()
}

// Overwrite is another writer changing the route's weights to w, whatever
// they are: a split that does not sum to 100 (100/30, 0/0) is what a
// careless edit leaves. The data plane takes it after the lag and shares
// requests in proportion to the weights (none at all for 0/0).
func (r *Router) Overwrite(w rollout.Weights) {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(w)
}

// Delete removes the route: every call fails with rollout.ErrNotFound and
// the data plane routes nothing, until Create.
func (r *Router) Delete() {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.deleted {
		r.note.change()
	}
	r.deleted = true
	r.spec, r.applied, r.change = rollout.Weights{}, rollout.Weights{}, nil
	r.extras, r.live = programmed{}, programmed{}
	r.claim.holder = rollout.Owner{} // the route's annotations go with it
}

// Create re-creates a deleted route (or replaces a live one) with weights
// w, taken by the data plane after the lag. The new route holds no extras.
func (r *Router) Create(w rollout.Weights) {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = false
	r.writeRoutes(w, programmed{})
}

// settle applies a pending change whose lag has passed.
func (r *Router) settle() {
	if r.change != nil && r.rejected == "" && r.change.ready(r.now()) {
		r.applied = r.spec
		r.live = r.extras
		r.change = nil
	}
}

// Weights reports the spec weights and whether the data plane accepted them.
// Each call counts as one observation for the Lag.
func (r *Router) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		r.hist.add(r.clock, "Weights", "", err)
		return rollout.RouteStatus{}, err
	}
	_, err := r.status()
	r.hist.add(r.clock, "Weights", "", err)
	if err != nil {
		return rollout.RouteStatus{}, err
	}
	if r.change != nil {
		r.change.reads--
	}
	return r.status()
}

// Status returns what Weights would report, without counting a read or
// recording a call.
func (r *Router) Status() (rollout.RouteStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status()
}

func (r *Router) status() (rollout.RouteStatus, error) {
	if r.err != nil {
		return rollout.RouteStatus{}, r.err
	}
	if r.deleted {
		return rollout.RouteStatus{}, fmt.Errorf("fake router: route: %w", rollout.ErrNotFound)
	}
	r.settle()
	st := rollout.RouteStatus{Weights: r.spec, Accepted: r.change == nil && r.rejected == ""}
	switch {
	case r.rejected != "":
		st.Message = r.rejected
	case r.change != nil:
		st.Message = "not yet accepted"
	}
	return st, nil
}

// Applied returns the weights the data plane routes by now.
func (r *Router) Applied() rollout.Weights {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle()
	return r.applied
}

// SetLag sets the lag of later changes.
func (r *Router) SetLag(l Lag) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lag = l
}

// FailWith makes every call fail with err until FailWith(nil).
func (r *Router) FailWith(err error) {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	r.note.change()
}

// Conflicts makes the next n SetWeights calls fail with rollout.ErrConflict
// without writing.
func (r *Router) Conflicts(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conflict = n
}

// Reject makes the data plane refuse the route (Accepted false with msg)
// until Reject(""). Traffic keeps flowing by the last accepted weights.
func (r *Router) Reject(msg string) {
	defer r.note.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rejected != msg {
		r.note.change()
	}
	r.rejected = msg
}

// KeepHistory turns the recording of calls on (the default) or off; counts
// (Reads, Writes) are kept either way.
func (r *Router) KeepHistory(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hist.off = !on
}

// History returns every call so far.
func (r *Router) History() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.hist.calls...)
}

// Writes counts successful SetWeights and SetRoutes calls.
func (r *Router) Writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.count("SetWeights") + r.hist.count("SetRoutes")
}

// Reads counts successful Weights and Routes calls.
func (r *Router) Reads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.count("Weights") + r.hist.count("Routes")
}

// Notify calls wake whenever what Weights reports may have changed, until
// ctx ends. It fails only when ctx has already ended.
//
// Router, Capacity and FixedSide implement
// rollout.Notifier, as a watch on the route or the workload does: Notify
// subscribes a wake func, called (outside the fake's lock, on the goroutine
// that caused the change) whenever what the fake reports may have changed:
//
//   - a write that changes something (SetWeights, SetCapacity, Deploy);
//     writing what is already in place wakes no one;
//   - a test control that changes what the fake reports: Overwrite, Delete,
//     Create, Reject and FailWith on a Router; SetHealth, FailWith, Crash,
//     CrashLoop, SetPartial, SetRevision and StallDeploys on a Capacity or
//     a Deployment;
//   - the end of a Lag with a Duration: a wake is scheduled on the fake's
//     Clock (AfterFunc) at the instant the Duration ends, so it fires inside
//     the Clock's Advance or Set that reaches that instant, once the clock
//     reads it. A lag that also counts reads may not be over then (the wake
//     is spurious); it ends at a read.
//
// A lag counted in reads ends only at a read, and the reader sees what it
// reveals, so it wakes no one; the same holds for replicas that SetPartial
// makes ready one per read. A wake may be spurious (a change superseded
// before its lag ended), never missing. Notify accepts any number of
// subscribers; a subscription ends with its ctx (no wake is delivered once
// ctx is done): it is dropped promptly after, and Notify tracks that end
// (rollout.TrackNotify), so a rollout.Runner's Run returns only once its
// subscriptions are gone. Subscriptions counts those still live.
// DropNotifications stands for a watch that is down.
func (r *Router) Notify(ctx context.Context, wake func()) error {
	return r.note.subscribe(ctx, r.clock, wake)
}

// DropNotifications(true) stops delivering wakes, as a watch that is down:
// changes wake no one (a Runner then finds them at its next poll).
// DropNotifications(false) delivers them again, and wakes every subscriber
// once for what they missed.
func (r *Router) DropNotifications(on bool) { r.note.setDrop(on) }

// Subscriptions returns the number of Notify subscriptions still live:
// those whose ctx has not ended, and for a moment those whose ctx has just
// ended. A Runner's Run leaves none behind once it has returned.
func (r *Router) Subscriptions() int { return r.note.live() }
