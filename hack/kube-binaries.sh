#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that upshift's tests run against
# (kubetest starts them through controller-runtime's envtest).
#
# Everything comes from the Go module proxy: a throwaway module in a temporary
# directory requires k8s.io/kubernetes with each staging module (the
# "./staging/src/k8s.io/..." replace block of its go.mod) replaced by the
# published v0.X.Y release, and a second one requires the etcd server version
# that Kubernetes pins. The binaries land in a cache outside the repository:
#
#   ${UPSHIFT_KUBE_ASSETS:-$HOME/.cache/upshift/kube/v1.37.2}/{kube-apiserver,etcd}
#
# Idempotent: when both binaries exist and kube-apiserver reports the expected
# version, it prints the versions and exits. A cold build takes several
# minutes; a cached check well under a second. Set UPSHIFT_KUBE_REBUILD=1 to
# force a rebuild. Safe to run concurrently (a lock serialises builders).
set -euo pipefail

KUBE_VERSION=v1.37.2
assets="${UPSHIFT_KUBE_ASSETS:-$HOME/.cache/upshift/kube/$KUBE_VERSION}"

log() { printf 'kube-binaries: %s\n' "$*" >&2; }

cached() {
  [[ -x "$assets/kube-apiserver" && -x "$assets/etcd" ]] || return 1
  local v
  v=$("$assets/kube-apiserver" --version 2>/dev/null) || return 1
  [[ "$v" == "Kubernetes $KUBE_VERSION" ]] || { log "kube-apiserver reports '$v', want $KUBE_VERSION"; return 1; }
  return 0
}

report() {
  log "assets: $assets"
  log "kube-apiserver: $("$assets/kube-apiserver" --version)"
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

log "building kube-apiserver $KUBE_VERSION (${#staging[@]} staging modules at $staging_version) and etcd $etcd_version into $assets"

# kube-apiserver.
mkdir -p "$work/kube" "$work/out"
(
  cd "$work/kube"
  go mod init upshift.local/kubebinaries >/dev/null 2>&1
  args=(-require "k8s.io/kubernetes@$KUBE_VERSION" -tool k8s.io/kubernetes/cmd/kube-apiserver)
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
  go build -trimpath -ldflags "$ld" -o "$work/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
)
log "kube-apiserver built after $((SECONDS - start))s"

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
for b in etcd kube-apiserver; do
  mv -f "$work/out/$b" "$assets/.$b.new"
  mv -f "$assets/.$b.new" "$assets/$b"
done
cached || { log "built kube-apiserver does not report $KUBE_VERSION"; exit 1; }
log "done in $((SECONDS - start))s"
report
