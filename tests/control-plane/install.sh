#!/usr/bin/env bash
# Installs what the local control plane and the real nodes need and prints the folder holding
# their binaries (KUBEBUILDER_ASSETS, envtest's convention).
#
#   tests/control-plane/install.sh            the newest Kubernetes the project supports, with
#                                             etcd, kubelet, kube-scheduler, kube-proxy, kubectl,
#                                             containerd, ctr, the runc shim, runc, helm,
#                                             jsonnet and Grafana's rollout-operator (the Go
#                                             operator baton replaces) beside it
#   tests/control-plane/install.sh --oldest   the oldest Kubernetes the project supports:
#                                             kube-apiserver, kube-controller-manager, kubectl
#                                             and etcd, for the oldest-version smoke test
#
# Kubernetes, etcd, containerd, runc, helm and jsonnet are built from their Go modules with the
# ordinary `go` client (Go >= 1.21 on PATH or in /usr/local/go; it fetches a newer toolchain
# itself when a module asks for one), each once, into a cache folder outside the repository
# keyed by its version and this script's build revision ($E2E_CACHE_DIR, else ~/.cache/baton).
# Nothing is vendored: a throwaway module requires the release and is built in a scratch folder
# that is removed afterwards. Everything else (haproxy, prometheus, chromium, wrk, iptables, the
# CNI plugins) comes from Debian.
#
# KUBEBUILDER_ASSETS naming a folder of ready binaries made elsewhere skips everything here
# (without --oldest); the real-node tests then say which binaries that folder lacks.
set -euo pipefail

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The newest release (every test runs on it) and the oldest one the project supports (README,
# "Supported Kubernetes versions"). Changing one of them builds it anew in a folder of its own.
K8S_VERSION="${E2E_K8S_VERSION:-1.37.2}"
OLDEST_K8S_VERSION="${E2E_OLDEST_K8S_VERSION:-1.32.13}"
ETCD_VERSION=3.7.3
CONTAINERD_VERSION=2.4.2
RUNC_VERSION=1.5.2
HELM_VERSION=4.3.1
JSONNET_VERSION=0.22.0
# Grafana's rollout-operator, the Go operator baton replaces: the side-by-side tests run it beside
# baton. The module proxy refuses its module, so it is built from the release's source archive
# (without its vendor folder; its dependencies come from the proxy), kept beside the repository
# in ../shared/anchors/ ($E2E_ROLLOUT_OPERATOR_ARCHIVE names another archive).
ROLLOUT_OPERATOR_VERSION=0.38.1
# This script's own build revision: bump it when how something is built changes, so caches
# built the old way are not used.
BUILD_REVISION=1

CACHE_ROOT="${E2E_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton}"
kubernetes_dir() { echo "$CACHE_ROOT/kubernetes-$1-r$BUILD_REVISION/bin"; }
BIN_DIR=$(kubernetes_dir "$K8S_VERSION")
OLDEST_BIN_DIR=$(kubernetes_dir "$OLDEST_K8S_VERSION")
ETCD_DIR="$CACHE_ROOT/etcd-$ETCD_VERSION-r$BUILD_REVISION/bin"
CONTAINERD_DIR="$CACHE_ROOT/containerd-$CONTAINERD_VERSION-r$BUILD_REVISION/bin"
RUNC_DIR="$CACHE_ROOT/runc-$RUNC_VERSION-r$BUILD_REVISION/bin"
HELM_DIR="$CACHE_ROOT/helm-$HELM_VERSION-r$BUILD_REVISION/bin"
JSONNET_DIR="$CACHE_ROOT/jsonnet-$JSONNET_VERSION-r$BUILD_REVISION/bin"
ROLLOUT_OPERATOR_DIR="$CACHE_ROOT/rollout-operator-$ROLLOUT_OPERATOR_VERSION-r$BUILD_REVISION/bin"
REPO_ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ROLLOUT_OPERATOR_ARCHIVE="${E2E_ROLLOUT_OPERATOR_ARCHIVE:-$REPO_ROOT/../shared/anchors/rollout-operator-v$ROLLOUT_OPERATOR_VERSION.tar.gz}"

oldest=0
case "${1:-}" in
  "") ;;
  --oldest) oldest=1 ;;
  *) die "unknown argument $1 (expected nothing or --oldest)" ;;
