package promtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/kubetest/promtest"
)

// exporter is a target exposing, in Prometheus' text format, a fixed counter
// and a counter of the scrapes it has served.
type exporter struct {
	scrapes atomic.Int64
	addr    string
}

func startExporter(t *testing.T) *exporter {
	t.Helper()
	e := &exporter{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		n := e.scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# HELP upshift_promtest_requests_total Requests answered, by code.\n"+
			"# TYPE upshift_promtest_requests_total counter\n"+
			"upshift_promtest_requests_total{code=\"200\"} 42\n"+
			"upshift_promtest_requests_total{code=\"500\"} 3\n"+
			"# HELP upshift_promtest_scrapes_total Scrapes served.\n"+
			"# TYPE upshift_promtest_scrapes_total counter\n"+
			"upshift_promtest_scrapes_total %d\n", n)
	}))
	t.Cleanup(srv.Close)
	e.addr = strings.TrimPrefix(srv.URL, "http://")
	return e
}

// rawQuery runs an instant query with plain net/http and decodes the answer
// of the HTTP API as documented.
func rawQuery(t *testing.T, base, expr string) (status string, result []struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: %v: %s", resp.Status, err, body)
	}
	if resp.StatusCode != http.StatusOK || r.Status != "success" || r.Data.ResultType != "vector" {
		t.Fatalf("query %q: %s: %s", expr, resp.Status, body)
	}
	return r.Status, r.Data.Result
}

// eventually polls cond every 100ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, last := cond()
		if ok {
			t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// value returns the single sample of expr, or false.
func value(t *testing.T, prom *promtest.Server, expr string) (float64, bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := prom.Query(ctx, expr)
	if err != nil {
		return 0, false, err.Error()
	}
	if len(s) != 1 {
		return 0, false, fmt.Sprintf("%d samples: %v", len(s), s)
	}
	return s[0].Value, true, fmt.Sprint(s[0])
}

// TestScrapeQueryStopStart: a real Prometheus scrapes a target every 200ms,
// answers instant queries through its HTTP API, and after Stop and Start
// answers again on the same address, with the samples from before the stop
// still in its storage and new ones scraped since; after Kill and Start too.
func TestScrapeQueryStopStart(t *testing.T) {
	exp := startExporter(t)
	prom := promtest.Start(t, promtest.Config{
		Jobs:           []promtest.Job{{Name: "exporter", Targets: []string{exp.addr}, Labels: map[string]string{"side": "stable"}}},
		ScrapeInterval: 200 * time.Millisecond,
	})
	if !strings.HasPrefix(prom.URL, "http://127.0.0.1:") {
		t.Fatalf("URL %q is not on 127.0.0.1", prom.URL)
	}
	if prom.Version != promtest.Version {
		t.Errorf("binary reports version %q, want %q", prom.Version, promtest.Version)
	}

	// The fixed counter appears, with the target's labels, through a plain
	// HTTP request.
	eventually(t, 30*time.Second, "the counter is scraped", func() (bool, string) {
		_, res := rawQuery(t, prom.URL, `upshift_promtest_requests_total{code="200"}`)
		if len(res) != 1 || len(res[0].Value) != 2 {
			return false, fmt.Sprint(res)
		}
		m := res[0].Metric
		if v := res[0].Value[1]; v != "42" || m["job"] != "exporter" || m["instance"] != exp.addr || m["side"] != "stable" {
			return false, fmt.Sprint(res)
		}
		return true, ""
	})
	// The helper reads the same.
	ctx := context.Background()
	samples, err := prom.Query(ctx, `sum by (code) (upshift_promtest_requests_total)`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range samples {
		got[s.Metric["code"]] = s.Value
	}
	if len(got) != 2 || got["200"] != 42 || got["500"] != 3 {
		t.Fatalf("sum by (code): %v", samples)
	}
	if _, err := prom.Query(ctx, `rate(`); err == nil {
		t.Fatal("a malformed query did not fail")
	}
	eventually(t, 30*time.Second, "several scrapes", func() (bool, string) {
		v, ok, last := value(t, prom, `upshift_promtest_scrapes_total`)
		return ok && v >= 3, last
	})

	// Stop: the address stops answering, the target is not scraped.
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	if prom.Running() {
		t.Fatal("Running after Stop")
	}
	if _, err := http.Get(prom.URL + "/-/ready"); err == nil {
		t.Fatal("Prometheus still answers after Stop")
	}
	atStop := exp.scrapes.Load()
	if err := prom.Stop(); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}

	// Start: same address, old samples kept, scraping resumed.
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	if err := prom.Start(); err == nil {
		t.Fatal("Start of a running Prometheus did not fail")
	}
	eventually(t, 30*time.Second, "scrapes after the restart", func() (bool, string) {
		v, ok, last := value(t, prom, `upshift_promtest_scrapes_total`)
		return ok && v > float64(atStop), last
	})
	if v, ok, last := value(t, prom, `min_over_time(upshift_promtest_scrapes_total[10m])`); !ok || v > 2 {
		t.Fatalf("the samples from before the stop are gone: min_over_time %v (%s)", v, last)
	}

	// Kill and Start: answers again.
	if err := prom.Kill(); err != nil {
		t.Fatal(err)
	}
	atKill := exp.scrapes.Load()
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "scrapes after a kill", func() (bool, string) {
		v, ok, last := value(t, prom, `upshift_promtest_scrapes_total`)
		return ok && v > float64(atKill), last
	})
}

