//! CPU cost of answering one review, without TLS, HTTP or wrk: decode the AdmissionReview,
//! judge it, encode the answer. `cargo bench -p baton-webhook --bench decide`.

use baton_webhook::admission::Decision;
use baton_webhook::admission::no_downscale::{self, Assessment};
use baton_webhook::admission::review;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

/// A StatefulSet as `kubectl get -o json` returns it: managed fields, template, status.
fn statefulset(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "ingester-zone-a", "namespace": "mimir", "uid": "6c0f5b1e-3f0a-4d3c-9a51-8e1c2f7b9d40",
            "resourceVersion": "123456", "generation": 7, "creationTimestamp": "2026-11-21T05:00:00Z",
            "labels": {"grafana.com/no-downscale": "true", "rollout-group": "ingester", "name": "ingester-zone-a",
                       "grafana.com/min-time-between-zones-downscale": "12h", "grafana.com/prepare-downscale": "true"},
            "annotations": {"rollout-max-unavailable": "25", "grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown",
                            "grafana.com/prepare-downscale-http-port": "80",
                            "grafana.com/last-downscale": "2026-11-20T05:00:00Z"},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                               "time": "2026-11-21T05:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:name": {}, "f:rollout-group": {}}},
                                            "f:spec": {"f:replicas": {}, "f:serviceName": {}, "f:template": {"f:spec": {"f:containers": {}}}}}}]
        },
        "spec": {
            "replicas": replicas, "serviceName": "ingester-zone-a", "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"}, "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"name": "ingester-zone-a"}},
            "template": {
                "metadata": {"labels": {"name": "ingester-zone-a", "gossip_ring_member": "true"}},
                "spec": {"containers": [{"name": "ingester", "image": "grafana/mimir:2.14.0",
                    "args": ["-target=ingester", "-ingester.ring.zone-awareness-enabled=true", "-ingester.ring.instance-availability-zone=zone-a"],
                    "ports": [{"containerPort": 8080, "name": "http-metrics"}, {"containerPort": 9095, "name": "grpc"}],
                    "resources": {"limits": {"memory": "25Gi"}, "requests": {"cpu": "4", "memory": "15Gi"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "initialDelaySeconds": 15}}],
                    "terminationGracePeriodSeconds": 1200}
            }
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "currentReplicas": replicas, "updatedReplicas": replicas,
                   "currentRevision": "ingester-zone-a-5d8c7b9f", "updateRevision": "ingester-zone-a-5d8c7b9f",
                   "observedGeneration": 7, "collisionCount": 0}
    })
}

fn review_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b7d4f3c-8e2a-4b1f-9c6d-5a4e3b2c1d0e",
            "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "name": "ingester-zone-a", "namespace": "mimir", "operation": "UPDATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": statefulset(3), "oldObject": statefulset(5), "dryRun": false,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .expect("serializable")
}

fn answer(body: &[u8]) -> Vec<u8> {
    let review = review::decode(body).expect("a valid review");
    let Assessment::Decided(verdict) = no_downscale::assess(&review.request) else {
        unreachable!("a StatefulSet review is decided from the review alone")
    };
    let decision = Decision::of(verdict, false);
    review::encode(review.version, &review.request.uid, &decision)
}

fn no_downscale(c: &mut Criterion) {
    let body = review_body();
    assert!(
        String::from_utf8_lossy(&answer(&body)).contains("is not allowed because it has the label")
    );
    let mut group = c.benchmark_group("no-downscale");
    group.throughput(criterion::Throughput::Bytes(body.len() as u64));
    group.bench_function("decode, judge and encode a StatefulSet review", |b| {
        b.iter(|| answer(std::hint::black_box(&body)))
    });
    group.finish();
}

criterion_group!(benches, no_downscale);
criterion_main!(benches);
