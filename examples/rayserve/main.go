// Command rayserve upgrades a Ray Serve service from one Ray cluster to
// another with an incremental rollout: the new cluster's target_capacity
// rises ahead of its traffic, the old one's falls behind it, and at the end
// the new cluster returns to a null target capacity and the old one sits at
// 0. It prints every hop with the capacities and ready shares it observed.
//
// With no flags it runs against two in-process Ray Serve emulators:
//
//	go run ./examples/rayserve
//	go run ./examples/rayserve -a http://blue-head:8265 -b http://green-head:8265 -config serve.json
//
// Each cluster is one side, through package serve/ray. For dashboards with
// token authentication pass -token; through the Kubernetes API server's
// service proxy also pass -token-header X-Ray-Authorization, since the API
// server keeps Authorization for itself.
//
// The traffic split between the clusters is kept by an in-memory router;
// in production that is your Gateway API route (package gateway).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/signal"
	"time"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/strategy"
)

// defaultServeConfig is used when -config is not given.
const defaultServeConfig = `{
  "proxy_location": "EveryNode",
  "http_options": {"host": "0.0.0.0", "port": 8000},
  "applications": [{
    "name": "shop", "route_prefix": "/", "import_path": "shop.app:build",
    "deployments": [
      {"name": "Ingress", "num_replicas": 10},
      {"name": "Ranker", "num_replicas": 5},
      {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}
    ]
  }]
}`

// Config holds the flags.
type Config struct {
	A, B        string // dashboard URLs; empty: an in-process emulator
	ConfigFile  string
	Token       string
	TokenHeader string
	Step        int
	Surge       int
	Interval    time.Duration
	Poll        time.Duration
	Timeout     time.Duration
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.A, "a", "", "dashboard URL of the old cluster (default: an in-process emulator)")
	flag.StringVar(&cfg.B, "b", "", "dashboard URL of the new cluster (default: an in-process emulator)")
	flag.StringVar(&cfg.ConfigFile, "config", "", "Serve config (ServeDeploySchema) as a JSON file (default: a sample with three deployments)")
	flag.StringVar(&cfg.Token, "token", "", "bearer token for dashboards that require one")
	flag.StringVar(&cfg.TokenHeader, "token-header", ray.HeaderAuthorization,
		"header carrying -token: Authorization, or X-Ray-Authorization through the Kubernetes API server's service proxy")
	flag.IntVar(&cfg.Step, "step", 10, "weight step in percent")
	flag.IntVar(&cfg.Surge, "surge", 30, "max surge in percent of full capacity")
	flag.DurationVar(&cfg.Interval, "interval", 200*time.Millisecond, "least time between weight steps")
	flag.DurationVar(&cfg.Poll, "poll", 100*time.Millisecond, "poll interval while waiting for the clusters")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rayserve:", err)
		os.Exit(1)
	}
}

// Report is what run found.
type Report struct {
	Final strategy.State
	// Hops counts hops applied; Violations the observations where a side
	// was less ready than the traffic routed to it.
	Hops, Violations int
	// Emulators are the in-process clusters, nil for a URL given.
	EmulatorA, EmulatorB *fake.RayServe
}

func run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	serveConfig := []byte(defaultServeConfig)
	if cfg.ConfigFile != "" {
		b, err := os.ReadFile(cfg.ConfigFile)
		if err != nil {
			return nil, err
		}
		serveConfig = b
	}
	rep := &Report{}
	urlA, urlB := cfg.A, cfg.B
	if urlA == "" {
		rep.EmulatorA = fake.NewRayServe(fake.RayServeOptions{StartPolls: 2, StopPolls: 1})
		srv := httptest.NewServer(rep.EmulatorA)
		defer srv.Close()
		urlA = srv.URL
	}
	if urlB == "" {
		rep.EmulatorB = fake.NewRayServe(fake.RayServeOptions{BuildPolls: 1, StartPolls: 3, StopPolls: 1})
		srv := httptest.NewServer(rep.EmulatorB)
		defer srv.Close()
		urlB = srv.URL
	}
	newSide := func(url string) (*ray.Ray, error) {
		return ray.New(ray.Config{Dashboard: url, ServeConfig: json.RawMessage(serveConfig), Token: cfg.Token, TokenHeader: cfg.TokenHeader})
	}
	a, err := newSide(urlA)
	if err != nil {
		return nil, err
	}
	b, err := newSide(urlB)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "old cluster A: %s\nnew cluster B: %s\napplications: %v\n", a, b, a.Applications())

	// The old cluster serves everything in its steady state before the
	// upgrade starts (nothing is written if it already does).
	if err := a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		return nil, fmt.Errorf("cluster A: %w", err)
	}
	for {
		st, err := a.Capacity(ctx)
		if err != nil {
			return nil, fmt.Errorf("cluster A: %w", err)
		}
		if st.Settled && st.Ready == 100 {
			break
		}
		fmt.Fprintf(out, "waiting for cluster A: ready %d%%\n", st.Ready)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Poll):
		}
	}

	router := fake.NewRouter(nil)
	start := time.Now()
	obs := rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		o := e.After.Observed
		stable, canary := o.Stable, o.Canary
		readyA, readyB := stable.Ready, canary.Ready
		if e.After.StableSide == strategy.SideB {
			readyA, readyB = canary.Ready, stable.Ready
		}
		if w := router.Applied(); e.Err == nil && (readyA < w.A || readyB < w.B) && e.Before.Phase != "" {
			rep.Violations++
		}
		if len(e.Applied) == 0 && e.Err == nil && e.After.Phase == e.Before.Phase {
			return
		}
		line := fmt.Sprintf("%6.2fs %-11s weight B %3d%%   observed: stable cap %3d ready %3d | canary cap %3d ready %3d",
			time.Since(start).Seconds(), e.After.Phase, o.Weight, stable.Capacity, stable.Ready, canary.Capacity, canary.Ready)
		for _, h := range e.Applied {
			line += "\n          -> " + h.String()
			rep.Hops++
		}
		if e.Err != nil {
			line += "\n          !! " + e.Err.Error()
		}
		fmt.Fprintln(out, line)
	})
	r := &rollout.Runner{
		Strategy: strategy.Incremental{
			StepPercent: int32(cfg.Step), Interval: cfg.Interval, MaxSurgePercent: int32(cfg.Surge),
			Options: strategy.Options{PollInterval: cfg.Poll},
		},
		Router: router, A: a, B: b,
		Observer: obs,
		Store:    &fake.Store{},
	}
	final, err := r.Run(ctx, strategy.NewState("v1", "v2"), nil)
	rep.Final = final
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "%s in %.2fs: %s\n", final.Phase, time.Since(start).Seconds(), final.Message)
	if final.Phase != strategy.PhaseSucceeded {
		return rep, fmt.Errorf("the upgrade ended %s", final.Phase)
	}
	for _, side := range []struct {
		name string
		r    *ray.Ray
	}{{"A", a}, {"B", b}} {
		o, err := side.r.Observe(ctx)
		if err != nil {
			return rep, err
		}
		tc := "null"
		if o.TargetCapacity != nil {
			tc = fmt.Sprint(*o.TargetCapacity)
		}
		fmt.Fprintf(out, "cluster %s: target_capacity %s, ready %d%%\n", side.name, tc, o.Ready)
	}
	if rep.Violations > 0 {
		return rep, errors.New("a side was observed less ready than the traffic it received")
	}
	return rep, nil
}
