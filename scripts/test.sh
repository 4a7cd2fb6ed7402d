#!/usr/bin/env bash
# The whole test suite: unit tests, the planner simulation, and end-to-end tests against a real
# local Kubernetes control plane (built once and cached; see tests/control-plane/install.sh).
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
export KUBEBUILDER_ASSETS
# --no-fail-fast: every failing test binary is reported, not only the first.
cargo test --workspace --no-fail-fast "$@"
