#!/usr/bin/env bash
# Builds the Traefik binary that upshift's end-to-end tests (e2e/traefik) send
# real requests through: Traefik v3.7.13, a Gateway API implementation in Go.
#
# Everything comes from the Go module proxy, built in a throwaway module in a
# temporary directory (the repository's go.mod is not touched). `go install`
# cannot build Traefik because its go.mod has replace directives, so the
# throwaway module carries them itself, with three local stand-ins:
#
#   - github.com/traefik/traefik/dynamic/ext: Traefik replaces it with a nested
#     module (./pkg/config/dynamic/ext) that its module zip does not contain;
#     the stand-in declares the two (empty, inlined) types Traefik embeds.
#   - github.com/abbot/go-http-auth: Traefik replaces it with a containous fork
#     that this proxy refuses (403); the stand-in (hack/traefik/go-http-auth)
#     implements the API Traefik's basicAuth/digestAuth middlewares use.
#   - github.com/go-acme/lego/v5: the proxy refuses the SDKs behind 13 of its
#     DNS providers; a copy of lego from the module cache without those
#     providers (and their factory entries) is used instead. ACME DNS
#     challenges are not used by upshift's tests.
#
# The e2e tests also install the traefik.io CRDs that this module ships
# (docs/content/reference/dynamic-configuration/kubernetes-crd-definition-v1.yml):
# they locate it with `go mod download -json`, so the download below serves
# them too.
#
# The binary lands in a cache outside the repository:
#
#   ${UPSHIFT_TRAEFIK_BIN:-$HOME/.cache/upshift/traefik/v3.7.13/traefik}
#
# Idempotent: when the binary exists and `traefik version` reports v3.7.13 it
# prints the version and exits. A cold build takes several minutes. Set
# UPSHIFT_TRAEFIK_REBUILD=1 to force a rebuild. Safe to run concurrently (a
# lock serialises builders).
set -euo pipefail

TRAEFIK_VERSION=v3.7.13
LEGO_VERSION=v5.4.1
bin="${UPSHIFT_TRAEFIK_BIN:-$HOME/.cache/upshift/traefik/$TRAEFIK_VERSION/traefik}"
here=$(cd "$(dirname "$0")" && pwd)

# lego DNS providers whose SDKs the proxy refuses (403, measured with lego v5.4.1).
refused_providers=(
  alidns aliesa azion dnsimple edgedns edgeone huaweicloud oraclecloud
  regfish sakuracloud tencentcloud ucloud yandexcloud
)
# Requirements of lego whose go.mod the proxy refuses: they must leave lego's
# go.mod, or the module graph cannot be loaded.
refused_requires='github\.com/nrdcg/oci-go-sdk/|github\.com/sacloud/sacloud-sdk-go |github\.com/ucloud/ucloud-sdk-go |github\.com/yandex-cloud/'

log() { printf 'traefik: %s\n' "$*" >&2; }

cached() {
  [[ -x "$bin" ]] || return 1
  local v
  v=$("$bin" version 2>/dev/null | awk '$1 == "Version:" { print $2 }') || return 1
  [[ "$v" == "$TRAEFIK_VERSION" ]] || { log "$bin reports '$v', want $TRAEFIK_VERSION"; return 1; }
}

report() {
  log "binary: $bin"
  log "$("$bin" version | tr -s ' ' | paste -sd ';' -)"
}

if [[ "${UPSHIFT_TRAEFIK_REBUILD:-}" != 1 ]] && cached; then
  report
  exit 0
fi

mkdir -p "$(dirname "$bin")"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$(dirname "$bin")/.lock"
  flock 9
  if [[ "${UPSHIFT_TRAEFIK_REBUILD:-}" != 1 ]] && cached; then
    report
    exit 0
  fi
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/upshift-traefik-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The throwaway module must not see the caller's workspace or vendoring.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
start=$SECONDS

download() { (cd "$work" && go mod download -json "$1"); }
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$2"; }

tinfo=$(download "github.com/traefik/traefik/v3@$TRAEFIK_VERSION")
tmod=$(field GoMod "$tinfo")
[[ -f "$tmod" ]] || { log "cannot download traefik $TRAEFIK_VERSION"; exit 1; }
build_date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info "$tinfo")")
grep -q '^replace github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext' "$tmod" ||
  { log "traefik's go.mod no longer replaces dynamic/ext as expected; revisit this script"; exit 1; }

