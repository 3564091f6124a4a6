// Package ray provisions one side of an upgrade on a Ray cluster: [Ray] is a
// rollout.CapacitySetter that moves the cluster's Serve target_capacity
// through the Ray dashboard's Serve REST API and reports how much of the
// applications' full capacity is ready, from replica counts; its [Deployer]
// (a rollout.Deployer) puts a revision's Serve config on the cluster at
// target_capacity 0 and reports the revision the cluster runs. It is part of
// the serving side of upshift (package serve).
//
// Two Ray clusters, one per side, with a traffic router in front (a Gateway
// API route, see package gateway) make the managed capacity mode: the canary
// cluster's target capacity rises ahead of its traffic, the stable cluster's
// falls behind it, and at completion the winner returns to a null target
// capacity, so that Ray's autoscaling floors are not left pinned.
//
// With one Serve config ([Config].ServeConfig), something else changes what
// the clusters run:
//
//	a, err := ray.New(ray.Config{Dashboard: "http://blue-head-svc:8265", ServeConfig: cfg})
//	b, err := ray.New(ray.Config{Dashboard: "http://green-head-svc:8265", ServeConfig: cfg})
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b}
//
// To let the Runner put each revision on its cluster, give both adapters the
// same [Config].Revisions ([RevisionMap] makes one from a Go map) and set the
// Runner's RevisionA and RevisionB to their Deployers ([Ray.Deployer]):
//
//	revs := ray.RevisionMap(map[string]json.RawMessage{"v1": cfgV1, "v2": cfgV2})
//	a, err := ray.New(ray.Config{Dashboard: "http://blue-head-svc:8265", Revisions: revs})
//	b, err := ray.New(ray.Config{Dashboard: "http://green-head-svc:8265", Revisions: revs})
//	da, err := a.Deployer()
//	db, err := b.Deployer()
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b, RevisionA: da, RevisionB: db}
//
// What to know:
//   - the Serve config is the user's own (Ray's ServeDeploySchema as JSON),
//     sent as it is; only the parts of Ray's answers the adapter needs are
//     decoded, so the wire schema is not part of this package's API;
//   - a serving cluster is never redeployed ([Deployer.Deploy]), and a
//     cluster running a config of no known revision only loses capacity
//     ([Ray.SetCapacity]);
//   - ready capacity counts replicas against Ray's rounding ([Ray.Capacity]);
//   - Ray Serve has no watch: [Ray.Notify] polls briefly after each write,
//     and reads reuse an answer younger than [Config].ReadMaxAge (2 s)
//     unless the adapter wrote since (see [Ray]);
//   - with [Config].Token the dashboard's token goes in one header
//     ([Config].TokenHeader); redirects off the dashboard are refused
//     ([RedirectError]);
//   - a 400 is Ray refusing the config ([HTTPError], permanent: the Runner
//     aborts); 5xx, timeouts and connection errors are retried; an invalid
//     Config is a [ConfigError] per field, from [New].
//
// Package [github.com/upshift-dev/upshift/serve/ray/raytest] has a Ray Serve
// emulator that speaks the same API and computes replica targets as Ray's
// controller does, written apart from this package's arithmetic, for tests
// without a Ray cluster.
package ray
