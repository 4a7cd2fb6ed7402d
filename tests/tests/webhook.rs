//! baton-webhook on the real control plane: the API server calls the webhooks (configured with
//! `clientConfig.url` to 127.0.0.1 and the test CA), pods are simulated with loopback IPs and
//! their prepare-shutdown endpoints are test servers listening on those IPs.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_e2e::controller_support::wait_group_ready;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::http_support::{HANG, PodEndpoint, endpoints_on_pods};
use baton_e2e::keys::{
    LAST_DOWNSCALE, MIN_TIME_BETWEEN_ZONES_DOWNSCALE, NO_DOWNSCALE, PREPARE_DOWNSCALE,
    PREPARE_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::slow_clients::SlowClients;
use baton_e2e::webhook_support::{
    MatchConditions, ShippedConfigurations, TestTls, WebhookConfigurations, WebhookReplica, denial,
    free_port, replicas_patch, scale, wait_for_shipped_webhooks, wait_for_webhooks,
};
use baton_e2e::zpdb_support::{client_without_retries, evict};
use baton_e2e::{
    BatonProcess, ControlPlane, PodSimulator, SimulatorOptions, TestNamespace, wait_until,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
const SHUTDOWN_PATH: &str = "ingester/prepare-shutdown";

/// A test namespace with one webhook replica registered for it.
struct Setup {
    namespace: TestNamespace,
    replica: WebhookReplica,
    _configurations: WebhookConfigurations,
}

impl Setup {
    async fn new(prefix: &str) -> Self {
        let control_plane = ControlPlane::shared().await;
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let tls = TestTls::generate().unwrap();
        let replica = WebhookReplica::start(control_plane, &tls, namespace.name())
            .await
            .unwrap();
        let configurations =
            WebhookConfigurations::register(control_plane, namespace.name(), &tls, &replica)
                .await
                .unwrap();
        let setup = Self {
            namespace,
            replica,
            _configurations: configurations,
        };
        wait_for_webhooks(&setup.namespace).await;
        setup
    }

    fn ns(&self) -> &str {
        self.namespace.name()
    }
}

/// Sets `spec.replicas` with a patch of the object itself.
async fn patch_replicas<K>(
    api: &Api<K>,
    name: &str,
    replicas: i32,
    dry_run: bool,
) -> Result<(), String>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (params, patch) = replicas_patch(replicas, dry_run);
    api.patch(name, &params, &patch)
        .await
        .map(|_| ())
        .map_err(denial)
}

fn denied_by_no_downscale(resource: &str, name: &str, ns: &str, from: i32, to: i32) -> String {
    format!(
        "admission webhook \"no-downscale.baton.test\" denied the request: downscale of {resource}/{name} in {ns} from {from} to {to} replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"
    )
}

async fn spec_replicas(api: &Api<StatefulSet>, name: &str) -> i32 {
    api.get(name)
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.replicas)
        .unwrap()
}

async fn annotations(api: &Api<StatefulSet>, name: &str) -> BTreeMap<String, String> {
    api.get(name)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
}

