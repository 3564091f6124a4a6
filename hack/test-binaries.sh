#!/usr/bin/env bash
# Builds (when missing) every binary upshift's tests run, side by side: the
# Kubernetes control plane and kwok (kube-binaries.sh), Traefik (traefik.sh) and
# Prometheus (prometheus.sh), each cached outside the repository. Much of a
# cold build is downloads, module resolution and linking, which leave a core
# idle, so the three run at once. Each script has its own lock and cache and
# prints what it did; this one fails if any of them fails. ./test.sh runs it
# first; .ci/run starts it in the background while its checks run.
set -euo pipefail
cd "$(dirname "$0")"
pids=()
for script in kube-binaries traefik prometheus; do
  bash "$script.sh" & pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
(( status == 0 )) || echo "test-binaries: a build failed (see above)" >&2
exit "$status"
