// Package rollout applies the decisions of a strategy through adapters: a
// TrafficRouter that moves request weights between the two physical sides,
// a CapacitySetter per side, and optional Analyzer, HealthChecker, Store and
// Observer.
//
// A Runner embeds in a reconciler. Each Reconcile observes every adapter,
// calls Strategy.Step once, and applies the hops in the safe order: capacity
// increases, then the weight, then capacity decreases. It returns the state
// to store and when to reconcile again: the exact time until the next
// time-gated event, or a poll while the world applies a hop:
//
//	func (c *MyController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		obj := ... // your CRD; obj.Status.Rollout is a strategy.State
//		now := c.runner.Now() // one instant, from the Runner's clock, for everything below
//		// A new object's zero state (or a wiped status) records the
//		// revision unobserved; the first reconcile observes the world and
//		// adopts it. A new revision later starts a rollout.
//		s := obj.Status.Rollout.Retarget(obj.Spec.Revision, now)
//		s, applied := s.Control(obj.Spec.Control, now) // paused, abort, promote... (strategy.Control)
//		for _, a := range applied {
//			c.recorder.Event(obj, "Normal", a.Command, a.Token)
//		}
//		// Name the object, for the Observer's Events and the logs.
//		next, requeue, err := c.runner.ReconcileAt(rollout.WithName(ctx, req.NamespacedName), s, now)
//		obj.Status.Rollout = next // store it even when err != nil: nothing is lost
//		if uerr := c.Status().Update(ctx, obj); uerr != nil {
//			return ctrl.Result{}, uerr
//		}
//		return ctrl.Result{RequeueAfter: requeue}, err
//	}
//
// The clock. Commands record when they happened, and every recorded instant
// bounds the strategy's clock from below (time that runs backwards counts as
// no time passing). A command stamped by another clock than the Runner's
// (time.Now() in a controller whose Runner runs on a fake.Clock, or the
// controller's own clock field next to a Runner given another) puts the
// state ahead of the Runner, and every interval, pause and deadline then
// waits until the Runner's clock reaches the stamp. So take one now per
// reconcile from Runner.Now and give it to the commands and to ReconcileAt,
// as above; Run applies its commands at its own clock. A state stamped more
// than strategy.MaxClockSkew (a minute) ahead of the Runner's now fails
// loudly: ReconcileAt still reconciles it (the stamp counts as now, which
// is safe) but returns a *strategy.ClockSkewError (errors.Is
// strategy.ErrClockSkew) naming the field, logs it, and the state reports
// Degraded with reason ClockSkew. A smaller skew (clocks of two machines)
// is absorbed.
//
// Revisions. Each side runs a revision. Set RevisionA and RevisionB to a
// RevisionReader per side (a Deployer if the Runner should deploy: package
// serve/ray deploys a revision's Serve config, package serve/replicas a
// revision's pod template) and the Runner reads each side's revision on
// every reconcile, passing the revision its role should run, and applies
// the strategy's deploy hops after the others: a revision is only ever
// deployed on the canary side while it carries weight 0 and, with capacity
// setters, capacity 0, and no traffic or capacity reaches it before it is
// reported running that revision (Updated). The first revision is the one
// the workload of side A is created with; every later one is deployed by
// the Runner. A caller who deploys by itself implements only
// RevisionReader (RevisionFunc adapts a function): the rollout then waits,
// bounded by the progress deadline, until the side reports what it should
// run. Without RevisionA and RevisionB nothing is checked, and the caller puts
// each revision on its side.
//
// Events, not polls. Adapters that implement Notifier tell when what they
// report may have changed: the gateway Router watches its routes by name,
// serve/replicas its workloads, and the fakes every change they make. Run
// subscribes to each once and reconciles as soon as one reports a change
// (a burst is one reconcile), so a hop is observed when the world applies
// it, not at the next poll. When every adapter that observes the world (the
// Router, the capacity setters, the revision readers) notifies, Run waits
// for the strategy's WatchedRequeueAfter, which polls only at the poll
// interval; otherwise it takes RequeueAfter, which polls fast right after a
// hop (from strategy.Options.InitialPollInterval, doubling up to the poll
// interval), so that a hop the world applies in 300 ms is seen within about
// 400 ms rather than at the next 2 s poll. An operator gets the same from
// its own watches: with controller-runtime, watch the objects the adapters
// read (the HTTPRoutes, the Deployments) and map each event to the rollout
// object that owns them (Watches with handler.EnqueueRequestsFromMapFunc,
// or Owns when it owns them), so that a data plane writing a route's
// status, or a Deployment's pods becoming ready, reconciles the rollout at
// once, and set Runner.Watched so that Reconcile returns the longer
// requeue. Write its status only when
// strategy.Changed reports a change: the observation and the message are
// volatile, so a rollout that waits writes nothing, and an upgrade writes
// its state about once per hop (Run does the same with its Store).
//
// Each reconcile reads every adapter once. Adapters that read the same
// object (a capacity setter and a revision reader of one Deployment or one
// Ray cluster) share that read through ReadOnce: the Runner observes with
// a context from WithReads, so a reconcile costs one GET per object.
//
// Many objects. A Runner holds no per-rollout state, but its adapters name
// what they act on (a gateway Router its routes, a serve/replicas Setter
// its workload), so an operator whose rollout objects each have their own
// route and workloads uses a Runner per object. They are cheap: building
// a Router, a Setter or a Deployer makes no request. Keep them in a map
// keyed by the object's name, built at its first reconcile and dropped
// when it is deleted, or build them in every reconcile. Objects that share
// their adapters share one Runner, concurrently. Either way, name the
// object in the context, WithName(ctx, req.NamespacedName): every Event
// the Observer receives says which rollout it concerns (Event.Rollout),
// and the log lines carry it ("rollout").
//
// With controller-runtime, give the adapters the manager's client
// (gateway.NewRouter, replicas.ForClient): their reads then come from the
// manager's informer cache, at no request, and the controller's watches
// of the routes and workloads (Owns, or Watches mapped to the rollout
// object) reconcile once the cache has the change that triggered them;
// set Watched. Reads from a cache lag writes. A serve/replicas Setter
// reports what it wrote until the cache shows it, so it never writes the
// same capacity or revision again, and a Deployer confirms a refusal with
// the API server before it aborts a rollout on a stale read; a Setter
// built anew in each reconcile has no memory of its writes, and a read
// that the cache serves before it has the last one costs a conflict and a
// retry, never a wrong write. The gateway Router keeps no such memory:
// right after its write a cached read may show the previous weights, and
// its next write conflicts and is retried from a fresh read. Any write
// based on a stale read fails with a conflict and is retried; one that
// outlasts the retries is ErrConflict, and the Runner asks for the hop
// again. Notify needs a client that can watch, which a manager's is not:
// in a controller the manager's watches take its place.
//
// The RBAC of such an operator: get, list and watch on each kind the
// cache reads (the Deployments, StatefulSets or scalable kind; the
// HTTPRoutes or GRPCRoutes), in the namespaces the cache covers (list and
// watch of a collection cannot be limited to resourceNames); update on
// the workloads (and on <resource>/scale for a kind scaled through its
// scale subresource) and on the routes (the Router and the
// AnnotationStore); and the verbs on the rollout objects themselves (get,
// list, watch, and update on their status). Without a cache (clientsets,
// or a client from client.NewWithWatch) the adapters need only get,
// update and watch on the names they manage.
//
// Claims. Two rollouts pointed at the same route or workloads (two
// operator objects naming one HTTPRoute, a standalone program next to an
// operator) would each undo the other's hops. So the objects a rollout
// moves carry a claim: set Runner.Owner (the rollout object's kind,
// namespace, name and UID; for a standalone program, a name and a UID it
// keeps across restarts), and before it applies anything of a non-idle
// state the Runner claims every adapter that is a Claimer (the gateway
// Router claims its rule of each route, serve/replicas each workload, the
// fakes model the same). A claim already held writes nothing, and its
// check shares the reconcile's reads (ReadOnce). A second owner gets a
// *ClaimedError naming the object and the owner that holds it
// (errors.Is ErrClaimed): its reconcile observes and writes nothing, its
// state reports Degraded with reason strategy.ReasonClaimed and that
// message, and the time refused counts toward no deadline. The Runner
// also passes its owner to every write (WithOwner): an adapter refuses a
// write for an owner whose claim was taken over meanwhile, with the same
// error. Claims are written with optimistic concurrency, so of two
// claimants racing for a free object one wins. Runner.Release removes the
// claims; call it when the rollout object is deleted (a finalizer). A
// claim whose owner is gone (its object deleted, or re-created with
// another UID) is taken over when Runner.OwnerGone reports it gone;
// without OwnerGone a claim is taken over only once released. The zero
// Owner takes no claims.
//
// Logging goes through the logr.Logger in the context (the controller-runtime
// convention); each applied hop is logged at V(1). Events and metrics go
// through the Observer, which sees every reconcile: the rollout it
// concerns (WithName), the state before and after, the decision, the hops
// applied and any error.
//
// The zero state, and any idle state (strategy.State.Idle), reads no adapter
// and asks for nothing. The zero state after a Retarget is not idle but
// unobserved (strategy.State.Unobserved: a new object, or one whose status
// was wiped or re-created mid-rollout): its reconcile reads every adapter,
// writes nothing, and returns the world adopted (the idle state when all
// traffic is on a side running the spec's revision, else the rollout or
// walk back the route and the sides show), to be reconciled again soon. A stored state that fails strategy.State.Validate is
// never applied: Reconcile returns a *strategy.StateError naming each field,
// and the state reports Degraded with reason InvalidState.
//
// Errors. Adapter errors come back as *AdapterError naming the adapter
// ("router", "capacity A", "revision B", ...), the operation and the hop, wrapping the
// adapter's error (ErrNotFound, ErrConflict, ...). After a transient error
// the returned state is the one before the failed hop, so the next reconcile
// asks for it again, with the error in Observed.Error: the rollout reports
// Degraded (ObservationFailed) and the time since the first failure counts
// toward the progress deadline, so a deleted route or a workload that is
// gone surfaces in status and can abort the rollout. An error marked
// Permanent aborts the rollout instead of retrying forever.
//
// Weights read from the route that do not sum to 100 (another writer, a
// careless edit) are reported as Observation.WeightInvalid and repaired once
// that is safe.
//
// Standalone programs call Run, which loops with a Store so that a killed
// process resumes where it stopped; package fake has an in-memory Store.
// Run never drops a command or a hop because a save failed: it keeps the
// change in memory, reconciles from it, and retries the save until it lands.
//
// Steering a standalone rollout. A Store that is also a ControlStore keeps
// a strategy.Control next to the state, and Run applies it before every
// reconcile (strategy.State.Control) as an operator applies its spec's
// control: paused holds the rollout while true; abort, retry, promote,
// promoteFull and resume act once for each new value. The gateway
// package's AnnotationStore reads it from the route's
// upshift.dev/rollout-control annotation (gateway.ControlAnnotation), the
// JSON of a strategy.Control, which `kubectl upshift pause httproute/NAME`
// (abort, promote...) writes:
//
//	kubectl annotate httproute web --overwrite upshift.dev/rollout-control='{"abort":"2026-03-01T12:00:00Z"}'
//
// The requests a state has seen are recorded in it (State.Handled), so a
// request acts once also when Run restarts; one that does not apply to the
// rollout as it stands is used up and logged as ignored.
//
// Run's lifetime guarantees:
//   - Nothing outlives it. Run subscribes to the Notifiers with a context
//     of its own and ends it before it returns; a Notifier's goroutines
//     end promptly after (the Notifier contract), and Run waits for those
//     that Notify reported through TrackNotify (the gateway Router's
//     watches, serve/replicas' watch, serve/ray's fast polls, the fakes'
//     subscriptions). A program may call Run again and again: each call
//     leaves no watch, poll or wake behind.
//   - A finished state is not a dead end. Started on a state that is
//     already terminal or idle, Run returns it at once when commands is
//     nil; with a commands channel it waits for a command, and runs the
//     rollout that command starts (a closure calling
//     strategy.State.Retarget with a new revision) to its end. A rollout
//     that finishes while Run drives it returns at once.
//   - Cancellation loses nothing and invents nothing: when ctx ends, Run
//     returns ctx's error (wrapping ErrUnsaved only if a change it made
//     could not be saved), and a reconcile that failed because ctx ended
//     is not recorded in the state.
//   - Its waits are visible to a manual clock: Run arms its requeue timer
//     (Clock.AfterFunc) only after it has taken every pending command and
//     wake, right before it blocks, and stops it when woken otherwise, so
//     a test on a fake.Clock knows that a pending timer of Run's means Run
//     is idle until something happens.
package rollout
