#!/usr/bin/env bash
# Regenerates what controller-gen derives from the code of this operator:
# the DeepCopy methods of api/v1alpha1 (zz_generated.deepcopy.go), the CRD
# (config/crd) and the operator's ClusterRole from the +kubebuilder:rbac
# markers (config/rbac/role.yaml). `go generate .` in this directory runs
# it. controller-gen v0.23.0 is installed from the Go module proxy into a
# cache outside the repository.
#
# The CRD and the ClusterRole are removed first, so a renamed group or kind leaves
# no stale CRD behind. The ClusterRole is named as controller.Name names
# it, from the CRD's group and kind: "<organization>-<kind>-operator", the
# organization being the group's label before its top-level domain
# (upshift-release-operator for Release in operator.upshift.dev).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="${UPSHIFT_TOOLS:-$HOME/.cache/upshift-tools}/bin"
mkdir -p "$tools"
if [ ! -x "$tools/controller-gen" ] || ! "$tools/controller-gen" --version | grep -qF v0.23.0; then
  GOBIN="$tools" GOFLAGS=-mod=mod go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
fi
cd "$here"
rm -f config/crd/*.yaml config/rbac/role.yaml
"$tools/controller-gen" object paths=./api/...
"$tools/controller-gen" crd paths=./api/... output:crd:dir=./config/crd
crds=(config/crd/*.yaml)
if [ "${#crds[@]}" != 1 ] || [ ! -f "${crds[0]}" ]; then
  echo "generate.sh: want exactly one CRD in config/crd, got: ${crds[*]}" >&2; exit 1
fi
group=$(awk '/^spec:/ {s=1} s && /^  group:/ {print $2; exit}' "${crds[0]}")
kind=$(awk '/^  names:/ {n=1} n && /^    kind:/ {print $2; exit}' "${crds[0]}")
if [ -z "$group" ] || [ -z "$kind" ]; then
  echo "generate.sh: no spec.group or spec.names.kind in ${crds[0]}" >&2; exit 1
fi
org=${group%.*}
org=${org##*.}
"$tools/controller-gen" rbac:roleName="$org-${kind,,}-operator" paths=./... output:rbac:dir=./config/rbac
