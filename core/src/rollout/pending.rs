//! Deletions baton asked for but the pod cache has not shown yet, as a rollout pass reads them.
//! A pass that runs before the watch delivers a deletion would otherwise see the pod still Ready
//! and delete another one, going past max-unavailable; pods listed here count as terminating
//! until the cache catches up. The controller keeps the list between passes; this is the rule
//! it applies to each snapshot.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::GroupSnapshot;

/// After this long an unconfirmed deletion is forgotten (the watch must have missed it and a
/// relist will tell the truth).
pub const FORGET_AFTER: Duration = Duration::from_secs(300);

/// Marks the pods of `snapshot` in `deleted` (uid → when baton deleted it) as terminating, and
/// returns the deletions still pending: those the cache does not show yet (the pod is neither
/// gone nor terminating) and that are not too old.
pub fn mark_terminating(
    snapshot: &mut GroupSnapshot,
    deleted: &HashMap<String, Instant>,
    now: Instant,
) -> HashMap<String, Instant> {
    let mut still_pending = HashMap::new();
    for pod in snapshot
        .statefulsets
        .iter_mut()
        .flat_map(|sts| sts.pods.iter_mut())
    {
        let Some(deleted_at) = deleted.get(&pod.uid) else {
            continue;
        };
        if pod.terminating || now.duration_since(*deleted_at) > FORGET_AFTER {
            continue;
        }
        pod.terminating = true;
        still_pending.insert(pod.uid.clone(), *deleted_at);
    }
    still_pending
}
