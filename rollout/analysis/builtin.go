package analysis

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// TraefikService is the matcher (a regular expression, written for a
// double-quoted PromQL string: service=~"...") of the service label that
// Traefik's Gateway API provider gives a backend of an HTTPRoute in its
// metrics (traefik_service_*, with --metrics.prometheus.addServicesLabels):
//
//	httproute-<ns>-<route>-gw-<gateway ns>-<gateway>-ep-<entry point>-<rule>-<hash>-svc-<service ns>-<service>-<n>@kubernetesgateway
//
// Traefik writes each name with every run of characters other than letters
// and digits turned into one '-' (a route web.v2 appears as web-v2), which
// the template function traefik does too. It matches the side's backend in
// every rule of the route, through any Gateway.
const TraefikService = `httproute-{{re (traefik .Namespace)}}-{{re (traefik .Route)}}-gw-.*-svc-{{re (traefik .Canary.Namespace)}}-{{re (traefik .Canary.Name)}}-[0-9]+@kubernetesgateway`

// traefikRequests is the canary's requests in the window.
const traefikRequests = `sum(increase(traefik_service_requests_total{service=~"` + TraefikService + `"}[{{.Window}}]))`

// SuccessRate is the built-in check of the canary's success rate through
// Traefik: the share of its requests in the window that were not answered
// with a 5xx, which must be at least min (0.99, say).
func SuccessRate(min float64) Check {
	return Check{
		Name: "success-rate",
		Kind: KindSuccessRate,
		Query: `sum(rate(traefik_service_requests_total{service=~"` + TraefikService + `",code!~"5.."}[{{.Window}}]))` +
			` / sum(rate(traefik_service_requests_total{service=~"` + TraefikService + `"}[{{.Window}}]))`,
		RequestsQuery: traefikRequests,
		Min:           &min,
	}
}

// LatencyQuantile is the built-in check of the canary's latency through
// Traefik: the q quantile of its request durations in the window (from the
// histogram traefik_service_request_duration_seconds), which must be at most
// max. The quantile is interpolated within Traefik's buckets
// (--metrics.prometheus.buckets): choose them around max.
func LatencyQuantile(q float64, max time.Duration) Check {
	limit := max.Seconds()
	return Check{
		Name:     fmt.Sprintf("latency-p%s", strconv.FormatFloat(q*100, 'f', -1, 64)),
		Kind:     KindLatency,
		Quantile: q,
		Query: fmt.Sprintf(`histogram_quantile(%s, sum by (le) (rate(traefik_service_request_duration_seconds_bucket{service=~"`+
			TraefikService+`"}[{{.Window}}])))`, strconv.FormatFloat(q, 'f', -1, 64)),
		RequestsQuery: traefikRequests,
		Max:           &limit,
	}
}

// PromQLString escapes s for the inside of a double-quoted PromQL string
// literal ("..."): a backslash, a double quote and control characters are
// written as escape sequences, which Prometheus reads back as s. It is the
// template function str, for a label value: namespace="{{str .Namespace}}".
func PromQLString(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// PromQLRegexp escapes s for a regular expression matching exactly s,
// written inside a double-quoted PromQL string literal (label=~"..."):
// regexp.QuoteMeta, then PromQLString, so that Prometheus reads the
// string back as the regular expression and the regular expression matches
// s alone (a dot in web.v2 matches a dot, not any character). It is the
// template function re: pod=~"{{re .Canary.Name}}-.*".
func PromQLRegexp(s string) string { return PromQLString(regexp.QuoteMeta(s)) }

// TraefikName is a Kubernetes name as Traefik writes it into its router and
// service names, and so into the service label of its metrics: each run of
// characters other than letters and digits becomes one '-', and none is
// left at either end (web.v2 is web-v2). It is the template function
// traefik; compose it with re: {{re (traefik .Route)}}.
func TraefikName(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}), "-")
}
