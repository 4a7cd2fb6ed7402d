//! Zone-by-zone rollouts by baton-controller on the real control plane, each a scenario:
//! given a rollout group, when its template changes, then baton rolls it one zone at a time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton_e2e::controller_support::{rollout_state, wait_group_ready, wait_new_update_revision};
use baton_e2e::fixtures::{StatefulSetFixture, gitops_apply, rollout_group};
use baton_e2e::timeline::{
    Zone, check_rolling_at_most, check_rollout_guarantees, deletion_batches, most_unavailable,
    zone_windows,
};
use baton_e2e::{PodEvent, Scene, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

/// Where baton keeps a zone's gate state (its soak, among others).
const GATE_STATE: &str = "baton.dev/gate-state";

const TIMEOUT: Duration = Duration::from_secs(90);

async fn three_zones_roll_one_at_a_time(max_unavailable: &str, expected_max: u32) {
    // Given a ready group of 3 zones × 5 pods with this max-unavailable
    let scene = Scene::start("rollout").await;
    let fixtures: Vec<_> = rollout_group("ingester", &["a", "b", "c"], 5)
        .into_iter()
        .map(|fixture| fixture.annotation("rollout-max-unavailable", max_unavailable))
        .collect();
    let names = scene.create(&fixtures).await;

    // When the template of every zone changes
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then every zone completes, and the timeline shows the guarantees held at every moment
    scene.wait_complete(&names).await;
    let zones: Vec<Zone> = names
        .iter()
        .map(|name| Zone::new(name, 5, expected_max))
        .collect();
    let timeline = scene.simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    // And each zone used its allowance (a lower bound, where the guarantees are the upper
    // one): `expected_max` pods down at once, and every batch of deletions started on a fully
    // ready zone took that many pods but the last, which takes what is left. (baton deletes
    // more as replacements turn Ready, so two batches may read as one; never as smaller ones.)
    for zone in &zones {
        assert_eq!(
            most_unavailable(&timeline, zone, from),
            expected_max,
            "the most pods of {} unavailable at once",
            zone.statefulset
        );
        let batches = deletion_batches(&timeline, zone, from);
        assert_eq!(
            batches.iter().sum::<usize>(),
            5,
            "every pod of {} replaced once: {batches:?}",
            zone.statefulset
        );
        let (_, all_but_the_last) = batches.split_last().expect("the zone rolled");
        assert!(
            all_but_the_last
                .iter()
                .all(|&size| size >= expected_max as usize),
            "{} rolled in batches {batches:?}, max-unavailable {max_unavailable}",
            zone.statefulset
        );
    }
    scene
        .wait_event(
            "ingester-zone-c",
            "RolloutComplete",
            &["every pod of ingester-zone-c runs revision"],
        )
        .await;

    // And the metrics dashboards use are there, with baton's progress gauges
    let metrics = scene.controller.metrics().await;
    for series in [
        "rollout_operator_group_reconciles_total{rollout_group=\"ingester\"}",
        "rollout_operator_group_reconcile_duration_seconds_bucket{rollout_group=\"ingester\"",
        "rollout_operator_last_successful_group_reconcile_timestamp_seconds{rollout_group=\"ingester\"}",
        "rollout_operator_kubernetes_api_client_request_duration_seconds_bucket{method=\"DELETE\",path=\"/api/v1/namespaces/{namespace}/pods/{name}\"",
        "baton_rollout_pods_updated{rollout_group=\"ingester\",statefulset=\"ingester-zone-a\"} 5",
        "baton_rollout_group_waiting{rollout_group=\"ingester\"} 0",
        "baton_leader 1",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing from /metrics:\n{metrics}"
        );
    }
}

// The steps only these scenarios take.

/// Then: the rollout of `names` (3 pods each, max-unavailable 1) completes, an Event on
/// the pod's StatefulSet says the crash-looping `pod` was replaced at no cost, and the
/// timeline since `from` never had two zones, or two pods of a zone, down.
async fn completes_replacing_crash_looping(
    scene: &Scene,
    names: &[String],
    pod: &str,
    from: Instant,
) {
    scene.wait_complete(names).await;
    let statefulset = pod.rsplit_once('-').map_or(pod, |(name, _)| name);
    scene
        .wait_event(
            statefulset,
            "UnavailablePodReplaced",
            &[&format!(
                "replacing {pod}: CrashLoopBackOff at the old revision, costs no availability"
            )],
        )
        .await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    check_rollout_guarantees(&scene.simulator.timeline(), &zones, from).unwrap();
}

