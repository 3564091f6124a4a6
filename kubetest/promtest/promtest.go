// Package promtest runs a real Prometheus server for upshift's tests, on
// loopback, scraping the targets a test names. hack/prometheus.sh builds
// its binary into a cache outside the repository ([Binary]), as ./test.sh
// does when it is missing; docs/design/kubetest.md names the release.
//
//	func TestSomething(t *testing.T) {
//		prom := promtest.Start(t, promtest.Config{
//			Jobs: []promtest.Job{{Name: "app", Targets: []string{"127.0.0.1:9100"}}},
//		}) // skips or fails t when the binary is missing
//		samples, err := prom.Query(ctx, `rate(requests_total[5s])`)
//		...
//		prom.Stop()  // Prometheus goes away mid-test...
//		prom.Start() // ...and comes back on the same port with the same data
//	}
//
// Each [Start] runs a Prometheus of its own, with its own port, storage
// directory (kept across [Server.Stop] and [Server.Start]) and generated
// configuration: a short scrape and evaluation interval (1s unless the
// [Config] says otherwise) and one static_configs job per [Job]. Prometheus is
// stopped when the test ends; on Linux the kernel also kills it if the test
// binary dies first (SIGKILL, a crash, a -timeout panic).
//
// # When the binary is missing
//
// With CI=true or UPSHIFT_REQUIRE_KUBE=1 in the environment (the rule of
// kubetest, whose binaries ./test.sh builds alongside), Start fails
// the test with a message naming hack/prometheus.sh; otherwise it skips the
// test with that message. A Prometheus that fails to start always fails the
// test; it is never a reason to skip.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/internal/osthread"
)

// Version is the Prometheus release that hack/prometheus.sh builds.
const Version = "3.16.0"

// InstallCommand is the command, relative to the repository root, that puts
// the binary where [Binary] looks.
const InstallCommand = "hack/prometheus.sh"

// ErrNoBinary reports that the Prometheus binary is missing.
var ErrNoBinary = errors.New("promtest: prometheus not found")

// Defaults for the zero values of [Config].
const (
	DefaultScrapeInterval = time.Second
	DefaultStartTimeout   = time.Minute // generous: go test -race ./... on 2 cores
	stopTimeout           = 30 * time.Second
	discoveryReload       = "100ms"
)

// Binary returns the path of the Prometheus binary: $UPSHIFT_PROMETHEUS_BIN
// when set, else $HOME/.cache/upshift/prometheus/v<Version>/prometheus.
// hack/prometheus.sh uses the same rule.
func Binary() string {
	if b := os.Getenv("UPSHIFT_PROMETHEUS_BIN"); b != "" {
		return b
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.Getenv("HOME")
	}
	return filepath.Join(home, ".cache", "upshift", "prometheus", "v"+Version, "prometheus")
}

// Required reports whether a missing binary must fail the tests rather than
// skip them: CI=true or UPSHIFT_REQUIRE_KUBE=1 (any value strconv.ParseBool
// reads as true), the same rule as kubetest's Required.
func Required() bool {
	return envTrue("CI") || envTrue("UPSHIFT_REQUIRE_KUBE")
}

func envTrue(name string) bool {
	b, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && b
}

// checkBinary returns nil when bin is an executable file, else an error
// wrapping ErrNoBinary that names the install command.
func checkBinary(bin string) error {
	fi, err := os.Stat(bin)
	if err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
		return nil
	}
	return fmt.Errorf("%w at %s: install Prometheus %s with %s (Go module proxy only, about 6 minutes once, then cached), set UPSHIFT_PROMETHEUS_BIN to a prometheus binary, or run the whole suite with ./test.sh",
		ErrNoBinary, bin, Version, InstallCommand)
}

// Job is one scrape job of the generated configuration.
type Job struct {
	// Name is the job_name, and so the value of the job label; required
	// and unique within a Config.
	Name string
	// Targets are host:port addresses scraped over plain HTTP.
	Targets []string
	// MetricsPath is the path scraped on every target; /metrics when empty.
	MetricsPath string
	// Labels are added to every series scraped from the targets.
	Labels map[string]string
}

