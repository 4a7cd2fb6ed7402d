//! The status of one group, computed: a pure function from the group's snapshot, the plan and
//! gate decision made from it, and what the leader recorded ([`History`]) to a
//! [`GroupStatus`]. The page, the JSON and `kubectl baton` all call it, so they agree with each
//! other and with what the controller does: the planner and the gates decide, this only names.
//!
//! Phases, of a zone (first rule that holds):
//! 1. its group is skipped (a member is not `OnDelete`) → `skipped`, unless complete;
//! 2. its group is halted → `halted`, unless complete; held by a gate key that cannot be read
//!    → `invalidConfiguration`, unless complete;
//! 3. every pod updated and available → `complete`;
//! 4. its next step waits for a person's approval → `awaitingApproval`;
//! 5. `grafana.com/rollout-paused` → `paused`;
//! 6. it has a rollout (pods left to update, or its current revision is not the update
//!    revision yet) and the plan deletes in it, some of its pods are updated already, or the
//!    planner waits on its pods → `rolling`;
//! 7. otherwise → `waiting` (not its turn, or a pod down outside any rollout).
//!
//! Of a group: `skipped`, `halted` (a template reverted after a rollback too),
//! `invalidConfiguration` (a gate key that cannot be read: a person fixes it, nobody resumes),
//! `rolledBack`
//! (complete after a rollback), `complete`, `rollingBack`, `awaitingApproval` as above; `paused` when the planner waits only
//! for paused zones; `rolling` when pods are being replaced or the wait is for a rolling zone's
//! own pods; `waiting` otherwise (a gate holds it, several zones are not ready, …).

use crate::commands::Reader;
use crate::explained::Explained;
use crate::pods::CachedPod;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::model::{
    ActionRecord, CheckStatus, GroupStatus, GroupWarning, RolloutPhase, Waiting, ZoneStatus,
};
use crate::gates::{self, GateDecision, GateWait};
use crate::rollout::{GroupSnapshot, Plan, WaitReason};

/// `GateWait::HealthCheck`'s kind: a wait only the leader can see (its queries).
const HEALTH_CHECK: &str = "HealthCheck";

/// What the leader's reconciles recorded about a group (the controller's `StatusBoard`): what it computes
/// at request time cannot tell since when a group waits, nor what was done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The wait the last reconcile saw, and since when that kind of wait has lasted.
    pub waiting: Option<ObservedWait>,
    /// The latest actions, newest first.
    pub actions: Vec<ActionRecord>,
    /// The group's rollout over time, if recorded.
    pub timeline: Option<super::timeline::Timeline>,
}

/// A wait as the leader saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedWait {
    pub kind: &'static str,
    pub message: String,
    pub since: Timestamp,
}

impl ObservedWait {
    /// The wait a pass reports (`(kind, message)`, or `None` when the group does not wait),
    /// after the wait the previous pass saw. Its `since` is the first `now` this `kind` was
    /// observed in a row: a new message of the same kind (another pod named, a soak counting
    /// down) keeps it, another kind or `None` starts afresh.
    pub fn after(
        previous: Option<&ObservedWait>,
        waiting: Option<(&'static str, String)>,
        now: Timestamp,
    ) -> Option<ObservedWait> {
        waiting.map(|(kind, message)| {
            let since = match previous {
                Some(previous) if previous.kind == kind => previous.since,
                _ => now,
            };
            ObservedWait {
                kind,
                message,
                since,
            }
        })
    }
}

/// Plans and gates `snapshot` as the leader would without I/O
/// ([`gates::health_check::evaluate_without_queries`]), then [`group_status`]. A health check needs
/// queries: its wait is known from the leader's `history` only.
pub fn compute(snapshot: &GroupSnapshot, history: Option<&History>, now: Timestamp) -> GroupStatus {
    let (plan, decision) = gates::health_check::evaluate_without_queries(snapshot, now);
    group_status(snapshot, &plan, &decision, history)
}

/// The check the group names and its stored state; `None` when it names none (or its keys are
/// invalid: the group's warnings say so).
fn check_status(snapshot: &GroupSnapshot) -> Option<CheckStatus> {
    let gates = crate::pass::Gates::read(snapshot);
    let name = gates.config.health_check.as_deref()?;
    let state = &gates.check_state;
    Some(CheckStatus {
        name: name.to_owned(),
        last_run: state.last_run.clone(),
        last_result: state.last_outcome.clone(),
        passes: state.passes,
        failures: state.failures,
    })
}

/// Every group among `statefulsets` (by their `rollout-group` label), by name, each computed
/// with [`compute`]; `pods` may be every pod of the namespace. The members in a cluster of
/// `outages` are marked as the planner sees them ([`crate::clusters::mark_outages`]).
/// `history` gives a group's recorded history, if any; `reader`, how the person reading
/// reached the cluster, for the commands the messages print ([`crate::commands`]).
pub fn groups<'a>(
    statefulsets: &[&'a StatefulSet],
    pods: &[&'a CachedPod],
    outages: &[crate::clusters::Outage],
    history: impl Fn(&str) -> Option<History>,
    reader: &Reader,
    now: Timestamp,
) -> Vec<GroupStatus> {
    let mut names: Vec<&str> = statefulsets
        .iter()
        .filter_map(|statefulset| crate::statefulset::group_of(statefulset))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let members = statefulsets
                .iter()
                .copied()
                .filter(|statefulset| crate::statefulset::group_of(statefulset) == Some(name));
            let mut snapshot = GroupSnapshot::from_kubernetes(name, members, pods.iter().copied());
            snapshot.reach.reader = reader.clone();
            crate::clusters::mark_outages(&mut snapshot, outages);
            compute(&snapshot, history(name).as_ref(), now)
        })
        .collect()
}

