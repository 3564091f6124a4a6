package ray_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

func TestSetAndObserve(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{StartPolls: 2, StopPolls: 1})
	r := adapter(t, srv.URL, llmConfig, noReuse) // each Capacity is a poll of the emulator
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40}); err != nil {
		t.Fatal(err)
	}
	// 40% of 3 replicas needs 2 (ceil 1.2); Ray rounds half up, so the
	// adapter writes target_capacity 50 (1.5 -> 2 replicas): 66% ready,
	// reported up to the 50 written.
	want := []rollout.CapacityStatus{
		{Capacity: 40, Ready: 0, Health: strategy.HealthHealthy},
		{Capacity: 40, Ready: 50, Settled: true, Health: strategy.HealthHealthy},
		{Capacity: 40, Ready: 50, Settled: true, Health: strategy.HealthHealthy},
	}
	for i, w := range want {
		got, err := r.Capacity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Fatalf("poll %d (-want +got):\n%s", i+1, diff)
		}
	}
	o, err := r.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type dep struct {
		Name                                string
		Full, Target, Reported, Running, Re int64
		Ready                               int32
	}
	var got []dep
	for _, d := range o.Applications[0].Deployments {
		got = append(got, dep{d.Name, d.Full, d.Target, d.ReportedTarget, d.Running, d.NotRunning, d.Ready})
	}
	wantDeps := []dep{{"Ingress", 10, 5, 5, 5, 0, 50}, {"Model", 3, 2, 2, 2, 0, 66}} // at target_capacity 50
	if diff := cmp.Diff(wantDeps, got); diff != "" {
		t.Errorf("deployments (-want +got):\n%s", diff)
	}
	// Back to steady: target_capacity null, everything running.
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	if tc, running := rs.TargetCapacity(); tc != nil || !running {
		t.Fatalf("target capacity %v (running %v), want null", tc, running)
	}
	rs.Advance(2)
	st, err := r.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rollout.CapacityStatus{Capacity: 100, Steady: true, Ready: 100, Settled: true, Health: strategy.HealthHealthy}, st); diff != "" {
		t.Errorf("steady (-want +got):\n%s", diff)
	}
}

// An application keeps reporting RUNNING while its deployments scale to a
// higher target capacity: ready capacity follows the replicas, not that.
func TestRunningIsNotReady(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{StartPolls: 3})
	r := adapter(t, srv.URL, llmConfig)
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 20}); err != nil {
		t.Fatal(err)
	}
	rs.Advance(3)
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 80}); err != nil {
		t.Fatal(err)
	}
	o, err := r.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	app := o.Applications[0]
	if app.Status != "RUNNING" {
		t.Fatalf("application status %s, want RUNNING while scaling", app.Status)
	}
	if o.Ready != 20 || o.Settled {
		t.Errorf("ready %d settled %v while scaling from 20 to 80; want 20 and not settled", o.Ready, o.Settled)
	}
	for _, d := range app.Deployments {
		if d.Status != "UPSCALING" {
			t.Errorf("deployment %s status %s, want UPSCALING", d.Name, d.Status)
		}
	}
}

func TestNoPutWhenApplied(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r := adapter(t, srv.URL, llmConfig)
	for _, req := range []rollout.CapacityRequest{{Percent: 40}, {Percent: 40}, {Percent: 100, Steady: true}, {Percent: 100, Steady: true}, {Percent: 100}, {Percent: 100}} {
		if err := r.SetCapacity(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var puts []string
	for _, c := range rs.History() {
		if c.Op == "PUT" {
			puts = append(puts, c.Arg)
		}
	}
	if diff := cmp.Diff([]string{"target_capacity=50", "target_capacity=null", "target_capacity=100"}, puts); diff != "" {
		t.Errorf("PUTs (-want +got):\n%s", diff)
	}
	// The cluster loses its config (Serve restarted): the same request is
	// written again, because the comparison is with the cluster, not memory.
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/api/serve/applications/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
		t.Fatal(err)
	}
	if rs.Puts() != 4 {
		t.Errorf("%d PUTs after Serve restarted, want 4", rs.Puts())
	}
	// A different config for the same application is written too.
	other := adapter(t, srv.URL, strings.Replace(llmConfig, `"num_replicas": 3`, `"num_replicas": 4`, 1))
	if err := other.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
		t.Fatal(err)
	}
	if rs.Puts() != 5 {
		t.Errorf("%d PUTs after a config change, want 5", rs.Puts())
	}
}

