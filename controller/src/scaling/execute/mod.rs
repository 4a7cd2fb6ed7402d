//! The thin I/O around the scaling planner, split by responsibility:
//! - here: one scaling pass of a group (read the references, build the snapshot whole, plan,
//!   explain, act) and the StatefulSet's `/scale` call;
//! - `references`: the reference resources (kind discovery, reading their scale, writing
//!   `status.replicas` back);
//! - `delayed`: delayed downscale carried out (the pods' prepare/cancel endpoints, then the
//!   scale as far down as their answers allow);
//! - `claims`: downscales prepare-downscale approved, confirmed into the Go operator's records
//!   once they happened, voided (pods told to cancel) when they never did;
//! - `explain`: how every outcome is told (Events and log lines).
//!
//! A pass runs beside the group's rollout, never before it: neither waits on the other's I/O
//! (an unreachable reference holds scaling only).

mod claims;
mod delayed;
mod explain;
mod references;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::Config;
use baton_core::downscale_history::{Records, ZoneTracker};
use baton_core::ledger::Ledger;
use baton_core::pod_address::PodAddressing;
use baton_core::pods::CachedPod;
use baton_shared::downscale_history::record_in_tracker;
use baton_shared::kube_client::bounded;
use baton_shared::pod_client::{PodClientError, PodHttpClient};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use prometheus::Registry;
use serde_json::json;

use crate::explain::Explainer;
use crate::leader::MayAct;
use crate::queue::Requeue;
use baton_core::scaling::plan::{
    FindingKind, Member, ScalingAction, ScalingPlan, ScalingSnapshot, plan,
};

/// Event reason for a malformed entry of the Go operator's zone tracker.
const ZONE_TRACKER_INVALID: &str = "ZoneTrackerEntryInvalid";

/// Why a Kubernetes call of the executor failed.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    TimedOut(#[from] baton_shared::kube_client::TimedOut),
    #[error("{0}")]
    Unsupported(String),
}

/// Scales the StatefulSets of groups; shared by all groups.
pub struct Scaler {
    client: kube::Client,
    namespace: String,
    pods: PodHttpClient,
    addressing: PodAddressing,
    cluster_domain: String,
    max_concurrent_calls: usize,
    poll_interval: Duration,
    request_timeout: Duration,
    /// The Go operator's zone tracker ConfigMap.
    zone_tracker: String,
    /// How long an approved downscale may take to land.
    claim_grace: Duration,
    /// `(apiVersion, kind)` → resource, for kinds found with a scale subresource.
    discovered: Mutex<HashMap<(String, String), ApiResource>>,
    /// Approved downscales (by admission request) whose pods were told to cancel, while the
    /// follow-up is not stored yet: a retry after a conflicting write tells them no second time.
    cancelled: Mutex<std::collections::HashSet<String>>,
}

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaler")
            .field("namespace", &self.namespace)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl Scaler {
    /// Builds the scaler; registers the pod HTTP client's histogram in `registry`.
    pub fn new(
        client: kube::Client,
        config: &Config,
        registry: &Registry,
    ) -> Result<Self, PodClientError> {
        Ok(Self {
            client,
            namespace: config.namespace.clone(),
            pods: PodHttpClient::new(&config.pods, registry)?,
            addressing: config.pods.address_by.into(),
            cluster_domain: config.cluster_domain.clone(),
            max_concurrent_calls: config.pods.max_concurrent_calls.max(1),
            poll_interval: config.controller.scaling_poll_interval.get(),
            request_timeout: config.kubernetes.request_timeout.get(),
            zone_tracker: config.downscale.zone_tracker_config_map.clone(),
            claim_grace: config.downscale.claim_grace.get(),
            discovered: Mutex::default(),
            cancelled: Mutex::default(),
        })
    }

    /// One scaling pass over a group: read the references, build the snapshot whole, plan,
    /// explain, act, and follow up the downscales prepare-downscale approved (`records`: the
    /// group's ledger and the zone tracker). Returns when the group wants to come back.
    pub async fn reconcile(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        pods: &[Arc<CachedPod>],
        records: (&Ledger, &ZoneTracker),
        explainer: &Explainer,
        may_act: &MayAct,
    ) -> (Requeue, Vec<&'static str>) {
        let scales = self.read_references(members).await;
        let now = Timestamp::now();
        let history = Records {
            ledger: records.0,
            tracker: records.1,
            claim_grace: self.claim_grace,
        };
        let snapshot = ScalingSnapshot::from_kubernetes(
            group,
            members.iter().map(Arc::as_ref),
            &scales,
            history,
            now,
        );
        let plan = plan(&snapshot, now);
        let pass = Pass {
            scaler: self,
            members,
            pods,
            explainer,
            snapshot: &snapshot,
            failures: Mutex::default(),
        };
        let mut requeue = if plan.poll {
            Requeue::After(self.poll_interval)
        } else {
            Requeue::Never
        };
        if let Some(at) = plan.recheck_at {
            requeue = requeue.sooner(Requeue::at(at));
        }
        for finding in plan
            .findings
            .iter()
            .filter(|f| f.kind != FindingKind::Scale)
        {
            pass.tell(finding).await;
        }
        // A malformed entry of a member is told on it: it counts as a downscale now, holding
        // the group's downscales. Left alone it would hold them for as long as it stays, so the
        // leader writes it back as the downscale it is taken for: the hold ends one min-time
        // later whoever wrote it.
        let names = members
            .iter()
            .filter_map(|member| member.metadata.name.as_deref());
        let malformed = records.1.malformed(names);
        for entry in &malformed {
            pass.say(
                &entry.key,
                crate::explain::Severity::Warning,
                ZONE_TRACKER_INVALID,
                "Validate",
                format!(
                    "{entry} in ConfigMap {}: it counts as a downscale now, and is written back as \
                     one, so other zones' downscales wait their min-time from now",
                    self.zone_tracker
                ),
            )
            .await;
        }
        if may_act().is_none() {
            return (requeue, pass.into_failures());
        }
        // One entry per pass: the write is conditional on the tracker's version, and its watch
        // event brings the next pass.
        if let Some(entry) = malformed.first() {
            let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
            let written = bounded(
                self.request_timeout,
                format!("writing back {}'s malformed zone tracker entry", entry.key),
                record_in_tracker(&config_maps, &self.zone_tracker, records.1, &entry.key, now),
            )
            .await;
            if !matches!(written, Ok(Ok(_))) {
                tracing::warn!(key = %entry.key, ?written, "writing back a malformed zone tracker entry failed; the next pass tries again");
                requeue = requeue.sooner(Requeue::After(Duration::from_secs(1)));
            }
        }
        let requeue = requeue.sooner(pass.act(&plan, may_act).await);
        let requeue = requeue.sooner(pass.follow_up_claims(group, records, now, may_act).await);
        (requeue, pass.into_failures())
    }
}

