//! One rollout pass ([`Rollouts::reconcile`]) against a recorded API server: every request the
//! pass makes, in order; what a failed one does to the rest; a term ending between two; and a
//! rollback's start (the history read, then the records, then the request's removal) with a
//! stale write ending it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_config::Config;
use baton_core::pods::CachedPod;
use baton_shared::pod_cache::PodCache;
use baton_shared::zpdb_cache::Known;
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use prometheus::Registry;
use serde_json::json;

use super::pending::PendingDeletions;
use super::reconcile::Rollouts;
use crate::cache::Caches;
use crate::error::Error;
use crate::explain::Explainer;
use crate::metrics::ControllerMetrics;
use crate::queue::Requeue;
use crate::runner::MayAct;
use crate::runner::recorded::{self, Recorded, Reply};
use crate::status::StatusBoard;
use crate::zpdb_check::ZoneBudgets;

const NAMESPACE: &str = "mimir";
const GROUP: &str = "ingester";
const DELETE_0: &str = "DELETE /api/v1/namespaces/mimir/pods/ingester-zone-a-0";
const DELETE_1: &str = "DELETE /api/v1/namespaces/mimir/pods/ingester-zone-a-1";

/// A ready OnDelete zone of two pods, two at a time unavailable; an `outdated` one has an update
/// revision its pods do not run yet; `annotations` are added to its own.
fn zone(zone: &str, outdated: bool, annotations: &[(&str, &str)]) -> (StatefulSet, Vec<Pod>) {
    let name = format!("ingester-zone-{zone}");
    let uid = format!("uid-{zone}");
    let mut annotated = json!({"rollout-max-unavailable": "2"});
    for (key, value) in annotations {
        annotated[*key] = json!(value);
    }
    let statefulset = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "resourceVersion": "1",
                     "labels": {"rollout-group": GROUP}, "annotations": annotated},
        "spec": {"replicas": 2, "serviceName": name,
                 "selector": {"matchLabels": {"zone": zone}},
                 "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"zone": zone}}, "spec": {"containers": []}}},
        "status": {"replicas": 2, "readyReplicas": 2, "currentReplicas": 2,
                   "currentRevision": "old", "updateRevision": if outdated { "new" } else { "old" }},
    });
    let pods = (0..2)
        .map(|ordinal| {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{ordinal}"), "namespace": NAMESPACE,
                             "uid": format!("pod-{uid}-{ordinal}"),
                             "labels": {"zone": zone, "controller-revision-hash": "old"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                  "name": name, "uid": uid, "controller": true}]},
                "status": {"phase": "Running",
                           "conditions": [{"type": "Ready", "status": "True",
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                           "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
                                                  "image": "x", "imageID": "x"}]},
            });
            serde_json::from_value(pod).expect("a Pod")
        })
        .collect();
    (
        serde_json::from_value(statefulset).expect("a StatefulSet"),
        pods,
    )
}

