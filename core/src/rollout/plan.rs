//! The rollout planner: from a snapshot of one group, what to do next and, if nothing can be
//! done, why. A pure function, so that every rule of docs/compatibility.md's "Rollout algorithm"
//! can be unit tested and the guarantees users rely on can be checked by simulation.
//!
//! The walk, in short (docs/compatibility.md, with baton's changes):
//! 1. a member that is not `OnDelete` → the whole group is left alone;
//! 2. more than one not-ready member → wait (free replacements aside, below); exactly one → it
//!    goes first;
//! 3. walk the members in order: delete the lowest-ordinal pods not at the update revision, at
//!    most `max-unavailable - not-ready` of them; stop at a member that had deletions or is not
//!    ready; mark a finished member's currentRevision; paused members are treated as done.
//!
//! **Free replacements** (baton; the Go operator waited forever, its issue #339): an outdated
//! pod that is *already unavailable* (by `availability`, the same rule that counts
//! unavailable pods: not Running, not Ready, Ready for less than minReadySeconds; a terminating
//! pod is not deleted again) is deleted first and outside the budget. Its replacement is
//! unavailable until it becomes ready, so the count of unavailable pods does not rise; a
//! rollout that fixes a crash-looping pod can then complete. It does not free budget either:
//! the budget for available pods is still `max-unavailable - not-ready`, the unavailable pod
//! included, since its replacement counts until it is ready.
//!
//! Where: an unavailable pod makes its member not ready, so free replacements are in
//! not-ready members. With one not-ready member, it is the one the walk works on (it goes
//! first). With several (`MultipleNotReady`), each one's unavailable outdated pods are replaced
//! too, but only while no pod at an update revision is unavailable anywhere in the group:
//! while a new pod is starting or failing, the new version is unproven and must not spread to
//! other zones, and a pod down only *transiently* elsewhere is not restarted while a zone is
//! down because of baton. Without that exception, a broken version crash-looping in several
//! zones would hold its own fix forever. Available pods never move while another member is not
//! ready. Paused members get none (hands off), and pods outside spec.replicas are not
//! "replaced" (nothing recreates them), so they follow the budget.

use std::cmp::{Ordering, Reverse};
use std::fmt;

use crate::annotations::rollout::{UpdateBy, partition_set, update_by};
use crate::annotations::{InvalidAnnotation, max_unavailable, paused};
use crate::annotations::{PARTITION_ANNOTATION, UPDATE_BY_ANNOTATION};
use jiff::Timestamp;

use super::snapshot::{
    GroupSnapshot, PodPhase, PodSnapshot, StatefulSetSnapshot, UpdateStrategy, natural_cmp,
    pod_ordinal,
};

/// What the controller should do for a group now, and what to tell people about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Carry out in order. Deletions, if any, all belong to one StatefulSet.
    pub actions: Vec<Action>,
    /// Why the group cannot go further right now (None while pods are being deleted, or once
    /// the group is done).
    pub waiting: Option<WaitReason>,
    /// Bad annotation values, to report as Kubernetes Events.
    pub warnings: Vec<Warning>,
    /// One entry per StatefulSet, in name order.
    pub progress: Vec<Progress>,
    /// When a pod that is Ready but not yet for `minReadySeconds` becomes available: the
    /// group may progress then without any watch event, so the controller should requeue.
    pub recheck_after: Option<Timestamp>,
}

impl Plan {
    /// The member a rollout is at: the one rolling (pods updated, not done), else the next to
    /// roll; None when every member is done.
    pub fn rolling_or_next(&self) -> Option<&Progress> {
        self.progress
            .iter()
            .find(|progress| !progress.done && progress.updated > 0)
            .or_else(|| self.progress.iter().find(|progress| !progress.done))
    }

    /// The actions that take pods down now: deletions, and partitions lowered past pods.
    pub fn deletions(&self) -> impl Iterator<Item = &Action> {
        self.actions
            .iter()
            .filter(|action| action.rolls().is_some())
    }

    /// How many pods this plan takes down now.
    pub fn pods_taken(&self) -> usize {
        self.actions.iter().map(Action::pods_taken).sum()
    }

    /// The plan with at most `pods` pods taken down: the first deletions, and partitions
    /// lowered past fewer pods (a gate's ramp step).
    pub fn take_at_most(&mut self, pods: usize) {
        let mut left = pods;
        let actions = std::mem::take(&mut self.actions);
        for action in actions {
            let taken = action.pods_taken();
            if taken == 0 {
                self.actions.push(action);
            } else if left > 0
                && let Some(kept) = action.first_pods(left)
            {
                left -= kept.pods_taken();
                self.actions.push(kept);
            }
        }
    }
}

/// A pod a lowered partition lets the StatefulSet controller replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub pod: String,
    /// Its index (ordinal minus spec.ordinals.start): the partition that releases it.
    pub index: u32,
}

/// One change to make in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Delete a pod so that the StatefulSet controller recreates it at the update revision.
    /// `uid` is meant for a delete precondition: never delete a newer pod of the same name.
    DeletePod {
        statefulset: String,
        pod: String,
        uid: String,
        /// `Some(why)`: the pod is already unavailable, so replacing it costs no availability
        /// and no max-unavailable budget (a free replacement). `None`: it is available and
        /// takes one pod of the budget.
        unavailable: Option<Unavailable>,
    },
    /// Set status.currentRevision: with `OnDelete` nobody else does it once a rollout is done.
    SetCurrentRevision {
        statefulset: String,
        revision: String,
    },
    /// Set spec.updateStrategy.rollingUpdate.partition of a StatefulSet rolled by partition
    /// (and record it as baton's): the StatefulSet controller replaces the pods at or above it,
    /// highest index first, one at a time.
    SetPartition {
        statefulset: String,
        partition: u32,
        /// The outdated pods it is lowered past, highest index first: taken down by the
        /// StatefulSet controller. Empty when it is raised back to spec.replicas, so that the
        /// next template change waits for baton.
        releases: Vec<Released>,
    },
}

