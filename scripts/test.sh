#!/usr/bin/env bash
# The whole test suite: unit tests, the planner simulation, and end-to-end tests against a real
# local Kubernetes control plane (built once and cached; see tests/control-plane/install.sh):
# the newest supported release for every scenario, and the oldest one for a smoke test
# (tests/tests/oldest_kubernetes.rs). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
E2E_OLDEST_KUBERNETES_ASSETS="$(tests/control-plane/install.sh --oldest)"
export KUBEBUILDER_ASSETS E2E_OLDEST_KUBERNETES_ASSETS
# --no-fail-fast: every failing test binary is reported, not only the first.
cargo test --workspace --no-fail-fast "$@"
