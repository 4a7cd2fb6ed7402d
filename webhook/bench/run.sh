#!/usr/bin/env bash
# Benchmarks baton-webhook the way the Go operator was measured: wrk -t2 -c32 -d10s over HTTPS
# keep-alive, POSTing one fixed AdmissionReview, against a locally started release build.
#
#   1. no-downscale, StatefulSet object (labelled, 5 -> 3: the full path, ending in a denial);
#   2. no-downscale via /scale: the parent's labels come from the watch cache;
#   3. RSS at idle and its peak under load.
#
# Needs the local control plane (tests/control-plane/install.sh builds or finds it once), since
# baton-webhook watches its namespace. Prints a Markdown table for docs/benchmarks.md.
# Environment: BENCH_DURATION (default 10s), BENCH_CONNECTIONS (32), BENCH_THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION="${BENCH_DURATION:-10s}"
CONNECTIONS="${BENCH_CONNECTIONS:-32}"
THREADS="${BENCH_THREADS:-2}"
NAMESPACE=bench

log() { printf 'bench: %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null; then
  log "installing wrk"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >&2
fi
KUBEBUILDER_ASSETS="$(tests/control-plane/install.sh)"
export KUBEBUILDER_ASSETS

log "building release binaries"
cargo build --release --quiet -p baton-webhook --bin baton-webhook -p baton-e2e --bin baton-control-plane

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then log "timed out waiting for $what"; exit 1; fi
    sleep 0.2
  done
}

log "starting the control plane"
target/release/baton-control-plane >"$WORK/handshake" 2>"$WORK/control-plane.log" &
PIDS+=($!)
wait_for 120 "the control plane" grep -q 'export KUBECONFIG=' "$WORK/handshake"
KUBECONFIG=$(sed -n 's/^ *export KUBECONFIG=//p' "$WORK/handshake")
export KUBECONFIG

kubectl create namespace "$NAMESPACE" >/dev/null
kubectl -n "$NAMESPACE" apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-a
  labels: {grafana.com/no-downscale: "true", rollout-group: ingester}
spec:
  replicas: 5
  serviceName: ingester-zone-a
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {name: ingester-zone-a}}
  template:
    metadata: {labels: {name: ingester-zone-a}}
    spec: {containers: [{name: ingester, image: grafana/mimir:2.14.0}]}
YAML

log "issuing a serving certificate for 127.0.0.1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=bench CA" \
  -keyout "$WORK/ca.key" -out "$WORK/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=baton-webhook" \
  -keyout "$WORK/tls.key" -out "$WORK/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$WORK/san.ext"
openssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial \
  -days 1 -extfile "$WORK/san.ext" -out "$WORK/tls.crt" 2>/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
OPS_PORT=$(free_port)
log "starting baton-webhook on 127.0.0.1:$PORT"
BATON_NAMESPACE=$NAMESPACE BATON_WEBHOOK__ADDRESS=127.0.0.1:$PORT BATON_OPS__ADDRESS=127.0.0.1:$OPS_PORT \
  BATON_WEBHOOK__CERT_FILE=$WORK/tls.crt BATON_WEBHOOK__KEY_FILE=$WORK/tls.key \
  target/release/baton-webhook 2>"$WORK/webhook.log" &
WEBHOOK_PID=$!
PIDS+=("$WEBHOOK_PID")
wait_for 60 "baton-webhook /ready" curl -fsS "http://127.0.0.1:$OPS_PORT/ready"