// Config describes the Prometheus that [Start] runs.
type Config struct {
	// Jobs are scraped with static_configs; none is valid too.
	Jobs []Job
	// ScrapeInterval is the global scrape_interval, and the scrape_timeout
	// too; DefaultScrapeInterval when zero. Whole milliseconds.
	ScrapeInterval time.Duration
	// EvaluationInterval is the global evaluation_interval; ScrapeInterval
	// when zero. Whole milliseconds.
	EvaluationInterval time.Duration
	// Args are extra command-line flags, for example
	// "--query.lookback-delta=10s"; not one that promtest sets
	// (--config.file, --storage.tsdb.path, --web.listen-address,
	// --scrape.discovery-reload-interval), which Prometheus would reject as
	// repeated.
	Args []string
	// StartTimeout bounds each start, until /-/ready answers 200;
	// DefaultStartTimeout when zero.
	StartTimeout time.Duration
}

// Server is a Prometheus started by [Start]. Its methods are safe for
// concurrent use, from any goroutine.
type Server struct {
	// URL is the base URL of the HTTP API, http://127.0.0.1:<port>, the same
	// across Stop and Start.
	URL string
	// Addr is host:port of URL.
	Addr string
	// DataDir is the TSDB directory, kept across Stop and Start.
	DataDir string
	// ConfigFile is the generated configuration.
	ConfigFile string
	// LogFile holds the output of every run, appended.
	LogFile string
	// Version is what the binary reports, e.g. "3.16.0".
	Version string

	bin          string
	args         []string
	startTimeout time.Duration
	thread       *osthread.Thread

	mu      sync.Mutex
	running *process // nil when stopped
}

// process is one run of the binary.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when Wait returned
	err    error         // Wait's result, set before exited is closed
}

// Start runs Prometheus as cfg describes, on 127.0.0.1 at a free port with a
// fresh storage directory under tb.TempDir, waits until it is ready, and
// stops it when the test ends (tb.Cleanup). When the binary is missing it
// skips tb, or fails it when [Required]; when Prometheus does not start it
// fails tb.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	bin := Binary()
	if err := checkBinary(bin); err != nil {
		if Required() {
			tb.Fatalf("%v\n(required because CI=true or UPSHIFT_REQUIRE_KUBE=1)", err)
		}
		tb.Skipf("%v", err)
	}
	version, err := binaryVersion(bin)
	if err != nil {
		tb.Fatalf("promtest: %v", err)
	}
	conf, err := renderConfig(cfg)
	if err != nil {
		tb.Fatalf("promtest: %v", err)
	}
	dir := tb.TempDir()
	s := &Server{
		DataDir:      filepath.Join(dir, "data"),
		ConfigFile:   filepath.Join(dir, "prometheus.yml"),
		LogFile:      filepath.Join(dir, "prometheus.log"),
		Version:      version,
		bin:          bin,
		startTimeout: cfg.StartTimeout,
		thread:       osthread.New(),
	}
	if s.startTimeout <= 0 {
		s.startTimeout = DefaultStartTimeout
	}
	if err := os.WriteFile(s.ConfigFile, conf, 0o600); err != nil {
		tb.Fatalf("promtest: %v", err)
	}
	if err := os.Mkdir(s.DataDir, 0o700); err != nil {
		tb.Fatalf("promtest: %v", err)
	}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("promtest: %v", err)
		}
		s.thread.Close()
		if tb.Failed() {
			s.dumpLog(tb)
		}
	})

	// A free port can be taken between choosing it and Prometheus binding
	// it: choose again then, on the first start only.
	begin := time.Now()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("promtest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.URL = "http://" + s.Addr
		s.args = append([]string{
			"--config.file=" + s.ConfigFile,
			"--storage.tsdb.path=" + s.DataDir,
			"--web.listen-address=" + s.Addr,
			// Scrape pools start after the first discovery reload,
			// 5s after start by default: far from a short interval.
			"--scrape.discovery-reload-interval=" + discoveryReload,
		}, cfg.Args...)
		err = s.Start()
		if err == nil {
			break
		}
		if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		tb.Fatalf("%v", err) // the Cleanup logs Prometheus' output
	}
	tb.Logf("promtest: prometheus %s ready at %s after %v (scrape interval %v, %d jobs)",
		s.Version, s.URL, time.Since(begin).Round(time.Millisecond), scrapeInterval(cfg), len(cfg.Jobs))
	return s
}

