//! Scaling by baton-controller on the real control plane: replicas mirrored from a reference
//! resource through its scale subresource, delayed downscale negotiated with test
//! servers on the pods' IPs, leader/follower zones with the prepare-downscale webhook in the
//! loop, and bad inputs that must only produce Events.

use std::collections::HashMap;
use std::time::Duration;

use baton_e2e::controller_support::wait_group_ready;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::http_support::PodEndpoint;
use baton_e2e::keys::{
    DELAYED_DOWNSCALE, DELAYED_DOWNSCALE_URL, DOWNSCALE_LEADER, MIN_TIME_BETWEEN_ZONES_DOWNSCALE,
    MIRROR_API_VERSION, MIRROR_KIND, MIRROR_NAME, NO_DOWNSCALE, PREPARE_DOWNSCALE,
    PREPARE_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::scaling_support::{
    REPLICA_TEMPLATE_API_VERSION, REPLICA_TEMPLATE_KIND, ReplicaTemplates,
    install_replica_template_crd,
};
use baton_e2e::webhook_support::{TestTls, WebhookConfigurations, WebhookReplica, free_port};
use baton_e2e::{ControlPlane, Scene, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn spec_replicas(api: &Api<StatefulSet>, name: &str) -> i32 {
    api.get(name)
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.replicas)
        .unwrap()
}

/// A StatefulSet mirroring the ReplicaTemplate `reference`.
fn mirroring(name: &str, group: &str, replicas: i32, reference: &str) -> StatefulSetFixture {
    StatefulSetFixture::new(name)
        .group(group)
        .replicas(replicas)
        .annotation(MIRROR_NAME, reference)
        .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
        .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
}

/// A controlled namespace for scaling (pods reached by IP, scaling polled every 300 ms) and
/// the ReplicaTemplates its groups follow.
async fn mirroring_scene(prefix: &str) -> (Scene, ReplicaTemplates) {
    install_replica_template_crd(ControlPlane::shared().await)
        .await
        .unwrap();
    let scene = Scene::start_with(
        prefix,
        &[
            ("BATON_PODS__ADDRESS_BY", "ip"),
            ("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "300ms"),
        ],
    )
    .await;
    let templates = ReplicaTemplates::new(scene.client(), scene.name());
    (scene, templates)
}

// The steps only these scenarios take.

fn statefulsets_of(scene: &Scene) -> Api<StatefulSet> {
    scene.namespace.api()
}

async fn replicas_of(scene: &Scene, name: &str) -> i32 {
    spec_replicas(&statefulsets_of(scene), name).await
}

async fn wait_replicas(scene: &Scene, name: &str, replicas: i32) {
    wait_until(
        TIMEOUT,
        &format!("{name} has spec.replicas {replicas}"),
        || async { replicas_of(scene, name).await == replicas },
    )
    .await;
}

async fn wait_status_replicas(templates: &ReplicaTemplates, template: &str, replicas: i32) {
    wait_until(
        TIMEOUT,
        &format!("reference {template} has status.replicas {replicas}"),
        || async { templates.status_replicas(template).await == Some(replicas) },
    )
    .await;
}

#[tokio::test]
async fn a_statefulset_follows_its_reference_resource_and_writes_status_back() {
    // Given a reference resource (a ReplicaTemplate, the CRD of deploy/crds) with 2 replicas
    // and a StatefulSet mirroring it
    let (scene, templates) = mirroring_scene("scaling-mirror").await;
    templates.create("ingester", 2).await;
    mirroring("ingester-zone-a", "ingester", 2, "ingester")
        .create(&scene.namespace.client(), scene.namespace.name())
        .await;
    // Then baton writes the StatefulSet's replicas back to the reference's status
    wait_status_replicas(&templates, "ingester", 2).await;

    // When an autoscaler scales the template up, the StatefulSet follows, status written back
    templates.scale("ingester", 4).await;
    wait_replicas(&scene, "ingester-zone-a", 4).await;
    wait_status_replicas(&templates, "ingester", 4).await;
    scene
        .wait_event(
            "ingester-zone-a",
            "ScalingUp",
            &["ingester-zone-a scales up from 2 to 4: ReplicaTemplate ingester (rollout-operator.grafana.com/v1) wants 4 replicas"],)
        .await;

    // And down again (no delayed downscale configured: at once)
    templates.scale("ingester", 1).await;
    wait_replicas(&scene, "ingester-zone-a", 1).await;
    wait_status_replicas(&templates, "ingester", 1).await;
}

#[tokio::test]
async fn delayed_downscale_waits_for_the_pods_and_cancels_when_scaled_back_up() {
    // Given a StatefulSet of 3 mirroring a template, with a 1h delayed downscale, and a prepare
    // endpoint on each pod's IP
    let (scene, templates) = mirroring_scene("scaling-delayed").await;
    let port = free_port().unwrap();
    let mut endpoints = HashMap::new();
    for ordinal in 0..3 {
        let pod = format!("delayed-zone-a-{ordinal}");
        let endpoint = PodEndpoint::start(scene.simulator.pod_ip(&pod), port)
            .await
            .unwrap();
        endpoints.insert(ordinal, endpoint);
    }
    templates.create("delayed", 3).await;
    mirroring("delayed-zone-a", "delayed", 3, "delayed")
        .annotation(DELAYED_DOWNSCALE, "1h")
        .annotation(
            DELAYED_DOWNSCALE_URL,
            &format!("http://pod:{port}/prepare-delayed-downscale"),
        )
        .create(&scene.namespace.client(), scene.namespace.name())
        .await;
    wait_status_replicas(&templates, "delayed", 3).await;
    let now = jiff::Timestamp::now().as_second();

    // When the template wants 1 while every pod has only just prepared
    templates.scale("delayed", 1).await;
    // Then pods 1 and 2 are asked to prepare, pod 0 is told to cancel, and nothing goes yet
    scene
        .wait_event(
            "delayed-zone-a",
            "DelayedDownscaleWaiting",
            &["delayed-zone-a stays at 3 (wanted 1): delayed downscale of 1h"],
        )
        .await;
    assert!(endpoints[&1].count("POST") > 0 && endpoints[&2].count("POST") > 0);
    assert!(endpoints[&0].count("DELETE") > 0);
    assert_eq!(
        endpoints[&0].count("POST"),
        0,
        "pod 0 stays: never prepared"
    );
    assert_eq!(replicas_of(&scene, "delayed-zone-a").await, 3);

    // When only the highest pod prepared more than the delay ago
    endpoints[&2].prepared_at(now - 2 * 3600);
    // Then a partial downscale removes only it
    wait_replicas(&scene, "delayed-zone-a", 2).await;
    wait_status_replicas(&templates, "delayed", 2).await;
    scene
        .wait_event(
            "delayed-zone-a",
            "ScalingDown",
            &["delayed-zone-a scales down from 3 to 2 (of the wanted 1"],
        )
        .await;
    assert_eq!(replicas_of(&scene, "delayed-zone-a").await, 2);

    // When the template is scaled back up to the current replicas
    // (forget pod 1's earlier calls: while the template said 3 it was told to cancel too)
    endpoints[&1].clear();
    templates.scale("delayed", 2).await;
    // Then pod 1's preparation is cancelled with DELETE and it stays. While the template wants
    // 1, pod 1 only gets POSTs; passes of a group never overlap, so once a DELETE arrived every
    // later pass sees the new count: from then on pod 1 is only told to cancel.
    wait_until(TIMEOUT, "pod 1 receives DELETE", || async {
        endpoints[&1].count("DELETE") > 0
    })
    .await;
    endpoints[&1].clear();
    wait_until(TIMEOUT, "pod 1 receives DELETE again", || async {
        endpoints[&1].count("DELETE") > 0
    })
    .await;
    assert_eq!(replicas_of(&scene, "delayed-zone-a").await, 2);
    assert!(
        endpoints[&1]
            .calls()
            .iter()
            .all(|call| call == "DELETE /prepare-delayed-downscale"),
        "{:?}",
        endpoints[&1].calls()
    );
}

#[tokio::test]
async fn a_follower_zone_scales_up_at_once_and_down_only_after_min_time_and_denials_hold() {
    // Given the webhook registered for the namespace, and zones a and b (b follows a), both
    // opted in to prepare-downscale with a 5s min time between zone downscales
    let control_plane = ControlPlane::shared().await;
    let (scene, _templates) = mirroring_scene("scaling-leader").await;
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start(control_plane, &tls, scene.namespace.name())
        .await
        .unwrap();
    let _configurations =
        WebhookConfigurations::register(control_plane, scene.namespace.name(), &tls, &replica)
            .await
            .unwrap();
    let port = free_port().unwrap();
    let mut pod_endpoints = Vec::new();
    for zone in ["a", "b"] {
        for ordinal in 0..3 {
            let pod = format!("ingester-zone-{zone}-{ordinal}");
            pod_endpoints.push(
                PodEndpoint::start(scene.simulator.pod_ip(&pod), port)
                    .await
                    .unwrap(),
            );
        }
    }
    let zone = |name: &str| {
        StatefulSetFixture::new(name)
            .group("ingester")
            .replicas(2)
            .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, "5s")
            .label(PREPARE_DOWNSCALE, "true")
            .annotation(PREPARE_DOWNSCALE_PATH, "ingester/prepare-shutdown")
            .annotation(PREPARE_DOWNSCALE_PORT, &port.to_string())
    };
    let client = scene.namespace.client();
    let ns = scene.namespace.name();
    zone("ingester-zone-a").create(&client, ns).await;
    zone("ingester-zone-b")
        .annotation(DOWNSCALE_LEADER, "ingester-zone-a")
        .create(&client, ns)
        .await;
    let statefulsets = statefulsets_of(&scene);
    wait_for_webhooks(&scene).await;
    wait_group_ready(&client, ns, &["ingester-zone-a", "ingester-zone-b"]).await;

    // When zone a is scaled up, zone b follows at once
    scale(&statefulsets, "ingester-zone-a", 3).await.unwrap();
    wait_replicas(&scene, "ingester-zone-b", 3).await;
    wait_group_ready(&client, ns, &["ingester-zone-a", "ingester-zone-b"]).await;

    // When zone a is scaled down (the webhook approves it, and the controller records
    // last-downscale on a once it has happened)
    scale(&statefulsets, "ingester-zone-a", 2).await.unwrap();
    let zone_a_downscaled = wait_last_downscale(&statefulsets, "ingester-zone-a").await;
    // Then zone b holds, saying why
    scene
        .wait_event(
            "ingester-zone-b",
            "ScalingHeld",
            &["ingester-zone-b stays at 3 (its leader ingester-zone-a has 2 replicas): ingester-zone-a was downscaled at"],)
        .await;
    assert_eq!(replicas_of(&scene, "ingester-zone-b").await, 3);
    // And follows only once the min time has passed: the webhook records zone b's downscale
    // (both times in whole seconds of the same clock) at least 5s after zone a's
    wait_replicas(&scene, "ingester-zone-b", 2).await;
    let zone_b_downscaled = wait_last_downscale(&statefulsets, "ingester-zone-b").await;
    let gap = zone_b_downscaled.duration_since(zone_a_downscaled);
    assert!(
        gap >= jiff::SignedDuration::from_secs(5),
        "zone b was downscaled {gap:#} after zone a"
    );
    scene
        .wait_event(
            "ingester-zone-b",
            "ScalingDown",
            &["ingester-zone-b scales down from 3 to 2"],
        )
        .await;

    // Given a follower whose downscales the no-downscale webhook denies
    StatefulSetFixture::new("guarded-zone-a")
        .group("guarded")
        .replicas(2)
        .create(&client, ns)
        .await;
    StatefulSetFixture::new("guarded-zone-b")
        .group("guarded")
        .replicas(2)
        .label(MIN_TIME_BETWEEN_ZONES_DOWNSCALE, "0s")
        .label(NO_DOWNSCALE, "true")
        .annotation(DOWNSCALE_LEADER, "guarded-zone-a")
        .create(&client, ns)
        .await;
    wait_group_ready(&client, ns, &["guarded-zone-a"]).await;
    // When its leader goes down
    scale(&statefulsets, "guarded-zone-a", 1).await.unwrap();
    // Then the denial is told as an Event and the follower keeps its replicas
    scene
        .wait_event(
            "guarded-zone-b",
            "ScalingDenied",
            &["guarded-zone-b stays at 2: scaling it to 1 failed: admission webhook \"no-downscale.baton.test\" denied the request"],)
        .await;
    assert_eq!(replicas_of(&scene, "guarded-zone-b").await, 2);
    drop(replica);
}

#[tokio::test]
async fn bad_inputs_only_produce_events() {
    // Given StatefulSets with every kind of bad scaling input, each in its own group
    let (scene, templates) = mirroring_scene("scaling-bad").await;
    let port = free_port().unwrap();
    let garbage = PodEndpoint::start(scene.simulator.pod_ip("bad-answer-1"), port)
        .await
        .unwrap();
    garbage.answer_with("POST", 200, "prepared, probably");
    templates.create("one", 1).await;
    let client = scene.namespace.client();
    let ns = scene.namespace.name();
    StatefulSetFixture::new("unknown-kind")
        .group("unknown-kind")
        .replicas(2)
        .annotation(MIRROR_NAME, "x")
        .annotation(MIRROR_KIND, "NoSuchKind")
        .annotation(MIRROR_API_VERSION, "example.com/v1")
        .create(&client, ns)
        .await;
    // A ReplicaTemplate: discovery resolves the kind (the CRD is installed), no such object.
    StatefulSetFixture::new("missing-reference")
        .group("missing-reference")
        .replicas(2)
        .annotation(MIRROR_NAME, "does-not-exist")
        .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
        .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
        .create(&client, ns)
        .await;
    mirroring("bad-duration", "bad-duration", 2, "one")
        .annotation(DELAYED_DOWNSCALE, "-1h")
        .annotation(DELAYED_DOWNSCALE_URL, &format!("http://pod:{port}/prepare"))
        .create(&client, ns)
        .await;
    mirroring("bad-answer", "bad-answer", 2, "one")
        .annotation(DELAYED_DOWNSCALE, "1h")
        .annotation(DELAYED_DOWNSCALE_URL, &format!("http://pod:{port}/prepare"))
        .create(&client, ns)
        .await;
    StatefulSetFixture::new("lost-follower")
        .group("lost-follower")
        .replicas(2)
        .annotation(DOWNSCALE_LEADER, "ghost")
        .create(&client, ns)
        .await;

    // Then each gets a warning Event naming the problem
    scene
        .wait_event(
            "unknown-kind",
            "ScalingReferenceUnavailable",
            &["cannot read the scale of NoSuchKind x (example.com/v1)"],
        )
        .await;
    scene
        .wait_event(
            "missing-reference",
            "ScalingReferenceUnavailable",
            &["cannot read the scale of ReplicaTemplate does-not-exist"],
        )
        .await;
    scene
        .wait_event(
            "bad-duration",
            "ScalingInvalidSetting",
            &["grafana.com/rollout-delayed-downscale has the invalid value \"-1h\""],
        )
        .await;
    scene
        .wait_event(
            "bad-answer",
            "DelayedDownscaleFailed",
            &["bad-answer-1: expected JSON {\"timestamp\": <unix seconds>}, got 18 bytes that are not ("],)
        .await;
    scene
        .wait_event(
            "lost-follower",
            "ScalingLeaderNotFound",
            &["its leader ghost is not a StatefulSet of rollout group lost-follower"],
        )
        .await;

    // And nothing was scaled, and the controller keeps running and answering
    for name in [
        "unknown-kind",
        "missing-reference",
        "bad-duration",
        "bad-answer",
        "lost-follower",
    ] {
        assert_eq!(replicas_of(&scene, name).await, 2, "{name}");
    }
    let mut controller = scene.controller;
    assert!(
        !controller.process.has_exited(),
        "{}",
        controller.process.output()
    );
    controller.wait_ready().await;
}

#[tokio::test]
async fn a_replica_count_anyone_can_write_cannot_make_the_leader_grow_or_scale_without_end() {
    // Given a follower zone with a delayed downscale, and a running controller
    let (scene, _templates) = mirroring_scene("scaling-huge").await;
    let (client, ns) = (scene.namespace.client(), scene.namespace.name());
    StatefulSetFixture::new("huge-zone-a")
        .group("huge")
        .replicas(2)
        .create(&client, ns)
        .await;
    StatefulSetFixture::new("huge-zone-b")
        .group("huge")
        .replicas(2)
        .annotation(DOWNSCALE_LEADER, "huge-zone-a")
        .annotation(DELAYED_DOWNSCALE, "1h")
        .annotation(DELAYED_DOWNSCALE_URL, "http://pod:8080/prepare")
        .create(&client, ns)
        .await;
    wait_group_ready(&client, ns, &["huge-zone-a", "huge-zone-b"]).await;
    let pid = scene.controller.process.pid().expect("the controller runs");
    let before = resident_kib(pid);

    // When someone who may edit it forces the follower to 2147483647 replicas
    statefulsets_of(&scene)
        .patch(
            "huge-zone-b",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"grafana.com/rollout-force-replicas": "2147483647"}}}),
            ),
        )
        .await
        .unwrap();

    // Then it is held at its replicas with a Warning saying why
    scene
        .wait_event(
            "huge-zone-b",
            "ScalingInvalidSetting",
            &["huge-zone-b stays at 2: force-replicas is 2147483647, more than the 100000 replicas baton ever sets"],)
        .await;
    assert_eq!(replicas_of(&scene, "huge-zone-b").await, 2);
    // And the controller did not build anything of that size (two billion pod names would be
    // tens of GiB; a few MiB of noise is allowed)
    let after = resident_kib(pid);
    assert!(
        after < before + 16 * 1024,
        "the controller grew from {before} KiB to {after} KiB"
    );
}

