//! The writes that follow up a downscale prepare-downscale approved, as the pass decided them
//! ([`baton_core::scaling::pass::FollowUp`]): the zone tracker and the
//! `grafana.com/last-downscale` annotation, the pods told to cancel, the ledger. Each write is
//! conditioned on the version the decision was made on; any failure ends the pass, counted.

use std::time::Duration;

use baton_core::annotations::LAST_DOWNSCALE_ANNOTATION;
use baton_core::ledger::{Entry, ledger_name};
use baton_core::pod_address::{PodEndpoint, PodMethod};
use baton_core::scaling::pass::{FollowUp, Outcome};
use baton_shared::downscale_history::record_in_tracker;
use baton_shared::kube_client::bounded;
use baton_shared::ledger::{self, Written};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams};

use super::Pass;
use crate::error::Error;

impl Pass<'_> {
    /// Carries out one step of a claim's follow-up.
    pub(super) async fn follow_up(&self, step: &FollowUp, timeout: Duration) -> Outcome {
        let result = match step {
            FollowUp::RecordInTracker { statefulset, at } => {
                self.record_in_tracker(statefulset, *at, timeout).await
            }
            FollowUp::AnnotateLastDownscale { statefulset, at } => {
                self.annotate(statefulset, *at, timeout).await
            }
            FollowUp::CancelPreparation {
                request,
                pods,
                unreachable,
            } => {
                for error in unreachable {
                    tracing::warn!(%error, "cannot tell a pod to cancel its preparation");
                }
                self.cancel_preparation(request, pods).await;
                Ok(())
            }
            FollowUp::StoreInLedger {
                statefulset,
                followed,
                entry,
            } => {
                self.write_ledger(statefulset, followed, entry.as_ref(), timeout)
                    .await
            }
            FollowUp::Unreadable { why, .. } => Err(Error::UnreadableRecord(why.clone())),
        };
        match result {
            Ok(()) => Outcome::Done,
            Err(error) => {
                tracing::warn!(%error, ?step, "following up an approved downscale failed; retrying");
                let outcome = match error {
                    Error::Changed(_) => Outcome::Stale,
                    _ => Outcome::Failed,
                };
                self.failed(Error::DownscaleFollowUp {
                    source: Box::new(error),
                });
                outcome
            }
        }
    }

    async fn record_in_tracker(
        &self,
        name: &str,
        at: Timestamp,
        timeout: Duration,
    ) -> Result<(), Error> {
        let scaler = self.scaler;
        let (tracker, key) = self
            .records
            .tracker_of(name)
            .ok_or_else(|| Error::Changed(format!("the zone tracker of {name}")))?;
        let config_maps = self.config_maps_of(name)?;
        let written = bounded(
            timeout,
            format!("recording {name}'s downscale in the zone tracker"),
            record_in_tracker(&config_maps, &scaler.zone_tracker, tracker, &key, at),
        )
        .await??;
        if !written {
            return Err(Error::Changed(format!(
                "the zone tracker {}",
                scaler.zone_tracker
            )));
        }
        Ok(())
    }

    async fn annotate(&self, name: &str, at: Timestamp, timeout: Duration) -> Result<(), Error> {
        let scaler = self.scaler;
        let patch = serde_json::json!({"metadata": {"annotations": {
            LAST_DOWNSCALE_ANNOTATION: at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }}});
        let (statefulsets, local): (Api<StatefulSet>, _) =
            scaler.clusters.api(&scaler.namespace, name)?;
        bounded(
            timeout,
            format!("annotating {name} with its last downscale"),
            statefulsets.patch(local, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await??;
        Ok(())
    }

    /// Tells `pods` to undo their preparation, unless told for `request` already (a retry
    /// after a conflicting write tells them no second time). A pod that cannot be told is
    /// logged: the claim is followed up all the same, as the webhook's undo does.
    async fn cancel_preparation(&self, request: &str, pods: &[PodEndpoint]) {
        let told_before = !self.cancellations().insert(request.to_owned());
        if !told_before {
            for error in self.scaler.pods.call_each(PodMethod::Delete, pods).await {
                tracing::warn!(%error, "telling a pod to cancel its preparation failed");
            }
        }
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
        name: &str,
        followed: &Entry,
        entry: Option<&Entry>,
        timeout: Duration,
    ) -> Result<(), Error> {
        let ledger_name = ledger_name(baton_core::namespaces::split(self.group).1);
        let (ledger, key) = self
            .records
            .ledger_of(name)
            .ok_or_else(|| Error::Changed(format!("the ledger {ledger_name} of {name}")))?;
        let config_maps = self.config_maps_of(name)?;
        let written = bounded(
            timeout,
            format!("following up {name}'s downscale in {ledger_name}"),
            ledger::write(
                &config_maps,
                &ledger_name,
                self.group,
                &ledger.with_entry(&key, entry),
            ),
        )
        .await??;
        match written {
            Written::Done(_) => {
                self.cancellations().remove(&followed.request);
                Ok(())
            }
            Written::Conflict => Err(Error::Changed(ledger_name)),
        }
    }
}