#[tokio::test]
async fn no_downscale_denies_scaling_a_labelled_statefulset_down() {
    // Given a StatefulSet labelled grafana.com/no-downscale=true and an unlabelled one
    let setup = Setup::new("wh-nodown").await;
    let ns = setup.ns();
    let client = setup.namespace.client();
    StatefulSetFixture::new("ingester-zone-a")
        .replicas(3)
        .label(NO_DOWNSCALE, "true")
        .create(&client, ns)
        .await;
    StatefulSetFixture::new("querier")
        .replicas(3)
        .create(&client, ns)
        .await;
    let statefulsets = setup.namespace.api::<StatefulSet>();

    // When it is scaled down through /scale, Then it is denied with the Go operator's message
    assert_eq!(
        scale(&statefulsets, "ingester-zone-a", 1, false).await,
        Err(denied_by_no_downscale(
            "statefulsets",
            "ingester-zone-a",
            ns,
            3,
            1
        ))
    );
    // When it is scaled down with a patch of its spec, Then it is denied too
    assert_eq!(
        patch_replicas(&statefulsets, "ingester-zone-a", 2, false).await,
        Err(denied_by_no_downscale(
            "statefulsets",
            "ingester-zone-a",
            ns,
            3,
            2
        ))
    );
    // When the downscale is only a dry run, Then it is judged like a real one
    assert_eq!(
        scale(&statefulsets, "ingester-zone-a", 0, true).await,
        Err(denied_by_no_downscale(
            "statefulsets",
            "ingester-zone-a",
            ns,
            3,
            0
        ))
    );
    assert_eq!(
        patch_replicas(&statefulsets, "ingester-zone-a", 2, true).await,
        Err(denied_by_no_downscale(
            "statefulsets",
            "ingester-zone-a",
            ns,
            3,
            2
        ))
    );
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-a").await, 3);

    // When it is scaled up, Then that is allowed
    scale(&statefulsets, "ingester-zone-a", 4, false)
        .await
        .unwrap();
    patch_replicas(&statefulsets, "ingester-zone-a", 5, false)
        .await
        .unwrap();
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-a").await, 5);

    // When an unlabelled StatefulSet is scaled down, Then that is allowed
    scale(&statefulsets, "querier", 1, false).await.unwrap();
    patch_replicas(&statefulsets, "querier", 0, false)
        .await
        .unwrap();
    assert_eq!(spec_replicas(&statefulsets, "querier").await, 0);

    // And the /scale parents came from the cache, not one API call per request
    let metrics = reqwest::get(format!(
        "http://127.0.0.1:{}/metrics",
        setup.replica.ops_port
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        metrics.contains(r#"baton_webhook_parent_lookups_total{source="cache"}"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"baton_admission_decisions_total{result="denied",webhook="no-downscale"}"#)
    );
    // And the API server asked in v1beta1 (the configuration lists it first) and took the answer
    let output = setup.replica.process.output();
    assert!(
        output.contains(r#"webhook="no-downscale" api_version="admission.k8s.io/v1beta1""#),
        "{output}"
    );
}

#[tokio::test]
async fn no_downscale_guards_deployments_and_replicasets_too() {
    // Given a labelled Deployment and a labelled ReplicaSet
    let setup = Setup::new("wh-nodown-deploy").await;
    let ns = setup.ns();
    let template = json!({
        "metadata": {"labels": {"app": "gateway"}},
        "spec": {"containers": [{"name": "app", "image": "baton.test/app:v1"}]}
    });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "gateway", "labels": {NO_DOWNSCALE: "true"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "gateway"}}, "template": template}
    }))
    .unwrap();
    let replicaset: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "cache", "labels": {NO_DOWNSCALE: "true"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "cache"}},
                 "template": {"metadata": {"labels": {"app": "cache"}},
                              "spec": {"containers": [{"name": "app", "image": "baton.test/app:v1"}]}}}
    }))
    .unwrap();
    let deployments = setup.namespace.api::<Deployment>();
    let replicasets = setup.namespace.api::<ReplicaSet>();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    replicasets
        .create(&PostParams::default(), &replicaset)
        .await
        .unwrap();

    // When each is scaled down through its spec or its /scale, Then it is denied
    assert_eq!(
        patch_replicas(&deployments, "gateway", 1, false).await,
        Err(denied_by_no_downscale("deployments", "gateway", ns, 3, 1))
    );
    let scale_down = Patch::Merge(json!({"spec": {"replicas": 2}}));
    assert_eq!(
        deployments
            .patch_scale("gateway", &PatchParams::default(), &scale_down)
            .await
            .map(|_| ())
            .map_err(denial),
        Err(denied_by_no_downscale("deployments", "gateway", ns, 3, 2))
    );
    assert_eq!(
        patch_replicas(&replicasets, "cache", 0, false).await,
        Err(denied_by_no_downscale("replicasets", "cache", ns, 3, 0))
    );
    assert_eq!(
        replicasets
            .patch_scale("cache", &PatchParams::default().dry_run(), &scale_down)
            .await
            .map(|_| ())
            .map_err(denial),
        Err(denied_by_no_downscale("replicasets", "cache", ns, 3, 2))
    );

    // When they are scaled up, Then that is allowed
    patch_replicas(&deployments, "gateway", 4, false)
        .await
        .unwrap();
    let scale_up = Patch::Merge(json!({"spec": {"replicas": 5}}));
    replicasets
        .patch_scale("cache", &PatchParams::default(), &scale_up)
        .await
        .unwrap();
    let replicas = |spec: Option<i32>| spec.unwrap_or_default();
    assert_eq!(
        replicas(
            deployments
                .get("gateway")
                .await
                .unwrap()
                .spec
                .unwrap()
                .replicas
        ),
        4
    );
    assert_eq!(
        replicas(
            replicasets
                .get("cache")
                .await
                .unwrap()
                .spec
                .unwrap()
                .replicas
        ),
        5
    );
}

/// A zone of a rollout group opted in to prepare-downscale, its pods' endpoints on `port`.
fn prepared_zone(name: &str, group: &str, replicas: i32, port: u16) -> StatefulSetFixture {
    StatefulSetFixture::new(name)
        .group(group)
        .replicas(replicas)
        .label(PREPARE_DOWNSCALE, "true")
        .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, "1h")
        .annotation(PREPARE_DOWNSCALE_PATH, SHUTDOWN_PATH)
        .annotation(PREPARE_DOWNSCALE_PORT, &port.to_string())
}

/// Zones of group "ingester" opted in to prepare-downscale (1h between zones), all pods
/// ready, with a test endpoint on the IP of each of `endpoint_pods`.
struct PreparedZones {
    statefulsets: Api<StatefulSet>,
    endpoints: BTreeMap<String, PodEndpoint>,
    _simulator: PodSimulator,
}

impl PreparedZones {
    async fn create(
        namespace: &TestNamespace,
        zones: &[(&str, i32)],
        endpoint_pods: &[&str],
    ) -> Self {
        let (client, ns) = (namespace.client(), namespace.name());
        let simulator = PodSimulator::start(client.clone(), ns, SimulatorOptions::default()).await;
        let port = free_port().unwrap();
        for (zone, replicas) in zones {
            prepared_zone(zone, "ingester", *replicas, port)
                .create(&client, ns)
                .await;
        }
        let names: Vec<&str> = zones.iter().map(|(zone, _)| *zone).collect();
        wait_group_ready(&client, ns, &names).await;
        let statefulsets = namespace.api::<StatefulSet>();
        let endpoints = endpoints_on_pods(&simulator, endpoint_pods, port).await;
        Self {
            statefulsets,
            endpoints,
            _simulator: simulator,
        }
    }
}

