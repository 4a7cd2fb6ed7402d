//! Carries out a plan's actions against the API server: thin, bounded, and careful not to act on
//! a newer object than the one the plan was made from.

use std::time::Duration;

use baton_shared::kube_client::{TimedOut, bounded};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

/// What happened to an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done as planned.
    Done,
    /// The pod was already gone, or a new pod of that name exists (uid precondition): nothing to do.
    AlreadyGone,
    /// The StatefulSet changed since it was cached; the next reconcile sees the new one.
    Stale,
}

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("deleting pod {pod}: {source}")]
    DeletePod { pod: String, source: kube::Error },
    #[error("setting the current revision of {statefulset}: {source}")]
    UpdateStatus {
        statefulset: String,
        source: kube::Error,
    },
    #[error(transparent)]
    TimedOut(#[from] TimedOut),
}

impl ExecuteError {
    /// A short label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::DeletePod { .. } => "delete_pod",
            Self::UpdateStatus { .. } => "update_status",
            Self::TimedOut(_) => "timeout",
        }
    }
}

/// Deletes `pod` only if it is still the pod with `uid`: a pod recreated under the same name is
/// never deleted by mistake.
pub async fn delete_pod(
    pods: &Api<Pod>,
    pod: &str,
    uid: &str,
    timeout: Duration,
) -> Result<Outcome, ExecuteError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match bounded(
        timeout,
        format!("deleting pod {pod}"),
        pods.delete(pod, &params),
    )
    .await?
    {
        Ok(_) => Ok(Outcome::Done),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Outcome::AlreadyGone)
        }
        Err(source) => Err(ExecuteError::DeletePod {
            pod: pod.to_owned(),
            source,
        }),
    }
}

/// Sets status.currentRevision with an update conditional on the cached resourceVersion (the
/// Go operator's `UpdateStatus`, so the same RBAC verb works).
pub async fn set_current_revision(
    statefulsets: &Api<StatefulSet>,
    cached: &StatefulSet,
    revision: &str,
    timeout: Duration,
) -> Result<Outcome, ExecuteError> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let mut updated = cached.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .current_revision = Some(revision.to_owned());
    let params = PostParams::default();
    let call = statefulsets.replace_status(&name, &params, &updated);
    match bounded(timeout, format!("updating the status of {name}"), call).await? {
        Ok(_) => Ok(Outcome::Done),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
            Ok(Outcome::Stale)
        }
        Err(source) => Err(ExecuteError::UpdateStatus {
            statefulset: name,
            source,
        }),
    }
}
