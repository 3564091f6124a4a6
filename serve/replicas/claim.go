package replicas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/upshift-dev/upshift/rollout"
)

// ClaimAnnotation holds the claim on a workload: the rollout.Owner that
// moves it, as JSON ({"kind", "namespace", "name", "uid"}). Setter.Claim
// and Deployer.Claim write it, Release removes it. A GitOps tool that
// applies the workload should ignore it, with CapacityAnnotation,
// RevisionAnnotation, upshift.dev/full-replicas and spec.replicas.
const ClaimAnnotation = "upshift.dev/claim"

var (
	_ rollout.Claimer = (*Setter)(nil)
	_ rollout.Claimer = (*Deployer)(nil)
)

// holder returns the owner of w's claim, the zero Owner when there is
// none.
func (s *Setter) holder(w *liveWorkload) (rollout.Owner, error) {
	raw, ok := w.meta.Annotations[ClaimAnnotation]
	if !ok {
		return rollout.Owner{}, nil
	}
	var o rollout.Owner
	if err := json.Unmarshal([]byte(raw), &o); err != nil || o.Name == "" || o.UID == "" {
		return rollout.Owner{}, fmt.Errorf("%w: %s: annotation %s: %q is not a claim (an owner with a name and a uid); remove it to release the claim", ErrInvalid, s.ref, ClaimAnnotation, raw)
	}
	return o, nil
}

// Claim records owner's claim on the workload in ClaimAnnotation (see
// rollout.Claimer). The check is made on the read the reconcile shares
// with Capacity and Revision (rollout.ReadOnce): a claim owner holds
// writes nothing. A workload another owner claims is refused with a
// *rollout.ClaimedError naming it, unless that owner is replace. The claim
// is written with the workload's resourceVersion: of two claimants racing,
// one wins and the other re-reads and is refused. It changes nothing else
// of the workload (its replicas are written back as read).
func (s *Setter) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	if err := claimOwner(owner); err != nil {
		return err
	}
	if w, err := rollout.ReadOnce(ctx, s, s.get); err == nil {
		if h, err := s.holder(w); err == nil && h == owner {
			return nil
		}
	}
	return s.write(ctx, func(w *liveWorkload) error {
		h, err := s.holder(w)
		switch {
		case err != nil:
			return err
		case h == owner:
			return nil
		case !h.IsZero() && (replace.IsZero() || h != replace):
			return s.claimedError(h)
		}
		b, err := json.Marshal(owner)
		if err != nil {
			return err
		}
		if w.meta.Annotations == nil {
			w.meta.Annotations = map[string]string{}
		}
		w.meta.Annotations[ClaimAnnotation] = string(b)
		w.setReplica(w.replicas)
		return s.wrap(w.update(ctx))
	})
}

// Release removes owner's claim from the workload; a workload that another
// owner claims, or none, is not written, and one that no longer exists
// counts as released.
func (s *Setter) Release(ctx context.Context, owner rollout.Owner) error {
	err := s.write(ctx, func(w *liveWorkload) error {
		if h, err := s.holder(w); err != nil || h != owner {
			return nil
		}
		delete(w.meta.Annotations, ClaimAnnotation)
		w.setReplica(w.replicas)
		return s.wrap(w.update(ctx))
	})
	if errors.Is(err, rollout.ErrNotFound) {
		return nil
	}
	return err
}

// Claim records owner's claim on the Deployer's workload: the same claim
// as its Setter's (see Setter.Claim).
func (d *Deployer) Claim(ctx context.Context, owner, replace rollout.Owner) error {
	return d.s.Claim(ctx, owner, replace)
}

// Release removes owner's claim from the Deployer's workload (see
// Setter.Release).
func (d *Deployer) Release(ctx context.Context, owner rollout.Owner) error {
	return d.s.Release(ctx, owner)
}

// checkWriter refuses a write for ctx's owner (rollout.OwnerFrom) to a
// workload another owner claims: SetCapacity and Deploy write nothing
// then.
func (s *Setter) checkWriter(ctx context.Context, w *liveWorkload) error {
	o, ok := rollout.OwnerFrom(ctx)
	if !ok {
		return nil
	}
	h, err := s.holder(w)
	if err != nil {
		return err
	}
	if !h.IsZero() && h != o {
		return s.claimedError(h)
	}
	return nil
}

// claimedError is the refusal of a write to the workload that holder
// claims: it names the workload and its claim annotation.
func (s *Setter) claimedError(holder rollout.Owner) *rollout.ClaimedError {
	return &rollout.ClaimedError{Object: s.ref, Owner: holder, Annotation: ClaimAnnotation,
		On: rollout.ObjectRef{Group: s.group, Kind: s.kind, Resource: s.resource, Namespace: s.ns, Name: s.name}}
}

// claimOwner checks the owner of a Claim.
func claimOwner(o rollout.Owner) error {
	if o.IsZero() {
		return rollout.Permanent(fmt.Errorf("%w: claim: owner: required", ErrInvalid))
	}
	if err := o.Validate(); err != nil {
		return rollout.Permanent(fmt.Errorf("%w: claim: %w", ErrInvalid, err))
	}
	return nil
}