/// The status of one group from its snapshot, the (gated) plan and gate decision made from it,
/// and the leader's history (see the module header for the phases).
pub fn group_status(
    snapshot: &GroupSnapshot,
    plan: &Plan,
    gate: &GateDecision,
    history: Option<&History>,
) -> GroupStatus {
    let skipped = matches!(plan.waiting, Some(WaitReason::NonOnDeleteMember { .. }));
    let halted = gate.wait().is_some_and(GateWait::halts);
    let invalid = matches!(gate.wait(), Some(GateWait::InvalidGate { .. }));
    let requested = gates::rollback::request(snapshot).is_some();
    let rollback = gates::rollback::status(snapshot, |name| {
        plan.progress
            .iter()
            .any(|progress| progress.statefulset == name && progress.done)
    });
    let awaiting = match gate.wait() {
        Some(GateWait::AwaitingApproval { zone, .. }) => Some(zone.as_str()),
        _ => None,
    };
    let waiting = waiting(plan, gate, history);
    // The StatefulSet whose own pods the planner waits for (readiness, not a gate).
    let waited_on = match (&plan.waiting, gate.wait()) {
        (
            Some(
                reason @ (WaitReason::NotReady { .. }
                | WaitReason::MinReadySeconds { .. }
                | WaitReason::MissingPods { .. }
                | WaitReason::StatusNotReady { .. }
                | WaitReason::MaxUnavailable { .. }),
            ),
            None,
        ) => reason.statefulset(),
        _ => None,
    };
    let zones: Vec<ZoneStatus> = snapshot
        .statefulsets
        .iter()
        .map(|member| {
            let progress = plan
                .progress
                .iter()
                .find(|progress| progress.statefulset == member.name);
            let (updated, ready, total, done) =
                progress.map_or((0, 0, member.spec_replicas, false), |progress| {
                    (
                        progress.updated,
                        progress.ready,
                        progress.total,
                        progress.done,
                    )
                });
            let paused = crate::annotations::paused(&member.annotations).value;
            let has_rollout = member.update_revision.is_some()
                && (updated < total || member.current_revision != member.update_revision);
            let deleting = plan
                .deletions()
                .any(|action| action.rolls() == Some(member.name.as_str()));
            let phase = if skipped && !done {
                RolloutPhase::Skipped
            } else if halted && !done {
                RolloutPhase::Halted
            } else if invalid && !done {
                RolloutPhase::InvalidConfiguration
            } else if member.unreachable.is_some() {
                // Known only as it last was: never done, so the group never looks complete
                // while the planner holds it (`MemberUnreachable`).
                RolloutPhase::Waiting
            } else if done {
                RolloutPhase::Complete
            } else if awaiting == Some(member.name.as_str()) {
                RolloutPhase::AwaitingApproval
            } else if paused {
                RolloutPhase::Paused
            } else if has_rollout
                && (deleting || updated > 0 || waited_on == Some(member.name.as_str()))
            {
                RolloutPhase::Rolling
            } else {
                RolloutPhase::Waiting
            };
            ZoneStatus {
                statefulset: member.name.clone(),
                phase,
                updated,
                ready,
                total,
                current_revision: member.current_revision.clone(),
                update_revision: member.update_revision.clone(),
                paused,
            }
        })
        .collect();

    let complete = !zones.is_empty()
        && zones
            .iter()
            .all(|zone| zone.phase == RolloutPhase::Complete);
    let health_checking = waiting
        .as_ref()
        .is_some_and(|waiting| waiting.kind == HEALTH_CHECK);
    let phase = if skipped {
        RolloutPhase::Skipped
    } else if halted {
        RolloutPhase::Halted
    } else if invalid {
        RolloutPhase::InvalidConfiguration
    } else if gates::rollback::active(&rollback) || requested {
        // A rollback asked for is under way from the moment it is asked.
        RolloutPhase::RollingBack
    } else if complete && matches!(rollback, gates::rollback::Status::RolledBack(_)) {
        RolloutPhase::RolledBack
    } else if complete {
        RolloutPhase::Complete
    } else if awaiting.is_some() {
        RolloutPhase::AwaitingApproval
    } else if gate.wait().is_none()
        && !health_checking
        && matches!(plan.waiting, Some(WaitReason::Paused { .. }))
    {
        RolloutPhase::Paused
    } else if gate.wait().is_none()
        && !health_checking
        && (plan.waiting.is_none()
            || waited_on.is_some_and(|name| {
                zones
                    .iter()
                    .any(|zone| zone.statefulset == name && zone.phase == RolloutPhase::Rolling)
            }))
    {
        RolloutPhase::Rolling
    } else {
        RolloutPhase::Waiting
    };
    GroupStatus {
        name: snapshot.name.clone(),
        namespace: None,
        check: check_status(snapshot),
        phase,
        zones,
        rollback: match &rollback {
            gates::rollback::Status::RolledBack(record) => Some(format!(
                "rolled back from {} at {}: {}",
                record.from, record.at, record.why
            )),
            gates::rollback::Status::Restoring(members) => members
                .first()
                .map(|(_, record)| format!("rolling back: {}", record.why)),
            gates::rollback::Status::RollingBack(order) => Some(format!(
                "rolling back, {} next: {}",
                order.join(", then "),
                gates::rollback::records(snapshot)
                    .first()
                    .map(|(_, record)| record.why.clone())
                    .unwrap_or_default()
            )),
            gates::rollback::Status::Reverted { record, .. } => {
                Some(format!("rollback interrupted: {}", record.why))
            }
            gates::rollback::Status::None | gates::rollback::Status::Stale(_) => {
                gates::rollback::request(snapshot).map(|(_, why)| format!("asked: {why}"))
            }
        },
        waiting: if phase == RolloutPhase::Complete {
            None
        } else {
            waiting
        },
        last_actions: history
            .map(|history| history.actions.clone())
            .unwrap_or_default(),
        warnings: warnings(plan, gate),
        timeline: history.and_then(|history| history.timeline.clone()),
    }
}

