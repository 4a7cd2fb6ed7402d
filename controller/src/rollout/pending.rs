//! The deletions this controller asked for and the pod cache has not shown yet, kept between
//! rollout passes: a pass applies them to its snapshot
//! (`baton_core::rollout::pending::mark_terminating`) so that a deletion the watch has not
//! delivered still counts against max-unavailable.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use baton_core::rollout::GroupSnapshot;
use baton_core::rollout::pending::mark_terminating;

/// Per group: uid → when baton deleted that pod.
#[derive(Debug, Default)]
pub struct PendingDeletions {
    by_group: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

impl PendingDeletions {
    pub fn record(&self, group: &str, uid: &str, now: Instant) {
        self.lock()
            .entry(group.to_owned())
            .or_default()
            .insert(uid.to_owned(), now);
    }

    /// Marks pods of `snapshot` that baton deleted as terminating, and forgets deletions the
    /// cache already shows (the pod is gone or terminating) or that are too old.
    pub fn apply(&self, snapshot: &mut GroupSnapshot, now: Instant) {
        let mut by_group = self.lock();
        let Some(pending) = by_group.get_mut(&snapshot.name) else {
            return;
        };
        let still_pending = mark_terminating(snapshot, pending, now);
        if still_pending.is_empty() {
            by_group.remove(&snapshot.name);
        } else {
            *pending = still_pending;
        }
    }

    /// Whether the deletion of the pod with `uid` in `group` is recorded and not yet seen.
    pub fn contains(&self, group: &str, uid: &str) -> bool {
        self.lock()
            .get(group)
            .is_some_and(|pending| pending.contains_key(uid))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Instant>>> {
        self.by_group
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use baton_core::rollout::pending::FORGET_AFTER;
    use baton_core::rollout::{PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy};

    use super::*;

    fn group(pods: &[(&str, bool)]) -> GroupSnapshot {
        GroupSnapshot {
            name: "ingester".into(),
            statefulsets: vec![StatefulSetSnapshot {
                unreachable: None,
                name: "ingester-zone-a".into(),
                uid: "sts".into(),
                spec_replicas: pods.len() as u32,
                ordinals_start: 0,
                min_ready_seconds: 0,
                status_replicas: pods.len() as u32,
                ready_replicas: pods.len() as u32,
                current_revision: Some("r1".into()),
                update_revision: Some("r2".into()),
                status_lag: None,
                update_strategy: UpdateStrategy::OnDelete,
                partition: 0,
                ordered_ready: true,
                annotations: BTreeMap::new(),
                pods: pods
                    .iter()
                    .enumerate()
                    .map(|(ordinal, (uid, terminating))| PodSnapshot {
                        name: format!("ingester-zone-a-{ordinal}"),
                        uid: (*uid).into(),
                        revision: Some("r1".into()),
                        phase: PodPhase::Running,
                        ready: true,
                        ready_since: None,
                        terminating: *terminating,
                        container_state: None,
                        created_at: None,
                    })
                    .collect(),
            }],
            reach: Default::default(),
        }
    }

    fn terminating(snapshot: &GroupSnapshot) -> Vec<bool> {
        snapshot.statefulsets[0]
            .pods
            .iter()
            .map(|pod| pod.terminating)
            .collect()
    }

    #[test]
    fn a_deleted_pod_still_in_the_cache_counts_as_terminating() {
        let pending = PendingDeletions::default();
        let now = Instant::now();
        pending.record("ingester", "uid-0", now);
        let mut snapshot = group(&[("uid-0", false), ("uid-1", false)]);
        pending.apply(&mut snapshot, now);
        assert_eq!(terminating(&snapshot), [true, false]);
        let mut again = group(&[("uid-0", false), ("uid-1", false)]);
        pending.apply(&mut again, now);
        assert_eq!(
            terminating(&again),
            [true, false],
            "until the cache catches up"
        );
    }

    #[test]
    fn the_deletion_is_forgotten_once_the_cache_shows_it() {
        let pending = PendingDeletions::default();
        let now = Instant::now();
        pending.record("ingester", "uid-0", now);
        let mut gone = group(&[("uid-new", false), ("uid-1", false)]);
        pending.apply(&mut gone, now);
        assert_eq!(
            terminating(&gone),
            [false, false],
            "a recreated pod is not terminating"
        );
        let mut later = group(&[("uid-0", false)]);
        pending.apply(&mut later, now);
        assert_eq!(
            terminating(&later),
            [false],
            "forgotten after the cache no longer had it"
        );
    }

    #[test]
    fn unconfirmed_deletions_expire() {
        let pending = PendingDeletions::default();
        let then = Instant::now();
        pending.record("ingester", "uid-0", then);
        let mut snapshot = group(&[("uid-0", false)]);
        pending.apply(&mut snapshot, then + FORGET_AFTER + Duration::from_secs(1));
        assert_eq!(terminating(&snapshot), [false]);
    }

    #[test]
    fn other_groups_are_not_affected() {
        let pending = PendingDeletions::default();
        let now = Instant::now();
        pending.record("compactor", "uid-0", now);
        let mut snapshot = group(&[("uid-0", false)]);
        pending.apply(&mut snapshot, now);
        assert_eq!(terminating(&snapshot), [false]);
    }
}
