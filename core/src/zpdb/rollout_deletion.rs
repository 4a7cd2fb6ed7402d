//! One rollout deletion judged against the namespace's zone-aware budgets, as the rollout
//! controller consults them before it deletes a pod: the webhook's own decision
//! ([`decide_rollout_deletion`]) on what the caches hold at one instant and the budget records'
//! recent claims. Pure: the controller reads, claims and deletes.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::record::RECORD_EXPIRY;
use super::{EvictionSnapshot, Observed, RecentlyAllowed, Verdict, decide_rollout_deletion};
use crate::annotations::max_unavailable;
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
        Verdict::Denied { message, .. } => Judgement::Wait(format!(
            "the rollout waits to delete pod {}: {message}",
            deletion.pod
        )),
        Verdict::Allowed {
            budget: Some(budget),
            ..
        } => Judgement::Claim { budget },
        Verdict::Allowed { budget: None, .. } => Judgement::Go,
    }
}

#[cfg(test)]
mod tests;
