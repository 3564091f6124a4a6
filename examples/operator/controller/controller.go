// Package controller is the reconciler of the example operator: it drives
// one rollout.Runner per Release over the Release's two Deployments and
// its HTTPRoute, and keeps the rollout's state in the Release's status; a
// status that another writer changed (wiped, restored) is reconciled and
// adopted again, the operator's own writes are not (see ownstatus.go).
// The Release owns its rollout's claims on those objects; the finalizer
// Finalizer releases them when it is deleted (see finalizer.go).
//
// A Release owns no object in the sense of the garbage collector: the
// Deployments and the route it names are its user's, created before it and
// meant to outlive it (deleting a Release must never delete the
// application), so the operator sets no ownerReferences on them and creates
// none of its own. Deleting a Release, with any propagation policy, releases
// its claims and leaves the Deployments, their pods and the route's split
// as they are.
package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/rollout/analysis"
	"github.com/upshift-dev/upshift/rollout/analysis/prometheus"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// The operator's permissions, from which controller-gen generates
// config/rbac/role.yaml. Bind it with a RoleBinding in the namespace the
// operator manages (or a ClusterRoleBinding to manage all of them).
//
// +kubebuilder:rbac:groups=operator.upshift.dev,resources=releases,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=operator.upshift.dev,resources=releases/finalizers,verbs=update
// +kubebuilder:rbac:groups=operator.upshift.dev,resources=releases/status,verbs=get;update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=gateways;gatewayclasses,verbs=get
// +kubebuilder:rbac:groups=traefik.io,resources=traefikservices,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// Index keys of Releases by the objects they name.
const (
	indexDeployment = "spec.deployment"
	indexRoute      = "spec.route.name"
)

// ConditionInvalidSpec is the reason of the Degraded condition of a
// Release whose spec cannot be rolled out.
const ReasonInvalidSpec = "InvalidSpec"

// Reconciler reconciles Releases.
type Reconciler struct {
	// Client is the manager's client, which reads from its cache.
	Client client.Client
	// Reader reads from the API server (the manager's APIReader). A
	// Release is read from Client's cache, and from Reader only when the
	// cache may be older than the operator's last write of it (fresh.go):
	// its status holds the rollout's state, and a reconcile must never
	// start from a state older than the last one written. nil reads
	// everything through Client.
	Reader   client.Reader
	Recorder events.EventRecorder
	Metrics  *Metrics
	// Selector, when set, is the label selector of the Releases this
	// replica reconciles (its manager's cache holds only those): a
	// Release relabelled out of it since the cache saw it is left alone.
	// See main.go's -release-selector, to shard Releases across replicas.
	Selector labels.Selector
	// HopEvents records an Event for every hop applied, besides those of
	// phase changes, aborts, commands and errors. Off, a hop is recorded
	// in the status (rollout.desired, at the next write) and the metrics
	// only: an Event per hop is one more API write per hop.
	HopEvents bool
	// Clock is the source of time; nil is clock.Real.
	Clock clock.Clock
	// PeerNamespaces are the namespaces whose HTTPRoutes the gateway
	// Router lists to place header-route and sticky rules among other
	// routes on the same listener (gateway.Config.PeerNamespaces); nil
	// means all namespaces, which needs list on httproutes cluster-wide.
	PeerNamespaces []string

	mu      sync.Mutex
	runners map[types.NamespacedName]*cachedRunner
	// own is the status last written for each Release, so that the
	// watch tells the operator's writes from others' (ownstatus.go).
	own ownStatus
	// fresh and pending: what the operator's writes replaced, and the
	// newest state of each rollout between writes (fresh.go).
	fresh   fresh
	pending pendingStates
}

// cachedRunner is the Runner of one generation of a Release: the gateway
// Router remembers when it first saw the route accepted (the settle
// delay), so it lives as long as the spec does not change.
type cachedRunner struct {
	uid        types.UID
	generation int64
	runner     *rollout.Runner
	err        error
	release    *v1alpha1.Release // the object the Observer's events regard
	// meanings is what the revision identities mean, for the Deployers'
	// TemplateFunc: set from the status at every reconcile.
	meanings *meanings
}

