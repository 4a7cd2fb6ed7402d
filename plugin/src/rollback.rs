//! `rollback GROUP`: asks baton's controller to roll the group back, after checking that it
//! can, and prints what it will do. The decision is the controller's own
//! ([`baton_core::gates::rollback::start`], from the same members and ControllerRevisions); this
//! writes the request (`baton.dev/rollback`, saying who asked and why) and the controller carries
//! it out: it may be the leader of another moment, so the request is what survives.
//!
//! Across member clusters the decision is made on the merged view (each member's
//! ControllerRevisions read in its own cluster, found by uid) and the request written on every
//! member in its own cluster. Written on some members only, it asks for nothing yet (the
//! controller starts only once every member carries it); running the same command again decides
//! the same rollback and writes the request everywhere, which finishes it.

use std::collections::BTreeMap;

use baton_core::gates::rollback::{self, ROLLBACK_ANNOTATION, Revision, RollbackRecord};
use baton_core::rollout::GroupSnapshot;
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::access::{AccessError, History};
use crate::exit;
use crate::output;
use crate::render;
use crate::scope::{self, Scope};

/// The rollback a request with `why` would start in `group` (`snapshot`, each member's
/// ControllerRevisions in `history`) at `now`, as the controller decides it: each member's
/// record, in turn order; or why it is refused. Pure.
pub fn decide(
    group: &str,
    snapshot: &GroupSnapshot,
    history: &BTreeMap<String, Vec<Revision>>,
    why: &str,
    now: jiff::Timestamp,
) -> Result<Vec<(String, RollbackRecord)>, String> {
    let plan = baton_core::rollout::plan(snapshot, now);
    let status = rollback::status(snapshot, |name| {
        plan.progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done)
    });
    if let Some(refused) = rollback::refuse_request(group, &status) {
        return Err(refused);
    }
    rollback::start(snapshot, history, why, now).map_err(|refused| refused.to_string())
}

/// Requests the rollback of `group`; returns the exit code (what is printed says why).
pub async fn run(scope: &Scope, group: &str, reason: &str) -> Result<i32, AccessError> {
    let read = scope.read_group_to_write(group, History::With).await?;
    let snapshot = read.snapshot();
    let members: Vec<&StatefulSet> = read.statefulsets.iter().collect();
    let history = rollback::history(&members, &read.revisions);
    // Who asks, for the Events and the status: the user the API server authenticated.
    let why = format!(
        "kubectl baton rollback by {}: {reason}",
        scope.identity().await
    );
    let records = match decide(group, &snapshot, &history, &why, jiff::Timestamp::now()) {
        Ok(records) => records,
        Err(refused) => {
            output::err([format!("{refused}: nothing written")]);
            return Ok(exit::ERROR);
        }
    };
    // On every member: one member's word alone asks for nothing.
    let carriers = read.names();
    let outcomes = scope
        .patch_each(&carriers, &[(ROLLBACK_ANNOTATION, Some(why.as_str()))])
        .await;
    scope::all_written("the rollback request", "nothing rolls back", outcomes)?;
    output::out([
        format!(
            "rollback of rollout group {group} requested ({ROLLBACK_ANNOTATION} on {}): {}",
            carriers
                .iter()
                .map(|carrier| render::statefulset(carrier))
                .collect::<Vec<_>>()
                .join(", "),
            rollback::describe(&records)
        ),
        format!(
            "follow it with: {} (exit 7 once rolled back)",
            scope.reach().baton(&format!("wait {group}"))
        ),
    ]);
    Ok(exit::SUCCESS)
}

#[cfg(test)]
mod tests {
    use baton_core::annotations::ROLLBACK_STATE_ANNOTATION;
    use baton_core::testing::{annotated, group, now, zone};

    use super::*;

    /// Group `querier` across three clusters, rolling from `querier-old` to `querier-new`:
    /// cluster-a's member has `updated` of its 3 pods updated, the others none.
    fn rolling(updated: u32) -> GroupSnapshot {
        let member = |cluster: &str, updated: u32| {
            zone(&format!("{cluster}/querier"), 3)
                .at_revision("querier-old")
                .template_changed_to("querier-new")
                .updated_first(updated)
                .build()
        };
        group(vec![
            member("cluster-a", updated),
            member("cluster-b", 0),
            member("cluster-c", 0),
        ])
    }

    #[test]
    fn across_clusters_a_request_written_on_some_members_only_is_finished_by_the_same_command() {
        let why = "kubectl baton rollback by alice: bad version";
        let first = decide("querier", &rolling(1), &BTreeMap::new(), why, now())
            .expect("a rollback to start");
        let order: Vec<&str> = first.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            order,
            [
                "cluster-a/querier",
                "cluster-c/querier",
                "cluster-b/querier"
            ],
            "the zone the rollout reached first, then the others in reverse order"
        );
        assert!(
            first
                .iter()
                .all(|(_, record)| record.from == "querier-new" && record.to == "querier-old")
        );
        // When the request landed on cluster-a and cluster-b only, it asks for nothing yet, and
        // the same command decides the same rollback again
        let mut partly = rolling(1);
        for member in &mut partly.statefulsets[..2] {
            member
                .annotations
                .insert(ROLLBACK_ANNOTATION.to_owned(), why.to_owned());
        }
        assert_eq!(rollback::request(&partly), None);
        let again = decide("querier", &partly, &BTreeMap::new(), why, now()).expect("not refused");
        assert_eq!(again, first);
        // Once the controller started it (its records stored), a second request is refused
        let mut started = rolling(1);
        for member in &mut started.statefulsets {
            let (_, record) = first
                .iter()
                .find(|(name, _)| *name == member.name)
                .expect("a record per member");
            *member = annotated(
                member.clone(),
                ROLLBACK_STATE_ANNOTATION,
                &record.to_annotation(),
            );
        }
        let refused = decide("querier", &started, &BTreeMap::new(), why, now()).unwrap_err();
        assert!(refused.contains("rolling back already"), "{refused}");
    }
}
