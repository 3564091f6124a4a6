package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
	"github.com/upshift-dev/upshift/strategy"
)

func testConfig() Config {
	return Config{Step: 10, Surge: 30, Interval: 100 * time.Millisecond, Poll: strategy.MinPollInterval, Timeout: time.Minute}
}

// appOf returns the first application of a Serve config, decoded.
func appOf(t *testing.T, raw []byte) any {
	t.Helper()
	apps := appsOf(raw)
	if len(apps) == 0 {
		t.Fatalf("no application in %s", raw)
	}
	return apps[0]
}

// checkUpgrade checks a run that upgraded the emulated clusters from
// oldConfig to newConfig: the deploy on B at target_capacity 0 with no
// traffic before any weight or capacity moved to it, the final configs of
// both clusters, and no violation.
func checkUpgrade(t *testing.T, rep *Report, out, oldConfig, newConfig string) {
	t.Helper()
	if rep.Final.Phase != strategy.PhaseSucceeded || rep.Final.StableSide != strategy.SideB || rep.Final.StableRevision != newRevision {
		t.Fatalf("ended %s with %s stable on side %s", rep.Final.Phase, rep.Final.StableRevision, rep.Final.StableSide)
	}

	// The Runner's hops: the deploy of v2 on B first, decided on weight 0
	// and canary capacity 0, and only one.
	deploys := 0
	for i, h := range rep.Hops {
		if h.Kind != rollout.HopDeploy {
			continue
		}
		deploys++
		if i != 0 || h.Side != strategy.SideB || h.Revision != newRevision || h.Weight != 0 || h.CanaryCapacity != 0 {
			t.Errorf("hop %d: %s at weight %d, canary capacity %d: want the first hop, deploy v2 on side B at weight 0 and capacity 0",
				i, h.Hop, h.Weight, h.CanaryCapacity)
		}
	}
	if deploys != 1 {
		t.Errorf("%d deploy hops, want 1: %+v", deploys, rep.Hops)
	}

	// What went over the wire: cluster B's first PUT is v2's config at
	// target_capacity 0 while the route sent it nothing; every later PUT
	// to B is v2's, every PUT to A v1's (the first, the caller's own, at
	// null). Each was accepted.
	var puts [2][]Put
	for _, p := range rep.Puts {
		if p.Status != http.StatusOK {
			t.Errorf("PUT %+v answered %d", p, p.Status)
		}
		switch p.Cluster {
		case "A":
			puts[0] = append(puts[0], p)
			if p.Revision != oldRevision {
				t.Errorf("cluster A got the config of %q", p.Revision)
			}
		case "B":
			puts[1] = append(puts[1], p)
			if p.Revision != newRevision {
				t.Errorf("cluster B got the config of %q", p.Revision)
			}
		}
	}
	if len(puts[0]) == 0 || puts[0][0].TargetCapacity != nil {
		t.Errorf("cluster A's PUTs %+v: want the caller's v1 at null first", puts[0])
	}
	if len(puts[1]) < 2 || puts[1][0].TargetCapacity == nil || *puts[1][0].TargetCapacity != 0 || puts[1][0].Serving != 0 {
		t.Fatalf("cluster B's PUTs %+v: want v2 at target_capacity 0 with no traffic first", puts[1])
	}
	if tc := puts[1][1].TargetCapacity; tc == nil || *tc == 0 || puts[1][1].Serving != 0 {
		t.Errorf("cluster B's second PUT %+v: want the first capacity, still with no traffic", puts[1][1])
	}

	// The final configs: A keeps v1 at target_capacity 0, B runs v2 at
	// null.
	for _, c := range []struct {
		name   string
		em     *raytest.Server
		config string
		zero   bool
	}{{"A", rep.EmulatorA, oldConfig, true}, {"B", rep.EmulatorB, newConfig, false}} {
		want := appOf(t, []byte(c.config))
		name := want.(map[string]any)["name"].(string)
		raw, ok := c.em.DeployedConfig(name)
		var got any
		if ok {
			_ = json.Unmarshal(raw, &got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("cluster %s runs %s, want %s", c.name, raw, c.config)
		}
		tc, _ := c.em.TargetCapacity()
		if c.zero && (tc == nil || *tc != 0) || !c.zero && tc != nil {
			t.Errorf("cluster %s at target_capacity %s", c.name, formatTC(tc))
		}
	}

	if len(rep.Violations) != 0 || rep.Overloads != 0 {
		t.Errorf("violations %q, %d overloads", rep.Violations, rep.Overloads)
	}
	i, j := strings.Index(out, "-> deploy v2 on side B: its Serve config at target_capacity 0, weight 0"), strings.Index(out, "-> weight ")
	if k := strings.Index(out, "v2 rolled out on cluster B"); i < 0 || k < i || j < k {
		t.Errorf("want the deploy hop, then v2 rolled out, then the first weight hop:\n%s", out)
	}
	for _, want := range []string{"cluster A: runs v1, target_capacity 0, ready 0%", "cluster B: runs v2, target_capacity null, ready 100%"} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary does not say %q", want)
		}
	}
}