/// The resident memory of process `pid`, in KiB (`VmRSS` of /proc/<pid>/status).
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// The API server picks webhook configurations up asynchronously: probe (with StatefulSets in
/// no rollout group) until both webhooks judge.
async fn wait_for_webhooks(scene: &Scene) {
    let client = scene.namespace.client();
    let ns = scene.namespace.name();
    StatefulSetFixture::new("probe-no-downscale")
        .replicas(1)
        .label(NO_DOWNSCALE, "true")
        .create(&client, ns)
        .await;
    // Opted in to prepare-downscale without the port annotation: every real downscale is denied.
    StatefulSetFixture::new("probe-prepare")
        .replicas(1)
        .label(PREPARE_DOWNSCALE, "true")
        .create(&client, ns)
        .await;
    let statefulsets = statefulsets_of(scene);
    wait_until(
        TIMEOUT,
        "both webhooks are called by the API server",
        || {
            let statefulsets = statefulsets.clone();
            async move {
                let validating = statefulsets
                    .patch_scale(
                        "probe-no-downscale",
                        &PatchParams::default().dry_run(),
                        &Patch::Merge(json!({"spec": {"replicas": 0}})),
                    )
                    .await
                    .is_err_and(|error| error.to_string().contains("no-downscale.baton.test"));
                let mutating = match scale(&statefulsets, "probe-prepare", 0).await {
                    Err(error) => error.contains("prepare-downscale.baton.test"),
                    Ok(()) => {
                        let _ = scale(&statefulsets, "probe-prepare", 1).await;
                        false
                    }
                };
                validating && mutating
            }
        },
    )
    .await;
}

/// `grafana.com/last-downscale` of `name`.
/// Waits until the controller has recorded `name`'s downscale in its last-downscale annotation.
async fn wait_last_downscale(api: &Api<StatefulSet>, name: &str) -> jiff::Timestamp {
    wait_until(
        TIMEOUT,
        &format!("{name} carries last-downscale"),
        || async { last_downscale(api, name).await.is_some() },
    )
    .await;
    last_downscale(api, name).await.expect("waited for")
}

async fn last_downscale(api: &Api<StatefulSet>, name: &str) -> Option<jiff::Timestamp> {
    api.get(name)
        .await
        .ok()?
        .metadata
        .annotations?
        .get("grafana.com/last-downscale")?
        .parse()
        .ok()
}

/// Scales through the `/scale` subresource; a denial is returned as its message.
async fn scale(api: &Api<StatefulSet>, name: &str, replicas: i32) -> Result<(), String> {
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .map(|_| ())
    .map_err(|error| error.to_string())
}