/// Waits until the simulator's timeline shows `pod` going not ready.
async fn wait_not_ready(scene: &Scene, pod: &str) {
    wait_until(TIMEOUT, &format!("{pod} is not ready"), || async {
        scene
            .simulator
            .timeline()
            .iter()
            .any(|transition| transition.pod == pod && transition.event == PodEvent::NotReady)
    })
    .await;
}

#[tokio::test]
async fn three_zones_roll_one_pod_at_a_time_with_max_unavailable_1() {
    three_zones_roll_one_at_a_time("1", 1).await;
}

#[tokio::test]
async fn three_zones_roll_two_pods_at_a_time_with_max_unavailable_2() {
    three_zones_roll_one_at_a_time("2", 2).await;
}

#[tokio::test]
async fn three_zones_roll_with_max_unavailable_50_percent() {
    // 50% of 5 replicas is 2 pods.
    three_zones_roll_one_at_a_time("50%", 2).await;
}

#[tokio::test]
async fn a_version_written_to_every_zone_at_once_starts_in_the_first_zone_every_time() {
    // Given a ready group of 3 zones × 2 pods
    let scene = Scene::start("pipeline").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 2))
        .await;
    for version in ["v2", "v3", "v4"] {
        // When a deploy pipeline writes the new version to every zone at once, zone a last (so
        // its status is the likeliest to still describe the old template when baton looks)
        let from = Instant::now();
        let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
        let before = futures::future::join_all(
            names
                .iter()
                .map(|name| rollout_state(&client, namespace, name)),
        )
        .await;
        futures::future::join_all(
            names
                .iter()
                .rev()
                .map(|name| baton_e2e::fixtures::set_version(&client, namespace, name, version)),
        )
        .await;
        for (name, before) in names.iter().zip(before) {
            wait_new_update_revision(&client, namespace, name, &before.update_revision).await;
        }
        scene.wait_complete(&names).await;

        // Then the first pod baton takes down is zone a's: the canary is in the first zone
        let first = scene
            .simulator
            .timeline()
            .into_iter()
            .filter(|transition| transition.at >= from)
            .find(|transition| transition.event == PodEvent::Terminating)
            .expect("the rollout deleted pods");
        assert_eq!(
            first.statefulset.as_deref(),
            Some(names[0].as_str()),
            "{version}: the first deletion was {}",
            first.pod
        );
        let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 2, 1)).collect();
        check_rollout_guarantees(&scene.simulator.timeline(), &zones, from).unwrap();
    }
}

#[tokio::test]
async fn a_not_ready_pod_in_zone_b_holds_zone_a_until_it_is_ready() {
    // Given a ready group of 3 zones × 3 pods, and one pod of zone b that stops being ready
    let scene = Scene::start("hold").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    scene.simulator.hold_not_ready("ingester-zone-b-1").await;

    // When the template changes
    scene.roll_out(&names, "v2").await;

    // Then baton replaces that pod at no cost (it was down already); its replacement is held
    // not ready too, so baton says zone b is at its max-unavailable and leaves zones a and c
    // alone
    scene
        .wait_event(
            "ingester-zone-b",
            "MaxUnavailable",
            &["max-unavailable reached in ingester-zone-b (1/1); \
             waiting for ingester-zone-b-1 (new revision) to become ready"],
        )
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-a").await, 0);
    assert_eq!(scene.updated_pods("ingester-zone-c").await, 0);

    // And once the pod is ready again the whole group rolls out
    scene.simulator.release("ingester-zone-b-1").await;
    scene.wait_complete(&names).await;
}

