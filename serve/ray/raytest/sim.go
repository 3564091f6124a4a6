package raytest

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// apply makes cfg the cluster's declarative config.
func (s *Server) apply(cfg *rayConfig) {
	s.init()
	next := &rayApplied{apps: map[string]bool{}, tc: cfg.tc}
	for _, ac := range cfg.apps {
		next.apps[ac.name] = true
	}
	s.dir = rayCapacityDirection(s.applied, next, s.dir)
	if old, ok := s.config["logging_config"]; ok && s.running {
		if _, set := cfg.top["logging_config"]; !set {
			// Ray's dashboard applies a logging_config only when a PUT has
			// one: without, the cluster keeps its own.
			cfg.top = maps.Clone(cfg.top)
			cfg.top["logging_config"] = old
		}
	}
	s.running, s.applied = true, next
	s.tc, s.config = cfg.tc, cfg.top
	keep := map[string]bool{}
	for _, ac := range cfg.apps {
		keep[ac.name] = true
		app, ok := s.apps[ac.name]
		if !ok || app.status == rayAppDeleting {
			app = &rayApp{name: ac.name, deps: map[string]*rayDep{}, build: s.opts.BuildPolls}
			s.apps[ac.name] = app
		}
		if ok && sameJSON(app.raw, ac.raw) {
			continue // a capacity change only: statuses() marks the scaling
		}
		app.routePrefix, app.raw, app.specs = ac.routePrefix, ac.raw, ac.specs
		app.deployedAt = s.now()
		app.status, app.msg = rayAppDeploying, ""
		if app.build <= 0 {
			s.build(app)
		}
	}
	for name, app := range s.apps {
		if !keep[name] {
			app.status, app.msg, app.specs = rayAppDeleting, "", nil
			for _, d := range app.deps {
				d.target = 0
			}
		}
	}
	s.reconcile()
	s.statuses()
}

// build creates or updates an application's deployments from its specs.
func (s *Server) build(app *rayApp) {
	want := map[string]bool{}
	for _, sp := range app.specs {
		want[sp.name] = true
		d, ok := app.deps[sp.name]
		if !ok {
			d = &rayDep{}
			app.deps[sp.name] = d
		}
		if !ok || !reflect.DeepEqual(d.spec, sp) {
			d.status, d.trigger, d.failed = rayDepUpdating, "CONFIG_UPDATE_STARTED", ""
		}
		d.spec = sp
	}
	for name, d := range app.deps {
		if !want[name] {
			d.spec, d.target = raySpec{name: name}, 0
			d.status = rayDepDownscaling
		}
	}
}

// targetOf is a deployment's target now (its target_num_replicas). A fixed
// deployment aims for num_replicas capacity-adjusted, as Ray's
// DeploymentState.deploy sets it. An autoscaling deployment aims for what
// its policy decides, clipped to the bounds of the current target capacity
// and direction (Ray's get_decision_num_replicas, then apply_bounds). The
// emulated policy decides the demand (SetDemand; 0 until set) and acts at
// once, as if its upscale and downscale delays had passed, so the target
// Ray registers a deployment with on a deploy (initial_replicas after a
// config change) is superseded in the same step.
func (s *Server) targetOf(app string, d *rayDep) int64 {
	if d.spec.auto {
		return rayApplyBounds(s.demand[[2]string{app, d.spec.name}], d.spec, s.tc, s.dir)
	}
	return rayCapacityAdjusted(d.spec.num, s.tc)
}

// reconcile starts and stops replicas toward every deployment's target.
func (s *Server) reconcile() {
	for an, app := range s.apps {
		for dn, d := range app.deps {
			d.target = 0
			if _, configured := s.specIndex(app, dn); configured && app.status != rayAppDeleting {
				d.target = s.targetOf(an, d)
			}
			live := 0
			for _, r := range d.replicas {
				if r.state != rayReplicaStopping {
					live++
				}
			}
			loop := s.loops[[2]string{an, dn}]
			for ; int64(live) < d.target; live++ {
				s.seq++
				st := rayReplicaStarting
				if s.opts.StartPolls <= 0 && !loop {
					st = rayReplicaRunning
				}
				d.replicas = append(d.replicas, &rayReplica{id: fmt.Sprintf("%s#%06d", dn, s.seq), state: st, started: s.now()})
			}
			// Stop the surplus: starting replicas first, then the newest.
			for i := len(d.replicas) - 1; i >= 0 && int64(live) > d.target; i-- {
				if r := d.replicas[i]; r.state == rayReplicaStarting {
					r.state, r.age = rayReplicaStopping, 0
					live--
				}
			}
			for i := len(d.replicas) - 1; i >= 0 && int64(live) > d.target; i-- {
				if r := d.replicas[i]; r.state != rayReplicaStopping {
					r.state, r.age = rayReplicaStopping, 0
					live--
				}
			}
			if s.opts.StopPolls <= 0 {
				d.replicas = dropStopped(d.replicas, 0)
			}
		}
	}
}

