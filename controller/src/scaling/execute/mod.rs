//! The thin I/O around the scaling pass ([`baton_core::scaling::pass`], which decides): one
//! pass over a group reads what the pass needs (the references' scales), lets the core decide,
//! and runs its effects in order, answering each with its outcome. Split by what is called:
//! - here: the pass run, and the StatefulSet's `/scale` call;
//! - `references`: the reference resources (kind discovery, reading their scale, writing
//!   `status.replicas` back);
//! - `delayed`: the pods' delayed-downscale endpoints (cancel, and prepare, answering since
//!   when);
//! - `claims`: the writes that follow up a downscale prepare-downscale approved (the zone
//!   tracker, the annotation, the ledger) and the pods told to cancel;
//! - `records`: the downscale records read, the hub's cached ones or each member cluster's;
//! - `explain`: Events on the StatefulSets.
//!
//! Across member clusters every write goes to the cluster of the object it names (members,
//! their references and records are named `cluster/name`, [`Clusters`]), and a pass with a
//! member cluster out, or whose records could not be read, decides nothing
//! ([`baton_core::scaling::plan::plan`]).
//!
//! A pass runs beside the group's rollout, never before it: neither waits on the other's I/O
//! (an unreachable reference holds scaling only). Whether this replica may still act is asked
//! by the [`Runner`](crate::runner::Runner) before every effect that writes or calls pods.

mod claims;
mod delayed;
mod explain;
mod records;
mod references;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_config::Config;
use baton_core::clusters::Outage;
use baton_core::downscale_history::{Records, ZoneTracker};
use baton_core::ledger::Ledger;
use baton_core::pod_address::PodAddressing;
use baton_core::pods::CachedPod;
use baton_core::scaling::pass::{
    self, Again, Effect, Outcome, PodCalls, Read, ScalingPass, Sequence, conclude, scale_failed,
};
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
use std::collections::HashMap;

use crate::clusters::Clusters;
use crate::error::Error;
use crate::explain::Explainer;
use crate::queue::Requeue;
use crate::runner::{MayAct, Runner};
use records::GroupRecords;

