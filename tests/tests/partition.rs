//! Partition rollouts on the real control plane, each a scenario: given a group of
//! `RollingUpdate` StatefulSets rolled by partition (`baton.dev/update-by: partition`), baton
//! lowers each zone's partition in turn and the real StatefulSet controller replaces the pods.

use std::time::{Duration, Instant};

use baton_e2e::controller_support::{
    ControlledNamespace, roll_out, wait_event, wait_group_ready, wait_rollout_complete,
};
use baton_e2e::fixtures::{StatefulSetFixture, rollout_group};
use baton_e2e::timeline::{Zone, ZoneWindow, check_rollout_guarantees, zone_windows};
use baton_e2e::wait_until;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const REPLICAS: i32 = 3;
/// The API path baton deletes pods through: a partition rollout never uses it.
const POD_DELETE_SERIES: &str =
    "method=\"DELETE\",path=\"/api/v1/namespaces/{namespace}/pods/{name}\"";
/// baton's writes of StatefulSets (its partitions, in these scenarios).
const STATEFULSET_PATCHES: &str = "rollout_operator_kubernetes_api_client_request_duration_seconds_count{method=\"PATCH\",path=\"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}\"";

struct Scene(ControlledNamespace);

impl std::ops::Deref for Scene {
    type Target = ControlledNamespace;
    fn deref(&self) -> &ControlledNamespace {
        &self.0
    }
}

impl Scene {
    async fn new(prefix: &str) -> Self {
        Self(ControlledNamespace::start(prefix).await)
    }

    fn api(&self) -> Api<StatefulSet> {
        Api::namespaced(self.namespace.client(), self.namespace.name())
    }

    /// Creates the group's zones, each changed by `zone`, and waits until every pod is ready
    /// and baton holds every partition at the replicas.
    async fn create(
        &self,
        zone: impl Fn(&str, StatefulSetFixture) -> StatefulSetFixture,
    ) -> Vec<String> {
        let mut names = Vec::new();
        for (letter, fixture) in
            ["a", "b", "c"]
                .into_iter()
                .zip(rollout_group("ingester", &["a", "b", "c"], REPLICAS))
        {
            let created = zone(letter, fixture)
                .create(&self.namespace.client(), self.namespace.name())
                .await;
            names.push(created.metadata.name.unwrap_or_default());
        }
        wait_group_ready(&self.namespace.client(), self.namespace.name(), &names).await;
        for name in &names {
            // Held by baton, or already by the manifest.
            wait_until(TIMEOUT, &format!("{name} held at its replicas"), || async {
                self.partition(name).await.0 == Some(REPLICAS)
            })
            .await;
        }
        names
    }

    async fn partition(&self, name: &str) -> (Option<i32>, Option<String>) {
        let statefulset = self.api().get(name).await.expect("the StatefulSet");
        let partition = statefulset
            .spec
            .and_then(|spec| spec.update_strategy?.rolling_update?.partition);
        let recorded = statefulset
            .metadata
            .annotations
            .and_then(|annotations| annotations.get("baton.dev/partition").cloned());
        (partition, recorded)
    }

    /// Waits until `name`'s partition is `partition`, recorded as baton's.
    async fn wait_partition(&self, name: &str, partition: i32) {
        wait_until(
            TIMEOUT,
            &format!("{name} held at partition {partition}"),
            || async {
                self.partition(name).await == (Some(partition), Some(partition.to_string()))
            },
        )
        .await;
    }

    async fn roll_out(&self, names: &[String]) -> Instant {
        let from = Instant::now();
        roll_out(&self.namespace.client(), self.namespace.name(), names, "v2").await;
        from
    }

    async fn wait_complete(&self, names: &[String]) {
        wait_rollout_complete(&self.namespace.client(), self.namespace.name(), names).await;
    }

    async fn wait_event(&self, object: &str, reason: &str, note_contains: &[&str]) {
        let (client, namespace) = (self.namespace.client(), self.namespace.name());
        wait_event(&client, namespace, object, reason, note_contains).await;
    }

    /// baton's StatefulSet writes so far, from its metrics.
    async fn statefulset_writes(&self) -> u64 {
        let metrics = self.controller.metrics().await;
        metrics
            .lines()
            .filter(|line| line.starts_with(STATEFULSET_PATCHES))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|count| count as u64)
            .sum()
    }

    /// Then: the timeline since `from` kept the guarantees (one zone at a time, one pod at a
    /// time), and the zones went in order.
    fn windows(&self, names: &[String], from: Instant) -> Vec<(String, ZoneWindow)> {
        let zones: Vec<Zone> = names
            .iter()
            .map(|name| Zone::new(name, REPLICAS as u32, 1))
            .collect();
        let timeline = self.simulator.timeline();
        check_rollout_guarantees(&timeline, &zones, from).unwrap();
        let mut windows: Vec<(String, ZoneWindow)> =
            zone_windows(&timeline, &zones, from).into_iter().collect();
        windows.sort_by_key(|(_, window)| window.started);
        windows
    }
}

