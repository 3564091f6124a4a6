package fake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ray Serve statuses the emulator reports.
const (
	rayAppDeploying    = "DEPLOYING"
	rayAppRunning      = "RUNNING"
	rayAppDeployFailed = "DEPLOY_FAILED"
	rayAppUnhealthy    = "UNHEALTHY"
	rayAppDeleting     = "DELETING"

	rayDepUpdating     = "UPDATING"
	rayDepHealthy      = "HEALTHY"
	rayDepUnhealthy    = "UNHEALTHY"
	rayDepDeployFailed = "DEPLOY_FAILED"
	rayDepUpscaling    = "UPSCALING"
	rayDepDownscaling  = "DOWNSCALING"

	rayReplicaStarting = "STARTING"
	rayReplicaRunning  = "RUNNING"
	rayReplicaStopping = "STOPPING"

	rayTriggerHealthCheckFailed = "HEALTH_CHECK_FAILED"
	rayTriggerUnspecified       = "UNSPECIFIED"

	// rayHealthCheckMessage is the message of a deployment whose replica
	// failed its health check.
	rayHealthCheckMessage = "a replica failed its health check; the deployment stays unhealthy until a replacement runs or a new config is deployed"
)

const (
	rayServePath      = "/api/serve/applications/"
	rayMaxBody        = 8 << 20
	rayDefaultApp     = "default"
	rayAutoMaxDefault = 100 // the max_replicas of num_replicas "auto"
)

// RayServeOptions set how fast an emulated cluster moves. Every GET of the
// applications is one poll; the zero value moves at once.
type RayServeOptions struct {
	// BuildPolls is how many polls a newly deployed application stays
	// DEPLOYING without deployments (Ray importing its code).
	BuildPolls int
	// StartPolls: a new replica is STARTING until the StartPolls-th poll
	// after it started, which sees it RUNNING (0: RUNNING at once).
	StartPolls int
	// StopPolls: a replica told to stop stops serving at once, and is
	// listed as STOPPING until the StopPolls-th poll, which no longer
	// lists it (0: gone at once).
	StopPolls int
	// Clock stamps last_deployed_time_s, replica start times and the
	// History; nil means the zero time.
	Clock *Clock
}