impl Action {
    /// The StatefulSet whose pods this action takes down now, if it takes any.
    pub fn rolls(&self) -> Option<&str> {
        match self {
            Self::DeletePod { statefulset, .. } => Some(statefulset),
            Self::SetPartition {
                statefulset,
                releases,
                ..
            } if !releases.is_empty() => Some(statefulset),
            Self::SetPartition { .. } | Self::SetCurrentRevision { .. } => None,
        }
    }

    /// How many pods this action takes down now.
    pub fn pods_taken(&self) -> usize {
        match self {
            Self::DeletePod { .. } => 1,
            Self::SetPartition { releases, .. } => releases.len(),
            Self::SetCurrentRevision { .. } => 0,
        }
    }

    /// This action taking down at most `pods` pods, if it still takes one: a partition is
    /// lowered only past its first `pods` releases.
    fn first_pods(self, pods: usize) -> Option<Self> {
        match self {
            Self::SetPartition {
                statefulset,
                mut releases,
                ..
            } => {
                releases.truncate(pods);
                let partition = releases.last()?.index;
                Some(Self::SetPartition {
                    statefulset,
                    partition,
                    releases,
                })
            }
            action => (pods > 0).then_some(action),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeletePod {
                statefulset,
                pod,
                unavailable: None,
                ..
            } => write!(formatter, "delete pod {pod} of {statefulset}"),
            Self::DeletePod {
                statefulset,
                pod,
                unavailable: Some(why),
                ..
            } => write!(
                formatter,
                "delete pod {pod} of {statefulset} ({why}, costs no availability)"
            ),
            Self::SetCurrentRevision {
                statefulset,
                revision,
            } => write!(
                formatter,
                "set the current revision of {statefulset} to {revision}"
            ),
            Self::SetPartition {
                statefulset,
                partition,
                releases,
            } if releases.is_empty() => write!(
                formatter,
                "set the partition of {statefulset} to {partition}, its replicas: nothing rolls until baton lowers it"
            ),
            Self::SetPartition {
                statefulset,
                partition,
                releases,
            } => {
                let pods: Vec<&str> = releases
                    .iter()
                    .map(|release| release.pod.as_str())
                    .collect();
                write!(
                    formatter,
                    "lower the partition of {statefulset} to {partition}: the StatefulSet controller replaces {}",
                    pods.join(", ")
                )
            }
        }
    }
}

/// The Event note of a free replacement: which pod, why it was unavailable, and that it
/// costs nothing.
pub fn replacement_note(pod: &str, why: &Unavailable) -> String {
    format!("replacing {pod}: {why} at the old revision, costs no availability")
}

/// Why a pod does not count as available, as far as Kubernetes says; for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// metadata.deletionTimestamp is set.
    Terminating,
    /// A container is not ready and the kubelet says why (`CrashLoopBackOff`,
    /// `ImagePullBackOff`, `ErrImagePull`, `OOMKilled`, …).
    Container(String),
    /// status.phase is not Running, and no container says why.
    Phase(PodPhase),
    /// Running but not Ready, and no container says why (a failing readiness probe).
    NotReady,
    /// Ready, but for less than spec.minReadySeconds.
    ReadyTooRecently,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Terminating => formatter.write_str("terminating"),
            Self::Container(reason) => formatter.write_str(reason),
            Self::Phase(phase) => write!(formatter, "{phase:?}"),
            Self::NotReady => formatter.write_str("not ready"),
            Self::ReadyTooRecently => formatter.write_str("Ready for less than minReadySeconds"),
        }
    }
}

/// The pod a waiting group waits for, named so that a person can look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailablePod {
    pub pod: String,
    pub revision: PodRevision,
    pub why: Unavailable,
}

/// Where a pod stands in its StatefulSet's rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRevision {
    /// Not at the update revision: to be replaced.
    Old,
    /// At the update revision, which differs from the current one: the new version itself.
    New,
    /// At the update revision, which is also the current one: no rollout for this pod.
    Current,
}

impl fmt::Display for UnavailablePod {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pod = &self.pod;
        let revision = match self.revision {
            PodRevision::Old => " (old revision)",
            PodRevision::New => " (new revision)",
            PodRevision::Current => "",
        };
        match &self.why {
            Unavailable::Terminating => {
                write!(formatter, "waiting for {pod}{revision} to terminate")
            }
            Unavailable::ReadyTooRecently => write!(
                formatter,
                "waiting for {pod}{revision} to be Ready for minReadySeconds"
            ),
            why => write!(
                formatter,
                "waiting for {pod}{revision} to become ready: {why}"
            ),
        }
    }
}

