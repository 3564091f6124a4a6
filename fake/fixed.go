package fake

import (
	"context"

	"github.com/upshift-dev/upshift/rollout"
)

// FixedSide is one side of the fixed capacity mode (a Runner with a Router
// and no CapacitySetter) that runs a revision: a workload that stays fully
// provisioned, and a rollout.Deployer for the Runner's RevisionA or RevisionB.
//
// A deploy of another revision restarts the side's replicas: they stop at
// once and come back with the new revision after the side's Lag (all
// together, or one more per observation with SetPartial). Meanwhile Status
// reports the ready share dropping, as pods restarting, and Revision
// reports the new revision, Updated once every replica runs it and is
// ready. Each Revision call counts as one observation for the Lag.
// Deploying the revision the side runs, or is rolling out, writes nothing.
//
// The side holds capacity whatever happens, so a deploy is safe only while
// it serves no traffic: a deploy of another revision while the func given
// to ServingFunc reports a share above 0 is carried out and recorded as a
// violation (Violations).
//
// Test-only controls: SetLag, SetPartial, FailWith, SetRevision,
// Redeploy, StallDeploys, ServingFunc, DropNotifications, History.
// NewFixedTraffic simulates requests on two of them. It is a
// rollout.Notifier (see Notify) and a rollout.Claimer (see Claim).
//
// The zero value is not usable: use NewFixedSide. Safe for concurrent
// use.
type FixedSide struct {
	c *Capacity
}

var (
	_ rollout.Deployer = (*FixedSide)(nil)
	_ rollout.Notifier = (*FixedSide)(nil)
)

// NewFixedSide returns a side of the given replica count (at least 1),
// fully ready and running revision ("" for none). clock may be nil when no
// Lag uses a Duration.
func NewFixedSide(clock *Clock, replicas int32, revision string) *FixedSide {
	c := NewCapacity(clock, CapacityOptions{Replicas: replicas, Percent: 100})
	c.steady, c.fixed, c.rev = true, true, revision
	return &FixedSide{c: c}
}

// Deploy puts revision on the side. It fails with the error set by
// FailWith, with ctx's error, and with a Permanent error matching
// rollout.ErrInvalid for an empty revision.
func (d *FixedSide) Deploy(ctx context.Context, revision string) error {
	return d.c.Deploy(ctx, revision)
}

// Revision reports the revision the side runs; expect is ignored. Each call
// counts as one observation.
func (d *FixedSide) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	return d.c.Revision(ctx, expect)
}

// RevisionStatus returns what Revision would report, without counting a
// read or recording a call.
func (d *FixedSide) RevisionStatus() rollout.RevisionStatus { return d.c.RevisionStatus() }

// Status reports the side's capacity: always 100 and steady, Ready the
// share of replicas ready. It counts no read.
func (d *FixedSide) Status() rollout.CapacityStatus { return d.c.Status() }

// SetLag sets the lag of later deploys.
func (d *FixedSide) SetLag(l Lag) { d.c.SetLag(l) }

// SetPartial makes the replicas of a deploy become ready one per
// observation.
func (d *FixedSide) SetPartial(on bool) { d.c.SetPartial(on) }

// FailWith makes every Deploy and Revision call fail with err until
// FailWith(nil).
func (d *FixedSide) FailWith(err error) { d.c.FailWith(err) }

// SetRevision makes the side run revision at once, fully rolled out (see
// Capacity.SetRevision).
func (d *FixedSide) SetRevision(revision string) { d.c.SetRevision(revision) }

// Redeploy makes another writer put revision on the side, leaving the
// revision upshift recorded in place (see Capacity.Redeploy): the
// replicas restart with it, as for a deploy.
func (d *FixedSide) Redeploy(revision string) { d.c.Redeploy(revision) }

// Recorded returns the revision the last Deploy recorded (see
// Capacity.Recorded).
func (d *FixedSide) Recorded() string { return d.c.Recorded() }

// StallDeploys makes deploys never roll out until StallDeploys(false) (see
// Capacity.StallDeploys).
func (d *FixedSide) StallDeploys(on bool) { d.c.StallDeploys(on) }

// ServingFunc sets the func that reports the share of traffic (0..100) the
// side serves, read at every Deploy: Router.Serving(side) for a side behind
// a Router. nil counts as serving nothing.
func (d *FixedSide) ServingFunc(f func() int32) { d.c.ServingFunc(f) }

// Violations returns the deploys of another revision made while the side
// served traffic, one line each; nil when there were none.
func (d *FixedSide) Violations() []string { return d.c.Violations() }

// Deploys counts successful Deploy calls, those that changed nothing
// included.
func (d *FixedSide) Deploys() int { return d.c.Deploys() }

// KeepHistory turns the recording of calls on (the default) or off.
func (d *FixedSide) KeepHistory(on bool) { d.c.KeepHistory(on) }

// History returns every Deploy and Revision call so far.
func (d *FixedSide) History() []Call { return d.c.History() }

// Notify calls wake whenever what Revision (and Status) report may have
// changed, until ctx ends (see Capacity.Notify).
func (d *FixedSide) Notify(ctx context.Context, wake func()) error { return d.c.Notify(ctx, wake) }

// DropNotifications stops (true) or resumes (false) the delivery of wakes
// (see Capacity.DropNotifications).
func (d *FixedSide) DropNotifications(on bool) { d.c.DropNotifications(on) }

// Subscriptions returns the number of Notify subscriptions still live (see
// Capacity.Subscriptions; a Deployment shares its Capacity's).
func (d *FixedSide) Subscriptions() int { return d.c.Subscriptions() }