// TestRun runs the program against two in-process emulators with the
// built-in pair of revisions.
func TestRun(t *testing.T) {
	var out strings.Builder
	rep, err := run(context.Background(), testConfig(), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	checkUpgrade(t, rep, out.String(), defaultOldConfig, defaultNewConfig)
}

// TestRunConfigFiles: -config and -new-config name the revisions' configs;
// here v2 renames the application and has other deployments.
func TestRunConfigFiles(t *testing.T) {
	dir := t.TempDir()
	v1 := `{"applications": [{"name": "shop", "import_path": "shop:app", "deployments": [{"name": "Shop", "num_replicas": 4}]}]}`
	v2 := `{"applications": [{"name": "store", "import_path": "store:app", "deployments": [{"name": "Store", "num_replicas": 6}]}]}`
	cfg := testConfig()
	cfg.ConfigFile, cfg.NewConfigFile = filepath.Join(dir, "v1.json"), filepath.Join(dir, "v2.json")
	for f, c := range map[string]string{cfg.ConfigFile: v1, cfg.NewConfigFile: v2} {
		if err := os.WriteFile(f, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	rep, err := run(context.Background(), cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	checkUpgrade(t, rep, out.String(), v1, v2)
}

// TestRefused: configs that cannot make two revisions, and clusters that
// are not as the upgrade needs them, are refused before anything is
// written.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	same := filepath.Join(dir, "same.json")
	if err := os.WriteFile(same, []byte(defaultOldConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// An emulated cluster that runs v1 at null, and an empty one.
	serving := raytest.New(raytest.Options{})
	srvServing := httptest.NewServer(serving)
	defer srvServing.Close()
	if err := serveDeploy(context.Background(), srvServing.URL, []byte(defaultOldConfig)); err != nil {
		t.Fatal(err)
	}
	srvEmpty := httptest.NewServer(raytest.New(raytest.Options{}))
	defer srvEmpty.Close()
	for _, c := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"only -config", func(c *Config) { c.ConfigFile = same }, "give both -config and -new-config"},
		{"the same applications", func(c *Config) { c.ConfigFile, c.NewConfigFile = same, same }, "the same applications"},
		{"cluster A empty", func(c *Config) { c.A = srvEmpty.URL }, "cluster A does not run the applications of -config"},
		{"cluster B serving", func(c *Config) { c.B = srvServing.URL }, "cluster B runs applications at target_capacity null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			c.cfg(&cfg)
			puts := serving.Puts()
			_, err := run(context.Background(), cfg, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if serving.Puts() != puts {
				t.Error("the serving cluster was written")
			}
		})
	}
}

// TestVerdict: a redeploy an emulator refused fails the run, after the
// upgrade succeeded or not.
func TestVerdict(t *testing.T) {
	var out strings.Builder
	rep := &Report{Final: strategy.State{Phase: strategy.PhaseSucceeded}, Violations: []string{`PUT changes application "shop" while the cluster serves 10% of traffic`}}
	if err := rep.verdict(&out); err == nil || !strings.Contains(out.String(), "violation: PUT changes") {
		t.Fatalf("err %v, output %q", err, out.String())
	}
	if err := (&Report{Final: strategy.State{Phase: strategy.PhaseSucceeded}}).verdict(&out); err != nil {
		t.Fatal(err)
	}
}