/// Why a group is not progressing; `Display` explains it to a person, [`WaitReason::kind`]
/// names it for metrics and Event reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// A member is not `OnDelete`: zone-by-zone rollouts cannot be guaranteed.
    NonOnDeleteMember {
        statefulset: String,
        strategy: UpdateStrategy,
    },
    /// Several members are not ready: rolling any of them could take out two zones.
    MultipleNotReady { statefulsets: Vec<String> },
    /// Fewer pods exist than spec.replicas asks for (being created, or cannot be: quota).
    MissingPods {
        statefulset: String,
        present: u32,
        expected: u32,
    },
    /// Some pods are not running, not ready or terminating; `waiting_for` names one (a pod
    /// at the update revision first).
    NotReady {
        statefulset: String,
        pods: u32,
        waiting_for: Option<UnavailablePod>,
    },
    /// Every unavailable pod is Ready, just not yet for minReadySeconds.
    MinReadySeconds {
        statefulset: String,
        pods: u32,
        min_ready_seconds: u32,
    },
    /// More pods exist than spec.replicas asks for: a scale-down is under way.
    ExtraPods {
        statefulset: String,
        present: u32,
        expected: u32,
    },
    /// The pods look fine but the StatefulSet's status does not agree (yet).
    StatusNotReady {
        statefulset: String,
        replicas: u32,
        ready_replicas: u32,
        expected: u32,
    },
    /// Pods need an update but as many as allowed are already unavailable; `waiting_for`
    /// names one of them (a pod at the update revision first).
    MaxUnavailable {
        statefulset: String,
        not_ready: u32,
        max_unavailable: u32,
        waiting_for: Option<UnavailablePod>,
    },
    /// The Kubernetes controller has not computed the StatefulSet's revisions yet.
    NoUpdateRevision { statefulset: String },
    /// The StatefulSet's status describes an older spec (`observedGeneration` behind
    /// `generation`): its revisions and counts cannot be judged until the StatefulSet
    /// controller catches up (a template just changed still shows the old revision).
    StatusBehindSpec {
        statefulset: String,
        generation: i64,
        observed_generation: Option<i64>,
    },
    /// Everything else is done; these paused StatefulSets still have pods to update.
    Paused { statefulsets: Vec<String> },
    /// The StatefulSet controller is replacing the pods a lowered partition released.
    PartitionRolling {
        statefulset: String,
        partition: u32,
        pods: u32,
    },
    /// Someone else changed the partition of a StatefulSet baton rolls by partition: baton
    /// leaves it alone until a person settles it.
    PartitionMoved {
        statefulset: String,
        set: u32,
        found: u32,
    },
}

impl WaitReason {
    /// A short, stable identifier (CamelCase, like Kubernetes Event reasons) for metrics
    /// labels and Events. Never change one: dashboards and alerts match on them.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NonOnDeleteMember { .. } => "NonOnDeleteMember",
            Self::MultipleNotReady { .. } => "MultipleNotReady",
            Self::MissingPods { .. } => "MissingPods",
            Self::NotReady { .. } => "NotReady",
            Self::MinReadySeconds { .. } => "MinReadySeconds",
            Self::ExtraPods { .. } => "ExtraPods",
            Self::StatusNotReady { .. } => "StatusNotReady",
            Self::MaxUnavailable { .. } => "MaxUnavailable",
            Self::NoUpdateRevision { .. } => "NoUpdateRevision",
            Self::StatusBehindSpec { .. } => "StatusBehindSpec",
            Self::Paused { .. } => "Paused",
            Self::PartitionRolling { .. } => "PartitionRolling",
            Self::PartitionMoved { .. } => "PartitionMoved",
        }
    }

    /// The StatefulSet the group waits for, when it is one.
    pub fn statefulset(&self) -> Option<&str> {
        match self {
            Self::NonOnDeleteMember { statefulset, .. }
            | Self::MissingPods { statefulset, .. }
            | Self::NotReady { statefulset, .. }
            | Self::MinReadySeconds { statefulset, .. }
            | Self::ExtraPods { statefulset, .. }
            | Self::StatusNotReady { statefulset, .. }
            | Self::MaxUnavailable { statefulset, .. }
            | Self::NoUpdateRevision { statefulset }
            | Self::StatusBehindSpec { statefulset, .. }
            | Self::PartitionRolling { statefulset, .. }
            | Self::PartitionMoved { statefulset, .. } => Some(statefulset),
            Self::MultipleNotReady { .. } | Self::Paused { .. } => None,
        }
    }
}

