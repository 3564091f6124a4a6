package rollout

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/upshift-dev/upshift/strategy"
)

// Owner names who moves the objects of a rollout: the object that holds
// the rollout's state (an operator's Release, say) or, for a standalone
// program, the program's rollout. Adapters record it as a claim on every
// object they move (see Claimer), so that a second rollout pointed at the
// same route or workloads is refused instead of fighting the first.
//
// Two Owners are the same claimant when they are equal: same Kind,
// Namespace, Name and UID. UID tells a re-created object from the one it
// replaced, whose claim is then stale. Name and UID are required; Kind
// and Namespace are optional and only make the claim readable. The zero
// Owner is no owner: a Runner without one takes no claims.
//
// With Runner.Owner set, before it applies anything of a non-idle state the
// Runner claims every adapter that is a Claimer; a claim already held
// writes nothing, and its check shares the reconcile's reads (ReadOnce). A
// second owner gets a *ClaimedError naming the object and the owner that
// holds it (errors.Is ErrClaimed): its reconcile observes and writes
// nothing, its state reports Degraded with reason strategy.ReasonClaimed
// and that message, and the time refused counts toward no deadline. The
// Runner also passes its owner to every write (WithOwner), so an adapter
// refuses a write for an owner whose claim was taken over meanwhile. Call
// Runner.Release when the rollout object is deleted (a finalizer). A claim
// whose owner is gone is taken over when Runner.OwnerGone reports it gone;
// without OwnerGone, only once released.
type Owner struct {
	Kind      string    `json:"kind,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// IsZero reports whether o is the zero Owner.
func (o Owner) IsZero() bool { return o == Owner{} }

// Validate reports an Owner without a Name or a UID, naming the field; the
// error matches ErrInvalid. The zero Owner is valid (no owner).
func (o Owner) Validate() error {
	switch {
	case o.IsZero():
		return nil
	case o.Name == "":
		return fmt.Errorf("%w owner: name: required", ErrInvalid)
	case o.UID == "":
		return fmt.Errorf("%w owner: uid: required", ErrInvalid)
	}
	return nil
}

// String renders o as "Release shop/web (uid 1234)", leaving out an empty
// kind or namespace.
func (o Owner) String() string {
	s := o.Name
	if o.Namespace != "" {
		s = o.Namespace + "/" + s
	}
	if o.Kind != "" {
		s = o.Kind + " " + s
	}
	return fmt.Sprintf("%s (uid %s)", s, o.UID)
}

// ErrClaimed is matched by a *ClaimedError: another owner holds the claim
// on an object that a rollout would move.
var ErrClaimed = errors.New("rollout: claimed by another owner")

// ClaimedError: Object (as the adapter names it: "HTTPRoute shop/web rule
// web-a/web-b", "Deployment shop/web-b") is claimed by Owner, so the
// claimant that got this error writes nothing to it. It matches
// ErrClaimed. It is not Permanent: the claim may be released (its owner is
// deleted) or found stale, and the rollout then goes on.
//
// Adapters that keep their claims in annotations (gateway, serve/replicas)
// also say where the claim is: Annotation, the key of the annotation that
// records it, on the Kubernetes object On. The message then names both and
// the way out for a claim whose owner is gone without releasing it (a
// program that stopped, an object deleted without its finalizer):
// ReleaseCommand, which removes the claim only while Owner still holds it,
// and AnnotateCommand, the plain kubectl equivalent. The zero Annotation
// (the fakes) leaves them out.
type ClaimedError struct {
	Object string
	Owner  Owner
	// Annotation is the key of the annotation that records the claim
	// ("upshift.dev/claim" on a workload, "upshift.dev/claim-<hash>" on a
	// route); "" when the adapter does not keep its claims in one.
	Annotation string
	// On is the object that carries Annotation (the zero ObjectRef when
	// Annotation is "").
	On ObjectRef
}

// ObjectRef names a Kubernetes object for people and for kubectl: its API
// group ("" for the core group), its Kind (or, when only that is known,
// its Resource: "rayservices"), Namespace ("" for a cluster-scoped object)
// and Name. The zero ObjectRef names nothing.
type ObjectRef struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Resource  string `json:"resource,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// IsZero reports whether r is the zero ObjectRef.
func (r ObjectRef) IsZero() bool { return r == ObjectRef{} }

// Arg renders r as kubectl's TYPE/NAME argument, the type qualified by its
// group so that it is never ambiguous: "deployment.apps/web-b",
// "httproute.gateway.networking.k8s.io/web", "service/web". It is "" for an
// ObjectRef without a Name, or without both Kind and Resource.
func (r ObjectRef) Arg() string {
	typ := strings.ToLower(r.Kind)
	if typ == "" {
		typ = r.Resource
	}
	if typ == "" || r.Name == "" {
		return ""
	}
	if r.Group != "" {
		typ += "." + r.Group
	}
	return typ + "/" + r.Name
}

// String renders r as "Deployment shop/web-b" (the resource when the kind
// is unknown, no namespace for a cluster-scoped object).
func (r ObjectRef) String() string {
	typ := r.Kind
	if typ == "" {
		typ = r.Resource
	}
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + name
	}
	if typ == "" {
		return name
	}
	return typ + " " + name
}