// SetupWithManager registers the reconciler: it reconciles a Release when
// its spec changes, when its status changes by another writer than the
// operator (wiped, or restored from a backup: see ownstatus.go), and when
// one of its Deployments or its HTTPRoute changes (a Deployment's pods
// becoming ready, the gateway accepting the route), so the Runner is
// Watched and polls only at the poll interval.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.Release{}, indexDeployment, func(o client.Object) []string {
		rel := o.(*v1alpha1.Release)
		return []string{rel.Spec.A.Deployment, rel.Spec.B.Deployment}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.Release{}, indexRoute, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Release).Spec.Route.Name}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("release").
		// Spec changes (and creation, deletion) of the Release itself
		// need a reconcile, and so does a status that someone else
		// wrote (a wipe); the operator's own status writes do not.
		For(&v1alpha1.Release{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deleting,
			r.own.statusByOthers()))).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.releasesNaming(indexDeployment)),
			builder.WithPredicates(workloadChanged)).
		Watches(&gwv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.releasesNaming(indexRoute))).
		Complete(r)
}

// releasesNaming maps an object to the Releases whose spec names it.
func (r *Reconciler) releasesNaming(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		var list v1alpha1.ReleaseList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing the Releases of", "object", o.GetName())
			return nil
		}
		reqs := make([]ctrl.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	}
}

