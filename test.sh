#!/usr/bin/env bash
# Runs all of upshift's tests, the adapter and end-to-end tests included:
# builds the kube-apiserver and etcd they run against (hack/kube-binaries.sh),
# the Traefik data plane of e2e/traefik (hack/traefik.sh) and the Prometheus
# server of internal/promtest (hack/prometheus.sh) when missing, side by side
# (hack/test-binaries.sh), from the Go module proxy, cached outside the
# repository, then, in every
# module that go.work lists, go test -race ./... (the strategy package,
# which runs on one goroutine, without -race) against that module's own
# go.mod (GOWORK=off: the root module at its minimum versions, each adapter
# module at its own), with the API-server tests required rather than
# skipped; the same in hack/traefik/go-http-auth, a module of its own (the
# stand-in that the Traefik build uses); and last hack/consumer.sh, which
# fails if the root module would raise an operator's controller-runtime or
# k8s.io versions.
# Extra arguments go to every go test run, e.g. ./test.sh -run Router -count=1 -v
set -euo pipefail
cd "$(dirname "$0")"
bash hack/test-binaries.sh
mapfile -t modules < <(GOWORK="$PWD/go.work" go list -m -f '{{.Dir}}')
(( ${#modules[@]} > 1 )) || { echo "no modules from go.work" >&2; exit 1; }
status=0
(cd hack/traefik/go-http-auth && GOWORK=off go test -race ./... "$@") || status=$?
for dir in "${modules[@]}"; do
  rel=${dir#"$PWD"}; rel=${rel#/}
  echo "== module ${rel:-.} ($(cd "$dir" && GOWORK=off go list -m))"
  if [[ -z "$rel" ]]; then
    # strategy runs on one goroutine (its TestSingleGoroutine holds it to
    # that): the race detector has nothing to watch there and would make its
    # property tests five times slower, so it runs without -race.
    mapfile -t pkgs < <(GOWORK=off go list ./... | grep -vx 'github.com/upshift-dev/upshift/strategy')
    GOWORK=off UPSHIFT_REQUIRE_KUBE=1 go test -race "${pkgs[@]}" "$@" || status=$?
    GOWORK=off go test ./strategy "$@" || status=$?
    continue
  fi
  (cd "$dir" && GOWORK=off UPSHIFT_REQUIRE_KUBE=1 go test -race ./... "$@") || status=$?
done
echo "== hack/consumer.sh"
bash hack/consumer.sh || status=$?
exit "$status"