// RayServe emulates the Serve REST API of one Ray cluster's dashboard, as an
// http.Handler for httptest.NewServer:
//
//   - PUT /api/serve/applications/ takes a Serve config (ServeDeploySchema)
//     and answers 200 with an empty body, or 400 with a text naming every
//     problem: applications is required; application names and non-null
//     route prefixes are unique; route prefixes start with "/" and do not
//     end with one (but "/" itself); import_path is required; a deployment
//     has a unique name, num_replicas a whole number >= 0 or "auto", an
//     autoscaling_config with 0 <= min_replicas <= initial_replicas <=
//     max_replicas (max at least 1), and not both; target_capacity is null
//     or 0..100. Unknown fields are kept: deployed_app_config echoes each
//     application as submitted.
//   - GET /api/serve/applications/ (api_type declarative, imperative or
//     none) answers the instance details: controller_info, proxy_location,
//     http_options, grpc_options, proxies, deploy_mode, applications with
//     their deployments and replicas, target_capacity, target_groups.
//   - DELETE /api/serve/applications/ shuts Serve down.
//
// The emulator runs no code: an application's deployments are those its
// config lists (one deployment of one replica, named after the last part of
// import_path, when it lists none). Each deployment aims for Ray's
// capacity-adjusted target: num_replicas scaled by target_capacity, or for
// an autoscaling deployment its demand (SetDemand, 0 by default) within
// min_replicas..max_replicas scaled alike, with initial_replicas as the
// floor after a deploy or a capacity increase. Scaling by n * capacity /
// 100 rounds half up, never below 1 unless the capacity or n is 0.
//
// Each poll moves replicas STARTING -> RUNNING and removes STOPPING ones
// after the delays of RayServeOptions; surplus replicas are stopped at once
// when a PUT lowers a target. A deployment is UPDATING after its config
// changed and UPSCALING or DOWNSCALING after a capacity change, HEALTHY
// once it runs its target; an application is DEPLOYING while building or
// while a deployment is UPDATING, RUNNING otherwise — also while
// deployments scale, as Ray reports it.
//
// Running replicas can die. KillReplicas stops some, as Ray's controller
// does with replicas that fail a health check (a crashed process, a lost
// node): they are listed STOPPING and replacements start at once, RUNNING
// after StartPolls. Until the deployment runs its target again, with
// nothing starting or stopping, it is UNHEALTHY (DEPLOY_FAILED if it was
// UPDATING) with status_trigger HEALTH_CHECK_FAILED, and its application
// UNHEALTHY (DEPLOY_FAILED), with a message; then it is HEALTHY again
// (status_trigger UNSPECIFIED) and the application RUNNING. A config
// change to the deployment ends the failure as well, as in Ray. CrashLoop
// keeps the replacements failing: none reaches RUNNING, and the deployment
// stays UNHEALTHY.
//
// Test-only controls: FailDeployment, HealDeployment, KillReplicas,
// CrashLoop, FailRequests, Hang, Garbage, RequireToken, SetDemand, Advance;
// inspection with TargetCapacity, LastPut, Deployment, AppStatus, Polls,
// Puts, History. Safe for concurrent use.
type RayServe struct {
	mu      sync.Mutex
	opts    RayServeOptions
	running bool // Serve started (a PUT arrived since the last shutdown)
	tc      *float64
	config  map[string]json.RawMessage
	apps    map[string]*rayApp
	seq     int
	faults  map[[2]string]rayFault
	loops   map[[2]string]bool // deployments crash-looping
	demand  map[[2]string]int64

	failCode, failCount int
	hang                bool
	release             chan struct{}
	garbage             bool
	token               string
	lastPut             []byte
	hist                history
}

type rayFault struct{ status, message string }

type rayApp struct {
	name        string
	routePrefix *string
	raw         json.RawMessage
	status, msg string
	deployedAt  time.Time
	build       int  // polls left before its deployments exist
	up          bool // deployed, or the capacity last rose: initial_replicas is the floor
	specs       []raySpec
	deps        map[string]*rayDep
}

// raySpec is one deployment as configured.
type raySpec struct {
	name    string
	num     int64 // fixed deployments
	auto    bool
	min     int64
	max     int64
	initial *int64
	extra   map[string]json.RawMessage // the other fields, echoed
}

type rayDep struct {
	spec    raySpec
	target  int64
	status  string
	trigger string
	// failed is UNHEALTHY or DEPLOY_FAILED after a replica failed its
	// health check, until the deployment recovers; "" otherwise.
	failed   string
	replicas []*rayReplica
}

type rayReplica struct {
	id      string
	state   string
	age     int
	started time.Time
}

// NewRayServe returns an emulated cluster with Serve not started.
func NewRayServe(opts RayServeOptions) *RayServe {
	return &RayServe{
		opts:    opts,
		apps:    map[string]*rayApp{},
		faults:  map[[2]string]rayFault{},
		loops:   map[[2]string]bool{},
		demand:  map[[2]string]int64{},
		release: make(chan struct{}),
	}
}

func (s *RayServe) now() time.Time {
	if s.opts.Clock == nil {
		return time.Time{}
	}
	return s.opts.Clock.Now()
}

// rayAdjusted is Ray's capacity-adjusted replica count.
func rayAdjusted(n int64, tc *float64) int64 {
	if tc == nil || *tc >= 100 {
		return n
	}
	if *tc <= 0 || n <= 0 {
		return 0
	}
	if t := int64(*tc); float64(t) == *tc {
		return max((n*t+50)/100, 1) // whole percents: exact in integers
	}
	// The product is a float64, as in Ray; divide and round half up exactly.
	q := new(big.Rat).SetFloat64(float64(n) * *tc)
	q.Quo(q, big.NewRat(100, 1)).Add(q, big.NewRat(1, 2))
	return max(new(big.Int).Quo(q.Num(), q.Denom()).Int64(), 1)
}