/// Scales the StatefulSets of groups; shared by all groups.
pub struct Scaler {
    /// Where each write goes: the hub, or the member cluster a name names.
    clusters: Clusters,
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
    /// `(cluster, apiVersion, kind)` → resource, for kinds found with a scale subresource (in
    /// that cluster: members' clusters may serve other versions).
    discovered: Mutex<HashMap<(String, String, String), ApiResource>>,
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
        clusters: Clusters,
        config: &Config,
        registry: &Registry,
    ) -> Result<Self, PodClientError> {
        Ok(Self::with_pod_client(
            clusters,
            config,
            PodHttpClient::new(&config.pods, registry)?,
        ))
    }

    /// Builds the scaler of `config.namespace` with a pod HTTP client already built: one for
    /// every namespace served (its histogram is registered once).
    pub fn with_pod_client(clusters: Clusters, config: &Config, pods: PodHttpClient) -> Self {
        Self {
            clusters,
            namespace: config.namespace.clone(),
            pods,
            addressing: config.pods.address_by.into(),
            cluster_domain: config.cluster_domain.clone(),
            max_concurrent_calls: config.pods.max_concurrent_calls.max(1),
            poll_interval: config.controller.scaling_poll_interval.get(),
            request_timeout: config.kubernetes.request_timeout.get(),
            zone_tracker: config.downscale.zone_tracker_config_map.clone(),
            claim_grace: config.downscale.claim_grace.get(),
            discovered: Mutex::default(),
            cancelled: Mutex::default(),
        }
    }

    /// One scaling pass over a group: read the references, decide the pass, run its effects
    /// (`records`: the group's ledger and the zone tracker as the hub caches them, read only
    /// without member clusters; `outages`: the member clusters that cannot be trusted now).
    /// Returns when the group wants to come back, and what failed (told already), for the
    /// reconcile to count.
    #[allow(clippy::too_many_arguments, reason = "what a pass reads, each named")]
    pub async fn reconcile(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        pods: &[Arc<CachedPod>],
        records: (&Ledger, &ZoneTracker),
        outages: &[Outage],
        explainer: &Explainer,
        may_act: &MayAct,
    ) -> (Requeue, Vec<Error>) {
        let (scales, (records, unread)) = futures::join!(
            self.read_references(members),
            self.group_records(group, members, records, outages)
        );
        let (ledger, tracker) = records.view();
        let read = Read {
            group,
            statefulsets: members,
            scales: &scales,
            pods,
            records: Records {
                ledger,
                tracker,
                claim_grace: self.claim_grace,
            },
            tracker: &self.zone_tracker,
            calls: PodCalls {
                addressing: self.addressing,
                cluster_domain: &self.cluster_domain,
                namespace: &self.namespace,
            },
            unread: &unread,
            now: Timestamp::now(),
        };
        let decided = pass::decide(&read);
        let pass = Pass {
            scaler: self,
            group,
            members,
            records: &records,
            explainer,
            failures: Mutex::default(),
        };
        let requeue = pass.run(decided, may_act).await;
        (requeue, pass.into_failures())
    }

    /// The records the pass reads, and the member clusters whose part could not be read.
    async fn group_records(
        &self,
        group: &str,
        members: &[Arc<StatefulSet>],
        cached: (&Ledger, &ZoneTracker),
        outages: &[Outage],
    ) -> (GroupRecords, Vec<baton_core::scaling::plan::Unread>) {
        if !self.clusters.spans_clusters() {
            let records = GroupRecords::Local {
                ledger: cached.0.clone(),
                tracker: cached.1.clone(),
            };
            return (records, Vec::new());
        }
        let mut unread = records::unread_outages(members, outages);
        // A cluster out is not read: it holds the pass already, and its reads would wait out
        // their timeouts.
        let out: Vec<&str> = unread.iter().map(|out| out.cluster.as_str()).collect();
        let (by_cluster, not_read) = self.read_cluster_records(group, members, &out).await;
        unread.extend(not_read);
        let (ledger, tracker) = records::merge(&by_cluster);
        let records = GroupRecords::Clusters {
            by_cluster,
            ledger,
            tracker,
        };
        (records, unread)
    }

    fn requeue(&self, again: Again) -> Requeue {
        match again {
            Again::Poll => Requeue::After(self.poll_interval),
            Again::After(after) => Requeue::After(after),
            Again::At(at) => Requeue::at(at),
        }
    }
}

/// Everything one pass over one group needs.
struct Pass<'a> {
    scaler: &'a Scaler,
    group: &'a str,
    members: &'a [Arc<StatefulSet>],
    records: &'a GroupRecords,
    explainer: &'a Explainer,
    /// What failed in this pass, for the reconcile to count.
    failures: Mutex<Vec<Error>>,
}