func TestUnknownFieldsPreserved(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	withCapacity := strings.Replace(llmConfig, `"proxy_location"`, `"target_capacity": 7, "proxy_location"`, 1)
	r := adapter(t, srv.URL, withCapacity)
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 25}); err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal([]byte(llmConfig), &want); err != nil {
		t.Fatal(err)
	}
	want["target_capacity"] = 25.0
	if err := json.Unmarshal(rs.LastPut(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PUT body (-want +got):\n%s", diff)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		t.Fatal(err)
	}
	var steady map[string]json.RawMessage
	if err := json.Unmarshal(rs.LastPut(), &steady); err != nil {
		t.Fatal(err)
	}
	if v, ok := steady["target_capacity"]; !ok || string(v) != "null" {
		t.Errorf("steady PUT has target_capacity %s (present %v), want null", v, ok)
	}
}

func TestBearerToken(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	rs.RequireToken("s3cret")
	anon := adapter(t, srv.URL, llmConfig)
	err := anon.SetCapacity(ctx, rollout.CapacityRequest{Percent: 10})
	var herr *ray.HTTPError
	if !errors.As(err, &herr) || herr.StatusCode != http.StatusUnauthorized || !rollout.IsPermanent(err) {
		t.Fatalf("without a token: %v, want a permanent 401", err)
	}
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Token = "s3cret" })
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Capacity(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRejectedIsPermanent(t *testing.T) {
	ctx := context.Background()
	_, srv := cluster(t, raytest.Options{})
	dup := `{"applications": [
	  {"name": "a", "route_prefix": "/x", "import_path": "m:a"},
	  {"name": "b", "route_prefix": "/x", "import_path": "m:b"}]}`
	r := adapter(t, srv.URL, dup)
	err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50})
	if !errors.Is(err, ray.ErrRejected) || !rollout.IsPermanent(err) {
		t.Fatalf("got %v, want a permanent rejection", err)
	}
	var herr *ray.HTTPError
	if !errors.As(err, &herr) || herr.StatusCode != 400 || !strings.Contains(herr.Body, "route_prefix") {
		t.Fatalf("got %#v, want Ray's text naming route_prefix", herr)
	}
	if herr.Method != http.MethodPut {
		t.Errorf("method %s, want PUT", herr.Method)
	}
}

func TestServerErrorsAreRetryable(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r := adapter(t, srv.URL, llmConfig)
	for _, code := range []int{500, 502, 503, 504, 429} {
		rs.FailRequests(code, 1)
		err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 30})
		var herr *ray.HTTPError
		if !errors.As(err, &herr) || herr.StatusCode != code || rollout.IsPermanent(err) || !herr.Temporary() {
			t.Fatalf("status %d: got %v, want a retryable HTTPError", code, err)
		}
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 30}); err != nil {
		t.Fatalf("after the failures: %v", err)
	}
	srv.Close()
	err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 40})
	if err == nil || rollout.IsPermanent(err) {
		t.Fatalf("connection refused: %v, want a retryable error", err)
	}
}

func TestHangTimesOut(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	rs.Hang(true)
	defer rs.Hang(false)
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Timeout = 50 * time.Millisecond })
	start := time.Now()
	_, err := r.Capacity(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || rollout.IsPermanent(err) {
		t.Fatalf("got %v, want a retryable deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	// The caller's context bounds it too.
	r = adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.Timeout = -1 })
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := r.SetCapacity(cctx, rollout.CapacityRequest{Percent: 10}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline: %v", err)
	}
}

