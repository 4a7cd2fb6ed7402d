//! One rollout deletion judged against the namespace's zone-aware budgets, as the rollout
//! controller consults them before it deletes a pod: the webhook's own decision
//! ([`decide_rollout_deletion`]) on what the caches hold at one instant and the budget records'
//! recent claims, and what a consult comes to at each of its steps ([`first_look`], then
//! [`on_record`] for each read of the budget's record, or [`could_not_claim`]). Pure: the
//! controller only reads the record, writes what [`on_record`] claims, and deletes.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::record::{RECORD_EXPIRY, recently_allowed, record_name, with_eviction};
use super::{
    EvictionSnapshot, EvictionVerdict, Observed, RecentlyAllowed, decide_rollout_deletion,
};
use crate::annotations::max_unavailable;
use crate::ledger::{CLAIM_ATTEMPTS, Judged, Ledger};
use crate::pods::{CachedPod, PodsByStatefulSet};

/// What is known of the namespace's budgets.
#[derive(Debug, Clone)]
pub enum Known {
    /// Not listed yet, naming the watch's last error if there was one (e.g. a role without
    /// `list` on the budgets).
    NotListed { error: Option<String> },
    /// The CRD is not installed: there are no budgets.
    NotInstalled,
    /// Budget name → the budget, parsed.
    Listed(BTreeMap<String, Arc<Observed>>),
}

impl Known {
    /// The listed budgets (none when not listed, or not installed).
    pub fn listed(&self) -> Vec<Arc<Observed>> {
        match self {
            Known::Listed(budgets) => budgets.values().cloned().collect(),
            _ => Vec::new(),
        }
    }
}

/// A rollout deletion about to happen.
#[derive(Debug, Clone, Copy)]
pub struct Deletion<'a> {
    pub statefulset: &'a str,
    pub pod: &'a str,
    /// The planner's free replacement of an already unavailable pod: never held.
    pub free_replacement: bool,
}

/// What [`judge`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Delete: no budget holds it (none selects the pod, or it is not running, or free).
    Go,
    /// A budget allows it: claim it in the budget's record, then delete.
    Claim { budget: String },
    /// Wait, for this reason (a person can act on it).
    Wait(String),
}

/// The caches [`judge`] reads, at one instant.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub namespace: &'a str,
    pub known: &'a Known,
    pub statefulsets: &'a [&'a StatefulSet],
    pub pods: &'a [Arc<CachedPod>],
    pub now: Timestamp,
}

/// Judges one rollout deletion on the caches and the record's recent claims. Pure.
pub fn judge(view: &View<'_>, deletion: &Deletion<'_>, claims: &RecentlyAllowed) -> Judgement {
    if deletion.free_replacement {
        return Judgement::Go;
    }
    let budgets: Vec<&Observed> = match view.known {
        Known::NotListed { error } => {
            let error = error
                .as_deref()
                .map(|error| format!(" (listing them failed: {error})"))
                .unwrap_or_default();
            return Judgement::Wait(format!(
                "the rollout waits to delete pod {}: the ZoneAwarePodDisruptionBudgets of namespace {} are not listed yet{error}",
                deletion.pod, view.namespace
            ));
        }
        Known::NotInstalled => return Judgement::Go,
        Known::Listed(budgets) => budgets.values().map(Arc::as_ref).collect(),
    };
    let Some(pod) = view.pods.iter().find(|pod| pod.name == deletion.pod) else {
        // Gone already: the delete finds nothing to take.
        return Judgement::Go;
    };
    let statefulset = view
        .statefulsets
        .iter()
        .copied()
        .find(|statefulset| statefulset.metadata.name.as_deref() == Some(deletion.statefulset));
    let rollout_max_unavailable = statefulset.map_or(1, |statefulset| {
        let replicas = statefulset
            .spec
            .as_ref()
            .and_then(|spec| spec.replicas)
            .unwrap_or(1);
        let annotations = statefulset.metadata.annotations.clone().unwrap_or_default();
        max_unavailable(&annotations, replicas.unsigned_abs()).value
    });
    let pods = PodsByStatefulSet::of(view.statefulsets.iter().copied(), view.pods);
    let snapshot = EvictionSnapshot {
        pod,
        budgets: &budgets,
        statefulsets: view.statefulsets,
        pods: &pods,
        now: view.now,
        recently_allowed: claims,
        record_expiry: RECORD_EXPIRY,
    };
    let verdict = decide_rollout_deletion(&snapshot, rollout_max_unavailable);
    match verdict {
        EvictionVerdict::Denied { message, .. } => Judgement::Wait(format!(
            "the rollout waits to delete pod {}: {message}",
            deletion.pod
        )),
        EvictionVerdict::Allowed {
            budget: Some(budget),
            ..
        } => Judgement::Claim { budget },
        EvictionVerdict::Allowed { budget: None, .. } => Judgement::Go,
    }
}

