package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/internal/ownwrite"
	"github.com/upshift-dev/upshift/internal/watchloop"
	"github.com/upshift-dev/upshift/rollout"
)

// Config says which routes and backends a Router manages.
type Config struct {
	// Routes are moved as one group: every route gets the same weights, and
	// the group is accepted only when every route is.
	Routes []RouteRef
	// A and B are the two sides' backends, named exactly.
	A, B Backend
	// SettleDelay is waited after the status first confirms the current
	// weights, before they are reported accepted: some data planes write
	// status before traffic moves. Measured through Traefik v3.7.13 on
	// loopback (e2e/traefik): status about 40-80 ms after a write, traffic
	// 100-450 ms after it, once 631 ms on a loaded 2-core host, so leave
	// headroom: with no settle delay most requests right after "accepted"
	// still reach the old side.
	SettleDelay time.Duration
	// MaxConflictRetries bounds the re-read and re-apply after a write
	// loses an optimistic-concurrency race; 0 means 5. Conflicts that
	// outlast them return an error matching rollout.ErrConflict.
	MaxConflictRetries int
	// Clock times SettleDelay; nil means clock.Real.
	Clock clock.Clock
	// Mirror chooses how SetRoutes programs a mirror: MirrorGatewayAPI
	// (the zero value) or MirrorTraefikService.
	Mirror MirrorMode
	// MirrorMaxBodySize caps the request bodies a TraefikService mirror
	// copies, in bytes (spec.mirroring.maxBodySize): 0 means 1 MiB, -1
	// unlimited. Only MirrorTraefikService uses it.
	MirrorMaxBodySize int64
	// PeerNamespaces are the namespaces whose routes SetRoutes reads to
	// place the extra header and sticky rules, since a route there that
	// attaches to the same listener with the same hostnames competes for
	// the same requests (see SetRoutes). Nil means every namespace (list
	// on httproutes and grpcroutes cluster-wide, so a ClusterRole); name
	// the namespaces your Gateways admit routes from to grant list there
	// only. The Router reads them only while a header route or sticky
	// sessions are asked for or programmed.
	PeerNamespaces []string
	// APIReader reads routes from the API server. When the client passed
	// to NewRouter reads routes from an informer cache (a controller-runtime
	// manager's client), set it to a reader of the API server, such as
	// mgr.GetAPIReader(): the Router then reads routes from the cache,
	// answers a read that returns a version one of its own writes replaced
	// with what that write returned, and after a write conflict reads the
	// route once from APIReader (see NewRouter). Nil: every read goes
	// through the client. NewRouterForClientset ignores it.
	APIReader client.Reader
	// Retry, when set, is a retry in the data plane that the Router
	// attaches to the rules it moves, in the same update as their weights,
	// and takes back once it is unset (see Retry, RetryAnnotation). It
	// needs HTTPRoutes.
	Retry *Retry
}

// Validate names every problem with the configuration.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Routes) == 0 {
		errs = append(errs, fmt.Errorf("%w: routes: at least one route is required", ErrInvalid))
	}
	for i, r := range c.Routes {
		if r.Name == "" || r.Namespace == "" {
			errs = append(errs, fmt.Errorf("%w: routes[%d]: name and namespace are required", ErrInvalid, i))
		}
		if r.kind() != KindHTTPRoute && r.kind() != KindGRPCRoute {
			errs = append(errs, fmt.Errorf("%w: routes[%d].kind: %q is not %s or %s", ErrInvalid, i, r.Kind, KindHTTPRoute, KindGRPCRoute))
		}
	}
	if c.A.Name == "" {
		errs = append(errs, fmt.Errorf("%w: a.name is required", ErrInvalid))
	}
	if c.B.Name == "" {
		errs = append(errs, fmt.Errorf("%w: b.name is required", ErrInvalid))
	}
	if c.A == c.B && c.A.Name != "" {
		errs = append(errs, fmt.Errorf("%w: a and b name the same backend %s", ErrInvalid, c.A))
	}
	if c.SettleDelay < 0 {
		errs = append(errs, fmt.Errorf("%w: settleDelay must not be negative", ErrInvalid))
	}
	if c.MaxConflictRetries < 0 {
		errs = append(errs, fmt.Errorf("%w: maxConflictRetries must not be negative", ErrInvalid))
	}
	if c.Mirror != MirrorGatewayAPI && c.Mirror != MirrorTraefikService {
		errs = append(errs, fmt.Errorf("%w: mirror: %q is not %q or %q", ErrInvalid, c.Mirror, MirrorGatewayAPI, MirrorTraefikService))
	}
	if c.Retry != nil {
		if err := c.Retry.Validate(); err != nil {
			errs = append(errs, err)
		}
		for i, r := range c.Routes {
			if r.kind() == KindGRPCRoute {
				errs = append(errs, fmt.Errorf("%w: routes[%d].kind: retry is attached to HTTPRoutes only, not to %s", ErrInvalid, i, KindGRPCRoute))
			}
		}
	}
	if c.MirrorMaxBodySize < -1 {
		errs = append(errs, fmt.Errorf("%w: mirrorMaxBodySize: %d: want -1 (unlimited), 0 (1 MiB) or a size in bytes", ErrInvalid, c.MirrorMaxBodySize))
	}
	return errors.Join(errs...)
}

