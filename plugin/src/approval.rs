//! `approve GROUP`: what to approve is the step the group's gate awaits, decided by the same
//! pure gate the controller runs ([`baton_core::gates::approval`]); this only names it. The
//! approval records the step's exact name, so approving one step can never let another go, nor
//! a later template revision.
//!
//! Across member clusters the step is computed on the merged view (the zone qualified,
//! `cluster-b/querier/querier-5d8f/0`, as the controller names it) and written on every member
//! in its own cluster. Written on some members only, it approves nothing yet; running the same
//! command again computes the same step (the gate still awaits it) and writes it again
//! everywhere, which finishes it.

use std::fmt;

use baton_core::gates::{self, APPROVED_ANNOTATION, APPROVED_BY_ANNOTATION, GateWait};

use crate::access::{AccessError, History};
use crate::exit;
use crate::output;
use crate::render;
use crate::scope::{self, Scope};

/// The approval to write: `step` in `baton.dev/approved` on every member of the group (one
/// member's word alone approves nothing), for the step awaited in `zone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub group: String,
    pub zone: String,
    pub what: String,
    pub step: String,
    /// The group's members, each to carry the approval.
    pub members: Vec<String>,
}

impl fmt::Display for Approval {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "approved {} of rollout group {}: {APPROVED_ANNOTATION}={} on {}",
            self.what,
            self.group,
            self.step,
            self.members
                .iter()
                .map(|member| render::statefulset(member))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Why there is nothing to approve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NothingAwaited {
    pub group: String,
    pub wait: Option<String>,
}

impl fmt::Display for NothingAwaited {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "rollout group {} awaits no approval: nothing written",
            self.group
        )?;
        match &self.wait {
            Some(wait) => write!(formatter, " (it waits: {wait})"),
            None => Ok(()),
        }
    }
}

/// The approval the gate awaits, from its wait, to write on `members`.
pub fn awaited(
    group: &str,
    members: &[String],
    wait: Option<&GateWait>,
) -> Result<Approval, NothingAwaited> {
    match wait {
        Some(GateWait::AwaitingApproval {
            zone, what, step, ..
        }) => Ok(Approval {
            group: group.to_owned(),
            zone: zone.clone(),
            what: what.clone(),
            step: step.clone(),
            members: members.to_vec(),
        }),
        other => Err(NothingAwaited {
            group: group.to_owned(),
            wait: other.map(ToString::to_string),
        }),
    }
}

