//! prepare-downscale (mutating, no patch): before a labelled StatefulSet loses pods, every
//! pod going away is told to prepare (POST), and in a rollout group only one zone may be
//! downscaled per min-time.
//!
//! The decisions and their order are `baton_core::admission::prepare`'s; here the review is
//! decoded into a [`PrepareRequest`] (owned, so it can outlive the request body: the flow
//! finishes its undo even if the caller goes away), and `flow.rs` does the reads, the writes
//! and the pod calls the core's sequence asks for.

use baton_core::admission::Verdict;
use baton_core::admission::downscale::undecodable;
pub use baton_core::admission::prepare::PREPARE_DOWNSCALE_VALUE;
pub use baton_core::admission::prepare::flow::PrepareRequest;
use baton_core::admission::prepare::{check_statefulset, judged_kind};
use k8s_openapi::api::apps::v1::StatefulSet;

use super::object::{WorkloadKind, downscale_of};
use super::review::AdmissionRequest;

/// Judges what the review alone tells: dry runs, non-downscales and unsupported kinds end here.
pub fn prepare_request_of(request: &AdmissionRequest<'_>) -> Result<PrepareRequest, Verdict> {
    if request.is_dry_run() {
        return Err(Verdict::allow());
    }
    let (downscale, old) = downscale_of(request)?;
    judged_kind(&downscale, old.kind)?;
    if old.kind == WorkloadKind::StatefulSet {
        let json = request.old_object().unwrap_or("null");
        let statefulset =
            serde_json::from_str::<StatefulSet>(json).map_err(|error| undecodable("old", error))?;
        // Not opted in: allowed with no side effect, whoever sent the review. An opted-in
        // one is judged on the StatefulSet as stored (the flow reads it).
        // What the review's copy already refuses (a missing port annotation) is refused
        // without a read; neither has a side effect.
        check_statefulset(&downscale, &statefulset)?;
    }
    Ok(PrepareRequest {
        uid: request.uid.to_string(),
        downscale,
        stored_as: old.stored_as,
    })
}

pub mod flow;

#[cfg(test)]
mod tests;
