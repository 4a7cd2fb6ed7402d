//! Downscales approved by prepare-downscale, followed up once the StatefulSet shows whether they
//! happened ([`follow_up_claims`], pure, decides):
//! - one that happened is copied into the Go operator's zone tracker and the
//!   `grafana.com/last-downscale` annotation, then confirmed in the ledger. These writes wait
//!   until now because the webhook must not write the object it is admitting (the update would
//!   fail on its own resourceVersion);
//! - one that never landed (the update failed after admission) has its pods told to cancel
//!   (DELETE, as the webhook's undo does) and the last downscale before it put back, so it no
//!   longer holds the other zones.
//!
//! Each write is conditioned on the version the decision was made on; one ledger write per pass,
//! as the next needs the version the first produced (its watch event brings the group back).

use std::time::Duration;

use baton_core::annotations::LAST_DOWNSCALE_ANNOTATION;
use baton_core::downscale_history::{ClaimFollowUp, ZoneTracker, follow_up_claims, pods_to_cancel};
use baton_core::ledger::{Entry, Ledger, ledger_name};
use baton_core::pod_address::{PodEndpoint, PodMethod, PrepareEndpoint};
use baton_shared::downscale_history::record_in_tracker;
use baton_shared::kube_client::bounded;
use baton_shared::ledger::{self, Written};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use super::Pass;
use crate::explain::Severity;
use crate::leader::MayAct;
use crate::queue::Requeue;

/// Event reasons.
const RECORDED: &str = "DownscaleRecorded";
const NOT_APPLIED: &str = "DownscaleNotApplied";

/// Why following up a claim failed; the group comes back soon and decides again.
#[derive(Debug, thiserror::Error)]
enum FollowUpError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    TimedOut(#[from] baton_shared::kube_client::TimedOut),
    #[error("{0} changed meanwhile")]
    Changed(String),
}

