//! The group reconcile's features never wait on each other. Against a mocked API server: a
//! reference whose API discovery never answers holds scaling, while the rollout's deletion in
//! the same pass goes out at once (before this reconcile ran them as siblings, the rollout
//! waited for scaling's reads, up to the request timeout per reference).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use baton_config::Config;
use baton_core::pods::CachedPod;
use baton_shared::pod_cache::PodCache;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::client::Body;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use prometheus::Registry;
use serde_json::json;
use tower_test::mock;

use super::GroupReconciler;
use crate::cache::Caches;
use crate::explain::{EventPublisher, Explainer};
use crate::metrics::ControllerMetrics;
use crate::queue::Requeue;
use crate::rollout::pending::PendingDeletions;
use crate::rollout::reconcile::Rollouts;
use crate::runner::MayAct;
use crate::runner::recorded::{self, Reply};
use crate::scaling::Scaler;
use crate::status::StatusBoard;
use crate::zpdb_check::ZoneBudgets;
use baton_shared::zpdb_cache::Known;

const NAMESPACE: &str = "mimir";
const GROUP: &str = "ingester";

/// A ready OnDelete zone of one pod; zone a has an update revision its pod does not run yet, and
/// mirrors its replicas from a `Widget` (a kind the mocked API server never answers about).
fn zone(zone: &str) -> (StatefulSet, Pod) {
    let name = format!("ingester-zone-{zone}");
    let uid = format!("uid-{zone}");
    let outdated = zone == "a";
    let mut annotations = json!({});
    if outdated {
        annotations = json!({
            "grafana.com/rollout-mirror-replicas-from-resource-name": "ingesters",
            "grafana.com/rollout-mirror-replicas-from-resource-kind": "Widget",
            "grafana.com/rollout-mirror-replicas-from-resource-api-version": "example.com/v1",
        });
    }
    let statefulset = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "resourceVersion": "1",
                     "labels": {"rollout-group": GROUP}, "annotations": annotations},
        "spec": {"replicas": 1, "serviceName": name,
                 "selector": {"matchLabels": {"zone": zone}},
                 "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"zone": zone}}, "spec": {"containers": []}}},
        "status": {"replicas": 1, "readyReplicas": 1, "currentReplicas": 1,
                   "currentRevision": "old", "updateRevision": if outdated { "new" } else { "old" }},
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-0"), "namespace": NAMESPACE, "uid": format!("pod-{uid}"),
                     "labels": {"zone": zone, "controller-revision-hash": "old"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                          "uid": uid, "controller": true}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                   "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
                                          "image": "x", "imageID": "x"}]},
    });
    (
        serde_json::from_value(statefulset).expect("a StatefulSet"),
        serde_json::from_value(pod).expect("a Pod"),
    )
}

fn group_caches() -> Caches {
    let (statefulsets, mut statefulset_writer) = reflector::store();
    let mut pods = Vec::new();
    for name in ["a", "b", "c"] {
        let (statefulset, pod) = zone(name);
        statefulset_writer.apply_watcher_event(&Event::Apply(statefulset));
        pods.push(CachedPod::of(&pod));
    }
    let (ledgers, _) = reflector::store();
    let (zone_tracker, _) = reflector::store();
    Caches::local(statefulsets, PodCache::of_pods(pods), ledgers, zone_tracker)
}