async fn ledger(setup: &Setup, group: &str) -> BTreeMap<String, String> {
    setup
        .namespace
        .api::<ConfigMap>()
        .get_opt(&format!("baton-downscale-{group}"))
        .await
        .unwrap()
        .and_then(|config_map| config_map.data)
        .unwrap_or_default()
}

#[tokio::test]
async fn prepare_downscale_tells_the_pods_going_away_and_records_the_downscale() {
    // Given zone a (5 replicas) and zone b of group "ingester", opted in, all pods ready,
    // and each pod's prepare-shutdown endpoint listening on its IP
    let setup = Setup::new("wh-prepare").await;
    let pods: Vec<String> = (0..5).map(|i| format!("ingester-zone-a-{i}")).collect();
    let names: Vec<&str> = pods.iter().map(String::as_str).collect();
    let PreparedZones {
        statefulsets,
        endpoints,
        ..
    } = PreparedZones::create(
        &setup.namespace,
        &[("ingester-zone-a", 5), ("ingester-zone-b", 2)],
        &names,
    )
    .await;

    // When zone a is scaled from 5 to 3
    scale(&statefulsets, "ingester-zone-a", 3, false)
        .await
        .unwrap();

    // Then pods 4 and 3 were told to prepare, exactly once (the webhook writes nothing to the
    // StatefulSet it admits, so the API server never has to run admission again), and no
    // other pod was called
    let post = format!("POST /{SHUTDOWN_PATH}");
    for going in ["ingester-zone-a-4", "ingester-zone-a-3"] {
        assert_eq!(endpoints[going].calls(), vec![post.clone()], "{going}");
    }
    for kept in 0..3 {
        assert_eq!(
            endpoints[&format!("ingester-zone-a-{kept}")].calls(),
            Vec::<String>::new()
        );
    }
    // And the downscale went through and was claimed in the ledger with what it approved
    // (the controller copies it to the StatefulSet's last-downscale once it sees it happen:
    // tests/tests/migration.rs)
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-a").await, 3);
    assert!(
        !annotations(&statefulsets, "ingester-zone-a")
            .await
            .contains_key(LAST_DOWNSCALE)
    );
    let ledger = ledger(&setup, "ingester").await;
    let entry: Value = serde_json::from_str(&ledger["ingester-zone-a"]).unwrap();
    let at: jiff::Timestamp = entry["lastDownscale"].as_str().unwrap().parse().unwrap();
    assert!(jiff::Timestamp::now().duration_since(at) < jiff::SignedDuration::from_secs(120));
    assert_eq!(
        (
            &entry["pending"],
            &entry["fromReplicas"],
            &entry["toReplicas"]
        ),
        (&json!(true), &json!(5), &json!(3)),
        "{entry}"
    );
}

#[tokio::test]
async fn a_statefulset_labelled_both_no_downscale_and_prepare_downscale_prepares_no_pod() {
    // Given zone a of a group opted in to prepare-downscale and also labelled no-downscale
    let setup = Setup::new("wh-both").await;
    let ns = setup.ns();
    let PreparedZones {
        statefulsets,
        endpoints,
        ..
    } = PreparedZones::create(
        &setup.namespace,
        &[("ingester-zone-a", 3), ("ingester-zone-b", 1)],
        &["ingester-zone-a-2"],
    )
    .await;
    statefulsets
        .patch(
            "ingester-zone-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NO_DOWNSCALE: "true"}}})),
        )
        .await
        .unwrap();

    // When it is scaled down
    let denied = scale(&statefulsets, "ingester-zone-a", 2, false)
        .await
        .unwrap_err();

    // Then the mutating webhook, which runs first, refuses it as no-downscale would
    let expected = denied_by_no_downscale("statefulsets", "ingester-zone-a", ns, 3, 2);
    let (_, reason) = expected.split_once("denied the request: ").unwrap();
    assert_eq!(
        denied,
        format!("admission webhook \"prepare-downscale.baton.test\" denied the request: {reason}")
    );
    // And no pod was told to prepare, nothing was claimed, and the replicas are unchanged
    assert_eq!(endpoints["ingester-zone-a-2"].calls(), Vec::<String>::new());
    assert!(ledger(&setup, "ingester").await.is_empty());
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-a").await, 3);
}

