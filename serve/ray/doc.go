// Package ray provisions one side of an upgrade on a Ray cluster: [Ray] is a
// rollout.CapacitySetter that moves the cluster's Serve target_capacity
// through the Ray dashboard's Serve REST API and reports how much of the
// applications' full capacity is ready, from replica counts; its [Deployer]
// (a rollout.Deployer) puts a revision's Serve config on the cluster at
// target_capacity 0 and reports the revision the cluster runs. Two Ray
// clusters, one per side, with a traffic router in front (package gateway)
// make the managed capacity mode.
//
//	revs := ray.RevisionMap(map[string]json.RawMessage{"v1": cfgV1, "v2": cfgV2})
//	a, err := ray.New(ray.Config{Dashboard: "http://blue-head-svc:8265", Revisions: revs})
//	b, err := ray.New(ray.Config{Dashboard: "http://green-head-svc:8265", Revisions: revs})
//	da, err := a.Deployer()
//	db, err := b.Deployer()
//	r := &rollout.Runner{Strategy: s, Router: route, A: a, B: b, RevisionA: da, RevisionB: db}
//
// (With one [Config].ServeConfig and no Deployers, something else changes
// what the clusters run.) The Serve config is the user's own, sent as it
// is. A serving cluster is never redeployed, and one running a config of no
// known revision only loses capacity. Ray Serve has no watch: [Ray.Notify]
// polls briefly after each write, and reads reuse an answer younger than
// [Config].ReadMaxAge. The dashboard's token ([Config].Token) goes in one
// header. A 400 is Ray refusing the config ([HTTPError], permanent); 5xx,
// timeouts and connection errors are retried; redirects off the dashboard
// are refused ([RedirectError]); an invalid Config is a [ConfigError] per
// field, from [New]. Package [github.com/upshift-dev/upshift/serve/ray/raytest]
// emulates Ray Serve for tests. See docs/design/ray.md for more.
package ray