esac

# A folder of ready binaries someone else made is used as it is. This script's own cache folder
# (what a shell exported from an earlier run) goes on below: binaries added since are built.
if [[ $oldest -eq 0 && -n "${KUBEBUILDER_ASSETS:-}" && "$(realpath -m "$KUBEBUILDER_ASSETS")" != "$(realpath -m "$BIN_DIR")" ]]; then
  for bin in etcd kube-apiserver kube-controller-manager; do
    [[ -x "$KUBEBUILDER_ASSETS/$bin" ]] || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $bin"
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
apt_updated=0
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $apt_updated -eq 0 ]]; then
    log "apt-get update"
    $SUDO apt-get update -qq >&2
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

GO=""
find_go() {
  [[ -n "$GO" ]] && return 0
  GO=$(command -v go || true)
  [[ -z "$GO" && -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go
  [[ -n "$GO" ]] || die "no go client found (on PATH or /usr/local/go/bin): the Kubernetes binaries are built from their Go modules"
  # Toolchain switching (GOTOOLCHAIN=auto, from Go 1.21) lets an older client build a module
  # that asks for a newer Go; Debian bookworm's golang-go (1.19) predates it.
  local minor
  minor=$("$GO" env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
  [[ "$minor" =~ ^[0-9]+$ && "$minor" -ge 21 ]] || die "$GO is $("$GO" env GOVERSION); Go >= 1.21 is needed"
}

# Builds the main packages $4... of module $2 (at version $3) into folder $1 from a throwaway
# module in a scratch folder. Options, as environment: LDFLAGS, TAGS, CGO (0 or 1), REPLACE
# (extra go.mod lines: replace directives), GO_LINE (the go.mod's go and godebug lines), WHAT
# (what is built, for the log; default: the packages' last path elements).
go_build() {
  local dest=$1 module=$2 version=$3
  shift 3
  find_go
  local work
  mkdir -p "$CACHE_ROOT"
  work=$(mktemp -d "$CACHE_ROOT/build-XXXXXX")
  {
    echo "module baton.local/build"
    echo
    echo "${GO_LINE:-go 1.21}"
    echo
    echo "require $module v$version"
    echo
    echo "${REPLACE:-}"
  } >"$work/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for package in "$@"; do echo "	_ \"$package\""; done
    echo ")"
  } >"$work/tools.go"
  local started=$SECONDS what="${WHAT:-${*##*/}}"
  log "building $what from $module v$version (output in $work/build.log)"
  if ! (
    cd "$work"
    export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED="${CGO:-0}"
    "$GO" mod tidy
    "$GO" build -trimpath -tags "${TAGS:-}" -ldflags "-s -w ${LDFLAGS:-}" -o "$work/out/" "$@"
  ) >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    die "building from $module v$version failed; full log: $work/build.log"
  fi
  mkdir -p "$dest"
  cp "$work/out/"* "$dest/"
  rm -rf "$work"
  log "built $what in $((SECONDS - started))s; cached in $dest"
}

# Builds the commands $3... of k8s.io/kubernetes $2 into $1. The release's go.mod points its
# staging modules (k8s.io/api, k8s.io/client-go…) at folders inside its own repository; they
# are published as modules of their own at v0.<minor>.<patch>, and a replace line for each,
# generated from that go.mod, points there instead. The version variables make the binaries
# report the release (`kubectl version`, /version), as the project's own builds do.
build_kubernetes() {
  local dest=$1 version=$2
  shift 2
  find_go
  local gomod
  gomod=$(cd /tmp && GOWORK=off GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [[ -f "$gomod" ]] || die "downloading k8s.io/kubernetes v$version gave no go.mod"
  local staging_version="v0.${version#*.}" staging_minor="v0.${version#*.}"
  staging_minor="${staging_minor%.*}"
  local modules replace="" module served pinned substitutes
  substitutes="$(dirname "$dest")/substitutes"
  mkdir -p "$dest"
  rm -f "$substitutes"
  modules=$(sed -n -E 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/src/.*$#\2#p' "$gomod")
  [[ -n "$modules" ]] || die "k8s.io/kubernetes v$version's go.mod lists no staging module"
  for module in $modules; do
    # A proxy may lack a staging module at the release's exact version: the newest patch of
    # the same minor it serves stands in (said in the log and in the binary's folder).
    pinned=$staging_version
    served=$(cd /tmp && GOWORK=off "$GO" list -m -versions "$module" 2>/dev/null | tr ' ' '\n' | grep -E "^${staging_minor//./[.]}[.][0-9]+$" || true)
    if [[ -n "$served" ]] && ! grep -qx "$staging_version" <<<"$served"; then
      pinned=$(tail -n1 <<<"$served")
      log "$module is not served at $staging_version: using $pinned"
      echo "$module $pinned (not served at $staging_version)" >>"$substitutes"
    fi
    replace+="replace $module => $module $pinned"$'\n'
  done
  local go_line
  go_line=$(grep -E '^(go|godebug) ' "$gomod")
  local major=${version%%.*} minor=${version#*.}
  minor=${minor%%.*}
  local ldflags=""
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $package.gitVersion=v$version -X $package.gitMajor=$major -X $package.gitMinor=$minor"
    ldflags+=" -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
  done
  local packages=()
  for command in "$@"; do packages+=("k8s.io/kubernetes/cmd/$command"); done
  REPLACE="$replace" GO_LINE="$go_line" LDFLAGS="$ldflags" go_build "$dest" k8s.io/kubernetes "$version" "${packages[@]}"
}

missing() {
  local dir=$1
  shift
  for bin in "$@"; do [[ -x "$dir/$bin" ]] || return 0; done
  return 1
}

# etcd is the control plane's storage, built from its server module (its main package).
install_etcd() {
  if missing "$ETCD_DIR" etcd; then
    WHAT=etcd go_build "$ETCD_DIR" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
    # Go names the binary after the module path without its major version suffix.
    mv "$ETCD_DIR/server" "$ETCD_DIR/etcd"
  fi
}

if [[ $oldest -eq 1 ]]; then
  # The oldest-version smoke test starts a control plane and applies deploy/ with kubectl.
  if missing "$OLDEST_BIN_DIR" kube-apiserver kube-controller-manager kubectl; then
    build_kubernetes "$OLDEST_BIN_DIR" "$OLDEST_K8S_VERSION" kube-apiserver kube-controller-manager kubectl
  fi
  install_etcd
  ln -sfn "$ETCD_DIR/etcd" "$OLDEST_BIN_DIR/etcd"
  echo "$OLDEST_BIN_DIR"
  exit 0
fi

# util-linux's setpriv ties the control plane's processes to their supervisor; haproxy stands
# in for the webhook's Service in the rolling-restart scenario (health-checking /ready as a
# readinessProbe does); prometheus is the real Prometheus the rollout-gate health checks query
# (the tests start it on loopback, scraping values they serve; promtool checks the alerting
# rules); chromium, headless, is the browser that looks at the status page; wrk drives the
# eviction-webhook benchmark.
apt_install util-linux haproxy prometheus chromium wrk
# The real nodes: the CNI bridge, host-local and loopback plugins give each node's pods a
# subnet reachable from the host; the kubelet and the CNI plugins expect iptables on the machine
# (no rule is written: no masquerading, no utility chains); tar packs the local images. runc is
# built with seccomp (cgo and libseccomp's headers), as distributions build it.
apt_install containernetworking-plugins iptables tar gcc libc6-dev libseccomp-dev pkg-config
# baton's own image (scripts/image.sh) is built by buildah, daemonless, with no registry; Debian's
# ca-certificates is the CA bundle it carries.
apt_install buildah ca-certificates

# The newest release: the control plane, the nodes' kubelet and scheduler, kube-proxy, and the
# kubectl the tests run (so `kubectl apply` speaks the release it talks to). One `go build`
# for all six shares the compilation of what they have in common.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
if missing "$BIN_DIR" "${K8S_COMMANDS[@]}"; then
  build_kubernetes "$BIN_DIR" "$K8S_VERSION" "${K8S_COMMANDS[@]}"
fi
install_etcd
# containerd 2 (the kubelet asks the runtime for its cgroup driver, which containerd 1.x cannot
# answer), its client ctr (the harness imports the test images with it) and the runc shim
# containerd starts pods through.
if missing "$CONTAINERD_DIR" containerd ctr containerd-shim-runc-v2; then
  LDFLAGS="-X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
    go_build "$CONTAINERD_DIR" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
fi
if missing "$RUNC_DIR" runc; then
  CGO=1 TAGS=seccomp LDFLAGS="-X main.version=$RUNC_VERSION" \
    go_build "$RUNC_DIR" github.com/opencontainers/runc "$RUNC_VERSION" github.com/opencontainers/runc
fi

# helm installs, upgrades and uninstalls the chart (deploy/helm/baton) against the test control
# plane. The version variables make `helm version` report the release.
if missing "$HELM_DIR" helm; then
  LDFLAGS="-X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    go_build "$HELM_DIR" helm.sh/helm/v4 "$HELM_VERSION" helm.sh/helm/v4/cmd/helm
fi

# jsonnet (go-jsonnet, the implementation Tanka embeds) renders operations/baton and
# operations/baton-mixin for tests/tests/jsonnet.rs.
if missing "$JSONNET_DIR" jsonnet; then
  go_build "$JSONNET_DIR" github.com/google/go-jsonnet "$JSONNET_VERSION" \
    github.com/google/go-jsonnet/cmd/jsonnet
fi

# The Go rollout-operator from its release archive: `go build ./cmd/rollout-operator` inside
# it, as its Makefile does. Without the archive the side-by-side tests cannot run: said here,
# and by each of those tests, and nothing else is held up.
install_rollout_operator() {
  missing "$ROLLOUT_OPERATOR_DIR" rollout-operator || return 0
  if [[ ! -f "$ROLLOUT_OPERATOR_ARCHIVE" ]]; then
    log "MISSING: the Go rollout-operator's source archive $ROLLOUT_OPERATOR_ARCHIVE is not here: tests/tests/side_by_side.rs will fail saying so"
    return 0
  fi
  find_go
  local work started=$SECONDS
  mkdir -p "$CACHE_ROOT"
  work=$(mktemp -d "$CACHE_ROOT/build-XXXXXX")
  log "building rollout-operator v$ROLLOUT_OPERATOR_VERSION from $ROLLOUT_OPERATOR_ARCHIVE (output in $work/build.log)"
  if ! (
    cd "$work"
    tar xzf "$ROLLOUT_OPERATOR_ARCHIVE" --strip-components=1
    export GOWORK=off GOFLAGS="-buildvcs=false -mod=mod" CGO_ENABLED=0
    "$GO" build -trimpath -ldflags "-s -w" -o "$work/out/" ./cmd/rollout-operator
  ) >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    log "MISSING: building rollout-operator v$ROLLOUT_OPERATOR_VERSION failed (full log: $work/build.log): tests/tests/side_by_side.rs will fail saying so"
    return 0
  fi
  mkdir -p "$ROLLOUT_OPERATOR_DIR"
  cp "$work/out/rollout-operator" "$ROLLOUT_OPERATOR_DIR/"
  rm -rf "$work"
  log "built rollout-operator v$ROLLOUT_OPERATOR_VERSION in $((SECONDS - started))s; cached in $ROLLOUT_OPERATOR_DIR"
}
install_rollout_operator
[[ -x "$ROLLOUT_OPERATOR_DIR/rollout-operator" ]] && ln -sfn "$ROLLOUT_OPERATOR_DIR/rollout-operator" "$BIN_DIR/rollout-operator"

# One folder holds everything the tests run.
for bin in "$ETCD_DIR/etcd" "$CONTAINERD_DIR/containerd" "$CONTAINERD_DIR/ctr" \
  "$CONTAINERD_DIR/containerd-shim-runc-v2" "$RUNC_DIR/runc" "$HELM_DIR/helm" \
  "$JSONNET_DIR/jsonnet"; do
  ln -sfn "$bin" "$BIN_DIR/${bin##*/}"
done
echo "$BIN_DIR"