// Reconcile applies the spec's controls and revision to the rollout, lets
// the Runner take one step, and writes the status when something a person
// or a decision needs changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	var rel v1alpha1.Release
	if err := r.get(ctx, req.NamespacedName, &rel); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { r.Metrics.took(rel.Namespace, rel.Name, time.Since(start)) }()
	if !rel.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, &rel)
	}
	if err := r.addFinalizer(ctx, &rel); err != nil {
		return ctrl.Result{}, err
	}
	gen := r.runnerFor(&rel)
	if gen.err != nil {
		return ctrl.Result{}, r.invalid(ctx, &rel, gen.err)
	}
	runner, means := gen.runner, gen.meanings
	// The rollout moves revision identities (see revisions.go): the spec's
	// revision as its image template renders it.
	current := meaning(&rel.Spec)
	records := known(rel.Status.Revisions, current)
	means.set(records)
	// One instant for the spec's revision and control and the step: the
	// Runner's clock, so that a state stamped by a clock far ahead is
	// reported (ClockSkew) rather than obeyed.
	now := runner.Now()
	r.recordRetarget(&rel, current)
	stored := r.pending.state(&rel)
	state := stored.Retarget(current.Identity, now)
	state, applied := state.Control(rel.Spec.Control, now)
	for _, a := range applied {
		r.recordControl(&rel, a)
	}
	next, requeue, rerr := r.stepRunner(gen, stored).ReconcileAt(ctx, state, now)
	if rerr != nil {
		// The Runner's state already carries the error (Degraded,
		// counted toward the progress deadline) and requeue is the retry.
		log.FromContext(ctx).Info("reconcile failed; retrying", "error", rerr.Error(), "after", requeue)
	}
	status := v1alpha1.ReleaseStatus{
		ObservedGeneration: rel.Generation,
		Rollout:            next,
		Conditions:         mirror(rel.Status.Conditions, &next, current.Identity, rel.Generation, now),
		Revisions:          kept(records, current, &next),
	}
	summarize(&status, &rel.Spec)
	if !statusChanged(&rel.Status, &status) || deferrable(&rel.Status, &status) {
		// Nothing to write, or only a capacity hop's record: it goes
		// with the next write, and the next reconcile starts from it.
		r.pending.keep(&rel, &next)
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	written := rel.DeepCopy()
	written.Status = status
	r.own.wrote(written, &written.Status)
	if err := r.update(ctx, written, true); err != nil {
		// A conflict: someone changed the Release since it was read.
		// The state stays in memory while the stored status is the one
		// it follows (someone changed the spec); a hop already applied
		// is observed as such all the same.
		r.pending.keep(&rel, &next)
		return ctrl.Result{}, err
	}
	r.own.stored(written)
	r.pending.keep(written, &next)
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// statusChanged reports whether next must be written over prev: the
// rollout's state changed in anything but its volatile fields
// (strategy.Changed; the control requests it has seen included), or the
// conditions or the generation did. A rollout that waits writes nothing:
// the sides' weights and the message, like rollout.observed and
// rollout.message, are written with the next change.
func statusChanged(prev, next *v1alpha1.ReleaseStatus) bool {
	return strategy.Changed(&prev.Rollout, &next.Rollout) ||
		prev.ObservedGeneration != next.ObservedGeneration ||
		!reflect.DeepEqual(prev.Conditions, next.Conditions) ||
		!reflect.DeepEqual(prev.Revisions, next.Revisions) ||
		prev.Phase != next.Phase || prev.Step != next.Step
}

// mirror returns the status conditions: the rollout's, and Released, each
// with observedGeneration, the transition times of unchanged conditions
// kept from prev.
func mirror(prev []metav1.Condition, s *strategy.State, revision string, generation int64, now time.Time) []metav1.Condition {
	conds := make([]metav1.Condition, 0, len(s.Conditions)+1)
	for _, c := range s.Conditions {
		c.ObservedGeneration = generation
		conds = append(conds, c)
	}
	stable := s.StableRevision
	if stable == "" {
		// Adopted from a side whose template is no revision the operator
		// knows (installed on an application that already served).
		stable = "a revision the operator does not recognise"
	}
	released := metav1.Condition{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionFalse, Reason: string(s.Phase),
		Message: fmt.Sprintf("%s runs on the stable side; %s is asked for", stable, revision)}
	switch {
	case s.Unobserved:
		// A new Release, or one whose status was wiped: nothing is known
		// of the world before the Runner has observed and adopted it.
		released.Reason, released.Message = strategy.ReasonAdopting, revision+" is asked for; the route and the sides are not observed yet"
	case s.Phase == "":
		released.Reason = strategy.ReasonIdle
	}
	// Released only when observed so: an idle state is one adopted from an
	// observation (all traffic on a side running the revision), and a
	// rollout that succeeded or rolled back observed its end.
	if s.StableRevision == revision && !s.Unobserved && (s.Idle() || s.Phase == strategy.PhaseSucceeded || s.Phase == strategy.PhaseRolledBack) {
		released.Status, released.Message = metav1.ConditionTrue, revision+" runs on the stable side with all traffic"
	}
	released.ObservedGeneration = generation
	conds = append(conds, released)
	return keepTransitions(prev, conds, now)
}

// keepTransitions sets each condition's LastTransitionTime: prev's when
// its status is unchanged, now when it changed or is new.
func keepTransitions(prev, conds []metav1.Condition, now time.Time) []metav1.Condition {
	for i := range conds {
		if old := apimeta.FindStatusCondition(prev, conds[i].Type); old != nil && old.Status == conds[i].Status {
			conds[i].LastTransitionTime = old.LastTransitionTime
		} else if conds[i].LastTransitionTime.IsZero() || old != nil {
			conds[i].LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
		}
	}
	return conds
}

// invalid reports a spec that cannot be rolled out: Degraded with reason
// InvalidSpec and a warning event. Nothing is retried before the spec
// changes.
func (r *Reconciler) invalid(ctx context.Context, rel *v1alpha1.Release, err error) error {
	now := clock.OrReal(r.Clock).Now()
	conds := append([]metav1.Condition(nil), rel.Status.Conditions...)
	apimeta.SetStatusCondition(&conds, metav1.Condition{Type: strategy.ConditionDegraded, Status: metav1.ConditionTrue,
		Reason: ReasonInvalidSpec, Message: err.Error(), ObservedGeneration: rel.Generation})
	status := rel.Status
	status.Conditions, status.ObservedGeneration = keepTransitions(rel.Status.Conditions, conds, now), rel.Generation
	summarize(&status, &rel.Spec)
	if !statusChanged(&rel.Status, &status) {
		return nil
	}
	r.Recorder.Eventf(rel, nil, corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%v", err)
	rel.Status = status
	r.own.wrote(rel, &rel.Status)
	if err := r.update(ctx, rel, true); err != nil {
		return err
	}
	r.own.stored(rel)
	r.pending.forget(client.ObjectKeyFromObject(rel))
	return nil
}

// runnerFor returns the Runner of the Release's current generation (or
// why its spec builds none), with what its Deployers' TemplateFunc knows
// of the revision identities. Nothing of it changes once built.
func (r *Reconciler) runnerFor(rel *v1alpha1.Release) *cachedRunner {
	key := client.ObjectKeyFromObject(rel)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.runners[key]; c != nil && c.uid == rel.UID && c.generation == rel.Generation {
		return c
	}
	c := &cachedRunner{uid: rel.UID, generation: rel.Generation, release: rel.DeepCopy(), meanings: &meanings{}}
	c.runner, c.err = r.newRunner(c.release, c.meanings)
	if r.runners == nil {
		r.runners = map[types.NamespacedName]*cachedRunner{}
	}
	r.runners[key] = c
	return c
}

// stepRunner is the Runner of one reconcile: the generation's, with the
// Observer of that reconcile, which compares with stored, the state as
// stored in the status (see observer).
func (r *Reconciler) stepRunner(gen *cachedRunner, stored strategy.State) *rollout.Runner {
	step := *gen.runner
	step.Observer = r.observer(gen.release, stored)
	return &step
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.runners, key)
	r.mu.Unlock()
	r.own.forget(key)
	r.fresh.forget(key)
	r.pending.forget(key)
	r.Metrics.forget(key.Namespace, key.Name)
}

// newRunner builds the Runner of a Release: the gateway Router over the
// route, and a Setter and a Deployer per side.
func (r *Reconciler) newRunner(rel *v1alpha1.Release, means *meanings) (*rollout.Runner, error) {
	strat := rel.Spec.Strategy.Get()
	if strat == nil {
		return nil, errors.New("spec.strategy: set one of incremental, canary and blueGreen")
	}
	cfg := gateway.Config{
		Routes: []gateway.RouteRef{{Kind: gateway.KindHTTPRoute, Namespace: rel.Namespace, Name: rel.Spec.Route.Name}},
		A:      gateway.Backend{Name: rel.Spec.A.Service, Port: rel.Spec.A.Port},
		B:      gateway.Backend{Name: rel.Spec.B.Service, Port: rel.Spec.B.Port},

		PeerNamespaces: r.PeerNamespaces,
		APIReader:      r.apiReader(),
	}
	if d := rel.Spec.Route.SettleDelay; d != nil {
		cfg.SettleDelay = d.Duration
	}
	if rel.Spec.Route.Mirror == string(gateway.MirrorTraefikService) {
		cfg.Mirror = gateway.MirrorTraefikService
	}
	router, err := gateway.NewRouter(r.Client, cfg)
	if err != nil {
		return nil, fmt.Errorf("spec.route: %w", err)
	}
	// Its Observer is set for each reconcile (stepRunner).
	runner := &rollout.Runner{Strategy: strat, Router: router, Clock: r.Clock, Watched: true,
		Owner: ownerOf(rel), OwnerGone: r.releaseGone} // finalizer.go
	fixed := strat.Shared().Capacity == strategy.CapacityFixed
	a, b, err := r.sides(rel, fixed, means)
	if err != nil {
		return nil, err
	}
	runner.RevisionA, runner.RevisionB = a.deployer, b.deployer
	if !fixed {
		runner.A, runner.B = a.setter, b.setter
	}
	if err := r.withAnalysis(rel, runner); err != nil {
		return nil, err
	}
	if err := runner.Validate(); err != nil {
		return nil, fmt.Errorf("spec.strategy: %w", err)
	}
	return runner, nil
}

// withAnalysis builds the Analysis of spec.analysis, over the Prometheus it
// names, as the Runner's health (its checks) and its analyzer (its gates).
// Every gate step of the strategy must name a gate of spec.analysis: one
// that names another could only ever pass by a promote.
func (r *Reconciler) withAnalysis(rel *v1alpha1.Release, runner *rollout.Runner) error {
	spec := rel.Spec.Analysis
	declared := map[string]bool{}
	if spec != nil {
		for _, g := range spec.Gates {
			declared[g.Name] = true
		}
	}
	var undeclared []string
	if c := rel.Spec.Strategy.Canary; c != nil {
		for i, st := range c.Steps {
			if st.Gate != nil && !declared[st.Gate.Name] {
				undeclared = append(undeclared, fmt.Sprintf("spec.strategy.canary.steps[%d].gate.name: gate %q is not declared in spec.analysis.gates, so nothing could pass it but a promote", i, st.Gate.Name))
			}
		}
	}
	if len(undeclared) > 0 {
		return errors.New(strings.Join(undeclared, "; "))
	}
	if spec == nil {
		return nil
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("spec.analysis: %w", err)
	}
	if spec.Prometheus == nil {
		return errors.New("spec.analysis.prometheus.address: required: the operator reads the metrics from Prometheus")
	}
	src, err := prometheus.New(spec.Prometheus.Address, nil)
	if err != nil {
		return fmt.Errorf("spec.analysis.prometheus: %w", err)
	}
	backend := func(s v1alpha1.Side) analysis.ServiceRef {
		return analysis.ServiceRef{Namespace: rel.Namespace, Name: s.Service, Port: s.Port}
	}
	a, err := spec.Build(src, analysis.Target{Namespace: rel.Namespace, Route: rel.Spec.Route.Name,
		A: backend(rel.Spec.A), B: backend(rel.Spec.B)})
	if err != nil {
		return fmt.Errorf("spec.analysis: %w", err)
	}
	a.Clock = r.Clock
	if len(a.Checks) > 0 {
		runner.Health = a
	}
	if len(a.Gates) > 0 {
		runner.Analyzer = a
	}
	return nil
}

// side is the capacity setter and the deployer of one Deployment.
type side struct {
	setter   rollout.CapacitySetter
	deployer rollout.Deployer
}

// sides builds the Setters and Deployers of the Release's two
// Deployments. It is the one place that does: over the manager's client,
// whose reads of Deployments come from its informer cache (serve/replicas
// remembers its own writes until the cache shows them, and confirms a
// refused deploy with the API server). Their TemplateFunc maps a revision
// identity to the image means records for it (see revisions.go).
func (r *Reconciler) sides(rel *v1alpha1.Release, fixed bool, means *meanings) (a, b side, err error) {
	image := rel.Spec.Image
	if !strings.Contains(image.Template, "{revision}") {
		return a, b, fmt.Errorf("spec.image.template %q: want {revision} where the revision goes", image.Template)
	}
	template := means.template(image)
	var out [2]side
	for i, name := range []string{rel.Spec.A.Deployment, rel.Spec.B.Deployment} {
		s, err := replicas.ForClient(r.Client, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: rel.Namespace, Name: name}}, rel.Spec.Replicas)
		if err != nil {
			return a, b, fmt.Errorf("spec.replicas: %w", err)
		}
		d, err := s.Deployer(template)
		if err != nil {
			return a, b, err
		}
		d.FixedCapacity = fixed
		out[i] = side{setter: s, deployer: d}
	}
	return out[0], out[1], nil
}

