#!/usr/bin/env bash
# The whole test suite: unit tests, the planner simulation, and end-to-end tests against a real
# local Kubernetes control plane (built once and cached; see tests/control-plane/install.sh):
# the newest supported release for every scenario, and the oldest one for a smoke test
# (tests/tests/oldest_kubernetes.rs). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

# A component that cannot be installed is said loudly, and every test still runs: those that
# need it fail naming what is missing, the others pass or fail on their own.
if ! KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"; then
  echo "test.sh: MISSING: tests/control-plane/install.sh failed (above); the end-to-end tests that need Kubernetes will fail saying what is missing" >&2
  unset KUBEBUILDER_ASSETS
fi
if ! E2E_OLDEST_KUBERNETES_ASSETS="$(tests/control-plane/install.sh --oldest)"; then
  echo "test.sh: MISSING: the oldest supported Kubernetes could not be built (above); tests/tests/oldest_kubernetes.rs will fail saying so" >&2
  unset E2E_OLDEST_KUBERNETES_ASSETS
fi
# baton's image, as users build it: the real-node scenarios run it as deploy/ does.
if ! E2E_BATON_IMAGE_ARCHIVE="$(scripts/image.sh --print-archive)"; then
  echo "test.sh: MISSING: scripts/image.sh could not build baton's image (above); tests/tests/image.rs and the real-node scenario running it will fail saying so" >&2
  unset E2E_BATON_IMAGE_ARCHIVE
fi
export KUBEBUILDER_ASSETS E2E_OLDEST_KUBERNETES_ASSETS E2E_BATON_IMAGE_ARCHIVE
# --no-fail-fast: every failing test binary is reported, not only the first.
cargo test --workspace --no-fail-fast "$@"