func TestGarbageIsAnError(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{})
	r := adapter(t, srv.URL, llmConfig)
	rs.Garbage(true)
	_, err := r.Capacity(ctx)
	var derr *ray.DecodeError
	if !errors.As(err, &derr) || rollout.IsPermanent(err) {
		t.Fatalf("got %v, want a retryable *DecodeError", err)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 10}); !errors.As(err, &derr) {
		t.Fatalf("SetCapacity reads first: %v", err)
	}
	if rs.Puts() != 0 {
		t.Errorf("%d PUTs after an unreadable GET, want 0", rs.Puts())
	}
}

func TestResponseBound(t *testing.T) {
	ctx := context.Background()
	_, srv := cluster(t, raytest.Options{})
	big := adapter(t, srv.URL, llmConfig)
	if err := big.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100}); err != nil {
		t.Fatal(err)
	}
	small := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.MaxResponseBytes = 256 })
	if _, err := small.Capacity(ctx); !errors.Is(err, ray.ErrResponseTooLarge) {
		t.Fatalf("got %v, want ErrResponseTooLarge", err)
	}
}

func TestUnhealthy(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{StartPolls: 1})
	r := adapter(t, srv.URL, llmConfig, noReuse) // sees the failures the test injects at once
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	if err := rs.FailDeployment("llm", "Model", "DEPLOY_FAILED", "ImportError: no module named vllm"); err != nil {
		t.Fatal(err)
	}
	st, err := r.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Health != strategy.HealthUnhealthy || !strings.Contains(st.HealthMessage, "no module named vllm") || st.Settled {
		t.Fatalf("got %+v, want unhealthy with Ray's message", st)
	}
	if st.Ready != 0 {
		t.Errorf("ready %d with the model never started, want 0", st.Ready)
	}
	rs.HealDeployment("llm", "Model")
	rs.Advance(1)
	if st, _ := r.Capacity(ctx); st.Health != strategy.HealthHealthy || !st.Settled || st.Ready != 50 {
		t.Fatalf("healed: %+v", st)
	}
	if err := rs.FailDeployment("llm", "Ingress", "UNHEALTHY", "health check failed"); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Capacity(ctx); st.Health != strategy.HealthUnhealthy || !strings.Contains(st.HealthMessage, "health check failed") {
		t.Fatalf("unhealthy: %+v", st)
	}
}

func TestAutoscaling(t *testing.T) {
	ctx := context.Background()
	rs, srv := cluster(t, raytest.Options{StartPolls: 1})
	cfg := `{"applications": [{"name": "chat", "import_path": "chat:app", "deployments": [
	  {"name": "LLM", "autoscaling_config": {"min_replicas": 4, "max_replicas": 12, "initial_replicas": 6}}]}]}`
	r := adapter(t, srv.URL, cfg, noReuse) // sees the load the test sets at once
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 50}); err != nil {
		t.Fatal(err)
	}
	// After a deploy Ray's floor is initial_replicas scaled: 3; the full
	// count is min_replicas (4), whose 50% is 2: ready 2/4.
	o, err := r.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := o.Applications[0].Deployments[0]
	if !d.Autoscaling || d.Full != 4 || d.Target != 2 || d.ReportedTarget != 3 || d.Running != 3 || d.Ready != 50 || !o.Settled {
		t.Fatalf("got %+v settled %v", d, o.Settled)
	}
	// Load asks for 20 replicas: capped at 50% of max_replicas, 6.
	rs.SetDemand("chat", "LLM", 20)
	o, _ = r.Observe(ctx)
	if d := o.Applications[0].Deployments[0]; d.ReportedTarget != 6 || d.Running != 6 || d.Ready != 50 {
		t.Fatalf("under load: %+v", d)
	}
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Capacity(ctx); st.Ready != 0 || !st.Settled || st.Capacity != 0 {
		t.Fatalf("at 0: %+v", st)
	}
}

