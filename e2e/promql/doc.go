// Package promql checks the queries of rollout/analysis against a real
// Prometheus (kubetest/promtest: Prometheus 3.16.0, built by
// hack/prometheus.sh), through the Prometheus analysis.Source, with names
// that are valid Kubernetes names but mean something in PromQL or in a
// regular expression: a route named web.v2 (HTTPRoute names are DNS
// subdomains), dashes in namespaces and Services, and the service labels
// Traefik writes for them.
//
// A tiny exporter (an httptest server) exposes Traefik-shaped series,
// traefik_service_requests_total and the
// traefik_service_request_duration_seconds histogram, whose counters grow
// with the wall clock at fixed rates, for a healthy canary backend and a
// failing stable one; Prometheus scrapes it every 250 ms. The tests judge
// the built-in checks (analysis.SuccessRate, analysis.LatencyQuantile) and
// custom queries using the template functions str, re and traefik, and
// what a judgement sends while Prometheus is stopped (one query, then
// none until the next evaluation instant).
//
// The package has no API. Its tests skip without the Prometheus binary,
// and fail instead with CI=true or UPSHIFT_REQUIRE_KUBE=1.
package promql