#[tokio::test]
async fn three_rolling_update_zones_roll_by_partition_zone_by_zone_with_a_soak() {
    // Given a ready group of 3 RollingUpdate zones rolled by partition, their manifests
    // leaving the partition at 0, with a 5 s soak after zone a
    let scene = Scene::new("partition").await;
    let names = scene
        .create(|zone, fixture| {
            let fixture = fixture.by_partition(0);
            match zone {
                "a" => fixture.annotation("baton.dev/soak", "5s"),
                _ => fixture,
            }
        })
        .await;
    // (baton held each at its replicas, so the template change below waits for it)

    // When the template of every zone changes
    let from = scene.roll_out(&names).await;

    // Then baton lowers zone a's partition first, and says so
    scene
        .wait_event(
            "ingester-zone-a",
            "PartitionLowered",
            &[
                "lower the partition of ingester-zone-a to 2",
                "ingester-zone-a-2",
            ],
        )
        .await;

    // And every zone completes in order, b at least 5 s after a, with the guarantees held
    scene.wait_complete(&names).await;
    let windows = scene.windows(&names, from);
    let order: Vec<&str> = windows.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        order,
        ["ingester-zone-a", "ingester-zone-b", "ingester-zone-c"]
    );
    let (a, b) = (windows[0].1, windows[1].1);
    let soaked = b.started.expect("b started") - a.completed.expect("a completed");
    assert!(
        soaked >= Duration::from_secs(5),
        "b started {soaked:?} after a"
    );

    // And every pod went through the StatefulSet controller: baton deleted none
    let metrics = scene.controller.metrics().await;
    assert!(
        !metrics.contains(POD_DELETE_SERIES),
        "baton deleted pods in a partition rollout:\n{metrics}"
    );

    // And each zone is held at its replicas again, ready for the next template change
    for name in &names {
        scene.wait_partition(name, REPLICAS).await;
    }
}

#[tokio::test]
async fn a_gitops_reapply_of_the_partition_mid_rollout_is_reported_and_not_fought() {
    // Given a ready group of 3 zones rolled by partition whose manifests set partition 3, as
    // the phased rollout operator's users write them
    let scene = Scene::new("reapply").await;
    let names = scene
        .create(|_, fixture| fixture.by_partition(REPLICAS))
        .await;

    // When a rollout starts and baton has lowered zone a's partition
    scene.roll_out(&names).await;
    scene.wait_partition("ingester-zone-a", 2).await;

    // And a GitOps tool re-applies the manifest (GET, then PUT with its resourceVersion)
    // every second, five times
    let writes_before = scene.statefulset_writes().await;
    for _ in 0..5 {
        let mut current = scene.api().get("ingester-zone-a").await.expect("zone a");
        let spec = current.spec.as_mut().expect("a spec");
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        strategy
            .rolling_update
            .get_or_insert_with(Default::default)
            .partition = Some(REPLICAS);
        // A conflict means baton wrote meanwhile: the tool reads again next sync.
        let _ = scene
            .api()
            .replace("ingester-zone-a", &PostParams::default(), &current)
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Then baton reports it, naming both values, and holds the group
    scene
        .wait_event(
            "ingester-zone-a",
            "PartitionMoved",
            &["from 2 (set by baton) to 3"],
        )
        .await;
    // And it did not fight: no write of its own while the re-applier kept putting 3 back
    let writes_during = scene.statefulset_writes().await - writes_before;
    assert_eq!(
        writes_during, 0,
        "baton wrote the StatefulSets {writes_during} times"
    );
    assert_eq!(scene.partition("ingester-zone-a").await.0, Some(REPLICAS));

    // When a person settles it as the Event says (baton goes on from where it is now)
    let settle = json!({"metadata": {"annotations": {"baton.dev/partition": null}}});
    scene
        .api()
        .patch(
            "ingester-zone-a",
            &PatchParams::default(),
            &Patch::Merge(&settle),
        )
        .await
        .expect("removing baton's record of the partition");

    // Then the rollout completes, with a bounded number of writes in all
    scene.wait_complete(&names).await;
    for name in &names {
        scene.wait_partition(name, REPLICAS).await;
    }
    let writes = scene.statefulset_writes().await - writes_before;
    // One write per pod released and one hold per zone, and no more than a few retries.
    let bound = 3 * (REPLICAS as u64 + 1) + 3;
    assert!(
        writes <= bound,
        "{writes} StatefulSet writes to finish (bound {bound})"
    );
}

#[tokio::test]
async fn a_crash_looping_old_pod_below_the_partition_is_released_and_replaced_for_the_fix() {
    // Given a ready group of 3 zones rolled by partition, held at 3 by their manifests, zone b
    // `OrderedReady`, where the old pod ingester-zone-b-0 crash-loops: below the partition, the
    // StatefulSet controller would neither replace it nor go on while it is down
    let scene = Scene::new("partition-fix").await;
    let names = scene
        .create(|zone, fixture| {
            let fixture = fixture.by_partition(REPLICAS);
            match zone {
                "b" => fixture.ordered_ready(),
                _ => fixture,
            }
        })
        .await;
    scene.simulator.crash_loop("ingester-zone-b-0").await;
    wait_until(TIMEOUT, "ingester-zone-b-0 crash-loops", || async {
        scene.simulator.timeline().iter().any(|transition| {
            transition.pod == "ingester-zone-b-0"
                && transition.event == baton_e2e::PodEvent::NotReady
        })
    })
    .await;

    // When the fixed version is deployed
    let from = scene.roll_out(&names).await;

    // Then baton lowers zone b's partition to the broken pod and replaces it at no cost, and
    // the rollout completes with never two zones, or two pods of a zone, down
    scene
        .wait_event(
            "ingester-zone-b",
            "UnavailablePodReplaced",
            &["replacing ingester-zone-b-0: CrashLoopBackOff at the old revision"],
        )
        .await;
    scene.wait_complete(&names).await;
    let windows = scene.windows(&names, from);
    assert_eq!(
        windows[0].0, "ingester-zone-b",
        "the broken zone goes first"
    );
    for name in &names {
        scene.wait_partition(name, REPLICAS).await;
    }
}
