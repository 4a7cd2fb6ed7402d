//! Where a group stands, computed with the controller's own code: the snapshot
//! ([`GroupSnapshot::from_kubernetes`]), the planner and the gates ([`gates::decide`], pure).
//! So the plugin says what the controller would, from the same objects.
//!
//! Pure: a snapshot and `now` give the view; [`crate::render`] turns it into text.

use baton_controller::gates::{self, GateDecision, GateWait};
use baton_controller::rollout::{Action, GroupSnapshot, Plan, WaitReason};
use baton_shared::annotations::paused;
use jiff::Timestamp;
use serde::Serialize;

/// The JSON/YAML document of `kubectl baton status -o json|yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDocument {
    pub namespace: String,
    pub generated_at: String,
    pub groups: Vec<GroupView>,
}

/// One rollout group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupView {
    pub name: String,
    pub phase: Phase,
    /// Why the group does not progress, if it waits (the gate's reason first: it is the one
    /// holding the plan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// In rollout order (the planner's: by name).
    pub zones: Vec<ZoneView>,
}

/// A wait: its stable kind (`WaitReason::kind`, `GateWait::kind`) and the sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waiting {
    pub kind: String,
    pub message: String,
}

/// One StatefulSet of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneView {
    pub statefulset: String,
    pub phase: Phase,
    pub updated: u32,
    pub ready: u32,
    pub total: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    pub paused: bool,
}

/// Where a group or zone stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Every pod at the update revision and available.
    Complete,
    /// Pods are being replaced.
    Rolling,
    /// Not started, or held (another zone first, a soak, a gate, pods not ready).
    Waiting,
    /// `grafana.com/rollout-paused` with pods left to update.
    Paused,
    /// `baton.dev/halted`: nothing moves until a person resumes.
    Halted,
    /// A member is not `OnDelete`: baton leaves the whole group alone.
    Skipped,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Rolling => "rolling",
            Self::Waiting => "waiting",
            Self::Paused => "paused",
            Self::Halted => "halted",
            Self::Skipped => "skipped",
        }
    }
}

/// The planner's plan for the group as the gates allow it, and the gates' decision: what the
/// controller would do now.
pub fn decide(group: &GroupSnapshot, now: Timestamp) -> (Plan, GateDecision) {
    gates::decide(group, now)
}

