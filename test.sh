#!/usr/bin/env bash
# Runs all of upshift's tests, the adapter and end-to-end tests included:
# builds the Kubernetes control plane they run against (hack/kube-binaries.sh:
# kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok),
# the Traefik data plane of e2e/traefik (hack/traefik.sh) and the Prometheus
# server of kubetest/promtest (hack/prometheus.sh) when missing, side by side
# (hack/test-binaries.sh), from the Go module proxy, cached outside the
# repository, and tmux (Debian's package) for the kubectl plugin's screen
# test when missing; then, in every module that go.work lists, go test -race ./... (the strategy package,
# which runs on one goroutine, without -race) against that module's own
# go.mod (GOWORK=off: the root module at its minimum versions, each adapter
# module at its own), with the API-server tests required rather than
# skipped; the same in hack/traefik/go-http-auth, a module of its own (the
# stand-in that the Traefik build uses); and hack/consumer.sh, which
# fails if the root module would raise an operator's controller-runtime or
# k8s.io versions, and hack/copy-operator.sh, which renames a copy of
# examples/operator outside the repository and runs its tests there.
# Modules and those two scripts run two at a time (UPSHIFT_TEST_JOBS), each
# printed whole when it is done.
# Extra arguments go to every go test run, e.g. ./test.sh -run Router -count=1 -v
# Each test binary may run for UPSHIFT_TEST_TIMEOUT (default 30m; go test's
# own default of 10m is too short for e2e/traefik on a loaded 2-core
# machine); a -timeout among the extra arguments wins.
set -euo pipefail
cd "$(dirname "$0")"
bash hack/test-binaries.sh
# tmux, for the kubectl plugin's screen test (cmd/kubectl-upshift TestScreen),
# from Debian's packages when missing.
if ! command -v tmux >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq tmux >/dev/null
fi
mapfile -t modules < <(GOWORK="$PWD/go.work" go list -m -f '{{.Dir}}')
(( ${#modules[@]} > 1 )) || { echo "no modules from go.work" >&2; exit 1; }
status=0
test_timeout=${UPSHIFT_TEST_TIMEOUT:-30m}
(cd hack/traefik/go-http-auth && GOWORK=off go test -race ./... "$@") || status=$?

# test_module runs one module's tests. Its output goes to a log that is
# printed whole as soon as the module is done, so that two modules tested
# side by side do not interleave.
test_module() {
  local dir=$1 rel=${1#"$PWD"} rc=0
  rel=${rel#/}; shift
  if [[ "$dir" == hack/*.sh ]]; then # a script of its own, not a module
    echo "== $dir"
    bash "$dir" || rc=$?
    return "$rc"
  fi
  echo "== module ${rel:-.} ($(cd "$dir" && GOWORK=off go list -m))"
  if [[ -z "$rel" ]]; then
    # strategy runs on one goroutine (its TestSingleGoroutine holds it to
    # that): the race detector has nothing to watch there and would make its
    # property tests five times slower, so it runs without -race.
    local pkgs
    mapfile -t pkgs < <(GOWORK=off go list ./... | grep -vx 'github.com/upshift-dev/upshift/strategy')
    GOWORK=off UPSHIFT_REQUIRE_KUBE=1 go test -race -timeout "$test_timeout" "${pkgs[@]}" "$@" || rc=$?
    GOWORK=off go test -timeout "$test_timeout" ./strategy "$@" || rc=$?
    return "$rc"
  fi
  (cd "$dir" && GOWORK=off UPSHIFT_REQUIRE_KUBE=1 go test -race -timeout "$test_timeout" ./... "$@") || rc=$?
  return "$rc"
}

# Modules are tested UPSHIFT_TEST_JOBS at a time (default 2): much of the
# end-to-end modules' time is spent waiting on real servers and real
# intervals, which leaves the cores to the next module's compile. The
# longest (e2e, the root module) start first.
logs=$(mktemp -d "${TMPDIR:-/tmp}/upshift-test.XXXXXX")
trap 'rm -rf "$logs"' EXIT
order=()
for dir in "${modules[@]}"; do [[ "$dir" == "$PWD/e2e" ]] && order+=("$dir"); done
for dir in "${modules[@]}"; do [[ "$dir" != "$PWD/e2e" ]] && order+=("$dir"); done
# hack/consumer.sh fails if the root module would raise an operator's
# versions; hack/copy-operator.sh tests a renamed copy of examples/operator
# (after that module, whose compiled dependencies it reuses). They take
# turns in the same pool, beside the end-to-end tests' waits.
order+=(hack/consumer.sh hack/copy-operator.sh)
jobs_max=${UPSHIFT_TEST_JOBS:-2}
for i in "${!order[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  (
    rc=0
    test_module "${order[$i]}" "$@" >"$logs/$i.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$i.rc"
    if command -v flock >/dev/null 2>&1; then flock "$logs/print.lock" cat "$logs/$i.log"; else cat "$logs/$i.log"; fi
  ) &
done
wait
for i in "${!order[@]}"; do
  rc=$(cat "$logs/$i.rc" 2>/dev/null || echo 1)
  (( rc == 0 )) || status=$rc
done
exit "$status"
