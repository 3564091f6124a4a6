package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/upshift-dev/upshift/rollout"
)

// RevisionMap returns a Config.Revisions that looks revisions up in a copy
// of m. A revision m does not hold is an error.
func RevisionMap(m map[string]json.RawMessage) func(revision string) (json.RawMessage, error) {
	m = maps.Clone(m)
	return func(revision string) (json.RawMessage, error) {
		raw, ok := m[revision]
		if !ok {
			return nil, fmt.Errorf("no Serve config for revision %q", revision)
		}
		return raw, nil
	}
}

// Deployer is the rollout.Deployer of one Ray cluster, for
// rollout.Runner's RevisionA or RevisionB: Deploy puts a revision's Serve
// config on the cluster at target_capacity 0, and Revision reports the
// revision whose config the cluster runs. It shares what it learns with
// the Ray it came from, whose SetCapacity then writes that revision's
// config. Get it with (*Ray).Deployer. Safe for concurrent use.
//
// Deploy is KubeRay's pending-cluster pattern: the Runner asks for it only
// while the side carries weight 0 and is at capacity 0, and a serving
// cluster is never redeployed (Deploy accepts a cluster at 0 whatever it
// runs). The revision a cluster runs is observed, not remembered: Revision
// compares the config Ray reports as deployed, exactly, with the configs of
// the revision the side's role should run and of the one this adapter last
// deployed or recognised; after a restart the Runner's next Revision
// recognises it again. Someone else's PUT makes Revision report "" and the
// strategy walks the side back. Revisions are told apart by their
// applications only (Ray does not report the cluster-wide fields), and a
// revision that names other applications deletes the previous ones. See
// docs/design/ray.md for the details.
type Deployer struct{ r *Ray }

var _ rollout.Deployer = (*Deployer)(nil)

// Deployer returns the cluster's rollout.Deployer. It needs
// Config.Revisions; without it the adapter manages Config.ServeConfig
// only, reports no revision, and Deployer returns a *ConfigError for
// Revisions (so a Runner never takes an adapter without revisions for one
// that tracks them).
func (r *Ray) Deployer() (*Deployer, error) {
	if r.revisions == nil {
		return nil, &ConfigError{Field: "Revisions", Problem: "is required for a Deployer: without it the adapter deploys nothing and reports no revision"}
	}
	return &Deployer{r: r}, nil
}

// String returns the Serve endpoint the Deployer talks to.
func (dp *Deployer) String() string { return dp.r.putURL }

// Deploy puts revision's Serve config on the cluster: one GET, then, unless
// the cluster already runs that config, one PUT of it with target_capacity
// 0, so that the new config lands on a cluster that serves nothing. Ray
// builds the applications and their deployments with no replica; Revision
// reports Updated once it has.
//
// It writes nothing when the cluster already runs the revision's config (at
// any target capacity). It refuses, with a *ServingError (ErrServing,
// marked rollout.Permanent), to change the config of a cluster that may
// serve: one whose target_capacity is not 0 while it runs applications. A
// revision whose config Config.Revisions cannot give, or that is invalid,
// is a permanent *ConfigError naming the revision. Afterwards SetCapacity
// writes this revision's config.
func (dp *Deployer) Deploy(ctx context.Context, revision string) error {
	r := dp.r
	c, err := r.revisionConfig(revision)
	if err != nil {
		return err
	}
	d, err := r.get(ctx)
	if err != nil {
		return err
	}
	if runs(d, c) {
		r.setCurrent(c)
		return nil
	}
	if len(liveApps(d)) > 0 && (d.TargetCapacity == nil || *d.TargetCapacity != 0) {
		serr := &ServingError{URL: r.putURL, Revision: revision}
		if d.TargetCapacity != nil {
			tc := *d.TargetCapacity
			serr.TargetCapacity = &tc
		}
		if cur := r.current(); cur != nil && runs(d, cur) {
			serr.Running = cur.revision
		}
		return rollout.Permanent(serr)
	}
	if err := r.put(ctx, c.body(false, 0)); err != nil {
		return err
	}
	r.setCurrent(c)
	r.poll.wrote(d, deployGoal(revision))
	return nil
}

