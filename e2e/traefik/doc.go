// Package traefik holds upshift's end-to-end tests through a real Gateway API
// data plane: Traefik (built by hack/traefik.sh) with its kubernetesGateway
// and kubernetesCRD providers, watching the kube-apiserver of kubetest,
// proxying real requests on loopback to two real HTTP backends while the
// gateway Router and the rollout Runner move the weights.
//
// The package has no API; its tests run with the rest (./test.sh). Traefik
// runs as root in a private mount namespace (unshare --mount) whose /etc/hosts
// resolves the backends' FQDN EndpointSlice addresses to 127.0.0.1 and whose
// /etc/resolv.conf names only 127.0.0.1, so it sends nothing off loopback.
//
// The traefik.io CRDs (TraefikService and the others the kubernetesCRD
// provider watches) are installed from the Traefik module of the binary's
// version, which `go mod download -json github.com/traefik/traefik/v3@v3.7.13`
// locates (hack/traefik.sh puts it in the module cache). With that provider
// registered an HTTPRoute may name a TraefikService as a backend, which is how
// a mirror reaches Traefik.
//
// Every backend answer names the backend (header X-Upshift-Backend and the
// body) and the path it received (X-Upshift-Path), and sets a cookie of the
// application's own (app=<backend>). Simulated users each keep a cookie jar
// (net/http/cookiejar) and share one connection pool, so thousands of them
// can be driven through Traefik at once.
//
// The traffic extras are first shown on routes written by hand, rule by rule:
// header rules (Exact, and a Cookie regular expression) beside the weighted
// rule, with the user's URLRewrite cloned; a TraefikService mirror with its
// deterministic counter (exactly ⌊p·n⌋ or ⌈p·n⌉ copies of n requests); and a
// RequestMirror filter, which Traefik answers with 500 while the route stays
// Accepted (why the gateway Router checks the GatewayClass's
// supportedFeatures before it writes one). Then whole Canary rollouts with a
// header route, a mirror (the Router's TraefikService) and session affinity
// run through the rollout Runner, on fake capacities, and the real gateway
// Router (its owned rules) on the real route, while hundreds to thousands of
// users keep sending requests: each request is checked against the routes
// in effect while it was in flight (written, and reported applied with the
// settle delay, before it was sent; the next write not begun before its
// answer), and the capacity rule, with header-routed and mirrored requests
// counted, against every state the Runner returns.
//
// Traefik serves its Prometheus metrics (per entry point, router and backend
// service) on a loopback entry point of their own; tests read them directly
// and through a real Prometheus (kubetest/promtest) scraping Traefik.
package traefik