/// The reconciler of [`GROUP`] (zones a, b and c of [`group_caches`]) over `client`, with
/// calls bounded by a timeout far longer than any test waits, and its metrics in `registry`;
/// and its Events' publisher (kept, not run: the Events stay queued).
fn reconciler(
    client: kube::Client,
    registry: &Registry,
) -> (GroupReconciler, ControllerMetrics, EventPublisher) {
    let mut config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    config.kubernetes.request_timeout = baton_config::Duration(Duration::from_secs(600));
    let metrics = ControllerMetrics::register(registry).expect("metrics");
    let (explainer, publisher) = Explainer::new(
        crate::clusters::Clusters::single(client.clone()),
        "test".to_owned(),
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    let caches = group_caches();
    let budgets = ZoneBudgets::fixed(
        client.clone(),
        NAMESPACE,
        caches.clone(),
        Known::NotInstalled,
    );
    let reconciler = GroupReconciler {
        caches,
        metrics: metrics.clone(),
        explainer: explainer.clone(),
        may_start: Arc::new(|| Some(Arc::new(|| Some(Duration::MAX)) as MayAct)),
        rollouts: Rollouts {
            namespace: NAMESPACE.to_owned(),
            clusters: crate::clusters::Clusters::single(client.clone()),
            metrics: metrics.clone(),
            explainer,
            request_timeout: Duration::from_secs(600),
            pending: PendingDeletions::default(),
            budgets,
            status: StatusBoard::default(),
            gate_calls: crate::gates::calls::GateCalls::new(
                client.clone(),
                NAMESPACE.to_owned(),
                Duration::from_secs(600),
                &config.gates,
                None,
                tokio::sync::mpsc::unbounded_channel().0,
            )
            .expect("the gates' client"),
            completions: Default::default(),
        },
        scaler: Scaler::new(crate::clusters::Clusters::single(client), &config, registry)
            .expect("a scaler"),
    };
    (reconciler, metrics, publisher)
}

#[tokio::test]
async fn an_unreachable_reference_holds_scaling_but_not_the_rollout() {
    // Given a group whose zone a rolls and mirrors a reference the API server never answers
    // about, with calls bounded by a timeout far longer than this test waits.
    baton_shared::crypto::install_default_provider();
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NAMESPACE);
    let registry = Registry::new();
    let (reconciler, _, _publisher) = reconciler(client, &registry);

    // When the group is reconciled, the API server holds every call but the pod deletion.
    let api_server = async {
        let mut handle = pin!(handle);
        let mut held = Vec::new();
        loop {
            let (request, send) = handle.next_request().await.expect("the reconcile calls");
            let path = request.uri().path().to_owned();
            if request.method() == Method::DELETE {
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "ingester-zone-a-0", "uid": "pod-uid-a"}});
                let response = Response::builder()
                    .status(StatusCode::OK)
                    .body(Body::from(serde_json::to_vec(&pod).expect("JSON")))
                    .expect("a response");
                send.send_response(response);
                return (path, held);
            }
            held.push((path, send));
        }
    };
    let pass = async {
        tokio::select! {
            answered = api_server => answered,
            requeue = reconciler.reconcile(GROUP) => {
                panic!("the pass ended ({requeue:?}) without deleting the outdated pod")
            }
        }
    };
    // A deadline far below the calls' timeout: the rollout must not wait for scaling at all.
    let (deleted, held) = tokio::time::timeout(Duration::from_secs(30), pass)
        .await
        .expect("the rollout's deletion waited for scaling's unanswered call");

    // Then the rollout deleted zone a's outdated pod while scaling's discovery of the
    // reference was still unanswered.
    assert_eq!(deleted, "/api/v1/namespaces/mimir/pods/ingester-zone-a-0");
    let held: Vec<&str> = held.iter().map(|(path, _)| path.as_str()).collect();
    assert!(
        held.iter()
            .any(|path| path.starts_with("/apis/example.com/v1")),
        "scaling had asked about the reference and still waited: {held:?}"
    );
}

#[tokio::test]
async fn a_refused_deletion_fails_the_reconcile_and_is_counted_once_under_delete_pod() {
    // Given a group whose zone a rolls, and an API server that forbids deleting its pod (and
    // knows nothing of the reference zone a mirrors),
    baton_shared::crypto::install_default_provider();
    let (client, recorded) = recorded::api(NAMESPACE, |method, _| match *method {
        Method::DELETE => Reply::Status(403),
        _ => Reply::Status(404),
    });
    let registry = Registry::new();
    let (reconciler, metrics, _publisher) = reconciler(client, &registry);

    // When the group is reconciled,
    let requeue = reconciler.reconcile(GROUP).await;

    // then the reconcile fails, having asked for the deletion,
    assert_eq!(requeue, Requeue::Failed);
    assert!(
        recorded
            .requests()
            .contains(&"DELETE /api/v1/namespaces/mimir/pods/ingester-zone-a-0".to_owned()),
        "{:?}",
        recorded.requests()
    );
    // and the failure is counted once, under the step that failed, and under no other label,
    let failures = metrics.failures.counter();
    let counted = |label: &str| failures.with_label_values(&[label]).get();
    assert_eq!(counted("delete_pod"), 1);
    let total: u64 = crate::error::METRIC_LABELS
        .iter()
        .map(|label| counted(label))
        .sum();
    assert_eq!(total, 1, "one failure, one count");
    // as the group's reconcile errors and failed reconciles count it.
    let group_errors = |label: &str| {
        metrics
            .reconcile_errors
            .with_label_values(&[GROUP, label])
            .get()
    };
    assert_eq!(group_errors("delete_pod"), 1);
    assert_eq!(
        metrics.reconciles_failed.with_label_values(&[GROUP]).get(),
        1
    );
}