#[tokio::test]
async fn a_group_with_a_rolling_update_member_is_skipped_and_other_groups_proceed() {
    // Given a group whose zone b uses RollingUpdate, and a healthy second group
    let scene = Scene::start("skip").await;
    let mut skipped = rollout_group("ingester", &["a", "b"], 2);
    skipped[1] = skipped[1].clone().rolling_update();
    let skipped = scene.create(&skipped).await;
    let healthy = scene.create(&rollout_group("store", &["a", "b"], 2)).await;

    // When both groups get a new template
    scene.roll_out(&[skipped[0].clone()], "v2").await;
    scene.roll_out(&healthy, "v2").await;

    // Then the healthy group completes, an Event says why the other is skipped, and its
    // OnDelete zone was never touched
    scene.wait_complete(&healthy).await;
    scene
        .wait_event(
            "ingester-zone-b",
            "NonOnDeleteMember",
            &["ingester-zone-b uses RollingUpdate, group skipped"],
        )
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-a").await, 0);
}

#[tokio::test]
async fn a_paused_zone_waits_while_the_others_finish() {
    // Given a group whose zone b is paused
    let scene = Scene::start("paused").await;
    let mut fixtures = rollout_group("ingester", &["a", "b", "c"], 2);
    fixtures[1] = fixtures[1]
        .clone()
        .annotation("grafana.com/rollout-paused", "true");
    let names = scene.create(&fixtures).await;

    // When the template of every zone changes
    scene.roll_out(&names, "v2").await;

    // Then zones a and c complete, zone b keeps its pods, and baton says so
    scene
        .wait_complete(&[names[0].clone(), names[2].clone()])
        .await;
    scene
        .wait_event("ingester-zone-b", "Paused", &["ingester-zone-b"])
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-b").await, 0);
}

#[tokio::test]
async fn a_bad_max_unavailable_falls_back_to_one_pod_with_a_warning_event() {
    // Given a group whose max-unavailable annotation is not a number
    let scene = Scene::start("bad-annotation").await;
    let fixtures: Vec<_> = rollout_group("ingester", &["a", "b"], 3)
        .into_iter()
        .map(|fixture| fixture.annotation("rollout-max-unavailable", "lots"))
        .collect();
    let names = scene.create(&fixtures).await;

    // When the template changes
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then baton warns about the value, rolls one pod at a time (the documented default) and
    // completes
    scene.wait_complete(&names).await;
    scene
        .wait_event("ingester-zone-a", "InvalidAnnotation", &["\"lots\""])
        .await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    check_rollout_guarantees(&scene.simulator.timeline(), &zones, from).unwrap();
}

#[tokio::test]
async fn a_newcomer_asking_for_three_rolling_members_alone_rolls_one_zone_at_a_time_and_is_told() {
    // Given a ready group of 3 zones × 3 pods (max-unavailable 1) that says nothing about
    // max-rolling-members, and a StatefulSet someone who may only create StatefulSets added
    // with the group's label, 0 replicas and `baton.dev/max-rolling-members: "3"`
    let scene = Scene::start("newcomer").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    let newcomer = StatefulSetFixture::new("ingester-newcomer")
        .group("ingester")
        .replicas(0)
        .annotation("baton.dev/max-rolling-members", "3");
    scene.create(&[newcomer]).await;
    // (zone a's first replacement starts slowly: zone a stays down until it is released)
    scene.simulator.hold_replacement("ingester-zone-a-0").await;

    // When a new template is deployed to the three zones
    let from = scene.roll_out(&names, "v2").await;

    // Then while zone a is down baton waits for it: no pod of another zone goes
    wait_until(TIMEOUT, "baton waits for zone a", || async {
        scene
            .controller
            .metrics()
            .await
            .contains("baton_rollout_group_waiting{rollout_group=\"ingester\"} 1")
    })
    .await;
    let others_deleted: Vec<String> = scene
        .simulator
        .timeline()
        .into_iter()
        .filter(|transition| {
            transition.at >= from
                && transition.event == PodEvent::Terminating
                && !transition.pod.starts_with("ingester-zone-a-")
        })
        .map(|transition| transition.pod)
        .collect();
    assert!(
        others_deleted.is_empty(),
        "pods of other zones went while zone a was down: {others_deleted:?}"
    );
    // And once zone a's pod is released the rollout completes
    scene.simulator.release("ingester-zone-a-0").await;
    scene.wait_complete(&names).await;
    // And at every observed moment at most one zone had pods not ready, at most one each, and
    // a pod was deleted only while every other zone was ready
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    let most = check_rolling_at_most(&scene.simulator.timeline(), &zones, from, 1).unwrap();
    assert_eq!(most, 1, "a zone rolling at some moment");
    // And a Warning Event on the newcomer says its value alone counts for nothing, naming the
    // members that hold the group to one
    scene
        .wait_event(
            "ingester-newcomer",
            "InvalidAnnotation",
            &[
                "baton.dev/max-rolling-members",
                "\"3\"",
                "one member alone speaks for nobody",
                "using 1, held there by ingester-zone-a, ingester-zone-b, ingester-zone-c",
            ],
        )
        .await;
}