linfo=$(download "github.com/go-acme/lego/v5@$LEGO_VERSION")
ldir=$(field Dir "$linfo")
[[ -d "$ldir" ]] || { log "cannot download lego $LEGO_VERSION"; exit 1; }

log "building traefik $TRAEFIK_VERSION into $bin (cold: several minutes)"

# 1. dynamic/ext stand-in.
mkdir -p "$work/ext"
cat >"$work/ext/go.mod" <<'MOD'
module github.com/traefik/traefik/dynamic/ext

go 1.24
MOD
cat >"$work/ext/ext.go" <<'GO'
// Package ext stands in for Traefik's nested dynamic/ext module, which its
// module zip does not contain: the extension points embedded (inline) in
// dynamic.HTTPConfiguration and dynamic.Router, empty in the open-source build.
package ext

// HTTP holds extra HTTP configuration; none.
type HTTP struct{}

// Router holds extra router configuration; none.
type Router struct{}
GO

# 2. go-http-auth stand-in.
cp -r "$here/traefik/go-http-auth" "$work/go-http-auth"

# 3. lego without the refused DNS providers.
cp -r "$ldir" "$work/lego"
chmod -R u+w "$work/lego"
factory="$work/lego/providers/dns/zz_gen_dns_providers.go"
for p in "${refused_providers[@]}"; do
  rm -rf "$work/lego/providers/dns/$p"
  awk -v n="$p" '
    $0 ~ "^\t\"github.com/go-acme/lego/v5/providers/dns/" n "\"$" { next }
    /^\tcase / { held = $0; next }
    held != "" { if ($0 !~ "^\t\treturn " n "\\.") { print held; print }; held = ""; next }
    { print }' "$factory" >"$factory.tmp"
  mv "$factory.tmp" "$factory"
  ! grep -q "\b$p\." "$factory" || { log "could not remove lego provider $p"; exit 1; }
done
grep -v -E "^[[:space:]]*($refused_requires)" "$work/lego/go.mod" >"$work/lego/go.mod.tmp"
mv "$work/lego/go.mod.tmp" "$work/lego/go.mod"
rm -f "$work/lego/go.sum"  # entries for the removed modules would be stale; the main module's go.sum rules

# 4. The throwaway main module: Traefik's replace/exclude directives, pointed at the stand-ins.
{
  echo "module upshift.local/traefik-build"
  echo
  echo "go $(awk '$1 == "go" { print $2; exit }' "$tmod")"
  echo
  echo "require github.com/traefik/traefik/v3 $TRAEFIK_VERSION"
  echo
  echo "replace github.com/traefik/traefik/dynamic/ext => ./ext"
  echo "replace github.com/abbot/go-http-auth => ./go-http-auth"
  echo "replace github.com/go-acme/lego/v5 => ./lego"
  # Traefik's other replaces (e.g. gorilla/mux => containous/mux) and excludes, as published.
  awk '
    /^replace \(/ { inblock = 1; next }
    inblock && /^\)/ { inblock = 0; next }
    inblock { print "replace " $0; next }
    /^replace / { print; next }
    /^exclude / { print; next }' "$tmod" |
    grep -v -E 'dynamic/ext|abbot/go-http-auth|go-acme/lego/v5 ' | sed -E 's/^replace[[:space:]]+/replace /'
} >"$work/go.mod"
log "throwaway go.mod:"; sed 's/^/  /' "$work/go.mod" >&2

cd "$work"
# The resolved checksums are committed (hack/traefik/go.sum): a module whose
# content changed on the proxy fails the build instead of slipping in.
[[ -f "$here/traefik/go.sum" ]] && cp "$here/traefik/go.sum" go.sum
go mod download github.com/traefik/traefik/v3
tmpbin="$bin.tmp.$$"
go build -trimpath -o "$tmpbin" -ldflags "-s -w \
  -X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION \
  -X github.com/traefik/traefik/v3/pkg/version.BuildDate=$build_date" \
  github.com/traefik/traefik/v3/cmd/traefik
mv -f "$tmpbin" "$bin"
cmp -s go.sum "$here/traefik/go.sum" 2>/dev/null ||
  log "resolved go.sum differs from hack/traefik/go.sum; to commit it: cp $(dirname "$bin")/go.sum.resolved hack/traefik/go.sum"
cp go.sum "$(dirname "$bin")/go.sum.resolved"
log "built in $((SECONDS - start))s"
cached || { log "the new binary does not report $TRAEFIK_VERSION"; exit 1; }
report