// TestConcurrentServers: servers started by parallel tests get their own
// ports and storage.
func TestConcurrentServers(t *testing.T) {
	var mu sync.Mutex
	urls := map[string]bool{}
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			prom := promtest.Start(t, promtest.Config{})
			mu.Lock()
			defer mu.Unlock()
			if urls[prom.URL] {
				t.Errorf("URL %s handed out twice", prom.URL)
			}
			urls[prom.URL] = true
			if _, err := prom.Query(context.Background(), `vector(1)`); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestConfigErrors: a configuration Prometheus would reject fails the test
// before Prometheus runs.
func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]promtest.Config{
		"fractional interval": {ScrapeInterval: 1500 * time.Microsecond},
		"negative evaluation": {EvaluationInterval: -time.Second},
		"unnamed job":         {Jobs: []promtest.Job{{Targets: []string{"127.0.0.1:1"}}}},
		"duplicate job":       {Jobs: []promtest.Job{{Name: "a"}, {Name: "a"}}},
		"target without port": {Jobs: []promtest.Job{{Name: "a", Targets: []string{"127.0.0.1"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			// Past the binary check, whether or not Prometheus is installed.
			t.Setenv("UPSHIFT_PROMETHEUS_BIN", fakeBinary(t))
			r := runHelper(t, func(tb testing.TB) { promtest.Start(tb, cfg) })
			if !r.failed || !strings.Contains(r.msg, "promtest:") {
				t.Fatalf("got %+v, want a failure", r)
			}
		})
	}
}

// TestMissingBinary: without the binary, Start skips the test, or fails it
// when CI=true or UPSHIFT_REQUIRE_KUBE=1; either way the message names the
// install command.
func TestMissingBinary(t *testing.T) {
	t.Setenv("UPSHIFT_PROMETHEUS_BIN", filepath.Join(t.TempDir(), "no-prometheus"))
	for _, tc := range []struct {
		ci, require string
		fail        bool
	}{
		{"", "", false},
		{"false", "0", false},
		{"true", "", true},
		{"", "1", true},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv("UPSHIFT_REQUIRE_KUBE", tc.require)
		r := runHelper(t, func(tb testing.TB) { promtest.Start(tb, promtest.Config{}) })
		if r.failed != tc.fail || r.skipped == tc.fail || !strings.Contains(r.msg, promtest.InstallCommand) {
			t.Errorf("CI=%q UPSHIFT_REQUIRE_KUBE=%q: got %+v, want failed=%v with %s in the message",
				tc.ci, tc.require, r, tc.fail, promtest.InstallCommand)
		}
	}
}

// fakeBinary writes a script that answers --version like Prometheus.
func fakeBinary(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "prometheus")
	script := "#!/bin/sh\necho 'prometheus, version " + promtest.Version + " (fake)'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder is a testing.TB that records a Fatalf or Skipf instead of acting
// on the real test.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Helper() {}

func runHelper(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}