func (e *ClaimedError) Error() string {
	msg := fmt.Sprintf("%s is claimed by %s: another rollout moves it", e.Object, e.Owner)
	if e.Annotation == "" || e.On.Arg() == "" {
		return msg
	}
	return fmt.Sprintf("%s; the claim is the annotation %s on %s: if that owner is gone, release it with `%s` (or remove it: `%s`)",
		msg, e.Annotation, e.On, e.ReleaseCommand(), e.AnnotateCommand())
}

// kubectlNamespace is the namespace flag of a command about r ("" for a
// cluster-scoped object).
func kubectlNamespace(r ObjectRef) string {
	if r.Namespace == "" {
		return ""
	}
	return " -n " + r.Namespace
}

// ReleaseCommand returns the kubectl upshift command that releases the
// claim: it removes Annotation from On only while e.Owner (named by its
// UID) still holds it, and only once it finds that owner gone (--force
// releases a live owner's claim). It is "" when the error does not say
// where the claim is.
func (e *ClaimedError) ReleaseCommand() string {
	if e.Annotation == "" || e.On.Arg() == "" {
		return ""
	}
	return fmt.Sprintf("kubectl upshift claims release %s%s --holder %s", e.On.Arg(), kubectlNamespace(e.On), e.Owner.UID)
}

// AnnotateCommand returns the kubectl command that removes the claim's
// annotation, whoever holds it by then; "" when the error does not say
// where the claim is.
func (e *ClaimedError) AnnotateCommand() string {
	if e.Annotation == "" || e.On.Arg() == "" {
		return ""
	}
	return fmt.Sprintf("kubectl annotate%s %s %s-", kubectlNamespace(e.On), e.On.Arg(), e.Annotation)
}

// Is makes errors.Is(err, ErrClaimed) true.
func (e *ClaimedError) Is(target error) bool { return target == ErrClaimed }

// Claimer is an optional interface of the adapters that move objects (a
// TrafficRouter, a CapacitySetter, a Deployer): it records who moves them.
// The gateway Router claims each route rule it moves, serve/replicas each
// workload, and the fakes model the same.
//
// Claim records owner's claim on every object the adapter moves. It writes
// nothing when owner already holds it (the check may read through
// ReadOnce). An object claimed by another owner is refused with a
// *ClaimedError naming that owner, and nothing is written; when that
// other owner is exactly replace (an owner the caller found gone), its
// claim is replaced by owner's instead. replace is the zero Owner for a
// plain claim. A claim is written with optimistic concurrency, so of two
// claimants racing for an unclaimed object exactly one wins, and the
// other gets a *ClaimedError.
//
// Release removes owner's claim from every object; an object claimed by
// another owner or by none, or one that no longer exists, is left as it
// is.
//
// An adapter that holds a claim also refuses every write it makes for a
// context whose OwnerFrom names another owner than the object's claimant
// (a *ClaimedError), so that a Runner whose claim was taken over writes
// nothing more. Implementations are safe for concurrent use.
type Claimer interface {
	Claim(ctx context.Context, owner, replace Owner) error
	Release(ctx context.Context, owner Owner) error
}

// ownerKey is the context key of the Runner's Owner.
type ownerKey struct{}

// WithOwner returns a context that names the owner the adapters write
// for: an adapter that is a Claimer refuses a write for it to an object
// that another owner claims. The Runner sets it from Runner.Owner in every
// reconcile; a caller that drives adapters itself may do the same.
func WithOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

// OwnerFrom returns the owner WithOwner put in ctx, and whether there was a
// non-zero one.
func OwnerFrom(ctx context.Context) (Owner, bool) {
	o, _ := ctx.Value(ownerKey{}).(Owner)
	return o, !o.IsZero()
}

// withOwner puts r.Owner in ctx when there is one.
func (r *Runner) withOwner(ctx context.Context) context.Context {
	if r.Owner.IsZero() {
		return ctx
	}
	return WithOwner(ctx, r.Owner)
}

