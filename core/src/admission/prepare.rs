//! prepare-downscale's decisions: before a labelled StatefulSet loses pods, every pod going
//! away is told to prepare, and in a rollout group only one zone may be downscaled per
//! min-time ([`crate::min_time`], the rule the scaling plan holds followers to) and only while
//! the other zones are ready. Pure functions of what was read; their order, with the reads,
//! the claim and the pod calls between them, is [`flow`], which the webhook drives.

use std::collections::BTreeMap;

use crate::pod_address::PodAddressing;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::annotations::scaling::{MinTimeWrittenAs, min_time_between_zones_downscale};
use crate::annotations::{NO_DOWNSCALE_LABEL, PREPARE_DOWNSCALE_LABEL, ROLLOUT_GROUP_LABEL};
use crate::downscale_history::{Records, last_downscale};
use crate::duration::go as go_duration;
use crate::min_time::{self, Downscaled, Whose};
use crate::pod_address::{PodEndpoint, PrepareEndpoint};
use crate::pods::{CachedPod, is_controlled_by};
use crate::statefulset::{StatefulSetState, pod_ordinal};

use super::downscale::{Downscale, NO_DOWNSCALE_VALUE, WorkloadKind, no_downscale};
use super::verdict::{Reason, Verdict};

/// The label value that opts a StatefulSet in.
pub const PREPARE_DOWNSCALE_VALUE: &str = "true";

/// Whether a downscale of an object of `kind` is prepare-downscale's: a StatefulSet or a
/// StatefulSet's `/scale`. Any other is allowed with a warning (not an error: prepare-downscale
/// is for StatefulSets only).
pub fn judged_kind(downscale: &Downscale, kind: WorkloadKind) -> Result<(), Verdict> {
    match kind {
        WorkloadKind::StatefulSet => Ok(()),
        WorkloadKind::Scale if downscale.resource == "statefulsets" => Ok(()),
        WorkloadKind::Scale => Err(super::downscale::unsupported_resource(downscale)),
        WorkloadKind::Deployment | WorkloadKind::ReplicaSet => Err(Verdict::allow_with_warning(
            format!("unsupported type {kind:?}, allowing the change"),
        )),
    }
}

/// What the pods going away need to be told, from the StatefulSet's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub prepare: PrepareEndpoint,
    /// The rollout group, when the StatefulSet is in one.
    pub group: Option<String>,
    /// `spec.ordinals.start`: the pods going away are named from it.
    pub ordinals_start: i32,
}

/// A StatefulSet not labelled for preparation is allowed; a labelled one needs the port and
/// path annotations and `spec.serviceName`.
pub fn check_statefulset(
    downscale: &Downscale,
    statefulset: &StatefulSet,
) -> Result<Target, Verdict> {
    let labels = statefulset.metadata.labels.as_ref();
    let label = |key: &str| {
        labels
            .and_then(|labels| labels.get(key))
            .map(String::as_str)
    };
    if label(PREPARE_DOWNSCALE_LABEL) != Some(PREPARE_DOWNSCALE_VALUE) {
        return Err(Verdict::allow());
    }
    // The validating no-downscale webhook runs after this mutating one: judged here first, a
    // downscale it would refuse prepares no pod and claims nothing.
    if label(NO_DOWNSCALE_LABEL) == Some(NO_DOWNSCALE_VALUE) {
        return Err(no_downscale(downscale, Some(NO_DOWNSCALE_VALUE)));
    }
    let prepare = PrepareEndpoint::of(statefulset).map_err(|why| {
        Verdict::refuse(
            Reason::PrepareSettings,
            format!("{downscale} is not allowed because {why}."),
        )
    })?;
    if prepare.service_name.is_empty() {
        return Err(Verdict::refuse(
            Reason::PrepareSettings,
            format!("{downscale} is not allowed because the serviceName is not set or empty."),
        ));
    }
    Ok(Target {
        prepare,
        group: label(ROLLOUT_GROUP_LABEL)
            .filter(|group| !group.is_empty())
            .map(str::to_owned),
        ordinals_start: StatefulSetState::of(statefulset).ordinals_start,
    })
}

