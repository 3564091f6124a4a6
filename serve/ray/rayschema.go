package ray

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Application statuses Ray Serve reports for an application.
const (
	appNotStarted   = "NOT_STARTED"
	appDeploying    = "DEPLOYING"
	appDeployFailed = "DEPLOY_FAILED"
	appRunning      = "RUNNING"
	appUnhealthy    = "UNHEALTHY"
	appDeleting     = "DELETING"
)

// Deployment statuses Ray Serve reports for a deployment.
const (
	deploymentUpdating     = "UPDATING"
	deploymentHealthy      = "HEALTHY"
	deploymentUnhealthy    = "UNHEALTHY"
	deploymentDeployFailed = "DEPLOY_FAILED"
	deploymentUpscaling    = "UPSCALING"
	deploymentDownscaling  = "DOWNSCALING"
)

// replicaRunning is the one replica state that serves requests. The others
// Ray reports (STARTING, UPDATING, RECOVERING, STOPPING, PENDING_MIGRATION)
// count as not ready.
const replicaRunning = "RUNNING"

// maxReplicas bounds every replica count the decoder accepts, so that the
// arithmetic on them cannot overflow.
const maxReplicas = 1 << 24

// instanceDetails is the part of Ray Serve's GET /api/serve/applications/
// answer (its ServeInstanceDetails) that upshift reads. Fields it does not
// name (controller_info, proxies, target_groups...) are ignored when
// decoding; the cluster-wide fields a PUT also takes are kept as they are,
// to write them back (deployedConfig). The zero value is a cluster
// without Serve.
type instanceDetails struct {
	// TargetCapacity is the target_capacity of the last applied config:
	// nil for null (no capacity pinned), else 0..100.
	TargetCapacity *float64 `json:"target_capacity"`
	// ProxyLocation, HTTPOptions and GRPCOptions are the cluster-wide
	// settings Serve runs with, as Ray reports them (absent: nil).
	ProxyLocation json.RawMessage `json:"proxy_location"`
	HTTPOptions   json.RawMessage `json:"http_options"`
	GRPCOptions   json.RawMessage `json:"grpc_options"`
	// Applications are the live applications by name.
	Applications map[string]applicationDetails `json:"applications"`
}

// applicationDetails is one application in instanceDetails.
type applicationDetails struct {
	Name        string  `json:"name"`
	RoutePrefix *string `json:"route_prefix"`
	// Status is one of the App* constants; Message says why.
	Status            string  `json:"status"`
	Message           string  `json:"message"`
	LastDeployedTimeS float64 `json:"last_deployed_time_s"`
	// DeployedAppConfig is the application's config as it was submitted
	// (null for applications not deployed from a config).
	DeployedAppConfig json.RawMessage `json:"deployed_app_config"`
	// Source is "declarative" or "imperative".
	Source      string                       `json:"source"`
	Deployments map[string]deploymentDetails `json:"deployments"`
}

// deploymentDetails is one deployment of an application.
type deploymentDetails struct {
	Name string `json:"name"`
	// Status is one of the Deployment* constants; Message says why.
	Status           string           `json:"status"`
	StatusTrigger    string           `json:"status_trigger"`
	Message          string           `json:"message"`
	DeploymentConfig deploymentConfig `json:"deployment_config"`
	// TargetNumReplicas is Ray's current target: the capacity-adjusted
	// num_replicas, or the autoscaler's decision within its
	// capacity-adjusted bounds.
	TargetNumReplicas int64            `json:"target_num_replicas"`
	Replicas          []replicaDetails `json:"replicas"`
}

// deploymentConfig holds the replica settings of a deployment as applied.
type deploymentConfig struct {
	// NumReplicas is a JSON number, "auto" or null; see Replicas.
	NumReplicas       json.RawMessage    `json:"num_replicas"`
	AutoscalingConfig *autoscalingConfig `json:"autoscaling_config"`
}

// autoscalingConfig holds the replica bounds of an autoscaling deployment.
// Nil fields take Ray's defaults (min 1, max 1, no initial).
type autoscalingConfig struct {
	MinReplicas     *int64 `json:"min_replicas"`
	MaxReplicas     *int64 `json:"max_replicas"`
	InitialReplicas *int64 `json:"initial_replicas"`
}

