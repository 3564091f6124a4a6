// Package traefik holds upshift's end-to-end tests through a real Gateway API
// data plane: Traefik (built by hack/traefik.sh) with its kubernetesGateway
// provider, watching the kube-apiserver of kubetest, proxying real
// requests on loopback to two real HTTP backends while the gateway Router and
// the rollout Runner move the weights.
//
// The package has no API; its tests run with the rest (./test.sh). Traefik
// runs as root in a private mount namespace (unshare --mount) whose /etc/hosts
// resolves the backends' FQDN EndpointSlice addresses to 127.0.0.1 and whose
// /etc/resolv.conf names only 127.0.0.1, so it sends nothing off loopback.
//
// Traefik serves its Prometheus metrics (per entry point, router and backend
// service) on a loopback entry point of their own; tests read them directly
// and through a real Prometheus (kubetest/promtest) scraping Traefik.
package traefik
