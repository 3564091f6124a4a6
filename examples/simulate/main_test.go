package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func runSim(t *testing.T, cfg Config) string {
	t.Helper()
	var out bytes.Buffer
	cfg.Speed = 0
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return out.String()
}

var summary = regexp.MustCompile(`(?m)^   (\w+) in .* peak capacity (\d+) \(100 \+ MaxSurge (\d+)\); requests served (\d+), overloaded (\d+), dropped (\d+)`)

// TestDefaultRun is the README's main command: both rollouts succeed with no
// request dropped and a peak capacity of exactly 100 + MaxSurge.
func TestDefaultRun(t *testing.T) {
	out := runSim(t, defaultConfig())
	m := summary.FindAllStringSubmatch(out, -1)
	if len(m) != 2 {
		t.Fatalf("want 2 summaries, got %d:\n%s", len(m), out)
	}
	for _, s := range m {
		if s[1] != "Succeeded" || s[2] != "120" || s[3] != "20" || s[5] != "0" || s[6] != "0" {
			t.Errorf("summary %q: want Succeeded, peak 120, 0 overloaded, 0 dropped", s[0])
		}
		if n, _ := strconv.Atoi(s[4]); n == 0 {
			t.Errorf("no requests served: %q", s[0])
		}
	}
	if !strings.Contains(out, "resumed") || !strings.Contains(out, "paused by a step") {
		t.Errorf("the canary's pauses are not shown:\n%s", out)
	}
}

func TestAbortAndFaults(t *testing.T) {
	for _, ramp := range []string{"immediate", "gradual"} {
		cfg := defaultConfig()
		cfg.Strategy, cfg.AbortAt, cfg.Faults, cfg.AbortRamp = "incremental", 12*time.Second, true, ramp
		out := runSim(t, cfg)
		m := summary.FindStringSubmatch(out)
		if m == nil || m[1] != "Aborted" || m[5] != "0" || m[6] != "0" {
			t.Errorf("%s: want Aborted with nothing dropped, got %q", ramp, m)
		}
		if !strings.Contains(out, "faults injected") {
			t.Errorf("%s: faults not reported", ramp)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []Config{
		func() Config { c := defaultConfig(); c.Strategy = "bogus"; return c }(),
		func() Config { c := defaultConfig(); c.Step = 0; return c }(),
		func() Config { c := defaultConfig(); c.AbortRamp = "sideways"; return c }(),
		func() Config { c := defaultConfig(); c.Replicas = 0; return c }(),
	} {
		if err := run(context.Background(), cfg, io.Discard); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}

// TestSVG checks that -svg writes a well-formed SVG with the three series and
// the shaded pauses.
func TestSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.svg")
	cfg := defaultConfig()
	cfg.Strategy, cfg.SVG = "canary", path
	runSim(t, cfg)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName   xml.Name `xml:"svg"`
		Title     string   `xml:"title"`
		Polylines []struct {
			Name   string `xml:"data-name,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Rects []struct {
			Class string `xml:"class,attr"`
		} `xml:"rect"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	if doc.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Errorf("namespace %q", doc.XMLName.Space)
	}
	if len(doc.Polylines) != 3 {
		t.Fatalf("want 3 series, got %d", len(doc.Polylines))
	}
	for _, p := range doc.Polylines {
		pts := strings.Fields(p.Points)
		if len(pts) < 10 {
			t.Errorf("series %q has %d points", p.Name, len(pts))
		}
		for _, pt := range pts {
			xy := strings.Split(pt, ",")
			if len(xy) != 2 {
				t.Fatalf("bad point %q", pt)
			}
			for _, v := range xy {
				if _, err := strconv.ParseFloat(v, 64); err != nil {
					t.Fatalf("bad coordinate %q", v)
				}
			}
		}
	}
	pauses := 0
	for _, r := range doc.Rects {
		if r.Class == "pause" {
			pauses++
		}
	}
	if pauses != 2 {
		t.Errorf("want 2 shaded pauses (timed and manual), got %d", pauses)
	}
	if bytes.Contains(data, []byte("<script")) || bytes.Contains(data, []byte("href")) {
		t.Errorf("the SVG is not self-contained")
	}
}
