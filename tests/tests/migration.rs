//! Switching from the Go rollout-operator (v0.38) without losing state, and downscales written
//! the way real clients write them, on the real control plane:
//! - a namespace as a Go deployment leaves it (the zone tracker's history, min-time as an
//!   annotation, a zone-aware budget, webhook configurations labelled for CA injection), then
//!   baton from `deploy/` (both binaries with exactly its RBAC);
//! - an HPA-style writer (GET `/scale`, then PUT with the resourceVersion it read), `kubectl
//!   scale`, and an update that the webhook allowed but the API server then refused.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_e2e::certificate_support::Kubelet;
use baton_e2e::controller_support::{Controller, wait_event, wait_group_ready};
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::http_support::endpoints_on_pods;
use baton_e2e::keys::{
    LAST_DOWNSCALE, MIN_TIME_BETWEEN_ZONES_DOWNSCALE, PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH,
    PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::rbac_support::{
    Binary, SERVICE_ACCOUNT_NAMESPACE, allow_injection_into, bind_deploy_roles,
};
use baton_e2e::webhook_support::{
    TestTls, WebhookConfigurations, WebhookReplica, free_port, wait_for_webhooks,
};
use baton_e2e::zpdb_support::{client_without_retries, create_group_budget, evict};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::Command;

const TIMEOUT: Duration = Duration::from_secs(60);
const SHUTDOWN_PATH: &str = "ingester/prepare-shutdown";
const TRACKER: &str = "rollout-operator-zone-tracker";
/// The test's webhook is reached on 127.0.0.1, so the certificate must name it.
const LOCAL_IP: (&str, &str) = ("BATON_CERTIFICATES__EXTRA_IPS", "[127.0.0.1]");

/// A zone of group "ingester" opted in to prepare-downscale, its pods' endpoints on `port`, its
/// min-time set as the Go operator v0.38 sets it: an annotation.
fn zone(name: &str, replicas: i32, port: u16, min_time: &str) -> StatefulSetFixture {
    StatefulSetFixture::new(name)
        .group("ingester")
        .replicas(replicas)
        .label(PREPARE_DOWNSCALE, "true")
        .annotation(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, min_time)
        .annotation(PREPARE_DOWNSCALE_PATH, SHUTDOWN_PATH)
        .annotation(PREPARE_DOWNSCALE_PORT, &port.to_string())
}

async fn config_map_data(namespace: &TestNamespace, name: &str) -> BTreeMap<String, String> {
    namespace
        .api::<ConfigMap>()
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|config_map| config_map.data)
        .unwrap_or_default()
}

async fn last_downscale_annotation(api: &Api<StatefulSet>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .ok()?
        .metadata
        .annotations?
        .remove(LAST_DOWNSCALE)
}

/// Downscales `name` as the HPA controller does: GET `/scale`, then PUT it back with the new
/// replicas and the resourceVersion it read; on a conflict it tries again a second later (the
/// HPA's next sync). Returns how many PUTs it took, or the last refusal's message.
async fn hpa_scale(api: &Api<StatefulSet>, name: &str, replicas: i32) -> Result<usize, String> {
    let mut refusal = String::new();
    for attempt in 1..=5 {
        let mut scale = api
            .get_scale(name)
            .await
            .map_err(|error| error.to_string())?;
        scale.spec.get_or_insert_default().replicas = Some(replicas);
        match api
            .replace_scale(name, &PostParams::default(), &scale)
            .await
        {
            Ok(_) => return Ok(attempt),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                refusal = status.message;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(kube::Error::Api(status)) => return Err(status.message),
            Err(error) => return Err(error.to_string()),
        }
    }
    Err(format!("still conflicting after 5 tries: {refusal}"))
}