// Router is a rollout.TrafficRouter over Gateway API HTTPRoutes and
// GRPCRoutes. It touches only the weights of its two backendRefs (each a
// Backend named exactly: group, kind, name, namespace, port), writing both
// in every rule that holds both (an omitted weight means 1, never 0): other
// rules, backends, filters, matches, hostnames, labels and annotations
// survive. Writes use optimistic concurrency (resourceVersion), re-read and
// re-apply on a conflict with the caller's context, and are skipped when the
// weights are already right. Besides the weights it owns one claim
// annotation per rule it moves (ClaimAnnotation, see Claim), and the
// AnnotationStore owns StateAnnotation: a GitOps tool that applies the route
// should ignore the weights, annotations with prefix ClaimAnnotationPrefix
// and StateAnnotation. A rule that holds both backends must split its
// traffic between them alone, or SetWeights and Weights refuse it.
//
// The Router is also a rollout.ExtrasRouter (SetRoutes, Routes). It moves
// traffic only: in the fixed capacity mode give rollout.Runner a
// rollout.Deployer per backend (RevisionA, RevisionB), such as
// serve/replicas', and the canary side is redeployed at weight 0.
//
// Errors: *RouteNotFoundError (matches rollout.ErrNotFound),
// *BackendNotFoundError, *NoSharedRuleError and *ExtraBackendError (match
// ErrInvalid and are rollout.Permanent), *NotAcceptedError in
// RouteStatus.Rejected, and an error matching rollout.ErrConflict when
// conflicts outlast MaxConflictRetries.
//
// RBAC: get and update on the managed routes by name, and watch for Notify
// (never a list; CreateOrAdopt also needs create). While a Notify
// subscription is live, the Router reads the routes from their watches.
// Safe for concurrent use. Build it with NewRouter or NewRouterForClientset.
// See docs/design/gateway.md for a Role and the fixed capacity mode.
type Router struct {
	cfg    Config
	api    routes
	mu     sync.Mutex
	seen   map[RouteRef]acceptance
	counts Counts
	// subs are the live Notify subscriptions, woken when a SettleDelay
	// ends (no event marks it).
	subs map[*subscription]struct{}
	// shared is the one watch of each managed route, shared by every
	// Notify subscription; its Cache serves the route's reads while it
	// runs (watchedRoutes).
	shared  map[RouteRef]*watchloop.Shared
	watches watchloop.Stats
	// watchOpts tune the watches (tests shorten them).
	watchOpts watchloop.Options
	// own remembers the resourceVersions of the Router's writes, whose
	// watch events wake nobody.
	own watchloop.Own
	// gws reads Gateways and GatewayClasses (the mirror's feature check).
	gws gatewayReader
	// objs writes the mirror's TraefikService; nil with the clientset.
	objs client.Client
	// sweep (under mu): a TraefikService of the Router may be left to
	// delete (see sweepMirrors); true at the start, since an earlier
	// process may have left one.
	sweep bool
	// retryPruned (under mu): the routes whose rules[].retry the API
	// server dropped (see checkRetryKept).
	retryPruned map[RouteRef]bool
}

// acceptance remembers when a route's current generation was first seen
// accepted, for SettleDelay.
type acceptance struct {
	generation int64
	at         time.Time
}

