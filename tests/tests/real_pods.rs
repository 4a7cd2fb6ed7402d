//! Scenarios on real nodes (`baton_e2e::real_nodes`): a kubelet per zone runs the test
//! application in containerd, kube-scheduler places the pods, readiness comes from real probes,
//! a terminating pod stays Terminating until its process exits, a container that exits 1 goes
//! into the kubelet's own CrashLoopBackOff (and a version it cannot start waits with the
//! kubelet's own reason), and baton talks to the pods over their real IPs.
//! What the pod simulator stands in for everywhere else is checked here against the real thing.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use baton_e2e::controller_support::{events_about, wait_group_ready};
use baton_e2e::crds;
use baton_e2e::fixtures::StatefulSetFixture;
use baton_e2e::keys::{
    DELAYED_DOWNSCALE, DELAYED_DOWNSCALE_URL, MIRROR_API_VERSION, MIRROR_KIND, MIRROR_NAME,
    PREPARE_DOWNSCALE, PREPARE_DOWNSCALE_PATH, PREPARE_DOWNSCALE_PORT,
};
use baton_e2e::real_nodes::{
    APP_PORT, Behaviour, RealPodsFixture, Uncordon, app_calls, pod_ip, real_rollout_group,
    roll_out, set_version,
};
use baton_e2e::scaling_support::{
    REPLICA_TEMPLATE_API_VERSION, REPLICA_TEMPLATE_KIND, ReplicaTemplates,
    install_replica_template_crd,
};
use baton_e2e::timeline::{Zone, check_rollout_guarantees, zone_windows};
use baton_e2e::webhook_support::{
    TestTls, ValidatingWebhooks, WebhookConfigurations, WebhookReplica, eviction_webhook, scale,
    wait_for_webhooks,
};
use baton_e2e::zpdb_support::{answer_of, budget, eviction_review, zpdb_resource};
use baton_e2e::{PodEvent, PodTransition, Scene, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
/// Where the Go operator's users have their pods prepare for a downscale (the test application
/// answers any path containing `prepare-shutdown`).
const SHUTDOWN_PATH: &str = "ingester/prepare-shutdown";

/// How long each pod that left from `from` on stayed Terminating (deletion requested → gone).
fn terminating_times(timeline: &[PodTransition], from: Instant) -> Vec<(String, Duration)> {
    let mut times = Vec::new();
    for terminating in timeline
        .iter()
        .filter(|transition| transition.at >= from && transition.event == PodEvent::Terminating)
    {
        if let Some(deleted) = timeline.iter().find(|transition| {
            transition.uid == terminating.uid && transition.event == PodEvent::Deleted
        }) {
            times.push((terminating.pod.clone(), deleted.at - terminating.at));
        }
    }
    times
}

/// Baton's reaction on real pods: for each pod deleted from `from` on after an earlier pod of
/// its zone became Ready again, the time from that Ready to this deletion.
fn reactions(timeline: &[PodTransition], from: Instant) -> Vec<Duration> {
    let mut reactions = Vec::new();
    for (index, terminating) in timeline.iter().enumerate() {
        if terminating.at < from || terminating.event != PodEvent::Terminating {
            continue;
        }
        let last_ready = timeline[..index].iter().rev().find(|transition| {
            transition.at >= from
                && transition.event == PodEvent::Ready
                && transition.statefulset == terminating.statefulset
        });
        if let Some(ready) = last_ready {
            reactions.push(terminating.at - ready.at);
        }
    }
    reactions
}

// The steps only these scenarios take.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_zone_rollout_on_real_pods_keeps_the_guarantees_while_pods_terminate_for_real() {
    let _shared = NODES.read().await;
    // Given a ready group of 3 zones × 2 real pods, each taking 2s to stop after SIGTERM (grace
    // period 30s), Ready only once the kubelet's probe of /ready passes
    let scene = Scene::on_real_nodes("rollout", &[]).await;
    let stop_delay = Duration::from_secs(2);
    let fixtures: Vec<_> = real_rollout_group("ingester", 2)
        .into_iter()
        .map(|fixture| fixture.stop_delay(stop_delay).grace_period_seconds(30))
        .collect();
    let names = scene.create(&fixtures).await;

    // When every zone's template changes
    let from = Instant::now();
    roll_out(
        &scene.client(),
        scene.name(),
        &names,
        "v2",
        Behaviour::Healthy,
    )
    .await;

    // Then every zone completes, and the timeline never had two zones, or two pods of a zone,
    // down at once
    scene.wait_complete(&names).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    let timeline = scene.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();

    // And every old pod stayed Terminating until its process stopped: the kubelet, not a
    // simulator, finished each deletion
    let terminating = terminating_times(&timeline, from);
    assert_eq!(terminating.len(), 6, "every old pod left: {terminating:?}");
    for (pod, time) in &terminating {
        assert!(
            *time >= stop_delay - Duration::from_millis(300),
            "{pod} was gone {time:?} after its deletion, before its process could stop"
        );
    }
    let reactions = reactions(&timeline, from);
    eprintln!(
        "real pods: terminating for {:?}; pod Ready → next deletion in its zone: {reactions:?}",
        terminating
            .iter()
            .map(|(_, time)| *time)
            .collect::<Vec<_>>()
    );
}