impl Pass<'_> {
    fn failed(&self, error: Error) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(error);
    }

    fn into_failures(self) -> Vec<Error> {
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

    /// Runs the pass's effects in order, each answered with its outcome, which says what is
    /// left of the pass ([`Sequence`]). Every effect that writes or calls pods runs within the term
    /// the pass started in and is bounded by what is left of it ([`Runner`]).
    async fn run(&self, decided: ScalingPass, may_act: &MayAct) -> Requeue {
        let runner = Runner::new(may_act.clone(), self.scaler.request_timeout);
        let mut sequence = Sequence::new(decided);
        while let Some(effect) = sequence.next_effect() {
            let Ok(timeout) = runner.bound(effect.needs_term()) else {
                break;
            };
            let outcome = match &effect {
                Effect::Tell {
                    statefulset,
                    explanation,
                } => {
                    self.say(statefulset, explanation.clone()).await;
                    Outcome::Done
                }
                Effect::RepairTrackerEntry { statefulset, at } => {
                    self.repair_tracker_entry(statefulset, *at, timeout).await
                }
                Effect::SetReplicas {
                    statefulset,
                    from,
                    to,
                    told,
                } => match self.set_replicas(statefulset, *to, timeout).await {
                    Ok(outcome) => {
                        if outcome == Outcome::Done {
                            self.say(statefulset, told.clone()).await;
                        }
                        outcome
                    }
                    Err(why) => {
                        self.say(statefulset, scale_failed(statefulset, *from, *to, &why))
                            .await;
                        self.failed(Error::ScaleWrite {
                            statefulset: statefulset.clone(),
                            why,
                        });
                        Outcome::Failed
                    }
                },
                Effect::WriteBack {
                    statefulset,
                    reference,
                    replicas,
                } => {
                    self.write_back(statefulset, reference, *replicas, timeout)
                        .await
                }
                Effect::CancelDelayedDownscale { statefulset, pods } => {
                    self.cancel_delayed_downscale(statefulset, pods).await;
                    Outcome::Done
                }
                Effect::PrepareDelayedDownscale(step) => {
                    let answers = self.prepare_delayed_downscale(step).await;
                    // The pods' answers took time: decided at the time they came.
                    sequence.concluded(conclude(step, &answers, Timestamp::now()));
                    Outcome::Done
                }
                Effect::FollowUp(step) => self.follow_up(step, timeout).await,
            };
            sequence.answer(&effect, outcome);
        }
        sequence
            .again()
            .iter()
            .fold(Requeue::Never, |requeue, again| {
                requeue.sooner(self.scaler.requeue(*again))
            })
    }

    /// Writes a malformed zone tracker entry back as a downscale at `at`.
    async fn repair_tracker_entry(&self, name: &str, at: Timestamp, timeout: Duration) -> Outcome {
        let scaler = self.scaler;
        let Some((tracker, key)) = self.records.tracker_of(name) else {
            return Outcome::Stale;
        };
        let config_maps = match self.config_maps_of(name) {
            Ok(config_maps) => config_maps,
            Err(error) => {
                tracing::warn!(%name, %error, "writing back a malformed zone tracker entry failed; the next pass tries again");
                return Outcome::Failed;
            }
        };
        let written = bounded(
            timeout,
            format!("writing back {name}'s malformed zone tracker entry"),
            record_in_tracker(&config_maps, &scaler.zone_tracker, tracker, &key, at),
        )
        .await;
        match written {
            Ok(Ok(true)) => Outcome::Done,
            Ok(Ok(false)) => Outcome::Stale,
            _ => {
                tracing::warn!(%name, ?written, "writing back a malformed zone tracker entry failed; the next pass tries again");
                Outcome::Failed
            }
        }
    }

    /// Patches `/scale`, conditioned on the cached version: a decision is never applied to a
    /// newer object. `Err`: refused or failed, and why.
    async fn set_replicas(
        &self,
        name: &str,
        replicas: i32,
        timeout: Duration,
    ) -> Result<Outcome, String> {
        let Some(cached) = self.statefulset(name) else {
            return Ok(Outcome::Stale);
        };
        let (api, local): (Api<StatefulSet>, _) = self
            .scaler
            .clusters
            .api(&self.scaler.namespace, name)
            .map_err(|error| error.to_string())?;
        let patch = json!({
            "metadata": {"resourceVersion": cached.resource_version()},
            "spec": {"replicas": replicas},
        });
        let result = bounded(
            timeout,
            format!("scaling {name}"),
            api.patch_scale(local, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match result {
            Ok(Ok(_)) => Ok(Outcome::Done),
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(statefulset = name, "scale conflict: the cache is behind");
                Ok(Outcome::Stale)
            }
            Ok(Err(kube::Error::Api(status))) => Err(status.message),
            Ok(Err(error)) => Err(error.to_string()),
            Err(timed_out) => Err(timed_out.to_string()),
        }
    }
}

impl Pass<'_> {
    /// The ConfigMaps of the namespace in the cluster `member` lives in (its records are
    /// there).
    fn config_maps_of(&self, member: &str) -> Result<Api<ConfigMap>, Error> {
        let scaler = self.scaler;
        let (config_maps, _) = scaler.clusters.api(&scaler.namespace, member)?;
        Ok(config_maps)
    }
}

#[cfg(test)]
mod tests;