/// The view of a group from its plan and gate decision ([`decide`]).
pub fn view(group: &GroupSnapshot, plan: &Plan, gate: &GateDecision) -> GroupView {
    let waiting = gate
        .wait()
        .map(|wait| Waiting {
            kind: wait.kind().to_owned(),
            message: wait.to_string(),
        })
        .or_else(|| {
            plan.waiting.as_ref().map(|wait| Waiting {
                kind: wait.kind().to_owned(),
                message: wait.to_string(),
            })
        });
    let skipped = matches!(plan.waiting, Some(WaitReason::NonOnDeleteMember { .. }));
    let halted = matches!(gate.wait(), Some(GateWait::Halted { .. }));
    let deleting_in = |name: &str| {
        plan.actions.iter().any(
            |action| matches!(action, Action::DeletePod { statefulset, .. } if statefulset == name),
        )
    };
    let waited_on = plan.waiting.as_ref().and_then(WaitReason::statefulset);
    let zones: Vec<ZoneView> = group
        .statefulsets
        .iter()
        .map(|member| {
            let progress = plan
                .progress
                .iter()
                .find(|progress| progress.statefulset == member.name);
            let (updated, ready, total, done) = progress
                .map_or((0, 0, member.spec_replicas, false), |p| {
                    (p.updated, p.ready, p.total, p.done)
                });
            let is_paused = paused(&member.annotations).value;
            // Mid-rollout: some pods updated and not all, or pods going now, or the planner
            // waits on this zone after updating some of it.
            let started = updated > 0 && updated < total;
            let phase = if done {
                Phase::Complete
            } else if skipped {
                Phase::Skipped
            } else if halted {
                Phase::Halted
            } else if is_paused {
                Phase::Paused
            } else if deleting_in(&member.name)
                || (started
                    && gate
                        .wait()
                        .is_none_or(|wait| wait.statefulset() != member.name))
                || (waited_on == Some(member.name.as_str()) && updated > 0)
            {
                Phase::Rolling
            } else {
                Phase::Waiting
            };
            ZoneView {
                statefulset: member.name.clone(),
                phase,
                updated,
                ready,
                total,
                current_revision: member.current_revision.clone(),
                update_revision: member.update_revision.clone(),
                paused: is_paused,
            }
        })
        .collect();
    let phase = if skipped {
        Phase::Skipped
    } else if halted {
        Phase::Halted
    } else if !zones.is_empty() && zones.iter().all(|zone| zone.phase == Phase::Complete) {
        Phase::Complete
    } else if zones.iter().any(|zone| zone.phase == Phase::Rolling) {
        Phase::Rolling
    } else if matches!(plan.waiting, Some(WaitReason::Paused { .. })) {
        Phase::Paused
    } else {
        Phase::Waiting
    };
    GroupView {
        name: group.name.clone(),
        phase,
        waiting: waiting.filter(|_| phase != Phase::Complete),
        zones,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use baton_controller::gates::HALTED_ANNOTATION;
    use baton_controller::rollout::{PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy};
    use baton_shared::annotations::ROLLOUT_PAUSED_ANNOTATION;

    use super::*;

    /// A zone of `total` pods, `updated` of them at `new` (the rest at `old`), all ready.
    pub(crate) fn zone(name: &str, total: u32, updated: u32) -> StatefulSetSnapshot {
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

    pub(crate) fn group(zones: Vec<StatefulSetSnapshot>) -> GroupSnapshot {
        GroupSnapshot {
            name: "ingester".to_owned(),
            statefulsets: zones,
        }
    }

    pub(crate) fn view_of(group: &GroupSnapshot) -> GroupView {
        let (plan, gate) = decide(group, Timestamp::from_second(1_800_000_000).unwrap());
        view(group, &plan, &gate)
    }

    fn phases(view: &GroupView) -> Vec<Phase> {
        view.zones.iter().map(|zone| zone.phase).collect()
    }

    #[test]
    fn a_finished_group_is_complete_and_waits_for_nothing() {
        let view = view_of(&group(vec![zone("a", 3, 3), zone("b", 3, 3)]));
        assert_eq!(view.phase, Phase::Complete);
        assert_eq!(phases(&view), [Phase::Complete, Phase::Complete]);
        assert_eq!(view.waiting, None);
    }

    #[test]
    fn zone_a_done_b_rolling_c_waiting() {
        let mut b = zone("b", 3, 1);
        // The updated pod is still starting: the planner waits for it.
        b.pods[0].ready = false;
        b.ready_replicas = 2;
        let view = view_of(&group(vec![zone("a", 3, 3), b, zone("c", 3, 0)]));
        assert_eq!(view.phase, Phase::Rolling);
        assert_eq!(
            phases(&view),
            [Phase::Complete, Phase::Rolling, Phase::Waiting]
        );
        let waiting = view.waiting.expect("waits");
        assert_eq!(waiting.kind, "MaxUnavailable");
        assert!(waiting.message.contains("b-0"), "{}", waiting.message);
        assert_eq!((view.zones[1].updated, view.zones[1].ready), (1, 2));
    }

    #[test]
    fn a_paused_zone_with_pods_left_is_paused() {
        let mut b = zone("b", 2, 0);
        b.annotations
            .insert(ROLLOUT_PAUSED_ANNOTATION.to_owned(), "true".to_owned());
        let view = view_of(&group(vec![zone("a", 2, 2), b]));
        assert_eq!(phases(&view), [Phase::Complete, Phase::Paused]);
        assert_eq!(view.phase, Phase::Paused);
        assert_eq!(view.waiting.expect("waits").kind, "Paused");
        assert!(view.zones[1].paused);
    }

    #[test]
    fn a_halted_group_is_halted_everywhere_but_its_finished_zones() {
        let mut b = zone("b", 2, 0);
        b.annotations
            .insert(HALTED_ANNOTATION.to_owned(), "hook failed".to_owned());
        let view = view_of(&group(vec![zone("a", 2, 2), b]));
        assert_eq!(view.phase, Phase::Halted);
        assert_eq!(phases(&view), [Phase::Complete, Phase::Halted]);
        let waiting = view.waiting.expect("waits");
        assert_eq!(waiting.kind, "Halted");
        assert!(
            waiting.message.contains("hook failed"),
            "{}",
            waiting.message
        );
    }

    #[test]
    fn a_rolling_update_member_skips_the_group() {
        let mut b = zone("b", 2, 0);
        b.update_strategy = UpdateStrategy::RollingUpdate;
        let view = view_of(&group(vec![zone("a", 2, 0), b]));
        assert_eq!(view.phase, Phase::Skipped);
        assert_eq!(view.waiting.expect("waits").kind, "NonOnDeleteMember");
    }

    #[test]
    fn a_group_about_to_delete_is_rolling_in_that_zone() {
        let view = view_of(&group(vec![zone("a", 2, 0), zone("b", 2, 0)]));
        assert_eq!(view.phase, Phase::Rolling);
        assert_eq!(phases(&view), [Phase::Rolling, Phase::Waiting]);
    }
}
