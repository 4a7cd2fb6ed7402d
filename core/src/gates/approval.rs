//! Approvals: a person in the loop. A group asking for approval (`baton.dev/approval`) holds
//! the steps it names until a person approves that exact step (`kubectl baton approve`, which
//! writes `baton.dev/approved`).
//!
//! An approval counts once every member carries it (`kubectl baton approve` writes it on each):
//! one member alone approves nothing ([`approved`], read with the other keys).
//!
//! A step is named by what it is about, never by when it was asked: the zone, the revision it
//! rolls to, and the pods already updated there (`ingester-zone-a/ingester-zone-a-5d8f/1`), or
//! for the canary the revisions of the whole group (`canary/<rev>+<rev>+…`). So an approval
//! for one step never lets another go, a new template revision voids every pending approval,
//! and nothing needs to be stored or cleaned up by baton: the name follows from the snapshot.
//! Stateless like the steps themselves, it survives failover.
//!
//! Which steps wait:
//! - `batch`: every step;
//! - `zone`: a zone's first step (no pod updated there yet);
//! - `canary`: every step once some pod of the group runs the new revision, i.e. everything
//!   after the rollout's first step (the canary) — one approval for the rest of the rollout.
//!
//! Only ever takes deletions away; applied after the steps ([`super::steps`]) so the step
//! named is the one that would go.

use std::collections::BTreeSet;

use crate::rollout::{GroupSnapshot, Plan};

use super::decision::{GateDecision, GateVerdict, GateWait, deleted_in};
use super::keys::GateConfig;

pub use super::keys::{SEPARATOR, approved};

/// The canary's approval names the revisions the whole group rolls to.
fn canary_step(group: &GroupSnapshot) -> String {
    // `+`, not the separator of approved steps.
    format!("canary/{}", group.update_revisions("+"))
}

/// Holds the plan's next step until it is approved, when the group asks (module header).
pub fn apply(
    group: &GroupSnapshot,
    config: &GateConfig,
    (mut plan, mut decision): (Plan, GateDecision),
) -> (Plan, GateDecision) {
    if !config.approval.any() {
        return (plan, decision);
    }
    let Some(zone) = deleted_in(group, &plan).into_iter().next() else {
        return (plan, decision);
    };
    let Some(revision) = group
        .statefulsets
        .iter()
        .find(|member| member.name == zone)
        .and_then(|member| member.update_revision.clone())
    else {
        return (plan, decision);
    };
    let updated = |name: &str| {
        plan.progress
            .iter()
            .find(|progress| progress.statefulset == name)
            .map_or(0, |progress| progress.updated)
    };
    let in_zone = updated(&zone);
    let in_group: u32 = plan.progress.iter().map(|progress| progress.updated).sum();
    let mut needed: Vec<(String, String)> = Vec::new();
    if config.approval.canary && in_group > 0 {
        needed.push((canary_step(group), "the rollout past its canary".to_owned()));
    }
    if config.approval.batch || (config.approval.zone && in_zone == 0) {
        let what = if in_zone == 0 {
            format!("its first step to {revision}")
        } else {
            format!("its step to {revision} with {in_zone} pods updated")
        };
        needed.push((format!("{zone}/{revision}/{in_zone}"), what));
    }
    let approved = approved(group);
    if needed
        .iter()
        .all(|(step, _)| approved.contains(step.as_str()))
    {
        return (plan, decision);
    }
    plan.actions.retain(|action| action.rolls().is_none());
    let what: Vec<&str> = needed.iter().map(|(_, what)| what.as_str()).collect();
    let step: Vec<&str> = needed.iter().map(|(step, _)| step.as_str()).collect();
    decision.verdict = GateVerdict::Hold {
        wait: GateWait::AwaitingApproval {
            zone,
            group: group.name.clone(),
            what: what.join(" and "),
            step: step.join(&SEPARATOR.to_string()),
            reach: Box::new(group.reach.clone()),
        },
        pass: BTreeSet::new(),
    };
    (plan, decision)
}