#[tokio::test]
async fn a_namespace_the_go_operator_v0_38_leaves_keeps_its_downscale_history_and_budgets() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "migrate-go").await;
    let (client, ns) = (namespace.client(), namespace.name());
    crds::install(
        &control_plane.admin_client().await,
        crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
    )
    .await;
    let simulator = PodSimulator::for_namespace(&namespace).await;
    let port = free_port().unwrap();

    // Given a namespace as a Go v0.38 deployment leaves it: its zone tracker says zone a was
    // downscaled 5 minutes ago, min-time is 12h as an annotation, no StatefulSet carries
    // last-downscale, a ZoneAwarePodDisruptionBudget guards the group, and the webhook
    // configurations are labelled for CA injection
    let five_minutes_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(5);
    let tracked = five_minutes_ago.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let tracker: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": TRACKER},
        "data": {"ingester-zone-a": format!(r#"{{"lastDownscaled":"{tracked}"}}"#)},
    }))
    .unwrap();
    namespace
        .api::<ConfigMap>()
        .create(&PostParams::default(), &tracker)
        .await
        .unwrap();
    for name in ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"] {
        zone(name, 3, port, "12h")
            .pod_label("rollout-group", "ingester")
            .create(&client, ns)
            .await;
    }
    let names = ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"];
    wait_group_ready(&client, ns, &names).await;
    create_group_budget(&client, ns, "ingester").await;

    // When baton is started from deploy/: both binaries with exactly its roles, the controller
    // issuing the certificate and injecting its CA, the webhook serving it
    bind_deploy_roles(&client, ns, Binary::Controller)
        .await
        .unwrap();
    bind_deploy_roles(&client, ns, Binary::Webhook)
        .await
        .unwrap();
    // and, as the switch says, the Go operator's configurations named in the controller's
    // ClusterRole so that baton injects its CA into them
    allow_injection_into(&client, ns, &[&format!("baton-e2e-{ns}")])
        .await
        .unwrap();
    let kubeconfig = |binary: Binary| {
        control_plane
            .service_account_kubeconfig(SERVICE_ACCOUNT_NAMESPACE, binary.service_account())
            .unwrap()
    };
    let controller = Controller::start_as(
        kubeconfig(Binary::Controller),
        ns,
        &[LOCAL_IP, ("BATON_PODS__ADDRESS_BY", "ip")],
    )
    .await;
    let kubelet = Kubelet::mount(namespace.api::<Secret>(), "baton-webhook-tls")
        .await
        .unwrap();
    let replica = WebhookReplica::serving_files(
        kubeconfig(Binary::Webhook),
        &kubelet.cert,
        &kubelet.key,
        ns,
        &[],
    )
    .await
    .unwrap();
    let _configurations =
        WebhookConfigurations::register_for_injection(control_plane, ns, &replica.url(""))
            .await
            .unwrap();
    wait_for_webhooks(&namespace).await;
    let pods: Vec<String> = names
        .iter()
        .flat_map(|zone| (0..3).map(move |ordinal| format!("{zone}-{ordinal}")))
        .collect();
    let endpoints = endpoints_on_pods(&simulator, &pods, port).await;
    let statefulsets = namespace.api::<StatefulSet>();

    // Then a downscale of zone b is refused, naming zone a and when the tracker says it was
    // downscaled, and no pod of zone b is told to prepare
    let denied = hpa_scale(&statefulsets, "ingester-zone-b", 2)
        .await
        .unwrap_err();
    let when = five_minutes_ago
        .strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
        .to_string();
    assert!(
        denied.contains(&format!(
            "downscale of statefulsets/ingester-zone-b in {ns} from 3 to 2 replicas is not allowed because statefulset ingester-zone-a was downscaled at {when} and is annotated to wait 12h0m0s between zone downscales (11h5"
        )),
        "{denied}"
    );
    assert_eq!(endpoints["ingester-zone-b-2"].calls(), Vec::<String>::new());

    // And zone a itself may go down again (min-time is between zones), on the first try
    assert_eq!(hpa_scale(&statefulsets, "ingester-zone-a", 2).await, Ok(1));
    // And the tracker is updated after that downscale, as the Go operator would have, with the
    // annotation the Go operator reads without a tracker
    wait_until(
        TIMEOUT,
        "the tracker records zone a's new downscale",
        || async {
            let data = config_map_data(&namespace, TRACKER).await;
            data.get("ingester-zone-a")
                .and_then(|value| serde_json::from_str::<Value>(value).ok())
                .and_then(|value| {
                    value["lastDownscaled"]
                        .as_str()?
                        .parse::<jiff::Timestamp>()
                        .ok()
                })
                .is_some_and(|at| at > five_minutes_ago)
        },
    )
    .await;
    wait_until(TIMEOUT, "zone a carries last-downscale", || async {
        last_downscale_annotation(&statefulsets, "ingester-zone-a")
            .await
            .is_some()
    })
    .await;
    // (zone c is still refused: the history is now baton's and the tracker's)
    let denied = hpa_scale(&statefulsets, "ingester-zone-c", 2)
        .await
        .unwrap_err();
    assert!(
        denied.contains("statefulset ingester-zone-a was downscaled at"),
        "{denied}"
    );

    // And an eviction is judged by the existing budget: one pod of zone b may go, a second
    // zone may not while zone b's replacement is not ready
    wait_group_ready(&client, ns, &names).await;
    let drain = client_without_retries(control_plane).await;
    assert_eq!(evict(&drain, ns, "ingester-zone-b-0").await, Ok(()));
    simulator.hold_not_ready("ingester-zone-b-0").await;
    let refused = evict(&drain, ns, "ingester-zone-c-0").await.unwrap_err();
    assert_eq!(refused.0, 429, "{refused:?}");
    assert!(refused.1.contains("ingester"), "{refused:?}");
    // And a malformed tracker entry is a Warning on its StatefulSet, and holds (it counts as a
    // downscale now) rather than lets anything through, but not forever: the leader writes it
    // back as that downscale, so the hold ends one min-time later whoever wrote it
    let written = jiff::Timestamp::now();
    namespace
        .api::<ConfigMap>()
        .patch(
            TRACKER,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ingester-zone-c": "last tuesday"}})),
        )
        .await
        .unwrap();
    wait_event(
        &client,
        ns,
        "ingester-zone-c",
        "ZoneTrackerEntryInvalid",
        &["\"ingester-zone-c\"", "\"last tuesday\"", TRACKER],
    )
    .await;
    wait_until(
        TIMEOUT,
        "zone c's tracker entry is written back",
        || async {
            let tracker = namespace.api::<ConfigMap>().get(TRACKER).await.unwrap();
            tracker
                .data
                .unwrap_or_default()
                .get("ingester-zone-c")
                .and_then(|value| serde_json::from_str::<serde_json::Value>(value).ok())
                .and_then(|value| {
                    value["lastDownscaled"]
                        .as_str()?
                        .parse::<jiff::Timestamp>()
                        .ok()
                })
                .is_some_and(|at| at >= written - jiff::SignedDuration::from_secs(1))
        },
    )
    .await;
    let denied = hpa_scale(&statefulsets, "ingester-zone-b", 2)
        .await
        .unwrap_err();
    // (the denial names the zone with the longest wait left, zone a or zone c; zone c's entry
    // no longer counts as a downscale now)
    assert!(
        denied.contains("was downscaled at")
            && denied.contains("to wait 12h0m0s")
            && !denied.contains("counts as downscaled"),
        "{denied}"
    );
    drop(kubelet);
    let output = format!(
        "{}{}",
        controller.process.output(),
        replica.process.output()
    );
    assert!(
        !output.contains("forbidden"),
        "a call was refused:\n{output}"
    );
}