// Counts are the API calls a Router made. The zero value counts nothing.
type Counts struct {
	// Reads are the GETs of a route sent to the API server (with
	// Config.APIReader, the reads through the client's cache and
	// APIReader); Writes the updates that succeeded, Conflicts those
	// refused with a conflict.
	Reads, Writes, Conflicts int
	// Lists are the lists of routes sent to read the other routes on the
	// managed routes' listeners (see Config.PeerNamespaces).
	Lists int
	// CachedReads are the reads of a route answered from what its watch
	// delivered (while a Notify subscription is live), with no request.
	CachedReads int
	// Watches are the watch requests Notify made: one per route however
	// many subscriptions share it, and one more each time a watch is
	// re-established or started again after every subscription ended.
	Watches int
}

var (
	_ rollout.TrafficRouter = (*Router)(nil)
	_ rollout.Notifier      = (*Router)(nil)
)

// NewRouter returns a Router that uses a controller-runtime client; its
// scheme must know gateway.networking.k8s.io/v1.
//
// With a manager's client, whose reads come from an informer cache that
// may lag the API server, set Config.APIReader (mgr.GetAPIReader()): a
// reconcile then reads the routes from the cache, with no request. The
// Router never acts on a route older than its own last write: while the
// cache still shows a version that one of its writes replaced, it reads
// what that write returned. Other writers' changes are seen once the cache
// has them; a write based on a stale read conflicts, and the retry reads
// the route from APIReader (until the cache catches up, a version the
// cache shows that the Router cannot place is checked there too). The
// peer routes that SetRoutes lists are read from the cache as they are.
// The cache needs list and watch on the route kinds.
func NewRouter(c client.Client, cfg Config) (*Router, error) {
	api := crRoutes{c: c}
	if cfg.APIReader != nil {
		api.api, api.own = cfg.APIReader, &ownwrite.Memory[RouteRef]{}
	}
	r, err := newRouter(api, cfg)
	if err != nil {
		return nil, err
	}
	r.gws, r.objs = crGateways{c: c}, c
	return r, nil
}

// NewRouterForClientset returns a Router that uses the gateway-api typed
// clientset. It refuses a RetryTraefikMiddleware retry, whose Middleware
// it cannot read.
func NewRouterForClientset(cs versioned.Interface, cfg Config) (*Router, error) {
	if cfg.Retry != nil && cfg.Retry.Mode == RetryTraefikMiddleware {
		return nil, fmt.Errorf("%w: retry.mode: %s needs a Router built with NewRouter (it reads the Middleware)", ErrInvalid, RetryTraefikMiddleware)
	}
	r, err := newRouter(csRoutes{cs: cs}, cfg)
	if err != nil {
		return nil, err
	}
	r.gws = csGateways{cs: cs}
	return r, nil
}

func newRouter(api routes, cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxConflictRetries == 0 {
		cfg.MaxConflictRetries = defaultConflictRetries
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	r := &Router{cfg: cfg, seen: map[RouteRef]acceptance{}, shared: map[RouteRef]*watchloop.Shared{}, sweep: true}
	for _, ref := range cfg.Routes {
		if r.shared[ref.key()] == nil {
			r.shared[ref.key()] = &watchloop.Shared{}
		}
	}
	r.api = watchedRoutes{api: countedRoutes{api: api, r: r}, r: r}
	return r, nil
}

// Counts returns the API calls made so far.
func (r *Router) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts
	c.Watches = int(r.watches.Watches.Load())
	return c
}

// countedRoutes counts a Router's API calls in its Counts.
type countedRoutes struct {
	api routes
	r   *Router
}

func (c countedRoutes) get(ctx context.Context, ref RouteRef) (route, error) {
	rt, err := c.api.get(ctx, ref)
	c.r.mu.Lock()
	c.r.counts.Reads++
	c.r.mu.Unlock()
	return rt, err
}

func (c countedRoutes) update(ctx context.Context, rt route) error {
	end := c.r.own.Begin()
	err := c.api.update(ctx, rt)
	if err == nil {
		end(rt.meta().ResourceVersion)
	} else {
		end("")
	}
	c.r.mu.Lock()
	switch {
	case err == nil:
		c.r.counts.Writes++
	case apierrors.IsConflict(err):
		c.r.counts.Conflicts++
	}
	c.r.mu.Unlock()
	return err
}