// claimer is one adapter that claims, with its name in AdapterErrors.
type claimer struct {
	name string
	c    Claimer
}

// claimers returns the adapters that are Claimers, each once (a Deployer
// and a Setter of one workload are two adapters that claim one object;
// the second finds the claim in place).
func (r *Runner) claimers() []claimer {
	var out []claimer
	seen := map[any]bool{}
	for _, a := range []struct {
		name string
		v    any
	}{{"router", r.Router}, {"capacity A", r.A}, {"capacity B", r.B}, {"revision A", r.RevisionA}, {"revision B", r.RevisionB}} {
		if a.v == nil || reflect.ValueOf(a.v).Kind() == reflect.Pointer && reflect.ValueOf(a.v).IsNil() {
			continue
		}
		c, ok := a.v.(Claimer)
		if !ok {
			continue
		}
		if reflect.TypeOf(a.v).Kind() == reflect.Pointer { // one adapter value, claimed once
			if seen[a.v] {
				continue
			}
			seen[a.v] = true
		}
		out = append(out, claimer{a.name, c})
	}
	return out
}

// claim takes r.Owner's claim on every adapter that is a Claimer, before
// anything of a non-idle state is applied. A claim held by an owner that
// OwnerGone reports gone is taken over. The first refusal is returned as
// an *AdapterError wrapping the *ClaimedError.
func (r *Runner) claim(ctx context.Context) error {
	if r.Owner.IsZero() {
		return nil
	}
	for _, c := range r.claimers() {
		err := c.c.Claim(ctx, r.Owner, Owner{})
		var ce *ClaimedError
		if errors.As(err, &ce) && r.OwnerGone != nil {
			holder := ce.Owner
			gone, gerr := r.OwnerGone(ctx, holder)
			if gerr != nil {
				return &AdapterError{Adapter: c.name, Op: "check the owner of a claim", Err: fmt.Errorf("%w (checking whether %s is gone: %w)", err, holder, gerr)}
			}
			if gone {
				logr.FromContextOrDiscard(ctx).Info("taking over a stale claim", "object", ce.Object, "from", holder.String())
				err = c.c.Claim(ctx, r.Owner, holder)
			}
		}
		if err != nil {
			return &AdapterError{Adapter: c.name, Op: "claim", Err: err}
		}
	}
	return nil
}

// refused is the state of a reconcile whose claim another owner holds:
// nothing is observed or applied, the state reports Degraded with reason
// strategy.ReasonClaimed and the error's message (the object and the
// owner), and the time refused does not count toward the progress
// deadline: the rollout waits until the claim is released.
func (r *Runner) refused(ctx context.Context, log logr.Logger, ev Event, s strategy.State, now time.Time, err error) (strategy.State, time.Duration, error) {
	log.Error(err, "another rollout holds the claim: nothing is written", "owner", r.Owner.String())
	ev.Err = err
	s.Observed.Error = err.Error()
	s.Observed.Claimed = true
	d := r.Strategy.Step(s, now)
	ev.Decision, ev.After = d, d.State
	r.notify(ctx, ev)
	return d.State, r.retryAfter(), err
}

// claimOrRefuse is the hook of a reconcile of a non-idle state: it takes
// the claims; done reports that the claim was refused or failed, and the
// reconcile ends with the returned state.
func (r *Runner) claimOrRefuse(ctx context.Context, log logr.Logger, ev Event, s strategy.State, now time.Time) (done bool, next strategy.State, requeue time.Duration, err error) {
	cerr := r.claim(ctx)
	switch {
	case cerr == nil:
		return false, s, 0, nil
	case errors.Is(cerr, ErrClaimed):
		next, requeue, err = r.refused(ctx, log, ev, s, now, cerr)
	default:
		next, requeue, err = r.failed(ctx, log, ev, s, s.FailingSince, now, cerr)
	}
	return true, next, requeue, err
}

// Release removes r.Owner's claims from every adapter that is a Claimer:
// call it when the rollout's owner is deleted (an operator's finalizer),
// so that another rollout may take the objects over. An adapter whose
// object is gone (ErrNotFound) counts as released. Every adapter is asked;
// the errors are joined, each an *AdapterError. Without an Owner it does
// nothing.
func (r *Runner) Release(ctx context.Context) error {
	if r.Owner.IsZero() {
		return nil
	}
	var errs []error
	for _, c := range r.claimers() {
		if err := c.c.Release(ctx, r.Owner); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, &AdapterError{Adapter: c.name, Op: "release the claim", Err: err})
		}
	}
	return errors.Join(errs...)
}
