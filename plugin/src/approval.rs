//! `approve GROUP`: what to approve is the step the group's gate awaits, decided by the same
//! pure gate the controller runs ([`baton_core::gates::approval`]); this only names it. The
//! approval records the step's exact name, so approving one step can never let another go, nor
//! a later template revision.

use std::fmt;

use baton_core::gates::{APPROVED_ANNOTATION, GateWait};

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
                .map(|member| format!("statefulset/{member}"))
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
