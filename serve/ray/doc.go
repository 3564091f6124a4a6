// Package ray provisions one side of an upgrade on a Ray cluster: Ray is a
// rollout.CapacitySetter that moves the cluster's Serve target_capacity
// through the Ray dashboard's Serve REST API, and reports how much of the
// applications' full capacity is ready, from replica counts; its Deployer
// (a rollout.Deployer) puts a revision's Serve config on the cluster at
// target_capacity 0 and reports the revision the cluster runs. It is part
// of the serving side of upshift (package serve).
//
// Two Ray clusters, one per side, with a traffic router in front (a Gateway
// API route, see package gateway) make the managed capacity mode: the
// canary cluster's target capacity rises ahead of its traffic, the stable
// cluster's falls behind it, and at completion the winner returns to a
// null target capacity, so that Ray's autoscaling floors are not left
// pinned.
//
//	a, err := ray.New(ray.Config{Dashboard: "http://blue-head-svc:8265", ServeConfig: cfg})
//	b, err := ray.New(ray.Config{Dashboard: "http://green-head-svc:8265", ServeConfig: cfg})
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b}
//
// The Serve config is the user's own (Ray's ServeDeploySchema as JSON); the
// adapter sends it as it is and decodes only the parts of Ray's answers it
// needs, so the wire schema is not part of this package's API.
//
// # Revisions
//
// With one Config.ServeConfig, something else changes what the clusters
// run. To let the Runner put each revision on its cluster, give each
// adapter the same Config.Revisions, a map from a revision to its Serve
// config (RevisionMap makes one from a Go map), and set the Runner's
// RevisionA and RevisionB to the adapters' Deployers:
//
//	revs := ray.RevisionMap(map[string]json.RawMessage{"v1": cfgV1, "v2": cfgV2})
//	a, err := ray.New(ray.Config{Dashboard: "http://blue-head-svc:8265", Revisions: revs})
//	b, err := ray.New(ray.Config{Dashboard: "http://green-head-svc:8265", Revisions: revs})
//	da, err := a.Deployer()
//	db, err := b.Deployer()
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b, RevisionA: da, RevisionB: db}
//
// The Deployer is a separate value on purpose: an adapter built with a
// ServeConfig has none (Deployer returns an error), so a Runner never
// tracks revisions on a cluster whose adapter cannot deploy or recognise
// them. The contract:
//
//   - Deploy is KubeRay's pending-cluster pattern: one PUT of the
//     revision's config with target_capacity 0, so the new config lands on
//     a cluster that serves nothing. The Runner asks for it only while the
//     side carries weight 0 and is at capacity 0. Deploy refuses, with a
//     permanent *ServingError (ErrServing), to change the config of a
//     cluster at any other target capacity that runs applications: a
//     serving cluster is never redeployed. Deploying the revision the
//     cluster already runs writes nothing.
//   - The revision a cluster runs is observed, not remembered: Revision
//     reads the cluster and reports the revision whose config Ray reports
//     as deployed (the deployed_app_config of every application, and no
//     other application live), compared exactly, as the same JSON value,
//     with the config of the revision the side's role should run and of
//     the one this adapter last deployed or recognised. A config that
//     differs in one field is not the revision; a cluster running none of
//     them reports "". Updated: Ray has finished deploying it (every
//     application RUNNING, no deployment UPDATING or failed, nothing being
//     deleted); at target_capacity 0 there are no replicas to wait for.
//   - SetCapacity writes the config of the revision the cluster runs,
//     never another's. That revision lives in memory, set by Deploy and by
//     Revision; after a restart the Runner's next Revision, which it always
//     calls before applying anything, recognises it again. While it is
//     unknown, SetCapacity only takes capacity away (see below), and
//     Capacity observes every application the cluster runs.
//
// # A config the adapter does not recognise
//
// Someone else may PUT a Serve config onto a cluster (the Ray CLI, the
// dashboard's API, a GitOps tool): then the cluster runs a config of no
// revision this adapter knows, Revision reports "", and the strategy walks
// the side back (a canary side redeployed by someone else is aborted with
// reason RevisionChanged, see package strategy). Taking capacity away from
// a side that carries no traffic is always allowed, whatever it runs, so
// SetCapacity on such a cluster:
//
//   - lowers the target capacity, or keeps it: a request at or below the
//     cluster's target_capacity (null counts as 100; Steady only when it
//     is null already) is written with the deployed config left as it is.
//     Ray's PUT replaces the whole declarative config, so the body is the
//     config the cluster runs, rebuilt from the GET just sent, not a
//     revision's: every live application's deployed_app_config, sorted by
//     name, with proxy_location, http_options and grpc_options as Ray
//     reports them, and the new target_capacity. Ray does not report the
//     cluster's logging_config, and the PUT carries none, which Ray's
//     dashboard takes as leaving it as it is. The written value is rounded
//     up as for a known revision but never above the cluster's own
//     target_capacity; a request that changes nothing writes nothing, and
//     0 on a cluster with no live application writes nothing;
//   - refuses to raise it: a request above the cluster's target_capacity
//     (or Steady on a cluster that is not at null) writes nothing and
//     returns an error matching ErrUnknownRevision, not marked permanent;
//   - refuses, with the same error, to lower it when the config cannot be
//     written back as it runs: an application Ray reports without a
//     deployed_app_config, or with one naming another application.
//
// Then the Runner's Retry deploys the canary revision on the cluster at
// target_capacity 0 as usual (Deploy accepts a cluster at 0 whatever it
// runs), observes it and ramps again. Like every write here, the PUT is
// not conditional: a config someone writes between the GET and the PUT
// is replaced by the one the GET reported.
//
// Ray reports each application's config as submitted, but not the
// cluster-wide fields (proxy_location, http_options, grpc_options,
// logging_config) as submitted, so revisions are told apart by their
// applications: two revisions that differ only in cluster-wide fields
// read as the same. A revision's config must not change once deployed.
// A revision may name other applications than the previous one: the PUT
// replaces the cluster's whole declarative set, and the applications of
// the previous revision are deleted.
//
// # What goes over the wire
//
// SetCapacity sends PUT {Dashboard}/api/serve/applications/ with
// Content-Type application/json and the configured Serve config, every
// field of it kept, with "target_capacity" set to the percent asked (null
// for a Steady request). Before that it reads the cluster, and when the
// last applied config already has that target capacity and the managed
// applications as configured, it writes nothing: the comparison is with
// what the cluster reports, never with what this process sent last, so a
// cluster that restarted or was changed by hand is written again.
//
// Capacity sends GET {Dashboard}/api/serve/applications/?api_type=declarative
// and reads target_capacity and, for every managed application, its status
// and message, and for each of its deployments the status, message,
// num_replicas or autoscaling_config, target_num_replicas and the state of
// every replica.
//
// With revisions, Deploy sends that GET and, unless the cluster runs the
// revision already, the PUT with the revision's config and
// "target_capacity": 0; Revision sends the GET only, and reads each
// application's deployed_app_config besides. On a cluster that runs a
// config of no known revision, the PUT of a SetCapacity that lowers the
// capacity carries the config the GET reported, as described above, and
// the GET's proxy_location, http_options and grpc_options are read too.
//
// # Authentication and redirects
//
// With Config.Token set, every request carries "Bearer <Token>" in exactly
// one header, Config.TokenHeader:
//
//   - Authorization (the default), for a dashboard reached directly.
//   - X-Ray-Authorization, for a dashboard reached through the Kubernetes
//     API server's service proxy: the API server authenticates the caller
//     with Authorization (the HTTPClient's credentials) and removes that
//     header, and Ray's dashboard reads X-Ray-Authorization when a request
//     has no Authorization.
//
// A redirect is followed only within the dashboard's origin (the scheme,
// host and port of Config.Dashboard) and only if it keeps the method. Any
// other is refused, nothing is sent to its target, and the call fails with
// a *RedirectError naming it, marked rollout.Permanent. Refusing is safer
// than following without the token: a PUT redirected with 307 or 308 would
// still carry the Serve config, and net/http would keep Authorization on a
// redirect to another port of the same host, and X-Ray-Authorization on any
// redirect. A 301, 302 or 303 answering a PUT is refused too, as net/http
// would follow it with a GET and the write would be lost.
//
// # Ready capacity
//
// Ray's status RUNNING says little about capacity: an application is
// RUNNING while its deployments scale up to a new target capacity. upshift
// counts replicas instead, against the targets Ray derives from the target
// capacity (CapacityAdjusted: n * capacity / 100 rounded half up, at least
// 1 unless the capacity or n is 0, n itself for null):
//
//   - A deployment's full count is its num_replicas, or for an autoscaling
//     deployment its min_replicas: the floor Ray scales by target_capacity.
//     (While the target capacity rises, Ray's floor for a deployment with
//     initial_replicas is initial_replicas scaled, which is never lower;
//     the adapter counts against min_replicas either way.)
//   - Its ready share is min(RUNNING replicas, capacity-adjusted target)
//     over the full count, in percent rounded down. Ten replicas at 25%
//     aim for 3 and, with 3 running, are 30% ready; three replicas at 40%
//     aim for 1: 33%. Replicas above the target (stopping, or added by the
//     autoscaler under load) are not counted, so the share never exceeds
//     what Ray's rounding grants.
//   - An application is as ready as its least ready deployment, and the
//     side as its least ready application. A missing application is 0%
//     ready; a cluster running none of them holds nothing (capacity 0,
//     settled).
//   - Settled: every application RUNNING, every deployment HEALTHY with
//     no replica starting or stopping and as many RUNNING replicas as Ray's
//     target_num_replicas, which agrees with the capacity-adjusted target.
//   - Health: an application or deployment DEPLOY_FAILED or UNHEALTHY makes
//     the side unhealthy, with Ray's messages.
//
// # Notifications
//
// Ray Serve has no watch, so Ray and Deployer implement rollout.Notifier
// by polling, and only after a write: a SetCapacity or Deploy that sent a
// PUT (and only one that succeeded; one that wrote nothing polls nothing)
// starts a fast poll, one GET of the applications per poll, as Capacity
// sends. The first poll comes Config.NotifyMinInterval after the write
// (50 ms by default), each next one twice as late as the one before
// (100, 200, 400 ms...) up to Config.NotifyMaxInterval (2 s by default).
// A poll that sees a change wakes every subscriber and brings the interval
// back to the minimum; the poll that sees nothing change at the maximum
// interval is the last one until the next write. So a change the cluster
// shows at the n-th GET after a write is seen at most 50+100+...+
// min(50*2^(n-1), 2000) ms after it (sooner when earlier polls saw
// changes), and after the last change the poller makes 7 more GETs over
// 5.15 s (50+100+...+1600+2000 ms) and stops. With no subscriber, or
// nothing written, it sends nothing: the Runner's own requeue (its poll
// interval) covers what changes later, such as replicas that take minutes
// to start.
//
// A change is a change of what the adapter reports, not of the answer's
// bytes (which carry timestamps): the CapacityStatus Capacity would
// return, the target_capacity, and the revision status Revision would
// return for the revision this adapter last deployed or recognised. The
// baseline of the first poll is the cluster as the write read it just
// before the PUT, so the write itself (a new target capacity, a new
// config) wakes the subscribers at the first poll. A GET that fails counts
// as no change. The polls change nothing the adapter knows.
//
// A Ray and its Deployer share one poller: the Runner subscribes to both
// and each poll is one GET for all the subscribers, each woken on a change.
// A subscription ends with the ctx given to Notify; with the last one the
// pending poll is cancelled, a poll in flight is abandoned, and nothing
// is left running (no goroutine waits between polls: each is a timer of
// Config.Clock, clock.Real by default; tests drive fake.Clock).
//
// # Errors
//
// A 400 is Ray refusing the config: an *HTTPError carrying Ray's text,
// matching ErrRejected and marked rollout.Permanent, so the Runner aborts
// instead of retrying. Other 4xx (a missing or bad token: 401, 403) are
// permanent too, except 404 (rollout.ErrNotFound), 408 and 429. A refused
// redirect is a permanent *RedirectError. 5xx answers, timeouts and
// connection errors are returned as they are: the Runner retries them. An
// answer that is not the documented JSON is a *DecodeError; answers are
// read up to Config.MaxResponseBytes. An invalid Config is reported by New
// as *ConfigError values (one per field), each matching ErrInvalid; a
// revision's invalid config, by Deploy and Revision, as the same errors
// naming the revision, marked rollout.Permanent.
//
// Package fake has a Ray Serve emulator (fake.RayServe) that speaks the
// same API and computes replica targets as Ray's controller does, written
// apart from this package's arithmetic, for tests that run this adapter
// without a Ray cluster.
package ray
