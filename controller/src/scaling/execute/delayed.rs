//! Delayed downscale, carried out: every pod that stays is told to cancel any preparation
//! (DELETE), every pod that would go is asked to prepare (POST, answering since when), and the
//! StatefulSet scales down only as far as the pure [`decide`] allows from those answers.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_core::annotations::scaling::DelayedDownscale;
use baton_core::pod_address::{PodEndpoint, PodMethod};
use baton_core::statefulset::StatefulSetState;
use baton_shared::pod_client::PodCallError;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;

use super::{Pass, SetOutcome};
use crate::leader::MayAct;
use crate::queue::Requeue;
use baton_core::scaling::delayed_downscale::{
    self, DelayedDownscaleDecision, decide, parse_answer,
};

impl Pass<'_> {
    fn delayed_settings(&self, name: &str) -> Option<&DelayedDownscale> {
        self.member(name)?.delayed_downscale.as_ref().ok()?.as_ref()
    }

    /// The delayed-downscale endpoint of each pod at an index in `indexes`.
    fn endpoints(
        &self,
        statefulset: &StatefulSet,
        settings: &DelayedDownscale,
        indexes: std::ops::Range<i32>,
    ) -> Vec<(i32, Result<PodEndpoint, String>)> {
        delayed_downscale::endpoints(
            statefulset,
            self.pods,
            settings,
            indexes,
            self.scaler.addressing,
            &self.scaler.cluster_domain,
            &self.scaler.namespace,
        )
    }

    /// DELETE to pods `[0, keep)`: they stay, so any preparation is cancelled. Failures are
    /// only logged (the next pass repeats it); 409 means nothing to cancel.
    pub(super) async fn cancel_delayed_downscale(&self, name: &str, keep: i32) {
        let (Some(statefulset), Some(settings)) =
            (self.statefulset(name), self.delayed_settings(name))
        else {
            return;
        };
        let endpoints: Vec<PodEndpoint> = self
            .endpoints(statefulset, settings, 0..keep)
            .into_iter()
            .filter_map(|(_, endpoint)| endpoint.ok())
            .collect();
        let failures: Vec<PodCallError> = self
            .scaler
            .pods
            .call_each(PodMethod::Delete, &endpoints)
            .await
            .into_iter()
            .filter(|error| !is_conflict(error))
            .collect();
        for failure in &failures {
            tracing::debug!(statefulset = name, error = %failure, "cancelling a delayed-downscale preparation failed; retried next pass");
        }
    }

    /// DELETE to `[0, to)`, POST to `[to, from)`, then scale as far down as the answers allow.
    pub(super) async fn delayed_downscale(
        &self,
        name: &str,
        from: i32,
        to: i32,
        may_act: &MayAct,
    ) -> Requeue {
        let (Some(statefulset), Some(settings)) =
            (self.statefulset(name), self.delayed_settings(name))
        else {
            return Requeue::Never;
        };
        self.cancel_delayed_downscale(name, to).await;
        let going = self.endpoints(statefulset, settings, to..from);
        let calls: Vec<_> = going
            .into_iter()
            .map(|(ordinal, endpoint)| async move {
                let answer = match endpoint {
                    Ok(endpoint) => self
                        .scaler
                        .pods
                        .call(PodMethod::Post, &endpoint)
                        .await
                        .map_err(|error| error.to_string())
                        .and_then(|body| parse_answer(&body)),
                    Err(error) => Err(error),
                };
                (ordinal, answer)
            })
            .collect();
        let answers: BTreeMap<i32, Result<Timestamp, String>> = futures::stream::iter(calls)
            .buffer_unordered(self.scaler.max_concurrent_calls)
            .collect()
            .await;
        let now = Timestamp::now();
        let state = StatefulSetState::of(statefulset);
        let names = state.pod_names();
        match decide(names, from, to, settings.delay, &answers, now) {
            // The pods' answers took time: what is left of the term is read again.
            DelayedDownscaleDecision::ScaleTo { replicas } => match may_act() {
                None => Requeue::Never,
                Some(left) => match self.set_replicas(name, replicas, left).await {
                    SetOutcome::Done => {
                        self.tell_scaled_down(name, from, to, replicas, settings.delay)
                            .await;
                        self.write_back(name, replicas).await;
                        Requeue::Never
                    }
                    SetOutcome::Stale => Requeue::After(Duration::from_millis(200)),
                    SetOutcome::Failed(error) => {
                        self.tell_scale_failed(name, from, replicas, &error).await;
                        Requeue::After(self.scaler.poll_interval)
                    }
                },
            },
            DelayedDownscaleDecision::Wait { until } => {
                let last = names.at(from - 1);
                self.tell_delayed_waiting(name, from, to, settings.delay, &last, until)
                    .await;
                Requeue::at(until)
            }
            DelayedDownscaleDecision::Blocked { failures } => {
                self.tell_prepare_failed(name, from, to, &failures).await;
                Requeue::After(self.scaler.poll_interval)
            }
        }
    }
}

/// A pod answering 409 to DELETE has nothing to cancel: success.
fn is_conflict(error: &PodCallError) -> bool {
    matches!(
        error,
        PodCallError::Status {
            method: PodMethod::Delete,
            status: 409,
            ..
        }
    )
}