#[tokio::test]
async fn a_pod_failing_to_prepare_undoes_everything_and_denies() {
    // Given zone a (5 replicas) whose pod 3 cannot prepare for shutdown
    let setup = Setup::new("wh-prepare-fail").await;
    let ns = setup.ns();
    let PreparedZones {
        statefulsets,
        endpoints,
        ..
    } = PreparedZones::create(
        &setup.namespace,
        &[("ingester-zone-a", 5), ("ingester-zone-b", 1)],
        &["ingester-zone-a-4", "ingester-zone-a-3"],
    )
    .await;
    endpoints["ingester-zone-a-3"].answer("POST", 500);

    // When zone a is scaled from 5 to 3
    let denied = scale(&statefulsets, "ingester-zone-a", 3, false)
        .await
        .unwrap_err();

    // Then it is denied because a pod failed to prepare
    assert!(
        denied.starts_with(&format!(
            "admission webhook \"prepare-downscale.baton.test\" denied the request: downscale of statefulsets/ingester-zone-a in {ns} from 5 to 3 replicas is not allowed because one or more pods failed to prepare for shutdown"
        )),
        "{denied}"
    );
    // And every pod going away was told to undo
    let delete = format!("DELETE /{SHUTDOWN_PATH}");
    for pod in ["ingester-zone-a-4", "ingester-zone-a-3"] {
        assert!(
            endpoints[pod].calls().contains(&delete),
            "{pod}: {:?}",
            endpoints[pod].calls()
        );
    }
    // And nothing was recorded: no annotation, no claim left in the ledger, replicas unchanged
    assert!(
        !annotations(&statefulsets, "ingester-zone-a")
            .await
            .contains_key(LAST_DOWNSCALE)
    );
    assert!(
        !ledger(&setup, "ingester")
            .await
            .contains_key("ingester-zone-a")
    );
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-a").await, 5);
}

#[tokio::test]
async fn a_second_zone_within_min_time_is_denied_naming_the_zone_and_the_time_left() {
    // Given two zones labelled to wait 1h between zone downscales, all pods ready
    let setup = Setup::new("wh-min-time").await;
    let ns = setup.ns();
    let PreparedZones {
        statefulsets,
        endpoints,
        ..
    } = PreparedZones::create(
        &setup.namespace,
        &[("ingester-zone-a", 2), ("ingester-zone-b", 2)],
        &["ingester-zone-a-1", "ingester-zone-b-1"],
    )
    .await;

    // When zone a is downscaled, Then that is allowed
    scale(&statefulsets, "ingester-zone-a", 1, false)
        .await
        .unwrap();

    // When zone b is downscaled right after, Then it is denied, naming zone a and the time left
    let denied = patch_replicas(&statefulsets, "ingester-zone-b", 1, false)
        .await
        .unwrap_err();
    let expected = format!(
        "admission webhook \"prepare-downscale.baton.test\" denied the request: downscale of statefulsets/ingester-zone-b in {ns} from 2 to 1 replicas is not allowed because statefulset ingester-zone-a was downscaled at "
    );
    assert!(denied.starts_with(&expected), "{denied}");
    // (time left is rounded up to whole seconds: at most the full hour, at least 59 minutes)
    let left = denied
        .rsplit_once(" between zone downscales (")
        .and_then(|(before, left)| {
            before
                .ends_with("and is labelled to wait 1h0m0s")
                .then(|| left.strip_suffix(" left)"))?
        })
        .unwrap_or_else(|| panic!("{denied}"));
    assert!(
        left == "1h0m0s" || (left.starts_with("59m") && left.ends_with('s')),
        "{left}"
    );
    // And zone b's pod was never told to prepare
    assert_eq!(endpoints["ingester-zone-b-1"].calls(), Vec::<String>::new());
    assert_eq!(spec_replicas(&statefulsets, "ingester-zone-b").await, 2);
}

/// The AdmissionReview the API server sends for `kubectl scale` of a StatefulSet.
fn scale_review(uid: &str, ns: &str, name: &str, from: i32, to: i32) -> Value {
    scale_review_of(uid, ns, name, json!({}), from, to)
}

/// A review of a /scale update as the API server would send it, its old Scale's metadata
/// carrying `stored` (the parent's uid and resourceVersion, as the API server fills them).
fn scale_review_of(uid: &str, ns: &str, name: &str, stored: Value, from: i32, to: i32) -> Value {
    let scale = |replicas: i32| {
        let mut metadata = json!({"name": name, "namespace": ns});
        for (key, value) in stored.as_object().into_iter().flatten() {
            metadata[key] = value.clone();
        }
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": metadata, "spec": {"replicas": replicas}})
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "subResource": "scale",
            "name": name,
            "namespace": ns,
            "operation": "UPDATE",
            "userInfo": {"username": "e2e"},
            "object": scale(to),
            "oldObject": scale(from),
            "dryRun": false
        }
    })
}

/// The uid and resourceVersion of `name` as stored, as a review's copy would carry them.
async fn stored_as(statefulsets: &Api<StatefulSet>, name: &str) -> Value {
    let stored = statefulsets.get(name).await.unwrap();
    json!({"uid": stored.metadata.uid, "resourceVersion": stored.metadata.resource_version})
}

