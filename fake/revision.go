package fake

import (
	"context"
	"fmt"
	"time"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Deploy puts revision on the side. It fails with the error set by
// FailWith, with ctx's error, and with a Permanent error matching
// rollout.ErrInvalid for an empty revision.
//
// The replicas of the revision the side ran stop at once and are replaced
// by replicas of revision, ready after the side's Lag (all together, or one
// more per observation with SetPartial), counted from the deploy: a deploy
// under traffic loses readiness, as a redeploy does. Revision reports the
// new revision from the deploy on, and Updated once its Lag has passed and
// every wanted replica runs it and is ready (at capacity 0, once the Lag
// has passed); later scaling and crashes do not change it. Deploying the
// revision the side already runs, or is rolling out, writes nothing; what
// it runs is its template, not the revision the last Deploy recorded
// (Redeploy stands for another writer that leaves the record in place).
//
// A deploy of another revision while the side wants replicas (capacity
// above 0) or serves traffic (as the func given to ServingFunc reports) is
// carried out, and recorded as a violation (Violations): upshift deploys a
// side only at weight 0 and capacity 0. Revision does not count as an
// observation for the lags. See docs/design/fake.md.
func (c *Capacity) Deploy(ctx context.Context, revision string) error {
	share := c.servingShare()
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.deployErr(ctx, revision); err != nil {
		return err
	}
	c.settle(false)
	c.recorded = revision
	if revision == c.rev {
		return nil
	}
	switch want := c.want(); {
	case c.fixed && share > 0:
		c.violations = append(c.violations, fmt.Sprintf("deploy %q over %q while serving %d%% of traffic",
			revision, c.rev, share))
	case !c.fixed && (want > 0 || share > 0):
		c.violations = append(c.violations, fmt.Sprintf("deploy %q over %q at capacity %d (%d of %d replicas wanted) while serving %d%% of traffic",
			revision, c.rev, c.percent, want, c.replicas, share))
	}
	c.replace(revision)
	return nil
}

// replace puts revision on the side's template: the replicas of the
// revision it ran stop at once, and every wanted one is replaced by one of
// revision, which starts with the lag. The caller holds c.mu.
func (c *Capacity) replace(revision string) {
	c.note.change()
	c.rev, c.rolling = revision, true
	c.deploy = c.newPending()
	// The replicas of the old revision stop; every wanted replica is
	// replaced by one of the new revision, which starts with the lag.
	c.ready, c.crashed, c.change, c.restart = 0, c.want(), nil, nil
	if c.crashed > 0 && !c.blocked() {
		c.restart = c.newPending()
	}
}

// deployErr checks a deploy and records it in the history.
func (c *Capacity) deployErr(ctx context.Context, revision string) error {
	err := ctx.Err()
	if err == nil {
		err = c.err
	}
	if err == nil && revision == "" {
		err = rollout.Permanent(fmt.Errorf("fake capacity: %w deploy: the revision is empty", rollout.ErrInvalid))
	}
	if err == nil {
		err = c.claim.check(ctx) // claim.go
	}
	c.hist.add(c.clock, "Deploy", revision, err)
	c.hist.owned(ctx)
	return err
}

// servingShare calls the serving func, without holding the lock: the func
// may read this side.
func (c *Capacity) servingShare() int32 {
	c.mu.Lock()
	f := c.serving
	c.mu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

// Revision reports the revision the side runs (see Deploy). expect is
// ignored: the side records the revision it was deployed with. It fails
// with the error set by FailWith and with ctx's error.
func (c *Capacity) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = c.err
	}
	c.hist.add(c.clock, "Revision", expect, err)
	if err != nil {
		return rollout.RevisionStatus{}, err
	}
	if c.fixed {
		c.observe()
	} else {
		c.settle(false)
	}
	return c.revisionStatus(), nil
}

func (c *Capacity) revisionStatus() rollout.RevisionStatus {
	return rollout.RevisionStatus{Revision: c.rev, Updated: c.rev != "" && !c.rolling}
}

// RevisionStatus returns what Revision would report, without counting a
// read or recording a call.
func (c *Capacity) RevisionStatus() rollout.RevisionStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	return c.revisionStatus()
}