/// Refuses when another StatefulSet of the group was downscaled less than its own min-time
/// ago ([`Whose::EachDownscaledZone`]). Its last downscale is the newest of what baton's
/// ledger, the Go operator's zone tracker and the `last-downscale` annotation say
/// ([`last_downscale`]); a ledger claim whose update never landed no longer counts. When
/// several block, the one with the longest wait left is named, so the time left is when the
/// downscale can succeed.
pub fn judge_min_time(
    downscale: &Downscale,
    members: &[StatefulSet],
    records: Records<'_>,
    now: Timestamp,
) -> Result<(), Verdict> {
    let empty = BTreeMap::new();
    let unreadable = |why: String| {
        Verdict::refuse(
            Reason::DownscaleHistoryUnreadable,
            format!(
                "{downscale} is not allowed because parsing downscale annotations failed: {why}"
            ),
        )
    };
    let others = members
        .iter()
        .filter_map(|member| {
            let name = member.metadata.name.as_deref().unwrap_or("");
            (name != downscale.name).then_some((name, member))
        })
        .map(|(name, member)| {
            let Some(last) = last_downscale(member, records, now).map_err(unreadable)? else {
                return Ok(None);
            };
            let labels = member.metadata.labels.as_ref().unwrap_or(&empty);
            let annotations = member.metadata.annotations.as_ref().unwrap_or(&empty);
            let min_time =
                min_time_between_zones_downscale(labels, annotations).map_err(|invalid| {
                    unreadable(format!(
                        "can't parse {} of {name}: {:?} is not {}",
                        invalid.key, invalid.value, invalid.accepted
                    ))
                })?;
            let written_as =
                MinTimeWrittenAs::of(labels, annotations).unwrap_or(MinTimeWrittenAs::Label);
            Ok(Some(Downscaled {
                at: last.at,
                zone: (name, last, written_as),
                its_min_time: min_time.value,
            }))
        });
    let Some(blocker) = min_time::blocker(others, Whose::EachDownscaledZone, now)? else {
        return Ok(());
    };
    let (name, last, written_as) = &blocker.zone;
    let left = blocker.left(now);
    // Whole seconds, rounded up: "0s left" would read as "allowed now".
    let left_seconds = left.as_secs() + i64::from(left.subsec_nanos() > 0);
    Err(Verdict::refuse(
        Reason::MinTime,
        format!(
            "{downscale} is not allowed because {} and is {} to wait {} between zone downscales ({} left)",
            last.describe(name),
            written_as.participle(),
            go_duration::format(blocker.min_time_nanos()),
            go_duration::format(left_seconds.saturating_mul(1_000_000_000)),
        ),
    ))
}

/// How ready another StatefulSet of the group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberReadiness {
    pub name: String,
    pub replicas: i32,
    pub updated_replicas: i32,
    pub ready_pods: i32,
}

impl MemberReadiness {
    /// Counts the pods of `statefulset` among `pods` that are available at `now` by the rule
    /// the rollout planner counts with ([`crate::pods::PodReadiness::availability`]: Running,
    /// Ready with every container, not terminating, Ready for `minReadySeconds`).
    ///
    /// **baton:** the Go operator counted Running pods with the Ready condition, ignoring
    /// container readiness and minReadySeconds, so it could let a zone be downscaled while
    /// another zone's pods were not yet available.
    pub fn of(statefulset: &StatefulSet, pods: &[CachedPod], now: Timestamp) -> Self {
        let state = StatefulSetState::of(statefulset);
        let min_ready_seconds = state.min_ready_seconds.unsigned_abs();
        let ready_pods = pods
            .iter()
            .filter(|pod| is_controlled_by(pod, statefulset))
            .filter(|pod| pod.readiness.is_available(min_ready_seconds, now))
            .count();
        Self {
            name: state.name,
            replicas: state.status_replicas,
            updated_replicas: state.updated_replicas,
            ready_pods: i32::try_from(ready_pods).unwrap_or(i32::MAX),
        }
    }
}

/// Refuses while another StatefulSet of the group has pods not ready or not updated:
/// downscaling a second zone during a rollout or an outage of the first loses data.
pub fn judge_readiness(downscale: &Downscale, members: &[MemberReadiness]) -> Result<(), Verdict> {
    for member in members
        .iter()
        .filter(|member| member.name != downscale.name)
    {
        if member.replicas != member.ready_pods || member.updated_replicas != member.ready_pods {
            return Err(Verdict::refuse(
                Reason::OtherZoneNotReady,
                format!(
                    "{downscale} is not allowed because statefulset {} has {} non-updated replicas and {} non-ready replicas",
                    member.name,
                    member.replicas - member.updated_replicas,
                    member.replicas - member.ready_pods
                ),
            ));
        }
    }
    Ok(())
}

