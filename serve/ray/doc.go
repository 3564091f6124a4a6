// Package serve provisions one side of an upgrade on a Ray cluster: Ray is
// a rollout.CapacitySetter that moves the cluster's Serve target_capacity
// through the Ray dashboard's Serve REST API, and reports how much of the
// applications' full capacity is ready, from replica counts.
//
// Two Ray clusters, one per side, with a traffic router in front (a Gateway
// API route, see package gateway) make the managed capacity mode: the
// canary cluster's target capacity rises ahead of its traffic, the stable
// cluster's falls behind it, and at completion the winner returns to a
// null target capacity, so that Ray's autoscaling floors are not left
// pinned.
//
//	a, err := serve.New(serve.Config{Dashboard: "http://blue-head-svc:8265", ServeConfig: cfg})
//	b, err := serve.New(serve.Config{Dashboard: "http://green-head-svc:8265", ServeConfig: cfg})
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b}
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
// instead of retrying. Other 4xx (a bad token) are permanent too, except
// 404 (rollout.ErrNotFound), 408 and 429. 5xx answers, timeouts and
// connection errors are returned as they are: the Runner retries them. An
// answer that is not the documented JSON is a *DecodeError; answers are
// read up to Config.MaxResponseBytes.
//
// Package fake has a Ray Serve emulator (fake.RayServe) that speaks the
// same API, for tests that run this adapter without a Ray cluster.
package serve
