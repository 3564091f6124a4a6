// Command rayserve upgrades a Ray Serve service from one Ray cluster to
// another with an incremental rollout, and deploys the new revision itself:
// cluster A (side A) runs the old revision, cluster B (side B) gets the new
// one from the Runner, at target_capacity 0, while the route sends it no
// traffic; then B's target_capacity rises ahead of its traffic and A's
// falls behind it. It prints every hop with the capacities and ready
// shares it observed.
//
//	go run ./examples/rayserve
//	go run ./examples/rayserve -a http://blue-head:8265 -b http://green-head:8265 \
//	    -config serve-v1.json -new-config serve-v2.json
//
// With no flags it runs against two in-process Ray Serve emulators
// (serve/ray/raytest) and a built-in pair of revisions. -config and
// -new-config are the two revisions' Serve configs (give both or neither);
// their applications must differ. With real clusters, cluster A must
// already run the -config revision exactly, and cluster B be empty or at
// target_capacity 0; the program checks both before it starts. The
// emulators refuse and record a redeploy of a serving cluster, and the
// program then exits 1. -token passes a dashboard token (with
// -token-header X-Ray-Authorization through the API server's service
// proxy). The traffic split is kept by an in-memory router; in production
// that is your Gateway API route. See docs/design/examples.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upshift-dev/upshift/fake"
	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

// The two revisions: the one cluster A runs, and the one the Runner
// deploys on cluster B.
const (
	oldRevision = "v1"
	newRevision = "v2"
)

// defaultOldConfig is v1's Serve config when -config is not given.
const defaultOldConfig = `{
  "proxy_location": "EveryNode",
  "http_options": {"host": "0.0.0.0", "port": 8000},
  "applications": [{
    "name": "shop", "route_prefix": "/", "import_path": "shop.app:build",
    "runtime_env": {"env_vars": {"SHOP_VERSION": "1"}},
    "deployments": [
      {"name": "Ingress", "num_replicas": 10},
      {"name": "Ranker", "num_replicas": 5, "user_config": {"model": "ranker-2024-05"}},
      {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}
    ]
  }]
}`

// defaultNewConfig is v2's Serve config when -new-config is not given: v1
// with a new Ranker model and SHOP_VERSION 2.
const defaultNewConfig = `{
  "proxy_location": "EveryNode",
  "http_options": {"host": "0.0.0.0", "port": 8000},
  "applications": [{
    "name": "shop", "route_prefix": "/", "import_path": "shop.app:build",
    "runtime_env": {"env_vars": {"SHOP_VERSION": "2"}},
    "deployments": [
      {"name": "Ingress", "num_replicas": 10},
      {"name": "Ranker", "num_replicas": 5, "user_config": {"model": "ranker-2024-09"}},
      {"name": "Embedder", "autoscaling_config": {"min_replicas": 5, "max_replicas": 20, "initial_replicas": 10}}
    ]
  }]
}`

// Config holds the flags.
type Config struct {
	A, B          string // dashboard URLs; empty: an in-process emulator
	ConfigFile    string // v1's Serve config
	NewConfigFile string // v2's Serve config
	Token         string
	TokenHeader   string
	Step          int
	Surge         int
	Interval      time.Duration
	Poll          time.Duration
	Timeout       time.Duration
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.A, "a", "", "dashboard URL of the old cluster, which runs -config (default: an in-process emulator)")
	flag.StringVar(&cfg.B, "b", "", "dashboard URL of the new cluster, empty or at target_capacity 0 (default: an in-process emulator)")
	flag.StringVar(&cfg.ConfigFile, "config", "", "Serve config (ServeDeploySchema) of revision v1, which cluster A runs, as a JSON file (default: a sample with three deployments)")
	flag.StringVar(&cfg.NewConfigFile, "new-config", "", "Serve config of revision v2, which the upgrade deploys on cluster B, as a JSON file (default: the sample with a new Ranker model)")
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
	// Hops are the hops applied, in order, each with what the Runner had
	// observed when it asked for it.
	Hops []Hop
	// Overloads counts the observations where a side was less ready than
	// the traffic routed to it.
	Overloads int
	// Violations are the PUTs the emulators refused as a redeploy of a
	// cluster at a target capacity other than 0 or with traffic.
	Violations []string
	// Puts are the PUTs the emulators answered, in order; none for a URL
	// given.
	Puts []Put
	// Emulators are the in-process clusters, nil for a URL given.
	EmulatorA, EmulatorB *raytest.Server
}