/// The prepare endpoint of each pod going away, highest ordinal first: the pods of `existing`
/// (the StatefulSet's pods, name → IP if assigned) whose index is in `to..from`. Chosen among
/// the pods that exist, not named from the replica counts: those are anyone's to write (a
/// downscale from 2147483647 would be two billion names), and a pod that does not exist has
/// nothing to prepare.
pub fn endpoints(
    downscale: &Downscale,
    target: &Target,
    addressing: PodAddressing,
    cluster_domain: &str,
    existing: &BTreeMap<String, Option<String>>,
) -> Result<Vec<PodEndpoint>, Verdict> {
    let start = i64::from(target.ordinals_start.max(0));
    let mut going: Vec<(i64, &String, Option<&str>)> = existing
        .iter()
        .filter_map(|(pod, ip)| {
            let index = i64::from(pod_ordinal(&downscale.name, pod)?) - start;
            (i64::from(downscale.to.max(0))..i64::from(downscale.from))
                .contains(&index)
                .then_some((index, pod, ip.as_deref()))
        })
        .collect();
    going.sort_by_key(|(index, ..)| std::cmp::Reverse(*index));
    going
        .into_iter()
        .map(|(_, pod, pod_ip)| {
            target
                .prepare
                .of_pod(
                    addressing,
                    cluster_domain,
                    pod,
                    &downscale.namespace,
                    pod_ip,
                )
                .map_err(|error| {
                    Verdict::refuse(
                        Reason::PodAddress,
                        format!("{downscale} is not allowed because {error}"),
                    )
                })
        })
        .collect()
}

/// Refusal after a pod failed to prepare (the others were told to undo).
pub fn pods_failed(downscale: &Downscale, error: &dyn std::fmt::Display) -> Verdict {
    Verdict::refuse(
        Reason::PodsFailedToPrepare,
        format!(
            "{downscale} is not allowed because one or more pods failed to prepare for shutdown: {error}"
        ),
    )
}

/// Refusal of a review for a namespace this replica does not serve: only the API server
/// sends reviews, for the namespaces its webhook configuration selects; anything else is a
/// misconfiguration or a forgery, and preparing would call pods baton does not look after. It
/// does not name the namespace served: a sender would learn which one to forge reviews for.
pub fn foreign_namespace(downscale: &Downscale) -> Verdict {
    Verdict::refuse(
        Reason::ForeignNamespace,
        format!(
            "{downscale} is not allowed because baton does not serve namespace {}",
            downscale.namespace
        ),
    )
}

/// Refusal of a review that is not of the StatefulSet as stored (another uid, version or
/// replica count): stale (the update would fail anyway, or is retried with a fresh review) or
/// forged. It tells nothing of the stored object: a forger would learn what to send next.
pub fn not_as_stored(downscale: &Downscale) -> Verdict {
    Verdict::refuse(
        Reason::NotAsStored,
        format!(
            "{downscale} is not allowed because the request does not describe the StatefulSet as it is stored (it changed since, or the API server did not send this request); retry"
        ),
    )
}

/// Refusal because `what` (reading or writing something the decision needs) failed: without
/// it nothing can be prepared safely.
pub fn failed(downscale: &Downscale, what: &str, error: &dyn std::fmt::Display) -> Verdict {
    Verdict::refuse(
        Reason::ReadFailed,
        format!("{downscale} is not allowed because {what} failed: {error}"),
    )
}

/// Refusal because the group's ledger `ledger` changed at every try to claim the downscale.
pub fn ledger_contended(downscale: &Downscale, ledger: &str) -> Verdict {
    Verdict::refuse(
        Reason::LedgerContended,
        format!(
            "{downscale} is not allowed because the group's downscale ledger {ledger} kept changing; retry"
        ),
    )
}

/// The approval.
pub fn allowed(downscale: &Downscale) -> Verdict {
    Verdict::allow_with_message(format!(
        "{downscale} is allowed -- all pods successfully prepared for shutdown."
    ))
}

pub mod flow;

#[cfg(test)]
mod tests;
