package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upshift-dev/upshift/gateway"
	rl "github.com/upshift-dev/upshift/rollout"
)

// workloadClaimAnnotation is the claim serve/replicas records on a
// workload (its ClaimAnnotation); a route carries one claim per rule, each
// under gateway.ClaimAnnotationPrefix.
const workloadClaimAnnotation = "upshift.dev/claim"

// isClaimAnnotation reports whether an annotation key is a claim.
func isClaimAnnotation(key string) bool {
	return key == workloadClaimAnnotation || strings.HasPrefix(key, gateway.ClaimAnnotationPrefix)
}

// claimResources are the resources whose objects the adapters claim and
// that claims lists: the workloads of serve/replicas and the routes of the
// gateway Router.
var claimResources = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: gatewayGroup, Version: "v1", Resource: "httproutes"},
	{Group: gatewayGroup, Version: "v1", Resource: "grpcroutes"},
}

func claimable(gvr schema.GroupVersionResource) bool {
	return slices.ContainsFunc(claimResources, func(r schema.GroupVersionResource) bool { return r.GroupResource() == gvr.GroupResource() })
}

// claimRecord is the value of a claim annotation: the rl.Owner, and
// on a route the rule's two backends.
type claimRecord struct {
	rl.Owner
	Backends string `json:"backends,omitempty"`
}

// holderState is what the plugin found of a claim's holder.
type holderState int

const (
	holderUnknown holderState = iota // it cannot tell
	holderLive                       // the holder exists, with its UID
	holderGone                       // no object of that kind, name and UID
)

// claimRow is one claim (or one object a rollout names that nobody
// claims: key "").
type claimRow struct {
	gvr      schema.GroupVersionResource
	obj      rl.ObjectRef
	rv       string
	key      string
	holder   rl.Owner
	backends string
	// bad is the raw value of an annotation that is not a claim.
	bad   string
	state holderState
	// why says how the holder was found live, gone or not told.
	why string
}

