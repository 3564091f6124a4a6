#!/usr/bin/env bash
# Runs all of upshift's tests, the adapter and end-to-end tests included:
# builds the kube-apiserver and etcd they run against (hack/kube-binaries.sh)
# and the Traefik data plane of e2e/traefik (hack/traefik.sh) when missing,
# from the Go module proxy, cached outside the repository, then
# go test -race ./... with those tests required rather than skipped.
# Extra arguments go to go test, e.g. ./test.sh -run Router -count=1 -v
set -euo pipefail
cd "$(dirname "$0")"
bash hack/kube-binaries.sh
bash hack/traefik.sh
UPSHIFT_REQUIRE_KUBE=1 exec go test -race ./... "$@"
