package ray

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/upshift-dev/upshift/clock"
	"github.com/upshift-dev/upshift/rollout"
)

// Defaults for Config.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxResponseBytes = 16 << 20
	// applicationsPath is the Serve REST endpoint, relative to the
	// dashboard's URL.
	applicationsPath = "/api/serve/applications/"
)

// The headers Config.TokenHeader can name; Ray's dashboard reads the first,
// and the second when the first is absent.
const (
	HeaderAuthorization    = "Authorization"
	HeaderRayAuthorization = "X-Ray-Authorization"
)

// maxRedirects is how many redirects within the dashboard's origin a
// request follows, as many as net/http's default policy allows.
const maxRedirects = 10

// defaultAppName is the name Ray gives an application whose config has none.
const defaultAppName = "default"

// maxErrorBody bounds how much of a failed answer an *HTTPError keeps.
const maxErrorBody = 4 << 10

// Config describes one Ray cluster's Serve applications. Dashboard is
// required, and exactly one of ServeConfig (one config, deployed by someone
// else) and Revisions (a config per revision, deployed by the adapter's
// Deployer); the zero value of every other field is a sensible default.
type Config struct {
	// Dashboard is the Ray dashboard's base URL, http or https, such as
	// "http://raycluster-head-svc:8265". A path is kept as a prefix (a
	// dashboard behind a proxy at /ray).
	Dashboard string
	// ServeConfig is the Serve config to deploy (Ray's ServeDeploySchema:
	// applications, proxy_location, http_options, grpc_options,
	// logging_config...) as JSON. It is sent as it is, every field
	// preserved, with target_capacity set to what each request asks; a
	// target_capacity already in it is replaced. It must be an object with
	// an "applications" array whose names (default "default") are unique:
	// the adapter observes exactly those applications. The config is the
	// cluster's whole declarative set: a PUT replaces what Ray runs.
	// (A YAML serveConfigV2 converts with sigs.k8s.io/yaml.YAMLToJSON.)
	// It must be empty when Revisions is set.
	ServeConfig json.RawMessage
	// Revisions, when set, returns the Serve config of a revision (JSON,
	// as ServeConfig) and makes the cluster's config follow revisions:
	// (*Ray).Deployer returns the rollout.Deployer that deploys a
	// revision's config at target_capacity 0 and recognises the revision
	// the cluster runs from the config Ray reports as deployed, and
	// SetCapacity writes the config of the revision the cluster runs. A
	// revision's config is validated as ServeConfig is, when it is first
	// needed, with the same *ConfigError values whose Field names the
	// revision (Revisions["v2"].applications[0].name). An error from
	// Revisions (a revision it does not know) is reported as a *ConfigError
	// for Revisions["<revision>"] that wraps it. It is called on every
	// Deploy and Revision, so it should be a cheap lookup (RevisionMap
	// makes one from a map); a revision's config must not change once
	// deployed. It must be safe for concurrent use.
	Revisions func(revision string) (json.RawMessage, error)
	// Token, when set, is sent on every request as "Bearer <Token>" in the
	// header TokenHeader names, for dashboards with token authentication.
	Token string
	// TokenHeader names the one header that carries Token:
	//
	//   - HeaderAuthorization ("" means this one): for a dashboard reached
	//     directly, or through a proxy that passes Authorization on.
	//   - HeaderRayAuthorization: for a dashboard reached through a proxy
	//     that keeps Authorization for itself, such as the Kubernetes API
	//     server's service proxy (.../services/<head-svc>:dashboard/proxy),
	//     which authenticates the caller with Authorization (set by
	//     HTTPClient's transport) and removes it before forwarding. Ray reads
	//     X-Ray-Authorization when a request has no Authorization header.
	//
	// Any other name is invalid. Without a Token no header is sent.
	TokenHeader string
	// Timeout bounds each request; 0 means DefaultTimeout, negative means
	// only the caller's context bounds it.
	Timeout time.Duration
	// TLS configures https (a private CA, a client certificate). Ignored
	// when HTTPClient is set: configure its transport instead.
	TLS *tls.Config
	// HTTPClient sends the requests; nil means a client of its own built
	// from TLS. Set one to share connections or to add instrumentation.
	// The adapter sends through a copy of it whose CheckRedirect refuses
	// the redirects described under RedirectError before calling the
	// client's own CheckRedirect, if any, for the others.
	HTTPClient *http.Client
	// MaxResponseBytes bounds the size of an answer read; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// NotifyMinInterval and NotifyMaxInterval bound the polls after a
	// write for Notify: the first poll comes NotifyMinInterval after the
	// write (0 means DefaultNotifyMinInterval, 50 ms), each next one twice
	// as late as the one before, up to NotifyMaxInterval (0 means
	// DefaultNotifyMaxInterval, 2 s; a value below NotifyMinInterval
	// counts as NotifyMinInterval), until a poll sees what the write waits
	// for (see Ray.Notify), the last one until the next write. A change
	// brings the interval back to NotifyMinInterval. Negative values are
	// invalid.
	NotifyMinInterval, NotifyMaxInterval time.Duration
	// ReadMaxAge is how old an answer of the dashboard may be for Capacity,
	// Observe and Deployer.Revision to use it rather than send a GET of
	// their own: the most recent answer to any GET of the applications
	// this adapter sent (a read's, a poll of Notify's, the one a write
	// sends before its PUT), while it is younger than ReadMaxAge, counted
	// from the instant its GET was sent, and no PUT of this adapter
	// (SetCapacity, Deploy) started since that GET was sent. 0 means
	// NotifyMaxInterval (as defaulted: 2 s), so that a Runner woken by a
	// poll of Notify reads the answer that poll got, and reads no cluster
	// more often than a NotifyMaxInterval poll would; a negative value
	// turns the reuse off: every read is a GET. See Ray for what a reused
	// answer may hide.
	ReadMaxAge time.Duration
	// Clock times the polls of Notify and the age of the answers reads
	// reuse (ReadMaxAge); nil means clock.Real. Tests use fake.Clock.
	Clock clock.Clock
}