#[tokio::test]
async fn forged_prepare_downscale_reviews_prepare_nothing_and_claim_nothing() {
    // Given a webhook replica serving one namespace, and zone a of a group there at 2 replicas
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-forged").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start(control_plane, &tls, ns)
        .await
        .unwrap();
    let zones = PreparedZones::create(
        &namespace,
        &[("ingester-zone-a", 2), ("ingester-zone-b", 2)],
        &["ingester-zone-a-1"],
    )
    .await;
    let https = tls.client().unwrap();
    let send = |review: Value| {
        let request = https
            .post(replica.url("/admission/prepare-downscale"))
            .json(&review);
        async move {
            let answer: Value = request.send().await.unwrap().json().await.unwrap();
            (
                answer["response"]["allowed"] == json!(true),
                answer["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
    };

    // When someone who reaches the webhook (no client certificate is required of callers
    // here, as by default) sends reviews the API server never sent: one for a namespace baton
    // does not serve, one that claims zone a has 5 replicas, one with the right counts but
    // not naming the stored object, one naming it at an older version
    let elsewhere = send(scale_review(
        "forged-1",
        "kube-system",
        "ingester-zone-a",
        2,
        1,
    ))
    .await;
    let inflated = send(scale_review("forged-2", ns, "ingester-zone-a", 5, 0)).await;
    let unnamed = send(scale_review("forged-3", ns, "ingester-zone-a", 2, 1)).await;
    let mut stale = stored_as(&zones.statefulsets, "ingester-zone-a").await;
    let version: u64 = stale["resourceVersion"].as_str().unwrap().parse().unwrap();
    stale["resourceVersion"] = json!((version - 1).to_string());
    let stale = send(scale_review_of(
        "forged-4",
        ns,
        "ingester-zone-a",
        stale,
        2,
        1,
    ))
    .await;

    // Then each is refused saying why, without telling which namespace is served or what the
    // StatefulSet holds
    assert!(!elsewhere.0);
    assert!(
        elsewhere
            .1
            .contains("because baton does not serve namespace kube-system"),
        "{}",
        elsewhere.1
    );
    assert!(!elsewhere.1.contains(ns), "{}", elsewhere.1);
    for (answer, what) in [
        (&inflated, "inflated"),
        (&unnamed, "unnamed"),
        (&stale, "stale"),
    ] {
        assert!(!answer.0, "{what}");
        assert!(
            answer
                .1
                .contains("does not describe the StatefulSet as it is stored"),
            "{what}: {}",
            answer.1
        );
        assert!(!answer.1.contains("2 replicas"), "{what}: {}", answer.1);
    }
    // And no pod was told anything and nothing was claimed
    assert_eq!(
        zones.endpoints["ingester-zone-a-1"].calls(),
        Vec::<String>::new()
    );
    assert!(
        namespace
            .api::<ConfigMap>()
            .get_opt("baton-downscale-ingester")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn with_the_api_servers_certificate_required_only_the_api_server_can_ask_for_a_downscale() {
    // Given a webhook replica that requires the client certificate the API server presents to
    // webhooks (the control plane's admission configuration), registered for one namespace,
    // and zone a of a group there at 2 replicas
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-client-ca").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let client_ca = control_plane.handshake().webhook_client_ca_file.clone();
    assert!(
        client_ca.is_file(),
        "the control plane has a webhook client CA"
    );
    let replica = WebhookReplica::start_with(
        control_plane,
        &tls,
        ns,
        &[("BATON_WEBHOOK__CLIENT_CA_FILE", client_ca.to_str().unwrap())],
    )
    .await
    .unwrap();
    let _configurations = WebhookConfigurations::register(control_plane, ns, &tls, &replica)
        .await
        .unwrap();
    // (the API server calls the replica, so its certificate is accepted)
    wait_for_webhooks(&namespace).await;
    let zones = PreparedZones::create(
        &namespace,
        &[("ingester-zone-a", 2), ("ingester-zone-b", 2)],
        &["ingester-zone-a-1"],
    )
    .await;

    // When someone on the network sends the review the API server would send for scaling zone
    // a to 1 (right counts, and the StatefulSet's uid and resourceVersion, read beforehand),
    // and an eviction review, without the API server's certificate
    let forged = scale_review_of(
        "forged",
        ns,
        "ingester-zone-a",
        stored_as(&zones.statefulsets, "ingester-zone-a").await,
        2,
        1,
    );
    let https = tls.client().unwrap();
    let prepare = https
        .post(replica.url("/admission/prepare-downscale"))
        .json(&forged)
        .send()
        .await;
    let eviction = https
        .post(replica.url("/admission/pod-eviction"))
        .json(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "forged-eviction", "operation": "CREATE", "name": "ingester-zone-a-1",
                "namespace": ns, "subResource": "eviction",
                "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {"username": "e2e"},
                "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                           "metadata": {"name": "ingester-zone-a-1", "namespace": ns}},
            }}),
        )
        .send()
        .await;

    // Then neither is read: the connection fails before any review reaches a handler
    assert!(
        prepare.is_err(),
        "a forged review was answered: {prepare:?}"
    );
    assert!(
        eviction.is_err(),
        "a forged eviction was answered: {eviction:?}"
    );
    // and no pod was told anything, nothing was claimed, no record written
    assert_eq!(
        zones.endpoints["ingester-zone-a-1"].calls(),
        Vec::<String>::new()
    );
    let records = namespace
        .api::<ConfigMap>()
        .list(&Default::default())
        .await
        .unwrap();
    let names: Vec<String> = records.iter().map(|record| record.name_any()).collect();
    assert!(
        names.iter().all(|name| !name.starts_with("baton-")),
        "{names:?}"
    );

    // When the same downscale is asked of the API server
    scale(&zones.statefulsets, "ingester-zone-a", 1, false)
        .await
        .expect("the API server's review is answered and allowed");

    // Then the API server's review was judged: the pod going away was told to prepare, and the
    // downscale claimed in the ledger
    assert_eq!(
        zones.endpoints["ingester-zone-a-1"].calls(),
        vec![format!("POST /{SHUTDOWN_PATH}")]
    );
    assert!(
        namespace
            .api::<ConfigMap>()
            .get_opt("baton-downscale-ingester")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn racing_zone_downscales_through_different_replicas_approve_exactly_one() {
    // Given three webhook replicas (three processes sharing nothing but the API server) and
    // two zones of one group, labelled to wait 1h between zone downscales
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-race").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(
            WebhookReplica::start(control_plane, &tls, ns)
                .await
                .unwrap(),
        );
    }
    let zones = PreparedZones::create(
        &namespace,
        &[("ingester-zone-a", 2), ("ingester-zone-b", 2)],
        &["ingester-zone-a-1", "ingester-zone-b-1"],
    )
    .await;
    let statefulsets = &zones.statefulsets;
    let https = tls.client().unwrap();
    let ledgers = namespace.api::<ConfigMap>();
    let zones = ["ingester-zone-a", "ingester-zone-b"];
    // Nothing writes the StatefulSets during the rounds: the reviews name them as stored.
    let mut stored = BTreeMap::new();
    for zone in zones {
        stored.insert(zone, stored_as(statefulsets, zone).await);
    }

    for round in 0..100 {
        // When both zones' downscales reach two different replicas at the same moment
        let send = |replica: &WebhookReplica, zone: &str| {
            let request = https
                .post(replica.url("/admission/prepare-downscale"))
                .json(&scale_review_of(
                    &format!("race-{round}-{zone}"),
                    ns,
                    zone,
                    stored[zone].clone(),
                    2,
                    1,
                ));
            async move {
                let answer: Value = request.send().await.unwrap().json().await.unwrap();
                answer["response"].clone()
            }
        };
        let (first, second) = tokio::join!(
            send(&replicas[round % 3], zones[0]),
            send(&replicas[(round + 1) % 3], zones[1])
        );

        // Then exactly one is approved, and the other is denied naming the winner
        let approved: Vec<&str> = [(&first, zones[0]), (&second, zones[1])]
            .iter()
            .filter(|(answer, _)| answer["allowed"] == json!(true))
            .map(|(_, zone)| *zone)
            .collect();
        assert_eq!(approved.len(), 1, "round {round}: {first}\n{second}");
        let winner = approved[0];
        let loser = if std::ptr::eq(winner, zones[0]) {
            &second
        } else {
            &first
        };
        let message = loser["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("because statefulset {winner} was downscaled at")),
            "round {round}: {message}"
        );

        // Reset for the next round: alternately delete the ledger (the next claims race to
        // create it) and clear the winner's entry (they race to replace it).
        let name = "baton-downscale-ingester";
        if round.is_multiple_of(2) {
            ledgers
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        } else {
            ledgers
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {winner: null}})),
                )
                .await
                .unwrap();
        }
        statefulsets
            .patch(
                winner,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {LAST_DOWNSCALE: null}}})),
            )
            .await
            .unwrap();
    }

    // And the replicas really raced: some claims lost a conditional write and were judged again
    let retried: usize = replicas
        .iter()
        .map(|replica| {
            replica
                .process
                .output()
                .matches("ledger changed meanwhile")
                .count()
        })
        .sum();
    assert!(retried > 0, "no round exercised the compare-and-swap");
    println!("over 100 rounds, {retried} claims lost a conditional write and were judged again");
}

