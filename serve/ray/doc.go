// Package ray provisions one side of an upgrade on a Ray cluster: Ray is a
// rollout.CapacitySetter that moves the cluster's Serve target_capacity
// through the Ray dashboard's Serve REST API, and reports how much of the
// applications' full capacity is ready, from replica counts. It is part of
// the serving side of upshift (package serve).
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
// as *ConfigError values (one per field), each matching ErrInvalid.
//
// Package fake has a Ray Serve emulator (fake.RayServe) that speaks the
// same API and computes replica targets as Ray's controller does, written
// apart from this package's arithmetic, for tests that run this adapter
// without a Ray cluster.
package ray