fn plural(count: u32, singular: &str, plural: &str) -> String {
    if count == 1 {
        format!("{count} {singular}")
    } else {
        format!("{count} {plural}")
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NonOnDeleteMember {
                statefulset,
                strategy,
            } => write!(formatter, "{statefulset} uses {strategy}, group skipped"),
            Self::MultipleNotReady { statefulsets } => write!(
                formatter,
                "{} are not ready: {}",
                plural(
                    u32::try_from(statefulsets.len()).unwrap_or(u32::MAX),
                    "StatefulSet",
                    "StatefulSets"
                ),
                statefulsets.join(", ")
            ),
            Self::MissingPods {
                statefulset,
                present,
                expected,
            } => write!(
                formatter,
                "{statefulset} has {present} of {expected} pods ({} missing)",
                expected.saturating_sub(*present)
            ),
            Self::NotReady {
                statefulset,
                pods,
                waiting_for,
            } => {
                write!(
                    formatter,
                    "zone {statefulset} has {}",
                    plural(*pods, "not-ready pod", "not-ready pods")
                )?;
                waiting_for_suffix(formatter, waiting_for.as_ref())
            }
            Self::MinReadySeconds {
                statefulset,
                pods,
                min_ready_seconds,
            } => write!(
                formatter,
                "zone {statefulset} has {} Ready for less than minReadySeconds ({min_ready_seconds}s)",
                plural(*pods, "pod", "pods")
            ),
            Self::ExtraPods {
                statefulset,
                present,
                expected,
            } => write!(
                formatter,
                "{statefulset} has {present} pods for {expected} replicas (scaling down)"
            ),
            Self::StatusNotReady {
                statefulset,
                replicas,
                ready_replicas,
                expected,
            } => write!(
                formatter,
                "{statefulset} status reports {ready_replicas} ready of {replicas} replicas \
                 ({expected} wanted)"
            ),
            Self::MaxUnavailable {
                statefulset,
                not_ready,
                max_unavailable,
                waiting_for,
            } => {
                write!(
                    formatter,
                    "max-unavailable reached in {statefulset} ({not_ready}/{max_unavailable})"
                )?;
                waiting_for_suffix(formatter, waiting_for.as_ref())
            }
            Self::NoUpdateRevision { statefulset } => {
                write!(formatter, "{statefulset} has no updateRevision yet")
            }
            Self::StatusBehindSpec {
                statefulset,
                generation,
                observed_generation,
            } => match observed_generation {
                Some(observed) => write!(
                    formatter,
                    "the status of {statefulset} describes generation {observed} of its spec, \
                     not yet {generation}: waiting for the StatefulSet controller"
                ),
                None => write!(
                    formatter,
                    "the status of {statefulset} has observed no generation of its spec, not \
                     yet {generation}: waiting for the StatefulSet controller"
                ),
            },
            Self::Paused { statefulsets } => write!(
                formatter,
                "rollout paused with pods left to update in {}",
                statefulsets.join(", ")
            ),
            Self::PartitionRolling {
                statefulset,
                partition,
                pods,
            } => write!(
                formatter,
                "the StatefulSet controller is replacing {} of {statefulset} (partition {partition})",
                plural(*pods, "pod", "pods")
            ),
            Self::PartitionMoved {
                statefulset,
                set,
                found,
            } => write!(
                formatter,
                "the partition of {statefulset} was changed from {set} (set by baton) to {found} by someone else; \
                 baton leaves it alone: set it back to {set}, or remove annotation {PARTITION_ANNOTATION} to let baton go on from {found}"
            ),
        }
    }
}

fn waiting_for_suffix(
    formatter: &mut fmt::Formatter<'_>,
    waiting_for: Option<&UnavailablePod>,
) -> fmt::Result {
    match waiting_for {
        Some(pod) => write!(formatter, "; {pod}"),
        None => Ok(()),
    }
}

/// Something a person should fix; it never stops the rollout (a safe default is used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    InvalidAnnotation {
        statefulset: String,
        problem: InvalidAnnotation,
    },
    /// Someone else changed the partition baton set (see [`WaitReason::PartitionMoved`]).
    PartitionMoved {
        statefulset: String,
        set: u32,
        found: u32,
    },
}

impl Warning {
    /// A short, stable identifier for the Kubernetes Event reason.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => "InvalidAnnotation",
            Self::PartitionMoved { .. } => "PartitionMoved",
        }
    }

    /// The StatefulSet the Event should be attached to.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::InvalidAnnotation { statefulset, .. }
            | Self::PartitionMoved { statefulset, .. } => statefulset,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAnnotation {
                statefulset,
                problem,
            } => write!(formatter, "StatefulSet {statefulset}: {problem}"),
            Self::PartitionMoved {
                statefulset,
                set,
                found,
            } => write!(
                formatter,
                "the partition of StatefulSet {statefulset} was changed from {set} (set by baton) to {found} by someone else"
            ),
        }
    }
}

/// How far one StatefulSet's rollout is, for a gauge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub statefulset: String,
    /// Pods (of spec.replicas) at the update revision and not terminating.
    pub updated: u32,
    /// spec.replicas.
    pub total: u32,
    /// Pods (of spec.replicas) available: running, ready (for minReadySeconds), not terminating.
    pub ready: u32,
    /// Every pod is at the update revision and available, and none is missing or extra.
    pub done: bool,
}

/// The order a member's pods go in, within everything else the planner decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// The lowest ordinal first (the Go operator's order).
    #[default]
    Rollout,
    /// The newest pod first (by creation time, then the highest ordinal): so that a rollback
    /// takes back first the pods the rollout replaced last.
    Reverse,
}

/// Plans the next step of a group's rollout. Pure: the same snapshot and `now` give the same
/// plan. `now` only serves spec.minReadySeconds (see [`Plan::recheck_after`]).
pub fn plan(group: &GroupSnapshot, now: Timestamp) -> Plan {
    plan_in_order(group, now, Order::Rollout)
}

/// [`plan()`], each member's pods going in `order`.
pub fn plan_in_order(group: &GroupSnapshot, now: Timestamp, order: Order) -> Plan {
    let members: Vec<Member<'_>> = group
        .statefulsets
        .iter()
        .map(|statefulset| Member::assess(statefulset, now, order))
        .collect();
    let mut plan = Plan {
        actions: Vec::new(),
        waiting: None,
        warnings: members
            .iter()
            .flat_map(|member| member.warnings.iter().cloned())
            .collect(),
        progress: members.iter().map(Member::progress).collect(),
        recheck_after: members
            .iter()
            .filter_map(|member| member.available_at)
            .min(),
    };
    plan.waiting = walk(&members, &mut plan.actions);
    plan
}