#[tokio::test]
async fn a_missing_or_bad_certificate_stops_startup_naming_the_file() {
    let control_plane = ControlPlane::shared().await;
    let files = tempfile::tempdir().unwrap();
    let garbage = files.path().join("tls.crt");
    std::fs::write(&garbage, "not a certificate").unwrap();
    std::fs::write(files.path().join("tls.key"), "not a key either").unwrap();
    let missing = files.path().join("missing.crt");
    for (cert, expected) in [
        (&missing, format!("reading {}", missing.display())),
        (
            &garbage,
            format!("{} holds no PEM certificate", garbage.display()),
        ),
    ] {
        // Given certificate files that cannot be used
        let cert = cert.to_str().unwrap();
        let key = files.path().join("tls.key");
        // When baton-webhook starts
        let mut process = BatonProcess::spawn(
            "baton-webhook",
            control_plane.kubeconfig_path(),
            &[
                ("BATON_WEBHOOK__CERT_FILE", cert),
                ("BATON_WEBHOOK__KEY_FILE", key.to_str().unwrap()),
                ("BATON_WEBHOOK__ADDRESS", "127.0.0.1:0"),
                ("BATON_OPS__ADDRESS", "127.0.0.1:0"),
            ],
        )
        .await
        .unwrap();
        // Then it exits with an error naming the file
        let code = tokio::time::timeout(TIMEOUT, process.wait())
            .await
            .expect("baton-webhook exits")
            .unwrap();
        assert_ne!(code, Some(0));
        let output = process.output();
        assert!(output.contains(&expected), "{output}");
    }
}