// Hop is one applied hop and the observation it was decided on.
type Hop struct {
	rollout.Hop
	// Weight is the canary's weight on the route, CanaryCapacity its
	// capacity, as observed.
	Weight, CanaryCapacity int32
}

// Put is one PUT of a Serve config that an emulator answered.
type Put struct {
	Cluster string // "A" or "B"
	// Revision is the revision whose applications the config holds, ""
	// for none.
	Revision string
	// TargetCapacity is the one asked, nil for null.
	TargetCapacity *float64
	// Serving is the cluster's share of the traffic when the PUT arrived.
	Serving int32
	// Status is the emulator's answer.
	Status int
}

// readConfigs returns the Serve configs of v1 and v2.
func readConfigs(cfg Config) (map[string]json.RawMessage, error) {
	if (cfg.ConfigFile == "") != (cfg.NewConfigFile == "") {
		return nil, errors.New("give both -config and -new-config, or neither")
	}
	configs := map[string]json.RawMessage{oldRevision: json.RawMessage(defaultOldConfig), newRevision: json.RawMessage(defaultNewConfig)}
	for rev, file := range map[string]string{oldRevision: cfg.ConfigFile, newRevision: cfg.NewConfigFile} {
		if file == "" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		configs[rev] = b
	}
	if appsOf(configs[oldRevision]) == nil || appsOf(configs[newRevision]) == nil {
		return nil, errors.New("-config and -new-config must be JSON objects with a list of applications")
	}
	if reflect.DeepEqual(appsOf(configs[oldRevision]), appsOf(configs[newRevision])) {
		return nil, errors.New("-config and -new-config have the same applications: the two revisions would read as one")
	}
	return configs, nil
}

