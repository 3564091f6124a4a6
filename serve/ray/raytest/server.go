package raytest

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/fake"
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

// Options set how fast an emulated cluster moves. Every GET of the
// applications is one poll; the zero value moves at once.
type Options struct {
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
	Clock *fake.Clock
	// GuardRedeploys refuses a redeploy of a serving cluster: a PUT that
	// changes the config in anything other than target_capacity (an
	// application's config, the set of applications, a top-level field)
	// is answered 400 and recorded as a violation (Violations) unless the
	// cluster is at target_capacity 0 (null counts as 100), the PUT asks
	// target_capacity 0 too, and the func given to ServingFunc reports no
	// traffic. proxy_location, http_options and grpc_options are compared
	// as GET reports them (Ray's default for one a config leaves out), so
	// a client that writes back what GET reported changes nothing; a PUT
	// without logging_config keeps the cluster's. The first PUT after
	// Serve starts (or after a DELETE) is accepted whatever the capacity
	// and the traffic. Ray itself accepts such a PUT; the guard is for
	// tests that upshift never redeploys a cluster that serves, and is off
	// by default. PutByOther, another writer's PUT, is never refused.
	GuardRedeploys bool
}

// Server emulates the Serve REST API of one Ray cluster's dashboard, as an
// http.Handler for httptest.NewServer:
//
//   - PUT /api/serve/applications/ takes a Serve config (ServeDeploySchema)
//     and answers 200 with an empty body, or 400 with a text naming every
//     problem; unknown fields are kept, and deployed_app_config echoes each
//     application as submitted;
//   - GET /api/serve/applications/ (api_type declarative, imperative or
//     none) answers the instance details: applications with their
//     deployments and replicas, target_capacity and the rest;
//   - DELETE /api/serve/applications/ shuts Serve down.
//
// The emulator runs no code. Each deployment aims for the target Ray's
// controller gives it, computed as Ray computes it (the target capacity
// direction, capacity-adjusted counts rounded half up, autoscaling
// bounds). Each poll moves replicas STARTING -> RUNNING and removes
// STOPPING ones after the delays of Options; KillReplicas and CrashLoop
// make replicas fail as failed health checks do. With
// Options.GuardRedeploys, a PUT that changes an application's config on a
// cluster that is not at target_capacity 0, or that serves traffic
// (ServingFunc), is refused with 400 and recorded as a violation.
//
// Test-only controls: FailDeployment, HealDeployment, KillReplicas,
// CrashLoop, FailRequests, Hang, Garbage, RequireToken, SetDemand, Advance,
// ServingFunc, PutByOther; inspection with TargetCapacity,
// TargetCapacityDirection, LastPut, DeployedConfig, Deployment, AppStatus,
// Polls, Puts, Violations, History. The zero value is a cluster with Serve
// not started that moves at once, as New(Options{}) returns. Safe for
// concurrent use. See docs/design/ray.md for the validation, Ray's
// arithmetic and the states the emulator reports.
type Server struct {
	mu      sync.Mutex
	opts    Options
	running bool // Serve started (a PUT arrived since the last shutdown)
	tc      *float64
	config  map[string]json.RawMessage
	// applied is the last config applied since Serve started (nil: none),
	// dir the target capacity direction it left.
	applied *rayApplied
	dir     rayDirection
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
	tokenHeaders        []string
	lastPut             []byte
	hist                history
	serving             func() int32 // the cluster's share of traffic, for GuardRedeploys
	violations          []string
}

type rayFault struct{ status, message string }