#[tokio::test]
async fn a_crash_looping_old_pod_is_replaced_at_no_cost_and_the_rollout_completes() {
    // Given a ready group of 3 zones × 3 pods (max-unavailable 1) where the old pod
    // ingester-zone-b-2 crash-loops, which spends zone b's whole budget
    let scene = Scene::start("crashloop-old").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    scene.simulator.crash_loop("ingester-zone-b-2").await;
    wait_not_ready(&scene, "ingester-zone-b-2").await;

    // When the fixed version is deployed
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then baton replaces the crash-looping pod first, says so, and the rollout completes with
    // never more than one zone and one pod per zone down
    completes_replacing_crash_looping(&scene, &names, "ingester-zone-b-2", from).await;
}

#[tokio::test]
async fn a_new_version_that_crash_loops_halts_the_group_until_its_fix_rolls_out() {
    // Given a ready group of 3 zones × 3 pods, and a version v2 whose pods crash-loop
    let scene = Scene::start("crashloop-new").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    scene.simulator.break_version("v2");

    // When v2 is rolled out
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then its first pod crash-loops and the group halts, naming the pod and its state
    scene
        .wait_event(
            "ingester-zone-a",
            "MaxUnavailable",
            &["max-unavailable reached in ingester-zone-a (1/1); \
             waiting for ingester-zone-a-0 (new revision) to become ready: CrashLoopBackOff"],
        )
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-a").await, 1);
    assert_eq!(scene.updated_pods("ingester-zone-b").await, 0);
    assert_eq!(scene.updated_pods("ingester-zone-c").await, 0);

    // When the fix v3 is rolled out
    scene.roll_out(&names, "v3").await;

    // Then the crash-looping v2 pod is replaced at no cost and every zone completes
    completes_replacing_crash_looping(&scene, &names, "ingester-zone-a-0", from).await;
}

#[tokio::test]
async fn a_version_crash_looping_in_two_zones_is_replaced_in_both_and_the_fix_completes() {
    // Given a ready group of 3 zones × 3 pods where an old pod crash-loops in zone a and in
    // zone c: two zones down, no rollout in flight
    let scene = Scene::start("crashloop-two").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    for pod in ["ingester-zone-a-1", "ingester-zone-c-0"] {
        scene.simulator.crash_loop(pod).await;
        wait_not_ready(&scene, pod).await;
    }

    // When the fixed version is deployed
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then the rollout completes, and the first pods baton deleted were the two crash-looping
    // ones: no available pod moved while two zones were down
    scene.wait_complete(&names).await;
    for (statefulset, pod) in [
        ("ingester-zone-a", "ingester-zone-a-1"),
        ("ingester-zone-c", "ingester-zone-c-0"),
    ] {
        scene
            .wait_event(
                statefulset,
                "UnavailablePodReplaced",
                &[&format!("replacing {pod}: CrashLoopBackOff")],
            )
            .await;
    }
    let mut first_deleted: Vec<String> = scene
        .simulator
        .timeline()
        .into_iter()
        .filter(|transition| transition.at >= from && transition.event == PodEvent::Terminating)
        .map(|transition| transition.pod)
        .take(2)
        .collect();
    first_deleted.sort();
    assert_eq!(first_deleted, ["ingester-zone-a-1", "ingester-zone-c-0"]);
}

