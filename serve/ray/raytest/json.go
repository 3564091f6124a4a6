package raytest

import (
	"encoding/json"
	"sort"
	"time"
)

// The answer of GET, in Ray's field names.
type (
	rayInstanceJSON struct {
		ControllerInfo map[string]any        `json:"controller_info"`
		ProxyLocation  json.RawMessage       `json:"proxy_location,omitempty"`
		HTTPOptions    json.RawMessage       `json:"http_options,omitempty"`
		GRPCOptions    json.RawMessage       `json:"grpc_options,omitempty"`
		Proxies        map[string]any        `json:"proxies"`
		DeployMode     string                `json:"deploy_mode"`
		Applications   map[string]rayAppJSON `json:"applications"`
		TargetCapacity *float64              `json:"target_capacity"`
		TargetGroups   []map[string]any      `json:"target_groups,omitempty"`
	}
	rayAppJSON struct {
		Name                  string                `json:"name"`
		RoutePrefix           *string               `json:"route_prefix"`
		DocsPath              *string               `json:"docs_path"`
		Status                string                `json:"status"`
		Message               string                `json:"message"`
		LastDeployedTimeS     float64               `json:"last_deployed_time_s"`
		DeployedAppConfig     json.RawMessage       `json:"deployed_app_config"`
		Source                string                `json:"source"`
		Deployments           map[string]rayDepJSON `json:"deployments"`
		ExternalScalerEnabled bool                  `json:"external_scaler_enabled"`
	}
	rayDepJSON struct {
		Name              string           `json:"name"`
		Status            string           `json:"status"`
		StatusTrigger     string           `json:"status_trigger"`
		Message           string           `json:"message"`
		DeploymentConfig  map[string]any   `json:"deployment_config"`
		TargetNumReplicas int64            `json:"target_num_replicas"`
		RequiredResources map[string]any   `json:"required_resources"`
		Replicas          []rayReplicaJSON `json:"replicas"`
	}
	rayReplicaJSON struct {
		NodeID      string  `json:"node_id"`
		NodeIP      string  `json:"node_ip"`
		ActorID     string  `json:"actor_id"`
		ActorName   string  `json:"actor_name"`
		WorkerID    string  `json:"worker_id"`
		LogFilePath string  `json:"log_file_path"`
		ReplicaID   string  `json:"replica_id"`
		State       string  `json:"state"`
		PID         int     `json:"pid"`
		StartTimeS  float64 `json:"start_time_s"`
	}
)

const rayNodeID = "0000000000000000000000000000000000000000000000000000emul"

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// details renders the instance details; imperative lists no application
// (every emulated application is declarative).
func (s *Server) details(imperative bool) rayInstanceJSON {
	out := rayInstanceJSON{
		ControllerInfo: map[string]any{},
		Proxies:        map[string]any{},
		DeployMode:     "MULTI_APP",
		Applications:   map[string]rayAppJSON{},
		TargetCapacity: s.tc,
	}
	if !s.running {
		return out
	}
	out.ControllerInfo = map[string]any{
		"node_id": rayNodeID, "node_ip": "127.0.0.1", "actor_id": "emulated-controller",
		"actor_name": "SERVE_CONTROLLER_ACTOR", "worker_id": "emulated", "log_file_path": "/serve/controller.log",
	}
	out.ProxyLocation = s.clusterWide("proxy_location")
	out.HTTPOptions = s.clusterWide("http_options")
	out.GRPCOptions = s.clusterWide("grpc_options")
	out.Proxies[rayNodeID] = map[string]any{
		"node_id": rayNodeID, "node_ip": "127.0.0.1", "actor_id": "emulated-proxy",
		"actor_name": "SERVE_PROXY_ACTOR-" + rayNodeID, "status": "HEALTHY",
	}
	targets := []map[string]any{}
	if !imperative {
		for name, app := range s.apps {
			out.Applications[name] = s.appJSON(app)
			if app.routePrefix != nil {
				targets = append(targets, map[string]any{
					"route_prefix": *app.routePrefix, "protocol": "HTTP",
					"targets": []map[string]any{{"ip": "127.0.0.1", "port": 8000, "instance_id": rayNodeID, "name": "proxy"}},
				})
			}
		}
	}
	sort.Slice(targets, func(i, j int) bool {
		return targets[i]["route_prefix"].(string) < targets[j]["route_prefix"].(string)
	})
	out.TargetGroups = targets
	return out
}

// rayClusterWide are the cluster-wide fields of a Serve config that GET
// reports, with the value Ray gives each when a config leaves it out.
var rayClusterWide = map[string]string{
	"proxy_location": `"EveryNode"`,
	"http_options":   `{"host":"0.0.0.0","port":8000}`,
	"grpc_options":   `{"port":9000,"grpc_servicer_functions":[]}`,
}

// clusterWide is the value of a field of rayClusterWide in the applied
// config, its default when the config left it out.
func (s *Server) clusterWide(field string) json.RawMessage {
	return orDefault(s.config[field], rayClusterWide[field])
}

func orDefault(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	return raw
}

func (s *Server) appJSON(app *rayApp) rayAppJSON {
	a := rayAppJSON{
		Name: app.name, RoutePrefix: app.routePrefix, Status: app.status, Message: app.msg,
		LastDeployedTimeS: unixSeconds(app.deployedAt), DeployedAppConfig: app.raw,
		Source: "declarative", Deployments: map[string]rayDepJSON{},
	}
	if a.DeployedAppConfig == nil {
		a.DeployedAppConfig = json.RawMessage("null")
	}
	for dn, d := range app.deps {
		cfg := map[string]any{}
		for k, v := range d.spec.extra {
			cfg[k] = v
		}
		cfg["name"] = dn
		if d.spec.auto {
			ac := map[string]any{"min_replicas": d.spec.min, "max_replicas": d.spec.max, "initial_replicas": d.spec.initial}
			cfg["num_replicas"], cfg["autoscaling_config"] = nil, ac
		} else {
			cfg["num_replicas"], cfg["autoscaling_config"] = d.spec.num, nil
		}
		msg := ""
		if f, ok := s.faults[[2]string{app.name, dn}]; ok {
			msg = f.message
		} else if d.failed != "" {
			msg = rayHealthCheckMessage
		}
		dj := rayDepJSON{
			Name: dn, Status: d.status, StatusTrigger: d.trigger, Message: msg,
			DeploymentConfig: cfg, TargetNumReplicas: d.target,
			RequiredResources: map[string]any{"CPU": 1}, Replicas: []rayReplicaJSON{},
		}
		for i, r := range d.replicas {
			dj.Replicas = append(dj.Replicas, rayReplicaJSON{
				NodeID: rayNodeID, NodeIP: "127.0.0.1", ActorID: "actor-" + r.id, ActorName: "SERVE_REPLICA::" + app.name + "#" + r.id,
				WorkerID: "worker-" + r.id, LogFilePath: "/serve/replica_" + r.id + ".log",
				ReplicaID: r.id, State: r.state, PID: 1000 + i, StartTimeS: unixSeconds(r.started),
			})
		}
		a.Deployments[dn] = dj
	}
	return a
}