func (c countedRoutes) list(ctx context.Context, kind, ns string) ([]route, error) {
	out, err := c.api.list(ctx, kind, ns)
	c.r.mu.Lock()
	c.r.counts.Lists++
	c.r.mu.Unlock()
	return out, err
}

func (c countedRoutes) watch(ctx context.Context, ref RouteRef, opts metav1.ListOptions) (watch.Interface, error) {
	return c.api.watch(ctx, ref, opts) // counted by the watch loop
}

// watchedRoutes answers the reads of a route from what its shared watch
// delivered (watchloop.Cache), while a Notify subscription keeps the watch
// running and it is open and filled; otherwise it reads through api. The
// answers of the Router's writes and reads are handed to the Cache, so a
// read never reports a version older than the Router's last write, and a
// write that conflicts makes the next read (the retry's) go to the API
// server.
type watchedRoutes struct {
	api routes // countedRoutes: the requests sent
	r   *Router
}

func (c watchedRoutes) cache(ref RouteRef) *watchloop.Cache {
	if sh := c.r.shared[ref.key()]; sh != nil {
		return &sh.Cache
	}
	return nil
}

func (c watchedRoutes) get(ctx context.Context, ref RouteRef) (route, error) {
	cache := c.cache(ref)
	if cache != nil {
		if obj, ok := cache.Get(); ok {
			c.r.mu.Lock()
			c.r.counts.CachedReads++
			c.r.mu.Unlock()
			if rt, ok := routeOf(obj); ok {
				return rt, nil
			}
			return route{}, apierrors.NewNotFound(schema.GroupResource{Group: gwv1.GroupName, Resource: strings.ToLower(ref.kind()) + "s"}, ref.Name)
		}
	}
	rt, err := c.api.get(ctx, ref)
	if err == nil && cache != nil {
		cache.Saw(rt.object())
	}
	return rt, err
}

func (c watchedRoutes) update(ctx context.Context, rt route) error {
	ref := RouteRef{Kind: KindHTTPRoute, Namespace: rt.meta().Namespace, Name: rt.meta().Name}
	if rt.grpc != nil {
		ref.Kind = KindGRPCRoute
	}
	base := rt.meta().ResourceVersion
	err := c.api.update(ctx, rt)
	cache := c.cache(ref)
	switch {
	case cache == nil:
	case err == nil:
		cache.Saw(rt.object(), base)
	case apierrors.IsConflict(err):
		cache.Stale()
	}
	return err
}

func (c watchedRoutes) list(ctx context.Context, kind, ns string) ([]route, error) {
	return c.api.list(ctx, kind, ns)
}

func (c watchedRoutes) watch(ctx context.Context, ref RouteRef, opts metav1.ListOptions) (watch.Interface, error) {
	return c.api.watch(ctx, ref, opts)
}

// routeOf is the route obj holds; false for a nil or another object.
func routeOf(obj runtime.Object) (route, bool) {
	switch o := obj.(type) {
	case *gwv1.HTTPRoute:
		return route{http: o}, o != nil
	case *gwv1.GRPCRoute:
		return route{grpc: o}, o != nil
	}
	return route{}, false
}

// apiError turns an API error into the adapter's error vocabulary.
func apiError(err error, ref RouteRef) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return &RouteNotFoundError{Route: ref}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return rollout.Permanent(fmt.Errorf("gateway: %s: %w", ref, err))
	}
	return fmt.Errorf("gateway: %s: %w", ref, err)
}

// SetWeights writes w into every managed route. A route that already has
// them is not written. Every route is read and checked before any is
// written, so a route without the backends leaves the whole group untouched;
// a write that fails midway (a conflict storm, the API server going away)
// leaves the group reported not accepted, and the next call converges it.
// On a route that holds every rule SetRoutes programmed there, the owned
// rules follow w in the same update (the sticky sessions' threshold, the
// mirror's fraction), with the extras as they were programmed; extra rules
// that another writer edited are left alone.
func (r *Router) SetWeights(ctx context.Context, w rollout.Weights) error {
	return r.setWeights(ctx, w, nil)
}

