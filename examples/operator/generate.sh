#!/usr/bin/env bash
# Regenerates what controller-gen derives from the code of this operator:
# the DeepCopy methods of api/v1alpha1 (zz_generated.deepcopy.go), the
# Release CRD (config/crd) and the operator's RBAC from the
# +kubebuilder:rbac markers (config/rbac/role.yaml). `go generate
# ./examples/operator` runs it. controller-gen v0.23.0 is installed from
# the Go module proxy into a cache outside the repository.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="${UPSHIFT_TOOLS:-$HOME/.cache/upshift-tools}/bin"
mkdir -p "$tools"
if [ ! -x "$tools/controller-gen" ] || ! "$tools/controller-gen" --version | grep -qF v0.23.0; then
  GOBIN="$tools" GOFLAGS=-mod=mod go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
fi
cd "$here"
"$tools/controller-gen" object paths=./api/...
"$tools/controller-gen" crd paths=./api/... output:crd:dir=./config/crd
"$tools/controller-gen" rbac:roleName=upshift-release-operator paths=./... output:rbac:dir=./config/rbac