// Start starts Prometheus again after [Server.Stop] or [Server.Kill], on the
// same address with the same storage and configuration, and waits until it
// is ready. It returns an error if Prometheus is running, or does not become
// ready within the Config's StartTimeout (it is killed then).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		if s.running.alive() {
			return fmt.Errorf("promtest: prometheus at %s is already running", s.Addr)
		}
		s.running = nil // it exited by itself; start it again
	}
	logf, err := os.OpenFile(s.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("promtest: %w", err)
	}
	fmt.Fprintf(logf, "=== promtest: starting %s at %s\n", s.bin, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = filepath.Dir(s.DataDir)
	// Nothing from the test's environment: no proxy variables, no HOME.
	cmd.Env = []string{"HOME=" + filepath.Dir(s.DataDir)}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	var startErr error
	s.thread.Run(func() { startErr = cmd.Start() })
	logf.Close() // the child has its own descriptor
	if startErr != nil {
		return fmt.Errorf("promtest: starting %s: %w", s.bin, startErr)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := s.waitReady(p); err != nil {
		_ = cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("promtest: prometheus at %s: %w; its log: %s", s.Addr, err, s.logTail(20))
	}
	s.running = p
	return nil
}

// waitReady polls /-/ready until it answers 200.
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.startTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited during start (%v)", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last: %s)", s.startTimeout, last)
		case <-tick.C:
		}
	}
}

// Stop stops Prometheus gracefully (SIGTERM; SIGKILL after 30s) and waits
// until it has exited; its storage stays for [Server.Start]. Stopping a
// stopped Server does nothing. It returns an error when Prometheus had to be
// killed or had already exited by itself.
func (s *Server) Stop() error {
	return s.stop(syscall.SIGTERM)
}

// Kill kills Prometheus (SIGKILL), as a crash would, and waits until it has
// exited; what it had not yet written to its write-ahead log is lost.
// Killing a stopped Server does nothing.
func (s *Server) Kill() error {
	return s.stop(syscall.SIGKILL)
}

func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running
	if p == nil {
		return nil
	}
	s.running = nil
	if !p.alive() {
		return fmt.Errorf("promtest: prometheus at %s had exited by itself (%v); its log: %s", s.Addr, p.err, s.logTail(20))
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("promtest: prometheus at %s did not stop within %v of %v; killed", s.Addr, stopTimeout, sig)
	}
	if sig == syscall.SIGTERM && p.err != nil {
		return fmt.Errorf("promtest: prometheus at %s: %v on SIGTERM; its log: %s", s.Addr, p.err, s.logTail(20))
	}
	return nil
}

// Running reports whether Prometheus is running: started, and neither
// stopped nor exited by itself.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running != nil && s.running.alive()
}

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Sample is one element of an instant vector.
type Sample struct {
	Metric map[string]string
	Value  float64
	Time   time.Time
}

