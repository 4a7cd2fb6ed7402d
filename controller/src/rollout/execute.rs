//! Carries out a plan's actions against the API server: thin, bounded, and careful not to act on
//! a newer object than the one the plan was made from.
//!
//! A pod DELETE that gets no definite answer (it timed out, the connection broke, the server
//! failed) may still have been applied, so it is recorded in [`PendingDeletions`] exactly like
//! an accepted one: the next pass, made before the watch shows the pod terminating, must not
//! spend the same max-unavailable budget on another pod. Only a definite refusal from the API
//! server ([`DeleteAnswer::Rejected`]) leaves nothing pending. [`DeleteAnswer::of`] is the pure
//! classification; [`delete_pod`] the thin call around it.

use std::time::{Duration, Instant};

use baton_shared::kube_client::{TimedOut, bounded};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};

use crate::error::Error;
use crate::rollout::pending::PendingDeletions;
use baton_core::annotations::PARTITION_ANNOTATION;

/// What happened to an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionOutcome {
    /// Done as planned.
    Done,
    /// The pod was already gone, or a new pod of that name exists (uid precondition): nothing to do.
    AlreadyGone,
    /// The StatefulSet changed since it was cached; the next reconcile sees the new one.
    Stale,
}

/// What the answer to a pod DELETE says about the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteAnswer {
    /// The API server accepted it (2xx): the pod is being deleted.
    Applied,
    /// The API server refused it with this 4xx status: nothing was deleted. 404 (gone), 409
    /// (the uid precondition failed: another pod has the name), 403 (forbidden), 422 (invalid),
    /// but also 400, 401 and 429 (throttled before it ran).
    Rejected { code: u16 },
    /// No definite answer: the call timed out, failed in transport, the server failed (5xx) or
    /// answered 408, or the answer could not be read. The pod may be being deleted.
    Uncertain,
}

impl DeleteAnswer {
    /// Classifies the result of a bounded DELETE call.
    pub fn of<T>(result: &Result<Result<T, kube::Error>, TimedOut>) -> Self {
        match result {
            Ok(Ok(_)) => Self::Applied,
            Ok(Err(kube::Error::Api(status))) => Self::of_status(status.code),
            Ok(Err(_)) | Err(_) => Self::Uncertain,
        }
    }

    /// Classifies an HTTP status code of the API server's answer.
    pub fn of_status(code: u16) -> Self {
        match code {
            200..=299 => Self::Applied,
            408 => Self::Uncertain,
            400..=499 => Self::Rejected { code },
            _ => Self::Uncertain,
        }
    }

    /// Whether the pod may now be terminating, so must count as such until the cache shows it.
    pub fn may_have_deleted(self) -> bool {
        !matches!(self, Self::Rejected { .. })
    }
}

/// Deletes `pod` of rollout group `group` only if it is still the pod with `uid` (a pod
/// recreated under the same name is never deleted by mistake), and records the deletion in
/// `pending` unless the API server definitely refused it.
pub async fn delete_pod(
    pods: &Api<Pod>,
    pending: &PendingDeletions,
    group: &str,
    pod: &str,
    uid: &str,
    timeout: Duration,
) -> Result<DeletionOutcome, Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let result = bounded(
        timeout,
        format!("deleting pod {pod}"),
        pods.delete(pod, &params),
    )
    .await;
    let answer = DeleteAnswer::of(&result);
    if answer.may_have_deleted() {
        pending.record(group, uid, Instant::now());
    }
    match result {
        Ok(Ok(_)) => Ok(DeletionOutcome::Done),
        Ok(Err(_)) if matches!(answer, DeleteAnswer::Rejected { code: 404 | 409 }) => {
            Ok(DeletionOutcome::AlreadyGone)
        }
        Ok(Err(source)) => Err(Error::DeletePod {
            pod: pod.to_owned(),
            source,
        }),
        Err(timed_out) => Err(Error::TimedOut(timed_out)),
    }
}

