package fake

import (
	"context"
	"fmt"

	"github.com/upshift-dev/upshift/rollout"
)

// Claims: the rules are in Router.Claim's doc.

// claim is the claim on one fake object. Its methods are called with the
// object's lock held.
type claim struct {
	object string // how ClaimedError names the object
	holder rollout.Owner
}

// take is Claim's change: nil when owner holds the claim afterwards.
func (c *claim) take(owner, replace rollout.Owner) error {
	if owner.IsZero() {
		return rollout.Permanent(fmt.Errorf("%w claim: owner: required", rollout.ErrInvalid))
	}
	if err := owner.Validate(); err != nil {
		return rollout.Permanent(err)
	}
	switch {
	case c.holder == owner:
	case c.holder.IsZero() || !replace.IsZero() && c.holder == replace:
		c.holder = owner
	default:
		return &rollout.ClaimedError{Object: c.object, Owner: c.holder}
	}
	return nil
}

// release is Release's change.
func (c *claim) release(owner rollout.Owner) {
	if c.holder == owner {
		c.holder = rollout.Owner{}
	}
}

// check refuses a write for ctx's owner to an object another owner holds.
func (c *claim) check(ctx context.Context) error {
	o, ok := rollout.OwnerFrom(ctx)
	if ok && !c.holder.IsZero() && c.holder != o {
		return &rollout.ClaimedError{Object: c.object, Owner: c.holder}
	}
	return nil
}

// owned records the owner of ctx on the last call of h.
func (h *history) owned(ctx context.Context) {
	if h.off || len(h.calls) == 0 {
		return
	}
	h.calls[len(h.calls)-1].Owner, _ = rollout.OwnerFrom(ctx)
}

var (
	_ rollout.Claimer = (*Router)(nil)
	_ rollout.Claimer = (*Capacity)(nil)
	_ rollout.Claimer = (*FixedSide)(nil)
)

// Claim records owner's claim on the route (see rollout.Claimer). It fails
// with the error set by FailWith, with ctx's error, and with
// rollout.ErrNotFound while the route is deleted.
//
// Router, Capacity and FixedSide are rollout.Claimers, as the real
// adapters are: each holds
// the claim a real adapter records on its object (an annotation), with the
// semantics of rollout.Claimer. Claim by the holder writes nothing;
// another owner's Claim is refused with a *rollout.ClaimedError naming the
// holder, unless it replaces exactly that holder; Release by anyone but
// the holder leaves the claim. A write (SetWeights, SetCapacity, Deploy)
// for a context whose rollout.OwnerFrom names another owner than the
// holder is refused the same way and changes nothing; a write with no
// owner in its context, or to an object nobody claims, is made as before.
// Each call records its owner in the history (Call.Owner), so a test can
// check who wrote when. A deleted Router loses its claim with the route,
// as a re-created object has no annotations. SetClaimant sets the holder
// directly, as a person editing the annotation would.
func (r *Router) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = r.err
	}
	if err == nil && r.deleted {
		err = fmt.Errorf("fake router: route: %w", rollout.ErrNotFound)
	}
	if err == nil {
		r.claim.object = "fake route"
		err = r.claim.take(owner, replace)
	}
	r.hist.add(r.clock, "Claim", owner.String(), err)
	r.hist.owned(rollout.WithOwner(ctx, owner))
	return err
}

// Release removes owner's claim from the route, if it holds it.
func (r *Router) Release(ctx context.Context, owner rollout.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = r.err
	}
	if err == nil {
		r.claim.release(owner)
	}
	r.hist.add(r.clock, "Release", owner.String(), err)
	r.hist.owned(rollout.WithOwner(ctx, owner))
	return err
}

// Claimant returns the owner that holds the route's claim; the zero Owner
// when none does.
func (r *Router) Claimant() rollout.Owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.claim.holder
}

// SetClaimant makes o hold the route's claim (the zero Owner: nobody), as
// another writer editing the claim would.
func (r *Router) SetClaimant(o rollout.Owner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claim.holder = o
}

// Claim records owner's claim on the side's workload (see
// rollout.Claimer, and Router.Claim for how the fakes hold claims). It
// fails with the error set by FailWith and with ctx's error.
func (c *Capacity) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = c.err
	}
	if err == nil {
		c.claim.object = "fake side"
		err = c.claim.take(owner, replace)
	}
	c.hist.add(c.clock, "Claim", owner.String(), err)
	c.hist.owned(rollout.WithOwner(ctx, owner))
	return err
}

// Release removes owner's claim from the side, if it holds it.
func (c *Capacity) Release(ctx context.Context, owner rollout.Owner) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := ctx.Err()
	if err == nil {
		err = c.err
	}
	if err == nil {
		c.claim.release(owner)
	}
	c.hist.add(c.clock, "Release", owner.String(), err)
	c.hist.owned(rollout.WithOwner(ctx, owner))
	return err
}

// Claimant returns the owner that holds the side's claim; the zero Owner
// when none does.
func (c *Capacity) Claimant() rollout.Owner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claim.holder
}

// SetClaimant makes o hold the side's claim (the zero Owner: nobody), as
// another writer editing the claim would.
func (c *Capacity) SetClaimant(o rollout.Owner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claim.holder = o
}

// Claim records owner's claim on the side (see Capacity.Claim).
func (d *FixedSide) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	return d.c.Claim(ctx, owner, replace)
}

// Release removes owner's claim from the side, if it holds it.
func (d *FixedSide) Release(ctx context.Context, owner rollout.Owner) error {
	return d.c.Release(ctx, owner)
}

// Claimant returns the owner that holds the side's claim.
func (d *FixedSide) Claimant() rollout.Owner { return d.c.Claimant() }

// SetClaimant makes o hold the side's claim (see Capacity.SetClaimant).
func (d *FixedSide) SetClaimant(o rollout.Owner) { d.c.SetClaimant(o) }
