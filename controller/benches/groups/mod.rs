//! The groups the controller's benches run on: 3 StatefulSets × 100 pods mid-rollout (zone-a
//! updated, zone-b half-way with 3 pods starting, zone-c not started; `rollout-max-unavailable:
//! 10%`, `minReadySeconds: 10`), so the plan deletes 7 pods of zone-b.

use std::collections::BTreeMap;

use baton_core::pass::{self, CheckRead, Gates, HookRead, Pass, Read};
use baton_core::rollout::completion::Rolling;
use baton_core::rollout::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy,
};
use jiff::{SignedDuration, Timestamp};

pub const PODS_PER_STATEFULSET: u32 = 100;

pub fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("valid time")
}

/// A StatefulSet whose first `updated` pods run the new revision; `not_ready` of those are
/// still starting.
pub fn statefulset(name: &str, updated: u32, not_ready: u32) -> StatefulSetSnapshot {
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
pub fn mid_rollout_group(index: usize) -> GroupSnapshot {
    let prefix = format!("group-{index}");
    GroupSnapshot {
        name: prefix.clone(),
        statefulsets: vec![
            statefulset(&format!("{prefix}-zone-a"), PODS_PER_STATEFULSET, 0),
            statefulset(&format!("{prefix}-zone-b"), 50, 3),
            statefulset(&format!("{prefix}-zone-c"), 0, 0),
        ],
        reach: Default::default(),
    }
}

/// [`mid_rollout_group`] with a soak between zones and a ramp inside them: the gate keys a
/// pass parses, and the zone state it reads.
pub fn gated_group(index: usize) -> GroupSnapshot {
    let mut group = mid_rollout_group(index);
    for member in &mut group.statefulsets {
        member.annotations.insert(
            baton_core::gates::SOAK_ANNOTATION.to_owned(),
            "5m".to_owned(),
        );
        member.annotations.insert(
            baton_core::gates::RAMP_ANNOTATION.to_owned(),
            "true".to_owned(),
        );
    }
    group
}

/// The leader's whole pass over `group`, as the controller decides it: the gate keys parsed,
/// nothing read besides the group.
pub fn leader_pass(group: &GroupSnapshot) -> Pass {
    let gates = Gates::read(group);
    pass::decide(&Read {
        snapshot: group,
        gates: &gates,
        check: &CheckRead::NotRead,
        hook: &HookRead::default(),
        rolling: &Rolling::new(),
        namespace: "bench",
        now: now(),
    })
}