// rollOut ends a deploy once its lag has passed and every wanted replica
// is ready.
func (c *Capacity) rollOut(now time.Time) {
	if !c.rolling || c.stall || c.deploy != nil && !c.deploy.ready(now) {
		return
	}
	if c.ready == c.want() && c.crashed == 0 {
		c.rolling, c.deploy = false, nil
	}
}

// SetRevision makes the side run revision at once, fully rolled out, as a
// side that was deployed before the test began: no lag, no violation, no
// history. A deploy in progress ends; replicas keep their readiness (those
// a deploy left starting become ready after the side's Lag, counted from
// now, unless the side crash-loops).
func (c *Capacity) SetRevision(revision string) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	c.note.change()
	c.rev, c.recorded, c.rolling, c.deploy = revision, revision, false, nil
	if c.crashed > 0 && c.restart == nil && !c.loop {
		c.restart = c.newPending()
	}
}

// Recorded returns the revision the side's last Deploy (or SetRevision)
// recorded, as serve/replicas records one in an annotation: a hint that
// Redeploy leaves stale, never what Revision reports.
func (c *Capacity) Recorded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recorded
}

// StallDeploys(true) makes deploys never roll out, as a revision whose image
// never pulls: from now on a deploy in progress, or a later one, starts no
// replica and never reports Updated. StallDeploys(false) lets them go on:
// a deploy in progress rolls out after the side's Lag, counted from then.
// A side not being deployed is not affected.
func (c *Capacity) StallDeploys(on bool) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	if on == c.stall {
		return
	}
	c.note.change()
	c.stall = on
	if !c.rolling {
		return
	}
	c.restart = nil
	if !on {
		c.deploy = c.newPending()
		if c.crashed > 0 && !c.loop {
			c.restart = c.newPending()
		}
	}
}

// ServingFunc sets the func that reports the share of traffic (0..100)
// the side serves, read at every Deploy to check that the side serves none:
// Router.Serving(side) for a side behind a Router. nil (the default) counts
// as serving nothing.
func (c *Capacity) ServingFunc(f func() int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.serving = f
}

// Violations returns the deploys of another revision made while the side
// held capacity or served traffic, one line each; nil when there were none.
func (c *Capacity) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Deploys counts successful Deploy calls, those that changed nothing
// included.
func (c *Capacity) Deploys() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hist.count("Deploy")
}

// Serving returns a func reporting the share of requests (0..100) side
// receives: the larger of its weight in the data plane and in the route's
// spec (a weight written and not yet applied is traffic about to arrive).
// The side the extras send to counts them too: a header route (at its
// ExpectedPercent, all requests when unset) and mirrored copies make it
// receive requests even at weight 0. A side of a deleted route receives
// nothing. Give it to
// Capacity.ServingFunc, FixedSide.ServingFunc or raytest.Server.ServingFunc
// (package serve/ray/raytest).
func (r *Router) Serving(side strategy.Side) func() int32 {
	return func() int32 {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.settle()
		return max(loadOf(r.spec, r.extras, side), loadOf(r.applied, r.live, side))
	}
}

// shareOf is side's share of the requests routed by w, in percent: the
// weights' proportions, as the data plane shares requests; at least 1 for a
// positive weight.
func shareOf(w rollout.Weights, side strategy.Side) int32 {
	mine, all := int64(w.Of(side)), int64(w.A)+int64(w.B)
	if mine <= 0 || all <= 0 {
		return 0
	}
	return int32(min(100, max(1, mine*100/all)))
}

// Redeploy is another writer changing the side's workload to run revision,
// whatever the side serves or holds: a person applying an older template, a
// GitOps tool restoring the one it holds (leaving behind whatever upshift
// noted about the side). The replicas restart on it as after a Deploy, and
// Revision reports what the side now runs, its content, not what was last
// deployed through Deploy: "" for a template no revision maps to. It is
// neither a violation nor a Deploy in the history. Redeploying the revision
// the side runs restarts it. Safe for concurrent use.
func (c *Capacity) Redeploy(revision string) {
	defer c.note.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(false)
	c.replace(revision)
}