/// A GitOps tool's sync loop, running beside a rollout: it applies `manifests` with
/// server-side apply (its own field manager, forcing conflicts) again and again until stopped.
struct Reapplier {
    applies: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Reapplier {
    fn start(client: kube::Client, namespace: &str, manifests: Vec<StatefulSet>) -> Self {
        let (applies, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let namespace = namespace.to_owned();
        let task = tokio::spawn({
            let (applies, stop) = (applies.clone(), stop.clone());
            async move {
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for manifest in &manifests {
                        if let Err(error) = gitops_apply(&client, &namespace, manifest).await {
                            errors.push(error.to_string());
                        }
                    }
                    applies.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                errors
            }
        });
        Self {
            applies,
            stop,
            task,
        }
    }

    fn syncs(&self) -> usize {
        self.applies.load(Ordering::Relaxed)
    }

    /// Waits until `count` more syncs have applied every manifest.
    async fn wait_syncs(&self, count: usize) {
        let target = self.syncs() + count;
        wait_until(TIMEOUT, &format!("{count} more syncs"), || async {
            self.syncs() >= target
        })
        .await;
    }

    /// Stops it; returns how many syncs it made and the applies that failed.
    async fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self.task.await.expect("the re-applier ran");
        (self.applies.load(Ordering::Relaxed), errors)
    }
}

/// The gate state baton stores on `name` (`baton.dev/gate-state`), if any.
async fn gate_state(scene: &Scene, name: &str) -> Option<String> {
    scene.annotations(name).await.get(GATE_STATE).cloned()
}

#[tokio::test]
async fn a_gitops_tool_reapplying_the_members_with_server_side_apply_does_not_disturb_a_rollout() {
    // Given a group of 3 zones × 3 pods created by a GitOps tool with server-side apply, a 5 s
    // soak after zone a in its manifests
    let scene = Scene::start("ssa-rollout").await;
    let fixtures: Vec<StatefulSetFixture> = rollout_group("ingester", &["a", "b", "c"], 3)
        .into_iter()
        .map(|fixture| match fixture.build().metadata.name.as_deref() {
            Some("ingester-zone-a") => fixture.annotation("baton.dev/soak", "5s"),
            _ => fixture,
        })
        .collect();
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
    let mut names = Vec::new();
    for fixture in &fixtures {
        let applied = gitops_apply(&client, namespace, &fixture.manifest("v1"))
            .await
            .expect("the GitOps tool creates the member");
        names.push(applied.metadata.name.unwrap_or_default());
    }
    wait_group_ready(&client, namespace, &names).await;

    // When the tool applies v2 to every member, then keeps re-applying the same manifests
    // (forcing conflicts, as `--force-conflicts` does) while baton rolls the group
    let writes_before = scene.statefulset_writes().await;
    let from = Instant::now();
    let manifests: Vec<StatefulSet> = fixtures.iter().map(|f| f.manifest("v2")).collect();
    for manifest in &manifests {
        gitops_apply(&client, namespace, manifest)
            .await
            .expect("the GitOps tool applies v2");
    }
    let reapplier = Reapplier::start(client.clone(), namespace, manifests);

    // Then the soak's state baton stores on zone b survives the re-applies unchanged: the
    // soak is neither restarted nor skipped
    wait_until(TIMEOUT, "baton stores zone b's soak", || async {
        gate_state(&scene, "ingester-zone-b")
            .await
            .is_some_and(|state| state.contains("soakStartedAt"))
    })
    .await;
    let soaking = gate_state(&scene, "ingester-zone-b").await;
    reapplier.wait_syncs(3).await;
    let after = gate_state(&scene, "ingester-zone-b").await;
    // (baton may have cleared the zone meanwhile: the soak's start stays as it was)
    let soak_start = |state: &Option<String>| -> Option<serde_json::Value> {
        let state: serde_json::Value = serde_json::from_str(state.as_deref()?).ok()?;
        Some(state["soakStartedAt"].clone())
    };
    assert_eq!(
        soak_start(&after),
        soak_start(&soaking),
        "{soaking:?} became {after:?}"
    );

    // And the rollout completes, zone by zone with the soak, within the guarantees
    scene.wait_complete(&names).await;
    let (syncs, errors) = reapplier.stop().await;
    assert!(errors.is_empty(), "applies failed: {errors:?}");
    assert!(syncs >= 3, "only {syncs} syncs during the rollout");
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    let timeline = scene.simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    let windows = zone_windows(&timeline, &zones, from);
    let (a, b) = (&windows["ingester-zone-a"], &windows["ingester-zone-b"]);
    let soaked = b.started.expect("b started") - a.completed.expect("a completed");
    assert!(
        soaked >= Duration::from_secs(5),
        "b started {soaked:?} after a"
    );

    // And nothing was fought: baton's own StatefulSet writes stay those of a rollout without
    // the tool (its gate state: cleared, soak started, removed at the end, about 10 for the
    // group; a bound of 5 a zone leaves room for a write refused on a stale read and tried
    // again), not one per sync of the tool
    let writes = scene.statefulset_writes().await - writes_before;
    eprintln!("{syncs} syncs during the rollout, {writes} StatefulSet writes by baton");
    assert!(
        writes <= 5 * names.len() as u64,
        "{writes} StatefulSet writes by baton during {syncs} syncs"
    );
}

/// Runs the control plane's own `kubectl` with the test kubeconfig in `scene`'s namespace;
/// panics with its output if it fails.
async fn kubectl(scene: &Scene, args: &[&str]) -> String {
    let control_plane = scene.control_plane;
    let output = tokio::process::Command::new(control_plane.kubectl())
        .env("KUBECONFIG", control_plane.kubeconfig_path())
        .args(["--namespace", scene.namespace.name()])
        .args(args)
        .output()
        .await
        .expect("running kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "kubectl {args:?} failed:\n{text}");
    text
}

/// Runs `kubectl rollout restart` on `target` and returns once the StatefulSet controller has
/// computed the new update revision of each of `names`.
async fn rollout_restart(scene: &Scene, target: &[&str], names: &[String]) -> Instant {
    let (client, namespace) = (scene.namespace.client(), scene.namespace.name());
    let mut before = Vec::new();
    for name in names {
        before.push(
            rollout_state(&client, namespace, name)
                .await
                .update_revision,
        );
    }
    let from = Instant::now();
    let mut args = vec!["rollout", "restart"];
    args.extend_from_slice(target);
    kubectl(scene, &args).await;
    for (name, before) in names.iter().zip(before) {
        wait_until(
            TIMEOUT,
            &format!("{name} has a new update revision"),
            || async {
                rollout_state(&client, namespace, name)
                    .await
                    .update_revision
                    != before
            },
        )
        .await;
    }
    from
}

#[tokio::test]
async fn kubectl_rollout_restart_is_rolled_zone_by_zone_like_any_template_change() {
    // Given a ready group of 3 zones × 3 pods
    let scene = Scene::start("restart").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();

    // When a person restarts zone b with kubectl (a restartedAt annotation in its template:
    // a new revision)
    let from = rollout_restart(&scene, &["statefulset/ingester-zone-b"], &names[1..2]).await;

    // Then baton replaces zone b's pods one at a time, leaves the other zones alone, and
    // says the zone is complete
    scene.wait_complete(&names).await;
    scene
        .wait_event(
            "ingester-zone-b",
            "RolloutComplete",
            &["every pod of ingester-zone-b runs revision"],
        )
        .await;
    let timeline = scene.simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    let left: Vec<&str> = timeline
        .iter()
        .filter(|transition| transition.at >= from && transition.event == PodEvent::Terminating)
        .map(|transition| transition.pod.as_str())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        left.iter().all(|pod| pod.starts_with("ingester-zone-b-")),
        "{left:?}"
    );

    // When the whole group is restarted at once, as `kubectl rollout restart` by label does
    let from = rollout_restart(
        &scene,
        &["statefulset", "--selector", "rollout-group=ingester"],
        &names,
    )
    .await;

    // Then it rolls zone by zone within the guarantees, as any template change
    scene.wait_complete(&names).await;
    let timeline = scene.simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();
    let windows = zone_windows(&timeline, &zones, from);
    for (name, window) in &windows {
        assert!(
            window.completed.is_some(),
            "{name} did not roll: {window:?}"
        );
    }
}

#[tokio::test]
async fn min_ready_seconds_holds_each_next_deletion_until_the_last_new_pod_was_ready_that_long() {
    // Given a ready group of 3 zones × 3 pods whose members have minReadySeconds 3
    const MIN_READY: i32 = 3;
    let scene = Scene::start("min-ready").await;
    let fixtures: Vec<StatefulSetFixture> = rollout_group("ingester", &["a", "b", "c"], 3)
        .into_iter()
        .map(|fixture| fixture.min_ready_seconds(MIN_READY))
        .collect();
    let names = scene.create(&fixtures).await;

    // When the template of every zone changes
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then every zone completes within the guarantees
    scene.wait_complete(&names).await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    let timeline = scene.simulator.timeline();
    check_rollout_guarantees(&timeline, &zones, from).unwrap();

    // And no pod was deleted before the new pod that became Ready last had been Ready for
    // minReadySeconds, as Kubernetes measures it: from the Ready condition's
    // lastTransitionTime, which the API server keeps in whole seconds (so on the timeline's
    // own clock the gap can be up to a second shorter, as for the StatefulSet controller's
    // availableReplicas)
    let ready_since = new_pods_ready_since(&scene).await;
    let (wall_now, now) = (jiff::Timestamp::now(), Instant::now());
    let wall = |at: Instant| wall_now - jiff::SignedDuration::try_from(now - at).unwrap();
    let mut checked = 0;
    for (index, deletion) in timeline.iter().enumerate() {
        if deletion.at < from || deletion.event != PodEvent::Terminating {
            continue;
        }
        let previous = timeline[..index].iter().rev().find(|transition| {
            transition.at >= from
                && transition.event == PodEvent::Ready
                && ready_since.contains_key(&transition.uid)
        });
        let Some(previous) = previous else {
            continue;
        };
        let since = ready_since[&previous.uid];
        let gap = wall(deletion.at).duration_since(since);
        eprintln!(
            "{} Ready since {since} ({:?} on the timeline) → {} deleted {gap:#}",
            previous.pod,
            deletion.at - previous.at,
            deletion.pod
        );
        assert!(
            gap >= jiff::SignedDuration::from_secs(MIN_READY.into()),
            "{} was deleted {gap:#} after {} became Ready (since {since})",
            deletion.pod,
            previous.pod
        );
        checked += 1;
    }
    // Every deletion but the first follows a new pod's Ready.
    assert_eq!(checked, 8, "{timeline:#?}");
}

/// When each pod of the namespace that is there now became Ready, by uid, from its Ready
/// condition.
async fn new_pods_ready_since(scene: &Scene) -> BTreeMap<String, jiff::Timestamp> {
    let pods = Api::<Pod>::namespaced(scene.namespace.client(), scene.namespace.name())
        .list(&ListParams::default())
        .await
        .expect("listing the pods");
    pods.items
        .into_iter()
        .filter_map(|pod| {
            let uid = pod.metadata.uid.clone()?;
            let since = pod
                .status?
                .conditions?
                .into_iter()
                .find(|condition| condition.type_ == "Ready" && condition.status == "True")?
                .last_transition_time?
                .0;
            Some((uid, since))
        })
        .collect()
}

#[tokio::test]
async fn under_a_tight_client_side_rate_limit_a_rollout_completes_and_the_waits_are_counted() {
    // Given a controller limited to 2 API requests a second per API group, bursts of 2 (the
    // Go operator's -kubernetes.client-qps/-burst), and a ready group of 2 zones × 2 pods.
    // Its lease has the shipped timings, not the tests' short ones: every write is bounded by
    // what is left of the term, and a DELETE still waiting for its token when a 2 s term ends
    // counts as possibly sent (its pod is then held as terminating for minutes), which a
    // loaded machine made happen here.
    let scene = Scene::start_with(
        "rate-limited",
        &[
            ("BATON_KUBERNETES__CLIENT_QPS", "2"),
            ("BATON_KUBERNETES__CLIENT_BURST", "2"),
            ("BATON_CONTROLLER__LEASE__DURATION", "15s"),
            ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "10s"),
            ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "2s"),
        ],
    )
    .await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b"], 2))
        .await;

    // When it rolls out a new version
    scene.roll_out(&names, "v2").await;

    // Then the rollout completes, the requests that waited for a token are counted by API
    // group, and the limit is exported
    scene.wait_complete(&names).await;
    let metrics = scene.controller.metrics().await;
    let waited: u64 = metrics
        .lines()
        .filter(|line| {
            line.starts_with("rollout_operator_kubernetes_api_client_rate_limited_requests_total{")
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(waited > 0, "no request waited:\n{metrics}");
    assert!(
        metrics.contains(
            "rollout_operator_kubernetes_api_client_rate_limit_qps{api_group=\"apps/v1\"} 2"
        ),
        "{metrics}"
    );
}
