//! The eviction decision: a pure function of a snapshot (the pod, the namespace's budgets,
//! StatefulSets and pods, `now`, the evictions recently allowed) to allowed/denied with a reason
//! a person can act on. The webhook answers `/admission/pod-eviction` with it; nothing here
//! calls the API.
//!
//! The rules (the Go operator's, see docs/compatibility.md):
//! - a pod that is not Running, or already terminating, may go: it serves nothing;
//! - no budget selects the pod → allowed; more than one → denied, naming them;
//! - the pod's owner must be one of the StatefulSets the budget selects, and there must be at
//!   least two of them (the zones);
//! - zone mode: denied while another zone has an unavailable or missing pod, or while this
//!   zone already has max-unavailable unavailable pods (the pod itself not counted);
//! - partition mode: only the pods of the evicted pod's partition count, across every zone; a
//!   zone without a pod of that partition counts as one missing.
//!
//! A pod is unavailable when it is not available by the rule the rollout planner counts with
//! ([`crate::pods::PodReadiness::availability`], the StatefulSet's minReadySeconds), when it has been Ready
//! for less than the budget's crossZoneEvictionDelay, or when its eviction was allowed recently
//! (the [`RecentlyAllowed`] record: allowed, but the cache does not show it terminating yet).

use std::collections::BTreeMap;
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;

use super::spec::{Budget, Observed};
use crate::pods::{
    Availability, CachedPod, NotAvailable, PodPhase, PodsByStatefulSet, is_controlled_by,
};
use crate::statefulset::StatefulSetState;

/// Evictions allowed but not yet visible as terminating: pod name → when it was allowed (and
/// the pod's uid). An entry counts until `expiry` has passed — the API server may still refuse
/// an eviction the webhook allowed, e.g. for a PodDisruptionBudget — or until the pod of that
/// name is another one (recreated, new uid). A terminating or gone pod counts as unavailable
/// anyway, so entries need not be removed when the cache shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentlyAllowed {
    pub pods: BTreeMap<String, AllowedEviction>,
}

/// One allowed eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedEviction {
    pub at: Timestamp,
    /// The evicted pod's uid, when known.
    pub uid: Option<String>,
}

impl RecentlyAllowed {
    /// When `pod`'s eviction was allowed, if that is less than `expiry` before `now` and was
    /// about this very pod.
    pub fn allowed_at(
        &self,
        pod: &CachedPod,
        now: Timestamp,
        expiry: SignedDuration,
    ) -> Option<Timestamp> {
        let entry = self.pods.get(&pod.name)?;
        let same_pod = match &entry.uid {
            Some(recorded) if !pod.uid.is_empty() => *recorded == pod.uid,
            _ => true,
        };
        let fresh = entry.at.checked_add(expiry).is_ok_and(|until| until > now);
        (same_pod && fresh && !Self::from_the_future(entry, now)).then_some(entry.at)
    }

    /// Whether the entry is past `expiry`, or further ahead than clocks differ (anyone who
    /// may edit the record can write 2099: that must not hold the budget until then), and can
    /// be dropped.
    pub fn is_expired(entry: &AllowedEviction, now: Timestamp, expiry: SignedDuration) -> bool {
        entry.at.checked_add(expiry).is_ok_and(|until| until <= now)
            || Self::from_the_future(entry, now)
    }

    fn from_the_future(entry: &AllowedEviction, now: Timestamp) -> bool {
        now.checked_add(crate::clock::MAX_CLOCK_SKEW)
            .is_ok_and(|latest| entry.at > latest)
    }
}

/// Everything the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct EvictionSnapshot<'a> {
    /// The pod to evict.
    pub pod: &'a CachedPod,
    /// The budgets of the pod's namespace, parsed.
    pub budgets: &'a [&'a Observed],
    /// The StatefulSets of the pod's namespace.
    pub statefulsets: &'a [&'a StatefulSet],
    /// The pods of the pod's namespace by their StatefulSet (the evicted one among them or
    /// not). Only the pods of the budget's StatefulSets are read.
    pub pods: &'a PodsByStatefulSet,
    pub now: Timestamp,
    pub recently_allowed: &'a RecentlyAllowed,
    /// How long a [`RecentlyAllowed`] entry counts.
    pub record_expiry: SignedDuration,
}

