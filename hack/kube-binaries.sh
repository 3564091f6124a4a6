#!/usr/bin/env bash
# Builds the control plane that upshift's tests run against: kube-apiserver
# and etcd (kubetest starts them through controller-runtime's envtest), and,
# for the tests that need a whole cluster, kube-controller-manager,
# kube-scheduler and kwok (sigs.k8s.io/kwok, which plays the kubelet of
# simulated nodes: pods are scheduled, start and become ready without running
# a container).
#
# Everything comes from the Go module proxy: a throwaway module in a temporary
# directory requires k8s.io/kubernetes with each staging module (the
# "./staging/src/k8s.io/..." replace block of its go.mod) replaced by the
# published v0.X.Y release, and sigs.k8s.io/kwok beside it; the four binaries
# are built by one go build, so that the packages they share (most of them)
# compile once. A second module requires the etcd server version that
# Kubernetes pins. The binaries land in a cache outside the repository:
#
#   ${UPSHIFT_KUBE_ASSETS:-$HOME/.cache/upshift/kube/v1.37.2}/
#       {kube-apiserver,kube-controller-manager,kube-scheduler,kwok,etcd}
#
# Idempotent: when every binary exists and reports the expected version, it
# prints the versions and exits. A cold build takes several
# minutes; a cached check well under a second. Set UPSHIFT_KUBE_REBUILD=1 to
# force a rebuild. Safe to run concurrently (a lock serialises builders).
set -euo pipefail

KUBE_VERSION=v1.37.2
KWOK_VERSION=v0.8.0
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler)
assets="${UPSHIFT_KUBE_ASSETS:-$HOME/.cache/upshift/kube/$KUBE_VERSION}"

log() { printf 'kube-binaries: %s\n' "$*" >&2; }

cached() {
  local b v
  for b in "${KUBE_COMMANDS[@]}" kwok etcd; do
    [[ -x "$assets/$b" ]] || return 1
  done
  for b in "${KUBE_COMMANDS[@]}"; do
    v=$("$assets/$b" --version 2>/dev/null) || return 1
    [[ "$v" == "Kubernetes $KUBE_VERSION" ]] || { log "$b reports '$v', want $KUBE_VERSION"; return 1; }
  done
  v=$("$assets/kwok" --version 2>/dev/null) || return 1
  [[ "$v" == *"${KWOK_VERSION#v}"* ]] || { log "kwok reports '$v', want $KWOK_VERSION"; return 1; }
  return 0
}

report() {
  local b
  log "assets: $assets"
  for b in "${KUBE_COMMANDS[@]}"; do log "$b: $("$assets/$b" --version)"; done
  log "kwok: $("$assets/kwok" --version | head -n 1)"
  log "etcd: $("$assets/etcd" --version | head -n 1)"
}

if [[ "${UPSHIFT_KUBE_REBUILD:-}" != 1 ]] && cached; then
  report
  exit 0
fi

mkdir -p "$assets"
# One builder at a time; a second caller waits and then finds the cache.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$assets/.lock"
  flock 9
  if [[ "${UPSHIFT_KUBE_REBUILD:-}" != 1 ]] && cached; then
    report
    exit 0
  fi
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/upshift-kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The throwaway modules must not see the caller's workspace or vendoring.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

start=$SECONDS

# k8s.io/kubernetes's go.mod (from the proxy) names the staging modules and
# the etcd version.
info=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$info"; }
kmod=$(field GoMod)
[[ -f "$kmod" ]] || { log "cannot download k8s.io/kubernetes@$KUBE_VERSION's go.mod"; exit 1; }
# The release's publication time stands in for the build date.
ktime=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info)")

staging_version="v0.${KUBE_VERSION#v1.}"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$kmod")
(( ${#staging[@]} > 0 )) || { log "no staging replace block in $kmod"; exit 1; }
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$kmod")
[[ -n "$etcd_version" ]] || { log "no go.etcd.io/etcd/server/v3 in $kmod"; exit 1; }

log "building ${KUBE_COMMANDS[*]} $KUBE_VERSION (${#staging[@]} staging modules at $staging_version), kwok $KWOK_VERSION and etcd $etcd_version into $assets"

# kube-apiserver, kube-controller-manager, kube-scheduler and kwok. kwok's
# own requirements are older than Kubernetes' pins (its k8s.io modules one
# minor release behind), so the module resolves to Kubernetes' versions and
# the Kubernetes binaries build exactly as they would alone.
mkdir -p "$work/kube" "$work/out"
(
  cd "$work/kube"
  go mod init upshift.local/kubebinaries >/dev/null 2>&1
  args=(-require "k8s.io/kubernetes@$KUBE_VERSION" -require "sigs.k8s.io/kwok@$KWOK_VERSION" -tool sigs.k8s.io/kwok/cmd/kwok)
  pkgs=(sigs.k8s.io/kwok/cmd/kwok)
  for c in "${KUBE_COMMANDS[@]}"; do
    args+=(-tool "k8s.io/kubernetes/cmd/$c")
    pkgs+=("k8s.io/kubernetes/cmd/$c")
  done
  for m in "${staging[@]}"; do
    args+=(-replace "$m=$m@$staging_version")
  done
  go mod edit "${args[@]}"
  go mod tidy
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=${ktime:-1970-01-01T00:00:00Z}"
  done
  ld+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  # One build: the shared packages compile once and the four links overlap.
  go build -trimpath -ldflags "$ld" -o "$work/out/" "${pkgs[@]}"
)
log "${KUBE_COMMANDS[*]} and kwok built after $((SECONDS - start))s"

# etcd.
mkdir -p "$work/etcd"
(
  cd "$work/etcd"
  go mod init upshift.local/etcdbinary >/dev/null 2>&1
  go mod edit -require "go.etcd.io/etcd/server/v3@$etcd_version" -tool go.etcd.io/etcd/server/v3
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" go.etcd.io/etcd/server/v3
)
log "etcd built after $((SECONDS - start))s"

# Install atomically so that an interrupted build never leaves half a cache.
for b in etcd kwok "${KUBE_COMMANDS[@]}"; do
  mv -f "$work/out/$b" "$assets/.$b.new"
  mv -f "$assets/.$b.new" "$assets/$b"
done
cached || { log "the binaries built do not report $KUBE_VERSION and kwok $KWOK_VERSION"; exit 1; }
log "done in $((SECONDS - start))s"
report
