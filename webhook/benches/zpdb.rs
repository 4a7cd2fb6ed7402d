//! CPU cost of one eviction decision on a snapshot the size the issue names: 3 StatefulSets ×
//! 100 pods, one budget, in zone and partition mode, allowed and denied. The snapshot is what
//! the webhook's watch caches hold (slimmed pods). `cargo bench -p baton-webhook --bench zpdb`.

use baton_core::pods::{CachedPod, PodsByStatefulSet};
use baton_core::zpdb::{
    Budget, EvictionSnapshot, Observed, RecentlyAllowed, ZoneAwarePodDisruptionBudget, decide,
};
use criterion::{Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::sync::Arc;

const ZONES: [&str; 3] = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];
const REPLICAS: u32 = 100;

fn statefulset(name: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "mimir", "uid": format!("uid-{name}"),
                     "labels": {"rollout-group": "ingester", "name": name}},
        "spec": {"replicas": REPLICAS, "serviceName": name, "selector": {"matchLabels": {"name": name}},
                 "template": {}},
    }))
    .unwrap()
}

fn pod(statefulset: &str, ordinal: u32, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{statefulset}-{ordinal}"), "namespace": "mimir",
                     "uid": format!("uid-{statefulset}-{ordinal}"),
                     "labels": {"rollout-group": "ingester", "name": statefulset},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": statefulset,
                                          "uid": format!("uid-{statefulset}"), "controller": true}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                                   "lastTransitionTime": "2026-11-20T00:00:00Z"}],
                   "containerStatuses": [{"name": "ingester", "ready": ready, "restartCount": 0,
                                          "image": "", "imageID": ""}]},
    }))
    .unwrap()
}

fn budget(spec: serde_json::Value) -> Observed {
    let zpdb: ZoneAwarePodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "ingester", "namespace": "mimir"},
        "spec": spec,
    }))
    .unwrap();
    Budget::parse(&zpdb)
}

fn bench(c: &mut Criterion) {
    let statefulsets: Vec<StatefulSet> = ZONES.iter().map(|zone| statefulset(zone)).collect();
    let healthy: Vec<Pod> = ZONES
        .iter()
        .flat_map(|zone| (0..REPLICAS).map(move |ordinal| pod(zone, ordinal, true)))
        .collect();
    // Zone b's last pod not ready: an eviction in zone a is denied after a full count.
    let mut degraded = healthy.clone();
    let last_b = 2 * REPLICAS as usize - 1;
    degraded[last_b] = pod(ZONES[1], REPLICAS - 1, false);
    let selector = json!({"matchLabels": {"rollout-group": "ingester"}});
    let zone_mode = budget(json!({"selector": selector}));
    let partition_mode = budget(
        json!({"selector": selector, "podNamePartitionRegex": "ingester-zone-[a-z]-([0-9]+)"}),
    );
    let record = RecentlyAllowed::default();
    let now: Timestamp = "2026-11-23T05:00:00Z".parse().unwrap();
    let statefulset_refs: Vec<&StatefulSet> = statefulsets.iter().collect();
    let cases = [
        ("zone mode, allowed", &zone_mode, &healthy, true),
        (
            "zone mode, denied (other zone)",
            &zone_mode,
            &degraded,
            false,
        ),
        ("partition mode, allowed", &partition_mode, &healthy, true),
    ];
    for (name, observed, pods, expected) in cases {
        let cached: Vec<Arc<CachedPod>> = pods
            .iter()
            .map(|pod| Arc::new(CachedPod::of(pod)))
            .collect();
        let index = PodsByStatefulSet::of(statefulsets.iter(), &cached);
        let budgets = [observed];
        let snapshot = EvictionSnapshot {
            pod: &cached[0],
            budgets: &budgets,
            statefulsets: &statefulset_refs,
            pods: &index,
            now,
            recently_allowed: &record,
            record_expiry: SignedDuration::from_secs(30),
        };
        assert_eq!(decide(&snapshot).is_allowed(), expected, "{name}");
        c.bench_function(&format!("zpdb decide, 3×{REPLICAS} pods, {name}"), |b| {
            b.iter(|| decide(std::hint::black_box(&snapshot)))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