func TestTLS(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewTLSServer(raytest.New(raytest.Options{}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	r := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.TLS = &tls.Config{RootCAs: pool} })
	if err := r.SetCapacity(ctx, rollout.CapacityRequest{Percent: 60}); err != nil {
		t.Fatal(err)
	}
	untrusted := adapter(t, srv.URL, llmConfig)
	if _, err := untrusted.Capacity(ctx); err == nil {
		t.Fatal("an unknown certificate was accepted")
	}
	shared := adapter(t, srv.URL, llmConfig, func(c *ray.Config) { c.HTTPClient = srv.Client() })
	if st, err := shared.Capacity(ctx); err != nil || st.Capacity != 60 {
		t.Fatalf("with the server's client: %+v %v", st, err)
	}
}

// A cluster without the managed applications holds nothing, so a fresh
// canary cluster reads as capacity 0, settled.
func TestEmptyCluster(t *testing.T) {
	_, srv := cluster(t, raytest.Options{})
	st, err := adapter(t, srv.URL, llmConfig).Capacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rollout.CapacityStatus{Settled: true, Health: strategy.HealthHealthy}, st); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name   string
		c      ray.Config
		fields []string
	}{
		{"empty", ray.Config{}, []string{"Dashboard", "ServeConfig"}},
		{"scheme", ray.Config{Dashboard: "ftp://x", ServeConfig: json.RawMessage(llmConfig)}, []string{"Dashboard"}},
		{"no host", ray.Config{Dashboard: "http://", ServeConfig: json.RawMessage(llmConfig)}, []string{"Dashboard"}},
		{"query", ray.Config{Dashboard: "http://h:8265/?a=b", ServeConfig: json.RawMessage(llmConfig)}, []string{"Dashboard"}},
		{"not an object", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(`[1]`)}, []string{"ServeConfig"}},
		{"no applications", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(`{"proxy_location": "HeadOnly"}`)}, []string{"ServeConfig.applications"}},
		{"applications not a list", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(`{"applications": {}}`)}, []string{"ServeConfig.applications"}},
		{"duplicate names", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(
			`{"applications": [{"import_path": "a:b"}, {"name": "default", "import_path": "c:d"}, 3, {"name": 4}]}`)},
			[]string{"ServeConfig.applications[1].name", "ServeConfig.applications[2]", "ServeConfig.applications[3].name"}},
		{"negative bound", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(llmConfig), MaxResponseBytes: -1}, []string{"MaxResponseBytes"}},
		{"token header", ray.Config{Dashboard: "http://h", ServeConfig: json.RawMessage(llmConfig), Token: "t", TokenHeader: "X-Auth-Token"}, []string{"TokenHeader"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ray.New(tc.c)
			if !errors.Is(err, ray.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			var fields []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ray.ConfigError
				if errors.As(e, &ce) {
					fields = append(fields, ce.Field)
				}
			}
			if diff := cmp.Diff(tc.fields, fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s\n%v", diff, err)
			}
		})
	}
	r, err := ray.New(ray.Config{Dashboard: "http://h:8265/ray/", ServeConfig: json.RawMessage(llmConfig)})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r); got != "http://h:8265/ray/api/serve/applications/" {
		t.Errorf("endpoint %s", got)
	}
	if diff := cmp.Diff([]string{"llm"}, r.Applications()); diff != "" {
		t.Errorf("applications (-want +got):\n%s", diff)
	}
}

func TestBadRequests(t *testing.T) {
	r := adapter(t, "http://127.0.0.1:1", llmConfig)
	for _, req := range []rollout.CapacityRequest{{Percent: -1}, {Percent: 101}, {Percent: 50, Steady: true}} {
		if err := r.SetCapacity(context.Background(), req); !rollout.IsPermanent(err) {
			t.Errorf("%+v: %v, want a permanent error", req, err)
		}
	}
}