// Query runs an instant query at the current time through /api/v1/query and
// returns its result, which must be an instant vector (scalars and strings
// are errors).
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/v1/query",
		strings.NewReader(url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("promtest: query %q: %w", expr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("promtest: query %q: %w", expr, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("promtest: query %q: %s: %w (body %.200q)", expr, resp.Status, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("promtest: query %q: %s: %s", expr, resp.Status, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("promtest: query %q: result type %q, want vector", expr, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		ts, ok1 := e.Value[0].(float64)
		vs, ok2 := e.Value[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("promtest: query %q: malformed sample %v", expr, e.Value)
		}
		v, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			return nil, fmt.Errorf("promtest: query %q: sample value %q: %w", expr, vs, err)
		}
		sec := int64(ts)
		out = append(out, Sample{Metric: e.Metric, Value: v,
			Time: time.Unix(sec, int64((ts-float64(sec))*1e9)).Round(time.Millisecond)})
	}
	return out, nil
}

// renderConfig returns the Prometheus configuration for cfg, as JSON (which
// YAML, and so Prometheus, reads).
func renderConfig(cfg Config) ([]byte, error) {
	type staticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	type scrapeConfig struct {
		JobName       string         `json:"job_name"`
		MetricsPath   string         `json:"metrics_path,omitempty"`
		StaticConfigs []staticConfig `json:"static_configs"`
	}
	type global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		ScrapeTimeout      string `json:"scrape_timeout"`
		EvaluationInterval string `json:"evaluation_interval"`
	}
	var c struct {
		Global        global         `json:"global"`
		ScrapeConfigs []scrapeConfig `json:"scrape_configs"`
	}
	scrape, err := promDuration(scrapeInterval(cfg))
	if err != nil {
		return nil, fmt.Errorf("scrape interval: %w", err)
	}
	eval := cfg.EvaluationInterval
	if eval == 0 {
		eval = scrapeInterval(cfg)
	}
	evalS, err := promDuration(eval)
	if err != nil {
		return nil, fmt.Errorf("evaluation interval: %w", err)
	}
	c.Global = global{ScrapeInterval: scrape, ScrapeTimeout: scrape, EvaluationInterval: evalS}
	c.ScrapeConfigs = []scrapeConfig{}
	seen := map[string]bool{}
	for _, j := range cfg.Jobs {
		if j.Name == "" {
			return nil, errors.New("a Job without a Name")
		}
		if seen[j.Name] {
			return nil, fmt.Errorf("two Jobs named %q", j.Name)
		}
		seen[j.Name] = true
		for _, t := range j.Targets {
			if _, _, err := net.SplitHostPort(t); err != nil {
				return nil, fmt.Errorf("job %q: target %q is not host:port: %w", j.Name, t, err)
			}
		}
		c.ScrapeConfigs = append(c.ScrapeConfigs, scrapeConfig{
			JobName:       j.Name,
			MetricsPath:   j.MetricsPath,
			StaticConfigs: []staticConfig{{Targets: append([]string{}, j.Targets...), Labels: j.Labels}},
		})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func scrapeInterval(cfg Config) time.Duration {
	if cfg.ScrapeInterval == 0 {
		return DefaultScrapeInterval
	}
	return cfg.ScrapeInterval
}

// promDuration formats d as Prometheus' duration syntax, which has no
// fractions: "2s" or "1500ms".
func promDuration(d time.Duration) (string, error) {
	switch {
	case d <= 0:
		return "", fmt.Errorf("%v is not positive", d)
	case d%time.Millisecond != 0:
		return "", fmt.Errorf("%v is not a whole number of milliseconds", d)
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s", nil
	default:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms", nil
	}
}

// binaryVersion runs bin --version and returns the version it reports.
// The answer is remembered per path: the binary is large and every test
// would pay for loading it.
func binaryVersion(bin string) (string, error) {
	versions.Lock()
	defer versions.Unlock()
	if v, ok := versions.m[bin]; ok {
		return v, nil
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	// "prometheus, version 3.16.0 (branch: ..., revision: ...)"
	first, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(first)
	if len(f) < 3 || f[1] != "version" {
		return "", fmt.Errorf("%s --version: unexpected output %q", bin, first)
	}
	if versions.m == nil {
		versions.m = map[string]string{}
	}
	versions.m[bin] = f[2]
	return f[2], nil
}

var versions struct {
	sync.Mutex
	m map[string]string
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last n lines of the log file, indented, for errors.
func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(s.LogFile)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}

// dumpLog logs the last 200 lines of Prometheus' output.
func (s *Server) dumpLog(tb testing.TB) {
	tb.Helper()
	tb.Logf("promtest: %s:%s", s.LogFile, s.logTail(200))
}