/// Why a pod is counted as unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    Terminating,
    Phase(PodPhase),
    NotReady,
    /// Ready, but not for long enough (minReadySeconds or crossZoneEvictionDelay) until then.
    ReadyTooRecently(Timestamp),
    /// Ready, but when it turned Ready is unknown, so crossZoneEvictionDelay cannot have passed.
    ReadySinceUnknown,
    /// Its eviction was allowed at this time and it is not terminating yet.
    EvictionAllowed(Timestamp),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Terminating => f.write_str("terminating"),
            Unavailable::Phase(phase) => write!(f, "{phase:?}"),
            Unavailable::NotReady => f.write_str("not ready"),
            Unavailable::ReadyTooRecently(until) => {
                write!(f, "ready too recently, counts from {until}")
            }
            Unavailable::ReadySinceUnknown => f.write_str("ready since an unknown time"),
            Unavailable::EvictionAllowed(at) => write!(f, "eviction allowed at {at}"),
        }
    }
}

/// What the decision found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionVerdict {
    Allowed {
        reason: AllowReason,
        message: String,
        /// The budget that judged and allowed ([`AllowReason::BudgetMet`]): its record must
        /// take the pod.
        budget: Option<String>,
    },
    Denied {
        reason: DenyReason,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowReason {
    PodNotRunning,
    PodTerminating,
    NoBudget,
    BudgetMet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    MultipleBudgets,
    InvalidBudget,
    OwnerNotSelected,
    TooFewStatefulSets,
    PartitionUnknown,
    OtherZoneUnavailable,
    ZoneAtMaxUnavailable,
    PartitionAtMaxUnavailable,
    /// A member cluster of the budget's zones cannot be read: its pods count as unavailable.
    MemberUnavailable,
}

impl AllowReason {
    /// The `reason` label of `rollout_operator_zpdb_eviction_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            AllowReason::PodNotRunning => "pod_not_running",
            AllowReason::PodTerminating => "pod_terminating",
            AllowReason::NoBudget => "no_zpdb",
            AllowReason::BudgetMet => "zpdb_met",
        }
    }
}

impl DenyReason {
    pub fn label(self) -> &'static str {
        match self {
            DenyReason::MultipleBudgets => "multiple_zpdbs",
            DenyReason::InvalidBudget => "invalid_zpdb",
            DenyReason::OwnerNotSelected => "owner_not_selected",
            DenyReason::TooFewStatefulSets => "too_few_statefulsets",
            DenyReason::PartitionUnknown => "partition_unknown",
            DenyReason::OtherZoneUnavailable => "other_zone_unavailable",
            DenyReason::ZoneAtMaxUnavailable => "zone_at_max_unavailable",
            DenyReason::PartitionAtMaxUnavailable => "partition_at_max_unavailable",
            DenyReason::MemberUnavailable => "member_unavailable",
        }
    }
}

impl EvictionVerdict {
    pub fn is_allowed(&self) -> bool {
        matches!(self, EvictionVerdict::Allowed { .. })
    }
    pub fn message(&self) -> &str {
        match self {
            EvictionVerdict::Allowed { message, .. } | EvictionVerdict::Denied { message, .. } => {
                message
            }
        }
    }
    /// The `reason` label of `rollout_operator_zpdb_eviction_requests_total`.
    pub fn reason_label(&self) -> &'static str {
        match self {
            EvictionVerdict::Allowed { reason, .. } => reason.label(),
            EvictionVerdict::Denied { reason, .. } => reason.label(),
        }
    }
    /// The budget that judged, when one did and allowed: its record must take the pod.
    pub fn judging_budget(&self) -> Option<&str> {
        match self {
            EvictionVerdict::Allowed { budget, .. } => budget.as_deref(),
            EvictionVerdict::Denied { .. } => None,
        }
    }
}

fn allowed(reason: AllowReason, message: String) -> EvictionVerdict {
    EvictionVerdict::Allowed {
        reason,
        message,
        budget: None,
    }
}

/// Allowed by `budget`, which its record must now show.
fn met(budget: &str, message: String) -> EvictionVerdict {
    EvictionVerdict::Allowed {
        reason: AllowReason::BudgetMet,
        message,
        budget: Some(budget.to_owned()),
    }
}
fn denied(reason: DenyReason, message: String) -> EvictionVerdict {
    EvictionVerdict::Denied { reason, message }
}