// specIndex reports whether the deployment is still configured.
func (s *Server) specIndex(app *rayApp, name string) (int, bool) {
	for i, sp := range app.specs {
		if sp.name == name {
			return i, true
		}
	}
	return -1, false
}

func dropStopped(rs []*rayReplica, after int) []*rayReplica {
	kept := rs[:0]
	for _, r := range rs {
		if r.state == rayReplicaStopping && r.age >= after {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// tick is one poll: builds progress, replicas start and stop.
func (s *Server) tick() {
	for _, app := range s.apps {
		if app.build > 0 {
			app.build--
			if app.build == 0 {
				s.build(app)
			}
		}
		for dn, d := range app.deps {
			failed := s.faults[[2]string{app.name, dn}].status == rayDepDeployFailed
			loop := s.loops[[2]string{app.name, dn}]
			for _, r := range d.replicas {
				r.age++
				if r.state != rayReplicaStarting || r.age < s.opts.StartPolls || failed {
					continue
				}
				if loop { // it fails its first health check and is replaced
					r.state, r.age = rayReplicaStopping, 0
					healthCheckFailed(d)
					continue
				}
				r.state = rayReplicaRunning
			}
			d.replicas = dropStopped(d.replicas, s.opts.StopPolls)
		}
	}
	s.reconcile()
	s.statuses()
}

// statuses derives deployment and application statuses; applications
// whose deletion finished are removed.
func (s *Server) statuses() {
	for an, app := range s.apps {
		var problems []string
		failedStatus := ""
		updating := app.build > 0
		for _, dn := range slices.Sorted(maps.Keys(app.deps)) {
			d := app.deps[dn]
			if _, ok := s.specIndex(app, dn); !ok && len(d.replicas) == 0 {
				delete(app.deps, dn)
				continue
			}
			running, other := 0, 0
			for _, r := range d.replicas {
				if r.state == rayReplicaRunning {
					running++
				} else {
					other++
				}
			}
			if f, ok := s.faults[[2]string{an, dn}]; ok {
				d.status, d.trigger = f.status, "HEALTH_CHECK_FAILED"
				if f.status == rayDepDeployFailed {
					d.trigger = "REPLICA_STARTUP_FAILED"
					failedStatus = rayAppDeployFailed
				} else if failedStatus == "" {
					failedStatus = rayAppUnhealthy
				}
				problems = append(problems, fmt.Sprintf("deployment %q: %s", dn, f.message))
				continue
			}
			if d.failed != "" {
				if int64(running) == d.target && other == 0 {
					d.status, d.trigger, d.failed = rayDepHealthy, rayTriggerUnspecified, ""
					continue
				}
				d.status, d.trigger = d.failed, rayTriggerHealthCheckFailed
				if d.failed == rayDepDeployFailed {
					failedStatus = rayAppDeployFailed
				} else if failedStatus == "" {
					failedStatus = rayAppUnhealthy
				}
				problems = append(problems, fmt.Sprintf("deployment %q: %s", dn, rayHealthCheckMessage))
				continue
			}
			if int64(running) == d.target && other == 0 {
				switch d.status {
				case rayDepUpscaling:
					d.trigger = "UPSCALE_COMPLETED"
				case rayDepDownscaling:
					d.trigger = "DOWNSCALE_COMPLETED"
				case rayDepHealthy:
				default:
					d.trigger = "CONFIG_UPDATE_COMPLETED"
				}
				d.status = rayDepHealthy
				continue
			}
			if d.status == rayDepHealthy || d.status == rayDepUnhealthy || d.status == rayDepDeployFailed {
				d.status, d.trigger = rayDepUpscaling, "AUTOSCALING"
				if int64(running+other) > d.target {
					d.status = rayDepDownscaling
				}
			}
			updating = updating || d.status == rayDepUpdating
		}
		switch {
		case app.status == rayAppDeleting:
			if len(app.deps) == 0 {
				delete(s.apps, an)
			}
		case failedStatus != "":
			app.status, app.msg = failedStatus, strings.Join(problems, "; ")
		case updating:
			app.status, app.msg = rayAppDeploying, ""
		default:
			app.status, app.msg = rayAppRunning, ""
		}
	}
}

// healthCheckFailed records that a replica of d failed its health check:
// Ray makes an UPDATING (or already DEPLOY_FAILED) deployment DEPLOY_FAILED
// and any other UNHEALTHY.
func healthCheckFailed(d *rayDep) {
	if d.failed == "" {
		d.failed = rayDepUnhealthy
		if d.status == rayDepUpdating || d.status == rayDepDeployFailed {
			d.failed = rayDepDeployFailed
		}
	}
	d.status, d.trigger = d.failed, rayTriggerHealthCheckFailed
}

func (s *Server) shutdown() {
	s.running, s.tc, s.config = false, nil, nil
	s.applied, s.dir = nil, rayDirNone // a new controller remembers nothing
	s.apps = map[string]*rayApp{}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
