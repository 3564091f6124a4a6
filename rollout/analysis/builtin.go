package analysis

import (
	"fmt"
	"strconv"
	"time"
)

// TraefikService is the matcher (a regular expression) of the service label
// that Traefik's Gateway API provider gives a backend of an HTTPRoute in its
// metrics (traefik_service_*, with --metrics.prometheus.addServicesLabels):
//
//	httproute-<ns>-<route>-gw-<gateway ns>-<gateway>-ep-<entry point>-<rule>-<hash>-svc-<service ns>-<service>-<n>@kubernetesgateway
//
// It matches the side's backend in every rule of the route, through any
// Gateway.
const TraefikService = `httproute-{{re .Namespace}}-{{re .Route}}-gw-.*-svc-{{re .Canary.Namespace}}-{{re .Canary.Name}}-[0-9]+@kubernetesgateway`

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