/// The budget that selects `pod`, if exactly one does (None: no budget; Err: the denial).
pub fn selecting_budget<'b>(
    pod: &CachedPod,
    budgets: &[&'b Observed],
) -> Result<Option<&'b Budget>, EvictionVerdict> {
    let name = pod.name.as_str();
    let labels = &pod.labels;
    let selecting: Vec<&Observed> = budgets
        .iter()
        .copied()
        .filter(|budget| match budget {
            Ok(budget) => budget.selects(labels),
            Err(invalid) => invalid.selects(labels),
        })
        .collect();
    match selecting.as_slice() {
        [] => Ok(None),
        [Ok(budget)] => Ok(Some(budget)),
        [Err(invalid)] => Err(denied(
            DenyReason::InvalidBudget,
            format!("pod {name} cannot be evicted: it is selected by {invalid}; fix the budget"),
        )),
        several => {
            let names: Vec<&str> = several
                .iter()
                .map(|budget| match budget {
                    Ok(budget) => budget.name.as_str(),
                    Err(invalid) => invalid.name.as_str(),
                })
                .collect();
            Err(denied(
                DenyReason::MultipleBudgets,
                format!(
                    "pod {name} cannot be evicted: {} ZoneAwarePodDisruptionBudgets select it ({}); exactly one may",
                    names.len(),
                    names.join(", ")
                ),
            ))
        }
    }
}

/// The zones `budget` judges `pod` with: the StatefulSets of the pod's namespace it selects, by
/// name. Only pods these StatefulSets control count.
fn zones<'s>(
    budget: &Budget,
    pod: &CachedPod,
    statefulsets: &[&'s StatefulSet],
) -> Vec<&'s StatefulSet> {
    let mut zones: Vec<&StatefulSet> = statefulsets
        .iter()
        .copied()
        .filter(|statefulset| {
            statefulset
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default()
                == pod.namespace.as_str()
        })
        .filter(|statefulset| budget.selects(&statefulset.metadata.labels))
        .collect();
    zones.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    zones
}

/// Decides whether the snapshot's pod may be evicted now.
pub fn decide(snapshot: &EvictionSnapshot<'_>) -> EvictionVerdict {
    judge_disruption(snapshot, None)
}

/// The same decision for a rollout that is about to delete the pod: the other zones must be
/// available as for an eviction (a drain and a rollout never take out two zones together), but
/// within the pod's zone the rollout's own max-unavailable applies instead of the budget's.
/// So a budget of `maxUnavailable: 0`, which refuses every eviction, does not block rollouts
/// forever, as the Go operator's do.
pub fn decide_rollout_deletion(
    snapshot: &EvictionSnapshot<'_>,
    rollout_max_unavailable: u32,
) -> EvictionVerdict {
    judge_disruption(snapshot, Some(rollout_max_unavailable))
}

