package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/internal/conflict"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// BoundsAnnotation holds, on a HorizontalPodAutoscaler whose bounds a
// Setter moved, the bounds it had before, as JSON:
// {"minReplicas":2,"maxReplicas":20} (minReplicas absent when it was
// unset). It is written once, with the first bounds the Setter sets, and
// removed when the Setter puts those bounds back (at capacity 0 and in the
// steady state), so a restarted controller restores the same bounds. While
// it is present, spec.minReplicas and spec.maxReplicas are upshift's.
const BoundsAnnotation = "upshift.dev/hpa-bounds"

// AutoscaleConfig names the HorizontalPodAutoscalers of the two sides for
// Autoscale. The zero value finds each side's among the namespace's
// HorizontalPodAutoscalers by its spec.scaleTargetRef.
type AutoscaleConfig struct {
	// A and B name the HorizontalPodAutoscaler of side A's and side B's
	// workload; "" finds it by spec.scaleTargetRef (kind, group and name of
	// the workload), which needs list on horizontalpodautoscalers. A
	// Setter built by ForScalable knows its workload's resource, not its
	// kind, so its HorizontalPodAutoscaler must be named.
	A, B string
}

// AutoscalerError is a configuration of HorizontalPodAutoscalers that the
// Setters cannot follow: a side with no HorizontalPodAutoscaler, two of
// them on one workload, one that targets another workload, or a
// BoundsAnnotation that does not parse. It matches ErrInvalid; a Setter
// returns it marked rollout.Permanent.
type AutoscalerError struct {
	// Workload is the side's workload, "Deployment <namespace>/<name>".
	Workload string
	// HPA names the HorizontalPodAutoscalers concerned, "" for none.
	HPA string
	// Field is the field at fault: "spec.scaleTargetRef" of the
	// HorizontalPodAutoscalers, a field of AutoscaleConfig, or
	// "metadata.annotations[upshift.dev/hpa-bounds]".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *AutoscalerError) Error() string {
	hpa := ""
	if e.HPA != "" {
		hpa = " (HorizontalPodAutoscaler " + e.HPA + ")"
	}
	return fmt.Sprintf("replicas: %s%s: %s: %s", e.Workload, hpa, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *AutoscalerError) Is(target error) bool { return target == ErrInvalid }

// Autoscale makes a and b, the Setters of a rollout's two sides, follow the
// HorizontalPodAutoscaler (autoscaling/v2) of each side instead of
// fighting it (an HPA writes spec.replicas through /scale too). cs reads
// and updates the HorizontalPodAutoscalers, whatever client the Setters use
// (AutoscaleClient takes a controller-runtime client). Call it once, before
// the Setters are used; it makes no request. It fails, matching ErrInvalid,
// for a nil client or Setter, the same Setter twice, a Setter already
// linked, one HorizontalPodAutoscaler named for both sides, or a
// ForScalable Setter whose HorizontalPodAutoscaler is not named
// (*AutoscalerError).
//
//	a := replicas.ForDeployment(cs, replicas.Workload{Namespace: ns, Name: "web-a"})
//	b := replicas.ForDeployment(cs, replicas.Workload{Namespace: ns, Name: "web-b"})
//	err := replicas.Autoscale(cs, a, b, replicas.AutoscaleConfig{})
//
// Each workload keeps its own HPA, with the same per-pod metrics, found by
// spec.scaleTargetRef (or named in AutoscaleConfig); a side with none, or
// with two, fails with a Permanent *AutoscalerError. The full count is what
// the HPAs desire for the whole service; within a rollout it only grows. A
// side at capacity p gets ceil(full * p / 100) replicas through its HPA's
// bounds (minReplicas, and maxReplicas while it is lowered), so the HPA can
// still add replicas for more load; at capacity 0 and in the steady state
// the original bounds return, recorded meanwhile in BoundsAnnotation. The
// surge budget holds against the full count while the HPAs scale (but for
// one replica of rounding). RBAC: get, list and update on
// horizontalpodautoscalers, and watch with a cache-backed client. See
// docs/design/replicas.md for the full count, the bounds and Capacity.
func Autoscale(cs kubernetes.Interface, a, b *Setter, cfg AutoscaleConfig) error {
	if cs == nil {
		return fmt.Errorf("%w: Autoscale: the clientset is nil", ErrInvalid)
	}
	return link(clientsetHPAs{cs}, a, b, cfg)
}

// AutoscaleClient is Autoscale with a controller-runtime client (a
// manager's: a cache-backed client also needs get, list and watch on
// horizontalpodautoscalers for its informer).
func AutoscaleClient(c client.Client, a, b *Setter, cfg AutoscaleConfig) error {
	if c == nil {
		return fmt.Errorf("%w: AutoscaleClient: the client is nil", ErrInvalid)
	}
	return link(crHPAs{c}, a, b, cfg)
}

func link(api hpaAPI, a, b *Setter, cfg AutoscaleConfig) error {
	switch {
	case a == nil || b == nil || a.get == nil || b.get == nil:
		return fmt.Errorf("%w: Autoscale: both Setters are required, built by ForDeployment, ForStatefulSet, ForScalable or ForClient", ErrInvalid)
	case a == b:
		return fmt.Errorf("%w: Autoscale: %s is given for both sides", ErrInvalid, a.ref)
	case a.auto != nil || b.auto != nil:
		return fmt.Errorf("%w: Autoscale: a Setter is already linked to its HorizontalPodAutoscaler", ErrInvalid)
	case cfg.A != "" && cfg.A == cfg.B && a.ns == b.ns:
		return &AutoscalerError{Workload: b.ref, HPA: cfg.B, Field: "AutoscaleConfig.B",
			Reason: "the HorizontalPodAutoscaler of side A: each side needs its own"}
	}
	for _, side := range []struct {
		s     *Setter
		name  string
		field string
	}{{a, cfg.A, "AutoscaleConfig.A"}, {b, cfg.B, "AutoscaleConfig.B"}} {
		if side.name == "" && side.s.kind == "" {
			return &AutoscalerError{Workload: side.s.ref, Field: side.field,
				Reason: "a Setter built by ForScalable knows no kind to match a scaleTargetRef: name its HorizontalPodAutoscaler"}
		}
	}
	sh := &autoscale{api: api}
	sh.a = &autoSide{shared: sh, s: a, named: cfg.A}
	sh.b = &autoSide{shared: sh, s: b, named: cfg.B}
	a.auto, b.auto = sh.a, sh.b
	return nil
}

// hpaAPI reads and writes HorizontalPodAutoscalers.
type hpaAPI interface {
	get(ctx context.Context, ns, name string) (*autoscalingv2.HorizontalPodAutoscaler, error)
	list(ctx context.Context, ns string) ([]autoscalingv2.HorizontalPodAutoscaler, error)
	update(ctx context.Context, h *autoscalingv2.HorizontalPodAutoscaler) error
}

type clientsetHPAs struct{ cs kubernetes.Interface }

func (c clientsetHPAs) get(ctx context.Context, ns, name string) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	return c.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
}