#[tokio::test]
async fn an_hpa_style_writer_downscales_on_the_first_try_and_a_failed_update_holds_nothing() {
    let control_plane = ControlPlane::shared().await;
    let namespace = TestNamespace::create(control_plane, "migrate-hpa").await;
    let (client, ns) = (namespace.client(), namespace.name());
    let simulator = PodSimulator::for_namespace(&namespace).await;
    let port = free_port().unwrap();
    // An allowed update that fails is known not to have happened 3 s after its approval.
    let grace = ("BATON_DOWNSCALE__CLAIM_GRACE", "3s");
    let _controller = Controller::start(
        control_plane,
        ns,
        &[grace, ("BATON_PODS__ADDRESS_BY", "ip")],
    )
    .await;
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start_with(control_plane, &tls, ns, &[grace])
        .await
        .unwrap();
    let _configurations = WebhookConfigurations::register(control_plane, ns, &tls, &replica)
        .await
        .unwrap();
    wait_for_webhooks(&namespace).await;

    // Given a group whose zones a and b (4 replicas) prepare their pods before a downscale and
    // wait 1h between zones, and a group "spare" of the same kind
    let names = ["ingester-zone-a", "ingester-zone-b"];
    for name in names {
        zone(name, 4, port, "1h").create(&client, ns).await;
    }
    for name in ["spare-zone-a", "spare-zone-b"] {
        zone(name, 2, port, "1h")
            .group("spare")
            .create(&client, ns)
            .await;
    }
    wait_group_ready(&client, ns, &names).await;
    wait_group_ready(&client, ns, &["spare-zone-a", "spare-zone-b"]).await;
    let pods: Vec<String> = [
        "ingester-zone-a-3",
        "ingester-zone-a-2",
        "ingester-zone-b-3",
    ]
    .iter()
    .chain(&["spare-zone-a-1", "spare-zone-b-1"])
    .map(|pod| (*pod).to_owned())
    .collect();
    let endpoints = endpoints_on_pods(&simulator, &pods, port).await;
    let statefulsets = namespace.api::<StatefulSet>();
    let post = format!("POST /{SHUTDOWN_PATH}");
    let delete = format!("DELETE /{SHUTDOWN_PATH}");

    // When zone a is downscaled the way the HPA controller does it
    let attempts = hpa_scale(&statefulsets, "ingester-zone-a", 3).await;

    // Then it succeeds on the first try, and its pod 3 was told to prepare exactly once
    assert_eq!(attempts, Ok(1));
    assert_eq!(endpoints["ingester-zone-a-3"].calls(), vec![post.clone()]);
    // And the controller records the downscale once it has happened
    wait_event(
        &client,
        ns,
        "ingester-zone-a",
        "DownscaleRecorded",
        &["from 4 to 3"],
    )
    .await;
    // And min-time still refuses zone b, whose pod is never called
    let denied = hpa_scale(&statefulsets, "ingester-zone-b", 3)
        .await
        .unwrap_err();
    assert!(
        denied.contains("statefulset ingester-zone-a was downscaled at"),
        "{denied}"
    );
    assert_eq!(endpoints["ingester-zone-b-3"].calls(), Vec::<String>::new());
    // And `kubectl scale` works too (run without blocking the runtime the pods' endpoints
    // answer on)
    let output = Command::new(control_plane.kubectl())
        .args([
            "-n",
            ns,
            "scale",
            "statefulset/ingester-zone-a",
            "--replicas=2",
        ])
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(endpoints["ingester-zone-a-2"].calls(), vec![post.clone()]);
    // And that one is recorded too, and no pod that went is ever told to cancel
    wait_event(
        &client,
        ns,
        "ingester-zone-a",
        "DownscaleRecorded",
        &["from 3 to 2"],
    )
    .await;
    assert!(
        last_downscale_annotation(&statefulsets, "ingester-zone-a")
            .await
            .is_some()
    );
    assert_eq!(endpoints["ingester-zone-a-3"].calls(), vec![post.clone()]);

    // When spare zone a's downscale is allowed by the webhook but the API server then refuses
    // the update (a writer's stale resourceVersion: admission runs before the version check)
    let stale = statefulsets.get_scale("spare-zone-a").await.unwrap();
    statefulsets
        .patch(
            "spare-zone-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let mut scale = stale.clone();
    scale.spec.get_or_insert_default().replicas = Some(1);
    let refused = statefulsets
        .replace_scale("spare-zone-a", &PostParams::default(), &scale)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 409),
        "{refused}"
    );
    // (the API server may run admission twice when its cached StatefulSet was stale: the
    // pod is told once all the same)
    assert_eq!(endpoints["spare-zone-a-1"].calls(), vec![post.clone()]);

    // Then spare zone b is free to go down once the StatefulSet shows the update never landed
    wait_until(TIMEOUT, "spare zone b can be downscaled", || async {
        hpa_scale(&statefulsets, "spare-zone-b", 1).await.is_ok()
    })
    .await;
    // And the pod spare zone a told to prepare is told to cancel, once, and stays
    wait_until(TIMEOUT, "spare zone a's pod is told to cancel", || async {
        endpoints["spare-zone-a-1"].calls() == vec![post.clone(), delete.clone()]
    })
    .await;
    wait_event(
        &client,
        ns,
        "spare-zone-a",
        "DownscaleNotApplied",
        &["from 2 to 1", "never happened", "spare-zone-a-1"],
    )
    .await;
    let spare_a = statefulsets.get("spare-zone-a").await.unwrap();
    assert_eq!(spare_a.spec.and_then(|spec| spec.replicas), Some(2));
}
