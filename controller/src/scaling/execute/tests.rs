//! The scaling executor against a mocked API server: what each answer to a `/scale` call does
//! to the pass (done, stale, refused) and what a person is told; and whole passes against a
//! recorded API server: every request in order, a refused one, the term ending between two.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_config::Config;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::client::Body;
use prometheus::Registry;
use serde_json::json;
use tower_test::mock;

use super::Scaler;
use crate::clusters::Clusters;
use crate::explain::Explainer;
use crate::queue::Requeue;
use crate::runner::MayAct;
use crate::runner::recorded::{self, Reply};
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
    let scaler =
        Scaler::new(Clusters::single(client), &config, &Registry::new()).expect("a scaler");
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
            &[],
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
    (requeue, patch, told, labels(&failures))
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
    assert_eq!(failures, ["scale_write"], "counted by what failed");
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

/// Zone a mirrors the Widget `ingesters`, found by discovery under these paths.
const DISCOVER: &str = "GET /apis/example.com/v1";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/mimir/widgets/ingesters";
const SCALE_A: &str = "PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester-zone-a/scale";

/// What the recorded API server answers in [`scaled_up_to_its_widget`]: discovery finds
/// `Widget` with a scale subresource; the Widget wants 3 replicas and says 2 run; every write
/// is accepted.
fn widget_world(method: &Method, path: &str) -> Reply {
    match (method.as_str(), path) {
        ("GET", "/apis/example.com/v1") => Reply::Object(json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
            "resources": [
                {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
                 "verbs": ["get", "list", "watch", "patch"]},
                {"name": "widgets/scale", "singularName": "", "namespaced": true, "kind": "Scale",
                 "group": "autoscaling", "version": "v1", "verbs": ["get", "patch"]},
                {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget",
                 "verbs": ["get", "patch"]},
            ],
        })),
        ("GET", _) if path == format!("{WIDGETS}/scale") => Reply::Object(json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "ingesters", "namespace": NAMESPACE},
            "spec": {"replicas": 3}, "status": {"replicas": 2},
        })),
        ("PATCH", _) if path.ends_with("/scale") => Reply::Object(json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "ingester-zone-a"}, "spec": {"replicas": 3},
        })),
        ("PATCH", _) if path == format!("{WIDGETS}/status") => Reply::Object(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "ingesters", "namespace": NAMESPACE}, "status": {"replicas": 3},
        })),
        _ => Reply::Status(404),
    }
}

/// One pass with two writes to make: zone a (2 replicas) mirrors a Widget that wants 3, so it
/// is scaled to 3 and then 3 is written back to the Widget's status. The API server answers
/// by `script`, the pass acts within `may_act`. Returns the requests recorded and what the pass
/// reports failed.
async fn scaled_up_to_its_widget(
    script: impl Fn(&Method, &str) -> Reply + Send + 'static,
    may_act: MayAct,
) -> (Vec<String>, Vec<&'static str>) {
    baton_shared::crypto::install_default_provider();
    let (client, recorded) = recorded::api(NAMESPACE, script);
    let config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    let scaler =
        Scaler::new(Clusters::single(client), &config, &Registry::new()).expect("a scaler");
    let (explainer, _told) = Explainer::with_queue(Duration::from_secs(600), 16);
    let mut mirrored = statefulset("ingester-zone-a", 2, None);
    Arc::make_mut(&mut mirrored).metadata.annotations = Some(
        [
            (
                "grafana.com/rollout-mirror-replicas-from-resource-name",
                "ingesters",
            ),
            (
                "grafana.com/rollout-mirror-replicas-from-resource-kind",
                "Widget",
            ),
            (
                "grafana.com/rollout-mirror-replicas-from-resource-api-version",
                "example.com/v1",
            ),
        ]
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .into(),
    );
    let (ledger, tracker) = Default::default();
    let (_, failures) = scaler
        .reconcile(
            "ingester",
            &[mirrored],
            &[],
            (&ledger, &tracker),
            &[],
            &explainer,
            &may_act,
        )
        .await;
    (recorded.requests(), labels(&failures))
}