#[tokio::test]
async fn sigterm_turns_unready_answers_the_request_in_flight_and_exits_cleanly() {
    // Given a webhook replica and a zone whose pod 1 hangs when told to prepare
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-shutdown").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let mut replica = WebhookReplica::start_with(
        control_plane,
        &tls,
        ns,
        &[
            ("BATON_PODS__REQUEST_TIMEOUT", "3s"),
            ("BATON_WEBHOOK__SHUTDOWN_DELAY", "1s"),
        ],
    )
    .await
    .unwrap();
    let PreparedZones {
        endpoints,
        statefulsets,
        ..
    } = PreparedZones::create(
        &namespace,
        &[("ingester-zone-a", 2)],
        &["ingester-zone-a-1"],
    )
    .await;
    endpoints["ingester-zone-a-1"].answer("POST", HANG);

    // When a downscale is in flight
    let request = tls
        .client()
        .unwrap()
        .post(replica.url("/admission/prepare-downscale"))
        .json(&scale_review_of(
            "in-flight",
            ns,
            "ingester-zone-a",
            stored_as(&statefulsets, "ingester-zone-a").await,
            2,
            1,
        ));
    let in_flight = tokio::spawn(async move {
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        answer["response"].clone()
    });
    wait_until(TIMEOUT, "the pod was called", || async {
        !endpoints["ingester-zone-a-1"].calls().is_empty()
    })
    .await;
    // And the process is told to stop
    replica.process.signal("TERM").unwrap();

    // Then it reports not ready at once
    wait_until(TIMEOUT, "/ready answers 503", || async {
        replica.ready_status().await == Some(503)
    })
    .await;
    // And the request in flight still gets its answer: denied, the pod did not prepare in time
    let answer = in_flight.await.unwrap();
    assert_eq!(answer["allowed"], json!(false), "{answer}");
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("failed to prepare for shutdown"),
        "{message}"
    );
    assert!(
        endpoints["ingester-zone-a-1"]
            .calls()
            .contains(&format!("DELETE /{SHUTDOWN_PATH}"))
    );
    // And the process exits cleanly
    let code = tokio::time::timeout(TIMEOUT, replica.process.wait())
        .await
        .expect("baton-webhook exits after draining")
        .unwrap();
    assert_eq!(code, Some(0), "{}", replica.process.output());
}

#[tokio::test]
async fn during_the_shutdown_delay_requests_are_answered_closing_their_connection_and_a_second_sigterm_exits_at_once()
 {
    // Given a webhook replica that keeps serving for ten minutes after SIGTERM
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-second-signal").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let mut replica = WebhookReplica::start_with(
        control_plane,
        &tls,
        ns,
        &[("BATON_WEBHOOK__SHUTDOWN_DELAY", "10m")],
    )
    .await
    .unwrap();

    // When it is told to stop
    replica.process.signal("TERM").unwrap();
    // Then it reports not ready at once
    wait_until(TIMEOUT, "/ready answers 503", || async {
        replica.ready_status().await == Some(503)
    })
    .await;
    // And still answers a review, asking the client to close the connection
    let answer = tls
        .client()
        .unwrap()
        .post(replica.url("/admission/no-downscale"))
        .json(&scale_review("during-delay", ns, "ingester-zone-a", 1, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["connection"], "close");
    let review: Value = answer.json().await.unwrap();
    assert_eq!(review["response"]["allowed"], json!(true), "{review}");

    // When it is told again
    replica.process.signal("TERM").unwrap();
    // Then it exits at once, without finishing the graceful stop
    let code = tokio::time::timeout(TIMEOUT, replica.process.wait())
        .await
        .expect("a second SIGTERM ends baton-webhook long before its shutdown delay")
        .unwrap();
    assert_eq!(code, Some(1), "{}", replica.process.output());
    assert!(
        replica.process.output().contains("second signal"),
        "{}",
        replica.process.output()
    );
}

/// The requests in flight on `replica`'s `/admission/no-downscale`, from its metrics.
async fn no_downscale_in_flight(replica: &WebhookReplica) -> Option<u64> {
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()
        .ok()?
        .get(format!("http://127.0.0.1:{}/metrics", replica.ops_port))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines().find_map(|line| {
        line.strip_prefix(
            r#"rollout_operator_inflight_requests{method="POST",route="admission_no_downscale"} "#,
        )?
        .parse()
        .ok()
    })
}

/// Where the slow clients connect from: a loopback address of their own, as a pod's address
/// differs from the API server's (127.0.0.1 here).
const SLOW_CLIENTS_FROM: [u8; 4] = [127, 0, 0, 77];
/// Slow connections per replica: three times what fills the default body budget (24 MiB) with
/// bodies of the largest size accepted (3 MiB).
const SLOW_PER_REPLICA: usize = 24;
const ANNOUNCED: usize = 3 * 1024 * 1024;