// recordControl records an Event for a command that the spec's control
// applied: Normal when it acted, Warning when the request did not apply to
// the rollout as it stood (it is used up all the same).
func (r *Reconciler) recordControl(rel *v1alpha1.Release, a strategy.Applied) {
	typ, note := corev1.EventTypeNormal, "spec.control: "+a.Command
	if a.Token != "" {
		note += " " + a.Token
	}
	if a.Ignored {
		typ, note = corev1.EventTypeWarning, note+" ignored: it does not apply to the rollout as it stands"
	}
	r.Recorder.Eventf(rel, nil, typ, "Control"+a.Command, "Control", "%s", note)
}

// observer records a Kubernetes Event for every phase change, abort and
// error (and hop, with HopEvents), and the metrics of every reconcile of
// rel whose state was stored as stored in the status: each Event compares
// with it rather than with the state the Runner was given, which has the
// spec's commands applied, since an abort or a pause is a change of this
// reconcile too.
func (r *Reconciler) observer(rel *v1alpha1.Release, stored strategy.State) rollout.Observer {
	return rollout.ObserverFunc(func(ctx context.Context, e rollout.Event) {
		e.Before = stored
		r.Metrics.reconciled(rel.Namespace, rel.Name, e)
		for _, h := range e.Applied {
			if !r.HopEvents {
				break
			}
			// events.k8s.io folds Events of the same reason and action
			// into one series that keeps the first note, so the hop is
			// the action: each distinct hop is an Event of its own, and
			// one applied again counts in its series.
			r.Recorder.Eventf(rel, nil, corev1.EventTypeNormal, "Hop", h.String(), "%s", h)
		}
		if e.After.Phase != e.Before.Phase {
			typ := corev1.EventTypeNormal
			if e.After.Phase == strategy.PhaseAborting || e.After.Phase == strategy.PhaseAborted {
				typ = corev1.EventTypeWarning
			}
			from := string(e.Before.Phase)
			if from == "" {
				from = "Idle"
			}
			r.Recorder.Eventf(rel, nil, typ, "Phase"+string(e.After.Phase), "Step", "%s -> %s (%s to %s): %s",
				from, e.After.Phase, e.After.StableRevision, e.After.CanaryRevision, e.After.Message)
		}
		if e.After.Aborted != nil && e.Before.Aborted == nil {
			why := e.After.Aborted.Reason
			if why == strategy.ReasonUnhealthy && e.After.Observed.HealthMessage != "" {
				// What spec.analysis measured: the state keeps the
				// reason only, and the health is not judged once the
				// rollout aborts.
				why += ": " + e.After.Observed.HealthMessage
			}
			r.Recorder.Eventf(rel, nil, corev1.EventTypeWarning, "Aborted", "Abort", "%s to %s aborted: %s",
				e.After.StableRevision, e.After.CanaryRevision, why)
		}
		if e.Err != nil {
			r.Recorder.Eventf(rel, nil, corev1.EventTypeWarning, "ReconcileError", "Reconcile", "%v", e.Err)
		}
	})
}

