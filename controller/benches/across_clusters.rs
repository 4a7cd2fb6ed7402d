//! What reading a group across member clusters costs on top of one cluster: each member's
//! StatefulSet and pods are copied under their qualified names (`cluster/name`) before the
//! snapshot is built. One group of 3 StatefulSets × 100 pods, either all in one cluster or one
//! StatefulSet in each of 3 clusters.

use std::hint::black_box;

use baton_core::clusters::{qualify_pod, qualify_statefulset};
use baton_core::pods::CachedPod;
use baton_core::rollout::GroupSnapshot;
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;

const CLUSTERS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];

fn statefulset(name: &str) -> StatefulSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"rollout-group": "ingester"}},
        "spec": {"replicas": 100, "selector": {"matchLabels": {"name": name}}, "serviceName": name,
                 "template": {}, "updateStrategy": {"type": "OnDelete"}},
        "status": {"replicas": 100, "readyReplicas": 100, "updateRevision": format!("{name}-new"),
                   "currentRevision": format!("{name}-old")},
    }))
    .expect("a StatefulSet")
}

fn pod(statefulset: &str, ordinal: u32) -> CachedPod {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{statefulset}-{ordinal}"),
            "uid": format!("uid-{statefulset}-{ordinal}"),
            "labels": {"name": statefulset, "controller-revision-hash": format!("{statefulset}-old"),
                       "app.kubernetes.io/part-of": "mimir", "zone": statefulset},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": statefulset,
                                 "uid": format!("uid-{statefulset}"), "controller": true}],
            "creationTimestamp": "2026-11-27T00:00:00Z",
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "2026-11-27T00:00:10Z"}]},
    }))
    .expect("a pod");
    CachedPod::of(&pod)
}

fn across_clusters(criterion: &mut Criterion) {
    // The same StatefulSet name in every cluster, as a group across clusters has it.
    let statefulsets: Vec<StatefulSet> = CLUSTERS.iter().map(|_| statefulset("ingester")).collect();
    let statefulsets: Vec<StatefulSet> = statefulsets
        .into_iter()
        .zip(CLUSTERS)
        .map(|(mut statefulset, cluster)| {
            statefulset.metadata.uid = Some(format!("uid-{cluster}"));
            statefulset
        })
        .collect();
    let pods: Vec<Vec<CachedPod>> = CLUSTERS
        .iter()
        .map(|cluster| {
            (0..100)
                .map(|ordinal| {
                    let mut pod = pod("ingester", ordinal);
                    if let Some(owner) = &mut pod.controller {
                        owner.uid = format!("uid-{cluster}").into();
                    }
                    pod
                })
                .collect()
        })
        .collect();

    // One cluster: three StatefulSets of distinct names, as a group in one cluster has them.
    let local: Vec<StatefulSet> = ["a", "b", "c"]
        .map(|zone| statefulset(&format!("ingester-zone-{zone}")))
        .into();
    let local_pods: Vec<CachedPod> = ["a", "b", "c"]
        .iter()
        .flat_map(|zone| {
            (0..100).map(move |ordinal| pod(&format!("ingester-zone-{zone}"), ordinal))
        })
        .collect();
    let one = GroupSnapshot::from_kubernetes("ingester", &local, &local_pods);
    assert_eq!(
        one.statefulsets.iter().map(|s| s.pods.len()).sum::<usize>(),
        300
    );
    criterion.bench_function(
        "snapshot 1 group in one cluster (3 x 100 pods)",
        |bencher| {
            bencher.iter(|| {
                GroupSnapshot::from_kubernetes(
                    "ingester",
                    black_box(&local),
                    black_box(&local_pods),
                )
            })
        },
    );

    let read = || {
        let members: Vec<StatefulSet> = statefulsets
            .iter()
            .zip(CLUSTERS)
            .map(|(statefulset, cluster)| qualify_statefulset(cluster, statefulset))
            .collect();
        let qualified: Vec<CachedPod> = pods
            .iter()
            .zip(CLUSTERS)
            .flat_map(|(pods, cluster)| pods.iter().map(move |pod| qualify_pod(cluster, pod)))
            .collect();
        GroupSnapshot::from_kubernetes("ingester", &members, &qualified)
    };
    let across = read();
    assert_eq!(across.statefulsets[1].name, "cluster-b/ingester");
    assert_eq!(across.statefulsets[1].pods.len(), 100);
    criterion.bench_function(
        "qualify and snapshot 1 group across 3 clusters (3 x 100 pods)",
        |bencher| bencher.iter(|| black_box(read())),
    );
}

criterion_group!(benches, across_clusters);
criterion_main!(benches);