// setWeights is SetWeights; with also, the write of also's route makes
// also's edit in the same update, and that route is written last.
func (r *Router) setWeights(ctx context.Context, w rollout.Weights, also *routeEdit) error {
	if w.A < 0 || w.B < 0 || w.A+w.B != 100 {
		return rollout.Permanent(fmt.Errorf("%w: weights A=%d B=%d must be non-negative and sum to 100", ErrInvalid, w.A, w.B))
	}
	if err := r.checkRetryMiddleware(ctx); err != nil { // retry.go
		return err
	}
	if len(r.cfg.Routes) > 1 {
		for _, ref := range r.cfg.Routes {
			rt, err := r.api.get(ctx, ref)
			if err != nil {
				return apiError(err, ref)
			}
			if err := checkRules(r.userRules(ref, rt), &r.cfg.A, &r.cfg.B, ref.Namespace); err != nil {
				return rollout.Permanent(withRoute(err, ref))
			}
			if err := also.check(ref, rt); err != nil {
				return err
			}
			if _, err := r.applyRetry(ref, rt.deepCopy()); err != nil {
				return err
			}
		}
	}
	for _, ref := range also.order(r.cfg.Routes) {
		if err := r.setRoute(ctx, ref, w, also.on(ref)); err != nil {
			return err
		}
	}
	return nil
}

func (r *Router) setRoute(ctx context.Context, ref RouteRef, w rollout.Weights, edit func(route) (bool, error)) error {
	var last route
	err := updateRoute(ctx, r.api, ref, r.cfg.MaxConflictRetries, func(rt route) (bool, error) {
		last = rt
		if err := r.checkWriter(ctx, ref, rt); err != nil { // claim.go
			return false, err
		}
		// The retry first, so that the extra rules rebuilt below copy it.
		retried, err := r.applyRetry(ref, rt) // retry.go
		if err != nil {
			return false, err
		}
		changed, err := r.setWeightsIn(ctx, ref, rt, w) // extras.go
		if err != nil {
			return false, rollout.Permanent(withRoute(err, ref))
		}
		return withEdit(changed || retried, rt, edit)
	})
	if err != nil {
		return err
	}
	return r.checkRetryKept(ref, last)
}

// routeEdit is a change of one route made in the same update as the
// Router's (the AnnotationStore's state, written with the weights).
type routeEdit struct {
	ref  RouteRef
	edit func(route) (bool, error)
}

// order returns routes with e's route last: the other routes get the
// weights first, and the state is written with the last of them.
func (e *routeEdit) order(routes []RouteRef) []RouteRef {
	if e == nil {
		return routes
	}
	out := make([]RouteRef, 0, len(routes))
	for _, ref := range routes {
		if ref != e.ref {
			out = append(out, ref)
		}
	}
	return append(out, e.ref)
}

// on returns e's edit when ref is e's route, nil otherwise.
func (e *routeEdit) on(ref RouteRef) func(route) (bool, error) {
	if e == nil || ref != e.ref {
		return nil
	}
	return e.edit
}

// check makes e's edit on a copy of rt when ref is e's route, so that an
// edit refused there (a state the route has no room for, a claim) refuses
// the whole group before any route of it is written.
func (e *routeEdit) check(ref RouteRef, rt route) error {
	edit := e.on(ref)
	if edit == nil {
		return nil
	}
	_, err := edit(rt.deepCopy())
	return err
}

// withEdit applies edit (when set) after a change of the Router's that
// reported changed, and reports whether either changed the route.
func withEdit(changed bool, rt route, edit func(route) (bool, error)) (bool, error) {
	if edit == nil {
		return changed, nil
	}
	edited, err := edit(rt)
	if err != nil {
		return false, err
	}
	return changed || edited, nil
}

// Weights reports the weights in the routes' spec and whether the data
// plane has accepted them: for every route, every parentRef has a status
// entry whose Accepted and ResolvedRefs are True for the route's current
// generation, and SettleDelay has passed since that was first seen. A
// missing or older status means "not yet". Routes whose weights disagree are
// reported as Weights{A: -1, B: -1}, so a caller re-applies the weights it
// wants.
//
// The weights are the spec's, an omitted weight read as 1 like the data
// plane reads it; they sum to 100 only when they are the real split in
// percent (two omitted weights are reported as 1 and 1, not as 50 and 50).
// A rule that also sends traffic elsewhere is an *ExtraBackendError, never
// a status. The rules SetRoutes owns (and rules carrying their names) are
// not read: the weights are those of the user's rules.
func (r *Router) Weights(ctx context.Context) (rollout.RouteStatus, error) {
	return r.weights(ctx, nil)
}

