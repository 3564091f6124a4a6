#!/usr/bin/env bash
# Makes examples/operator someone else's operator, the way docs/writing-an-operator.md's
# checklist ("Your own operator", the same numbered steps) says, and runs its
# tests there: a copy in a temporary directory outside the repository,
# renamed to the module example.com/acme/shipper, the API group
# ship.acme.example and the kind Shipment, pointed at this checkout of
# upshift (its modules are not published), regenerated, checked for any
# name left over from the example, then vetted and tested with
# go test -race ./..., the kube-apiserver tests required, nothing skipped.
#
# Needs the kube-apiserver and etcd of hack/kube-binaries.sh (./test.sh
# builds them first) and controller-gen (generate.sh installs it). Prints the
# time each step took.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/upshift-copy-operator.XXXXXX")
trap 'rm -rf "$work"' EXIT
case "$work/" in "$repo"/*) echo "copy-operator: $work is inside the repository" >&2; exit 1 ;; esac
export GOWORK=off GOFLAGS=-mod=mod

old_module=github.com/upshift-dev/upshift/examples/operator
new_module=example.com/acme/shipper
old_group=operator.upshift.dev
new_group=ship.acme.example

start=$SECONDS
step() { echo "copy-operator: step $1 (after $((SECONDS - start))s)"; }
fail() { echo "copy-operator: $*" >&2; exit 1; }
# sources lists the copy's text files (everything but go.sum).
sources() { find . -type f ! -name go.sum -print0; }

step "1: copy examples/operator (its committed files) out of the repository"
dir="$work/shipper"
mkdir "$dir"
(cd "$repo/examples/operator" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dir")
cd "$dir"

step "2: rename the module path $old_module to $new_module"
go mod edit -module "$new_module"
sources | xargs -0 sed -i "s#$old_module#$new_module#g"

step "3: rename the API group $old_group to $new_group"
sources | xargs -0 sed -i "s#${old_group//./\\.}#$new_group#g"

step "4: rename the kind Release to Shipment (releases to shipments, release to shipment)"
# Released (the condition) is no name of the kind, nor are controller-runtime's
# LeaderElectionReleaseOnCancel and upshift's Runner.Release (runner.Release).
sources | xargs -0 perl -pi -e 's/(?<!LeaderElection)(?<!runner\.)Release(?!d)/Shipment/g; s/release(?!d)/shipment/g'

step "5: point the upshift modules at this checkout"
# Every upshift module the copy's go.mod replaces (the root, gateway,
# serve/replicas, rollout/analysis/prometheus, internal, kubetest, and
# cmd/kubectl-upshift, the plugin the tests run as a tool of the module...).
mapfile -t upshift_modules < <(go mod edit -json | grep -o '"Path": "github.com/upshift-dev/upshift[^"]*"' | sed 's/.*"\(github[^"]*\)"/\1/' | grep -v /examples/ | sort -u)
(( ${#upshift_modules[@]} > 0 )) || { echo "copy-operator: no upshift module in go.mod" >&2; exit 1; }
for mod in "${upshift_modules[@]}"; do
  m=${mod#github.com/upshift-dev/upshift}
  go mod edit -dropreplace "$mod" -replace "$mod=$repo$m"
done
go mod tidy

step "6: regenerate (generate.sh)"
bash generate.sh

step "7: check that no name of the example is left"
left=$(grep -rnP "$old_module|${old_group//./\\.}|upshift-release|upshift_release|(?<!LeaderElection)(?<!runner\.)Release(?!d)|release(?!d)" . || true)
[ -z "$left" ] || fail "names of the example left in the copy:
$left"
[ "$(ls config/crd)" = "$new_group"_shipments.yaml ] || fail "config/crd holds $(ls config/crd), want only ${new_group}_shipments.yaml"
grep -qx "  name: acme-shipment-operator" config/rbac/role.yaml || fail "config/rbac/role.yaml does not name the ClusterRole acme-shipment-operator"

step "8: go vet, then go test -race ./... with the kube-apiserver tests required and nothing skipped"
go vet ./...
# output prints what the failed tests and packages of the JSON printed.
output() {
  local key
  grep -E '"Action":"fail"' "$work/test.json" | grep -oE '"Package":"[^"]*"(,"Test":"[^"]*")?' | sort -u |
    while read -r key; do
      grep -F "$key" "$work/test.json" | grep -F '"Action":"output"' |
        { if [[ "$key" == *'"Test"'* ]]; then cat; else grep -vF '"Test":'; fi; } |
        sed -e 's/.*"Output":"//' -e 's/"}$//' -e 's/\\n$//' -e 's/\\t/\t/g' -e 's/\\"/"/g'
    done
}
UPSHIFT_REQUIRE_KUBE=1 go test -race -count=1 -timeout "${UPSHIFT_TEST_TIMEOUT:-30m}" -json ./... >"$work/test.json" || {
  output | head -n 2000 >&2
  fail "the tests of the copy failed"
}
skipped=$(grep -E '"Action":"skip"' "$work/test.json" | grep -o '"Test":"[^"]*"' || true)
[ -z "$skipped" ] || fail "tests of the copy skipped: $skipped"
passed=$(grep -cE '"Action":"pass","Package":"[^"]*","Test"' "$work/test.json" || true)
(( passed > 0 )) || fail "no test of the copy passed"
echo "copy-operator: $new_module ($new_group, kind Shipment) passes $passed tests outside the repository, nothing skipped, in $((SECONDS - start))s"
