//! The chain everything else stands on: StatefulSet → real StatefulSet controller creates pods →
//! pod simulator marks them Ready → the StatefulSet's status says so.

use std::collections::HashSet;
use std::time::Duration;

use baton_e2e::fixtures::{StatefulSetFixture, set_version};
use baton_e2e::{ControlPlane, PodEvent, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn ready_replicas(namespace: &TestNamespace, name: &str) -> i32 {
    let statefulset = namespace.api::<StatefulSet>().get(name).await.unwrap();
    statefulset
        .status
        .and_then(|status| status.ready_replicas)
        .unwrap_or(0)
}

#[tokio::test]
async fn statefulset_pods_become_ready_through_the_simulator() {
    // Given a namespace with the pod simulator running
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "smoke").await;
    let simulator = PodSimulator::for_namespace(&namespace).await;

    // When a StatefulSet of 3 replicas is created
    StatefulSetFixture::new("app-zone-a")
        .group("app")
        .replicas(3)
        .create(&namespace.client(), namespace.name())
        .await;

    // Then the real StatefulSet controller creates 3 pods, and they all become Ready
    wait_until(TIMEOUT, "app-zone-a has 3 ready replicas", || async {
        ready_replicas(&namespace, "app-zone-a").await == 3
    })
    .await;
    let pods = namespace
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let ips: HashSet<String> = pods
        .items
        .iter()
        .map(|pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .expect("pod has an IP")
        })
        .collect();
    assert_eq!(ips.len(), 3, "every pod has its own IP: {ips:?}");
    assert!(
        ips.iter().all(|ip| ip.starts_with("127.")),
        "loopback IPs: {ips:?}"
    );
    assert_eq!(
        simulator.pod_ip("app-zone-a-0").to_string(),
        pods.items
            .iter()
            .find(|pod| pod.metadata.name.as_deref() == Some("app-zone-a-0"))
            .and_then(|pod| pod.status.as_ref()?.pod_ip.clone())
            .unwrap()
    );

    // And a pod held NotReady lowers readyReplicas; releasing it restores them
    simulator.hold_not_ready("app-zone-a-1").await;
    wait_until(TIMEOUT, "app-zone-a reports 2 ready replicas", || async {
        ready_replicas(&namespace, "app-zone-a").await == 2
    })
    .await;
    simulator.release("app-zone-a-1").await;
    wait_until(
        TIMEOUT,
        "app-zone-a is back to 3 ready replicas",
        || async { ready_replicas(&namespace, "app-zone-a").await == 3 },
    )
    .await;

    let timeline = simulator.timeline();
    for event in [PodEvent::Created, PodEvent::Ready, PodEvent::NotReady] {
        assert!(
            timeline
                .iter()
                .any(|t| t.pod == "app-zone-a-1" && t.event == event),
            "timeline records {event:?} of app-zone-a-1: {timeline:#?}"
        );
    }
    assert!(
        timeline
            .iter()
            .all(|t| t.statefulset.as_deref() == Some("app-zone-a"))
    );
}

#[tokio::test]
async fn a_deleted_pod_of_an_on_delete_statefulset_comes_back_at_the_update_revision() {
    // Given a Ready OnDelete StatefulSet at version v1
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "smoke-revision").await;
    let simulator = PodSimulator::for_namespace(&namespace).await;
    StatefulSetFixture::new("db-zone-a")
        .replicas(2)
        .create(&namespace.client(), namespace.name())
        .await;
    wait_until(TIMEOUT, "db-zone-a is ready", || async {
        ready_replicas(&namespace, "db-zone-a").await == 2
    })
    .await;
    let old_revision = revision_of(&namespace, "db-zone-a-0").await;

    // When its template changes, nothing is replaced (OnDelete) until a pod is deleted
    set_version(&namespace.client(), namespace.name(), "db-zone-a", "v2").await;
    let update_revision = wait_for_update_revision(&namespace, "db-zone-a", &old_revision).await;
    assert_eq!(revision_of(&namespace, "db-zone-a-0").await, old_revision);
    namespace
        .api::<Pod>()
        .delete("db-zone-a-0", &DeleteParams::default())
        .await
        .unwrap();

    // Then the StatefulSet controller recreates it at the update revision, and it becomes Ready
    wait_until(
        TIMEOUT,
        "db-zone-a-0 is recreated at the update revision",
        || async { revision_of(&namespace, "db-zone-a-0").await == update_revision },
    )
    .await;
    wait_until(TIMEOUT, "db-zone-a is ready again", || async {
        ready_replicas(&namespace, "db-zone-a").await == 2
    })
    .await;
    assert_eq!(
        revision_of(&namespace, "db-zone-a-1").await,
        old_revision,
        "the other pod is untouched"
    );
    let deleted_then_created: Vec<_> = simulator
        .timeline()
        .into_iter()
        .filter(|t| {
            t.pod == "db-zone-a-0" && matches!(t.event, PodEvent::Deleted | PodEvent::Created)
        })
        .map(|t| t.event)
        .collect();
    assert_eq!(
        deleted_then_created,
        [PodEvent::Created, PodEvent::Deleted, PodEvent::Created]
    );
}

#[tokio::test]
async fn a_terminating_pod_is_removed_as_a_kubelet_would() {
    // Given a Ready pod bound to a node, with a 30 s termination grace period
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "smoke-terminating").await;
    let _simulator = PodSimulator::for_namespace(&namespace).await;
    let pods = namespace.api::<Pod>();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bound"},
        "spec": {
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "example.com/main:v1"}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_until(TIMEOUT, "the pod is Running", || async {
        pods.get("bound")
            .await
            .unwrap()
            .status
            .and_then(|status| status.phase)
            .as_deref()
            == Some("Running")
    })
    .await;

    // When it is deleted: the API server only marks it, its kubelet has to finish
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let marked = pods.get_opt("bound").await.unwrap();
    assert!(
        marked.is_none_or(|pod| pod.metadata.deletion_timestamp.is_some()),
        "a deleted pod is marked or gone"
    );

    // Then the simulator removes it, long before the grace period would end
    wait_until(Duration::from_secs(10), "the pod is removed", || async {
        pods.get_opt("bound").await.unwrap().is_none()
    })
    .await;
}

async fn revision_of(namespace: &TestNamespace, pod: &str) -> String {
    match namespace.api::<Pod>().get(pod).await {
        Ok(pod) => pod
            .metadata
            .labels
            .and_then(|labels| labels.get("controller-revision-hash").cloned())
            .unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn update_revision(namespace: &TestNamespace, name: &str) -> String {
    let statefulset = namespace.api::<StatefulSet>().get(name).await.unwrap();
    statefulset
        .status
        .and_then(|status| status.update_revision)
        .unwrap_or_default()
}

async fn wait_for_update_revision(namespace: &TestNamespace, name: &str, old: &str) -> String {
    wait_until(
        TIMEOUT,
        "the StatefulSet controller computes a new update revision",
        || async {
            let revision = update_revision(namespace, name).await;
            !revision.is_empty() && revision != old
        },
    )
    .await;
    update_revision(namespace, name).await
}