/// Everything one pass over one group needs.
struct Pass<'a> {
    scaler: &'a Scaler,
    members: &'a [Arc<StatefulSet>],
    pods: &'a [Arc<CachedPod>],
    explainer: &'a Explainer,
    snapshot: &'a ScalingSnapshot,
    /// What failed in this pass ([`super::SCALING_ERRORS`]), for the reconcile's metrics.
    failures: Mutex<Vec<&'static str>>,
}

impl Pass<'_> {
    fn failed(&self, error: &'static str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(error);
    }

    fn into_failures(self) -> Vec<&'static str> {
        self.failures
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn statefulset(&self, name: &str) -> Option<&StatefulSet> {
        self.members
            .iter()
            .map(Arc::as_ref)
            .find(|statefulset| statefulset.metadata.name.as_deref() == Some(name))
    }

    fn member(&self, name: &str) -> Option<&Member> {
        self.snapshot
            .members
            .iter()
            .find(|member| member.name == name)
    }

    /// Carries out the plan; returns a requeue hint. A replica change needs none: its watch
    /// event brings the group back.
    async fn act(&self, plan: &ScalingPlan, may_act: &MayAct) -> Requeue {
        let mut requeue = Requeue::Never;
        for action in &plan.actions {
            // The lease may have been lost meanwhile: check right before every call, and let
            // a scale write take no longer than the term has left.
            let Some(left) = may_act() else {
                break;
            };
            match action {
                ScalingAction::SetReplicas {
                    statefulset,
                    from,
                    to,
                } => {
                    let finding = plan
                        .findings
                        .iter()
                        .find(|f| f.kind == FindingKind::Scale && &f.statefulset == statefulset);
                    match self.set_replicas(statefulset, *to, left).await {
                        SetOutcome::Done => {
                            if let Some(finding) = finding {
                                self.tell(finding).await;
                            }
                        }
                        SetOutcome::Stale => {
                            requeue = requeue.sooner(Requeue::After(Duration::from_millis(200)));
                            break;
                        }
                        SetOutcome::Failed(error) => {
                            self.tell_scale_failed(statefulset, *from, *to, &error)
                                .await;
                            requeue = requeue.sooner(Requeue::After(self.scaler.poll_interval));
                            break;
                        }
                    }
                }
                ScalingAction::WriteBack {
                    statefulset,
                    replicas,
                } => self.write_back(statefulset, *replicas).await,
                ScalingAction::CancelDelayedDownscale { statefulset, keep } => {
                    self.cancel_delayed_downscale(statefulset, *keep).await;
                }
                ScalingAction::DelayedDownscale {
                    statefulset,
                    from,
                    to,
                } => {
                    let hint = self
                        .delayed_downscale(statefulset, *from, *to, may_act)
                        .await;
                    requeue = requeue.sooner(hint);
                }
            }
        }
        requeue
    }

    async fn set_replicas(&self, name: &str, replicas: i32, left: Duration) -> SetOutcome {
        let Some(cached) = self.statefulset(name) else {
            return SetOutcome::Stale;
        };
        let api: Api<StatefulSet> =
            Api::namespaced(self.scaler.client.clone(), &self.scaler.namespace);
        // Conditioned on the cached version: a decision is never applied to a newer object.
        let patch = json!({
            "metadata": {"resourceVersion": cached.resource_version()},
            "spec": {"replicas": replicas},
        });
        let result = bounded(
            self.scaler.request_timeout.min(left),
            format!("scaling {name}"),
            api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match result {
            Ok(Ok(_)) => SetOutcome::Done,
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(statefulset = name, "scale conflict: the cache is behind");
                SetOutcome::Stale
            }
            Ok(Err(kube::Error::Api(status))) => SetOutcome::Failed(status.message),
            Ok(Err(error)) => SetOutcome::Failed(error.to_string()),
            Err(timed_out) => SetOutcome::Failed(timed_out.to_string()),
        }
    }
}

enum SetOutcome {
    Done,
    /// The cached StatefulSet is outdated (or gone): the next pass decides again.
    Stale,
    /// Denied (e.g. by an admission webhook) or failed: why.
    Failed(String),
}

#[cfg(test)]
mod tests;
