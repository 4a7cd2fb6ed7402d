#!/usr/bin/env bash
# A live demo: a local control plane, a three-zone rollout group, and a rollout you can watch.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
export KUBEBUILDER_ASSETS
exec cargo run --quiet -p baton-e2e --bin baton-control-plane