// workloadChanged passes the changes of a Deployment that what the
// Setters and Deployers read could see: its spec (generation), its
// annotations (claims, revision records), its replica counts and the
// failing conditions. The Deployment controller also rewrites the
// status for timestamps alone (a condition's lastUpdateTime), which
// would only reconcile to find nothing new.
var workloadChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	a, ok1 := e.ObjectOld.(*appsv1.Deployment)
	b, ok2 := e.ObjectNew.(*appsv1.Deployment)
	if !ok1 || !ok2 {
		return true
	}
	sa, sb := a.Status, b.Status
	return a.Generation != b.Generation || !reflect.DeepEqual(a.Annotations, b.Annotations) ||
		!a.DeletionTimestamp.Equal(b.DeletionTimestamp) ||
		sa.ObservedGeneration != sb.ObservedGeneration || sa.Replicas != sb.Replicas ||
		sa.UpdatedReplicas != sb.UpdatedReplicas || sa.ReadyReplicas != sb.ReadyReplicas ||
		sa.AvailableReplicas != sb.AvailableReplicas || sa.UnavailableReplicas != sb.UnavailableReplicas ||
		!reflect.DeepEqual(sa.TerminatingReplicas, sb.TerminatingReplicas) ||
		!reflect.DeepEqual(conditionStates(sa.Conditions), conditionStates(sb.Conditions))
}}

// conditionStates is what a Deployment's conditions say, without when.
func conditionStates(cs []appsv1.DeploymentCondition) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c.Type) + "=" + string(c.Status) + " " + c.Reason + ": " + c.Message
	}
	return out
}