/// The API server's answer to a pod DELETE that it accepts.
fn deleted(path: &str) -> Reply {
    let name = path.rsplit('/').next().unwrap_or_default();
    Reply::Object(json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": NAMESPACE}}))
}

/// A term that lasts throughout the pass.
fn lasting() -> MayAct {
    Arc::new(|| Some(Duration::MAX))
}

/// A term that ends once `ended` is set.
fn until(ended: &Arc<AtomicBool>) -> MayAct {
    let ended = ended.clone();
    Arc::new(move || (!ended.load(Ordering::SeqCst)).then_some(Duration::MAX))
}

/// One rollout pass over a group whose zone a's two pods are outdated, on an API server that
/// answers a request by `script`, within `may_act`. Returns the pass's result, the requests
/// recorded, and whether each of zone a's pods is now pending deletion.
async fn pass(
    script: impl Fn(&Method, &str) -> Reply + Send + 'static,
    may_act: MayAct,
) -> (Result<Requeue, Error>, Recorded, [bool; 2]) {
    let zones = ["a", "b", "c"].map(|name| zone(name, name == "a", &[]));
    pass_over(zones, script, may_act).await
}

/// One rollout pass over the group of `zones`, as [`pass`].
async fn pass_over(
    zones: [(StatefulSet, Vec<Pod>); 3],
    script: impl Fn(&Method, &str) -> Reply + Send + 'static,
    may_act: MayAct,
) -> (Result<Requeue, Error>, Recorded, [bool; 2]) {
    baton_shared::crypto::install_default_provider();
    let (client, recorded) = recorded::api(NAMESPACE, script);
    let config = Config {
        namespace: NAMESPACE.to_owned(),
        ..Config::default()
    };
    let (statefulsets, mut writer) = reflector::store();
    let (mut members, mut pods) = (Vec::new(), Vec::new());
    for (statefulset, zone_pods) in zones {
        writer.apply_watcher_event(&Event::Apply(statefulset.clone()));
        members.push(Arc::new(statefulset));
        pods.extend(zone_pods.iter().map(CachedPod::of));
    }
    let (ledgers, _) = reflector::store();
    let (zone_tracker, _) = reflector::store();
    let caches = Caches::local(
        statefulsets,
        PodCache::of_pods(pods.clone()),
        ledgers,
        zone_tracker,
    );
    let (explainer, _told) = Explainer::with_queue(Duration::from_secs(600), 64);
    let timeout = Duration::from_secs(600);
    let rollouts = Rollouts {
        namespace: NAMESPACE.to_owned(),
        clusters: crate::clusters::Clusters::single(client.clone()),
        metrics: ControllerMetrics::register(&Registry::new()).expect("metrics"),
        explainer,
        request_timeout: timeout,
        pending: PendingDeletions::default(),
        budgets: ZoneBudgets::fixed(client.clone(), NAMESPACE, caches, Known::NotInstalled),
        status: StatusBoard::default(),
        gate_calls: crate::gates::calls::GateCalls::new(
            client,
            NAMESPACE.to_owned(),
            timeout,
            &config.gates,
            None,
            tokio::sync::mpsc::unbounded_channel().0,
        )
        .expect("the gates' client"),
        completions: Default::default(),
    };
    let pods: Vec<Arc<CachedPod>> = pods.into_iter().map(Arc::new).collect();
    let result = rollouts
        .reconcile(GROUP, &members, &pods, &[], &may_act)
        .await;
    let pending = [0, 1].map(|ordinal| {
        rollouts
            .pending
            .contains(GROUP, &format!("pod-uid-a-{ordinal}"))
    });
    (result, recorded, pending)
}

#[tokio::test]
async fn a_pass_deletes_the_outdated_pods_in_order_and_nothing_else() {
    // Given zone a's two pods outdated and two allowed unavailable, when a pass runs,
    let (result, recorded, pending) = pass(
        |method, path| match *method {
            Method::DELETE => deleted(path),
            _ => Reply::Status(500),
        },
        lasting(),
    )
    .await;
    // then it deletes both, in order, and makes no other request.
    result.expect("the pass succeeds");
    assert_eq!(recorded.requests(), [DELETE_0, DELETE_1]);
    assert_eq!(pending, [true, true]);
}

#[tokio::test]
async fn a_refused_deletion_fails_the_pass_and_nothing_follows_it() {
    // Given an API server that forbids deleting the first pod,
    let (result, recorded, pending) = pass(
        |method, path| match *method {
            Method::DELETE if path.ends_with("-0") => Reply::Status(403),
            Method::DELETE => deleted(path),
            _ => Reply::Status(500),
        },
        lasting(),
    )
    .await;
    // then the pass fails on it, naming the step, and never asks for the second.
    let error = result.expect_err("a forbidden deletion fails the pass");
    assert_eq!(error.metric_label(), "delete_pod");
    assert_eq!(recorded.requests(), [DELETE_0]);
    assert_eq!(
        pending,
        [false, false],
        "a definite refusal deleted nothing"
    );
}

#[tokio::test]
async fn a_term_ending_between_two_deletions_ends_the_pass_before_the_second() {
    // Given a term that ends while the API server answers the first deletion,
    let ended = Arc::new(AtomicBool::new(false));
    let ending = ended.clone();
    let (result, recorded, pending) = pass(
        move |method, path| match *method {
            Method::DELETE => {
                ending.store(true, Ordering::SeqCst);
                deleted(path)
            }
            _ => Reply::Status(500),
        },
        until(&ended),
    )
    .await;
    // then the pass sends nothing after it, and waits for the next term's pass (which reads
    // again).
    assert_eq!(result.expect("a lost term is no failure"), Requeue::Never);
    assert_eq!(recorded.requests(), [DELETE_0]);
    assert_eq!(pending, [true, false]);
}

const REVISIONS: &str = "GET /apis/apps/v1/namespaces/mimir/controllerrevisions";
const PATCH_A: &str = "PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester-zone-a";
const PATCH_B: &str = "PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester-zone-b";
const PATCH_C: &str = "PATCH /apis/apps/v1/namespaces/mimir/statefulsets/ingester-zone-c";

/// Every zone rolling (none reached yet) and every member asking for a rollback.
fn asking_for_a_rollback() -> [(StatefulSet, Vec<Pod>); 3] {
    ["a", "b", "c"].map(|name| zone(name, true, &[("baton.dev/rollback", "me: errors up")]))
}

/// Answers the members' ControllerRevisions (none: each zone's current revision is where it
/// goes back to) and accepts every StatefulSet patch.
fn rollback_world(method: &Method, path: &str) -> Reply {
    match *method {
        Method::GET => Reply::Object(json!({"apiVersion": "apps/v1",
            "kind": "ControllerRevisionList", "metadata": {}, "items": []})),
        Method::PATCH => {
            let name = path.rsplit('/').next().unwrap_or_default();
            Reply::Object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                                 "metadata": {"name": name, "namespace": NAMESPACE}}))
        }
        _ => Reply::Status(500),
    }
}

#[tokio::test]
async fn a_rollback_starts_by_reading_history_then_storing_every_record_then_removing_the_request()
{
    // Given every member asking for a rollback, when a pass runs,
    let (result, recorded, pending) =
        pass_over(asking_for_a_rollback(), rollback_world, lasting()).await;
    // then it reads each member's history, stores the records on every member, then removes
    // the request from every member, and ends there: nothing is deleted in the same pass.
    assert_eq!(result.expect("the rollback starts"), Requeue::Never);
    assert_eq!(
        recorded.requests(),
        [
            REVISIONS, REVISIONS, REVISIONS, PATCH_A, PATCH_B, PATCH_C, PATCH_A, PATCH_B, PATCH_C
        ]
    );
    assert_eq!(pending, [false, false]);
}

#[tokio::test]
async fn a_record_found_stale_ends_the_rollbacks_start_and_leaves_the_request() {
    // Given member b changed since the pass read it (its record's write answers 409),
    let (result, recorded, _) = pass_over(
        asking_for_a_rollback(),
        |method, path| match *method {
            Method::PATCH if path.ends_with("ingester-zone-b") => Reply::Status(409),
            _ => rollback_world(method, path),
        },
        lasting(),
    )
    .await;
    // then nothing is written after it: the request stays for the next pass to start again.
    assert_eq!(result.expect("a stale write is no failure"), Requeue::Never);
    assert_eq!(
        recorded.requests(),
        [REVISIONS, REVISIONS, REVISIONS, PATCH_A, PATCH_B]
    );
}