// Validate reports every problem with c at once (a *ConfigError per field,
// joined), or nil. The configs Revisions returns are validated when they
// are first needed, not here.
func (c *Config) Validate() error {
	_, _, err := c.parse()
	return err
}

// parse validates c and returns the dashboard URL and the parsed
// ServeConfig (nil when Revisions is set).
func (c *Config) parse() (*url.URL, *serveConfig, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	u, err := url.Parse(c.Dashboard)
	switch {
	case c.Dashboard == "":
		bad("Dashboard", "is required")
	case err != nil:
		bad("Dashboard", "%v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		bad("Dashboard", "scheme %q: want http or https", u.Scheme)
	case u.Host == "":
		bad("Dashboard", "%q has no host", c.Dashboard)
	case u.RawQuery != "" || u.Fragment != "":
		bad("Dashboard", "%q: want no query or fragment", c.Dashboard)
	}
	if c.MaxResponseBytes < 0 {
		bad("MaxResponseBytes", "%d is negative", c.MaxResponseBytes)
	}
	if c.NotifyMinInterval < 0 {
		bad("NotifyMinInterval", "%v is negative", c.NotifyMinInterval)
	}
	if c.NotifyMaxInterval < 0 {
		bad("NotifyMaxInterval", "%v is negative", c.NotifyMaxInterval)
	}
	if _, ok := tokenHeader(c.TokenHeader); !ok {
		bad("TokenHeader", "%q: want %s or %s", c.TokenHeader, HeaderAuthorization, HeaderRayAuthorization)
	}
	var sc *serveConfig
	if c.Revisions != nil {
		if len(bytes.TrimSpace(c.ServeConfig)) != 0 {
			bad("ServeConfig", "must be empty when Revisions is set: the config is the revision's")
		}
	} else {
		var perr []error
		sc, perr = parseServeConfig("", "ServeConfig", c.ServeConfig)
		errs = append(errs, perr...)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return u, sc, nil
}

type appConfig struct {
	name string
	// config is the application's config decoded generically, to compare
	// with what Ray reports as deployed.
	config any
	// deployments names the deployments the config lists.
	deployments []string
}

// serveConfig is a validated Serve config: the one of Config.ServeConfig,
// or a revision's. It is never modified once built.
type serveConfig struct {
	// revision is the revision it is the config of; "" for ServeConfig.
	revision string
	// raw is the config as given.
	raw json.RawMessage
	// prefix is the PUT body up to the target capacity's value.
	prefix []byte
	apps   []appConfig
	names  []string
	// fulls are the full replica counts of the configured deployments.
	fulls []int64
}

// parseServeConfig validates raw as the Serve config of revision, naming
// field in its errors ("ServeConfig", or Revisions["v2"]).
func parseServeConfig(revision, field string, raw json.RawMessage) (*serveConfig, []error) {
	var errs []error
	bad := func(f, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: f, Problem: fmt.Sprintf(format, args...)})
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		bad(field, "is required")
		return nil, errs
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		bad(field, "want a JSON object: %v", errOrNull(err))
		return nil, errs
	}
	delete(top, "target_capacity")
	var list []json.RawMessage
	rawApps, ok := top["applications"]
	if !ok {
		bad(field+".applications", "is required")
	} else if err := json.Unmarshal(rawApps, &list); err != nil || list == nil {
		bad(field+".applications", "want an array: %v", errOrNull(err))
	}
	sc := &serveConfig{revision: revision, raw: append(json.RawMessage(nil), raw...)}
	seen := map[string]int{}
	for i, a := range list {
		f := fmt.Sprintf("%s.applications[%d]", field, i)
		var generic any
		if err := json.Unmarshal(a, &generic); err != nil {
			bad(f, "%v", err)
			continue
		}
		m, ok := generic.(map[string]any)
		if !ok {
			bad(f, "want an object")
			continue
		}
		name := defaultAppName
		if v, ok := m["name"]; ok {
			s, ok := v.(string)
			if !ok || s == "" {
				bad(f+".name", "want a non-empty string")
				continue
			}
			name = s
		}
		if j, dup := seen[name]; dup {
			bad(f+".name", "%q is also the name of applications[%d]", name, j)
			continue
		}
		seen[name] = i
		sc.apps = append(sc.apps, appConfig{name: name, config: generic, deployments: configuredDeployments(generic)})
		sc.names = append(sc.names, name)
		sc.fulls = append(sc.fulls, configuredFulls(generic)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	body, err := json.Marshal(top)
	if err != nil {
		bad(field, "%v", err)
		return nil, errs
	}
	prefix := body[:len(body)-1] // drop the closing brace
	if len(top) > 0 {
		prefix = append(prefix, ',')
	}
	sc.prefix = append(prefix, `"target_capacity":`...)
	return sc, nil
}

// body returns the PUT body of c at a target capacity: tc percent, or null
// for steady.
func (c *serveConfig) body(steady bool, tc int32) []byte {
	b := make([]byte, 0, len(c.prefix)+5)
	b = append(b, c.prefix...)
	if steady {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(tc), 10)
	}
	return append(b, '}')
}

// tokenHeader returns the canonical name of the header that carries the
// token, and whether name is one Ray reads.
func tokenHeader(name string) (string, bool) {
	switch h := http.CanonicalHeaderKey(name); h {
	case "", HeaderAuthorization:
		return HeaderAuthorization, true
	case HeaderRayAuthorization:
		return h, true
	}
	return "", false
}

func errOrNull(err error) error {
	if err == nil {
		return errors.New("got null")
	}
	return err
}

// Ray is a rollout.CapacitySetter for one Ray cluster's Serve applications,
// through the dashboard's Serve REST API:
//
//   - SetCapacity PUTs the Serve config with target_capacity set (null for
//     a Steady request), unless the cluster's last applied config already
//     has that target capacity and the same applications (read with a GET
//     first, not from memory: a restarted cluster is noticed).
//   - Capacity GETs the declarative applications and reports how ready
//     they are, as Capacity describes.
//
// With Config.Revisions set, the config is the one of the revision the
// cluster runs, and Deployer returns the rollout.Deployer that changes it.
//
// Ray Serve has no watch, so Capacity, Observe and Deployer.Revision reuse
// the most recent answer this value got to a GET of the applications while
// it is younger than Config.ReadMaxAge (2 s by default; negative turns the
// reuse off) and this value has written nothing since: a read is at most
// ReadMaxAge old, the adapter's own writes are never hidden (reads after a
// PUT report a GET sent after it returned), writes decide on a GET of
// their own, and errors are never kept.
//
// Ray rounds a deployment's capacity-adjusted replica count half up (70
// percent of 3 replicas keeps 2), so the adapter writes the smallest
// target_capacity whose replica counts reach ceil(n * asked / 100) for
// every deployment: a side settled at c percent reports Ready >= c.
//
// Build it with New; the zero value is not usable. Safe for concurrent use
// (callers that find no fresh answer at the same time each send a GET).
// See docs/design/ray.md for the reuse of answers and the rounding.
type Ray struct {
	mu sync.Mutex
	// asked pairs the percent last asked with the target_capacity written.
	asked *askedCapacity
	// cur is the config SetCapacity writes: Config.ServeConfig, or with
	// revisions the config of the revision the cluster runs, as last
	// deployed or recognised (nil while unknown).
	cur *serveConfig
	// revisions is Config.Revisions; parsed the revision config last
	// parsed, kept to parse each revision once.
	revisions func(string) (json.RawMessage, error)
	parsed    *serveConfig

	putURL, getURL string
	token          string
	tokenHeader    string
	timeout        time.Duration
	maxBytes       int64
	client         *http.Client
	// poll polls the cluster after writes for Notify.
	poll *poller
	// answers keeps the last answer of the dashboard for the reads.
	answers *answers
}

var _ rollout.CapacitySetter = (*Ray)(nil)

type askedCapacity struct {
	percent int32
	written float64
}

// roundUp returns the target capacity to write for percent asked: the
// smallest value >= percent at which every deployment of c's applications
// (as configured, and as running in d) gets at least ceil(n * percent /
// 100) replicas.
func roundUp(d *instanceDetails, c *serveConfig, percent int32) int32 {
	if percent <= 0 || percent >= 100 {
		return percent
	}
	out := percent
	fit := func(n int64) {
		need := (n*int64(percent) + 99) / 100
		for out < 100 {
			tc := float64(out)
			if CapacityAdjusted(n, &tc) >= need {
				return
			}
			out++
		}
	}
	for _, n := range c.fulls {
		fit(n)
	}
	for _, name := range c.names {
		for _, dep := range d.Applications[name].Deployments {
			if n, _, err := dep.DeploymentConfig.full(""); err == nil && n > 0 {
				fit(n)
			}
		}
	}
	return out
}

// New validates c and returns the adapter.
func New(c Config) (*Ray, error) {
	u, sc, err := c.parse()
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(u.String(), "/")
	r := &Ray{
		putURL:    base + applicationsPath,
		getURL:    base + applicationsPath + "?api_type=declarative",
		cur:       sc,
		revisions: c.Revisions,
		token:     c.Token,
		timeout:   c.Timeout,
		maxBytes:  c.MaxResponseBytes,
	}
	r.tokenHeader, _ = tokenHeader(c.TokenHeader)
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	if r.maxBytes == 0 {
		r.maxBytes = DefaultMaxResponseBytes
	}
	if c.HTTPClient != nil {
		client := *c.HTTPClient
		r.client = &client
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if c.TLS != nil {
			t.TLSClientConfig = c.TLS.Clone()
		}
		r.client = &http.Client{Transport: t}
	}
	r.client.CheckRedirect = sameOriginRedirects(u, r.client.CheckRedirect)
	r.poll = newPoller(r, &c)
	r.answers = newAnswers(&c, r.poll.max)
	return r, nil
}

// configuredFulls returns the full replica counts of the deployments an
// application's config lists (those it can read).
func configuredFulls(app any) []int64 {
	m, _ := app.(map[string]any)
	raw, err := json.Marshal(m["deployments"])
	if err != nil {
		return nil
	}
	var deps []deploymentConfig
	if json.Unmarshal(raw, &deps) != nil {
		return nil
	}
	var out []int64
	for _, d := range deps {
		if len(d.NumReplicas) == 0 && d.AutoscalingConfig == nil {
			d.NumReplicas = json.RawMessage("1") // Ray's default
		}
		if n, _, err := d.full(""); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// configuredDeployments returns the names of the deployments an
// application's config lists.
func configuredDeployments(app any) []string {
	m, _ := app.(map[string]any)
	list, _ := m["deployments"].([]any)
	var out []string
	for _, d := range list {
		dm, _ := d.(map[string]any)
		if name, ok := dm["name"].(string); ok && name != "" {
			out = append(out, name)
		}
	}
	return out
}

// Applications returns the names of the managed applications: those of
// Config.ServeConfig, or with revisions those of the revision the cluster
// runs as far as the adapter knows (none while it is unknown).
func (r *Ray) Applications() []string {
	if c := r.current(); c != nil {
		return append([]string(nil), c.names...)
	}
	return nil
}

// String returns the Serve endpoint the adapter talks to.
func (r *Ray) String() string { return r.putURL }

// current returns the config SetCapacity writes, nil if unknown.
func (r *Ray) current() *serveConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// SetCapacity sets the cluster's target_capacity to r.Percent, or to null
// for a Steady request (Percent must then be 100): PUT
// {Dashboard}/api/serve/applications/ with Content-Type application/json and
// the Serve config, every field of it kept, with "target_capacity" set. It
// reads the cluster first (a GET of its own, never a reused answer) and
// writes nothing when the applied config already has that target capacity
// and the managed applications as configured: the comparison is with what
// the cluster reports, never with what this process sent last. A request
// out of range, and a 400 from Ray, are permanent errors; see HTTPError.
//
// With Config.Revisions set it writes the config of the revision the
// cluster runs, never another: the one this adapter last deployed or
// recognised (Deployer.Revision), which the cluster must still run (or, a
// cluster that lost its config, run nothing).
//
// A cluster that runs a config of no revision the adapter knows may always
// lose capacity, never gain it: a lower request is written with the config
// the cluster runs left as it is (every live application's
// deployed_app_config and the cluster-wide options, as the GET reported
// them), after which the adapter knows no revision until Deploy or
// Revision. A request that would raise the capacity writes nothing and
// returns an error matching ErrUnknownRevision, not marked permanent (the
// next Revision may recognise the config); so does a request to lower it
// when the config cannot be written back as it runs. Like every write
// here, the PUT is not conditional: a config someone writes between the
// GET and the PUT is replaced. See docs/design/ray.md for the details.
func (r *Ray) SetCapacity(ctx context.Context, req rollout.CapacityRequest) error {
	if err := req.Validate(); err != nil {
		return rollout.Permanent(fmt.Errorf("ray: %w", err))
	}
	d, err := r.get(ctx)
	if err != nil {
		return err
	}
	c := r.current()
	if r.revisions != nil && (c == nil || len(liveApps(d)) > 0 && !runs(d, c)) {
		return r.lower(ctx, d, c, req)
	}
	write := req
	if !req.Steady {
		write.Percent = roundUp(d, c, req.Percent)
	}
	return r.putCapacity(ctx, d, c, c, req, write)
}

// putCapacity records what was asked (req) and PUTs config c with the
// target capacity write, unless the cluster already runs it; cur is the
// revision the adapter must still know (nil: none), else a Deploy or
// Revision changed it meanwhile and nothing is written.
func (r *Ray) putCapacity(ctx context.Context, d *instanceDetails, c, cur *serveConfig, req, write rollout.CapacityRequest) error {
	r.mu.Lock()
	if r.cur != cur { // a Deploy or Revision changed it meanwhile
		r.mu.Unlock()
		return fmt.Errorf("%w: %s: the revision changed while setting capacity", ErrUnknownRevision, r.putURL)
	}
	r.asked = nil
	if !req.Steady {
		r.asked = &askedCapacity{percent: req.Percent, written: float64(write.Percent)}
	}
	r.mu.Unlock()
	if applied(d, c, write) {
		return nil
	}
	if err := r.put(ctx, c.body(req.Steady, write.Percent)); err != nil {
		return err
	}
	r.poll.wrote(d, capacityGoal(write))
	return nil
}

// applied reports whether the cluster already runs c at req.
func applied(d *instanceDetails, c *serveConfig, req rollout.CapacityRequest) bool {
	tc := d.TargetCapacity
	if req.Steady != (tc == nil) || tc != nil && *tc != float64(req.Percent) {
		return false
	}
	for _, a := range c.apps {
		if !deployedAs(d, a) {
			return false
		}
	}
	return true
}

// deployedAs reports whether the cluster reports a as the deployed config
// of its application: the same JSON value.
func deployedAs(d *instanceDetails, a appConfig) bool {
	app, ok := d.Applications[a.name]
	if !ok || len(app.DeployedAppConfig) == 0 {
		return false
	}
	var deployed any
	if err := json.Unmarshal(app.DeployedAppConfig, &deployed); err != nil {
		return false
	}
	return reflect.DeepEqual(deployed, a.config)
}

// Capacity reports the managed applications' capacity, ready capacity,
// settledness and health, derived from one answer to a GET of
// {Dashboard}/api/serve/applications/?api_type=declarative (its own, or a
// fresh one the adapter already has: see Ray's reuse of answers).
//
// Ray's status RUNNING says little about capacity (an application is
// RUNNING while its deployments scale up), so Capacity counts replicas
// against the targets Ray derives from the target capacity
// (CapacityAdjusted):
//
//   - a deployment's ready share is min(RUNNING replicas, capacity-adjusted
//     target) over its full count (num_replicas, or min_replicas when it
//     autoscales), in percent rounded down: three replicas at 40% aim for
//     1, 33% ready; replicas above the target are not counted;
//   - an application is as ready as its least ready deployment, and the
//     side as its least ready application; a missing application is 0%
//     ready, and a cluster running none of them holds nothing (capacity 0,
//     settled);
//   - settled: every application RUNNING, every deployment HEALTHY with no
//     replica starting or stopping and as many RUNNING replicas as Ray's
//     target_num_replicas;
//   - an application or deployment DEPLOY_FAILED or UNHEALTHY makes the
//     side unhealthy, with Ray's messages.
//
// See docs/design/ray.md for the fields read and the arithmetic.
func (r *Ray) Capacity(ctx context.Context) (rollout.CapacityStatus, error) {
	o, err := r.Observe(ctx)
	return o.CapacityStatus, err
}

// Observe is Capacity with the details: every managed application and
// deployment, with its replica counts and targets. With Config.Revisions
// set, the managed applications are those of the revision the cluster
// runs, or while the adapter does not know it (after a restart, before
// Deployer.Revision recognised it) every application the cluster runs.
func (r *Ray) Observe(ctx context.Context) (ServeStatus, error) {
	d, err := rollout.ReadOnce(ctx, r, r.read) // shared with the Deployer's read in one reconcile
	if err != nil {
		return ServeStatus{}, err
	}
	return r.observe(d), nil
}

// observe is Observe from a GET answer.
func (r *Ray) observe(d *instanceDetails) ServeStatus {
	r.mu.Lock()
	c, a := r.cur, r.asked
	r.mu.Unlock()
	var names []string
	if c != nil {
		names = c.names
	} else {
		names = liveApps(d)
	}
	o := evaluate(d, names)
	if a != nil && o.TargetCapacity != nil && *o.TargetCapacity == a.written && o.Capacity > 0 {
		o.Capacity = a.percent // the cluster holds the rounding-up of what was asked
	}
	return o
}

// do sends one request and returns the body of a 2xx answer.
func (r *Ray) do(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, rollout.Permanent(fmt.Errorf("ray: %s %s: %w", method, url, err))
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "upshift")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set(r.tokenHeader, "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if rerr := (*RedirectError)(nil); errors.As(err, &rerr) {
			return nil, rollout.Permanent(rerr)
		}
		return nil, fmt.Errorf("ray: %w", err) // a *url.Error naming method and URL; retryable
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, r.maxBytes+1))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if len(data) > maxErrorBody {
			data = append(data[:maxErrorBody:maxErrorBody], "..."...)
		}
		herr := &HTTPError{Method: method, URL: url, StatusCode: resp.StatusCode, Body: string(data)}
		if !herr.Temporary() && resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return nil, rollout.Permanent(herr)
		}
		return nil, herr
	}
	if err != nil {
		return nil, fmt.Errorf("ray: %s %s: reading the answer: %w", method, url, err)
	}
	if int64(len(data)) > r.maxBytes {
		return nil, fmt.Errorf("ray: %s %s: %w: more than %d bytes", method, url, ErrResponseTooLarge, r.maxBytes)
	}
	return data, nil
}

// sameOriginRedirects returns a CheckRedirect that refuses, with a
// *RedirectError, a redirect to another scheme, host or port than
// dashboard's, and one that would change the method (net/http turns a PUT
// answered 301, 302 or 303 into a GET without a body). The redirects it
// lets through go to next, or, when next is nil, are followed up to
// maxRedirects.
func sameOriginRedirects(dashboard *url.URL, next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		rerr := &RedirectError{Method: first.Method, URL: first.URL.Redacted(), Location: req.URL.Redacted()}
		if req.Response != nil {
			rerr.StatusCode = req.Response.StatusCode
		}
		switch {
		case !sameOrigin(req.URL, dashboard):
			rerr.Reason = "it leaves " + origin(dashboard)
			return rerr
		case req.Method != first.Method:
			rerr.Reason = "it would turn the " + first.Method + " into a " + req.Method
			return rerr
		case next != nil:
			return next(req, via)
		case len(via) >= maxRedirects:
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
}

// sameOrigin reports whether a and b have the same scheme, host and port,
// a missing port being the scheme's default.
func sameOrigin(a, b *url.URL) bool {
	return origin(a) == origin(b)
}

// origin is u's scheme://host:port, lower case, with the default port
// written out.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
