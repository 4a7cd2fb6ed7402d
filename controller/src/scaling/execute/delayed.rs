//! Delayed downscale's pod calls: every pod that stays is told to cancel any preparation
//! (DELETE), every pod that would go is asked to prepare (POST, answering since when). What the
//! answers allow is the core's to decide ([`baton_core::scaling::pass::conclude`]).

use std::collections::BTreeMap;

use baton_core::pod_address::{PodEndpoint, PodMethod};
use baton_core::scaling::delayed_downscale::parse_answer;
use baton_core::scaling::pass::DelayedStep;
use baton_shared::pod_client::PodCallError;
use futures::StreamExt;
use jiff::Timestamp;

use super::Pass;

impl Pass<'_> {
    /// DELETE to the pods that stay. Failures are only logged (the next pass repeats it); 409
    /// means nothing to cancel.
    pub(super) async fn cancel_delayed_downscale(&self, name: &str, pods: &[PodEndpoint]) {
        let failures: Vec<PodCallError> = self
            .scaler
            .pods
            .call_each(PodMethod::Delete, pods)
            .await
            .into_iter()
            .filter(|error| !is_conflict(error))
            .collect();
        for failure in &failures {
            tracing::debug!(statefulset = name, error = %failure, "cancelling a delayed-downscale preparation failed; retried next pass");
        }
    }

    /// POST to each going pod: when it started preparing, by index, or why it could not say.
    pub(super) async fn prepare_delayed_downscale(
        &self,
        step: &DelayedStep,
    ) -> BTreeMap<i32, Result<Timestamp, String>> {
        let calls: Vec<_> = step
            .going
            .iter()
            .map(|(ordinal, endpoint)| async move {
                let answer = match endpoint {
                    Ok(endpoint) => self
                        .scaler
                        .pods
                        .call(PodMethod::Post, endpoint)
                        .await
                        .map_err(|error| error.to_string())
                        .and_then(|body| parse_answer(&body)),
                    Err(error) => Err(error.clone()),
                };
                (*ordinal, answer)
            })
            .collect();
        futures::stream::iter(calls)
            .buffer_unordered(self.scaler.max_concurrent_calls)
            .collect()
            .await
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