impl Pass<'_> {
    /// Follows up the pending claims of the group's ledger; returns when to look again.
    pub(super) async fn follow_up_claims(
        &self,
        group: &str,
        (ledger, tracker): (&Ledger, &ZoneTracker),
        now: Timestamp,
        may_act: &MayAct,
    ) -> Requeue {
        let grace = self.scaler.claim_grace;
        let mut requeue = Requeue::Never;
        for follow_up in
            follow_up_claims(ledger, self.members.iter().map(AsRef::as_ref), now, grace)
        {
            if may_act().is_none() {
                break;
            }
            let result = match &follow_up {
                ClaimFollowUp::Recheck { at } => {
                    requeue = requeue.sooner(Requeue::at(*at));
                    continue;
                }
                ClaimFollowUp::Confirm { statefulset, entry } => {
                    self.confirm(group, ledger, tracker, statefulset, entry)
                        .await
                }
                ClaimFollowUp::Void { statefulset, entry } => {
                    self.void(group, ledger, statefulset, entry).await
                }
            };
            if let Err(error) = result {
                self.failed(super::super::DOWNSCALE_FOLLOW_UP);
                tracing::warn!(%error, ?follow_up, "following up an approved downscale failed; retrying");
                return requeue.sooner(Requeue::After(Duration::from_secs(1)));
            }
            // The ledger's version moved: the next claim waits for its watch event.
            return requeue;
        }
        requeue
    }

    /// A downscale that happened: into the tracker and the annotation, then confirmed.
    async fn confirm(
        &self,
        group: &str,
        ledger: &Ledger,
        tracker: &ZoneTracker,
        name: &str,
        entry: &Entry,
    ) -> Result<(), FollowUpError> {
        let Some(statefulset) = self.statefulset(name) else {
            return Ok(());
        };
        let at = entry
            .at()
            .map_err(|_| FollowUpError::Changed("the entry".into()))?;
        // Both copies hold whole seconds, as the Go operator writes them.
        let at = Timestamp::from_second(at.as_second()).unwrap_or(at);
        let scaler = self.scaler;
        let config_maps: Api<ConfigMap> = Api::namespaced(scaler.client.clone(), &scaler.namespace);
        if !matches!(tracker.last_downscaled(name), Ok(Some(tracked)) if tracked >= at) {
            let written = bounded(
                scaler.request_timeout,
                format!("recording {name}'s downscale in the zone tracker"),
                record_in_tracker(&config_maps, &scaler.zone_tracker, tracker, name, at),
            )
            .await??;
            if !written {
                return Err(FollowUpError::Changed(format!(
                    "the zone tracker {}",
                    scaler.zone_tracker
                )));
            }
        }
        let annotated = statefulset
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(LAST_DOWNSCALE_ANNOTATION))
            .and_then(|text| text.parse::<Timestamp>().ok());
        if annotated.is_none_or(|annotated| annotated < at) {
            // Metadata only: no new generation, nothing for the StatefulSet controller to do.
            let patch = serde_json::json!({"metadata": {"annotations": {
                LAST_DOWNSCALE_ANNOTATION: at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            }}});
            let statefulsets: Api<StatefulSet> =
                Api::namespaced(scaler.client.clone(), &scaler.namespace);
            bounded(
                scaler.request_timeout,
                format!("annotating {name} with its last downscale"),
                statefulsets.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await??;
        }
        // Pods the downscale no longer removes (scaled up again since, or another change
        // moved the generation while this update failed) must not stay prepared.
        let cancelled = self.cancel_preparation(statefulset, entry).await;
        self.write_ledger(group, ledger, name, entry, Some(&entry.confirmed()))
            .await?;
        let (from, to) = (
            entry.from_replicas.unwrap_or(0),
            entry.to_replicas.unwrap_or(0),
        );
        let mut note = format!(
            "{name} was downscaled from {from} to {to} at {at}; recorded in the zone tracker {} and the {LAST_DOWNSCALE_ANNOTATION} annotation",
            scaler.zone_tracker
        );
        if !cancelled.is_empty() {
            note.push_str(&format!(
                "; {} stay and were told to cancel their preparation",
                cancelled.join(", ")
            ));
        }
        self.say(name, Severity::Normal, RECORDED, "Record", note)
            .await;
        Ok(())
    }

    /// A downscale that never landed: its pods told to cancel, the downscale before it back.
    async fn void(
        &self,
        group: &str,
        ledger: &Ledger,
        name: &str,
        entry: &Entry,
    ) -> Result<(), FollowUpError> {
        let Some(statefulset) = self.statefulset(name) else {
            return Ok(());
        };
        let cancelled = self.cancel_preparation(statefulset, entry).await;
        let previous = entry
            .previous
            .as_deref()
            .and_then(|text| text.parse::<Timestamp>().ok())
            .map(|at| Entry::new(at, &entry.request));
        self.write_ledger(group, ledger, name, entry, previous.as_ref())
            .await?;
        let (from, to) = (
            entry.from_replicas.unwrap_or(0),
            entry.to_replicas.unwrap_or(0),
        );
        let told = if cancelled.is_empty() {
            String::new()
        } else {
            format!(
                "; {} were told to cancel their preparation",
                cancelled.join(", ")
            )
        };
        self.say(
            name,
            Severity::Warning,
            NOT_APPLIED,
            "Release",
            format!(
                "the downscale of {name} from {from} to {to} approved at {} never happened (its spec is unchanged {} later): it no longer holds other zones' downscales{told}",
                entry.last_downscale,
                baton_core::duration::prometheus::format(self.scaler.claim_grace),
            ),
        )
        .await;
        Ok(())
    }

    /// Tells the pods [`pods_to_cancel`] names to undo their preparation; returns their names.
    /// A pod that cannot be told is logged: the claim is followed up all the same, as the
    /// webhook's undo does.
    async fn cancel_preparation(&self, statefulset: &StatefulSet, entry: &Entry) -> Vec<String> {
        let Ok(prepare) = PrepareEndpoint::of(statefulset) else {
            return Vec::new();
        };
        let scaler = self.scaler;
        let endpoints: Vec<PodEndpoint> =
            pods_to_cancel(entry, statefulset, self.pods.iter().map(AsRef::as_ref))
                .into_iter()
                .filter_map(|pod| {
                    let endpoint = prepare.of_pod(
                        scaler.addressing,
                        &scaler.cluster_domain,
                        &pod.name,
                        &pod.namespace,
                        pod.ip.as_deref(),
                    );
                    match endpoint {
                        Ok(endpoint) => Some(endpoint),
                        Err(error) => {
                            tracing::warn!(%error, "cannot tell a pod to cancel its preparation");
                            None
                        }
                    }
                })
                .collect();
        let told_before = !self.cancellations().insert(entry.request.clone());
        if !told_before {
            for error in scaler.pods.call_each(PodMethod::Delete, &endpoints).await {
                tracing::warn!(%error, "telling a pod to cancel its preparation failed");
            }
        }
        endpoints.into_iter().map(|endpoint| endpoint.pod).collect()
    }

    /// The downscales whose pods were told to cancel, follow-up not yet stored.
    fn cancellations(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        // Whole entries only: the set is sound after a panic elsewhere.
        self.scaler
            .cancelled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores the follow-up of the claim `followed` (`entry`: what replaces it, if anything).
    async fn write_ledger(
        &self,
        group: &str,
        ledger: &Ledger,
        name: &str,
        followed: &Entry,
        entry: Option<&Entry>,
    ) -> Result<(), FollowUpError> {
        let scaler = self.scaler;
        let config_maps: Api<ConfigMap> = Api::namespaced(scaler.client.clone(), &scaler.namespace);
        let ledger_name = ledger_name(group);
        let written = bounded(
            scaler.request_timeout,
            format!("following up {name}'s downscale in {ledger_name}"),
            ledger::write(
                &config_maps,
                &ledger_name,
                group,
                &ledger.with_entry(name, entry),
            ),
        )
        .await??;
        match written {
            Written::Done(_) => {
                self.cancellations().remove(&followed.request);
                Ok(())
            }
            Written::Conflict => Err(FollowUpError::Changed(ledger_name)),
        }
    }
}
