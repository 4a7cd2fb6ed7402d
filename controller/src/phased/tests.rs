//! A PhasedRollout round's requests, in order, on a recorded API server: what it writes while
//! its term lasts, and that nothing is written once the term has ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_core::phased::{FINALIZER, PhasedRollout};
use baton_shared::pod_cache::PodCache;
use http::Method;
use kube::runtime::reflector;
use serde_json::json;

use super::PhasedRollouts;
use crate::cache::Caches;
use crate::clusters::Clusters;
use crate::error::Error;
use crate::explain::Explainer;
use crate::runner::recorded::{self, Recorded, Reply};
use crate::runner::{MayAct, Runner};
use crate::status::StatusBoard;

const NAMESPACE: &str = "phased";
const TARGET: &str = "/apis/apps/v1/namespaces/phased/statefulsets/web";
const ROLLOUT: &str = "/apis/sts.plus/v1alpha1/namespaces/phased/phasedrollouts/web-rollout";

/// A PhasedRollout of the StatefulSet `web`: being deleted (holding its finalizer), or new.
fn rollout(deleting: bool) -> PhasedRollout {
    rollout_of("web", deleting)
}

/// A PhasedRollout of the target `target`, as [`rollout`].
fn rollout_of(target: &str, deleting: bool) -> PhasedRollout {
    let mut metadata = json!({"name": "web-rollout", "namespace": NAMESPACE, "uid": "uid-1",
        "resourceVersion": "7", "generation": 1});
    if deleting {
        metadata["finalizers"] = json!([FINALIZER]);
        metadata["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
    }
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {"targetRef": target, "check": {"periodSeconds": 5, "successThreshold": 1,
            "query": {"expr": "up", "url": "http://prometheus:9090"}}},
    }))
    .expect("a PhasedRollout")
}

/// The target, served by `web-rollout` (in its group).
fn served_target() -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NAMESPACE, "resourceVersion": "3",
            "labels": {"rollout-group": baton_core::phased::group_name("web-rollout")}}})
}

/// A term that answers `calls` times, then has ended.
fn term_for(calls: usize) -> MayAct {
    let asked = Arc::new(AtomicUsize::new(0));
    Arc::new(move || (asked.fetch_add(1, Ordering::SeqCst) < calls).then_some(Duration::MAX))
}

/// One round over `rollout` within `may_act`, on an API server answering by `script`.
async fn serve(
    rollout: &PhasedRollout,
    may_act: MayAct,
    script: impl Fn(&Method, &str) -> Reply + Send + 'static,
) -> (Result<(), Error>, Recorded) {
    baton_shared::crypto::install_default_provider();
    let (client, recorded) = recorded::api(NAMESPACE, script);
    let clusters = Clusters::single(client.clone());
    let (result, _) = serve_with(rollout, may_act, client, clusters, &[]).await;
    (result, recorded)
}

/// One round over `rollout` within `may_act`, the hub reached through `client`, targets
/// through `clusters`, whose members are `members`; returns what it told too.
async fn serve_with(
    rollout: &PhasedRollout,
    may_act: MayAct,
    client: kube::Client,
    clusters: Clusters,
    members: &[&str],
) -> (Result<(), Error>, Vec<(String, String)>) {
    let (statefulsets, _) = reflector::store();
    let (ledgers, _) = reflector::store();
    let (zone_tracker, _) = reflector::store();
    let caches = Caches::local(
        statefulsets,
        PodCache::of_pods(Vec::new()),
        ledgers,
        zone_tracker,
    );
    let (explainer, mut told) = Explainer::with_queue(Duration::from_secs(600), 16);
    let timeout = Duration::from_secs(600);
    let phased = PhasedRollouts {
        clusters,
        members: members.iter().map(|member| (*member).to_owned()).collect(),
        source: crate::watch_source::WatchSource::own(client.clone(), "unused"),
        client,
        namespace: NAMESPACE.to_owned(),
        request_timeout: timeout,
        caches,
        // (the runner below is what acts: `serve` is called with it)
        may_start: std::sync::Arc::new(|| None),
        board: StatusBoard::default(),
        explainer,
        failures: crate::error::register_failures(&prometheus::Registry::new()).expect("metrics"),
    };
    let runner = Runner::new(may_act, timeout);
    let result = phased.serve(&runner, rollout).await;
    let mut events = Vec::new();
    while let Ok(event) = told.try_recv() {
        let (reason, note) = event.reason_and_note();
        events.push((reason.to_owned(), note.to_owned()));
    }
    (result, events)
}

fn answer(method: &Method, path: &str) -> Reply {
    match (method, path) {
        (&Method::GET | &Method::PATCH, TARGET) => Reply::Object(served_target()),
        (&Method::PATCH, ROLLOUT) => {
            Reply::Object(serde_json::to_value(rollout(false)).expect("JSON"))
        }
        _ => Reply::Status(500),
    }
}

#[tokio::test]
async fn a_deleted_phased_rollout_hands_its_target_back_then_lets_go_of_its_finalizer() {
    // Given a PhasedRollout being deleted, whose target it serves, within a lasting term
    let (result, recorded) = serve(&rollout(true), term_for(usize::MAX), answer).await;
    // Then it reads the target, hands it back, and only then removes its finalizer
    result.expect("the round succeeds");
    assert_eq!(
        recorded.requests(),
        [
            format!("GET {TARGET}"),
            format!("PATCH {TARGET}"),
            format!("PATCH {ROLLOUT}")
        ]
    );
}