func (c clientsetHPAs) list(ctx context.Context, ns string) ([]autoscalingv2.HorizontalPodAutoscaler, error) {
	l, err := c.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c clientsetHPAs) update(ctx context.Context, h *autoscalingv2.HorizontalPodAutoscaler) error {
	_, err := c.cs.AutoscalingV2().HorizontalPodAutoscalers(h.Namespace).Update(ctx, h, metav1.UpdateOptions{})
	return err
}

type crHPAs struct{ c client.Client }

func (c crHPAs) get(ctx context.Context, ns, name string) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	h := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := c.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, h); err != nil {
		return nil, err
	}
	return h, nil
}

func (c crHPAs) list(ctx context.Context, ns string) ([]autoscalingv2.HorizontalPodAutoscaler, error) {
	l := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := c.c.List(ctx, l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c crHPAs) update(ctx context.Context, h *autoscalingv2.HorizontalPodAutoscaler) error {
	return c.c.Update(ctx, h)
}

// autoscale is what the two sides' Setters share: the full count is
// decided from both sides.
type autoscale struct {
	api  hpaAPI
	a, b *autoSide
}

// autoSide is one side's link to its HorizontalPodAutoscaler. Safe for
// concurrent use.
type autoSide struct {
	shared *autoscale
	s      *Setter
	named  string // AutoscaleConfig's name, "" to find it
	mu     sync.Mutex
	found  string // the name found by scaleTargetRef
}

// bounds are a HorizontalPodAutoscaler's spec.minReplicas and
// spec.maxReplicas, as BoundsAnnotation records them.
type bounds struct {
	Min *int32 `json:"minReplicas,omitempty"`
	Max int32  `json:"maxReplicas"`
}

func (d *autoSide) errorf(hpa, field, format string, args ...any) error {
	return rollout.Permanent(&AutoscalerError{Workload: d.s.ref, HPA: hpa, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// targets reports whether h's scaleTargetRef is the side's workload.
func (d *autoSide) targets(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	ref := h.Spec.ScaleTargetRef
	if ref.Name != d.s.name {
		return false
	}
	if d.s.kind == "" { // ForScalable: the name is all it knows
		return true
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && ref.Kind == d.s.kind && gv.Group == d.s.group
}

// hpa reads the side's HorizontalPodAutoscaler: the one named, or the one
// whose scaleTargetRef is the workload (found once, then read by name).
func (d *autoSide) hpa(ctx context.Context) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	api, ns := d.shared.api, d.s.ns
	d.mu.Lock()
	name := d.found
	d.mu.Unlock()
	if d.named != "" {
		name = d.named
	}
	if name != "" {
		h, err := api.get(ctx, ns, name)
		switch {
		case err == nil && d.targets(h):
			return h, nil
		case err == nil && d.named != "":
			ref := h.Spec.ScaleTargetRef
			return nil, d.errorf(name, "spec.scaleTargetRef", "targets %s %s (%s), not the side's workload", ref.Kind, ref.Name, ref.APIVersion)
		case err != nil && (d.named != "" || !apierrors.IsNotFound(err)):
			return nil, d.s.wrap(err)
		}
		// The one found earlier is gone or targets another workload now.
		d.mu.Lock()
		d.found = ""
		d.mu.Unlock()
	}
	all, err := api.list(ctx, ns)
	if err != nil {
		return nil, d.s.wrap(err)
	}
	var match []*autoscalingv2.HorizontalPodAutoscaler
	for i := range all {
		if d.targets(&all[i]) {
			match = append(match, &all[i])
		}
	}
	switch len(match) {
	case 0:
		return nil, d.errorf("", "spec.scaleTargetRef", "no HorizontalPodAutoscaler in namespace %s targets it: "+
			"with Autoscale each side needs its own (a copy of the other side's, scaleTargetRef.name set to this workload)", ns)
	case 1:
		d.mu.Lock()
		d.found = match[0].Name
		d.mu.Unlock()
		return match[0], nil
	}
	names := make([]string, len(match))
	for i, h := range match {
		names[i] = h.Name
	}
	return nil, d.errorf(strings.Join(names, ", "), "spec.scaleTargetRef",
		"%d HorizontalPodAutoscalers target it: keep one", len(match))
}

// original returns the bounds h had before upshift moved them, and whether
// upshift moved them (BoundsAnnotation is present).
func (d *autoSide) original(h *autoscalingv2.HorizontalPodAutoscaler) (bounds, bool, error) {
	v, ok := h.Annotations[BoundsAnnotation]
	if !ok {
		return bounds{Min: h.Spec.MinReplicas, Max: h.Spec.MaxReplicas}, false, nil
	}
	var b bounds
	if err := json.Unmarshal([]byte(v), &b); err != nil || b.Max < 1 || b.Min != nil && (*b.Min < 0 || *b.Min > b.Max) {
		return bounds{}, true, d.errorf(h.Name, "metadata.annotations["+BoundsAnnotation+"]",
			"%q is not the bounds upshift recorded ({\"minReplicas\":n,\"maxReplicas\":m}, 0 <= n <= m, m >= 1)", v)
	}
	return b, true, nil
}

// changeHPA reads the HorizontalPodAutoscaler and calls fn to change it,
// writing it when fn reports a change; again from a fresh read after a
// write conflict (the HPA controller writes its status).
func (d *autoSide) changeHPA(ctx context.Context, fn func(h *autoscalingv2.HorizontalPodAutoscaler) (bool, error)) error {
	retries := d.s.MaxConflictRetries
	if retries == 0 {
		retries = 5
	}
	return conflict.Retry(ctx, retries, func() error {
		h, err := d.hpa(ctx)
		if err != nil {
			return err
		}
		changed, err := fn(h)
		if err != nil || !changed {
			return err
		}
		return d.s.wrap(d.shared.api.update(ctx, h))
	})
}

// pin sets the HorizontalPodAutoscaler's bounds to lo..hi, recording the
// original bounds first.
func (d *autoSide) pin(ctx context.Context, lo, hi int32) error {
	return d.changeHPA(ctx, func(h *autoscalingv2.HorizontalPodAutoscaler) (bool, error) {
		orig, moved, err := d.original(h)
		if err != nil {
			return false, err
		}
		if moved && h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == lo && h.Spec.MaxReplicas == hi {
			return false, nil
		}
		if !moved {
			v, err := json.Marshal(orig)
			if err != nil {
				return false, err
			}
			if h.Annotations == nil {
				h.Annotations = map[string]string{}
			}
			h.Annotations[BoundsAnnotation] = string(v)
		}
		h.Spec.MinReplicas, h.Spec.MaxReplicas = &lo, hi
		return true, nil
	})
}

// restore puts the original bounds back and removes BoundsAnnotation.
func (d *autoSide) restore(ctx context.Context) error {
	return d.changeHPA(ctx, func(h *autoscalingv2.HorizontalPodAutoscaler) (bool, error) {
		orig, moved, err := d.original(h)
		if err != nil || !moved {
			return false, err
		}
		h.Spec.MinReplicas, h.Spec.MaxReplicas = orig.Min, orig.Max
		delete(h.Annotations, BoundsAnnotation)
		return true, nil
	})
}

// setCapacity is Setter.SetCapacity on a side with a HorizontalPodAutoscaler.
func (d *autoSide) setCapacity(ctx context.Context, r rollout.CapacityRequest) error {
	s := d.s
	switch {
	case r.Percent == 0:
		// The workload first: the HPA controller does not scale a
		// workload at 0 replicas, so then its bounds can go back.
		if err := s.update(ctx, func(w *liveWorkload) error { return d.record(ctx, w, 0, "0", 0) }); err != nil {
			return err
		}
		if err := d.restore(ctx); err != nil {
			return err
		}
		// The other side, at 100 and now alone (an abort, a walk back:
		// no steady state is asked of the stable side), carries the
		// service: its HPA owns the count again.
		o := d.shared.a
		if o == d {
			o = d.shared.b
		}
		ow, err := o.s.get(ctx)
		if err != nil {
			return o.s.wrap(err)
		}
		if p, ok := percentMark(ow); !ok || p != 100 || ow.replicas == 0 {
			return nil
		}
		return o.release(ctx)
	case r.Steady:
		w, err := s.get(ctx)
		if err != nil {
			return s.wrap(err)
		}
		if w.replicas == 0 { // the HPA never starts a workload at 0 replicas
			if err := d.setShare(ctx, 100); err != nil {
				return err
			}
		}
		return d.release(ctx)
	}
	return d.setShare(ctx, r.Percent)
}

// release puts the HPA's original bounds back and records the steady state
// on the workload: the HPA owns the count.
func (d *autoSide) release(ctx context.Context) error {
	if err := d.restore(ctx); err != nil {
		return err
	}
	return d.s.update(ctx, func(w *liveWorkload) error { return d.record(ctx, w, -1, "steady", 0) })
}

// setShare gives the side p percent (1..100) of the full count: the
// HorizontalPodAutoscaler's bounds first, then the workload's records, and
// its replicas only when it leaves 0.
func (d *autoSide) setShare(ctx context.Context, p int32) error {
	s := d.s
	full, err := d.shared.full(ctx, d)
	if err != nil {
		return err
	}
	want := Replicas(full, p)
	w, err := s.get(ctx)
	if err != nil {
		return s.wrap(err)
	}
	h, err := d.hpa(ctx)
	if err != nil {
		return err
	}
	orig, _, err := d.original(h)
	if err != nil {
		return err
	}
	// Not lowered: the HPA may add replicas for more load, up to its own
	// maximum's share; they raise the full count.
	open := max(want, Replicas(orig.Max, p))
	hi := want
	switch {
	case h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == want && (h.Spec.MaxReplicas == want || h.Spec.MaxReplicas == open):
		hi = h.Spec.MaxReplicas // in place: asked again, nothing changes
	case w.replicas <= want:
		hi = open
	}
	if err := d.pin(ctx, want, hi); err != nil {
		return err
	}
	return s.update(ctx, func(w *liveWorkload) error {
		n := int32(-1)
		if w.replicas == 0 {
			n = want
		}
		return d.record(ctx, w, n, strconv.Itoa(int(p)), full)
	})
}

// record writes the workload's CapacityAnnotation (mark) and the full count
// it was set for (none when full is 0), and its replicas when n >= 0; it
// writes nothing when all is in place.
func (d *autoSide) record(ctx context.Context, w *liveWorkload, n int32, mark string, full int32) error {
	fullMark := ""
	if full > 0 {
		fullMark = strconv.Itoa(int(full))
	}
	if n < 0 || n == w.replicas {
		if w.meta.Annotations[CapacityAnnotation] == mark && w.meta.Annotations[fullAnnotation] == fullMark {
			return nil
		}
		n = w.replicas // written back as read: a write the HPA made since conflicts
	}
	if w.meta.Annotations == nil {
		w.meta.Annotations = map[string]string{}
	}
	w.meta.Annotations[CapacityAnnotation] = mark
	if fullMark == "" {
		delete(w.meta.Annotations, fullAnnotation)
	} else {
		w.meta.Annotations[fullAnnotation] = fullMark
	}
	w.setReplica(n)
	return d.s.wrap(w.update(ctx))
}

// percentMark is the numeric CapacityAnnotation of w, if it has one.
func percentMark(w *liveWorkload) (int32, bool) {
	p, err := strconv.Atoi(w.meta.Annotations[CapacityAnnotation])
	if err != nil || p < 0 || p > 100 {
		return 0, false
	}
	return int32(p), true
}

// recordedFull is the full count w's capacity was last set for, 0 if none.
func recordedFull(w *liveWorkload) int32 {
	n, err := strconv.Atoi(w.meta.Annotations[fullAnnotation])
	if err != nil || n <= 0 {
		return 0
	}
	return int32(n)
}

// fullFor returns the smallest full count whose share p (1..100) is at
// least n replicas: the full count a HorizontalPodAutoscaler that scaled a
// side at capacity p to n replicas asks for. It is 0 when n or p is not
// positive.
func fullFor(n, p int32) int32 {
	if n <= 0 || p <= 0 {
		return 0
	}
	return (n-1)*100/p + 1
}

// desired is the count h's controller asked for at its last sync, 0 when
// it has not seen h's current spec.
func desired(h *autoscalingv2.HorizontalPodAutoscaler) int32 {
	if h.Status.ObservedGeneration == nil || *h.Status.ObservedGeneration < h.Generation {
		return 0
	}
	return h.Status.DesiredReplicas
}

// full decides the full count from both sides: the largest of what each
// side that has replicas asks for (see Autoscale), or the Setter's own full count when neither has.
func (a *autoscale) full(ctx context.Context, asking *autoSide) (int32, error) {
	var f int32
	for _, d := range []*autoSide{a.a, a.b} {
		w, err := d.s.get(ctx)
		if err != nil {
			return 0, d.s.wrap(err)
		}
		if w.replicas == 0 {
			continue
		}
		h, err := d.hpa(ctx)
		if err != nil {
			return 0, err
		}
		f = max(f, d.asks(w, h))
	}
	if f == 0 {
		f = asking.s.full
	}
	if f <= 0 {
		return 0, rollout.Permanent(fmt.Errorf("%w: %s: neither side has replicas for its HorizontalPodAutoscaler to follow: give the full count", ErrInvalid, asking.s.ref))
	}
	return f, nil
}

// asks is the full count side d asks for: while upshift holds its bounds
// at a share p of a recorded full count, that count, raised when the HPA
// scaled the side above its share (fullFor); otherwise what the HPA
// desires, or the workload's replicas.
func (d *autoSide) asks(w *liveWorkload, h *autoscalingv2.HorizontalPodAutoscaler) int32 {
	want := desired(h)
	p, numeric := percentMark(w)
	_, moved := h.Annotations[BoundsAnnotation]
	if moved && numeric && p > 0 {
		rec := recordedFull(w)
		if rec == 0 {
			return fullFor(min(w.replicas, h.Spec.MaxReplicas), p)
		}
		// Only bounds set for this record count: a write of new bounds
		// whose record did not follow (a stop in between) raises nothing.
		if h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == Replicas(rec, p) && want > 0 {
			return max(rec, fullFor(min(want, h.Spec.MaxReplicas), p))
		}
		return rec
	}
	if want > 0 {
		return want
	}
	return w.replicas
}

// capacityOf is Setter.Capacity of w on a side with a HorizontalPodAutoscaler.
func (d *autoSide) capacityOf(ctx context.Context, w *liveWorkload) (rollout.CapacityStatus, error) {
	h, err := rollout.ReadOnce(ctx, d, d.hpa)
	if err != nil {
		return rollout.CapacityStatus{}, err
	}
	current := w.status.observedGeneration >= w.meta.Generation
	available := w.status.available
	if !current {
		available = min(available, w.status.updated)
	}
	var st rollout.CapacityStatus
	st.Settled = current && w.status.revisionsMatch && w.status.replicas == w.replicas &&
		w.status.updated == w.replicas && w.status.available == w.replicas
	if w.status.failing {
		st.Health, st.HealthMessage = strategy.HealthUnhealthy, w.status.failMessage
	}
	share := func(n, full int32) int32 {
		if full <= 0 {
			return 0
		}
		return min(100, n*100/full)
	}
	p, numeric := percentMark(w)
	switch {
	case !numeric: // "steady", or never set
		// The HPA owns the count: ready against the count it scaled
		// from, so that a scale-up does not read as readiness lost.
		full := w.replicas
		if c := h.Status.CurrentReplicas; c > 0 && c < full {
			full = c
		}
		st.Steady = w.meta.Annotations[CapacityAnnotation] == "steady"
		if w.replicas > 0 || st.Steady {
			st.Capacity = 100
		}
		st.Ready = share(available, full)
		return st, nil
	case p == 0:
		full := max(recordedFull(w), d.s.full, w.replicas, 1)
		st.Capacity, st.Ready = share(w.replicas, full), share(available, full)
		return st, nil
	}
	full := recordedFull(w)
	if full == 0 {
		full = max(d.s.full, fullFor(w.replicas, p), 1)
	}
	want := Replicas(full, p)
	inPlace := h.Spec.MinReplicas != nil && *h.Spec.MinReplicas == want &&
		w.replicas >= want && w.replicas <= h.Spec.MaxReplicas
	st.Capacity, st.Ready = share(w.replicas, full), share(available, full)
	if inPlace {
		// Replicas the HPA added above the share follow load that the
		// full count takes up at the next capacity change.
		st.Capacity, st.Ready = p, min(st.Ready, p)
	}
	st.Settled = st.Settled && inPlace
	return st, nil
}