// appsOf decodes the applications of a Serve config, nil if it has none.
func appsOf(raw []byte) []any {
	var c struct {
		Applications []any `json:"applications"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return nil
	}
	return c.Applications
}

func run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	configs, err := readConfigs(cfg)
	if err != nil {
		return nil, err
	}
	rep := &Report{}
	router := fake.NewRouter(nil)
	var mu sync.Mutex // guards rep.Puts, written by the emulators' handlers
	emulate := func(side strategy.Side, opts raytest.Options) (*raytest.Server, string, func()) {
		opts.GuardRedeploys = true
		em := raytest.New(opts)
		serving := router.Serving(side)
		em.ServingFunc(serving)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method != http.MethodPut {
				em.ServeHTTP(w, req)
				return
			}
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			put := Put{Cluster: string(side), Serving: serving()}
			var c struct {
				TargetCapacity *float64 `json:"target_capacity"`
			}
			_ = json.Unmarshal(body, &c)
			put.TargetCapacity = c.TargetCapacity
			for _, rev := range []string{oldRevision, newRevision} {
				if reflect.DeepEqual(appsOf(body), appsOf(configs[rev])) {
					put.Revision = rev
				}
			}
			// The answer is recorded before the client reads it.
			rec := httptest.NewRecorder()
			em.ServeHTTP(rec, req)
			put.Status = rec.Code
			mu.Lock()
			rep.Puts = append(rep.Puts, put)
			mu.Unlock()
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		}))
		return em, srv.URL, srv.Close
	}
	urlA, urlB := cfg.A, cfg.B
	if urlA == "" {
		em, url, closeSrv := emulate(strategy.SideA, raytest.Options{StartPolls: 2, StopPolls: 1})
		defer closeSrv()
		rep.EmulatorA, urlA = em, url
		// The workload the caller created: v1's config as it is, which
		// the emulator, like Ray, takes as a first deploy.
		if err := serveDeploy(ctx, urlA, configs[oldRevision]); err != nil {
			return rep, fmt.Errorf("cluster A: deploying %s: %w", oldRevision, err)
		}
	}
	if urlB == "" {
		em, url, closeSrv := emulate(strategy.SideB, raytest.Options{BuildPolls: 1, StartPolls: 3, StopPolls: 1})
		defer closeSrv()
		rep.EmulatorB, urlB = em, url
	}
	revisions := ray.RevisionMap(configs)
	newSide := func(url string) (*ray.Ray, *ray.Deployer, error) {
		r, err := ray.New(ray.Config{Dashboard: url, Revisions: revisions, Token: cfg.Token, TokenHeader: cfg.TokenHeader})
		if err != nil {
			return nil, nil, err
		}
		d, err := r.Deployer()
		return r, d, err
	}
	a, da, err := newSide(urlA)
	if err != nil {
		return rep, err
	}
	b, db, err := newSide(urlB)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "old cluster A: %s, runs %s\nnew cluster B: %s, gets %s\n", a, oldRevision, b, newRevision)

	// Cluster A must run v1 (and is recognised running it, so that its
	// adapter writes v1's config when it sets a capacity); cluster B must
	// not serve anything but v2.
	if st, err := da.Revision(ctx, oldRevision); err != nil {
		return rep, fmt.Errorf("cluster A: %w", err)
	} else if st.Revision != oldRevision {
		return rep, fmt.Errorf("cluster A does not run the applications of -config (revision %s) as Ray reports them deployed: deploy it first", oldRevision)
	}
	if st, err := db.Revision(ctx, newRevision); err != nil {
		return rep, fmt.Errorf("cluster B: %w", err)
	} else if st.Revision != newRevision {
		o, err := b.Observe(ctx)
		if err != nil {
			return rep, fmt.Errorf("cluster B: %w", err)
		}
		if len(o.Applications) > 0 && (o.TargetCapacity == nil || *o.TargetCapacity != 0) {
			return rep, fmt.Errorf("cluster B runs applications at target_capacity %s: it must be empty or at target_capacity 0 to get %s", formatTC(o.TargetCapacity), newRevision)
		}
	}

	// The old cluster serves everything in its steady state before the
	// upgrade starts (nothing is written if it already does).
	if err := a.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil {
		return rep, fmt.Errorf("cluster A: %w", err)
	}
	for {
		st, err := a.Capacity(ctx)
		if err != nil {
			return rep, fmt.Errorf("cluster A: %w", err)
		}
		if st.Settled && st.Ready == 100 {
			break
		}
		fmt.Fprintf(out, "waiting for cluster A: ready %d%%\n", st.Ready)
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(cfg.Poll):
		}
	}

	start := time.Now()
	rolledOut := false
	obs := rollout.ObserverFunc(func(_ context.Context, e rollout.Event) {
		o := e.After.Observed
		stable, canary := o.Stable, o.Canary
		readyA, readyB := stable.Ready, canary.Ready
		canarySide := strategy.SideB
		if e.After.StableSide == strategy.SideB {
			readyA, readyB = canary.Ready, stable.Ready
			canarySide = strategy.SideA
		}
		if w := router.Applied(); e.Err == nil && (readyA < w.A || readyB < w.B) && e.Before.Phase != "" {
			rep.Overloads++
		}
		var lines []string
		if !rolledOut && canary.RunsRevision(e.After.CanaryRevision) && e.After.CanaryRevision != e.After.StableRevision {
			rolledOut = true
			lines = append(lines, fmt.Sprintf("%s rolled out on cluster %s", e.After.CanaryRevision, canarySide))
		}
		for _, h := range e.Applied {
			line := "-> " + h.String()
			if h.Kind == rollout.HopDeploy {
				line += fmt.Sprintf(": its Serve config at target_capacity 0, weight %d", o.Weight)
			}
			lines = append(lines, line)
			rep.Hops = append(rep.Hops, Hop{Hop: h, Weight: o.Weight, CanaryCapacity: canary.Capacity})
		}
		if e.Err != nil {
			lines = append(lines, "!! "+e.Err.Error())
		}
		if len(lines) == 0 && e.After.Phase == e.Before.Phase {
			return
		}
		fmt.Fprintf(out, "%6.2fs %-11s weight B %3d%%   observed: stable cap %3d ready %3d | canary %s cap %3d ready %3d\n",
			time.Since(start).Seconds(), e.After.Phase, o.Weight, stable.Capacity, stable.Ready, revisionOf(canary), canary.Capacity, canary.Ready)
		for _, l := range lines {
			fmt.Fprintln(out, "          "+l)
		}
	})
	r := &rollout.Runner{
		Strategy: strategy.Incremental{
			StepPercent: int32(cfg.Step), Interval: metav1.Duration{Duration: cfg.Interval}, MaxSurgePercent: int32(cfg.Surge),
			Options: strategy.Options{PollInterval: metav1.Duration{Duration: cfg.Poll}},
		},
		Router: router, A: a, B: b, RevisionA: da, RevisionB: db,
		Observer: obs,
		Store:    &fake.Store{},
	}
	final, runErr := r.Run(ctx, strategy.NewState(oldRevision, newRevision), nil)
	rep.Final = final
	for _, em := range []*raytest.Server{rep.EmulatorA, rep.EmulatorB} {
		if em != nil {
			rep.Violations = append(rep.Violations, em.Violations()...)
		}
	}
	mu.Lock()
	rep.Puts = append([]Put(nil), rep.Puts...)
	mu.Unlock()
	if runErr != nil {
		_ = rep.verdict(out) // prints the violations
		return rep, runErr
	}
	fmt.Fprintf(out, "%s in %.2fs: %s\n", final.Phase, time.Since(start).Seconds(), final.Message)
	for _, side := range []struct {
		name string
		r    *ray.Ray
		d    *ray.Deployer
	}{{"A", a, da}, {"B", b, db}} {
		st, err := side.d.Revision(ctx, "")
		if err != nil {
			return rep, err
		}
		o, err := side.r.Observe(ctx)
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(out, "cluster %s: runs %s, target_capacity %s, ready %d%%\n", side.name, orNone(st.Revision), formatTC(o.TargetCapacity), o.Ready)
	}
	return rep, rep.verdict(out)
}

// verdict prints the violations and reports what went wrong: an upgrade
// that did not succeed, a PUT the emulators refused, a side less ready
// than its traffic.
func (rep *Report) verdict(out io.Writer) error {
	for _, v := range rep.Violations {
		fmt.Fprintln(out, "violation:", v)
	}
	switch {
	case rep.Final.Phase != strategy.PhaseSucceeded:
		return fmt.Errorf("the upgrade ended %s", rep.Final.Phase)
	case len(rep.Violations) > 0:
		return fmt.Errorf("%d PUTs would have changed the config of a cluster that could serve", len(rep.Violations))
	case rep.Overloads > 0:
		return errors.New("a side was observed less ready than the traffic it received")
	}
	return nil
}

// serveDeploy PUTs a Serve config as it is, as `serve deploy` does.
func serveDeploy(ctx context.Context, dashboard string, config []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, dashboard+"/api/serve/applications/", bytes.NewReader(config))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	return nil
}

func revisionOf(o strategy.SideObservation) string {
	switch {
	case o.Revision == "":
		return "(none)"
	case !o.Updated:
		return o.Revision + " (deploying)"
	}
	return o.Revision
}

func orNone(rev string) string {
	if rev == "" {
		return "no known revision"
	}
	return rev
}

func formatTC(tc *float64) string {
	if tc == nil {
		return "null"
	}
	return strconv.FormatFloat(*tc, 'f', -1, 64)
}