type rayApp struct {
	name        string
	routePrefix *string
	raw         json.RawMessage
	status, msg string
	deployedAt  time.Time
	build       int // polls left before its deployments exist
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

// New returns an emulated cluster with Serve not started, moving at the
// pace opts sets.
func New(opts Options) *Server {
	s := &Server{opts: opts}
	s.init()
	return s
}

// init makes the maps and the channel a zero Server lacks; s.mu is held
// (or s is not shared yet).
func (s *Server) init() {
	if s.release != nil {
		return
	}
	if s.apps == nil {
		s.apps = map[string]*rayApp{}
	}
	s.faults = map[[2]string]rayFault{}
	s.loops = map[[2]string]bool{}
	s.demand = map[[2]string]int64{}
	s.release = make(chan struct{})
}

func (s *Server) now() time.Time {
	if s.opts.Clock == nil {
		return time.Time{}
	}
	return s.opts.Clock.Now()
}

// FailDeployment makes a deployment report status (DEPLOY_FAILED or
// UNHEALTHY) with message, and its application DEPLOY_FAILED or UNHEALTHY
// with the message, until HealDeployment. A DEPLOY_FAILED deployment starts
// no replica. It applies to a deployment configured later, too.
func (s *Server) FailDeployment(app, deployment, status, message string) error {
	if status != rayDepDeployFailed && status != rayDepUnhealthy {
		return fmt.Errorf("raytest: status %q: want %s or %s", status, rayDepDeployFailed, rayDepUnhealthy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	s.faults[[2]string{app, deployment}] = rayFault{status: status, message: message}
	s.statuses()
	return nil
}

// HealDeployment ends FailDeployment.
func (s *Server) HealDeployment(app, deployment string) {
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
func (s *Server) KillReplicas(app, deployment string, n int) error {
	if n < 0 {
		return fmt.Errorf("raytest: cannot kill %d replicas", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dep(app, deployment)
	if d == nil {
		return fmt.Errorf("raytest: no deployment %q in application %q", deployment, app)
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
func (s *Server) CrashLoop(app, deployment string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if on {
		s.loops[[2]string{app, deployment}] = true
	} else {
		delete(s.loops, [2]string{app, deployment})
	}
	s.reconcile()
	s.statuses()
}

// FailRequests answers the next n requests (every request for n < 0, none
// for n = 0) with the HTTP status code and a short text, changing nothing.
func (s *Server) FailRequests(code, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCode, s.failCount = code, n
}

// Hang makes every request wait until its context ends (the client gives
// up) or Hang(false).
func (s *Server) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if s.hang && !on {
		close(s.release)
		s.release = make(chan struct{})
	}
	s.hang = on
}

// Garbage makes GET answer 200 with a body that is not valid JSON.
func (s *Server) Garbage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.garbage = on
}

// RequireToken turns token authentication on as Ray's dashboard does it
// (its token_auth_middleware): a request's credential is the first it
// carries of the Authorization header, the X-Ray-Authorization header and
// the ray-authentication-token cookie; a request with none is answered
// 401, one whose credential is not "Bearer <token>" 403. headers, when
// given, replace the two header names read, in order: RequireToken(token,
// "X-Ray-Authorization") is a dashboard behind a proxy that keeps
// Authorization for itself (the Kubernetes API server's service proxy), for
// a test that checks which header a client sends. "" turns authentication
// off.
func (s *Server) RequireToken(token string, headers ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token, s.tokenHeaders = token, append([]string(nil), headers...)
	if len(headers) == 0 {
		s.tokenHeaders = []string{"Authorization", "X-Ray-Authorization"}
	}
}

// SetDemand sets the replicas an autoscaling deployment's load asks for;
// Ray's autoscaler keeps it within the capacity-adjusted bounds.
func (s *Server) SetDemand(app, deployment string, replicas int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	s.demand[[2]string{app, deployment}] = replicas
	s.reconcile()
	s.statuses()
}

// Advance runs polls without a request, as if a client had polled.
func (s *Server) Advance(polls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range polls {
		s.tick()
	}
}

// TargetCapacity returns the applied target_capacity (nil for null), and
// whether Serve is running.
func (s *Server) TargetCapacity() (*float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tc == nil {
		return nil, s.running
	}
	tc := *s.tc
	return &tc, s.running
}

// TargetCapacityDirection returns the direction Ray's controller keeps
// next to the target capacity, as the last accepted PUT left it: "UP",
// "DOWN", or "" for none. An autoscaling deployment's floor is its
// initial_replicas (capacity-adjusted) while it is "UP", its min_replicas
// otherwise.
func (s *Server) TargetCapacityDirection() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir.String()
}

// LastPut returns the body of the last accepted PUT, nil if none.
func (s *Server) LastPut() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.lastPut...)
}

// DeploymentState is what the emulator holds for one deployment, as
// Server.Deployment returns it: a plain value, whose zero value is a
// deployment with no status, no target and no replicas.
type DeploymentState struct {
	// Status is the deployment's status as GET reports it (HEALTHY,
	// UPDATING, UPSCALING, DOWNSCALING, UNHEALTHY, DEPLOY_FAILED).
	Status string
	// Target is the capacity-adjusted target (target_num_replicas).
	Target int64
	// Running and Starting count replicas RUNNING and STARTING; Stopped
	// counts replicas STOPPING (no longer serving).
	Running, Starting, Stopped int64
}

// Deployment returns a deployment's state without counting a poll.
func (s *Server) Deployment(app, deployment string) (DeploymentState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dep(app, deployment)
	if d == nil {
		return DeploymentState{}, false
	}
	st := DeploymentState{Status: d.status, Target: d.target}
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

func (s *Server) dep(app, deployment string) *rayDep {
	if a, ok := s.apps[app]; ok {
		return a.deps[deployment]
	}
	return nil
}

// AppStatus returns an application's status and message, and whether it
// exists.
func (s *Server) AppStatus(app string) (status, message string, ok bool) {
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
func (s *Server) KeepHistory(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.off = !on
}

// History returns every request so far: Op is the method ("GET", "PUT",
// "DELETE"), Arg the api_type or the target capacity put ("redeploy" for
// a PUT that GuardRedeploys refused), Err the failure answered.
func (s *Server) History() []fake.Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fake.Call(nil), s.hist.calls...)
}

// Polls counts successful GETs.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.count("GET")
}

// Puts counts accepted PUTs.
func (s *Server) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.count("PUT")
}
