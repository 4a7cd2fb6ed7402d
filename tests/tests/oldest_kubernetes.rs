//! The oldest Kubernetes release baton supports (README, "Supported Kubernetes versions"), as a
//! smoke test: a second control plane of its own release (`ControlPlane::oldest`, the binaries
//! `tests/control-plane/install.sh --oldest` builds, named by `E2E_OLDEST_KUBERNETES_ASSETS`)
//! takes deploy/ as it ships, rolls a group out, and calls every webhook. Every other scenario
//! runs on the newest release; together they test the supported range at both ends.

use std::time::Duration;

use baton_core::gates::CHECK_STATE_ANNOTATION;
use baton_e2e::Scene;
use baton_e2e::controller_support::{roll_out, wait_group_ready, wait_rollout_complete};
use baton_e2e::crds;
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::keys::NO_DOWNSCALE;
use baton_e2e::webhook_support::{
    MatchConditions, ShippedConfigurations, StateGuardConfiguration, TestTls, ValidatingWebhooks,
    WebhookConfigurations, WebhookReplica, eviction_webhook, replicas_patch, scale,
    wait_for_shipped_webhooks, wait_for_webhooks,
};
use baton_e2e::zpdb_support::{client_without_retries, create_group_budget, evict, evict_dry_run};
use baton_e2e::{ControlPlane, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
/// The minor version `install.sh --oldest` builds: the README's oldest supported release.
const OLDEST_MINOR: &str = "v1.32.";

/// The oldest release's control plane, checked to be that release.
async fn oldest() -> &'static ControlPlane {
    let control_plane = ControlPlane::oldest().await;
    let version = &control_plane.handshake().version;
    assert!(
        version.starts_with(OLDEST_MINOR),
        "E2E_OLDEST_KUBERNETES_ASSETS runs Kubernetes {version}, not the oldest supported {OLDEST_MINOR}x"
    );
    control_plane
}

