#!/usr/bin/env bash
# Shows the screen of `kubectl upshift get --watch` as a person sees it.
#
# It runs TestScreen of cmd/kubectl-upshift: a real kube-apiserver (built by
# hack/kube-binaries.sh when missing) with the example operator's Release
# CRD, a Release mid-rollout, and the plugin's `get --watch` in a tmux pane
# 100 columns wide and 40 lines high. The test captures the pane once the
# rollout is paused at its second pause step, checks what it shows, and
# follows the rollout to its end. The captured pane is written to the file
# given as the first argument (default: /tmp/kubectl-upshift-screen.txt)
# and printed. tmux is installed with apt-get when missing.
#
#   hack/plugin-screen.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-/tmp/kubectl-upshift-screen.txt}")
if ! command -v tmux >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq tmux
fi
bash hack/kube-binaries.sh
(cd cmd/kubectl-upshift && GOWORK=off UPSHIFT_REQUIRE_KUBE=1 UPSHIFT_SCREEN_OUT="$out" go test -count=1 -run '^TestScreen$' .)
cat "$out"
