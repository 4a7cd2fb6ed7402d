//! What a rollout plan is and how it reads to people: the planner's answer ([`Plan`], its
//! [`Action`]s and [`Progress`]), why a group waits ([`WaitReason`]), what a person should fix
//! ([`Warning`]), why a pod is not available ([`Unavailable`]), and their wording. Apart from
//! the walk ([`super::plan()`]) because far more reads a plan than makes one: the gates, the
//! status, the controller's Events and metrics and `kubectl baton` depend on these types and
//! their words, never on the walk's rules.

use std::fmt;

use crate::explained::Explained;

use crate::annotations::{InvalidAnnotation, PARTITION_ANNOTATION};
use jiff::Timestamp;

use super::snapshot::{PodPhase, UpdateStrategy};

/// What the controller should do for a group now, and what to tell people about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// The StatefulSet the action is on.
    pub fn statefulset(&self) -> &str {
        match self {
            Self::DeletePod { statefulset, .. }
            | Self::SetPartition { statefulset, .. }
            | Self::SetCurrentRevision { statefulset, .. } => statefulset,
        }
    }

    /// The pod the action deletes, if it deletes one.
    pub fn pod(&self) -> Option<&str> {
        match self {
            Self::DeletePod { pod, .. } => Some(pod),
            Self::SetPartition { .. } | Self::SetCurrentRevision { .. } => None,
        }
    }

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

/// What a pass tells once it has taken an action: the Event's reason and action, and the
/// sentence a person reads (on the StatefulSet, and in the status page's history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl Told {
    /// Its Event: what baton did is Normal.
    pub fn explanation(&self) -> crate::explained::Explanation {
        crate::explained::Explanation {
            severity: crate::explained::Severity::Normal,
            reason: self.reason.to_owned(),
            action: self.action.to_owned(),
            note: self.note.clone(),
        }
    }
}

impl Action {
    /// What to tell once this action is done, with the plan's `progress` (how far its
    /// StatefulSet is); `None` for what nobody needs told (recording a finished rollout's
    /// revision, which the zone's completion tells).
    pub fn told(&self, progress: &[Progress]) -> Option<Told> {
        match self {
            Self::DeletePod {
                statefulset,
                pod,
                unavailable,
                ..
            } => {
                let progress = progress.iter().find(|p| &p.statefulset == statefulset);
                let note = match (unavailable, progress) {
                    (Some(why), _) => replacement_note(pod, why),
                    (None, Some(progress)) => format!(
                        "deleted pod {pod} to roll it to the update revision ({} of {} pods updated)",
                        progress.updated, progress.total
                    ),
                    (None, None) => format!("deleted pod {pod} to roll it to the update revision"),
                };
                let reason = match unavailable {
                    Some(_) => "UnavailablePodReplaced",
                    None => "RolloutPodDeleted",
                };
                Some(Told {
                    reason,
                    action: "DeletePod",
                    note,
                })
            }
            Self::SetPartition { releases, .. } => Some(Told {
                reason: if releases.is_empty() {
                    "PartitionHeld"
                } else {
                    "PartitionLowered"
                },
                action: "SetPartition",
                note: self.to_string(),
            }),
            Self::SetCurrentRevision { .. } => None,
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

/// Why a group is not progressing; `Display` explains it to a person, [`Explained::kind`]
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
    /// A member's cluster cannot be read: it is not known to be ready, so nothing rolls.
    MemberUnreachable {
        statefulset: String,
        cluster: String,
        error: String,
    },
}

impl Explained for WaitReason {
    fn kind(&self) -> &'static str {
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
            Self::MemberUnreachable { .. } => "MemberUnreachable",
        }
    }

    /// The StatefulSet the group waits for, when it is one.
    fn statefulset(&self) -> Option<&str> {
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
            | Self::PartitionMoved { statefulset, .. }
            | Self::MemberUnreachable { statefulset, .. } => Some(statefulset),
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
            Self::MemberUnreachable {
                statefulset,
                cluster,
                error,
            } => write!(
                formatter,
                "{statefulset} cannot be read: cluster {cluster} is unreachable ({error}); a member not \
                 known to be ready holds the group until its cluster is read again"
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

impl Explained for Warning {
    fn kind(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => "InvalidAnnotation",
            Self::PartitionMoved { .. } => "PartitionMoved",
        }
    }

    fn statefulset(&self) -> Option<&str> {
        Some(Warning::statefulset(self))
    }
}

impl Warning {
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