/// Walks the members (docs/compatibility.md steps 1 to 6), pushing actions; returns why it stopped.
fn walk(members: &[Member<'_>], actions: &mut Vec<Action>) -> Option<WaitReason> {
    if let Some(member) = members.iter().find(|member| {
        member.mode == Mode::Delete
            && member.statefulset.update_strategy != UpdateStrategy::OnDelete
    }) {
        return Some(WaitReason::NonOnDeleteMember {
            statefulset: member.statefulset.name.clone(),
            strategy: member.statefulset.update_strategy.clone(),
        });
    }
    // A partition someone else moved: whatever baton did next could fight them.
    if let Some((member, set)) = members.iter().find_map(|member| match member.mode {
        Mode::Partition {
            moved_from: Some(set),
            ..
        } => Some((member, set)),
        _ => None,
    }) {
        return Some(WaitReason::PartitionMoved {
            statefulset: member.statefulset.name.clone(),
            set,
            found: member.statefulset.partition,
        });
    }

    // Every judgement below reads statuses: one that describes an older spec could make a zone
    // whose template just changed look complete and start the next one first.
    if let Some((statefulset, lag)) = members.iter().find_map(|member| {
        let statefulset = member.statefulset;
        statefulset.status_lag.map(|lag| (statefulset, lag))
    }) {
        return Some(WaitReason::StatusBehindSpec {
            statefulset: statefulset.name.clone(),
            generation: lag.generation,
            observed_generation: lag.observed_generation,
        });
    }

    let not_ready: Vec<&Member<'_>> = members
        .iter()
        .filter(|member| member.unreadiness.is_some())
        .collect();
    if not_ready.len() > 1 {
        // Every not-ready member is down on its own, unless a new pod is still unproven
        // somewhere: then wait for it, as before. Otherwise waiting may never end (a broken
        // version crash-looping in several zones), and replacing pods that are down costs
        // nothing (module header).
        if !members.iter().any(|member| member.unproven) {
            let free: Vec<Action> = not_ready
                .iter()
                .filter(|member| !member.paused)
                .flat_map(|member| member.free_replacements(false))
                .collect();
            if !free.is_empty() {
                actions.extend(free);
                return None;
            }
        }
        return Some(WaitReason::MultipleNotReady {
            statefulsets: not_ready
                .iter()
                .map(|member| member.statefulset.name.clone())
                .collect(),
        });
    }
    // The one not-ready member goes first: no other member may roll before it is ready.
    let mut order: Vec<&Member<'_>> = members.iter().collect();
    order.sort_by_key(|member| Reverse(member.unreadiness.is_some()));

    let mut paused_with_updates = Vec::new();
    for member in order {
        let statefulset = member.statefulset;
        if member.paused {
            // Paused means "no deletions here, move on", never "ignore its unavailability".
            if let Some(reason) = &member.unreadiness {
                return Some(reason.clone());
            }
            if !member.to_update.is_empty() {
                paused_with_updates.push(statefulset.name.clone());
            }
            continue;
        }
        let Some(update_revision) = &statefulset.update_revision else {
            return Some(WaitReason::NoUpdateRevision {
                statefulset: statefulset.name.clone(),
            });
        };
        if let Mode::Partition { partition, .. } = member.mode {
            match member.roll_by_partition(partition) {
                Turn::Acted(taken) => {
                    actions.extend(taken);
                    return None;
                }
                Turn::Waits(reason) => return Some(reason),
                Turn::Done(hold) => {
                    actions.extend(hold);
                    continue;
                }
            }
        }
        if !member.to_update.is_empty() {
            // The budget counts every unavailable pod, free replacements included: their
            // replacements are unavailable too until ready.
            let budget = member.max_unavailable.saturating_sub(member.not_ready);
            // Already unavailable: replaced first, at no cost (see the module header).
            let free = member.free_replacements(true);
            // Terminating pods already count as not ready and are on their way out.
            let budgeted = member
                .to_update
                .iter()
                .filter(|outdated| {
                    !outdated.pod.terminating && outdated.free_replacement().is_none()
                })
                .take(usize::try_from(budget).unwrap_or(usize::MAX))
                .map(|outdated| member.delete(outdated, None));
            let deletions: Vec<Action> = free.into_iter().chain(budgeted).collect();
            if !deletions.is_empty() {
                actions.extend(deletions);
                return None;
            }
            if budget == 0 {
                return Some(WaitReason::MaxUnavailable {
                    statefulset: statefulset.name.clone(),
                    not_ready: member.not_ready,
                    max_unavailable: member.max_unavailable,
                    waiting_for: member.waiting_for.clone(),
                });
            }
            // Every pod left to update is terminating, so the member cannot be ready.
        }
        if let Some(reason) = &member.unreadiness {
            return Some(reason.clone());
        }
        if member.to_update.is_empty()
            && statefulset.current_revision.as_ref() != Some(update_revision)
        {
            actions.push(Action::SetCurrentRevision {
                statefulset: statefulset.name.clone(),
                revision: update_revision.clone(),
            });
        }
    }
    if paused_with_updates.is_empty() {
        None
    } else {
        Some(WaitReason::Paused {
            statefulsets: paused_with_updates,
        })
    }
}

/// One StatefulSet, assessed once per plan.
struct Member<'a> {
    statefulset: &'a StatefulSetSnapshot,
    mode: Mode,
    max_unavailable: u32,
    paused: bool,
    warnings: Vec<Warning>,
    /// Pods not at the update revision, in the planner's [`Order`] (empty without update
    /// revision).
    to_update: Vec<Outdated<'a>>,
    /// The unavailable pod to name when the member holds the group.
    waiting_for: Option<UnavailablePod>,
    /// A pod at the update revision is unavailable: a new pod not (yet) proven ready.
    unproven: bool,
    /// How many pods count against max-unavailable: the worst of what the pods and the
    /// status say, missing pods included.
    not_ready: u32,
    /// Why the StatefulSet is not ready (None when it is).
    unreadiness: Option<WaitReason>,
    /// Pods in range at the update revision and not terminating.
    updated: u32,
    /// Pods in range that are available.
    available: u32,
    /// When the first Ready-but-too-young pod becomes available.
    available_at: Option<Timestamp>,
}

