package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/internal/gatewaytest"
	"github.com/upshift-dev/upshift/internal/kubetest"
	"github.com/upshift-dev/upshift/strategy"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// syncBuffer is a bytes.Buffer safe for the program and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUpgradeBehindARoute runs the program against a real API server with a
// route the "user" created; the test plays the gateway controller.
func TestUpgradeBehindARoute(t *testing.T) {
	env := kubetest.Get(t)
	ns := env.Namespace(t)
	rt, err := gateway.BuildHTTPRoute(gateway.RouteSpec{Namespace: ns, Name: "web", Gateway: "gw",
		A: gateway.Backend{Name: "web-v1", Port: 80}, B: gateway.Backend{Name: "web-v2", Port: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kubeconfig: kubeconfig, Namespace: ns, Route: "web", Kind: gateway.KindHTTPRoute,
		Stable: "web-v1", Canary: "web-v2", Port: 80, StableRev: "v1", CanaryRev: "v2",
		Strategy: "canary", Steps: "25,pause,75", Poll: strategy.MinPollInterval, Deadline: time.Minute}
	var out syncBuffer
	in, inW := ioPipe(t)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go func() { done <- run(ctx, cfg, in, &out) }()
	resumed := false
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "Succeeded: v2 is now the stable revision") {
				t.Fatalf("output:\n%s", out.String())
			}
			t.Logf("program output:\n%s", out.String())
			return
		case <-time.After(20 * time.Millisecond):
		}
		gatewaytest.Accept(t, env.Client, gateway.KindHTTPRoute, ns, "web")
		if !resumed && strings.Contains(out.String(), "Paused") {
			resumed = true
			if _, err := inW.Write([]byte("resume\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestParseSteps(t *testing.T) {
	steps, err := parseSteps("10, pause:1m ,50,pause,100")
	if err != nil || len(steps) != 5 || *steps[0].SetWeight != 10 || *steps[1].Pause.Duration != time.Minute || steps[3].Pause.Duration != nil {
		t.Fatalf("steps %+v err %v", steps, err)
	}
	for _, bad := range []string{"x", "pause:forever"} {
		if _, err := parseSteps(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	if _, err := strategyFor(Config{Strategy: "sideways"}); err == nil {
		t.Error("unknown strategy accepted")
	}
	if _, err := strategyFor(Config{Strategy: "incremental", Step: 0, Interval: time.Second}); err == nil {
		t.Error("step 0 accepted")
	}
}

func ioPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}