/// What the kubelet says of the app container of `pod` waiting, if it waits.
fn app_waiting(pod: &Pod) -> Option<&ContainerStateWaiting> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|container| container.name == "app")?
        .state
        .as_ref()?
        .waiting
        .as_ref()
}

/// Why the kubelet says the app container of `pod` waits, if it does.
fn app_waiting_reason(pod: &Pod) -> Option<&str> {
    app_waiting(pod)?.reason.as_deref()
}

/// The scenario of a version whose pods never become ready, each stuck as the kubelet says.
/// Given a ready group of 3 zones × 2 real pods (the fewest where a stuck pod leaves its zone
/// at max-unavailable with an old pod still to roll), when v2 (`stuck`) is rolled out, then its
/// first pod waits for each of `reasons` in turn, as the kubelet reports it, and the group
/// halts at max-unavailable naming that pod and each reason; when the fix v3 is rolled out,
/// the stuck pod is replaced at no cost (its Event naming one of `reasons`) although its zone
/// is at max-unavailable, and every zone completes with never more than one zone and one pod
/// per zone down.
async fn a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
    prefix: &str,
    stuck: Behaviour,
    reasons: &[&str],
) {
    let scene = Scene::on_real_nodes(prefix, &[]).await;
    let names = scene.create(&real_rollout_group("ingester", 2)).await;

    // When v2, whose pods never become ready, is rolled out
    let from = Instant::now();
    roll_out(&scene.client(), scene.name(), &names, "v2", stuck).await;

    // Then its first pod waits for each reason as the kubelet reports it, and the group halts,
    // naming the pod and that reason
    let is_stuck = |pod: &Pod| app_waiting_reason(pod).is_some_and(|why| reasons.contains(&why));
    wait_until(TIMEOUT, &format!("a v2 pod waits: {reasons:?}"), || async {
        scene.pods().await.iter().any(is_stuck)
    })
    .await;
    let pod = scene
        .pods()
        .await
        .into_iter()
        .find(is_stuck)
        .and_then(|pod| pod.metadata.name)
        .expect("waited for");
    let zone = pod
        .rsplit_once('-')
        .map_or(pod.as_str(), |(statefulset, _)| statefulset)
        .to_owned();
    for reason in reasons {
        wait_until(
            TIMEOUT,
            &format!("the kubelet says {pod} waits: {reason}"),
            || async {
                scene.pods().await.iter().any(|candidate| {
                    candidate.metadata.name.as_deref() == Some(pod.as_str())
                        && app_waiting_reason(candidate) == Some(reason)
                })
            },
        )
        .await;
        let said = scene
            .pods()
            .await
            .iter()
            .filter(|candidate| candidate.metadata.name.as_deref() == Some(pod.as_str()))
            .find_map(|candidate| app_waiting(candidate).cloned());
        eprintln!("the kubelet says {pod} waits: {said:?}");
        scene
            .wait_event(
                &zone,
                "MaxUnavailable",
                &[
                    &format!("max-unavailable reached in {zone} (1/1)"),
                    &format!("waiting for {pod} (new revision) to become ready: {reason}"),
                ],
            )
            .await;
    }
    let mut updated = Vec::new();
    for name in &names {
        updated.push(scene.updated_pods(name).await);
    }
    assert_eq!(
        updated.iter().sum::<usize>(),
        1,
        "only the stuck pod runs v2: {updated:?}"
    );

    // When the fix v3 is rolled out
    roll_out(
        &scene.client(),
        scene.name(),
        &names,
        "v3",
        Behaviour::Healthy,
    )
    .await;

    // Then the stuck v2 pod is replaced at no cost, naming the kubelet's reason, and every zone
    // completes with never more than one zone and one pod per zone down
    scene.wait_complete(&names).await;
    let replaced = |note: &str| {
        reasons.iter().any(|reason| {
            note.starts_with(&format!(
                "replacing {pod}: {reason} at the old revision, costs no availability"
            ))
        })
    };
    wait_until(
        TIMEOUT,
        &format!(
            "an Event UnavailablePodReplaced on {zone} says {pod} was replaced for {reasons:?}"
        ),
        || async {
            events_about(&scene.client(), scene.name(), &zone)
                .await
                .iter()
                .any(|(reason, note)| reason == "UnavailablePodReplaced" && replaced(note))
        },
    )
    .await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    check_rollout_guarantees(&scene.timeline(), &zones, from).unwrap();
    assert!(
        scene
            .pods()
            .await
            .iter()
            .all(|pod| app_waiting_reason(pod).is_none()),
        "no pod waits after the fix"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_exits_1_crash_loops_for_real_halts_the_group_and_its_fix_rolls_out() {
    let _shared = NODES.read().await;
    // Its container exits 1 at start: the kubelet restarts it, backing off between restarts
    a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
        "crashloop",
        Behaviour::CrashLoops,
        &["CrashLoopBackOff"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_whose_image_cannot_be_pulled_halts_the_group_and_its_fix_replaces_it_for_free() {
    let _shared = NODES.read().await;
    // An image on a registry nothing listens at: the pull fails (ErrImagePull), then the
    // kubelet backs off before the next one (ImagePullBackOff)
    a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
        "image-pull",
        Behaviour::ImageCannotBePulled,
        &["ErrImagePull", "ImagePullBackOff"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_whose_image_name_is_invalid_halts_the_group_and_its_fix_replaces_it_for_free() {
    let _shared = NODES.read().await;
    a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
        "image-name",
        Behaviour::InvalidImageName,
        &["InvalidImageName"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_missing_its_config_map_halts_the_group_and_its_fix_replaces_it_for_free() {
    let _shared = NODES.read().await;
    a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
        "config",
        Behaviour::MissingConfigMap,
        &["CreateContainerConfigError"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_the_runtime_cannot_create_halts_the_group_and_its_fix_replaces_it_for_free() {
    let _shared = NODES.read().await;
    a_stuck_version_halts_the_group_and_its_fix_replaces_it_for_free(
        "create",
        Behaviour::MissingSeccompProfile,
        &["CreateContainerError"],
    )
    .await;
}

/// The IP of each pod of `statefulset` (ordinals `0..replicas`), as the kubelet reported it.
async fn pod_ips(scene: &Scene, statefulset: &str, replicas: i32) -> Vec<Ipv4Addr> {
    let mut ips = Vec::new();
    for ordinal in 0..replicas {
        let pod = format!("{statefulset}-{ordinal}");
        let ip = pod_ip(&scene.namespace.client(), scene.namespace.name(), &pod)
            .await
            .unwrap_or_else(|| panic!("{pod} has no IP"));
        ips.push(ip);
    }
    ips
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_downscale_calls_the_real_pods_going_away_over_their_ips() {
    let _shared = NODES.read().await;
    // Given the webhooks registered for the namespace, and zones a (3 real pods) and b of group
    // "ingester" opted in to prepare-downscale on the test application's port; pods take 20s
    // to stop, so a pod going away still answers while it terminates
    let scene = Scene::on_real_nodes("prepare", &[]).await;
    let control_plane = scene.control_plane;
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start(control_plane, &tls, scene.namespace.name())
        .await
        .unwrap();
    let _configurations =
        WebhookConfigurations::register(control_plane, scene.namespace.name(), &tls, &replica)
            .await
            .unwrap();
    wait_for_webhooks(&scene.namespace).await;
    let zone = |name: &str, zone: &str, replicas: i32| {
        RealPodsFixture::new(
            StatefulSetFixture::new(name)
                .group("ingester")
                .replicas(replicas)
                .label(PREPARE_DOWNSCALE, "true")
                .annotation(PREPARE_DOWNSCALE_PATH, SHUTDOWN_PATH)
                .annotation(PREPARE_DOWNSCALE_PORT, &APP_PORT.to_string()),
            zone,
        )
        .stop_delay(Duration::from_secs(20))
        .grace_period_seconds(30)
    };
    scene
        .create(&[
            zone("ingester-zone-a", "a", 3),
            zone("ingester-zone-b", "b", 1),
        ])
        .await;
    let ips = pod_ips(&scene, "ingester-zone-a", 3).await;

    // When zone a is scaled from 3 to 2
    scale(
        &scene.namespace.api::<StatefulSet>(),
        "ingester-zone-a",
        2,
        false,
    )
    .await
    .unwrap();

    // Then the pod going away was told to prepare over its IP, exactly once, and the pods
    // staying were not called
    let shutdown = format!("/{SHUTDOWN_PATH}");
    let going = app_calls(ips[2]).await.unwrap();
    assert_eq!(going.count("POST", &shutdown), 1, "{going:?}");
    for kept in &ips[..2] {
        let calls = app_calls(*kept).await.unwrap();
        assert_eq!(calls.count("POST", &shutdown), 0, "{calls:?}");
        assert_eq!(calls.count("DELETE", &shutdown), 0, "{calls:?}");
    }
    // And the real pod then goes away
    wait_until(TIMEOUT, "ingester-zone-a-2 is gone", || async {
        scene
            .pods()
            .await
            .iter()
            .all(|pod| pod.metadata.name.as_deref() != Some("ingester-zone-a-2"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_downscale_asks_the_real_pods_and_waits_for_their_delay() {
    let _shared = NODES.read().await;
    // Given a StatefulSet of 3 real pods mirroring a template, with a 5s delayed downscale on
    // the test application's prepare-delayed-downscale endpoint
    let scene = Scene::on_real_nodes(
        "delayed",
        &[
            ("BATON_PODS__ADDRESS_BY", "ip"),
            ("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "300ms"),
        ],
    )
    .await;
    install_replica_template_crd(scene.control_plane)
        .await
        .unwrap();
    let templates = ReplicaTemplates::new(scene.namespace.client(), scene.namespace.name());
    templates.create("delayed", 3).await;
    let fixture = RealPodsFixture::new(
        StatefulSetFixture::new("delayed-zone-a")
            .group("delayed")
            .replicas(3)
            .annotation(MIRROR_NAME, "delayed")
            .annotation(MIRROR_KIND, REPLICA_TEMPLATE_KIND)
            .annotation(MIRROR_API_VERSION, REPLICA_TEMPLATE_API_VERSION)
            .annotation(DELAYED_DOWNSCALE, "5s")
            .annotation(
                DELAYED_DOWNSCALE_URL,
                &format!("http://pod:{APP_PORT}/prepare-delayed-downscale"),
            ),
        "a",
    );
    scene.create(&[fixture]).await;
    let ips = pod_ips(&scene, "delayed-zone-a", 3).await;

    // When the template wants 2
    templates.scale("delayed", 2).await;

    // Then the pod going away is asked to prepare and the pods staying are told to cancel,
    // over their IPs
    let path = "/prepare-delayed-downscale";
    wait_until(TIMEOUT, "delayed-zone-a-2 is asked to prepare", || async {
        app_calls(ips[2])
            .await
            .is_ok_and(|calls| calls.count("POST", path) > 0)
    })
    .await;
    let prepared_since = app_calls(ips[2])
        .await
        .unwrap()
        .delayed_downscale_since
        .expect("the pod says when it began preparing");
    for kept in &ips[..2] {
        let calls = app_calls(*kept).await.unwrap();
        assert_eq!(calls.count("POST", path), 0, "{calls:?}");
    }
    wait_until(TIMEOUT, "delayed-zone-a-0 is told to cancel", || async {
        app_calls(ips[0])
            .await
            .is_ok_and(|calls| calls.count("DELETE", path) > 0)
    })
    .await;

    // And the StatefulSet shrinks only once the pod has prepared for the delay (the pod's
    // timestamp is in whole seconds)
    let statefulsets = scene.namespace.api::<StatefulSet>();
    wait_until(TIMEOUT, "delayed-zone-a has spec.replicas 2", || async {
        statefulsets
            .get("delayed-zone-a")
            .await
            .ok()
            .and_then(|statefulset| statefulset.spec)
            .and_then(|spec| spec.replicas)
            == Some(2)
    })
    .await;
    let waited = jiff::Timestamp::now().as_second() - prepared_since;
    assert!(
        waited >= 4,
        "scaled down {waited}s after the pod began preparing, before the 5s delay"
    );
    scene
        .wait_event(
            "delayed-zone-a",
            "ScalingDown",
            &["delayed-zone-a scales down from 3 to 2"],
        )
        .await;
}

/// The scenarios share the nodes; the drain cordons one, which would leave other scenarios'
/// new pods of that zone Pending: it runs alone, the others together.
static NODES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A dry-run eviction of `pod` through the API server (reaches the webhooks, changes nothing).
async fn dry_run_eviction(client: &kube::Client, namespace: &str, pod: &str) {
    let body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
        "deleteOptions": {"dryRun": ["All"]},
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body).unwrap())
    .unwrap();
    let _ = client.request::<serde_json::Value>(request).await;
}

async fn webhook_metrics(replica: &WebhookReplica) -> String {
    let Ok(client) = reqwest::Client::builder().no_proxy().build() else {
        return String::new();
    };
    match client
        .get(format!("http://127.0.0.1:{}/metrics", replica.ops_port))
        .send()
        .await
    {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_of_zone_a_waits_for_the_rollout_in_zone_b_and_never_exceeds_the_budget() {
    let _alone = NODES.write().await;
    // Given 3 zones × 2 real pods of group "ingester" (its pods labelled too), a zone-aware
    // budget of 2 unavailable pods per zone, baton's eviction webhook and controller; zone b's
    // pods take 3s to stop, so its rollout lasts a while
    let scene = Scene::on_real_nodes("drain", &[]).await;
    let control_plane = scene.control_plane;
    let admin = control_plane.admin_client().await;
    crds::install(&admin, crds::ZONE_AWARE_POD_DISRUPTION_BUDGET).await;
    let tls = TestTls::generate().unwrap();
    let replica = WebhookReplica::start(control_plane, &tls, scene.namespace.name())
        .await
        .unwrap();
    let namespace = scene.namespace.name();
    let _webhook = ValidatingWebhooks::register(
        scene.control_plane,
        &format!("baton-e2e-eviction-{namespace}"),
        json!([eviction_webhook(
            "pod-eviction.baton.test",
            &tls,
            &replica,
            namespace
        )]),
    )
    .await;
    let fixtures: Vec<RealPodsFixture> = ["a", "b", "c"]
        .iter()
        .map(|zone| {
            RealPodsFixture::new(
                StatefulSetFixture::new(&format!("ingester-zone-{zone}"))
                    .group("ingester")
                    .pod_label("rollout-group", "ingester")
                    .pod_label("baton.test/drained-by", "real-pods")
                    .replicas(2),
                zone,
            )
            .stop_delay(Duration::from_secs(3))
        })
        .collect();
    let names = scene.create(&fixtures).await;
    let (client, ns) = (scene.namespace.client(), scene.namespace.name());
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &zpdb_resource())
        .create(
            &PostParams::default(),
            &budget(
                "ingester",
                json!({"maxUnavailable": 2, "selector": {"matchLabels": {"rollout-group": "ingester"}}}),
            ),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "the webhook judges with the budget", || async {
        let review = eviction_review(ns, "ingester-zone-a-0", "e2e-drain-probe", true);
        let answer: serde_json::Value = match tls
            .client()
            .unwrap()
            .post(replica.url("/admission/pod-eviction"))
            .json(&review)
            .send()
            .await
        {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => return false,
        };
        answer_of(&answer).1.contains("ingester")
    })
    .await;
    wait_until(
        TIMEOUT,
        "the API server calls the eviction webhook",
        || async {
            dry_run_eviction(&client, ns, "ingester-zone-c-0").await;
            webhook_metrics(&replica)
                .await
                .contains("webhook=\"pod-eviction\"")
        },
    )
    .await;

    // When zone b rolls out v2 and, once its first pod is terminating, zone a's node is drained
    let from = Instant::now();
    set_version(&client, ns, "ingester-zone-b", "v2", Behaviour::Healthy).await;
    wait_until(TIMEOUT, "zone b's rollout has begun", || async {
        scene.timeline().iter().any(|transition| {
            transition.at >= from
                && transition.event == PodEvent::Terminating
                && transition.statefulset.as_deref() == Some("ingester-zone-b")
        })
    })
    .await;
    let node = "node-zone-a";
    let _uncordon = Uncordon {
        node: node.to_owned(),
        kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
    };
    let drain_started = Instant::now();
    let drain = tokio::process::Command::new(control_plane.kubectl())
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .args([
            "drain",
            node,
            "--pod-selector=baton.test/drained-by=real-pods",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ])
        .output()
        .await
        .expect("running kubectl drain");
    let drained = Instant::now();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&drain.stdout),
        String::from_utf8_lossy(&drain.stderr)
    );

    // Then the drain completes, after evictions refused by baton's webhook were retried
    assert!(drain.status.success(), "kubectl drain failed:\n{output}");
    assert!(
        output.contains("will retry after") && output.contains("pod-eviction.baton.test"),
        "the drain was never refused by the webhook:\n{output}"
    );
    // And it completed only after zone b's rollout had: zone a's pods left only then
    scene.wait_complete(&names[1..2]).await;
    let timeline = scene.timeline();
    let zones = [
        Zone::new("ingester-zone-a", 2, 2),
        Zone::new("ingester-zone-b", 2, 1),
        Zone::new("ingester-zone-c", 2, 1),
    ];
    let windows = zone_windows(&timeline, &zones[1..2], from);
    let zone_b_done = windows["ingester-zone-b"]
        .completed
        .expect("zone b's rollout completed");
    let zone_a_left = timeline
        .iter()
        .filter(|transition| {
            transition.at >= drain_started
                && transition.event == PodEvent::Terminating
                && transition.statefulset.as_deref() == Some("ingester-zone-a")
        })
        .map(|transition| transition.at)
        .min()
        .expect("zone a's pods were evicted");
    assert!(
        zone_a_left >= zone_b_done && drained >= zone_b_done,
        "zone a's pods left {:?} before zone b's rollout completed",
        zone_b_done - zone_a_left.min(zone_b_done)
    );
    // And the budget was never exceeded: never two zones unavailable, never more than 2 pods
    // of zone a, 1 of zone b (its rollout's max-unavailable)
    check_rollout_guarantees(&timeline, &zones, from).unwrap();

    // When the node is uncordoned, zone a's pods come back on it
    drop(_uncordon);
    wait_group_ready(&client, ns, &names).await;
}

/// What the test application in `pod` was given as its environment by the kubelet.
async fn environment_of_pod(scene: &Scene, pod: &str) -> Vec<(String, String)> {
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
    let ip = pod_ip(&client, namespace, pod)
        .await
        .unwrap_or_else(|| panic!("{pod} has an IP"));
    let body = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client")
        .get(format!("http://{ip}:{APP_PORT}/environment"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .unwrap_or_else(|error| panic!("reading the environment of {pod}: {error}"))
        .text()
        .await
        .expect("the environment as text");
    body.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_binaries_start_with_the_environment_the_kubelet_gives_a_pod_beside_deploys_services()
{
    // Given deploy/'s Services in a namespace, and a pod there (service links on, as by default)
    let scene = Scene::on_real_nodes("service-links", &[]).await;
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
    let services = baton_e2e::manifests::deploy_objects("Service");
    assert!(!services.is_empty(), "deploy/ has Services");
    for mut service in services {
        service["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("namespace");
        let object: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(service).expect("a Service");
        Api::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("creating deploy/'s Service: {error}"));
    }
    let fixture = RealPodsFixture::new(StatefulSetFixture::new("links").replicas(1), "a");
    scene.create(&[fixture]).await;

    // When the kubelet starts the pod, it gives it the link variables of those Services
    let environment = environment_of_pod(&scene, "links-0").await;
    let batons: Vec<&(String, String)> = environment
        .iter()
        .filter(|(name, _)| name.starts_with("BATON_"))
        .collect();
    assert!(
        batons
            .iter()
            .any(|(name, value)| name == "BATON_WEBHOOK_PORT" && value.starts_with("tcp://")),
        "the kubelet gave no link variables of baton-webhook: {batons:?}"
    );

    // Then both binaries start with exactly those variables and say nothing of them
    for binary in ["baton-controller", "baton-webhook"] {
        let output = std::process::Command::new(
            baton_e2e::process::workspace_binary(binary).expect("the binary is built"),
        )
        .arg("--print-config")
        .env_clear()
        .envs(batons.iter().map(|(name, value)| (name, value)))
        .env("BATON_NAMESPACE", namespace)
        .output()
        .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{binary}: {stderr}");
        assert!(stderr.is_empty(), "{binary}: {stderr}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(&format!("namespace: {namespace}")),
            "{binary}"
        );
    }
}

/// The pod's Ready condition is False while its app container is ready and its native sidecar
/// (reported among the init containers) is not: the moment only the kubelet's condition tells.
fn sidecar_holds_pod_not_ready(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let condition_false = status.conditions.as_ref().is_some_and(|conditions| {
        conditions
            .iter()
            .any(|condition| condition.type_ == "Ready" && condition.status == "False")
    });
    let app_ready = status
        .container_statuses
        .as_ref()
        .is_some_and(|containers| containers.iter().all(|container| container.ready));
    let sidecar_running_not_ready = status
        .init_container_statuses
        .as_ref()
        .is_some_and(|inits| {
            inits.iter().any(|init| {
                init.name == "sidecar"
                    && !init.ready
                    && init
                        .state
                        .as_ref()
                        .is_some_and(|state| state.running.is_some())
            })
        });
    condition_false && app_ready && sidecar_running_not_ready
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_native_sidecar_is_not_ready_yet_is_not_counted_available() {
    let _shared = NODES.read().await;
    // Given a ready group of 3 zones × 2 real pods, each with a native sidecar (an init
    // container with restartPolicy Always) whose readiness probe fails for its first 5 s
    let warm_up = Duration::from_secs(5);
    let scene = Scene::on_real_nodes("sidecar", &[]).await;
    let fixtures: Vec<_> = real_rollout_group("ingester", 2)
        .into_iter()
        .map(|fixture| fixture.sidecar(warm_up))
        .collect();
    let names = scene.create(&fixtures).await;

    // When every zone's template changes
    let from = Instant::now();
    roll_out(
        &scene.client(),
        scene.name(),
        &names,
        "v2",
        Behaviour::Healthy,
    )
    .await;

    // Then a new pod comes up whose app container is ready while its sidecar is not, and the
    // kubelet holds its Ready condition False: baton says it waits for that pod and has
    // deleted no other
    wait_until(
        TIMEOUT,
        "a new pod's app is ready and its sidecar is not",
        || async { scene.pods().await.iter().any(sidecar_holds_pod_not_ready) },
    )
    .await;
    let held = scene
        .pods()
        .await
        .into_iter()
        .find(sidecar_holds_pod_not_ready)
        .and_then(|pod| pod.metadata.name)
        .expect("waited for");
    let zone = held
        .rsplit_once('-')
        .map_or(held.as_str(), |(statefulset, _)| statefulset)
        .to_owned();
    scene
        .wait_event(
            &zone,
            "MaxUnavailable",
            &[&format!(
                "waiting for {held} (new revision) to become ready"
            )],
        )
        .await;

    // And the rollout completes with never two zones, or two pods of a zone, down, each new
    // pod counted Ready (as the kubelet judged it, sidecar included) only once its sidecar had
    // warmed up
    scene.wait_complete(&names).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
    let timeline = scene.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    let mut new_pods = 0;
    for created in timeline
        .iter()
        .filter(|transition| transition.at >= from && transition.event == PodEvent::Created)
    {
        let ready = timeline
            .iter()
            .find(|transition| transition.uid == created.uid && transition.event == PodEvent::Ready)
            .unwrap_or_else(|| panic!("{} never became Ready", created.pod));
        assert!(
            ready.at - created.at >= warm_up,
            "{} was Ready {:?} after its creation, before its sidecar warmed up",
            created.pod,
            ready.at - created.at
        );
        new_pods += 1;
    }
    assert_eq!(new_pods, 6, "every pod was replaced");
}

/// The pod template of deploy/'s `name` Deployment, set to run `baton-* --print-config` once
/// from `image`: what deploy/ would run, with its security context, environment and volumes.
fn deploy_pod(name: &str, image: &str) -> Pod {
    let deployment = baton_e2e::manifests::deploy_objects("Deployment")
        .into_iter()
        .find(|deployment| deployment["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("deploy/ has the Deployment {name}"));
    let mut pod = deployment["spec"]["template"].clone();
    pod["metadata"]["name"] = json!(name);
    let spec = &mut pod["spec"];
    spec["restartPolicy"] = json!("Never");
    spec["containers"][0]["image"] = json!(image);
    serde_json::from_value(pod).expect("a Pod")
}

/// What deploy/'s pods need in `namespace` (as their system namespace): its ServiceAccounts,
/// its ConfigMap, its priority class.
async fn create_what_deploys_pods_need(client: &kube::Client, namespace: &str) {
    for kind in ["ServiceAccount", "ConfigMap"] {
        for mut object in baton_e2e::manifests::deploy_objects(kind) {
            object["metadata"]["namespace"] = json!(namespace);
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            let resource = kube::discovery::ApiResource::from_gvk(
                &kube::core::GroupVersionKind::gvk("", "v1", kind),
            );
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
                .create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|error| panic!("creating deploy/'s {kind}: {error}"));
        }
    }
    for priority in baton_e2e::manifests::deploy_objects("PriorityClass") {
        let priority: k8s_openapi::api::scheduling::v1::PriorityClass =
            serde_json::from_value(priority).unwrap();
        let _ = Api::all(client.clone())
            .create(&PostParams::default(), &priority)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_controller_in_a_pod_reaches_the_api_server_through_the_kubernetes_service() {
    // Given deploy/'s controller pod on a real node, with no kubeconfig: only what the kubelet
    // gives every pod (KUBERNETES_SERVICE_HOST, the service account's token and the cluster's
    // CA), its account allowed everything in its namespace; no other controller there
    let _shared = NODES.read().await;
    let image = baton_e2e::baton_image::BatonImage::get();
    baton_e2e::real_nodes::RealNodes::shared().await;
    let scene = baton_e2e::TestNamespace::create(
        baton_e2e::control_plane::ControlPlane::shared().await,
        &format!(
            "{}in-cluster",
            baton_e2e::real_nodes::supervisor::NAMESPACE_PREFIX
        ),
    )
    .await;
    let (client, namespace) = (scene.client(), scene.name());
    create_what_deploys_pods_need(&client, namespace).await;
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "baton-controller-everything"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "baton-controller", "namespace": namespace}],
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the controller's account");

    // When it starts (its pod named apart: the Lease's holder is its host name)
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let mut pod = deploy_pod("baton-controller", &image.by_digest());
    pod.metadata.name = Some("in-cluster-controller".to_owned());
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating the controller's pod");

    // Then it takes its Lease, in its namespace, through the `kubernetes` Service (kube-proxy
    // sends 10.0.0.1:443 to the API server's advertised address): it leads
    let leases =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), namespace);
    let holder = |lease: Option<k8s_openapi::api::coordination::v1::Lease>| {
        lease
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.holder_identity)
    };
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let held = holder(leases.get_opt("baton-controller").await.unwrap());
        if held
            .as_deref()
            .is_some_and(|held| held.starts_with("in-cluster-controller-"))
        {
            break;
        }
        let pod = pods.get("in-cluster-controller").await.unwrap();
        if Instant::now() > deadline {
            let logs = baton_e2e::real_nodes::RealNodes::shared()
                .await
                .container_log(&pod, "baton-controller")
                .unwrap_or_default();
            panic!(
                "the controller's pod did not lead (Lease held by {held:?}): {:#?}\n{logs}",
                pod.status
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batons_image_runs_on_a_real_node_as_deploy_runs_it() {
    // Given baton's image imported into the nodes' containerd, referred to by digest, and what
    // deploy/'s pods need in a namespace: its ServiceAccounts, its ConfigMap, its priority class
    let image = baton_e2e::baton_image::BatonImage::get();
    let scene = Scene::on_real_nodes("baton-image", &[]).await;
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
    create_what_deploys_pods_need(&client, namespace).await;

    // When each binary's pod, as deploy/ writes it (read-only root filesystem, user 65532, no
    // capability), runs the image on a real node
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for name in ["baton-controller", "baton-webhook"] {
        let mut pod = deploy_pod(name, &image.by_digest());
        let container = &mut pod.spec.as_mut().unwrap().containers[0];
        container.args = Some(vec!["--print-config".to_owned()]);
        // It exits at once: nothing to probe.
        container.liveness_probe = None;
        container.readiness_probe = None;
        container.startup_probe = None;
        pods.create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|error| panic!("creating {name}'s pod: {error}"));
    }

    // Then both run to completion from that image, reading the configuration deploy/ gives
    // them: the groups' namespace from baton-config, their own from the pod
    for name in ["baton-controller", "baton-webhook"] {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let pod = pods.get(name).await.unwrap();
            let phase = pod.status.as_ref().and_then(|status| status.phase.clone());
            if phase.as_deref() == Some("Succeeded") {
                break;
            }
            assert!(
                phase.as_deref() != Some("Failed") && Instant::now() < deadline,
                "{name}'s pod did not succeed: {:#?}",
                pod.status
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let pod = pods.get(name).await.unwrap();
        let image_id = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.as_ref())
            .map(|statuses| statuses[0].image_id.clone())
            .unwrap_or_default();
        assert!(image_id.ends_with(&image.digest), "{name} ran {image_id}");
        let logs = baton_e2e::real_nodes::RealNodes::shared()
            .await
            .container_log(&pod, name)
            .unwrap();
        assert!(
            logs.lines().any(|line| line == "namespace: default"),
            "{name}:\n{logs}"
        );
        assert!(
            logs.contains(&format!("system_namespace: {namespace}")),
            "{name}:\n{logs}"
        );
    }
}
