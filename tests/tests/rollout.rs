//! Zone-by-zone rollouts by baton-controller on the real control plane, each a scenario:
//! given a rollout group, when its template changes, then baton rolls it one zone at a time.

use std::time::{Duration, Instant};

use baton_e2e::controller_support::{
    ControlledNamespace, roll_out, rollout_state, wait_event, wait_group_ready,
    wait_new_update_revision, wait_rollout_complete,
};
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::{PodEvent, wait_until};

const TIMEOUT: Duration = Duration::from_secs(90);

/// The scenarios' namespace, with the steps they share.
struct Scene(ControlledNamespace);

impl std::ops::Deref for Scene {
    type Target = ControlledNamespace;
    fn deref(&self) -> &ControlledNamespace {
        &self.0
    }
}

impl std::ops::DerefMut for Scene {
    fn deref_mut(&mut self) -> &mut ControlledNamespace {
        &mut self.0
    }
}

impl Scene {
    async fn new(prefix: &str) -> Self {
        Self(ControlledNamespace::start(prefix).await)
    }

    async fn create(&self, statefulsets: &[StatefulSetFixture]) -> Vec<String> {
        let mut names = Vec::new();
        for fixture in statefulsets {
            let created = fixture
                .create(&self.namespace.client(), self.namespace.name())
                .await;
            names.push(created.metadata.name.unwrap_or_default());
        }
        wait_group_ready(&self.namespace.client(), self.namespace.name(), &names).await;
        names
    }

    /// Changes the image of every StatefulSet; returns when the StatefulSet controller has
    /// computed the new update revision of each.
    async fn roll_out(&self, names: &[String], version: &str) {
        roll_out(
            &self.namespace.client(),
            self.namespace.name(),
            names,
            version,
        )
        .await;
    }

    async fn wait_complete(&self, names: &[String]) {
        wait_rollout_complete(&self.namespace.client(), self.namespace.name(), names).await;
    }

    async fn updated_pods(&self, name: &str) -> usize {
        rollout_state(&self.namespace.client(), self.namespace.name(), name)
            .await
            .updated()
    }

    /// Then: the rollout of `names` (3 pods each, max-unavailable 1) completes, an Event on
    /// the pod's StatefulSet says the crash-looping `pod` was replaced at no cost, and the
    /// timeline since `from` never had two zones, or two pods of a zone, down.
    async fn completes_replacing_crash_looping(&self, names: &[String], pod: &str, from: Instant) {
        self.wait_complete(names).await;
        let statefulset = pod.rsplit_once('-').map_or(pod, |(name, _)| name);
        self.wait_event(
            statefulset,
            "UnavailablePodReplaced",
            &format!(
                "replacing {pod}: CrashLoopBackOff at the old revision, costs no availability"
            ),
        )
        .await;
        let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
        check_rollout_guarantees(&self.simulator.timeline(), &zones, from).unwrap();
    }

    /// Waits until the simulator's timeline shows `pod` going not ready.
    async fn wait_not_ready(&self, pod: &str) {
        wait_until(TIMEOUT, &format!("{pod} is not ready"), || async {
            self.simulator
                .timeline()
                .iter()
                .any(|transition| transition.pod == pod && transition.event == PodEvent::NotReady)
        })
        .await;
    }

    async fn wait_event(&self, object: &str, reason: &str, note_contains: &str) {
        let (client, namespace) = (self.namespace.client(), self.namespace.name());
        wait_event(&client, namespace, object, reason, &[note_contains]).await;
    }
}

async fn three_zones_roll_one_at_a_time(max_unavailable: &str, expected_max: u32) {
    // Given a ready group of 3 zones × 5 pods with this max-unavailable
    let scene = Scene::new("rollout").await;
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
    check_rollout_guarantees(&scene.simulator.timeline(), &zones, from).unwrap();
    scene
        .wait_event(
            "ingester-zone-c",
            "RolloutComplete",
            "every pod of ingester-zone-c runs revision",
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
    let scene = Scene::new("pipeline").await;
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
    let scene = Scene::new("hold").await;
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
            "max-unavailable reached in ingester-zone-b (1/1); \
             waiting for ingester-zone-b-1 (new revision) to become ready",
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
    let scene = Scene::new("skip").await;
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
            "ingester-zone-b uses RollingUpdate, group skipped",
        )
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-a").await, 0);
}

#[tokio::test]
async fn a_paused_zone_waits_while_the_others_finish() {
    // Given a group whose zone b is paused
    let scene = Scene::new("paused").await;
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
        .wait_event("ingester-zone-b", "Paused", "ingester-zone-b")
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-b").await, 0);
}

#[tokio::test]
async fn a_bad_max_unavailable_falls_back_to_one_pod_with_a_warning_event() {
    // Given a group whose max-unavailable annotation is not a number
    let scene = Scene::new("bad-annotation").await;
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
        .wait_event("ingester-zone-a", "InvalidAnnotation", "\"lots\"")
        .await;
    let zones: Vec<Zone> = names.iter().map(|name| Zone::new(name, 3, 1)).collect();
    check_rollout_guarantees(&scene.simulator.timeline(), &zones, from).unwrap();
}

#[tokio::test]
async fn a_crash_looping_old_pod_is_replaced_at_no_cost_and_the_rollout_completes() {
    // Given a ready group of 3 zones × 3 pods (max-unavailable 1) where the old pod
    // ingester-zone-b-2 crash-loops, which spends zone b's whole budget
    let scene = Scene::new("crashloop-old").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    scene.simulator.crash_loop("ingester-zone-b-2").await;
    scene.wait_not_ready("ingester-zone-b-2").await;

    // When the fixed version is deployed
    let from = Instant::now();
    scene.roll_out(&names, "v2").await;

    // Then baton replaces the crash-looping pod first, says so, and the rollout completes with
    // never more than one zone and one pod per zone down
    scene
        .completes_replacing_crash_looping(&names, "ingester-zone-b-2", from)
        .await;
}

#[tokio::test]
async fn a_new_version_that_crash_loops_halts_the_group_until_its_fix_rolls_out() {
    // Given a ready group of 3 zones × 3 pods, and a version v2 whose pods crash-loop
    let scene = Scene::new("crashloop-new").await;
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
            "max-unavailable reached in ingester-zone-a (1/1); \
             waiting for ingester-zone-a-0 (new revision) to become ready: CrashLoopBackOff",
        )
        .await;
    assert_eq!(scene.updated_pods("ingester-zone-a").await, 1);
    assert_eq!(scene.updated_pods("ingester-zone-b").await, 0);
    assert_eq!(scene.updated_pods("ingester-zone-c").await, 0);

    // When the fix v3 is rolled out
    scene.roll_out(&names, "v3").await;

    // Then the crash-looping v2 pod is replaced at no cost and every zone completes
    scene
        .completes_replacing_crash_looping(&names, "ingester-zone-a-0", from)
        .await;
}

#[tokio::test]
async fn a_version_crash_looping_in_two_zones_is_replaced_in_both_and_the_fix_completes() {
    // Given a ready group of 3 zones × 3 pods where an old pod crash-loops in zone a and in
    // zone c: two zones down, no rollout in flight
    let scene = Scene::new("crashloop-two").await;
    let names = scene
        .create(&rollout_group("ingester", &["a", "b", "c"], 3))
        .await;
    for pod in ["ingester-zone-a-1", "ingester-zone-c-0"] {
        scene.simulator.crash_loop(pod).await;
        scene.wait_not_ready(pod).await;
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
                &format!("replacing {pod}: CrashLoopBackOff"),
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