/// How a member's pods are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// baton deletes them (`OnDelete`).
    Delete,
    /// baton lowers the partition and the StatefulSet controller replaces them.
    Partition {
        /// spec's partition, at most spec.replicas.
        partition: u32,
        /// The partition baton set, when the spec has another (someone else moved it).
        moved_from: Option<u32>,
    },
}

/// What a member rolled by partition does on its turn.
enum Turn {
    /// These actions take pods down: the walk stops here.
    Acted(Vec<Action>),
    Waits(WaitReason),
    /// Nothing to roll here (these actions only hold the partition): on to the next member.
    Done(Vec<Action>),
}

/// Which unavailable pod a wait names: not terminating first, then at the update revision
/// (the new version failing is what a person must look at), then the lowest ordinal.
type NamingOrder = (bool, bool, Option<u32>);

/// A pod not at the update revision.
struct Outdated<'a> {
    ordinal: Option<u32>,
    /// Its ordinal minus spec.ordinals.start.
    index: Option<u32>,
    pod: &'a PodSnapshot,
    /// Its ordinal is one of spec.replicas': the StatefulSet controller recreates it.
    wanted: bool,
    /// Why it is unavailable (None: available).
    unavailable: Option<Unavailable>,
}

impl Outdated<'_> {
    /// Why replacing this pod costs nothing, if it does: it is already unavailable, not
    /// terminating (that one is on its way out), and will be recreated. A pod Ready for less
    /// than minReadySeconds is not down: it serves (it is in its Service's endpoints) and is
    /// only not counted on yet, so deleting it would take a serving pod out; it is waited for
    /// (and counted as unavailable meanwhile), never replaced for free. Otherwise every pod of
    /// a group whose template changed within minReadySeconds of its pods becoming Ready would
    /// go at once, in every zone.
    fn free_replacement(&self) -> Option<Unavailable> {
        self.unavailable.clone().filter(|why| {
            self.wanted
                && !matches!(
                    why,
                    Unavailable::Terminating | Unavailable::ReadyTooRecently
                )
        })
    }
}

/// Whether a pod can be counted on. The one rule for "unavailable": counting unavailable
/// pods, free replacements and messages all use it.
enum Availability {
    Available,
    /// Ready, but not yet for minReadySeconds: available from then on.
    From(Timestamp),
    Unavailable(Unavailable),
}

impl Availability {
    fn unavailable(&self) -> Option<Unavailable> {
        match self {
            Self::Available => None,
            Self::From(_) => Some(Unavailable::ReadyTooRecently),
            Self::Unavailable(why) => Some(why.clone()),
        }
    }
}

/// Why `pod` is not available at `now`, if it is not: the planner's rule ([`availability`]),
/// for callers that describe a rollout rather than plan one.
pub fn unavailable(
    pod: &PodSnapshot,
    min_ready_seconds: u32,
    now: Timestamp,
) -> Option<Unavailable> {
    availability(pod, min_ready_seconds, now).unavailable()
}

/// The shared rule ([`crate::pods::PodReadiness::availability`], by which
/// prepare-downscale judges the other zones too), with the container's reason when it has one.
fn availability(pod: &PodSnapshot, min_ready_seconds: u32, now: Timestamp) -> Availability {
    use crate::pods::{Availability as Rule, NotAvailable};
    let container = || pod.container_state.clone().map(Unavailable::Container);
    match pod.readiness().availability(min_ready_seconds, now) {
        Rule::Available => Availability::Available,
        Rule::From(from) => Availability::From(from),
        Rule::Unavailable(NotAvailable::Terminating) => {
            Availability::Unavailable(Unavailable::Terminating)
        }
        Rule::Unavailable(NotAvailable::Phase(phase)) => {
            Availability::Unavailable(container().unwrap_or(Unavailable::Phase(phase)))
        }
        Rule::Unavailable(NotAvailable::NotReady) => {
            Availability::Unavailable(container().unwrap_or(Unavailable::NotReady))
        }
    }
}

