#!/usr/bin/env bash
# A live demo: a local control plane, baton-controller, a three-zone rollout group, and a
# rollout you can watch zone by zone. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
export KUBEBUILDER_ASSETS
cargo build --quiet -p baton-e2e --bin baton-demo --bin baton-control-plane -p baton-controller --bin baton-controller -p kubectl-baton --bin kubectl-baton
exec target/debug/baton-demo "$@"