/// Approves the step `group` awaits (only if it is `step`, when given); returns the exit code
/// (what is printed says why).
pub async fn run(scope: &Scope, group: &str, step: Option<&str>) -> Result<i32, AccessError> {
    let read = scope.read_group_to_write(group, History::Without).await?;
    let (_, gate) =
        gates::health_check::evaluate_without_queries(&read.snapshot(), jiff::Timestamp::now());
    match awaited(group, &read.names(), gate.wait()) {
        Ok(approval) if step.is_some_and(|step| step != approval.step) => {
            output::err([format!(
                "rollout group {group} awaits {}, not {}: nothing written",
                approval.step,
                step.unwrap_or_default()
            )]);
            Ok(exit::ERROR)
        }
        Ok(approval) => {
            // On every member: one member's word alone approves nothing. Who approved is the
            // user the API server authenticated.
            let by = scope.identity().await;
            let patch = [
                (APPROVED_ANNOTATION, Some(approval.step.as_str())),
                (APPROVED_BY_ANNOTATION, Some(by.as_str())),
            ];
            let outcomes = scope.patch_each(&approval.members, &patch).await;
            scope::all_written("the approval", "the approval does not count", outcomes)?;
            output::out([format!("{approval} (by {by})")]);
            Ok(exit::SUCCESS)
        }
        Err(nothing) => {
            output::err([nothing.to_string()]);
            Ok(exit::ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::gates::{APPROVAL_ANNOTATION, health_check::evaluate_without_queries};
    use baton_core::testing::{annotated, group, now, zone};

    fn rolling(name: &str, updated: u32) -> baton_core::rollout::StatefulSetSnapshot {
        zone(name, 3)
            .at_revision(&format!("{name}-old"))
            .template_changed_to(&format!("{name}-new"))
            .updated_first(updated)
            .build()
    }

    #[test]
    fn approve_names_the_awaited_step_and_the_gate_takes_it() {
        let waiting = group(vec![
            annotated(rolling("a", 0), APPROVAL_ANNOTATION, "zone"),
            rolling("b", 0),
        ]);
        let (_, gate) = evaluate_without_queries(&waiting, now());
        let members = ["a".to_owned(), "b".to_owned()];
        let approval = awaited("ingester", &members, gate.wait()).expect("awaits approval");
        assert_eq!(approval.zone, "a");
        assert_eq!(approval.step, "a/a-new/0");
        assert_eq!(
            approval.to_string(),
            "approved its first step to a-new of rollout group ingester: \
             baton.dev/approved=a/a-new/0 on statefulset/a, statefulset/b"
        );
        // Written on one member alone (the zone's, or a newcomer's), it approves nothing
        let mut alone = waiting.clone();
        alone.statefulsets[0]
            .annotations
            .insert(APPROVED_ANNOTATION.to_owned(), approval.step.clone());
        let (plan, gate) = evaluate_without_queries(&alone, now());
        assert!(gate.wait().is_some());
        assert!(plan.deletions().next().is_none());
        // What approve writes, on every member, lets the step go
        let mut approved = waiting.clone();
        for member in &mut approved.statefulsets {
            member
                .annotations
                .insert(APPROVED_ANNOTATION.to_owned(), approval.step.clone());
        }
        let (plan, gate) = evaluate_without_queries(&approved, now());
        assert_eq!(gate.wait(), None);
        assert!(plan.deletions().next().is_some());
    }

    #[test]
    fn across_clusters_the_step_names_the_qualified_zone_and_a_partial_approval_is_finished_by_a_rerun()
     {
        // Given a group across three clusters, asking for approval of each zone's first step,
        // the first cluster's zone done and cluster-b's next
        let querier = |cluster: &str| {
            zone(&format!("{cluster}/querier"), 3)
                .at_revision("querier-old")
                .template_changed_to("querier-new")
        };
        let done = querier("cluster-a")
            .all_updated()
            .current_revision("querier-new")
            .build();
        let waiting = group(vec![
            annotated(done, APPROVAL_ANNOTATION, "zone"),
            querier("cluster-b").build(),
            querier("cluster-c").build(),
        ]);
        let members: Vec<String> = waiting
            .statefulsets
            .iter()
            .map(|member| member.name.clone())
            .collect();
        let (_, gate) = evaluate_without_queries(&waiting, now());
        let approval = awaited("querier", &members, gate.wait()).expect("awaits approval");
        // Then the step is cluster-b's, named with its cluster, to write on every member
        assert_eq!(approval.zone, "cluster-b/querier");
        assert_eq!(approval.step, "cluster-b/querier/querier-new/0");
        assert_eq!(approval.members, members);
        assert!(
            approval.to_string().ends_with(
                "on statefulset/querier in cluster cluster-a, statefulset/querier in cluster \
                 cluster-b, statefulset/querier in cluster cluster-c"
            ),
            "{approval}"
        );
        // When it was written on cluster-a and cluster-b but not cluster-c
        let mut partly = waiting.clone();
        for member in &mut partly.statefulsets[..2] {
            member
                .annotations
                .insert(APPROVED_ANNOTATION.to_owned(), approval.step.clone());
        }
        // Then nothing goes, and the same command computes the same step again
        let (plan, gate) = evaluate_without_queries(&partly, now());
        assert!(plan.deletions().next().is_none(), "{plan:?}");
        let again = awaited("querier", &members, gate.wait()).expect("still awaits it");
        assert_eq!(again, approval);
        // and what it writes again, on every member (the same value where it was), lets it go
        let mut finished = partly.clone();
        for member in &mut finished.statefulsets {
            member
                .annotations
                .insert(APPROVED_ANNOTATION.to_owned(), again.step.clone());
        }
        let (plan, gate) = evaluate_without_queries(&finished, now());
        assert_eq!(gate.wait(), None);
        let deleted: Vec<&str> = plan
            .deletions()
            .filter_map(|action| action.rolls())
            .collect();
        assert!(
            !deleted.is_empty() && deleted.iter().all(|zone| *zone == "cluster-b/querier"),
            "{plan:?}"
        );
    }

    #[test]
    fn nothing_to_approve_says_what_the_group_waits_for() {
        let rolling_group = group(vec![rolling("a", 0), rolling("b", 0)]);
        let (_, gate) = evaluate_without_queries(&rolling_group, now());
        let nothing = awaited("ingester", &[], gate.wait()).unwrap_err();
        assert_eq!(
            nothing.to_string(),
            "rollout group ingester awaits no approval: nothing written"
        );
    }
}