impl<'a> Member<'a> {
    fn assess(statefulset: &'a StatefulSetSnapshot, now: Timestamp, order: Order) -> Self {
        let expected = statefulset.spec_replicas;
        let max_unavailable = max_unavailable(&statefulset.annotations, expected);
        let paused = paused(&statefulset.annotations);
        let mut invalid = Vec::new();
        let mut warn = |problem| invalid.push(problem);
        if let Some(problem) = max_unavailable.warning {
            warn(problem);
        }
        if let Some(problem) = paused.warning {
            warn(problem);
        }
        let update_by = update_by(&statefulset.annotations);
        if let Some(problem) = update_by.warning {
            warn(problem);
        }
        let set = partition_set(&statefulset.annotations);
        if let Some(problem) = set.warning {
            warn(problem);
        }
        let mode = match (update_by.value, &statefulset.update_strategy) {
            (UpdateBy::Partition, UpdateStrategy::RollingUpdate) => Mode::Partition {
                partition: statefulset.partition.min(expected),
                moved_from: set.value.filter(|set| *set != statefulset.partition),
            },
            (UpdateBy::Partition, strategy) => {
                warn(InvalidAnnotation {
                    key: UPDATE_BY_ANNOTATION,
                    value: "partition".to_owned(),
                    accepted: "\"partition\" on a RollingUpdate StatefulSet only",
                    fallback: format!("delete (the StatefulSet is {strategy})"),
                });
                Mode::Delete
            }
            (UpdateBy::Delete, _) => Mode::Delete,
        };
        let mut warnings: Vec<Warning> = invalid
            .into_iter()
            .map(|problem| Warning::InvalidAnnotation {
                statefulset: statefulset.name.clone(),
                problem,
            })
            .collect();
        if let Mode::Partition {
            moved_from: Some(set),
            ..
        } = mode
        {
            warnings.push(Warning::PartitionMoved {
                statefulset: statefulset.name.clone(),
                set,
                found: statefulset.partition,
            });
        }

        let update_revision = statefulset.update_revision.as_deref();
        let mut to_update = Vec::new();
        let (mut in_range, mut extra, mut unavailable, mut too_young) = (0u32, 0u32, 0u32, 0u32);
        let (mut updated, mut available) = (0u32, 0u32);
        let mut available_at: Option<Timestamp> = None;
        let mut unproven = false;
        // Keyed by (terminating, not at the update revision, ordinal): the first is named.
        let mut waiting_for: Option<(NamingOrder, UnavailablePod)> = None;
        for pod in &statefulset.pods {
            let ordinal = pod_ordinal(&statefulset.name, &pod.name);
            let wanted = ordinal
                .and_then(|ordinal| ordinal.checked_sub(statefulset.ordinals_start))
                .is_some_and(|index| index < expected);
            let availability = availability(pod, statefulset.min_ready_seconds, now);
            if let Availability::From(from) = availability {
                too_young += 1;
                available_at = Some(available_at.map_or(from, |earliest| earliest.min(from)));
            }
            let why = availability.unavailable();
            let is_available = why.is_none();
            let at_update_revision =
                update_revision.is_some() && pod.revision.as_deref() == update_revision;
            unproven |= at_update_revision && !is_available;
            if let Some(why) = &why {
                unavailable += 1;
                // Unknown ordinals sort last (None < Some would put them first).
                let key = (
                    pod.terminating,
                    !at_update_revision,
                    ordinal.or(Some(u32::MAX)),
                );
                if waiting_for.as_ref().is_none_or(|(first, _)| key < *first) {
                    let named = UnavailablePod {
                        pod: pod.name.clone(),
                        revision: if !at_update_revision {
                            PodRevision::Old
                        } else if statefulset.current_revision.as_deref() == update_revision {
                            PodRevision::Current
                        } else {
                            PodRevision::New
                        },
                        why: why.clone(),
                    };
                    waiting_for = Some((key, named));
                }
            }
            if update_revision.is_some() && !at_update_revision {
                to_update.push(Outdated {
                    ordinal,
                    index: ordinal
                        .and_then(|ordinal| ordinal.checked_sub(statefulset.ordinals_start)),
                    pod,
                    wanted,
                    unavailable: why,
                });
            }
            if wanted {
                in_range += 1;
                available += u32::from(is_available);
                updated += u32::from(at_update_revision && !pod.terminating);
            } else {
                extra += 1;
            }
        }
        to_update.sort_by(|a, b| match (a.ordinal, b.ordinal) {
            // The newest first, then the highest ordinal (the reverse of a rollout's order).
            (Some(ordinal_a), Some(ordinal_b)) if order == Order::Reverse => b
                .pod
                .created_at
                .cmp(&a.pod.created_at)
                .then(ordinal_b.cmp(&ordinal_a)),
            (Some(ordinal_a), Some(ordinal_b)) => ordinal_a.cmp(&ordinal_b),
            // Names that are not `<statefulset>-<ordinal>` (never seen in practice) go last.
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => natural_cmp(&a.pod.name, &b.pod.name),
        });
        let waiting_for = waiting_for.map(|(_, pod)| pod);

        let in_flight = match mode {
            Mode::Partition { partition, .. } => {
                let pods = to_update
                    .iter()
                    .filter(|outdated| outdated.index.is_some_and(|index| index >= partition))
                    .count();
                (pods > 0).then(|| (partition, u32::try_from(pods).unwrap_or(u32::MAX)))
            }
            Mode::Delete => None,
        };
        let missing = expected.saturating_sub(in_range);
        let ready_replicas = statefulset.ready_replicas;
        let not_ready = (unavailable.saturating_add(missing))
            .max(statefulset.status_replicas.saturating_sub(ready_replicas))
            .max(expected.saturating_sub(ready_replicas));
        let name = || statefulset.name.clone();
        let unreadiness = if missing > 0 {
            Some(WaitReason::MissingPods {
                statefulset: name(),
                present: in_range,
                expected,
            })
        } else if unavailable > 0 && unavailable == too_young {
            Some(WaitReason::MinReadySeconds {
                statefulset: name(),
                pods: too_young,
                min_ready_seconds: statefulset.min_ready_seconds,
            })
        } else if unavailable > 0 {
            Some(WaitReason::NotReady {
                statefulset: name(),
                pods: unavailable,
                waiting_for: waiting_for.clone(),
            })
        } else if extra > 0 {
            Some(WaitReason::ExtraPods {
                statefulset: name(),
                present: in_range + extra,
                expected,
            })
        } else if let Some((partition, pods)) = in_flight {
            // Released pods the StatefulSet controller is still to take down: the member is
            // rolling, as one with a pod down is, so no other member may start meanwhile.
            Some(WaitReason::PartitionRolling {
                statefulset: name(),
                partition,
                pods,
            })
        } else if statefulset.status_replicas != ready_replicas || ready_replicas != expected {
            Some(WaitReason::StatusNotReady {
                statefulset: name(),
                replicas: statefulset.status_replicas,
                ready_replicas,
                expected,
            })
        } else {
            None
        };

        Self {
            statefulset,
            mode,
            max_unavailable: max_unavailable.value,
            paused: paused.value,
            warnings,
            to_update,
            waiting_for,
            unproven,
            not_ready,
            unreadiness,
            updated,
            available,
            available_at,
        }
    }

