#!/usr/bin/env bash
# A live demo: a local control plane, baton-controller, a three-zone rollout group, and a
# rollout you can watch zone by zone. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
export KUBEBUILDER_ASSETS
# Every binary of the workspace in one build, as the tests build them (tests/src/process.rs,
# BUILD_ARGS): one set of compiled dependencies in target/, shared with `cargo test --workspace`.
echo "building (the first run takes a few minutes)…"
cargo build --workspace --bins
exec "${CARGO_TARGET_DIR:-target}/debug/baton-demo" "$@"