// claimsOf returns the claims u carries, sorted by key.
func claimsOf(gvr schema.GroupVersionResource, u *unstructured.Unstructured) []claimRow {
	obj := rl.ObjectRef{Group: gvr.Group, Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
	var out []claimRow
	for k, v := range u.GetAnnotations() {
		if !isClaimAnnotation(k) {
			continue
		}
		row := claimRow{gvr: gvr, obj: obj, rv: u.GetResourceVersion(), key: k}
		var rec claimRecord
		if err := json.Unmarshal([]byte(v), &rec); err != nil || rec.Name == "" || rec.UID == "" {
			row.bad = v
		} else {
			row.holder, row.backends = rec.Owner, rec.Backends
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b claimRow) int { return strings.Compare(a.key, b.key) })
	return out
}

// claimsFor finds the claims on t's object and on the objects of its
// rollout in its namespace:
//
//   - the claims t's object carries itself (a route, a workload);
//   - every Deployment, StatefulSet, HTTPRoute and GRPCRoute claimed by an
//     owner of t's kind, namespace and name, whatever its UID (this
//     rollout object, or one it replaced: a stale claim);
//   - for a rollout object that is neither a workload nor a route (an
//     operator's CRD), those whose name its spec holds as a value (the
//     Release's spec.a.deployment, spec.route.name), claimed or not;
//   - for a claimed object (a route, a workload), the others claimed by a
//     holder of its claims: the rest of that holder's rollout.
func (t *target) claimsFor(ctx context.Context, o *options) ([]claimRow, error) {
	u, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	rows := claimsOf(t.gvr, u)
	holders := map[types.UID]bool{}
	for _, r := range rows {
		holders[r.holder.UID] = true
	}
	named := map[string]bool{}
	if !claimable(t.gvr) {
		if spec, ok := u.Object["spec"]; ok {
			specNames(spec, named)
		}
	}
	if u.GetNamespace() != "" {
		for _, gvr := range claimResources {
			list, err := t.dc.Resource(gvr).Namespace(u.GetNamespace()).List(ctx, metav1.ListOptions{})
			switch {
			case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
				continue // the resource is not served (no Gateway API)
			case err != nil:
				fmt.Fprintf(o.errOut, "warning: listing %s: %v\n", gvr.GroupResource(), err)
				continue
			}
			for i := range list.Items {
				x := &list.Items[i]
				if x.GetKind() == "" {
					x.SetKind(strings.TrimSuffix(list.GetKind(), "List"))
				}
				if x.GetName() == t.name && claimable(t.gvr) && gvr.GroupResource() == t.gvr.GroupResource() {
					continue
				}
				claims := claimsOf(gvr, x)
				mine := slices.ContainsFunc(claims, func(c claimRow) bool {
					h := c.holder
					return h.Kind == t.kind && h.Name == t.name && h.Namespace == t.namespace ||
						claimable(t.gvr) && holders[h.UID] && h.UID != ""
				})
				switch {
				case mine || named[x.GetName()] && len(claims) > 0:
					rows = append(rows, claims...)
				case named[x.GetName()]:
					rows = append(rows, claimRow{gvr: gvr, obj: rl.ObjectRef{Group: gvr.Group, Kind: x.GetKind(),
						Namespace: x.GetNamespace(), Name: x.GetName()}, rv: x.GetResourceVersion()})
				}
			}
		}
	}
	gone := map[rl.Owner]claimRow{}
	for i := range rows {
		r := &rows[i]
		if r.key == "" || r.bad != "" {
			continue
		}
		if seen, ok := gone[r.holder]; ok {
			r.state, r.why = seen.state, seen.why
			continue
		}
		r.state, r.why = t.holderState(ctx, r.holder)
		gone[r.holder] = *r
	}
	slices.SortStableFunc(rows, func(a, b claimRow) int {
		return strings.Compare(a.obj.Arg()+" "+a.key, b.obj.Arg()+" "+b.key)
	})
	return rows, nil
}

// specNames adds to names every string of v (a spec) that can name an
// object.
func specNames(v any, names map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			specNames(e, names)
		}
	case []any:
		for _, e := range x {
			specNames(e, names)
		}
	case string:
		if len(validation.IsDNS1123Subdomain(x)) == 0 {
			names[x] = true
		}
	}
}

// holderState looks the holder of a claim up by kind, namespace and name:
// live when it exists with the claim's UID, gone when nothing of that kind
// has that name and UID (deleted, or deleted and re-created), unknown when
// the plugin cannot tell (no kind, a kind the server does not serve, an
// error).
func (t *target) holderState(ctx context.Context, h rl.Owner) (holderState, string) {
	if h.Kind == "" {
		return holderUnknown, "the claim names no kind to look its holder up by"
	}
	gvrs, err := t.mapper.ResourcesFor(schema.GroupVersionResource{Resource: strings.ToLower(h.Kind)})
	if err != nil || len(gvrs) == 0 {
		return holderUnknown, fmt.Sprintf("the server serves no kind %s (a standalone program's owner?)", h.Kind)
	}
	var notes []string
	for _, gvr := range gvrs {
		mapping, err := t.mapper.RESTMapping(schema.GroupKind{Group: gvr.Group, Kind: h.Kind}, gvr.Version)
		if err != nil {
			continue // another kind whose resource has that name
		}
		ri := t.dc.Resource(gvr)
		var x *unstructured.Unstructured
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if h.Namespace == "" {
				return holderUnknown, fmt.Sprintf("the claim names no namespace for the %s %s", h.Kind, h.Name)
			}
			x, err = ri.Namespace(h.Namespace).Get(ctx, h.Name, metav1.GetOptions{})
		} else {
			x, err = ri.Get(ctx, h.Name, metav1.GetOptions{})
		}
		switch {
		case apierrors.IsNotFound(err):
			notes = append(notes, fmt.Sprintf("no %s %s", gvr.GroupResource(), ownerName(h)))
		case err != nil:
			return holderUnknown, fmt.Sprintf("looking %s %s up: %v", h.Kind, ownerName(h), err)
		case x.GetUID() == h.UID:
			return holderLive, fmt.Sprintf("%s %s exists with uid %s", h.Kind, ownerName(h), h.UID)
		default:
			notes = append(notes, fmt.Sprintf("%s %s is another object now (uid %s)", h.Kind, ownerName(h), x.GetUID()))
		}
	}
	if len(notes) == 0 {
		return holderUnknown, fmt.Sprintf("the server serves no kind %s", h.Kind)
	}
	return holderGone, strings.Join(notes, "; ")
}

