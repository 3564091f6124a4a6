#!/usr/bin/env bash
# Checks that upshift's root module drags no operator to newer Kubernetes
# libraries. hack/consumer is an operator's module in miniature: it pins
# controller-runtime v0.22 and k8s.io/* v0.34 (its go.mod) and imports only
# strategy, rollout and fake. In a copy pointed at this checkout, `go mod
# tidy` must leave its go.mod exactly as committed (no requirement raised, none
# added), the Kubernetes adapters' dependencies (controller-runtime beyond the
# pin, Gateway API) must stay out of its module graph, and the program must
# build and run an upgrade to completion.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/upshift-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
cp "$repo"/hack/consumer/{go.mod,go.sum,main.go} "$work/"
cd "$work"
go mod edit -replace "github.com/upshift-dev/upshift=$repo"
go mod tidy
strip() { grep -v -E '^replace |^$' "$1"; }
if ! diff -u <(strip "$repo/hack/consumer/go.mod") <(strip go.mod) >"$work/diff"; then
  echo "consumer: go mod tidy against upshift changed the consumer's go.mod (- committed, + after tidy):" >&2
  cat "$work/diff" >&2
  echo "consumer: upshift's root module must not require newer versions than an operator on controller-runtime v0.22 / k8s.io v0.34 has (see docs/modules.md, "Modules and dependency policy")" >&2
  exit 1
fi
bad=$(go list -m all | grep -E '^sigs\.k8s\.io/gateway-api ' || true)
if [ -n "$bad" ]; then
  echo "consumer: the module graph holds $bad: upshift's root module reaches the adapters' dependencies" >&2
  exit 1
fi
go list -m k8s.io/api k8s.io/apimachinery k8s.io/client-go sigs.k8s.io/controller-runtime | sed 's/^/consumer: keeps /'
go vet .
go run .