fn judge_disruption(
    snapshot: &EvictionSnapshot<'_>,
    rollout_max_unavailable: Option<u32>,
) -> EvictionVerdict {
    let pod = snapshot.pod;
    let name = pod.name.as_str();
    let readiness = pod.readiness;
    if readiness.terminating {
        return allowed(
            AllowReason::PodTerminating,
            format!("pod {name} is already terminating"),
        );
    }
    if readiness.phase != PodPhase::Running {
        return allowed(
            AllowReason::PodNotRunning,
            format!("pod {name} is not running ({:?})", readiness.phase),
        );
    }
    let budget = match selecting_budget(pod, snapshot.budgets) {
        Err(verdict) => return verdict,
        Ok(None) => {
            return allowed(
                AllowReason::NoBudget,
                format!("no ZoneAwarePodDisruptionBudget selects pod {name}"),
            );
        }
        Ok(Some(budget)) => budget,
    };
    let zones = zones(budget, pod, snapshot.statefulsets);
    let zone_names = || {
        zones
            .iter()
            .map(|zone| zone.metadata.name.as_deref().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(own) = zones.iter().position(|zone| is_controlled_by(pod, zone)) else {
        let owner = crate::pods::controlling_statefulset(pod)
            .map(|owner| format!("its owner StatefulSet {owner} is"))
            .unwrap_or_else(|| "it is not owned by a StatefulSet, which".to_owned());
        return denied(
            DenyReason::OwnerNotSelected,
            format!(
                "pod {name} cannot be evicted: it is selected by ZoneAwarePodDisruptionBudget {}, but {owner} not among the StatefulSets the budget selects ([{}]); make the budget's selector match the StatefulSets' labels",
                budget.name,
                zone_names()
            ),
        );
    };
    if zones.len() < 2 {
        return denied(
            DenyReason::TooFewStatefulSets,
            format!(
                "pod {name} cannot be evicted: ZoneAwarePodDisruptionBudget {} selects {} StatefulSet{} ([{}]); it needs one per zone, at least two",
                budget.name,
                zones.len(),
                if zones.len() == 1 { "" } else { "s" },
                zone_names()
            ),
        );
    }
    let judge = Judge {
        snapshot,
        budget,
        evicted: name,
        rollout_max_unavailable,
    };
    match &budget.partition {
        None => judge.zone_mode(own, &zones),
        Some(partition) => match partition.of(name) {
            Some(partition_name) => judge.partition_mode(partition_name, &zones),
            None => denied(
                DenyReason::PartitionUnknown,
                format!(
                    "pod {name} cannot be evicted: its name does not match podNamePartitionRegex {:?} (group {}) of ZoneAwarePodDisruptionBudget {}, so its partition is unknown",
                    partition.regex.as_str(),
                    partition.group,
                    budget.name
                ),
            ),
        },
    }
}

/// The unavailable and missing pods of one zone, as counted.
#[derive(Debug, Default)]
struct ZoneCount {
    unavailable: Vec<(String, Unavailable)>,
    missing: u32,
}

impl ZoneCount {
    fn total(&self) -> u32 {
        u32::try_from(self.unavailable.len())
            .unwrap_or(u32::MAX)
            .saturating_add(self.missing)
    }
    fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .unavailable
            .iter()
            .take(5)
            .map(|(pod, why)| format!("{pod} {why}"))
            .collect();
        if self.unavailable.len() > 5 {
            parts.push(format!("and {} more", self.unavailable.len() - 5));
        }
        if self.missing > 0 {
            parts.push(format!("{} missing", self.missing));
        }
        parts.join(", ")
    }
}

struct Judge<'s, 'a> {
    snapshot: &'s EvictionSnapshot<'a>,
    budget: &'s Budget,
    evicted: &'s str,
    /// A rollout's deletion: its own max-unavailable replaces the budget's.
    rollout_max_unavailable: Option<u32>,
}

impl Judge<'_, '_> {
    /// Why `pod` of `zone` counts as unavailable, if it does.
    fn unavailable(&self, pod: &CachedPod, min_ready_seconds: u32) -> Option<Unavailable> {
        let now = self.snapshot.now;
        let readiness = pod.readiness;
        match readiness.availability(min_ready_seconds, now) {
            Availability::Unavailable(NotAvailable::Terminating) => {
                return Some(Unavailable::Terminating);
            }
            Availability::Unavailable(NotAvailable::Phase(phase)) => {
                return Some(Unavailable::Phase(phase));
            }
            Availability::Unavailable(NotAvailable::NotReady) => {
                return Some(Unavailable::NotReady);
            }
            Availability::From(from) => return Some(Unavailable::ReadyTooRecently(from)),
            Availability::Available => {}
        }
        if let Some(delay) = self
            .budget
            .cross_zone_eviction_delay
            .filter(|delay| !delay.is_zero())
        {
            // From the Ready condition's transition, as the Go operator since v0.40; a pod with
            // none usable is held (fail closed).
            match readiness.ready_since {
                None => return Some(Unavailable::ReadySinceUnknown),
                Some(since) => match since.checked_add(delay) {
                    Ok(until) if until > now => return Some(Unavailable::ReadyTooRecently(until)),
                    _ => {}
                },
            }
        }
        self.snapshot
            .recently_allowed
            .allowed_at(pod, now, self.snapshot.record_expiry)
            .map(Unavailable::EvictionAllowed)
    }

    /// The pods of zone `index` of `zones` other than the evicted one, with `keep` choosing
    /// which count.
    fn count(
        &self,
        zones: &[&StatefulSet],
        index: usize,
        keep: impl Fn(&str) -> bool,
    ) -> (ZoneCount, u32) {
        let state = StatefulSetState::of(zones[index]);
        let min_ready_seconds = state.min_ready_seconds.unsigned_abs();
        let mut count = ZoneCount::default();
        let mut present = 0u32;
        for pod in self.snapshot.pods.of_statefulset(zones[index]) {
            let name = pod.name.as_str();
            if !keep(name) {
                continue;
            }
            present += 1;
            if name == self.evicted {
                continue;
            }
            if let Some(why) = self.unavailable(pod, min_ready_seconds) {
                count.unavailable.push((name.to_owned(), why));
            }
        }
        (count, present)
    }

    /// `own`: the evicted pod's zone, an index of `zones`.
    fn zone_mode(&self, own: usize, zones: &[&StatefulSet]) -> EvictionVerdict {
        let budget = &self.budget.name;
        let evicted = self.evicted;
        for (index, zone) in zones
            .iter()
            .copied()
            .enumerate()
            .filter(|(index, _)| *index != own)
        {
            let (mut count, present) = self.count(zones, index, |_| true);
            let replicas = StatefulSetState::of(zone).replicas.unsigned_abs();
            count.missing = replicas.saturating_sub(present);
            if count.total() > 0 {
                return denied(
                    DenyReason::OtherZoneUnavailable,
                    format!(
                        "pod {evicted} cannot be evicted: ZoneAwarePodDisruptionBudget {budget} allows evictions in one zone at a time, and StatefulSet {} has {} unavailable pod{} ({}); retry once it is available again",
                        zone.metadata.name.as_deref().unwrap_or(""),
                        count.total(),
                        plural(count.total()),
                        count.describe()
                    ),
                );
            }
        }
        let state = StatefulSetState::of(zones[own]);
        let (mut count, present) = self.count(zones, own, |_| true);
        count.missing = state.replicas.unsigned_abs().saturating_sub(present);
        let max = self
            .rollout_max_unavailable
            .unwrap_or_else(|| self.budget.max_unavailable.of(state.replicas));
        let after = count.total().saturating_add(1);
        if after > max {
            let already = if count.total() == 0 {
                String::new()
            } else {
                format!(
                    " and it already has {} ({})",
                    count.total(),
                    count.describe()
                )
            };
            return denied(
                DenyReason::ZoneAtMaxUnavailable,
                format!(
                    "pod {evicted} cannot be evicted: ZoneAwarePodDisruptionBudget {budget} allows {max} unavailable pod{} in StatefulSet {} ({}){already}; retry once a pod is available again",
                    plural(max),
                    state.name,
                    self.budget.max_unavailable,
                ),
            );
        }
        met(
            budget,
            format!(
                "ZoneAwarePodDisruptionBudget {budget} met: StatefulSet {} will have {after} of {max} allowed unavailable pods, the other zones none",
                state.name
            ),
        )
    }

    fn partition_mode(&self, partition_name: &str, zones: &[&StatefulSet]) -> EvictionVerdict {
        let Some(partition) = &self.budget.partition else {
            unreachable!("partition_mode is only called for a budget with a partition")
        };
        let budget = &self.budget.name;
        let evicted = self.evicted;
        let same = |pod: &str| partition.of(pod) == Some(partition_name);
        let mut total = 0u32;
        let mut described = Vec::new();
        for (index, zone) in zones.iter().copied().enumerate() {
            let (mut count, present) = self.count(zones, index, same);
            if present == 0 {
                count.missing = 1;
            }
            if count.total() > 0 {
                total = total.saturating_add(count.total());
                described.push(format!(
                    "{}: {}",
                    zone.metadata.name.as_deref().unwrap_or(""),
                    count.describe()
                ));
            }
        }
        let max = self
            .rollout_max_unavailable
            .unwrap_or_else(|| self.budget.max_unavailable.of(0));
        if total >= max {
            let state = if described.is_empty() {
                String::new()
            } else {
                format!(
                    " and {total} already {} ({})",
                    if total == 1 { "is" } else { "are" },
                    described.join("; ")
                )
            };
            return denied(
                DenyReason::PartitionAtMaxUnavailable,
                format!(
                    "pod {evicted} cannot be evicted: ZoneAwarePodDisruptionBudget {budget} allows {max} unavailable pod{} of partition {partition_name} across the zones{state}; retry once they are available again",
                    plural(max)
                ),
            );
        }
        met(
            budget,
            format!(
                "ZoneAwarePodDisruptionBudget {budget} met for partition {partition_name}: {} of {max} allowed unavailable across {} zones",
                total + 1,
                zones.len()
            ),
        )
    }
}

fn plural(count: u32) -> &'static str {
    if count == 1 { "" } else { "s" }
}