func ownerName(h rl.Owner) string {
	if h.Namespace == "" {
		return h.Name
	}
	return h.Namespace + "/" + h.Name
}

func (s holderState) String() string {
	switch s {
	case holderLive:
		return "live"
	case holderGone:
		return "gone"
	}
	return "unknown"
}

func newClaims(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "claims KIND/NAME",
		Short: "Show who holds the claims on a rollout's objects",
		Long: `Show who holds the claims on the objects a rollout moves: its route rules
(annotations upshift.dev/claim-<hash>, one per rule) and its Deployments and
StatefulSets (annotation upshift.dev/claim), and whether each holder still
exists.

KIND/NAME is the rollout object (release/web: its own objects are those whose
claim names it, by kind, namespace and name, and those its spec names), a
route (httproute/web: its claims, and the workloads the same holders claim)
or one claimed object (deployment/web-b: its claims, and the other objects
their holders claim).

A claim whose holder is gone (deleted without releasing it, or deleted and
re-created with another UID) blocks every other rollout of the object until
it is released: "claims release" removes it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := resolve(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			rows, err := t.claimsFor(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printClaims(o, t, rows)
		},
	}
	c.AddCommand(newClaimsRelease(o))
	return c
}

func printClaims(o *options, t *target, rows []claimRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(o.out, "no claims on %s or on the objects of its rollout\n", t)
		return err
	}
	tw := tabwriter.NewWriter(o.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OBJECT\tCLAIM\tHOLDER\tHOLDER UID\tHOLDER IS")
	stale := map[types.UID]rl.Owner{}
	for _, r := range rows {
		arg := r.obj.Arg()
		switch {
		case r.key == "":
			fmt.Fprintf(tw, "%s\t-\t-\t-\tunclaimed\n", arg)
		case r.bad != "":
			fmt.Fprintf(tw, "%s\t%s\t-\t-\tnot a claim: %q\n", arg, r.key, r.bad)
		default:
			key := r.key
			if r.backends != "" {
				key += " (" + r.backends + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s: %s\n", arg, key, r.holder.Kind, ownerName(r.holder), r.holder.UID, r.state, r.why)
			if r.state == holderGone {
				stale[r.holder.UID] = r.holder
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	uids := make([]types.UID, 0, len(stale))
	for u := range stale {
		uids = append(uids, u)
	}
	slices.Sort(uids)
	for _, u := range uids {
		h := stale[u]
		fmt.Fprintf(o.out, "\nThe holder %s %s (uid %s) is gone; release its claims with:\n  kubectl upshift claims release %s%s --holder %s\n",
			h.Kind, ownerName(h), u, t.arg(), t.nsFlag(), u)
	}
	return nil
}

// arg is t as a kubectl argument, its type qualified by its group.
func (t *target) arg() string {
	return rl.ObjectRef{Group: t.gvr.Group, Kind: t.kind, Name: t.name}.Arg()
}

func (t *target) nsFlag() string {
	if t.namespace == "" {
		return ""
	}
	return " -n " + t.namespace
}

func newClaimsRelease(o *options) *cobra.Command {
	var (
		holder string
		force  bool
	)
	c := &cobra.Command{
		Use:   "release KIND/NAME --holder UID",
		Short: "Release the claims a gone holder left on a rollout's objects",
		Long: `Release the claims that the holder with UID --holder left on KIND/NAME and
on the objects of its rollout (the objects "claims KIND/NAME" lists).

Each claim is removed only while that holder still holds it (the write is
conditional on the object's resourceVersion), and only when the holder is
gone: no object of its kind, namespace and name with that UID. A live
holder's claims, or those of a holder the plugin cannot look up (a
standalone program), are left in place unless --force: a live holder whose
claim is released takes it again at its next reconcile, unless another
rollout has taken it meanwhile, and the two then fight over the objects.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if holder == "" {
				return withCode(exitError, errors.New("--holder: required: the UID of the claim's holder, as `kubectl upshift claims KIND/NAME` shows it"))
			}
			t, err := resolve(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			return releaseClaims(cmd.Context(), o, t, types.UID(holder), force)
		},
	}
	c.Flags().StringVar(&holder, "holder", "", "the UID of the holder whose claims are released (required)")
	c.Flags().BoolVar(&force, "force", false, "release the claims even of a holder that is live, or that cannot be looked up")
	return c
}

