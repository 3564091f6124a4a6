#!/usr/bin/env bash
# Runs all of upshift's tests, the adapter and end-to-end tests included:
# builds the kube-apiserver and etcd they run against (hack/kube-binaries.sh)
# and the Traefik data plane of e2e/traefik (hack/traefik.sh) when missing,
# from the Go module proxy, cached outside the repository, then
# go test -race ./... with those tests required rather than skipped, and the
# same in hack/traefik/go-http-auth, a module of its own (the stand-in that
# the Traefik build uses) that ./... does not reach.
# Extra arguments go to both go test runs, e.g. ./test.sh -run Router -count=1 -v
set -euo pipefail
cd "$(dirname "$0")"
bash hack/kube-binaries.sh
bash hack/traefik.sh
status=0
(cd hack/traefik/go-http-auth && GOWORK=off go test -race ./... "$@") || status=$?
UPSHIFT_REQUIRE_KUBE=1 go test -race ./... "$@" || status=$?
exit "$status"
