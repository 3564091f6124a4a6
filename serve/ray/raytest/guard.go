package raytest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ServingFunc sets the func that reports the share of traffic (0..100) the
// cluster serves, read at every PUT while Options.GuardRedeploys is
// set: fake.Router.Serving(side) for a cluster behind a fake.Router. nil (the
// default) counts as serving nothing.
func (s *Server) ServingFunc(f func() int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = f
}

// Violations returns the PUTs that GuardRedeploys refused, one line each
// naming what they changed and why the cluster could not take it; nil when
// there were none.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// DeployedConfig returns the config of an application as the last accepted
// PUT gave it (what Ray reports as its deployed_app_config), and whether
// the cluster runs that application: false before Serve starts, after a
// DELETE, and for an application the last PUT no longer names.
func (s *Server) DeployedConfig(app string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied == nil || !s.applied.apps[app] {
		return nil, false
	}
	a, ok := s.apps[app]
	if !ok || a.raw == nil {
		return nil, false
	}
	return append(json.RawMessage(nil), a.raw...), true
}

// servingShare calls the serving func when the guard needs it, without
// holding the lock: the func may read this cluster.
func (s *Server) servingShare() int32 {
	if !s.opts.GuardRedeploys {
		return 0
	}
	s.mu.Lock()
	f := s.serving
	s.mu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

// redeployViolation describes why GuardRedeploys refuses cfg, "" when it
// does not: cfg changes the applied config (target_capacity aside) while
// the cluster is not at target_capacity 0, cfg does not ask 0, or the
// cluster serves share percent of the traffic.
func (s *Server) redeployViolation(cfg *rayConfig, share int32) string {
	if !s.opts.GuardRedeploys || s.applied == nil {
		return ""
	}
	changes := s.configChanges(cfg)
	if len(changes) == 0 {
		return ""
	}
	var reasons []string
	if s.tc == nil || *s.tc != 0 {
		reasons = append(reasons, "the cluster is at target_capacity "+formatTC(s.tc))
	}
	if cfg.tc == nil || *cfg.tc != 0 {
		reasons = append(reasons, "the PUT asks target_capacity "+formatTC(cfg.tc))
	}
	if share > 0 {
		reasons = append(reasons, fmt.Sprintf("the cluster serves %d%% of traffic", share))
	}
	if len(reasons) == 0 {
		return ""
	}
	return fmt.Sprintf("PUT changes %s while %s", strings.Join(changes, ", "), strings.Join(reasons, " and "))
}

// configChanges lists what cfg changes in the applied config, apart from
// target_capacity: top-level fields, and applications added, removed or
// changed.
func (s *Server) configChanges(cfg *rayConfig) []string {
	var changes []string
	fields := map[string]bool{}
	for k := range s.config {
		fields[k] = true
	}
	for k := range cfg.top {
		fields[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if k == "target_capacity" || k == "applications" {
			continue
		}
		if _, ok := cfg.top[k]; !ok && k == "logging_config" {
			continue // a PUT without one keeps the cluster's (see apply)
		}
		if def, ok := rayClusterWide[k]; ok {
			// The value GET reports, which a client may write back.
			if !sameJSON(s.clusterWide(k), orDefault(cfg.top[k], def)) {
				changes = append(changes, fmt.Sprintf("field %q", k))
			}
			continue
		}
		if !sameJSON(orNull(s.config[k]), orNull(cfg.top[k])) {
			changes = append(changes, fmt.Sprintf("field %q", k))
		}
	}
	next := map[string]json.RawMessage{}
	for _, ac := range cfg.apps {
		next[ac.name] = ac.raw
	}
	names := maps.Clone(s.applied.apps)
	for name := range next {
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		raw, named := next[name]
		switch app := s.apps[name]; {
		case !named:
			changes = append(changes, fmt.Sprintf("application %q (removed)", name))
		case !s.applied.apps[name]:
			changes = append(changes, fmt.Sprintf("application %q (added)", name))
		case app == nil || !sameJSON(app.raw, raw):
			changes = append(changes, fmt.Sprintf("application %q", name))
		}
	}
	return changes
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func formatTC(tc *float64) string {
	if tc == nil {
		return "null"
	}
	return strconv.FormatFloat(*tc, 'f', -1, 64)
}

// PutByOther applies config as a PUT from another client of the dashboard
// would (a person with the Ray CLI, a GitOps tool, another operator):
// validated as a PUT is, and on success applied, counted by Puts and
// recorded in History as a PUT whose Arg ends in " by another writer".
// GuardRedeploys never refuses it and records no violation: the guard
// checks what the client under test writes, and another writer redeploys
// a serving cluster when it pleases. It does not read ServingFunc, so it
// may be called while the caller holds a lock that func takes. A config
// Ray would refuse is an error listing every problem, and changes
// nothing.
func (s *Server) PutByOther(config json.RawMessage) error {
	cfg, problems := parseRayConfig(config)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(problems) > 0 {
		err := fmt.Errorf("raytest: %d validation error(s) for ServeDeploySchema: %s", len(problems), strings.Join(problems, "; "))
		s.hist.add(s.opts.Clock, "PUT", "invalid by another writer", err)
		return err
	}
	s.lastPut = append([]byte(nil), config...)
	s.apply(cfg)
	s.hist.add(s.opts.Clock, "PUT", "target_capacity="+formatTC(cfg.tc)+" by another writer", nil)
	return nil
}