// errClaimHeld: a release refused because the holder is live or cannot be
// looked up.
var errClaimHeld = errors.New("not released")

func releaseClaims(ctx context.Context, o *options, t *target, holder types.UID, force bool) error {
	rows, err := t.claimsFor(ctx, o)
	if err != nil {
		return err
	}
	var sel []claimRow
	for _, r := range rows {
		if r.key != "" && r.bad == "" && r.holder.UID == holder {
			sel = append(sel, r)
		}
	}
	if len(sel) == 0 {
		return withCode(exitError, fmt.Errorf("%s: no claim held by uid %s on it or on the objects of its rollout (`kubectl upshift claims %s%s` lists them)",
			t, holder, t.arg(), t.nsFlag()))
	}
	held := slices.IndexFunc(sel, func(r claimRow) bool { return r.state != holderGone })
	if h := sel[max(held, 0)]; held >= 0 && !force {
		what := "is live"
		if h.state == holderUnknown {
			what = "cannot be looked up"
		}
		return withCode(exitError, fmt.Errorf("%w: the holder %s %s (uid %s) %s (%s); it holds %d claim(s) here; --force releases them anyway",
			errClaimHeld, h.holder.Kind, ownerName(h.holder), holder, what, h.why, len(sel)))
	}
	for _, r := range sel {
		if err := t.releaseOne(ctx, r); err != nil {
			return withCode(exitError, err)
		}
		note := r.state.String() + ": " + r.why
		if r.state != holderGone {
			note = "forced, the holder is " + note
		}
		fmt.Fprintf(o.out, "%s: released the claim %s of %s %s (uid %s; %s)\n", r.obj.Arg(), r.key, r.holder.Kind, ownerName(r.holder), holder, note)
	}
	return nil
}

// releaseOne removes the claim of r from its object, on condition that the
// object is still as read (its resourceVersion); after a conflict it reads
// again and goes on only while r's holder still holds the claim. The
// answer must lack the annotation.
func (t *target) releaseOne(ctx context.Context, r claimRow) error {
	ri := t.dc.Resource(r.gvr).Namespace(r.obj.Namespace)
	rv := r.rv
	for attempt := 0; ; attempt++ {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": rv,
			"annotations":     map[string]any{r.key: nil},
		}})
		if err != nil {
			return err
		}
		pctx, warns := collectWarnings(ctx)
		u, err := ri.Patch(pctx, r.obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			x, gerr := ri.Get(ctx, r.obj.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("%s: %w", r.obj.Arg(), gerr)
			}
			now := claimsOf(r.gvr, x)
			i := slices.IndexFunc(now, func(c claimRow) bool { return c.key == r.key })
			switch {
			case i < 0:
				return nil // released meanwhile
			case now[i].holder != r.holder:
				return fmt.Errorf("%s: the claim %s changed meanwhile (now %q): not released", r.obj.Arg(), r.key, x.GetAnnotations()[r.key])
			}
			rv = x.GetResourceVersion()
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: removing the annotation %s: %w", r.obj.Arg(), r.key, err)
		}
		if v, ok := u.GetAnnotations()[r.key]; ok {
			return fmt.Errorf("%s: the API server's answer still holds the annotation %s (%q): not released (server warnings: %q)", r.obj.Arg(), r.key, v, warns.all())
		}
		return nil
	}
}
