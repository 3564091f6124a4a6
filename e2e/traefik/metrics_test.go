package traefik_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upshift-dev/upshift/gateway"
	"github.com/upshift-dev/upshift/kubetest/promtest"
)

// series is one line of the Prometheus text format: a sample of a series.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format: comments and
// blank lines are skipped, every other line is name{labels} value
// [timestamp].
func parseMetrics(r io.Reader) ([]series, error) {
	var out []series
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSeries(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSeries(line string) (series, error) {
	s := series{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, "=\"")
			if eq <= 0 {
				return s, fmt.Errorf("malformed label")
			}
			name := line[:eq]
			line = line[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(line); j++ {
				c := line[j]
				if c == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(line[j])
					}
					continue
				}
				if c == '"' {
					line, closed = line[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[name] = v.String()
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 1 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

// scrape reads Traefik's metrics endpoint.
func scrape(t *testing.T, url string) []series {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	s, err := parseMetrics(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return s
}

// serviceLabel returns a pattern for the value of the service label that
// Traefik's kubernetesGateway provider gives the backend at backendRefs[idx]
// of the first rule of the route made by setup (HTTPRoute "web" in ns,
// attached to Gateway "gw" in ns, whose listener is Traefik's entry point
// "web"), a Service in the route's namespace:
//
//	httproute-<ns>-<route>-gw-<gateway ns>-<gateway>-ep-<entry point>-<rule index>-<hash>-svc-<service ns>-<service>-<backendRef index>@kubernetesgateway
//
// The part before -svc- names the route's router (non-alphanumerics turned
// into '-'); <hash> is 20 hex digits of a SHA-256 over the route's and the
// gateway's names and the rule's matches.
func serviceLabel(ns, backend string, idx int) *regexp.Regexp {
	q := regexp.QuoteMeta
	return regexp.MustCompile(fmt.Sprintf(`^httproute-%s-web-gw-%s-gw-ep-web-0-[0-9a-f]{20}-svc-%s-%s-%d@kubernetesgateway$`,
		q(ns), q(ns), q(ns), q(backend), idx))
}

// key identifies a series: its name and its labels, sorted.
func (s series) key() string {
	names := make([]string, 0, len(s.labels))
	for n := range s.labels {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(s.name)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%q", n, s.labels[n])
	}
	return b.String()
}

// moveTraffic sets the canary weight and waits until Traefik's data plane
// follows: a window of 100 sequential requests splits as the weights say.
func moveTraffic(t *testing.T, w *world, router *gateway.Router, canary int32) {
	t.Helper()
	start := time.Now()
	setAndWait(t, router, canary, 10*time.Millisecond)
	hc := &http.Client{Timeout: 5 * time.Second}
	for c := countCanary(t, hc, w.proxy.url, 100); absDiff(c, int(canary)) > 1; c = countCanary(t, hc, w.proxy.url, 100) {
		if time.Since(start) > propagationBudget {
			t.Fatalf("weight %d: canary answers %d of 100", canary, c)
		}
	}
}

// TestTraefikServiceMetrics: Traefik counts the requests it proxies to each
// backend of an HTTPRoute in traefik_service_requests_total, one series per
// backend Service, status code, method and protocol, and times them in the
// traefik_service_request_duration_seconds histogram with the harness's
// buckets; the counts match the requests sent exactly.
func TestTraefikServiceMetrics(t *testing.T) {
	w := newWorld(t)
	ns := w.route.Namespace
	moveTraffic(t, w, w.router(t, 0), 50)
	patterns := map[string]*regexp.Regexp{
		nameStable: serviceLabel(ns, nameStable, 0),
		nameCanary: serviceLabel(ns, nameCanary, 1),
	}
	// backendOf returns the backend whose service label s carries, or ""
	// for a series that is not of a backend of this test's route.
	backendOf := func(s series) string {
		svc, ok := s.labels["service"]
		if !ok || !strings.HasPrefix(svc, "httproute-"+ns+"-") {
			return ""
		}
		for b, re := range patterns {
			if re.MatchString(svc) {
				return b
			}
		}
		t.Fatalf("%s: a service label of the route that matches no backend", s.key())
		return ""
	}
	counters := func() map[string]float64 {
		m := map[string]float64{}
		for _, s := range scrape(t, w.proxy.metricsURL) {
			if s.name == "traefik_service_requests_total" || s.name == "traefik_service_request_duration_seconds_count" ||
				s.name == "traefik_service_request_duration_seconds_bucket" {
				if backendOf(s) != "" {
					m[s.key()] = s.value
				}
			}
		}
		return m
	}
	before := counters()

	// Requests answered 200 and 500, counted per backend by the body.
	hc := &http.Client{Timeout: 5 * time.Second}
	sent := map[string]map[string]int{nameStable: {}, nameCanary: {}} // backend → code → requests
	for i := 0; i < 240; i++ {
		path, code := "/", "200"
		if i%5 == 4 { // every fifth: odd, so both backends get some under round robin
			path, code = "/status/500", "500"
		}
		resp, err := hc.Get(w.proxy.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(resp.StatusCode); got != code {
			t.Fatalf("GET %s: status %s, want %s", path, got, code)
		}
		perCode := sent[string(body)]
		if perCode == nil {
			t.Fatalf("GET %s: body %q", path, body)
		}
		perCode[code]++
	}
	t.Logf("sent (backend → code → requests): %v", sent)
	for b, codes := range sent {
		if codes["200"] == 0 || codes["500"] == 0 {
			t.Fatalf("backend %s did not get both codes: %v", b, sent)
		}
	}

	// Traefik counts a request after answering it: poll until it has.
	var all []series
	deadline := time.Now().Add(10 * time.Second)
	for {
		all = scrape(t, w.proxy.metricsURL)
		got := map[string]map[string]int{nameStable: {}, nameCanary: {}}
		for _, s := range all {
			if s.name != "traefik_service_requests_total" {
				continue
			}
			if b := backendOf(s); b != "" && s.value != before[s.key()] {
				got[b][s.labels["code"]] += int(s.value - before[s.key()])
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(sent) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("traefik_service_requests_total increased by %v, want %v", got, sent)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The label sets, and the histogram.
	wantLE := append(strings.Split(latencyBuckets, ","), "+Inf")
	seen := map[string]bool{}
	for _, s := range all {
		if !strings.HasPrefix(s.name, "traefik_service_") {
			continue
		}
		b := backendOf(s)
		if b == "" {
			continue
		}
		code := s.labels["code"]
		switch s.name {
		case "traefik_service_requests_total":
			if s.labels["method"] != "GET" || s.labels["protocol"] != "http" || len(s.labels) != 4 {
				t.Errorf("%s: want exactly the labels code, method=GET, protocol=http, service", s.key())
			}
			t.Logf("observed: %s %v", s.key(), s.value)
		case "traefik_service_request_duration_seconds_count":
			if d := int(s.value - before[s.key()]); d != sent[b][code] {
				t.Errorf("%s increased by %d, want %d", s.key(), d, sent[b][code])
			}
		case "traefik_service_request_duration_seconds_bucket":
			seen[b+" "+code+" "+s.labels["le"]] = true
			if s.labels["le"] == "+Inf" {
				if d := int(s.value - before[s.key()]); d != sent[b][code] {
					t.Errorf("%s increased by %d, want %d", s.key(), d, sent[b][code])
				}
			}
		}
	}
	for b, codes := range sent {
		for code := range codes {
			for _, le := range wantLE {
				if !seen[b+" "+code+" "+le] {
					t.Errorf("no traefik_service_request_duration_seconds_bucket for %s, code %s, le %q", b, code, le)
				}
			}
		}
	}
}

// TestPrometheusScrapesTraefik: a real Prometheus (kubetest/promtest)
// scraping Traefik answers rate() over traefik_service_requests_total with
// one value per backend of the route, in the proportion of the weights; it
// does again after it is stopped and started while the traffic goes on, and
// the total agrees with the requests the clients sent.
func TestPrometheusScrapesTraefik(t *testing.T) {
	w := newWorld(t)
	ns := w.route.Namespace
	const canary = 30
	moveTraffic(t, w, w.router(t, 0), canary)
	prom := promtest.Start(t, promtest.Config{
		Jobs:           []promtest.Job{{Name: "traefik", Targets: []string{w.proxy.metricsAddr}}},
		ScrapeInterval: 500 * time.Millisecond,
	})

	l := &load{}
	ctx, stopLoad := context.WithCancel(context.Background())
	wg := l.run(ctx, w.proxy.url, 2)
	defer func() { stopLoad(); wg.Wait() }()

	stable, canaryRE := serviceLabel(ns, nameStable, 0), serviceLabel(ns, nameCanary, 1)
	rates := fmt.Sprintf(`sum by (service) (rate(traefik_service_requests_total{code="200",service=~"httproute-%s-.*"}[5s]))`, ns)
	// waitRates waits until rates returns one value per backend and the
	// canary's share is the weight's.
	waitRates := func(what string) {
		t.Helper()
		start := time.Now()
		var last string
		for time.Since(start) < time.Minute {
			samples, err := prom.Query(context.Background(), rates)
			if err != nil {
				t.Fatal(err)
			}
			var s, c float64
			for _, x := range samples {
				switch svc := x.Metric["service"]; {
				case stable.MatchString(svc):
					s = x.Value
				case canaryRE.MatchString(svc):
					c = x.Value
				default:
					t.Fatalf("a service of the route matches no backend: %v", x.Metric)
				}
			}
			last = fmt.Sprintf("%d series, stable %.1f/s, canary %.1f/s", len(samples), s, c)
			if len(samples) == 2 && s > 0 && c > 0 && math.Abs(c/(s+c)-canary/100.0) < 0.05 {
				t.Logf("%s: after %v: %s", what, time.Since(start).Round(time.Millisecond), last)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("%s: %s: no per-backend rates in the weights' proportion within a minute (last: %s)", what, rates, last)
	}
	waitRates("rate() per backend")

	// Latency quantiles per backend, from the histogram.
	q := fmt.Sprintf(`histogram_quantile(0.9, sum by (service, le) (rate(traefik_service_request_duration_seconds_bucket{service=~"httproute-%s-.*"}[5s])))`, ns)
	samples, err := prom.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2 {
		t.Fatalf("%s: %v", q, samples)
	}
	for _, s := range samples {
		if math.IsNaN(s.Value) || s.Value <= 0 || s.Value > 5 {
			t.Errorf("%s: %v", q, s)
		}
		t.Logf("p90 latency %s: %.4fs", s.Metric["service"], s.Value)
	}
	les, err := prom.Query(context.Background(), fmt.Sprintf(`count by (le) (traefik_service_request_duration_seconds_bucket{service=~"httproute-%s-.*"})`, ns))
	if err != nil {
		t.Fatal(err)
	}
	var leValues []string
	for _, s := range les {
		leValues = append(leValues, s.Metric["le"])
	}
	sort.Strings(leValues)
	t.Logf("le values as Prometheus %s stores them: %v", prom.Version, leValues)
	if len(leValues) != len(strings.Split(latencyBuckets, ","))+1 {
		t.Errorf("%d le values, want the %d buckets and +Inf", len(leValues), len(strings.Split(latencyBuckets, ",")))
	}

	// Prometheus goes away and comes back while the traffic goes on.
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// The samples from before the stop are in the window at first: wait for
	// a scrape of the new run.
	for {
		up, err := prom.Query(context.Background(), `max(timestamp(up{job="traefik"}))`)
		if err != nil {
			t.Fatal(err)
		}
		if len(up) == 1 && up[0].Value >= float64(restarted.UnixMilli())/1000 {
			break
		}
		if time.Since(restarted) > time.Minute {
			t.Fatalf("no scrape of Traefik within a minute of the restart: %v", up)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitRates("after a Prometheus restart and a scrape")

	// rate() agrees with the clients' own count over the same 5s.
	n0 := l.total.Load()
	time.Sleep(5 * time.Second)
	sent := float64(l.total.Load()-n0) / 5
	total := fmt.Sprintf(`sum(rate(traefik_service_requests_total{service=~"httproute-%s-.*"}[5s]))`, ns)
	samples, err = prom.Query(context.Background(), total)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 1 || math.Abs(samples[0].Value/sent-1) > 0.25 {
		t.Errorf("%s: %v; the clients sent %.1f requests/s", total, samples, sent)
	} else {
		t.Logf("%s: %.1f/s; the clients sent %.1f requests/s", total, samples[0].Value, sent)
	}

	stopLoad()
	wg.Wait()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed: %v", n, l.total.Load(), l.failures)
	}
}
