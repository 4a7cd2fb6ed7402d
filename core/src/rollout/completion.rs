//! When a zone's rollout completes, told once. The StatefulSet controller of current Kubernetes
//! completes an `OnDelete` update itself (it sets `status.currentRevision` once every pod runs the
//! update revision and is ready), so baton's own write of the current revision is no longer the
//! moment to say it: the leader notices the change instead. A zone is *rolling* while it has
//! pods left to update or its current revision is not its update revision; it *completed* when
//! it is seen done at the revision it was rolling to. Only zones seen rolling in this term are
//! told (a new leader does not repeat every finished zone), and a pod restarting at the current
//! revision is no rollout.
//!
//! What the leader remembers between passes (each zone seen rolling and the update revision it
//! rolled to) is its own; this is the decision on it.

use std::collections::BTreeMap;

use super::{GroupSnapshot, Plan};

/// The zones seen rolling, by name: each zone's update revision then.
pub type Rolling = BTreeMap<String, String>;

/// The zones of `snapshot` that completed since they were seen `rolling`, with the revision
/// every pod now runs; `rolling` is left holding the zones rolling now.
pub fn completed(
    rolling: &mut Rolling,
    snapshot: &GroupSnapshot,
    plan: &Plan,
) -> Vec<(String, String)> {
    let mut completed = Vec::new();
    for member in &snapshot.statefulsets {
        let Some(update) = member.update_revision.as_ref() else {
            continue;
        };
        let Some(progress) = plan
            .progress
            .iter()
            .find(|progress| progress.statefulset == member.name)
        else {
            continue;
        };
        let current = member.current_revision.as_ref() == Some(update);
        if progress.updated < progress.total || !current {
            rolling.insert(member.name.clone(), update.clone());
        } else if progress.done && rolling.get(&member.name) == Some(update) {
            rolling.remove(&member.name);
            completed.push((member.name.clone(), update.clone()));
        }
    }
    // Members that left the group are forgotten with it.
    rolling.retain(|name, _| {
        snapshot
            .statefulsets
            .iter()
            .any(|member| member.name == *name)
    });
    completed
}

#[cfg(test)]
mod tests {
    use crate::rollout::plan;
    use crate::testing::{group, now, zone};

    use super::*;

    fn told(rolling: &mut Rolling, snapshot: &GroupSnapshot) -> Vec<(String, String)> {
        completed(rolling, snapshot, &plan(snapshot, now()))
    }
    #[test]
    fn a_zone_seen_rolling_is_told_once_when_it_completes() {
        let mut seen = Rolling::new();
        // Given zone a rolling to rev-2
        let rolling = group(vec![
            zone("a", 2).template_changed().updated_first(1).build(),
            zone("b", 2).build(),
        ]);
        assert_eq!(told(&mut seen, &rolling), []);
        // When every pod runs rev-2 but the StatefulSet controller has not set the current
        // revision yet, it is not complete
        let updated = group(vec![
            zone("a", 2).template_changed().updated_first(2).build(),
            zone("b", 2).build(),
        ]);
        assert_eq!(told(&mut seen, &updated), []);
        // When it has, it is told, once
        let done = group(vec![
            zone("a", 2).at_revision("rev-2").build(),
            zone("b", 2).build(),
        ]);
        assert_eq!(
            told(&mut seen, &done),
            [("a".to_owned(), "rev-2".to_owned())]
        );
        assert_eq!(told(&mut seen, &done), []);
    }

    #[test]
    fn zones_never_seen_rolling_and_pods_restarting_are_no_completion() {
        let mut seen = Rolling::new();
        // A zone complete when first seen (a new leader): nothing to tell
        let settled = group(vec![zone("a", 2).build(), zone("b", 2).build()]);
        assert_eq!(told(&mut seen, &settled), []);
        // A pod not ready at the current revision, then ready again: no rollout
        let restarting = group(vec![
            zone("a", 2).not_ready(&[0]).build(),
            zone("b", 2).build(),
        ]);
        assert_eq!(told(&mut seen, &restarting), []);
        assert_eq!(told(&mut seen, &settled), []);
    }

    #[test]
    fn a_zone_rolled_to_another_revision_meanwhile_is_told_for_the_one_it_reached() {
        let mut seen = Rolling::new();
        let to_two = group(vec![zone("a", 2).template_changed_to("rev-2").build()]);
        assert_eq!(told(&mut seen, &to_two), []);
        let to_three = group(vec![zone("a", 2).template_changed_to("rev-3").build()]);
        assert_eq!(told(&mut seen, &to_three), []);
        let done = group(vec![zone("a", 2).at_revision("rev-3").build()]);
        assert_eq!(
            told(&mut seen, &done),
            [("a".to_owned(), "rev-3".to_owned())]
        );
    }
}
