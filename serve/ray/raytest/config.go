package raytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Defaults Ray gives what a config leaves out.
const (
	rayDefaultApp     = "default"
	rayAutoMaxDefault = 100 // the max_replicas of num_replicas "auto"
)

// rayConfig is a validated PUT body.
type rayConfig struct {
	top  map[string]json.RawMessage
	tc   *float64
	apps []rayAppConfig
}

type rayAppConfig struct {
	name        string
	routePrefix *string
	raw         json.RawMessage
	specs       []raySpec
}

// parseRayConfig validates a Serve config and lists every problem as
// "path: problem".
func parseRayConfig(body []byte) (*rayConfig, []string) {
	var problems []string
	bad := func(path, format string, args ...any) {
		problems = append(problems, path+": "+fmt.Sprintf(format, args...))
	}
	cfg := &rayConfig{}
	if err := json.Unmarshal(body, &cfg.top); err != nil || cfg.top == nil {
		bad("(body)", "want a JSON object: %v", err)
		return nil, problems
	}
	if raw, ok := cfg.top["target_capacity"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		var tc float64
		if err := json.Unmarshal(raw, &tc); err != nil {
			bad("target_capacity", "want a number or null")
		} else if tc < 0 || tc > 100 {
			bad("target_capacity", "%v is outside 0..100", tc)
		} else {
			cfg.tc = &tc
		}
	}
	var apps []json.RawMessage
	if raw, ok := cfg.top["applications"]; !ok {
		bad("applications", "field required")
	} else if err := json.Unmarshal(raw, &apps); err != nil || apps == nil {
		bad("applications", "want a list")
	}
	names, prefixes := map[string]int{}, map[string]int{}
	for i, raw := range apps {
		path := fmt.Sprintf("applications.%d", i)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			bad(path, "want an object")
			continue
		}
		a := rayAppConfig{name: rayDefaultApp, raw: append(json.RawMessage(nil), raw...)}
		if v, ok := fields["name"]; ok {
			if err := json.Unmarshal(v, &a.name); err != nil || a.name == "" {
				bad(path+".name", "want a non-empty string")
			}
		}
		if j, dup := names[a.name]; dup {
			bad(path+".name", "%q is already the name of applications.%d", a.name, j)
		}
		names[a.name] = i
		prefix := "/"
		a.routePrefix = &prefix
		if v, ok := fields["route_prefix"]; ok {
			if string(bytes.TrimSpace(v)) == "null" {
				a.routePrefix = nil
			} else if err := json.Unmarshal(v, &prefix); err != nil {
				bad(path+".route_prefix", "want a string or null")
			} else if msg := checkRoutePrefix(prefix); msg != "" {
				bad(path+".route_prefix", "%q %s", prefix, msg)
			}
		}
		if a.routePrefix != nil {
			if j, dup := prefixes[*a.routePrefix]; dup {
				bad(path+".route_prefix", "%q is already the route prefix of applications.%d", *a.routePrefix, j)
			}
			prefixes[*a.routePrefix] = i
		}
		var importPath string
		if v, ok := fields["import_path"]; !ok {
			bad(path+".import_path", "field required")
		} else if err := json.Unmarshal(v, &importPath); err != nil || importPath == "" {
			bad(path+".import_path", "want a non-empty string")
		}
		a.specs = parseRayDeployments(path, fields["deployments"], importPath, bad)
		cfg.apps = append(cfg.apps, a)
	}
	return cfg, problems
}

func checkRoutePrefix(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return `must start with "/"`
	case len(p) > 1 && strings.HasSuffix(p, "/"):
		return `must not end with "/" unless it is "/"`
	case strings.ContainsAny(p, "{}"):
		return "must not contain { or }"
	}
	return ""
}

func parseRayDeployments(path string, raw json.RawMessage, importPath string, bad func(path, format string, args ...any)) []raySpec {
	var list []json.RawMessage
	if len(raw) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &list); err != nil {
			bad(path+".deployments", "want a list")
			return nil
		}
	}
	if len(list) == 0 {
		name := importPath[strings.LastIndexAny(importPath, ".:")+1:]
		if name == "" {
			name = "ingress"
		}
		return []raySpec{{name: name, num: 1}}
	}
	var specs []raySpec
	seen := map[string]int{}
	for i, d := range list {
		dp := fmt.Sprintf("%s.deployments.%d", path, i)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(d, &fields); err != nil || fields == nil {
			bad(dp, "want an object")
			continue
		}
		sp := raySpec{num: 1, extra: fields}
		if err := json.Unmarshal(fields["name"], &sp.name); err != nil || sp.name == "" {
			bad(dp+".name", "field required: a non-empty string")
		}
		if j, dup := seen[sp.name]; dup {
			bad(dp+".name", "%q is already the name of deployments.%d", sp.name, j)
		}
		seen[sp.name] = i
		numSet := false
		if v, ok := fields["num_replicas"]; ok && string(bytes.TrimSpace(v)) != "null" {
			var auto string
			if json.Unmarshal(v, &auto) == nil && auto == "auto" {
				sp.auto, sp.min, sp.max = true, 1, rayAutoMaxDefault
			} else if n, ok := wholeNumber(v); ok && n >= 0 {
				sp.num, numSet = n, true
			} else {
				bad(dp+".num_replicas", "want a whole number >= 0 or \"auto\"")
			}
		}
		if v, ok := fields["autoscaling_config"]; ok && string(bytes.TrimSpace(v)) != "null" {
			if numSet {
				bad(dp, "num_replicas and autoscaling_config are mutually exclusive")
			}
			parseAutoscaling(dp+".autoscaling_config", v, &sp, bad)
		}
		specs = append(specs, sp)
	}
	return specs
}

func parseAutoscaling(path string, raw json.RawMessage, sp *raySpec, bad func(path, format string, args ...any)) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		bad(path, "want an object")
		return
	}
	sp.auto, sp.min, sp.max = true, 1, 1
	if sp.extra["num_replicas"] != nil {
		sp.max = rayAutoMaxDefault
	}
	get := func(name string, dst *int64, least int64) bool {
		v, ok := fields[name]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return false
		}
		n, ok := wholeNumber(v)
		if !ok || n < least {
			bad(path+"."+name, "want a whole number >= %d", least)
			return false
		}
		*dst = n
		return true
	}
	get("min_replicas", &sp.min, 0)
	get("max_replicas", &sp.max, 1)
	if sp.min > sp.max {
		bad(path, "min_replicas %d is more than max_replicas %d", sp.min, sp.max)
	}
	var initial int64
	if get("initial_replicas", &initial, 0) {
		if initial < sp.min || initial > sp.max {
			bad(path+".initial_replicas", "%d is outside min_replicas..max_replicas (%d..%d)", initial, sp.min, sp.max)
		}
		sp.initial = &initial
	}
}

func wholeNumber(raw json.RawMessage) (int64, bool) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) || f > 1<<24 || f < -(1<<24) {
		return 0, false
	}
	return int64(f), true
}
