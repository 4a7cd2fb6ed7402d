//! The scaling executor against a mocked API server: what each answer to a `/scale` call does
//! to the pass (done, stale, refused) and what a person is told.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use baton_config::Config;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::client::Body;
use prometheus::Registry;
use serde_json::json;
use tower_test::mock;

use super::Scaler;
use crate::explain::Explainer;
use crate::leader::MayAct;
use crate::queue::Requeue;
use baton_core::scaling::plan::reasons;

const NAMESPACE: &str = "mimir";
const POLL: Duration = Duration::from_secs(7);

fn statefulset(name: &str, replicas: i32, leader: Option<&str>) -> Arc<StatefulSet> {
    let annotations = match leader {
        Some(leader) => json!({"grafana.com/rollout-downscale-leader": leader}),
        None => json!({}),
    };
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"),
                         "resourceVersion": "41", "labels": {"rollout-group": "ingester"},
                         "annotations": annotations},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"z": name}},
                     "template": {"metadata": {"labels": {"z": name}}, "spec": {"containers": []}}},
            "status": {"replicas": replicas, "readyReplicas": replicas},
        }))
        .expect("a StatefulSet"),
    )
}

/// How the mocked API server answers the `/scale` patch.
fn answer(code: u16) -> Response<Body> {
    let body = if code == 200 {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "ingester-zone-b"}, "spec": {"replicas": 3}})
    } else {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
               "reason": "Test", "message": format!("admission webhook denied the request ({code})")})
    };
    Response::builder()
        .status(StatusCode::from_u16(code).expect("a status code"))
        .body(Body::from(serde_json::to_vec(&body).expect("JSON")))
        .expect("a response")
}

/// A pass over a group whose follower zone b (2 replicas) must follow leader zone a (3): the
/// `/scale` patch is answered `code`. Returns the pass's requeue, the patch the executor sent,
/// the Events it told and what it reports failed.
async fn follower_scaled_up_answered(
    code: u16,
) -> (
    Requeue,
    serde_json::Value,
    Vec<(String, String)>,
    Vec<&'static str>,
) {
    baton_shared::crypto::install_default_provider();
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NAMESPACE);
    let mut config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    config.controller.scaling_poll_interval = baton_config::Duration(POLL);
    let scaler = Scaler::new(client, &config, &Registry::new()).expect("a scaler");
    let (explainer, mut events) = Explainer::with_queue(Duration::from_secs(600), 16);
    let members = [
        statefulset("ingester-zone-a", 3, None),
        statefulset("ingester-zone-b", 2, Some("ingester-zone-a")),
    ];
    let may_act: MayAct = Arc::new(|| Some(std::time::Duration::MAX));
    let api_server = async {
        let mut handle = pin!(handle);
        let (request, send) = handle.next_request().await.expect("the pass scales");
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(
            request.uri().path(),
            "/apis/apps/v1/namespaces/mimir/statefulsets/ingester-zone-b/scale"
        );
        let body = request.into_body().collect_bytes().await.expect("a body");
        send.send_response(answer(code));
        serde_json::from_slice::<serde_json::Value>(&body).expect("JSON")
    };
    let (ledger, tracker) = Default::default();
    let ((requeue, failures), patch) = tokio::join!(
        scaler.reconcile(
            "ingester",
            &members,
            &[],
            (&ledger, &tracker),
            &explainer,
            &may_act
        ),
        api_server
    );
    let mut told = Vec::new();
    while let Ok(event) = events.try_recv() {
        let (reason, note) = event.reason_and_note();
        told.push((reason.to_owned(), note.to_owned()));
    }
    (requeue, patch, told, failures)
}

#[tokio::test]
async fn a_scale_is_conditioned_on_the_cached_version_and_told_when_done() {
    let (requeue, patch, told, failures) = follower_scaled_up_answered(200).await;
    assert_eq!(failures, Vec::<&str>::new());
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 3}}),
        "a decision is never applied to a newer object"
    );
    assert_eq!(
        requeue,
        Requeue::Never,
        "the change's watch event brings the group back"
    );
    assert!(
        told.iter().any(|(reason, _)| reason == reasons::SCALE_UP),
        "{told:?}"
    );
}

#[tokio::test]
async fn a_conflict_means_the_cache_is_behind_and_the_group_comes_back_soon() {
    let (requeue, _, told, failures) = follower_scaled_up_answered(409).await;
    assert_eq!(failures, Vec::<&str>::new(), "a conflict is not a failure");
    assert_eq!(requeue, Requeue::After(Duration::from_millis(200)));
    assert!(
        told.iter()
            .all(|(reason, _)| reason != reasons::DENIED && reason != reasons::SCALE_UP),
        "nothing failed and nothing was done: {told:?}"
    );
}

#[tokio::test]
async fn a_refused_scale_is_told_with_the_api_servers_words_and_polled_again() {
    let (requeue, _, told, failures) = follower_scaled_up_answered(403).await;
    assert_eq!(requeue, Requeue::After(POLL));
    assert_eq!(
        failures,
        [crate::scaling::SCALE_WRITE],
        "counted by what failed"
    );
    let denied: Vec<&str> = told
        .iter()
        .filter(|(reason, _)| reason == reasons::DENIED)
        .map(|(_, note)| note.as_str())
        .collect();
    assert_eq!(
        denied,
        [
            "ingester-zone-b stays at 2: scaling it to 3 failed: admission webhook denied the request (403)"
        ]
    );
}
