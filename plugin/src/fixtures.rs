//! Groups for the unit tests, built as the controller's snapshot (the controller's own scenario
//! helpers are private to its crate).

use std::collections::BTreeMap;

use baton_core::rollout::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy,
};
use baton_core::status::GroupStatus;
use baton_core::status::{self};
use jiff::Timestamp;

/// A zone of `total` ready pods, `updated` of them at revision `new`, the rest at `old`.
pub fn zone(name: &str, total: u32, updated: u32) -> StatefulSetSnapshot {
    let pods = (0..total)
        .map(|ordinal| PodSnapshot {
            name: format!("{name}-{ordinal}"),
            uid: format!("uid-{name}-{ordinal}"),
            revision: Some(if ordinal < updated { "new" } else { "old" }.to_owned()),
            phase: PodPhase::Running,
            ready: true,
            ready_since: Some(Timestamp::UNIX_EPOCH),
            terminating: false,
            container_state: None,
        })
        .collect();
    StatefulSetSnapshot {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        spec_replicas: total,
        ordinals_start: 0,
        min_ready_seconds: 0,
        status_replicas: total,
        ready_replicas: total,
        current_revision: Some(if updated == total { "new" } else { "old" }.to_owned()),
        update_revision: Some("new".to_owned()),
        update_strategy: UpdateStrategy::OnDelete,
        annotations: BTreeMap::new(),
        pods,
    }
}

/// `zone` with annotation `key: value`.
pub fn annotated(mut zone: StatefulSetSnapshot, key: &str, value: &str) -> StatefulSetSnapshot {
    zone.annotations.insert(key.to_owned(), value.to_owned());
    zone
}

/// Group `ingester` of `zones`.
pub fn group(zones: Vec<StatefulSetSnapshot>) -> GroupSnapshot {
    GroupSnapshot {
        name: "ingester".to_owned(),
        statefulsets: zones,
    }
}

/// The controller's status of `group`, as the plugin computes it (no leader history).
pub fn status_of(group: &GroupSnapshot) -> GroupStatus {
    status::compute(
        group,
        None,
        Timestamp::from_second(1_800_000_000).expect("a time"),
    )
}
