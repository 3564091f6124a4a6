// Package traefik holds upshift's end-to-end tests through a real Gateway API
// data plane: Traefik (built by hack/traefik.sh) with its kubernetesGateway
// and kubernetesCRD providers, watching the kube-apiserver of kubetest,
// proxying real requests on loopback to two real HTTP backends while the
// gateway Router and the rollout Runner move the weights.
//
// The package has no API; its tests run with the rest (./test.sh). Traefik
// runs as root in a private mount namespace (unshare --mount) whose
// /etc/hosts and /etc/resolv.conf keep it on loopback. The traefik.io CRDs
// are installed from the Traefik module of the binary's version, so that an
// HTTPRoute may name a TraefikService as a backend (how a mirror reaches
// Traefik). Backends name themselves and the path they received in every
// answer and set a cookie of their own; simulated users keep cookie jars.
//
// The traffic extras are first shown on routes written by hand, rule by
// rule, then through whole Canary rollouts with a header route, a mirror and
// session affinity, run by the rollout Runner and the real gateway Router
// while hundreds to thousands of users send requests: each request is
// checked against the routes in effect while it was in flight, and the
// capacity rule against every state the Runner returns. Traefik's
// Prometheus metrics are read directly and through kubetest/promtest. See
// docs/design/e2e.md for the set-up and what each test shows.
package traefik