// weights is Weights, calling each (when set) with every route it reads.
func (r *Router) weights(ctx context.Context, each func(RouteRef, route) error) (rollout.RouteStatus, error) {
	var st rollout.RouteStatus
	st.Accepted = true
	for i, ref := range r.cfg.Routes {
		rt, err := r.readRoute(ctx, ref) // shared with Claim in one reconcile
		if err != nil {
			return rollout.RouteStatus{}, apiError(err, ref)
		}
		if each != nil {
			if err := each(ref, rt); err != nil {
				return rollout.RouteStatus{}, err
			}
		}
		wa, wb, agree, err := readWeights(r.userRules(ref, rt), &r.cfg.A, &r.cfg.B, ref.Namespace)
		if err != nil {
			return rollout.RouteStatus{}, rollout.Permanent(withRoute(err, ref))
		}
		w := rollout.Weights{A: wa, B: wb}
		if i == 0 {
			st.Weights = w
		}
		if !agree || w != st.Weights {
			st.Weights = rollout.Weights{A: -1, B: -1}
			st.Accepted = false
			st.Message = fmt.Sprintf("%s: weights differ between routes or rules", ref)
			continue
		}
		ok, msg, rejected := r.accepted(ref, rt)
		if !ok && st.Accepted {
			st.Accepted, st.Message = false, msg
		}
		if rejected != nil && st.Rejected == nil {
			st.Rejected = rejected
		}
	}
	return st, nil
}

// accepted evaluates one route's status.
func (r *Router) accepted(ref RouteRef, rt route) (bool, string, error) {
	gen := rt.meta().Generation
	parents := rt.parentRefs()
	if len(parents) == 0 {
		return false, fmt.Sprintf("%s has no parentRefs: no gateway serves it", ref), nil
	}
	for _, p := range parents {
		found := false
		for _, ps := range rt.parents() {
			if !sameParent(&p, &ps.ParentRef, ref.Namespace) {
				continue
			}
			found = true
			for _, ct := range []gwv1.RouteConditionType{gwv1.RouteConditionAccepted, gwv1.RouteConditionResolvedRefs} {
				c := meta.FindStatusCondition(ps.Conditions, string(ct))
				switch {
				case c == nil || c.ObservedGeneration != gen:
					return false, fmt.Sprintf("%s: parent %s has not reported generation %d yet", ref, p.Name, gen), nil
				case c.Status != metav1.ConditionTrue:
					e := &NotAcceptedError{Route: ref, Parent: string(p.Name), Condition: string(ct), Reason: c.Reason, Message: c.Message}
					return false, e.Error(), e
				}
			}
		}
		if !found {
			return false, fmt.Sprintf("%s: parent %s has no status yet", ref, p.Name), nil
		}
	}
	if r.cfg.SettleDelay == 0 {
		return true, "", nil
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.seen[ref]
	if !ok || a.generation != gen {
		a = acceptance{generation: gen, at: now}
		r.seen[ref] = a
		r.wakeAfterLocked(r.cfg.SettleDelay)
	}
	if now.Sub(a.at) < r.cfg.SettleDelay {
		return false, fmt.Sprintf("%s: accepted; settling for %s", ref, r.cfg.SettleDelay), nil
	}
	return true, "", nil
}

// sameParent compares two parent references with Gateway API defaults
// (group gateway.networking.k8s.io, kind Gateway, the route's namespace).
func sameParent(a, b *gwv1.ParentReference, ns string) bool {
	norm := func(p *gwv1.ParentReference) [6]string {
		out := [6]string{gwv1.GroupName, "Gateway", ns, string(p.Name), "", ""}
		if p.Group != nil {
			out[0] = string(*p.Group)
		}
		if p.Kind != nil {
			out[1] = string(*p.Kind)
		}
		if p.Namespace != nil {
			out[2] = string(*p.Namespace)
		}
		if p.SectionName != nil {
			out[4] = string(*p.SectionName)
		}
		if p.Port != nil {
			out[5] = fmt.Sprint(*p.Port)
		}
		return out
	}
	return norm(a) == norm(b)
}
