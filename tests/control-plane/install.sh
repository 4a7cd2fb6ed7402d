#!/usr/bin/env bash
# Installs what the local control plane needs and prints the folder holding its binaries.
#
# etcd comes from Debian's etcd-server package; kube-apiserver and kube-controller-manager are
# built once from Debian's kubernetes source package and cached outside the repository, keyed
# by version. KUBEBUILDER_ASSETS (envtest's convention) names a folder of ready binaries and
# skips everything here.
set -euo pipefail

log() { printf 'control-plane: %s\n' "$*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for bin in etcd kube-apiserver kube-controller-manager; do
    [[ -x "$KUBEBUILDER_ASSETS/$bin" ]] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $bin"; exit 1; }
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

K8S_VERSION="${E2E_K8S_VERSION:-1.20.2}"
# The build's own revision: bump it when the build changes so caches are rebuilt.
# reflect2: Kubernetes 1.20 vendors modern-go/reflect2 1.0.1, which crashes the API server on
# the first custom-resource write when compiled with Go >= 1.18 (Debian ships 1.19); 1.0.2
# from Debian's golang-github-modern-go-reflect2-dev replaces it.
BUILD="$K8S_VERSION+reflect2-1.0.2"
CACHE_ROOT="${E2E_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton}"
BIN_DIR="$CACHE_ROOT/kubernetes-$BUILD/bin"

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

if [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/kube-controller-manager" ]]; then
  ln -sf "$(command -v etcd)" "$BIN_DIR/etcd"
  echo "$BIN_DIR"
  exit 0
fi

log "building kube-apiserver and kube-controller-manager $K8S_VERSION (once; about 5 minutes on 2 cores)"
apt_install dpkg-dev golang-go rsync make golang-github-modern-go-reflect2-dev

sources_file=/etc/apt/sources.list.d/baton-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  log "adding a deb-src entry"
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

WORK="$CACHE_ROOT/kubernetes-$BUILD/build"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
log "fetching Debian's kubernetes source package"
apt-get source -qq "kubernetes=$K8S_VERSION*" >&2 || apt-get source -qq kubernetes >&2
SRC_DIR=$(find "$WORK" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
[[ -n "$SRC_DIR" ]] || { log "apt-get source produced no kubernetes-* folder"; exit 1; }

log "replacing the vendored modern-go/reflect2 with Debian's 1.0.2"
vendored="$SRC_DIR/vendor/github.com/modern-go/reflect2"
[[ -d "$vendored" ]] || { log "no vendored reflect2 at $vendored"; exit 1; }
rm -rf "$vendored"
mkdir -p "$vendored"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2/. "$vendored/"
rm -f "$vendored"/*_test.go

mkdir -p "$WORK/.go/src/k8s.io"
ln -sfn "$SRC_DIR" "$WORK/.go/src/k8s.io/kubernetes"
cd "$WORK/.go/src/k8s.io/kubernetes"
export GOPATH="$WORK/.go" GO111MODULE=off GOFLAGS=-mod=vendor GOCACHE="$WORK/.gocache"
unset GOFLAGS
log "make (output in $WORK/make.log)"
if ! make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$WORK/make.log" 2>&1; then
  tail -n 40 "$WORK/make.log" >&2
  log "build failed; full log: $WORK/make.log"
  exit 1
fi
mkdir -p "$BIN_DIR"
for bin in kube-apiserver kube-controller-manager; do
  built=$(find "$SRC_DIR/_output" -type f -name "$bin" -perm -u+x | head -n1)
  [[ -n "$built" ]] || { log "make finished but $bin was not found under _output"; exit 1; }
  cp "$built" "$BIN_DIR/$bin"
done
ln -sf "$(command -v etcd)" "$BIN_DIR/etcd"
rm -rf "$WORK"
log "cached in $BIN_DIR"
echo "$BIN_DIR"