/// What failed in a pass, by the labels they are counted under.
fn labels(failures: &[crate::error::Error]) -> Vec<&'static str> {
    failures
        .iter()
        .map(crate::error::Error::metric_label)
        .collect()
}

fn lasting() -> MayAct {
    Arc::new(|| Some(Duration::MAX))
}

#[tokio::test]
async fn a_pass_reads_its_reference_then_scales_then_writes_back_and_nothing_else() {
    let (requests, failures) = scaled_up_to_its_widget(widget_world, lasting()).await;
    let (read, write_back) = (
        format!("GET {WIDGETS}/scale"),
        format!("PATCH {WIDGETS}/status"),
    );
    assert_eq!(requests, [DISCOVER, &read, SCALE_A, &write_back]);
    assert_eq!(failures, Vec::<&str>::new());
}

#[tokio::test]
async fn a_refused_scale_ends_the_replica_change_before_its_write_back() {
    let (requests, failures) = scaled_up_to_its_widget(
        |method, path| match (method.as_str(), path.ends_with("/scale")) {
            ("PATCH", true) => Reply::Status(403),
            _ => widget_world(method, path),
        },
        lasting(),
    )
    .await;
    let read = format!("GET {WIDGETS}/scale");
    assert_eq!(requests, [DISCOVER, &read, SCALE_A]);
    assert_eq!(failures, ["scale_write"]);
}

#[tokio::test]
async fn a_term_ending_between_the_scale_and_its_write_back_ends_the_pass() {
    // The term ends while the API server answers the scale.
    let ended = Arc::new(AtomicBool::new(false));
    let ending = ended.clone();
    let (requests, failures) = scaled_up_to_its_widget(
        move |method, path| {
            if method == Method::PATCH {
                ending.store(true, Ordering::SeqCst);
            }
            widget_world(method, path)
        },
        Arc::new(move || (!ended.load(Ordering::SeqCst)).then_some(Duration::MAX)),
    )
    .await;
    let read = format!("GET {WIDGETS}/scale");
    assert_eq!(requests, [DISCOVER, &read, SCALE_A]);
    assert_eq!(failures, Vec::<&str>::new(), "a lost term is no failure");
}

/// The recorded API servers of three member clusters (and the hub, which none of them is):
/// the ledger and the tracker are there, empty, but in `failing`, whose ledger read answers
/// 500; every `/scale` patch is accepted.
fn member_apis(
    failing: Option<&'static str>,
) -> (Clusters, Vec<(&'static str, recorded::Recorded)>) {
    member_apis_with(failing, serde_json::Value::Null)
}

/// [`member_apis`], cluster-b's ledger holding `ledger_b` (its `data`); every ConfigMap and
/// StatefulSet write is accepted.
fn member_apis_with(
    failing: Option<&'static str>,
    ledger_b: serde_json::Value,
) -> (Clusters, Vec<(&'static str, recorded::Recorded)>) {
    let (hub, hub_recorded) = recorded::api(NAMESPACE, |_, _| Reply::Status(404));
    let mut members = Vec::new();
    let mut recordings = vec![("hub", hub_recorded)];
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        let fails = failing == Some(cluster);
        let data = if cluster == "cluster-b" {
            ledger_b.clone()
        } else {
            serde_json::Value::Null
        };
        let (client, recorded) = recorded::api(NAMESPACE, move |method, path| {
            match (method.as_str(), path) {
                ("GET", _) if fails && path.ends_with("/configmaps/baton-downscale-ingester") => {
                    Reply::Status(500)
                }
                ("GET" | "PUT" | "PATCH", _) if path.contains("/configmaps/") => {
                    let data = if path.ends_with("/baton-downscale-ingester") {
                        data.clone()
                    } else {
                        serde_json::Value::Null
                    };
                    Reply::Object(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": path.rsplit('/').next(), "namespace": NAMESPACE,
                                     "resourceVersion": "5",
                                     "labels": {"app.kubernetes.io/managed-by": "baton"}},
                        "data": data,
                    }))
                }
                ("PATCH", _) if path.ends_with("/statefulsets/ingester") => Reply::Object(json!({
                    "apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": "ingester", "namespace": NAMESPACE},
                })),
                ("PATCH", _) if path.ends_with("/scale") => Reply::Object(json!({
                    "apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "ingester"}, "spec": {"replicas": 3},
                })),
                _ => Reply::Status(404),
            }
        });
        members.push((cluster, client));
        recordings.push((cluster, recorded));
    }
    (Clusters::connected_to(hub, members), recordings)
}