// ServeHTTP answers the Serve REST API.
func (s *RayServe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != rayServePath && r.URL.Path != strings.TrimSuffix(rayServePath, "/") {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	hang, release := s.hang, s.release
	s.mu.Unlock()
	if hang {
		select {
		case <-r.Context().Done():
			s.record(r.Method, "hung", r.Context().Err())
			return
		case <-release:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		s.answer(w, r.Method, "", http.StatusUnauthorized, "missing or wrong bearer token")
		return
	}
	if s.failCount != 0 {
		if s.failCount > 0 {
			s.failCount--
		}
		s.answer(w, r.Method, "", s.failCode, "emulated failure")
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.get(w, r)
	case http.MethodPut:
		s.put(w, r)
	case http.MethodDelete:
		s.shutdown()
		s.hist.add(s.opts.Clock, "DELETE", "", nil)
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		s.answer(w, r.Method, "", http.StatusMethodNotAllowed, "method not allowed")
	}
}

// answer writes a failure as text and records it.
func (s *RayServe) answer(w http.ResponseWriter, method, arg string, code int, text string) {
	s.hist.add(s.opts.Clock, method, arg, fmt.Errorf("status %d: %s", code, text))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, text)
}

func (s *RayServe) record(op, arg string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.add(s.opts.Clock, op, arg, err)
}

func (s *RayServe) get(w http.ResponseWriter, r *http.Request) {
	apiType := r.URL.Query().Get("api_type")
	arg := ""
	if apiType != "" {
		arg = "api_type=" + apiType
		if t := strings.ToLower(apiType); t != "declarative" && t != "imperative" {
			s.answer(w, http.MethodGet, arg, http.StatusBadRequest,
				fmt.Sprintf("api_type %q: want declarative or imperative", apiType))
			return
		}
	}
	s.tick()
	s.hist.add(s.opts.Clock, "GET", arg, nil)
	w.Header().Set("Content-Type", "application/json")
	if s.garbage {
		io.WriteString(w, `{"applications": {"app": {"deployments": [`)
		return
	}
	b, err := json.Marshal(s.details(strings.EqualFold(apiType, "imperative")))
	if err != nil { // only plain values are marshalled
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Write(b)
}

func (s *RayServe) put(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, rayMaxBody+1))
	if err != nil {
		s.answer(w, http.MethodPut, "", http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if len(body) > rayMaxBody {
		s.answer(w, http.MethodPut, "", http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	cfg, problems := parseRayConfig(body)
	if len(problems) > 0 {
		text := fmt.Sprintf("%d validation error(s) for ServeDeploySchema\n%s", len(problems), strings.Join(problems, "\n"))
		s.answer(w, http.MethodPut, "invalid", http.StatusBadRequest, text)
		return
	}
	s.lastPut = append([]byte(nil), body...)
	s.apply(cfg)
	arg := "target_capacity=null"
	if cfg.tc != nil {
		arg = "target_capacity=" + strconv.FormatFloat(*cfg.tc, 'f', -1, 64)
	}
	s.hist.add(s.opts.Clock, "PUT", arg, nil)
	w.WriteHeader(http.StatusOK)
}

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

// apply makes cfg the cluster's declarative config.
func (s *RayServe) apply(cfg *rayConfig) {
	s.running = true
	percent := func(tc *float64) float64 {
		if tc == nil {
			return 100
		}
		return *tc
	}
	oldTC, newTC := percent(s.tc), percent(cfg.tc)
	s.tc, s.config = cfg.tc, cfg.top
	keep := map[string]bool{}
	for _, ac := range cfg.apps {
		keep[ac.name] = true
		app, ok := s.apps[ac.name]
		if !ok || app.status == rayAppDeleting {
			app = &rayApp{name: ac.name, deps: map[string]*rayDep{}, build: s.opts.BuildPolls, up: true}
			s.apps[ac.name] = app
		} else if newTC != oldTC {
			app.up = newTC > oldTC
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
func (s *RayServe) build(app *rayApp) {
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

// targetOf is a deployment's capacity-adjusted target now.
func (s *RayServe) targetOf(app string, d *rayDep) int64 {
	if d.spec.auto {
		lo, hi := rayAdjusted(d.spec.min, s.tc), rayAdjusted(d.spec.max, s.tc)
		if d.spec.initial != nil && s.apps[app].up {
			lo = rayAdjusted(*d.spec.initial, s.tc)
		}
		return min(max(s.demand[[2]string{app, d.spec.name}], lo), hi)
	}
	return rayAdjusted(d.spec.num, s.tc)
}

// reconcile starts and stops replicas toward every deployment's target.
func (s *RayServe) reconcile() {
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
func (s *RayServe) specIndex(app *rayApp, name string) (int, bool) {
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
func (s *RayServe) tick() {
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
func (s *RayServe) statuses() {
	for an, app := range s.apps {
		var problems []string
		failedStatus := ""
		updating := app.build > 0
		for _, dn := range sortedNames(app.deps) {
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

func (s *RayServe) shutdown() {
	s.running, s.tc, s.config = false, nil, nil
	s.apps = map[string]*rayApp{}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func sortedNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

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
func (s *RayServe) details(imperative bool) rayInstanceJSON {
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
	out.ProxyLocation = orDefault(s.config["proxy_location"], `"EveryNode"`)
	out.HTTPOptions = orDefault(s.config["http_options"], `{"host":"0.0.0.0","port":8000}`)
	out.GRPCOptions = orDefault(s.config["grpc_options"], `{"port":9000,"grpc_servicer_functions":[]}`)
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

func orDefault(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	return raw
}

func (s *RayServe) appJSON(app *rayApp) rayAppJSON {
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

// FailDeployment makes a deployment report status (DEPLOY_FAILED or
// UNHEALTHY) with message, and its application DEPLOY_FAILED or UNHEALTHY
// with the message, until HealDeployment. A DEPLOY_FAILED deployment starts
// no replica. It applies to a deployment configured later, too.
func (s *RayServe) FailDeployment(app, deployment, status, message string) error {
	if status != rayDepDeployFailed && status != rayDepUnhealthy {
		return fmt.Errorf("fake rayserve: status %q: want %s or %s", status, rayDepDeployFailed, rayDepUnhealthy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[[2]string{app, deployment}] = rayFault{status: status, message: message}
	s.statuses()
	return nil
}

// HealDeployment ends FailDeployment.
func (s *RayServe) HealDeployment(app, deployment string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dep(app, deployment); d != nil {
		d.status = rayDepUpdating
	}
	delete(s.faults, [2]string{app, deployment})
	s.statuses()
}

// KillReplicas makes n RUNNING replicas of a deployment (at most those
// running, oldest first) die, as when their process crashes or their node
// is lost, and Ray's controller finds them on a failed health check: they
// stop serving at once and are listed STOPPING for StopPolls polls, and
// replacements start at once, RUNNING after StartPolls (never while
// CrashLoop is on). The deployment is UNHEALTHY, or DEPLOY_FAILED if it was
// UPDATING, until it runs its target again with nothing starting or
// stopping. With StartPolls and StopPolls 0 it recovers at once. It fails
// for a negative n or a deployment that does not exist.
func (s *RayServe) KillReplicas(app, deployment string, n int) error {
	if n < 0 {
		return fmt.Errorf("fake rayserve: cannot kill %d replicas", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dep(app, deployment)
	if d == nil {
		return fmt.Errorf("fake rayserve: no deployment %q in application %q", deployment, app)
	}
	killed := 0
	for _, r := range d.replicas {
		if killed < n && r.state == rayReplicaRunning {
			r.state, r.age = rayReplicaStopping, 0
			killed++
		}
	}
	if killed > 0 {
		healthCheckFailed(d)
		s.reconcile()
		s.statuses()
	}
	return nil
}

// CrashLoop(true) makes a deployment's replicas keep failing their health
// checks, as a revision that crashes after starting: from then on no
// replica of it reaches RUNNING; each one due to run is stopped instead
// and replaced by a new STARTING one, and the deployment is UNHEALTHY (or
// DEPLOY_FAILED, as for KillReplicas). Replicas RUNNING already keep
// running until KillReplicas. CrashLoop(false) lets the replacements run,
// after StartPolls from their start. It applies to a deployment configured
// later, too.
func (s *RayServe) CrashLoop(app, deployment string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.loops[[2]string{app, deployment}] = true
	} else {
		delete(s.loops, [2]string{app, deployment})
	}
	s.reconcile()
	s.statuses()
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

// FailRequests answers the next n requests (every request for n < 0, none
// for n = 0) with the HTTP status code and a short text, changing nothing.
func (s *RayServe) FailRequests(code, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCode, s.failCount = code, n
}

// Hang makes every request wait until its context ends (the client gives
// up) or Hang(false).
func (s *RayServe) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hang && !on {
		close(s.release)
		s.release = make(chan struct{})
	}
	s.hang = on
}

// Garbage makes GET answer 200 with a body that is not valid JSON.
func (s *RayServe) Garbage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.garbage = on
}

// RequireToken makes every request without "Authorization: Bearer token"
// fail with 401; "" turns authentication off.
func (s *RayServe) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// SetDemand sets the replicas an autoscaling deployment's load asks for;
// Ray's autoscaler keeps it within the capacity-adjusted bounds.
func (s *RayServe) SetDemand(app, deployment string, replicas int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.demand[[2]string{app, deployment}] = replicas
	s.reconcile()
	s.statuses()
}

// Advance runs polls without a request, as if a client had polled.
func (s *RayServe) Advance(polls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range polls {
		s.tick()
	}
}

// TargetCapacity returns the applied target_capacity (nil for null), and
// whether Serve is running.
func (s *RayServe) TargetCapacity() (*float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tc == nil {
		return nil, s.running
	}
	tc := *s.tc
	return &tc, s.running
}

// LastPut returns the body of the last accepted PUT, nil if none.
func (s *RayServe) LastPut() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.lastPut...)
}

// RayDeploymentState is what the emulator holds for one deployment.
type RayDeploymentState struct {
	Status string
	// Target is the capacity-adjusted target (target_num_replicas).
	Target                     int64
	Running, Starting, Stopped int64
	// Stopped counts replicas STOPPING (no longer serving).
}

// Deployment returns a deployment's state without counting a poll.
func (s *RayServe) Deployment(app, deployment string) (RayDeploymentState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dep(app, deployment)
	if d == nil {
		return RayDeploymentState{}, false
	}
	st := RayDeploymentState{Status: d.status, Target: d.target}
	for _, r := range d.replicas {
		switch r.state {
		case rayReplicaRunning:
			st.Running++
		case rayReplicaStarting:
			st.Starting++
		default:
			st.Stopped++
		}
	}
	return st, true
}

func (s *RayServe) dep(app, deployment string) *rayDep {
	if a, ok := s.apps[app]; ok {
		return a.deps[deployment]
	}
	return nil
}

// AppStatus returns an application's status and message, and whether it
// exists.
func (s *RayServe) AppStatus(app string) (status, message string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apps[app]
	if !ok {
		return "", "", false
	}
	return a.status, a.msg, true
}

// KeepHistory turns the recording of calls on (the default) or off; counts
// are kept either way.
func (s *RayServe) KeepHistory(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.off = !on
}

// History returns every request so far: Op is the method ("GET", "PUT",
// "DELETE"), Arg the api_type or the target capacity put, Err the failure
// answered.
func (s *RayServe) History() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.hist.calls...)
}

// Polls counts successful GETs.
func (s *RayServe) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.count("GET")
}

// Puts counts accepted PUTs.
func (s *RayServe) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.count("PUT")
}