#[tokio::test]
async fn deploy_as_it_ships_installs_for_real() {
    // Given the oldest supported release's control plane
    let control_plane = oldest().await;
    let deploy = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");

    // When deploy/ is applied for real with kubectl of that release (server-side: the apply is
    // judged exactly as a client-side one, and repeats cleanly)
    let output = std::process::Command::new(control_plane.kubectl())
        .args(["apply", "--server-side", "-k"])
        .arg(&deploy)
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .output()
        .expect("kubectl runs (install.sh --oldest builds it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // Then every object is created: the API versions deploy/ uses are served by this release
    assert!(
        output.status.success(),
        "kubectl apply -k deploy/ failed:\n{text}"
    );
    let client = control_plane.admin_client().await;
    let mut deployments: Vec<String> =
        Api::<Deployment>::namespaced(client.clone(), "baton-system")
            .list(&ListParams::default())
            .await
            .expect("listing baton-system's Deployments")
            .iter()
            .map(|deployment| deployment.name_any())
            .collect();
    deployments.sort();
    assert_eq!(deployments, ["baton-controller", "baton-webhook"]);
    for object in [
        "poddisruptionbudget.policy/baton-webhook",
        "validatingadmissionpolicy.admissionregistration.k8s.io/baton-controller-changes-only-ca-bundles",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/baton-controller-changes-only-ca-bundles",
        "role.rbac.authorization.k8s.io/baton-controller-groups",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-pod-eviction",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/baton-state-guard",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/baton-prepare-downscale",
        "customresourcedefinition.apiextensions.k8s.io/zoneawarepoddisruptionbudgets.rollout-operator.grafana.com",
        "customresourcedefinition.apiextensions.k8s.io/phasedrollouts.sts.plus",
    ] {
        assert!(text.contains(object), "{object} missing from:\n{text}");
    }
}

#[tokio::test]
async fn a_rollout_on_the_pod_simulator_completes() {
    // Given a group of two zones of two ready pods, and baton's controller
    let scene = Scene::start_on(oldest().await, "oldest-rollout", &[]).await;
    let (client, ns) = (scene.namespace.client(), scene.namespace.name());
    let mut names = Vec::new();
    for fixture in rollout_group("ingester", &["a", "b"], 2) {
        names.push(fixture.create(&client, ns).await.name_any());
    }
    wait_group_ready(&client, ns, &names).await;

    // When a new version is deployed to both zones
    roll_out(&client, ns, &names, "v2").await;

    // Then the rollout completes
    wait_rollout_complete(&client, ns, &names).await;
}

#[tokio::test]
async fn the_downscale_webhooks_and_the_state_guard_answer_through_the_api_server() {
    // Given a webhook replica registered for a namespace (no-downscale, prepare-downscale, and
    // the state guards as deploy/ configures them)
    let control_plane = oldest().await;
    let namespace = TestNamespace::create(control_plane, "oldest-webhooks").await;
    let _simulator = PodSimulator::for_namespace(&namespace).await;
    let tls = TestTls::generate().expect("a test CA");
    let replica = WebhookReplica::start_with(
        control_plane,
        &tls,
        namespace.name(),
        &[
            (
                "BATON_WEBHOOK__STATE_WRITERS",
                "[\"system:serviceaccount:baton-system:baton-controller\"]",
            ),
            (
                "BATON_WEBHOOK__RECORD_WRITERS",
                "[\"system:serviceaccount:baton-system:baton-controller\"]",
            ),
        ],
    )
    .await
    .expect("baton-webhook starts");
    let _configurations =
        WebhookConfigurations::register(control_plane, namespace.name(), &tls, &replica)
            .await
            .expect("registering the downscale webhooks");
    let _guards =
        StateGuardConfiguration::register(control_plane, namespace.name(), &tls, &replica)
            .await
            .expect("registering the state guards");

    // Then the API server calls no-downscale and prepare-downscale, each answering with its
    // denial (a labelled downscale; a downscale without the pods' endpoint)
    wait_for_webhooks(&namespace).await;
    let statefulsets = namespace.api::<StatefulSet>();
    StatefulSetFixture::new("guarded")
        .replicas(2)
        .label(NO_DOWNSCALE, "true")
        .create(&namespace.client(), namespace.name())
        .await;
    let denied = scale(&statefulsets, "guarded", 1, false)
        .await
        .expect_err("a downscale of a no-downscale StatefulSet is refused");
    assert!(denied.contains(NO_DOWNSCALE), "{denied}");
    // And the state guard refuses a member of a rollout group carrying forged gate state
    let forged = StatefulSetFixture::new("forged")
        .label("rollout-group", "forged")
        .annotation(CHECK_STATE_ANNOTATION, "{}");
    wait_until(TIMEOUT, "the state guard refuses forged state", || async {
        match statefulsets
            .create(&PostParams::default(), &forged.build())
            .await
        {
            Err(refused) => refused.to_string().contains("only baton's controller sets"),
            Ok(_) => {
                let _ = statefulsets.delete("forged", &Default::default()).await;
                false
            }
        }
    })
    .await;
}

#[tokio::test]
async fn the_zone_aware_budget_judges_real_evictions() {
    // Given three zones of two ready pods under a budget of one unavailable pod, and a webhook
    // replica registered for evictions and budgets
    let control_plane = oldest().await;
    crds::install(
        &control_plane.admin_client().await,
        crds::ZONE_AWARE_POD_DISRUPTION_BUDGET,
    )
    .await;
    let namespace = TestNamespace::create(control_plane, "oldest-zpdb").await;
    let (client, ns) = (namespace.client(), namespace.name());
    let simulator = PodSimulator::for_namespace(&namespace).await;
    let mut names = Vec::new();
    for zone in ["a", "b", "c"] {
        let name = format!("ingester-zone-{zone}");
        StatefulSetFixture::new(&name)
            .group("ingester")
            .pod_label("rollout-group", "ingester")
            .replicas(2)
            .create(&client, ns)
            .await;
        names.push(name);
    }
    wait_group_ready(&client, ns, &names).await;
    let tls = TestTls::generate().expect("a test CA");
    let replica = WebhookReplica::start(control_plane, &tls, ns)
        .await
        .expect("baton-webhook starts");
    let _configuration = ValidatingWebhooks::register(
        control_plane,
        &format!("baton-e2e-zpdb-{ns}"),
        json!([eviction_webhook(
            "pod-eviction.baton.test",
            &tls,
            &replica,
            ns
        )]),
    )
    .await;
    create_group_budget(&client, ns, "ingester").await;
    let evictor = client_without_retries(control_plane).await;

    // When a pod of zone a is not ready (as after an eviction)
    simulator.hold_not_ready("ingester-zone-a-0").await;

    // Then, once the API server calls the webhook (dry runs until then: nothing is evicted
    // before the webhook judges), evicting a pod of zone b through the Eviction API is refused
    // with 429, naming the zone that is not ready
    wait_until(
        TIMEOUT,
        "a dry-run eviction in zone b is refused",
        || async {
            matches!(
                evict_dry_run(&evictor, ns, "ingester-zone-b-0").await,
                Err((429, message)) if message.contains("ingester-zone-a")
            )
        },
    )
    .await;
    match evict(&evictor, ns, "ingester-zone-b-0").await {
        Ok(()) => panic!("ingester-zone-b-0 was evicted while zone a is not ready"),
        Err((code, message)) => {
            assert_eq!(code, 429, "{message}");
            assert!(message.contains("ingester-zone-a"), "{message}");
        }
    }

    // When zone a is ready again
    let pods = namespace.api::<Pod>();
    let before = pods
        .get("ingester-zone-b-0")
        .await
        .expect("reading ingester-zone-b-0")
        .uid();
    simulator.release("ingester-zone-a-0").await;

    // Then the eviction in zone b is allowed, and the pod goes (the StatefulSet controller
    // replaces it with a new one)
    wait_until(TIMEOUT, "the eviction in zone b is allowed", || async {
        evict(&evictor, ns, "ingester-zone-b-0").await.is_ok()
    })
    .await;
    wait_until(TIMEOUT, "the evicted pod is gone", || async {
        pods.get_opt("ingester-zone-b-0")
            .await
            .ok()
            .flatten()
            .is_none_or(|pod| pod.metadata.deletion_timestamp.is_some() || pod.uid() != before)
    })
    .await;
}

#[tokio::test]
async fn the_controller_may_change_only_the_ca_bundle_of_a_webhook_configuration() {
    baton_e2e::rbac_support::the_controller_changes_only_ca_bundles(oldest().await).await;
}

#[tokio::test]
async fn deploys_match_conditions_send_what_the_downscale_webhooks_judge() {
    // Given deploy/'s no-downscale and prepare-downscale configurations, as shipped (with their
    // matchConditions), calling a webhook replica for a namespace
    let control_plane = oldest().await;
    let namespace = TestNamespace::create(control_plane, "oldest-conditions").await;
    let _simulator = PodSimulator::for_namespace(&namespace).await;
    let tls = TestTls::generate().expect("a test CA");
    let replica = WebhookReplica::start(control_plane, &tls, namespace.name())
        .await
        .expect("baton-webhook starts");
    let _configurations = ShippedConfigurations::register(
        control_plane,
        namespace.name(),
        &tls,
        &replica,
        &["baton-no-downscale", "baton-prepare-downscale"],
        MatchConditions::AsShipped,
    )
    .await
    .expect("registering deploy/'s downscale webhooks");

    // Then the API server of the oldest release evaluates them and calls both webhooks for a
    // downscale through /scale (the probes: each refuses its own)
    wait_for_shipped_webhooks(&namespace).await;
    // And for a labelled StatefulSet losing replicas through its spec
    StatefulSetFixture::new("guarded")
        .replicas(2)
        .label(NO_DOWNSCALE, "true")
        .create(&namespace.client(), namespace.name())
        .await;
    let statefulsets = namespace.api::<StatefulSet>();
    let (params, patch) = replicas_patch(1, false);
    let refused = statefulsets
        .patch("guarded", &params, &patch)
        .await
        .expect_err("a downscale of a no-downscale StatefulSet is refused");
    assert!(
        refused
            .to_string()
            .contains("no-downscale.baton.grafana.com"),
        "{refused}"
    );
    // And an unlabelled one scales freely
    StatefulSetFixture::new("free")
        .replicas(2)
        .create(&namespace.client(), namespace.name())
        .await;
    statefulsets
        .patch("free", &params, &patch)
        .await
        .expect("an unlabelled StatefulSet scales down");
}
