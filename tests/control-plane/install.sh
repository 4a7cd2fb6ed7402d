#!/usr/bin/env bash
# Installs what the local control plane and the real nodes need and prints the folder holding
# their binaries.
#
# etcd comes from Debian's etcd-server package; kube-apiserver and kube-controller-manager are
# built once from Debian's kubernetes source package and cached outside the repository, keyed
# by version. The real nodes (tests/src/real_nodes/) run Debian's containerd, runc and CNI
# plugins with a kubelet and a kube-scheduler built from the same source package into a cache
# folder of their own, so adding them never rebuilds a control plane already cached; they are
# linked into the printed folder, which stays the one place tests look for Kubernetes binaries.
# KUBEBUILDER_ASSETS (envtest's convention) naming a folder of ready binaries made elsewhere
# skips everything here; the real-node tests then say which binaries that folder lacks.
set -euo pipefail

log() { printf 'control-plane: %s\n' "$*" >&2; }

K8S_VERSION="${E2E_K8S_VERSION:-1.20.2}"
# The build's own revision: bump it when the build changes so caches are rebuilt.
# reflect2: Kubernetes 1.20 vendors modern-go/reflect2 1.0.1, which crashes the API server on
# the first custom-resource write when compiled with Go >= 1.18 (Debian ships 1.19); 1.0.2
# from Debian's golang-github-modern-go-reflect2-dev replaces it.
BUILD="$K8S_VERSION+reflect2-1.0.2"
CACHE_ROOT="${E2E_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton}"
BIN_DIR="$CACHE_ROOT/kubernetes-$BUILD/bin"
# The node binaries' own cache folder and revision: they were added after the control plane's,
# and a separate key keeps existing control-plane caches valid.
NODE_BUILD="$K8S_VERSION+reflect2-1.0.2"
NODE_BIN_DIR="$CACHE_ROOT/kubernetes-node-$NODE_BUILD/bin"

# A folder of ready binaries someone else made is used as it is. This script's own cache folder
# (what a shell exported from an earlier run) goes on below: binaries added since, such as the
# node binaries, are then built.
if [[ -n "${KUBEBUILDER_ASSETS:-}" && "$(realpath -m "$KUBEBUILDER_ASSETS")" != "$(realpath -m "$BIN_DIR")" ]]; then
  for bin in etcd kube-apiserver kube-controller-manager; do
    [[ -x "$KUBEBUILDER_ASSETS/$bin" ]] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $bin"; exit 1; }
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

# etcd runs the control plane's storage; kubectl (kubernetes-client) is for people and the
# deploy tests; util-linux's setpriv ties the control plane's processes to their supervisor;
# haproxy stands in for the webhook's Service in the rolling-restart scenario (health-checking
# /ready as a readinessProbe does); prometheus is the real Prometheus the rollout-gate health
# checks query (the tests start it on loopback, scraping values they serve; promtool checks the
# alerting rules); chromium, headless, is the browser that looks at the status page; wrk drives
# the eviction-webhook benchmark.
apt_install etcd-server util-linux haproxy prometheus chromium wrk
command -v kubectl >/dev/null || apt_install kubernetes-client
# The real nodes: containerd with runc runs the pods' containers, the CNI bridge and host-local
# plugins give each node's pods a subnet reachable from the host; the kubelet and the CNI
# plugins expect iptables on the machine (no rule is written: no masquerading, no utility
# chains); tar packs the local images.
apt_install containerd runc containernetworking-plugins iptables tar

# Fetches Debian's kubernetes source package into $1 (with the reflect2 fix) and builds the
# commands named in $2 there; prints the source folder.
build_kubernetes() {
  local work=$1 what=$2
  apt_install dpkg-dev golang-go rsync make gcc libc6-dev golang-github-modern-go-reflect2-dev

  local sources_file=/etc/apt/sources.list.d/baton-deb-src.sources
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    log "adding a deb-src entry"
    local codename
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    $SUDO tee "$sources_file" >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $SUDO apt-get update -qq >&2
  fi

  rm -rf "$work"
  mkdir -p "$work"
  (
    cd "$work"
    log "fetching Debian's kubernetes source package"
    apt-get source -qq "kubernetes=$K8S_VERSION*" >&2 || apt-get source -qq kubernetes >&2
  )
  local src_dir
  src_dir=$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
  [[ -n "$src_dir" ]] || { log "apt-get source produced no kubernetes-* folder"; exit 1; }

  log "replacing the vendored modern-go/reflect2 with Debian's 1.0.2"
  local vendored="$src_dir/vendor/github.com/modern-go/reflect2"
  [[ -d "$vendored" ]] || { log "no vendored reflect2 at $vendored"; exit 1; }
  rm -rf "$vendored"
  mkdir -p "$vendored"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2/. "$vendored/"
  rm -f "$vendored"/*_test.go

  mkdir -p "$work/.go/src/k8s.io"
  ln -sfn "$src_dir" "$work/.go/src/k8s.io/kubernetes"
  log "make $what (output in $work/make.log)"
  if ! (
    cd "$work/.go/src/k8s.io/kubernetes"
    export GOPATH="$work/.go" GO111MODULE=off GOCACHE="$work/.gocache"
    unset GOFLAGS
    make WHAT="$what"
  ) >"$work/make.log" 2>&1; then
    tail -n 40 "$work/make.log" >&2
    log "build failed; full log: $work/make.log"
    exit 1
  fi
  echo "$src_dir"
}

# Copies the commands $3... built under source folder $1 into cache folder $2.
collect_binaries() {
  local src_dir=$1 dest=$2
  shift 2
  mkdir -p "$dest"
  for bin in "$@"; do
    local built
    built=$(find "$src_dir/_output" -type f -name "$bin" -perm -u+x | head -n1)
    [[ -n "$built" ]] || { log "make finished but $bin was not found under _output"; exit 1; }
    cp "$built" "$dest/$bin"
  done
}

if [[ ! -x "$BIN_DIR/kube-apiserver" || ! -x "$BIN_DIR/kube-controller-manager" ]]; then
  log "building kube-apiserver and kube-controller-manager $K8S_VERSION (once; about 5 minutes on 2 cores)"
  work="$CACHE_ROOT/kubernetes-$BUILD/build"
  src_dir=$(build_kubernetes "$work" "cmd/kube-apiserver cmd/kube-controller-manager")
  collect_binaries "$src_dir" "$BIN_DIR" kube-apiserver kube-controller-manager
  rm -rf "$work"
  log "cached in $BIN_DIR"
fi

if [[ ! -x "$NODE_BIN_DIR/kubelet" || ! -x "$NODE_BIN_DIR/kube-scheduler" ]]; then
  log "building kubelet and kube-scheduler $K8S_VERSION for the real nodes (once)"
  work="$CACHE_ROOT/kubernetes-node-$NODE_BUILD/build"
  src_dir=$(build_kubernetes "$work" "cmd/kubelet cmd/kube-scheduler")
  collect_binaries "$src_dir" "$NODE_BIN_DIR" kubelet kube-scheduler
  rm -rf "$work"
  log "cached in $NODE_BIN_DIR"
fi

ln -sf "$(command -v etcd)" "$BIN_DIR/etcd"
ln -sf "$NODE_BIN_DIR/kubelet" "$BIN_DIR/kubelet"
ln -sf "$NODE_BIN_DIR/kube-scheduler" "$BIN_DIR/kube-scheduler"
echo "$BIN_DIR"
