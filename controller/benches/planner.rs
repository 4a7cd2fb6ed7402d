//! How long planning takes: one group of 3 StatefulSets × 100 pods mid-rollout, and 100 such
//! groups (what a reconcile of a large namespace costs in planning alone).

use std::collections::BTreeMap;
use std::hint::black_box;

use baton_core::rollout::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy, plan,
};
use criterion::{Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};

const PODS_PER_STATEFULSET: u32 = 100;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("valid time")
}

/// A StatefulSet whose first `updated` pods run the new revision; `not_ready` of those are
/// still starting.
fn statefulset(name: &str, updated: u32, not_ready: u32) -> StatefulSetSnapshot {
    let pods: Vec<PodSnapshot> = (0..PODS_PER_STATEFULSET)
        .map(|ordinal| {
            let starting = (updated.saturating_sub(not_ready)..updated).contains(&ordinal);
            let ready = !starting;
            PodSnapshot {
                name: format!("{name}-{ordinal}"),
                uid: format!("uid-{name}-{ordinal}"),
                revision: Some(if ordinal < updated { "new" } else { "old" }.to_owned()),
                phase: PodPhase::Running,
                ready,
                ready_since: ready.then(|| now() - SignedDuration::from_mins(5)),
                terminating: false,
                container_state: None,
                created_at: None,
            }
        })
        .collect();
    let ready_replicas = PODS_PER_STATEFULSET - not_ready;
    StatefulSetSnapshot {
        unreachable: None,
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        spec_replicas: PODS_PER_STATEFULSET,
        ordinals_start: 0,
        min_ready_seconds: 10,
        status_replicas: PODS_PER_STATEFULSET,
        ready_replicas,
        current_revision: Some("old".to_owned()),
        update_revision: Some("new".to_owned()),
        status_lag: None,
        update_strategy: UpdateStrategy::OnDelete,
        partition: 0,
        ordered_ready: true,
        annotations: BTreeMap::from([("rollout-max-unavailable".to_owned(), "10%".to_owned())]),
        pods,
    }
}

/// zone-a is done, zone-b is half-way with pods starting, zone-c has not started.
fn mid_rollout_group(index: usize) -> GroupSnapshot {
    let prefix = format!("group-{index}");
    GroupSnapshot {
        name: prefix.clone(),
        statefulsets: vec![
            statefulset(&format!("{prefix}-zone-a"), PODS_PER_STATEFULSET, 0),
            statefulset(&format!("{prefix}-zone-b"), 50, 3),
            statefulset(&format!("{prefix}-zone-c"), 0, 0),
        ],
    }
}

fn planner(criterion: &mut Criterion) {
    let one = mid_rollout_group(0);
    let sanity = plan(&one, now());
    assert_eq!(sanity.deletions().count(), 7, "10% of 100 minus 3 starting");

    criterion.bench_function("plan 1 group (3 StatefulSets x 100 pods)", |bencher| {
        bencher.iter(|| plan(black_box(&one), black_box(now())))
    });

    let hundred: Vec<GroupSnapshot> = (0..100).map(mid_rollout_group).collect();
    criterion.bench_function("plan 100 groups (3 StatefulSets x 100 pods)", |bencher| {
        bencher.iter(|| {
            hundred
                .iter()
                .map(|group| plan(black_box(group), black_box(now())).actions.len())
                .sum::<usize>()
        })
    });
}

criterion_group!(benches, planner);
criterion_main!(benches);