/// Sets status.currentRevision with an update conditional on the cached resourceVersion (the
/// Go operator's `UpdateStatus`, so the same RBAC verb works).
pub async fn set_current_revision(
    statefulsets: &Api<StatefulSet>,
    cached: &StatefulSet,
    revision: &str,
    timeout: Duration,
) -> Result<DeletionOutcome, Error> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let mut updated = cached.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .current_revision = Some(revision.to_owned());
    let params = PostParams::default();
    let call = statefulsets.replace_status(&name, &params, &updated);
    match bounded(timeout, format!("updating the status of {name}"), call).await? {
        Ok(_) => Ok(DeletionOutcome::Done),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
            Ok(DeletionOutcome::Stale)
        }
        Err(source) => Err(Error::UpdateStatus {
            statefulset: name,
            source,
        }),
    }
}

/// Sets the partition of a StatefulSet rolled by partition, recording it as baton's in the same
/// write, if the partition is still the one the plan was made on: a JSON patch whose first
/// operation tests it, so a plan made on a stale copy, or against someone else's change, writes
/// nothing (422), while baton's own gate-state write in the same pass does not get in the way
/// (a resourceVersion precondition would fail on it, and lose the step the gate just allowed).
pub async fn set_partition(
    statefulsets: &Api<StatefulSet>,
    cached: &StatefulSet,
    partition: u32,
    timeout: Duration,
) -> Result<DeletionOutcome, Error> {
    let name = cached.metadata.name.clone().unwrap_or_default();
    let planned_on = cached.spec.as_ref().and_then(|spec| {
        spec.update_strategy
            .as_ref()?
            .rolling_update
            .as_ref()?
            .partition
    });
    let path = "/spec/updateStrategy/rollingUpdate";
    let mut operations = match planned_on {
        Some(planned_on) => vec![
            serde_json::json!({"op": "test", "path": format!("{path}/partition"), "value": planned_on}),
            serde_json::json!({"op": "replace", "path": format!("{path}/partition"), "value": partition}),
        ],
        // No partition written yet (the first hold): the version planned on must be current.
        None => vec![
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": cached.metadata.resource_version}),
            serde_json::json!({"op": "add", "path": path, "value": {"partition": partition}}),
        ],
    };
    if cached.metadata.annotations.is_none() {
        operations
            .push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    // `/` in a key is `~1` in a JSON pointer.
    let record = format!(
        "/metadata/annotations/{}",
        PARTITION_ANNOTATION.replace('/', "~1")
    );
    operations
        .push(serde_json::json!({"op": "add", "path": record, "value": partition.to_string()}));
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(operations)).expect("a JSON patch");
    let (params, patch) = (PatchParams::default(), Patch::<()>::Json(patch));
    let call = statefulsets.patch(&name, &params, &patch);
    match bounded(timeout, format!("setting the partition of {name}"), call).await? {
        Ok(_) => Ok(DeletionOutcome::Done),
        // 422: the partition changed since the plan (the test failed); 404: gone.
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 404 => {
            Ok(DeletionOutcome::Stale)
        }
        Err(source) => Err(Error::SetPartition {
            statefulset: name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use tower_test::mock;

    use super::*;

    const GROUP: &str = "ingester";
    const POD: &str = "ingester-zone-a-3";
    const UID: &str = "uid-3";
    const TIMEOUT: Duration = Duration::from_millis(200);

    #[test]
    fn only_a_definite_refusal_means_nothing_was_deleted() {
        for code in [200, 202] {
            assert_eq!(
                DeleteAnswer::of_status(code),
                DeleteAnswer::Applied,
                "{code}"
            );
        }
        for code in [404, 409, 422, 403, 400, 401, 429] {
            let answer = DeleteAnswer::of_status(code);
            assert_eq!(answer, DeleteAnswer::Rejected { code }, "{code}");
            assert!(!answer.may_have_deleted(), "{code}");
        }
        for code in [408, 500, 502, 503, 504] {
            let answer = DeleteAnswer::of_status(code);
            assert_eq!(answer, DeleteAnswer::Uncertain, "{code}");
            assert!(answer.may_have_deleted(), "{code}");
        }
        let timed_out: Result<Result<(), kube::Error>, TimedOut> = Err(TimedOut {
            what: "deleting pod x".into(),
            timeout: TIMEOUT,
        });
        assert_eq!(DeleteAnswer::of(&timed_out), DeleteAnswer::Uncertain);
        let transport: Result<Result<(), kube::Error>, TimedOut> =
            Ok(Err(kube::Error::Service("connection reset".into())));
        assert_eq!(DeleteAnswer::of(&transport), DeleteAnswer::Uncertain);
    }

    /// How the mocked API server answers the DELETE.
    enum Answer {
        Status(u16),
        /// The connection breaks before an answer.
        TransportError,
        /// No answer at all: the call runs into its timeout.
        Never,
    }

    /// Deletes [`POD`] through a kube client whose API server is `answer`, and returns the
    /// executor's outcome and whether the deletion is now pending.
    async fn delete_answered(answer: Answer) -> (Result<DeletionOutcome, Error>, bool) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut handle = pin!(handle);
            let (request, send) = handle.next_request().await.expect("the executor calls");
            assert_eq!(request.method(), http::Method::DELETE);
            assert_eq!(
                request.uri().path(),
                format!("/api/v1/namespaces/mimir/pods/{POD}")
            );
            let body = request.into_body().collect_bytes().await.expect("a body");
            let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(body["preconditions"]["uid"], UID, "{body}");
            match answer {
                Answer::Status(code) => {
                    let body = if (200..300).contains(&code) {
                        serde_json::json!({
                            "apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": POD, "uid": UID, "deletionTimestamp": "2026-01-01T00:00:00Z"},
                        })
                    } else {
                        serde_json::json!({
                            "apiVersion": "v1", "kind": "Status", "status": "Failure",
                            "message": format!("answered {code}"), "reason": "Test", "code": code,
                        })
                    };
                    let response = Response::builder()
                        .status(StatusCode::from_u16(code).expect("a status code"))
                        .body(Body::from(serde_json::to_vec(&body).expect("JSON")))
                        .expect("a response");
                    send.send_response(response);
                }
                Answer::TransportError => send.send_error(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection reset by peer",
                )),
                Answer::Never => {
                    // Hold the response open: dropping it would fail the call at once.
                    let _held = send;
                    std::future::pending::<()>().await;
                }
            }
        });
        let pods: Api<Pod> = Api::namespaced(kube::Client::new(service, "mimir"), "mimir");
        let pending = PendingDeletions::default();
        let outcome = delete_pod(&pods, &pending, GROUP, POD, UID, TIMEOUT).await;
        server.abort();
        if let Err(error) = server.await
            && error.is_panic()
        {
            std::panic::resume_unwind(error.into_panic());
        }
        (outcome, pending.contains(GROUP, UID))
    }

    #[tokio::test]
    async fn an_accepted_delete_is_done_and_pending() {
        for code in [200, 202] {
            let (outcome, pending) = delete_answered(Answer::Status(code)).await;
            assert_eq!(outcome.expect("no error"), DeletionOutcome::Done, "{code}");
            assert!(pending, "{code}");
        }
    }

    #[tokio::test]
    async fn a_delete_without_an_answer_is_pending() {
        let (outcome, pending) = delete_answered(Answer::Never).await;
        assert!(matches!(outcome, Err(Error::TimedOut(_))), "{outcome:?}");
        assert!(pending, "a timed-out delete may have been applied");

        let (outcome, pending) = delete_answered(Answer::TransportError).await;
        let error = outcome.expect_err("the transport failed");
        assert_eq!(error.metric_label(), "delete_pod");
        assert!(error.to_string().contains(POD), "{error}");
        assert!(pending, "a delete lost in transport may have been applied");

        let (outcome, pending) = delete_answered(Answer::Status(503)).await;
        assert!(outcome.is_err());
        assert!(
            pending,
            "a server error may come after the delete was applied"
        );
    }

    #[tokio::test]
    async fn a_refused_delete_is_not_pending() {
        for code in [404, 409] {
            let (outcome, pending) = delete_answered(Answer::Status(code)).await;
            assert_eq!(
                outcome.expect("no error"),
                DeletionOutcome::AlreadyGone,
                "{code}"
            );
            assert!(!pending, "{code}");
        }
        for code in [403, 422] {
            let (outcome, pending) = delete_answered(Answer::Status(code)).await;
            let error = outcome.expect_err("refused");
            assert!(error.to_string().contains(POD), "{code}: {error}");
            assert!(!pending, "{code}");
        }
    }
}