#[tokio::test]
async fn a_term_ending_between_two_writes_writes_nothing_after_it() {
    // Given the same, when the term ends once the target is handed back
    let (result, recorded) = serve(&rollout(true), term_for(1), answer).await;
    // Then the round ends there, the finalizer kept for the next term
    assert!(matches!(result, Err(Error::TermLost)), "{result:?}");
    assert_eq!(
        recorded.requests(),
        [format!("GET {TARGET}"), format!("PATCH {TARGET}")]
    );
}

#[tokio::test]
async fn a_round_whose_term_has_ended_writes_nothing() {
    // Given a new PhasedRollout (its first write is its finalizer), when the term has ended
    let (result, recorded) = serve(&rollout(false), term_for(0), answer).await;
    // Then nothing is sent at all
    assert!(matches!(result, Err(Error::TermLost)), "{result:?}");
    assert_eq!(recorded.requests(), Vec::<String>::new());
    // And within a term, that first write is the finalizer
    let (result, recorded) = serve(&rollout(false), term_for(usize::MAX), answer).await;
    result.expect("the round succeeds");
    assert_eq!(recorded.requests(), [format!("PATCH {ROLLOUT}")]);
}

#[tokio::test]
async fn a_failed_call_ends_the_round_for_that_phased_rollout_counted_as_phased_rollout() {
    // Given an API server that fails every call, when a deleted PhasedRollout is served
    let (result, recorded) = serve(&rollout(true), term_for(usize::MAX), |_, _| {
        Reply::Status(500)
    })
    .await;
    // Then its round ends at the first call, naming it, under the failures' label for it
    let error = result.expect_err("the read fails");
    assert_eq!(error.metric_label(), "phased_rollout");
    assert!(
        error.to_string().starts_with("reading the target: "),
        "{error}"
    );
    assert_eq!(recorded.requests(), [format!("GET {TARGET}")]);
}

/// One round over `rollout` by a controller whose members are cluster-a and cluster-b, the hub
/// and cluster-b recorded: the hub answers the PhasedRollout's writes, cluster-b the target's
/// (`web`, served). Returns the round's result, what it told, and the hub's and cluster-b's
/// requests.
async fn serve_across(
    served: &PhasedRollout,
) -> (Result<(), Error>, Vec<(String, String)>, Recorded, Recorded) {
    baton_shared::crypto::install_default_provider();
    let (hub, hub_recorded) = recorded::api(NAMESPACE, |method, path| {
        let status = format!("{ROLLOUT}/status");
        match (method, path) {
            (&Method::PATCH, _) if path == ROLLOUT || path == status => {
                Reply::Object(serde_json::to_value(rollout(false)).expect("JSON"))
            }
            _ => Reply::Status(500),
        }
    });
    let (cluster_b, b_recorded) = recorded::api(NAMESPACE, answer);
    let clusters = Clusters::connected_to(hub.clone(), [("cluster-b", cluster_b)]);
    let members = ["cluster-a", "cluster-b"];
    let (result, told) = serve_with(served, term_for(usize::MAX), hub, clusters, &members).await;
    (result, told, hub_recorded, b_recorded)
}

#[tokio::test]
async fn a_phased_rollout_naming_a_member_writes_its_target_in_the_members_cluster_alone() {
    // Given a PhasedRollout in the hub naming `cluster-b/web`, being deleted
    let rollout = rollout_of("cluster-b/web", true);
    // When it is served
    let (result, _, hub_recorded, b_recorded) = serve_across(&rollout).await;
    // Then the target is read and handed back in cluster-b, under its name there, and the
    // finalizer let go of in the hub
    result.expect("the round succeeds");
    assert_eq!(
        b_recorded.requests(),
        [format!("GET {TARGET}"), format!("PATCH {TARGET}")]
    );
    assert_eq!(hub_recorded.requests(), [format!("PATCH {ROLLOUT}")]);
}

#[tokio::test]
async fn a_phased_rollout_naming_no_member_or_an_unknown_cluster_is_invalid_saying_which() {
    for (target, says) in [
        (
            "cluster-x/web",
            "spec.targetRef \"cluster-x/web\" names the cluster \"cluster-x\", which is not a member cluster of this controller (controller.clusters: cluster-a, cluster-b)",
        ),
        ("web", "spec.targetRef \"web\" names no member cluster"),
        ("cluster-b/a/web", "\"a/web\" is not a StatefulSet name"),
    ] {
        // Given a PhasedRollout holding its finalizer whose target is badly named
        let mut rollout = rollout_of(target, false);
        rollout.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        // When it is served
        let (result, told, hub_recorded, b_recorded) = serve_across(&rollout).await;
        // Then no target is read or written anywhere: its status says what is wrong, and a
        // Warning Event on it says so too
        result.expect("the round succeeds");
        assert_eq!(b_recorded.requests(), Vec::<String>::new(), "{target}");
        assert_eq!(
            hub_recorded.requests(),
            [format!("PATCH {ROLLOUT}/status")],
            "{target}"
        );
        assert!(
            told.iter()
                .any(|(reason, note)| reason == "InvalidPhasedRollout" && note.contains(says)),
            "{target}: {told:?}"
        );
    }
}