// replicaDetails is one live replica.
type replicaDetails struct {
	ReplicaID string `json:"replica_id"`
	State     string `json:"state"`
}

// Autoscaling reports whether the deployment autoscales: it has an
// autoscaling_config, or num_replicas is "auto".
func (c *deploymentConfig) autoscaling() bool {
	if c.AutoscalingConfig != nil {
		return true
	}
	var s string
	return json.Unmarshal(c.NumReplicas, &s) == nil && s == "auto"
}

// DecodeError reports a GET answer that is not the documented shape: bad
// JSON, or a value out of range. Field names the JSON path when known.
// Retrying may help (a proxy answered, a body was cut short), so it is not
// marked permanent.
type DecodeError struct {
	Field string
	Err   error
}

func (e *DecodeError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("ray: decoding the Serve status: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("ray: decoding the Serve status: %v", e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// decodeInstanceDetails decodes a GET /api/serve/applications/ answer and
// checks the values upshift computes with: target_capacity within 0..100,
// replica counts within 0..2^24, replica settings well formed. It never
// panics; anything else is a *DecodeError.
func decodeInstanceDetails(b []byte) (*instanceDetails, error) {
	var d instanceDetails
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, &DecodeError{Err: fmt.Errorf("want a JSON object, got %q", head(b))}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, &DecodeError{Err: err}
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func (d *instanceDetails) validate() error {
	if tc := d.TargetCapacity; tc != nil && (math.IsNaN(*tc) || *tc < 0 || *tc > 100) {
		return &DecodeError{Field: "target_capacity", Err: fmt.Errorf("%v is outside 0..100", *tc)}
	}
	for _, an := range slices.Sorted(maps.Keys(d.Applications)) {
		app := d.Applications[an]
		for _, dn := range slices.Sorted(maps.Keys(app.Deployments)) {
			dep := app.Deployments[dn]
			path := fmt.Sprintf("applications[%q].deployments[%q]", an, dn)
			if err := countOK(path+".target_num_replicas", dep.TargetNumReplicas); err != nil {
				return err
			}
			if _, _, err := dep.DeploymentConfig.full(path + ".deployment_config"); err != nil {
				return err
			}
			if len(dep.Replicas) > maxReplicas {
				return &DecodeError{Field: path + ".replicas", Err: fmt.Errorf("%d replicas is more than %d", len(dep.Replicas), maxReplicas)}
			}
		}
	}
	return nil
}

func countOK(field string, v int64) error {
	if v < 0 || v > maxReplicas {
		return &DecodeError{Field: field, Err: fmt.Errorf("%d is outside 0..%d", v, maxReplicas)}
	}
	return nil
}

// full returns the deployment's replica count at full capacity and whether
// it autoscales: num_replicas for a fixed deployment (1 when absent, Ray's
// default), min_replicas for an autoscaling one (the floor Ray scales by
// target_capacity; 1 when absent).
func (c *deploymentConfig) full(path string) (int64, bool, error) {
	if c.autoscaling() {
		a := c.AutoscalingConfig
		if a == nil {
			return 1, true, nil // "auto": Ray's default floor of 1
		}
		lo, hi := int64(1), int64(1)
		if a.MinReplicas != nil {
			lo = *a.MinReplicas
		}
		if a.MaxReplicas != nil {
			hi = *a.MaxReplicas
		}
		if err := countOK(path+".autoscaling_config.min_replicas", lo); err != nil {
			return 0, true, err
		}
		if err := countOK(path+".autoscaling_config.max_replicas", hi); err != nil {
			return 0, true, err
		}
		if a.InitialReplicas != nil {
			if err := countOK(path+".autoscaling_config.initial_replicas", *a.InitialReplicas); err != nil {
				return 0, true, err
			}
		}
		return lo, true, nil
	}
	raw := bytes.TrimSpace(c.NumReplicas)
	if len(raw) == 0 || string(raw) == "null" {
		return 1, false, nil
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err != nil || n != math.Trunc(n) {
		return 0, false, &DecodeError{Field: path + ".num_replicas", Err: fmt.Errorf("want a whole number or \"auto\", got %s", head(raw))}
	}
	if n < 0 || n > maxReplicas {
		return 0, false, &DecodeError{Field: path + ".num_replicas", Err: fmt.Errorf("%v is outside 0..%d", n, maxReplicas)}
	}
	return int64(n), false, nil
}
