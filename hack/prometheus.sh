#!/usr/bin/env bash
# Makes the Prometheus server that upshift's tests run (kubetest/promtest)
# available: Prometheus 3.16.0, built from the Go module proxy
# (github.com/prometheus/prometheus/cmd/prometheus at module version v0.316.0:
# Prometheus publishes release 3.X.Y as module version v0.3XX.Y).
#
# The binary lands in a cache outside the repository:
#
#   ${UPSHIFT_PROMETHEUS_BIN:-$HOME/.cache/upshift/prometheus/v3.16.0/prometheus}
#
# Two ways to get a Prometheus from the registries this project reaches were
# measured on the 2-core development machine, each cold (an empty module and
# build cache for the Go build, nothing downloaded before for Debian's):
#
#   - Debian's package (bookworm): `apt-get download prometheus` and
#     `dpkg-deb -x` into the cache: 1.8 s (plus 0.7 s for apt-get update),
#     but Prometheus 2.42.0 (early 2023, built with Go 1.19);
#   - `go install github.com/prometheus/prometheus/cmd/prometheus@v0.316.0`:
#     358 s (about 6 minutes: 401 s user, 76 s system, 3.3 GB peak memory;
#     1.9 GB of modules and 2.1 GB of build cache), Prometheus 3.16.0. With
#     the modules already downloaded, the compile alone took 325 s; this
#     script's first run on a machine whose module cache already held the
#     Kubernetes and Traefik builds' modules took 341 s (other tests running).
#
# The build is used: operators run Prometheus 3, whose query semantics differ
# from 2.x in ways an analysis can observe (left-open range selectors, the
# normalised `le` and `quantile` label values of classic histograms, UTF-8
# metric and label names), and the cost is paid once per machine, as for the
# Traefik and kube-apiserver builds next to this script. Prometheus' go.mod
# has no replace directives, so a plain `go install` of the tagged module
# version works, its checksums verified against the Go checksum database.
# Built without the `builtinassets` tag: the HTTP API and /-/ready work, the
# web UI (whose built assets the module zip lacks) answers 500.
#
# Idempotent: when the binary exists and reports 3.16.0 it prints the version
# and exits (well under a second). Set UPSHIFT_PROMETHEUS_REBUILD=1 to force
# a rebuild. Safe to run concurrently (a lock serialises builders; a second
# caller waits and then finds the cache).
set -euo pipefail

PROMETHEUS_VERSION=3.16.0
MODULE=github.com/prometheus/prometheus
MODULE_VERSION=v0.316.0
bin="${UPSHIFT_PROMETHEUS_BIN:-$HOME/.cache/upshift/prometheus/v$PROMETHEUS_VERSION/prometheus}"

log() { printf 'prometheus: %s\n' "$*" >&2; }

cached() {
  [[ -x "$bin" ]] || return 1
  local v
  v=$("$bin" --version 2>/dev/null | awk 'NR == 1 && $2 == "version" { print $3 }') || return 1
  [[ "$v" == "$PROMETHEUS_VERSION" ]] || { log "$bin reports '$v', want $PROMETHEUS_VERSION"; return 1; }
}

report() {
  log "binary: $bin"
  log "$("$bin" --version 2>&1 | tr -s ' ' | paste -sd ';' -)"
}

if [[ "${UPSHIFT_PROMETHEUS_REBUILD:-}" != 1 ]] && cached; then
  report
  exit 0
fi

mkdir -p "$(dirname "$bin")"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$(dirname "$bin")/.lock"
  flock 9
  if [[ "${UPSHIFT_PROMETHEUS_REBUILD:-}" != 1 ]] && cached; then
    report
    exit 0
  fi
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/upshift-prometheus-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# No workspace, no go.mod and no inherited flags: `go install pkg@version`
# builds the module exactly as published.
export GOWORK=off GOFLAGS= CGO_ENABLED=0 GOBIN="$work/bin"
cd "$work"
start=$SECONDS

info=$(go mod download -json "$MODULE@$MODULE_VERSION")
infofile=$(sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")
[[ -f "$infofile" ]] || { log "cannot download $MODULE@$MODULE_VERSION"; exit 1; }
# The release's publication time stands in for the build date.
published=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$infofile")

log "building prometheus $PROMETHEUS_VERSION ($MODULE@$MODULE_VERSION) into $bin (cold: about 6 minutes on 2 cores)"
v=github.com/prometheus/common/version
# remove_all_sd leaves out every service discovery but file and HTTP (the
# cloud and Kubernetes ones pull in their SDKs): kubetest/promtest scrapes
# with static_configs only, and the query engine, TSDB and HTTP API are the
# same code either way.
go install -trimpath -tags remove_all_sd -ldflags "-s -w \
  -X $v.Version=$PROMETHEUS_VERSION \
  -X $v.Revision=$MODULE_VERSION \
  -X $v.BuildUser=upshift/hack/prometheus.sh \
  -X $v.BuildDate=${published:-unknown}" \
  "$MODULE/cmd/prometheus@$MODULE_VERSION"

# Install atomically so that an interrupted build never leaves half a binary.
mv -f "$work/bin/prometheus" "$bin.tmp.$$"
mv -f "$bin.tmp.$$" "$bin"
log "built in $((SECONDS - start))s"
cached || { log "the new binary does not report $PROMETHEUS_VERSION"; exit 1; }
report