/// The planner's and the gates' warnings (what their Warning Events say), in that order.
fn warnings(plan: &Plan, gate: &GateDecision) -> Vec<GroupWarning> {
    let warning = |warning: &dyn Explained| GroupWarning {
        kind: warning.kind().to_owned(),
        statefulset: warning.statefulset().map(str::to_owned),
        message: warning.to_string(),
    };
    plan.warnings
        .iter()
        .map(|each| warning(each))
        .chain(gate.warnings.iter().map(|each| warning(each)))
        .collect()
}

/// Why the group waits: the gate's wait before the planner's (a held group waits for the
/// gate whatever the pods do). `since` comes from the leader's history when it saw the same
/// kind of wait. A health check's wait needs queries the request does not make: the
/// leader's last one stands unless another gate holds.
fn waiting(plan: &Plan, gate: &GateDecision, history: Option<&History>) -> Option<Waiting> {
    let observed = history.and_then(|history| history.waiting.as_ref());
    let leader_checking =
        observed.filter(|observed| observed.kind == HEALTH_CHECK && gate.wait().is_none());
    let (kind, message) = match (leader_checking, gate.wait(), &plan.waiting) {
        (Some(observed), _, _) => (observed.kind, observed.message.clone()),
        (None, Some(wait), _) => wait.kind_and_message(),
        (None, None, Some(reason)) => reason.kind_and_message(),
        (None, None, None) => return None,
    };
    let since = observed
        .filter(|observed| observed.kind == kind)
        .map(|observed| observed.since);
    Some(Waiting {
        kind: kind.to_owned(),
        message,
        since,
    })
}

#[cfg(test)]
mod tests;
