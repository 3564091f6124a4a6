package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/upshift-dev/upshift/rollout"
)

// lower carries out a SetCapacity on a cluster that runs no config of a
// revision this adapter knows (known is the one it knew, nil if none):
// only a request that takes capacity away, by writing back the config the
// cluster runs, as d reports it, with the new target_capacity. See
// SetCapacity.
func (r *Ray) lower(ctx context.Context, d *instanceDetails, known *serveConfig, req rollout.CapacityRequest) error {
	live := liveApps(d)
	held := 100.0 // null
	if d.TargetCapacity != nil {
		held = *d.TargetCapacity
	}
	if len(live) == 0 {
		if !req.Steady && req.Percent == 0 {
			return nil // nothing runs: there is no capacity to take away
		}
		return fmt.Errorf("%w: %s: no revision deployed or recognised by this adapter; capacity is raised only for a known revision",
			ErrUnknownRevision, r.putURL)
	}
	// The cluster runs other applications than known's, if any: forget
	// it, as Revision does, so Capacity observes what the cluster runs.
	r.mu.Lock()
	if r.cur != known { // a Deploy or Revision changed it meanwhile
		r.mu.Unlock()
		return fmt.Errorf("%w: %s: the revision changed while setting capacity", ErrUnknownRevision, r.putURL)
	}
	r.cur, r.asked = nil, nil
	r.mu.Unlock()
	if req.Steady && d.TargetCapacity != nil || !req.Steady && float64(req.Percent) > held {
		asked := "null"
		if !req.Steady {
			asked = strconv.Itoa(int(req.Percent))
		}
		return fmt.Errorf("%w: %s: the cluster runs a config of no known revision (applications %q) at target_capacity %s: refusing to raise it to %s; capacity is only taken away from such a cluster",
			ErrUnknownRevision, r.putURL, live, formatTargetCapacity(d.TargetCapacity), asked)
	}
	dc, err := r.deployedConfig(d, live)
	if err != nil {
		return err
	}
	write := req
	if !req.Steady {
		write.Percent = min(roundUp(d, dc, req.Percent), int32(math.Floor(held)))
	}
	return r.putCapacity(ctx, d, dc, nil, req, write)
}

// deployedConfig rebuilds, from a GET answer, the Serve config the cluster
// runs: the deployed_app_config of each application in live (sorted by
// name), and the cluster-wide proxy_location, http_options and
// grpc_options as reported. Ray does not report the cluster's
// logging_config; a PUT without one leaves it as it is. An application
// without a deployed_app_config, or one whose config names another
// application, is an error matching ErrUnknownRevision.
func (r *Ray) deployedConfig(d *instanceDetails, live []string) (*serveConfig, error) {
	apps := make([]json.RawMessage, 0, len(live))
	for _, name := range live {
		raw := bytes.TrimSpace(d.Applications[name].DeployedAppConfig)
		if len(raw) == 0 || string(raw) == "null" {
			return nil, fmt.Errorf("%w: %s: application %q reports no deployed_app_config: the config the cluster runs cannot be written back with a lower target_capacity",
				ErrUnknownRevision, r.putURL, name)
		}
		apps = append(apps, raw)
	}
	top := map[string]json.RawMessage{}
	for field, raw := range map[string]json.RawMessage{
		"proxy_location": d.ProxyLocation, "http_options": d.HTTPOptions, "grpc_options": d.GRPCOptions,
	} {
		if raw = bytes.TrimSpace(raw); len(raw) > 0 && string(raw) != "null" {
			top[field] = raw
		}
	}
	list, err := json.Marshal(apps)
	if err == nil {
		top["applications"] = list
		var body []byte
		if body, err = json.Marshal(top); err == nil {
			c, errs := parseServeConfig("", "deployed config", body)
			if err = errors.Join(errs...); err == nil {
				for i, name := range live {
					if c.names[i] != name {
						err = fmt.Errorf("the deployed_app_config of application %q names application %q", name, c.names[i])
						break
					}
				}
				if err == nil {
					return c, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%w: %s: the config the cluster runs cannot be written back: %v", ErrUnknownRevision, r.putURL, err)
}

// formatTargetCapacity is tc as Ray writes it: a number, or null.
func formatTargetCapacity(tc *float64) string {
	if tc == nil {
		return "null"
	}
	return strconv.FormatFloat(*tc, 'f', -1, 64)
}