/// A pass over a group across three clusters: a leader in cluster-a (3 replicas), its
/// follower in cluster-b (2) naming it `cluster-a/ingester`, and cluster-c's member (3).
/// Returns each cluster's requests (sorted: the reads are concurrent), the reasons told and
/// what failed.
async fn pass_across_clusters(
    failing: Option<&'static str>,
    outages: &[baton_core::clusters::Outage],
) -> (
    Vec<(&'static str, Vec<String>)>,
    Vec<(String, String)>,
    Vec<&'static str>,
) {
    baton_shared::crypto::install_default_provider();
    let (clusters, recordings) = member_apis(failing);
    let config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    let scaler = Scaler::new(clusters, &config, &Registry::new()).expect("a scaler");
    let (explainer, mut events) = Explainer::with_queue(Duration::from_secs(600), 16);
    let members = [
        statefulset("cluster-a/ingester", 3, None),
        statefulset("cluster-b/ingester", 2, Some("cluster-a/ingester")),
        statefulset("cluster-c/ingester", 3, None),
    ];
    let may_act: MayAct = Arc::new(|| Some(std::time::Duration::MAX));
    let (ledger, tracker) = Default::default();
    let (_, failures) = scaler
        .reconcile(
            "ingester",
            &members,
            &[],
            (&ledger, &tracker),
            outages,
            &explainer,
            &may_act,
        )
        .await;
    let requests = recordings
        .into_iter()
        .map(|(cluster, recorded)| {
            let mut requests = recorded.requests();
            requests.sort();
            (cluster, requests)
        })
        .collect();
    let mut told = Vec::new();
    while let Ok(event) = events.try_recv() {
        let (reason, note) = event.reason_and_note();
        told.push((reason.to_owned(), note.to_owned()));
    }
    (requests, told, labels(&failures))
}

const LEDGER: &str = "GET /api/v1/namespaces/mimir/configmaps/baton-downscale-ingester";
const TRACKER: &str = "GET /api/v1/namespaces/mimir/configmaps/rollout-operator-zone-tracker";

#[tokio::test]
async fn a_follower_in_another_cluster_is_scaled_there_after_every_clusters_records_are_read() {
    let (requests, told, failures) = pass_across_clusters(None, &[]).await;
    assert_eq!(failures, Vec::<&str>::new());
    let reads = vec![LEDGER.to_owned(), TRACKER.to_owned()];
    let mut scaled = reads.clone();
    scaled.push("PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester/scale".to_owned());
    assert_eq!(
        requests,
        [
            ("hub", vec![]),
            ("cluster-a", reads.clone()),
            ("cluster-b", scaled),
            ("cluster-c", reads),
        ],
        "each cluster's records read there, the follower scaled in its own cluster alone: {told:?}"
    );
    assert!(
        told.iter().any(|(reason, note)| reason == reasons::SCALE_UP
            && note.contains("cluster-b/ingester scales up from 2 to 3")),
        "{told:?}"
    );
}

#[tokio::test]
async fn a_cluster_whose_ledger_cannot_be_read_holds_the_groups_scaling_naming_it() {
    let (requests, told, failures) = pass_across_clusters(Some("cluster-c"), &[]).await;
    assert_eq!(failures, Vec::<&str>::new(), "a hold is not a failure");
    for (cluster, requests) in &requests {
        assert!(
            requests.iter().all(|request| request.starts_with("GET ")),
            "nothing written in {cluster}: {requests:?}"
        );
    }
    let held: Vec<&str> = told
        .iter()
        .filter(|(reason, _)| reason == reasons::HELD)
        .map(|(_, note)| note.as_str())
        .collect();
    assert_eq!(held.len(), 3, "every member told: {told:?}");
    assert!(
        held.iter().all(|note| note.contains("cluster cluster-c cannot be read: reading the downscale ledger baton-downscale-ingester")),
        "{held:?}"
    );
}

#[tokio::test]
async fn a_cluster_out_holds_the_groups_scaling_naming_it() {
    let outage = baton_core::clusters::Outage {
        cluster: "cluster-b".into(),
        error: "watching its pods failed: connection refused".into(),
        listed: true,
    };
    let (requests, told, failures) = pass_across_clusters(None, &[outage]).await;
    assert_eq!(failures, Vec::<&str>::new());
    assert!(
        requests
            .iter()
            .all(|(_, requests)| requests.iter().all(|request| request.starts_with("GET "))),
        "nothing written: {requests:?}"
    );
    assert!(
        told.iter().any(|(reason, note)| reason == reasons::HELD
            && note.contains(
                "cluster cluster-b cannot be read: watching its pods failed: connection refused"
            )),
        "{told:?}"
    );
}

#[tokio::test]
async fn a_downscale_claimed_in_cluster_b_is_followed_up_in_cluster_b_alone() {
    // Given a downscale of cluster-b's member claimed in cluster-b's ledger (under its name
    // there) on generation 1, and the member now at generation 2: it happened
    baton_shared::crypto::install_default_provider();
    let at = jiff::Timestamp::from_second(1_700_000_000).expect("a time");
    let claim = baton_core::ledger::Entry::claim(at, "request-1", (3, 2), 1, None);
    let (clusters, recordings) = member_apis_with(
        None,
        json!({"ingester": serde_json::to_string(&claim).expect("JSON")}),
    );
    let config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    let scaler = Scaler::new(clusters, &config, &Registry::new()).expect("a scaler");
    let (explainer, _told) = Explainer::with_queue(Duration::from_secs(600), 16);
    let mut downscaled = statefulset("cluster-b/ingester", 2, None);
    Arc::make_mut(&mut downscaled).metadata.generation = Some(2);
    let members = [
        statefulset("cluster-a/ingester", 2, None),
        downscaled,
        statefulset("cluster-c/ingester", 2, None),
    ];
    let may_act: MayAct = Arc::new(|| Some(std::time::Duration::MAX));
    let (ledger, tracker) = Default::default();
    // When a pass runs
    let (_, failures) = scaler
        .reconcile(
            "ingester",
            &members,
            &[],
            (&ledger, &tracker),
            &[],
            &explainer,
            &may_act,
        )
        .await;
    // Then it is recorded in cluster-b's tracker, annotated on cluster-b's StatefulSet and
    // confirmed in cluster-b's ledger, each under its name there; the other clusters are only
    // read
    assert_eq!(labels(&failures), Vec::<&str>::new());
    let requests: BTreeMap<&str, Vec<String>> = recordings
        .into_iter()
        .map(|(cluster, recorded)| (cluster, recorded.requests()))
        .collect();
    let writes = |cluster: &str| -> Vec<String> {
        requests[cluster]
            .iter()
            .filter(|request| !request.starts_with("GET "))
            .cloned()
            .collect()
    };
    assert_eq!(
        writes("cluster-b"),
        [
            "PATCH /api/v1/namespaces/mimir/configmaps/rollout-operator-zone-tracker",
            "PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester",
            "PUT /api/v1/namespaces/mimir/configmaps/baton-downscale-ingester",
        ]
    );
    for cluster in ["hub", "cluster-a", "cluster-c"] {
        assert_eq!(writes(cluster), Vec::<String>::new(), "{cluster}");
    }
}