// Revision reads the cluster (one GET, or a fresh answer the adapter
// already has: see Ray's reuse of answers) and reports the revision whose
// config it runs: expect's, or the one this adapter last deployed or
// recognised, when every application of that revision's config is live
// with a deployed_app_config equal to it (the same JSON value) and no other
// application is live. Revision is "" when neither matches; the adapter
// then forgets the revision it knew if the cluster runs other
// applications, and SetCapacity refuses to write until a revision is
// recognised again.
//
// Updated reports that Ray has finished deploying it: no application is
// being deleted, and every application of the revision is RUNNING with
// each deployment its config lists present and none UPDATING, UNHEALTHY
// or DEPLOY_FAILED. At target_capacity 0 a deployment has no replica,
// which counts as done.
//
// An expect whose config Config.Revisions cannot give, or that is invalid,
// is a permanent *ConfigError naming the revision.
func (dp *Deployer) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	r := dp.r
	var want *serveConfig
	if expect != "" {
		c, err := r.revisionConfig(expect)
		if err != nil {
			return rollout.RevisionStatus{}, err
		}
		want = c
	}
	d, err := rollout.ReadOnce(ctx, r, r.read) // shared with the Ray's read in one reconcile
	if err != nil {
		return rollout.RevisionStatus{}, err
	}
	known := r.current()
	if known != nil && known.revision == expect {
		known = nil // expect is compared with its config as Config.Revisions gives it now
	}
	for _, c := range [2]*serveConfig{want, known} {
		if c != nil && runs(d, c) {
			r.setCurrent(c)
			return rollout.RevisionStatus{Revision: c.revision, Updated: rolledOut(d, c)}, nil
		}
	}
	if len(liveApps(d)) > 0 {
		r.setCurrent(nil) // the cluster runs a config of no known revision
	}
	return rollout.RevisionStatus{}, nil
}

// revisionConfig returns the validated config of revision, from
// Config.Revisions.
func (r *Ray) revisionConfig(revision string) (*serveConfig, error) {
	field := fmt.Sprintf("Revisions[%q]", revision)
	if revision == "" {
		return nil, rollout.Permanent(&ConfigError{Field: field, Problem: "a revision must have a name"})
	}
	raw, err := r.revisions(revision)
	if err != nil {
		return nil, rollout.Permanent(&ConfigError{Field: field, Problem: err.Error(), Err: err})
	}
	r.mu.Lock()
	for _, c := range [2]*serveConfig{r.cur, r.parsed} {
		if c != nil && c.revision == revision && bytes.Equal(c.raw, raw) {
			r.mu.Unlock()
			return c, nil
		}
	}
	r.mu.Unlock()
	c, errs := parseServeConfig(revision, field, raw)
	if len(errs) > 0 {
		return nil, rollout.Permanent(errors.Join(errs...))
	}
	r.mu.Lock()
	r.parsed = c
	r.mu.Unlock()
	return c, nil
}

// setCurrent records c (nil: unknown) as the config the cluster runs.
// The capacity asked belongs to the config it was asked for.
func (r *Ray) setCurrent(c *serveConfig) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != c {
		r.cur, r.asked = c, nil
	}
}

// liveApps returns the names of the applications the cluster runs and is
// not deleting, sorted.
func liveApps(d *instanceDetails) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(d.Applications)) {
		if d.Applications[name].Status != appDeleting {
			out = append(out, name)
		}
	}
	return out
}

// runs reports whether the cluster runs exactly c: every application of c
// live with c's config as its deployed_app_config (the same JSON value),
// and no other application live.
func runs(d *instanceDetails, c *serveConfig) bool {
	for _, a := range c.apps {
		if !deployedAs(d, a) || d.Applications[a.name].Status == appDeleting {
			return false
		}
	}
	return len(liveApps(d)) == len(c.apps)
}

// rolledOut reports whether Ray has finished deploying c, which the
// cluster runs: nothing is being deleted, and every application of c is
// RUNNING with the deployments its config lists present and none
// updating or failed.
func rolledOut(d *instanceDetails, c *serveConfig) bool {
	for _, app := range d.Applications {
		if app.Status == appDeleting {
			return false
		}
	}
	for _, a := range c.apps {
		app := d.Applications[a.name]
		if app.Status != appRunning || len(app.Deployments) == 0 {
			return false
		}
		for _, name := range a.deployments {
			if _, ok := app.Deployments[name]; !ok {
				return false
			}
		}
		for _, dep := range app.Deployments {
			switch dep.Status {
			case deploymentHealthy, deploymentUpscaling, deploymentDownscaling:
			default:
				return false
			}
		}
	}
	return true
}