# The two fixed reviews, as the API server sends them.
STS_OBJECT=$(kubectl -n "$NAMESPACE" get statefulset ingester-zone-a -o json)
review() { # review RESOURCE_JSON_OLD RESOURCE_JSON_NEW SUBRESOURCE KIND
  jq -cn --argjson old "$1" --argjson new "$2" --arg sub "$3" --arg kind "$4" --arg ns "$NAMESPACE" '{
    apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
    request: {uid: "0b7d4f3c-8e2a-4b1f-9c6d-5a4e3b2c1d0e",
      kind: {group: (if $kind == "Scale" then "autoscaling" else "apps" end), version: "v1", kind: $kind},
      resource: {group: "apps", version: "v1", resource: "statefulsets"},
      subResource: (if $sub == "" then null else $sub end),
      name: "ingester-zone-a", namespace: $ns, operation: "UPDATE",
      userInfo: {username: "kubernetes-admin", groups: ["system:masters", "system:authenticated"]},
      object: $new, oldObject: $old, dryRun: false,
      options: {kind: "UpdateOptions", apiVersion: "meta.k8s.io/v1"}}}'
}
review "$STS_OBJECT" "$(jq -c '.spec.replicas = 3' <<<"$STS_OBJECT")" "" StatefulSet >"$WORK/statefulset.json"
SCALE='{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"ingester-zone-a","namespace":"'$NAMESPACE'"},"spec":{"replicas":5},"status":{"replicas":5,"selector":"name=ingester-zone-a"}}'
review "$SCALE" "$(jq -c '.spec.replicas = 3' <<<"$SCALE")" scale Scale >"$WORK/scale.json"

expected="downscale of statefulsets/ingester-zone-a in $NAMESPACE from 5 to 3 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"
for body in statefulset scale; do
  answer=$(curl -fsS --cacert "$WORK/ca.crt" -H 'Content-Type: application/json' \
    --data-binary "@$WORK/$body.json" "https://127.0.0.1:$PORT/admission/no-downscale")
  if [[ $(jq -r .response.status.message <<<"$answer") != "$expected" ]]; then
    log "unexpected answer to the $body review: $answer"; exit 1
  fi
done


rss_kib() { awk -v key="$1:" '$1 == key {print $2}' "/proc/$WEBHOOK_PID/status"; }
lookups() { curl -fsS "http://127.0.0.1:$OPS_PORT/metrics" | awk -v source="$1" '$1 ~ "baton_webhook_parent_lookups_total\\{source=\""source"\"\\}" {print $2}'; }
RSS_IDLE=$(rss_kib VmRSS)

run_wrk() { # run_wrk NAME PATH
  log "wrk -t$THREADS -c$CONNECTIONS -d$DURATION: $1"
  BODY="$WORK/$1.json" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s webhook/bench/post.lua \
    "https://127.0.0.1:$PORT$2" >"$WORK/$1.wrk"
  cat "$WORK/$1.wrk" >&2
  local rps p50 p99 errors
  rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$WORK/$1.wrk")
  p50=$(awk '$1 == "50%" {print $2}' "$WORK/$1.wrk")
  p99=$(awk '$1 == "99%" {print $2}' "$WORK/$1.wrk")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' "$WORK/$1.wrk" | tr '\n' ' ')
  printf '%s|%s|%s|%s\n' "$rps" "$p50" "$p99" "${errors:-none}"
}

API_BEFORE=$(lookups api); API_BEFORE=${API_BEFORE:-0}
IFS='|' read -r STS_RPS STS_P50 STS_P99 STS_ERRORS < <(run_wrk statefulset /admission/no-downscale)
IFS='|' read -r SCALE_RPS SCALE_P50 SCALE_P99 SCALE_ERRORS < <(run_wrk scale /admission/no-downscale)
RSS_PEAK=$(rss_kib VmHWM)
CACHE_HITS=$(lookups cache); API_AFTER=$(lookups api)

cat <<TABLE
| case | req/s | p50 | p99 | errors |
|---|---|---|---|---|
| no-downscale, StatefulSet object | $STS_RPS | $STS_P50 | $STS_P99 | $STS_ERRORS |
| no-downscale via /scale (parent from cache) | $SCALE_RPS | $SCALE_P50 | $SCALE_P99 | $SCALE_ERRORS |

RSS: $((RSS_IDLE / 1024)) MiB idle, $((RSS_PEAK / 1024)) MiB peak under load.
/scale parent lookups during the run: ${CACHE_HITS:-0} from the cache, $(( ${API_AFTER:-0} - API_BEFORE )) from the API.
Machine: $(nproc) cores, wrk on the same machine ($(wrk --version 2>&1 | head -n1 | cut -d' ' -f1-2)).
TABLE