#[tokio::test]
async fn slow_clients_stalling_every_replica_keep_no_review_of_the_api_server_from_an_answer() {
    // Given two webhook replicas (with the defaults: any client may connect), the API server
    // calling both on every downscale (no-downscale on one, prepare-downscale on the other),
    // the first on every eviction and record write and the second on every write of a rollout
    // group's StatefulSet, all failing closed
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "wh-slow-clients").await;
    let ns = namespace.name();
    let tls = TestTls::generate().unwrap();
    let (first, second) = futures::future::try_join(
        WebhookReplica::start(control_plane, &tls, ns),
        WebhookReplica::start(control_plane, &tls, ns),
    )
    .await
    .unwrap();
    let _first_configurations = ShippedConfigurations::register(
        control_plane,
        ns,
        &tls,
        &first,
        &[
            "baton-no-downscale",
            "baton-pod-eviction",
            "baton-record-guard",
        ],
        MatchConditions::AsShipped,
    )
    .await
    .unwrap();
    let _second_configurations = ShippedConfigurations::register(
        control_plane,
        ns,
        &tls,
        &second,
        &["baton-prepare-downscale", "baton-state-guard"],
        MatchConditions::AsShipped,
    )
    .await
    .unwrap();
    wait_for_shipped_webhooks(&namespace).await;
    // and a StatefulSet to scale down and one whose pods are drained
    let client = namespace.client();
    StatefulSetFixture::new("scaled")
        .replicas(2)
        .create(&client, ns)
        .await;
    StatefulSetFixture::new("drained")
        .replicas(3)
        .create(&client, ns)
        .await;
    let pods = namespace.api::<Pod>();
    for pod in ["drained-0", "drained-1", "drained-2"] {
        let pods = &pods;
        wait_until(TIMEOUT, &format!("pod {pod} exists"), || async move {
            pods.get_opt(pod).await.unwrap().is_some()
        })
        .await;
    }

    // When a client elsewhere opens 24 connections to each replica, each announcing a 3 MiB
    // review and sending none of it, opening another whenever one is cut off
    let slow: Vec<SlowClients> = [&first, &second]
        .iter()
        .map(|replica| {
            SlowClients::start(
                &tls.ca_pem,
                SLOW_CLIENTS_FROM.into(),
                ([127, 0, 0, 1], replica.port).into(),
                "/admission/no-downscale",
                ANNOUNCED,
                SLOW_PER_REPLICA,
            )
            .unwrap()
        })
        .collect();
    // (every replica has reached a handler with at least the 8 that held its whole budget
    // before)
    for replica in [&first, &second] {
        wait_until(
            TIMEOUT,
            "the slow clients' requests are in flight on every replica",
            || async {
                no_downscale_in_flight(replica)
                    .await
                    .is_some_and(|n| n >= 8)
            },
        )
        .await;
    }

    // and meanwhile, through the API server, a downscale, an eviction (a drain's) and a write
    // of a rollout group's StatefulSet, round after round, for longer than two slow clients'
    // stalls one after the other may last (webhook.read_timeout, 2 s by default)
    let api = client_without_retries(control_plane).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(api.clone(), ns);
    let started = std::time::Instant::now();
    let (mut failures, mut rounds) = (Vec::new(), 0);
    while rounds < 3 || started.elapsed() < Duration::from_secs(5) {
        let began = std::time::Instant::now();
        if let Err(error) = statefulsets
            .patch_scale(
                "scaled",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 1}})),
            )
            .await
        {
            failures.push(format!("scaling down after {:?}: {error}", began.elapsed()));
        }
        // (back up, for the next round; an upscale is not sent to baton)
        statefulsets
            .patch_scale(
                "scaled",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 2}})),
            )
            .await
            .unwrap();
        let pod = format!("drained-{}", rounds % 3);
        {
            let (pods, pod) = (&pods, &pod);
            wait_until(TIMEOUT, &format!("pod {pod} exists"), || async move {
                pods.get_opt(pod).await.unwrap().is_some()
            })
            .await;
        }
        let began = std::time::Instant::now();
        if let Err((code, message)) = evict(&api, ns, &pod).await {
            failures.push(format!(
                "evicting {pod} after {:?}: {code} {message}",
                began.elapsed()
            ));
        }
        let group = StatefulSetFixture::new(&format!("grouped-{rounds}"))
            .group("guarded")
            .replicas(0)
            .build();
        let began = std::time::Instant::now();
        if let Err(error) = statefulsets.create(&PostParams::default(), &group).await {
            failures.push(format!(
                "creating grouped-{rounds} after {:?}: {error}",
                began.elapsed()
            ));
        }
        rounds += 1;
    }

    // Then every one was answered by baton (an answer may refuse: the eviction caches wait
    // for a budget CRD, a downscale right after an upscale may not be as stored): none failed
    // for want of an answer ("failed calling webhook", a timeout, a 429 for the budget)
    let unanswered: Vec<&String> = failures
        .iter()
        .filter(|failure| !failure.contains("denied the request"))
        .collect();
    assert_eq!(unanswered, Vec::<&String>::new(), "in {rounds} rounds");
    // and the slow clients were cut off (a stalled request lasts at most webhook.read_timeout)
    // and kept coming back
    wait_until(
        TIMEOUT,
        "the slow clients are cut off by the webhook's read deadline",
        || async {
            slow.iter()
                .all(|clients| clients.cut_off() >= SLOW_PER_REPLICA)
        },
    )
    .await;
    assert!(
        slow.iter().all(|clients| clients.sent() > SLOW_PER_REPLICA),
        "the slow clients opened new requests after being cut off"
    );
}