/// What the rollout may do with one deletion, once consulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    Go,
    /// Skip this pass's remaining deletions; the message says why.
    Wait(String),
}

/// Who claims a deletion in a budget's record, and its pod's uid (so a recreated pod of the
/// same name is not taken for the claimed one).
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    pub group: &'a str,
    pub pod_uid: Option<&'a str>,
}

/// The consult's first step, on the caches alone: settled (no budget holds the deletion, or
/// one refuses it), or `Err(budget)`: a budget allows it, and the claim in that budget's record
/// decides.
pub fn first_look(view: &View<'_>, deletion: &Deletion<'_>) -> Result<Permit, String> {
    match judge(view, deletion, &RecentlyAllowed::default()) {
        Judgement::Go => Ok(Permit::Go),
        Judgement::Wait(why) => Ok(Permit::Wait(why)),
        Judgement::Claim { budget } => Err(budget),
    }
}

/// The consult judged again on the caches as they are now and the budget's record as just read
/// (its recent claims count as unavailable pods): settled, or the record with this deletion
/// claimed, to store conditioned on the version read (a writer before it makes the controller
/// read and judge again).
pub fn on_record(
    view: &View<'_>,
    deletion: &Deletion<'_>,
    record: &Ledger,
    claimant: Claimant<'_>,
) -> Judged<Permit> {
    match judge(view, deletion, &recently_allowed(record)) {
        Judgement::Go => Judged::Settled(Permit::Go),
        Judgement::Wait(why) => Judged::Settled(Permit::Wait(why)),
        Judgement::Claim { .. } => {
            let request = claim_request(claimant.group);
            let claimed = with_eviction(record, deletion.pod, claimant.pod_uid, &request, view.now);
            Judged::Claim(claimed, Permit::Go)
        }
    }
}

/// What a rollout's claims in a budget's record are signed with: the request that made them.
pub fn claim_request(group: &str) -> String {
    format!("baton-controller rollout of group {group}")
}

/// Why the consult could not claim the deletion in `budget`'s record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimFailure {
    /// Reading or writing the record failed (`step` is "reading" or "writing").
    Call { step: &'static str, error: String },
    /// Others wrote the record first at every attempt.
    Contended,
}

/// A consult that could not claim waits, never deletes: the message names the record and why.
pub fn could_not_claim(deletion: &Deletion<'_>, budget: &str, failure: &ClaimFailure) -> Permit {
    let name = record_name(budget);
    let pod = deletion.pod;
    Permit::Wait(match failure {
        ClaimFailure::Call { step, error } => format!(
            "the rollout waits to delete pod {pod}: {step} ConfigMap {name} (the record of ZoneAwarePodDisruptionBudget {budget}) failed: {error}"
        ),
        ClaimFailure::Contended => format!(
            "the rollout waits to delete pod {pod}: ConfigMap {name} changed under {CLAIM_ATTEMPTS} attempts to claim the deletion"
        ),
    })
}

#[cfg(test)]
mod tests;