    fn delete(&self, outdated: &Outdated<'_>, unavailable: Option<Unavailable>) -> Action {
        Action::DeletePod {
            statefulset: self.statefulset.name.clone(),
            pod: outdated.pod.name.clone(),
            uid: outdated.pod.uid.clone(),
            unavailable,
        }
    }

    /// Deletions of the outdated pods that are already unavailable, lowest ordinal first.
    /// `lone`: this is the one member not ready (a partition may then release available pods
    /// too, see [`Self::partition_free_replacements`]).
    fn free_replacements(&self, lone: bool) -> Vec<Action> {
        if let Mode::Partition { partition, .. } = self.mode {
            return self.partition_free_replacements(partition, lone);
        }
        self.to_update
            .iter()
            .filter_map(|outdated| {
                let why = outdated.free_replacement()?;
                Some(self.delete(outdated, Some(why)))
            })
            .collect()
    }

    /// Free replacements by partition. The StatefulSet controller does not replace an
    /// unavailable pod by itself (it waits for it), and a deleted pod below the partition comes
    /// back at the old revision: so the partition is lowered to the lowest such pod and the
    /// unavailable pods are deleted. Lowering it also releases the outdated pods between,
    /// which the controller replaces afterwards: allowed only when they are all unavailable
    /// too, or when this member is the only one not ready and its controller is
    /// `OrderedReady` (it then takes one pod at a time, each once every pod is ready again).
    fn partition_free_replacements(&self, partition: u32, lone: bool) -> Vec<Action> {
        let free: Vec<(&Outdated<'_>, u32, Unavailable)> = self
            .to_update
            .iter()
            .filter_map(|outdated| Some((outdated, outdated.index?, outdated.free_replacement()?)))
            .collect();
        let Some(lowest) = free.iter().map(|(_, index, _)| *index).min() else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        if lowest < partition {
            let releases = self.releases(lowest..partition);
            let all_free = releases
                .iter()
                .all(|release| free.iter().any(|(_, index, _)| *index == release.index));
            let one_at_a_time = lone && self.statefulset.ordered_ready;
            if !(all_free || one_at_a_time) {
                return Vec::new();
            }
            actions.push(Action::SetPartition {
                statefulset: self.statefulset.name.clone(),
                partition: lowest,
                releases,
            });
        }
        actions.extend(
            free.into_iter()
                .map(|(outdated, _, why)| self.delete(outdated, Some(why))),
        );
        actions
    }

    /// The outdated pods (not terminating) whose index is in `indexes`, highest first.
    fn releases(&self, indexes: std::ops::Range<u32>) -> Vec<Released> {
        let mut releases: Vec<Released> = self
            .to_update
            .iter()
            .filter(|outdated| !outdated.pod.terminating)
            .filter_map(|outdated| {
                let index = outdated.index.filter(|index| indexes.contains(index))?;
                Some(Released {
                    pod: outdated.pod.name.clone(),
                    index,
                })
            })
            .collect();
        releases.sort_by_key(|release| Reverse(release.index));
        releases
    }

    /// This member's turn, rolled by partition: free replacements first; while the
    /// StatefulSet controller replaces released pods, wait for it; else lower the partition
    /// past as many outdated pods as max-unavailable allows (highest index first, the
    /// controller's order). Once nothing is left to roll, the partition goes back to
    /// spec.replicas, so the next template change waits for baton.
    fn roll_by_partition(&self, partition: u32) -> Turn {
        let statefulset = self.statefulset;
        let expected = statefulset.spec_replicas;
        if !self.to_update.is_empty() {
            let free = self.free_replacements(true);
            if !free.is_empty() {
                return Turn::Acted(free);
            }
            let in_flight = self
                .to_update
                .iter()
                .filter(|outdated| outdated.index.is_some_and(|index| index >= partition))
                .count();
            if in_flight > 0 {
                // Not ready, or (otherwise ready) `PartitionRolling`: see `assess`.
                return Turn::Waits(self.unreadiness.clone().unwrap_or(
                    WaitReason::PartitionRolling {
                        statefulset: statefulset.name.clone(),
                        partition,
                        pods: u32::try_from(in_flight).unwrap_or(u32::MAX),
                    },
                ));
            }
            let budget = self.max_unavailable.saturating_sub(self.not_ready);
            if budget == 0 {
                return Turn::Waits(WaitReason::MaxUnavailable {
                    statefulset: statefulset.name.clone(),
                    not_ready: self.not_ready,
                    max_unavailable: self.max_unavailable,
                    waiting_for: self.waiting_for.clone(),
                });
            }
            let mut releases = self.releases(0..partition);
            releases.truncate(usize::try_from(budget).unwrap_or(usize::MAX));
            if let Some(last) = releases.last() {
                return Turn::Acted(vec![Action::SetPartition {
                    statefulset: statefulset.name.clone(),
                    partition: last.index,
                    releases,
                }]);
            }
            // Every pod left to update is terminating: the member cannot be ready yet.
        }
        if let Some(reason) = &self.unreadiness {
            return Turn::Waits(reason.clone());
        }
        let hold = (self.to_update.is_empty() && statefulset.partition < expected).then(|| {
            Action::SetPartition {
                statefulset: statefulset.name.clone(),
                partition: expected,
                releases: Vec::new(),
            }
        });
        Turn::Done(hold.into_iter().collect())
    }

    fn progress(&self) -> Progress {
        Progress {
            statefulset: self.statefulset.name.clone(),
            updated: self.updated,
            total: self.statefulset.spec_replicas,
            ready: self.available,
            done: self.statefulset.update_revision.is_some()
                && self.to_update.is_empty()
                && self.unreadiness.is_none(),
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
