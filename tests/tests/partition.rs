//! Partition rollouts on the real control plane, each a scenario: given a group of
//! `RollingUpdate` StatefulSets rolled by partition (`baton.dev/update-by: partition`), baton
//! lowers each zone's partition in turn and the real StatefulSet controller replaces the pods.

use std::time::{Duration, Instant};

use baton_e2e::controller_support::{events_about, wait_event, wait_group_ready};
use baton_e2e::fixtures::{StatefulSetFixture, gitops_apply, rollout_group};
use baton_e2e::prometheus_support::{Metrics, Prometheus, create_health_check};
use baton_e2e::timeline::{WATCH_SKEW, Zone, check_rollout_guarantees};
use baton_e2e::{Scene, wait_until};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::sync::{Arc, Mutex};

const TIMEOUT: Duration = Duration::from_secs(90);
const REPLICAS: i32 = 3;
/// The API path baton deletes pods through: a partition rollout never uses it.
const POD_DELETE_SERIES: &str =
    "method=\"DELETE\",path=\"/api/v1/namespaces/{namespace}/pods/{name}\"";

// The steps only these scenarios take.

fn statefulsets(scene: &Scene) -> Api<StatefulSet> {
    Api::namespaced(scene.namespace.client(), scene.namespace.name())
}

/// Creates the group's zones, each changed by `zone`, and waits until every pod is ready
/// and baton holds every partition at the replicas.
async fn create_held(
    scene: &Scene,
    zone: impl Fn(&str, StatefulSetFixture) -> StatefulSetFixture,
) -> Vec<String> {
    let names = scene.create_group(&["a", "b", "c"], REPLICAS, zone).await;
    wait_held(scene, &names).await;
    names
}

/// Waits until every pod of `names` is ready and baton holds every partition at the
/// replicas.
async fn wait_held(scene: &Scene, names: &[String]) {
    wait_group_ready(&scene.namespace.client(), scene.namespace.name(), names).await;
    for name in names {
        // Held by baton, or already by the manifest.
        wait_until(TIMEOUT, &format!("{name} held at its replicas"), || async {
            partition_of(scene, name).await.0 == Some(REPLICAS)
        })
        .await;
    }
}

/// Creates the group's zones with server-side apply as a GitOps tool (its manifests at
/// `version`), and waits as [`create_held`] does.
async fn apply(scene: &Scene, fixtures: &[StatefulSetFixture], version: &str) -> Vec<String> {
    let mut names = Vec::new();
    for fixture in fixtures {
        let applied = gitops_apply(
            &scene.namespace.client(),
            scene.namespace.name(),
            &fixture.manifest(version),
        )
        .await
        .expect("the GitOps tool creates the StatefulSet");
        names.push(applied.metadata.name.unwrap_or_default());
    }
    wait_held(scene, &names).await;
    names
}

/// The GitOps tool applies the manifests at `version`; returns when the StatefulSet
/// controller has computed each one's update revision, and when the apply began.
async fn apply_new_version(
    scene: &Scene,
    fixtures: &[StatefulSetFixture],
    version: &str,
) -> Instant {
    let from = Instant::now();
    for fixture in fixtures {
        let manifest = fixture.manifest(version);
        let name = manifest.metadata.name.clone().unwrap_or_default();
        let before = update_revision(scene, &name).await;
        gitops_apply(&scene.namespace.client(), scene.namespace.name(), &manifest)
            .await
            .expect("the GitOps tool applies the new version");
        wait_until(
            TIMEOUT,
            &format!("{name} has a new update revision"),
            || async { update_revision(scene, &name).await != before },
        )
        .await;
    }
    from
}

async fn update_revision(scene: &Scene, name: &str) -> Option<String> {
    let statefulset = statefulsets(scene)
        .get(name)
        .await
        .expect("the StatefulSet");
    statefulset.status?.update_revision
}

async fn partition_of(scene: &Scene, name: &str) -> (Option<i32>, Option<String>) {
    let statefulset = statefulsets(scene)
        .get(name)
        .await
        .expect("the StatefulSet");
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
async fn wait_partition(scene: &Scene, name: &str, partition: i32) {
    wait_until(
        TIMEOUT,
        &format!("{name} held at partition {partition}"),
        || async {
            partition_of(scene, name).await == (Some(partition), Some(partition.to_string()))
        },
    )
    .await;
}

#[tokio::test]
async fn three_rolling_update_zones_roll_by_partition_zone_by_zone_with_a_soak() {
    // Given a ready group of 3 RollingUpdate zones rolled by partition, their manifests
    // leaving the partition at 0, with a 5 s soak after zone a
    let scene = Scene::start("partition").await;
    let names = create_held(&scene, |zone, fixture| {
        let fixture = fixture.by_partition(0);
        match zone {
            "a" => fixture.annotation("baton.dev/soak", "5s"),
            _ => fixture,
        }
    })
    .await;
    // (baton held each at its replicas, so the template change below waits for it)

    // When the template of every zone changes
    let from = scene.roll_out(&names, "v2").await;

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
    let windows = scene.windows(&names, REPLICAS as u32, from);
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
        wait_partition(&scene, name, REPLICAS).await;
    }
}

/// Given a ready group whose manifests `fixture` makes, a rollout to v2 (written as `applied`
/// says) held in zone a: baton lowered its partition to 2 and the replaced pod is slow to
/// become ready. Returns the StatefulSets, the manifests at v2 and when the rollout began.
async fn held_in_zone_a(
    scene: &Scene,
    fixture: impl Fn(StatefulSetFixture) -> StatefulSetFixture,
    applied: bool,
) -> (Vec<String>, Vec<StatefulSet>, Instant) {
    let fixtures: Vec<StatefulSetFixture> = rollout_group("ingester", &["a", "b", "c"], REPLICAS)
        .into_iter()
        .map(fixture)
        .collect();
    let names = if applied {
        apply(scene, &fixtures, "v1").await
    } else {
        create_held(scene, |letter, _| fixtures[zone_index(letter)].clone()).await
    };
    scene.simulator.hold_not_ready("ingester-zone-a-2").await;
    let from = if applied {
        apply_new_version(scene, &fixtures, "v2").await
    } else {
        scene.roll_out(&names, "v2").await
    };
    wait_partition(scene, "ingester-zone-a", 2).await;
    let manifests = fixtures
        .iter()
        .map(|fixture| fixture.manifest("v2"))
        .collect();
    (names, manifests, from)
}

fn zone_index(letter: &str) -> usize {
    match letter {
        "a" => 0,
        "b" => 1,
        _ => 2,
    }
}

/// A GitOps tool's sync, five times a second apart: `reapply` once each time. Returns baton's
/// StatefulSet writes meanwhile.
async fn five_syncs<F, Fut>(scene: &Scene, reapply: F) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let writes_before = scene.statefulset_writes().await;
    for _ in 0..5 {
        reapply().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    scene.statefulset_writes().await - writes_before
}

/// Then, once zone a's replaced pod is ready: the rollout completes with the guarantees held,
/// each zone held at its replicas again, in a bounded number of writes since `writes_before`.
async fn completes_after_the_reapplies(
    scene: &Scene,
    names: &[String],
    from: Instant,
    writes_before: u64,
) {
    scene.simulator.release("ingester-zone-a-2").await;
    scene.wait_complete(names).await;
    for name in names {
        wait_partition(scene, name, REPLICAS).await;
    }
    scene.windows(names, REPLICAS as u32, from);
    let writes = scene.statefulset_writes().await - writes_before;
    // One write per pod released and one hold per zone, each at most twice (a pass planned on
    // a cache that had not caught up with the write before tries once more and is refused).
    let bound = 2 * 3 * (REPLICAS as u64 + 1);
    assert!(
        writes <= bound,
        "{writes} StatefulSet writes to finish (bound {bound})"
    );
}

/// Then: baton reports the moved partition of zone a, naming both values, holds the group
/// without a write of its own (`writes_during` the re-applies), and once a person settles it
/// as the Event says the rollout completes.
async fn moved_partition_is_reported_and_settled(
    scene: &Scene,
    names: &[String],
    from: Instant,
    writes_before: u64,
    writes_during: u64,
) {
    scene
        .wait_event(
            "ingester-zone-a",
            "PartitionMoved",
            &["from 2 (set by baton) to 3"],
        )
        .await;
    assert_eq!(
        writes_during, 0,
        "baton wrote the StatefulSets {writes_during} times"
    );
    assert_eq!(
        partition_of(scene, "ingester-zone-a").await.0,
        Some(REPLICAS)
    );

    // When a person settles it as the Event says (baton goes on from where it is now)
    let settle = json!({"metadata": {"annotations": {"baton.dev/partition": null}}});
    statefulsets(scene)
        .patch(
            "ingester-zone-a",
            &PatchParams::default(),
            &Patch::Merge(&settle),
        )
        .await
        .expect("removing baton's record of the partition");

    // Then the rollout completes once the pod is ready
    completes_after_the_reapplies(scene, names, from, writes_before).await;
}

#[tokio::test]
async fn a_gitops_reapply_of_the_partition_mid_rollout_is_reported_and_not_fought() {
    // Given a ready group of 3 zones rolled by partition whose manifests set partition 3, as
    // the phased rollout operator's users write them, rolling, held in zone a at partition 2
    let scene = Scene::start("reapply").await;
    let (names, _, from) =
        held_in_zone_a(&scene, |fixture| fixture.by_partition(REPLICAS), false).await;

    // When a GitOps tool re-applies the manifest (GET, then PUT with its resourceVersion)
    // every second, five times
    let writes_before = scene.statefulset_writes().await;
    let writes_during = five_syncs(&scene, || async {
        let mut current = statefulsets(&scene)
            .get("ingester-zone-a")
            .await
            .expect("zone a");
        let spec = current.spec.as_mut().expect("a spec");
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        strategy
            .rolling_update
            .get_or_insert_with(Default::default)
            .partition = Some(REPLICAS);
        // A conflict means baton wrote meanwhile: the tool reads again next sync.
        let _ = statefulsets(&scene)
            .replace("ingester-zone-a", &PostParams::default(), &current)
            .await;
    })
    .await;

    // Then baton reports it and does not fight it, and the rollout completes once settled
    moved_partition_is_reported_and_settled(&scene, &names, from, writes_before, writes_during)
        .await;
}

#[tokio::test]
async fn a_server_side_apply_naming_the_partition_mid_rollout_is_reported_and_not_fought() {
    // Given a ready group of 3 zones rolled by partition, created and rolled to v2 by a GitOps
    // tool with server-side apply, its manifests setting partition 3; held in zone a at 2
    let scene = Scene::start("ssa-partition").await;
    let (names, manifests, from) =
        held_in_zone_a(&scene, |fixture| fixture.by_partition(REPLICAS), true).await;

    // When the tool re-applies the same manifest, forcing conflicts (baton owns the partition
    // since it lowered it), every second, five times
    let writes_before = scene.statefulset_writes().await;
    let writes_during = five_syncs(&scene, || async {
        gitops_apply(
            &scene.namespace.client(),
            scene.namespace.name(),
            &manifests[0],
        )
        .await
        .expect("the forced apply");
    })
    .await;

    // Then baton reports the partition the apply moved, as for any other writer, does not fight
    // it, and the rollout completes once settled
    moved_partition_is_reported_and_settled(&scene, &names, from, writes_before, writes_during)
        .await;
}

#[tokio::test]
async fn a_server_side_apply_not_naming_the_partition_leaves_batons_partition_alone() {
    // Given a ready group of 3 zones rolled by partition whose manifests leave the partition
    // out (baton holds it), created and rolled to v2 by a GitOps tool with server-side apply;
    // held in zone a at 2
    let scene = Scene::start("ssa-no-partition").await;
    let (names, manifests, from) = held_in_zone_a(
        &scene,
        |fixture| {
            fixture
                .rolling_update()
                .annotation("baton.dev/update-by", "partition")
        },
        true,
    )
    .await;

    // When the tool re-applies the same manifests, forcing conflicts, every second, five times
    let writes_before = scene.statefulset_writes().await;
    let writes_during = five_syncs(&scene, || async {
        for manifest in &manifests {
            gitops_apply(&scene.namespace.client(), scene.namespace.name(), manifest)
                .await
                .expect("the forced apply");
        }
    })
    .await;

    // Then the partition baton set is still there, recorded as baton's, nothing was reported
    // and baton did not write: there was nothing to answer
    assert_eq!(
        partition_of(&scene, "ingester-zone-a").await,
        (Some(2), Some("2".to_owned()))
    );
    assert_eq!(
        writes_during, 0,
        "baton wrote the StatefulSets {writes_during} times"
    );
    let events = events_about(
        &scene.namespace.client(),
        scene.namespace.name(),
        "ingester-zone-a",
    )
    .await;
    assert!(
        events.iter().all(|(reason, _)| reason != "PartitionMoved"),
        "{events:?}"
    );

    // And the rollout completes once the pod is ready
    completes_after_the_reapplies(&scene, &names, from, writes_before).await;
}

#[tokio::test]
async fn a_crash_looping_old_pod_below_the_partition_is_released_and_replaced_for_the_fix() {
    // Given a ready group of 3 zones rolled by partition, held at 3 by their manifests, zone b
    // `OrderedReady`, where the old pod ingester-zone-b-0 crash-loops: below the partition, the
    // StatefulSet controller would neither replace it nor go on while it is down
    let scene = Scene::start("partition-fix").await;
    let names = create_held(&scene, |zone, fixture| {
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
    let from = scene.roll_out(&names, "v2").await;

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
    let windows = scene.windows(&names, REPLICAS as u32, from);
    assert_eq!(
        windows[0].0, "ingester-zone-b",
        "the broken zone goes first"
    );
    for name in &names {
        wait_partition(&scene, name, REPLICAS).await;
    }
}

// ---- PhasedRollout: the phased rollout operator's resource ----

/// Prometheus answers `app_healthy == 1` with data while the test sets the metric to 1.
const HEALTHY: &str = "app_healthy";

struct PhasedScene {
    scene: Scene,
    metrics: Metrics,
    prometheus: Prometheus,
    /// Prometheus' address as the phased rollout operator's users write it: host and port, no
    /// scheme.
    url: String,
}

impl PhasedScene {
    /// Given Prometheus scraping a metric the test sets, the CRDs, and a ready 5-replica
    /// RollingUpdate StatefulSet `web`.
    async fn new(prefix: &str) -> Self {
        let metrics = Metrics::start().await;
        metrics.set(HEALTHY, 1.0);
        let prometheus = Prometheus::start(metrics.address()).await;
        prometheus.wait_value(HEALTHY, 1.0).await;
        let allowed = format!("[\"{}\"]", prometheus.url());
        let scene =
            Scene::start_with(prefix, &[("BATON_GATES__PROMETHEUS_ADDRESSES", &allowed)]).await;
        let client = scene.namespace.client();
        baton_e2e::crds::install(&client, baton_e2e::crds::ROLLOUT_HEALTH_CHECK).await;
        baton_e2e::crds::install(&client, baton_e2e::crds::PHASED_ROLLOUT).await;
        StatefulSetFixture::new("web")
            .replicas(5)
            .rolling_update()
            .create(&client, scene.namespace.name())
            .await;
        wait_group_ready(&client, scene.namespace.name(), &["web".to_owned()]).await;
        let url = prometheus.url().trim_start_matches("http://").to_owned();
        Self {
            scene,
            metrics,
            prometheus,
            url,
        }
    }

    fn api(&self) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("sts.plus", "v1alpha1", "PhasedRollout"),
            "phasedrollouts",
        );
        Api::namespaced_with(
            self.scene.namespace.client(),
            self.scene.namespace.name(),
            &resource,
        )
    }

    /// Creates PhasedRollout `name` of `web`, checking `up` every second, one success a step,
    /// with `spec` merged into its spec.
    async fn create_other(&self, name: &str, spec: serde_json::Value) {
        let mut rollout = json!({
            "apiVersion": "sts.plus/v1alpha1",
            "kind": "PhasedRollout",
            "metadata": {"name": name},
            "spec": {"targetRef": "web", "check": {
                "periodSeconds": 1, "successThreshold": 1,
                "query": {"expr": "up", "url": self.url},
            }},
        });
        for (field, value) in spec.as_object().into_iter().flatten() {
            rollout["spec"][field] = value.clone();
        }
        let object: DynamicObject = serde_json::from_value(rollout).expect("a PhasedRollout");
        self.api()
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("creating PhasedRollout {name}: {error}"));
    }

    /// Creates the phased rollout operator's documented example, checking every second, three
    /// successes in a row.
    async fn create(&self) {
        self.create_with(json!({})).await;
    }

    /// Creates that example with these fields added to `spec.check.query`.
    async fn create_with(&self, query: serde_json::Value) {
        let mut example = json!({
            "apiVersion": "sts.plus/v1alpha1",
            "kind": "PhasedRollout",
            "metadata": {"name": "phasedrollout-sample"},
            "spec": {
                "targetRef": "web",
                "standardRollingUpdate": false,
                "check": {
                    "initialDelaySeconds": 0,
                    "periodSeconds": 1,
                    "successThreshold": 3,
                    "query": {"expr": format!("{HEALTHY} == 1"), "url": self.url},
                },
            },
        });
        for (field, value) in query.as_object().into_iter().flatten() {
            example["spec"]["check"]["query"][field] = value.clone();
        }
        let object: DynamicObject = serde_json::from_value(example).expect("a PhasedRollout");
        self.api()
            .create(&PostParams::default(), &object)
            .await
            .expect("creating the PhasedRollout");
    }

    async fn status(&self) -> serde_json::Value {
        self.api()
            .get("phasedrollout-sample")
            .await
            .map(|object| object.data["status"].clone())
            .unwrap_or_default()
    }

    /// Waits until the status `holds`; on timeout the panic shows the last status read.
    async fn wait_status(&self, what: &str, holds: impl Fn(&serde_json::Value) -> bool) {
        let last = Mutex::new(serde_json::Value::Null);
        let waited = tokio::time::timeout(
            TIMEOUT,
            wait_until(
                TIMEOUT + Duration::from_secs(1),
                &format!("the PhasedRollout's status {what}"),
                || async {
                    let status = self.status().await;
                    let held = holds(&status);
                    *last.lock().expect("last status") = status;
                    held
                },
            ),
        )
        .await;
        assert!(
            waited.is_ok(),
            "timed out after {TIMEOUT:?} waiting until the PhasedRollout's status {what}; last: {}",
            last.lock().expect("last status")
        );
    }

    /// Records every status the PhasedRollout is written with, as a watch (`kubectl get
    /// phasedrollout -o yaml -w`) delivers them, until the returned handle is dropped.
    fn record_statuses(&self) -> StatusRecord {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let api = self.api();
        let into = seen.clone();
        let task = tokio::spawn(async move {
            let config = watcher::Config::default().fields("metadata.name=phasedrollout-sample");
            let mut updates = std::pin::pin!(watcher(api, config).applied_objects());
            while let Some(update) = updates.next().await {
                if let Ok(object) = update {
                    into.lock().unwrap().push(object.data["status"].clone());
                }
            }
        });
        StatusRecord { seen, task }
    }

    /// Pods of `web` that started leaving after `from`, in order, with when.
    fn replacements(&self, from: Instant) -> Vec<(String, Instant)> {
        let mut seen: Vec<(String, Instant)> = Vec::new();
        for transition in self.scene.simulator.timeline() {
            let leaving = matches!(
                transition.event,
                baton_e2e::PodEvent::Terminating | baton_e2e::PodEvent::Deleted
            );
            if transition.at >= from
                && leaving
                && transition.statefulset.as_deref() == Some("web")
                && !seen.iter().any(|(pod, _)| *pod == transition.pod)
            {
                seen.push((transition.pod.clone(), transition.at));
            }
        }
        seen
    }
}

/// The statuses a watch delivered so far.
struct StatusRecord {
    seen: Arc<Mutex<Vec<serde_json::Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusRecord {
    fn statuses(&self) -> Vec<serde_json::Value> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for StatusRecord {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn a_phased_rollout_from_the_seeds_example_rolls_one_pod_per_passing_check() {
    // Given the phased rollout operator's example PhasedRollout on a ready 5-replica
    // StatefulSet, baton holding it
    let phased = PhasedScene::new("phased").await;
    phased.create().await;
    wait_partition(&phased.scene, "web", 5).await;
    phased
        .wait_status("is Updated", |status| status["phase"] == "Updated")
        .await;

    // When its template changes
    let from = phased.scene.roll_out(&["web".to_owned()], "v2").await;

    // Then the StatefulSet controller replaces the pods highest first, one per step, each
    // step after three checks in a row passed (at one a second: two seconds at least apart)
    phased.scene.wait_complete(&["web".to_owned()]).await;
    let replaced = phased.replacements(from);
    let order: Vec<&str> = replaced.iter().map(|(pod, _)| pod.as_str()).collect();
    assert_eq!(order, ["web-4", "web-3", "web-2", "web-1", "web-0"]);
    for pair in replaced.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap + WATCH_SKEW >= Duration::from_secs(2),
            "{} went {gap:?} after {}",
            pair[1].0,
            pair[0].0
        );
    }
    let zones = [Zone::new("web", 5, 1)];
    check_rollout_guarantees(&phased.scene.simulator.timeline(), &zones, from).unwrap();

    // And the status says so, as `kubectl get phasedrollout -o yaml -w` shows it
    phased
        .wait_status("is Updated at partition 5", |status| {
            status["phase"] == "Updated" && status["partition"] == 5
        })
        .await;
    let status = phased.status().await;
    assert!(
        status["consecutiveSuccesses"].as_u64().is_some(),
        "{status}"
    );
    assert!(status["lastCheck"]["time"].is_string(), "{status}");
}

#[tokio::test]
async fn a_replacement_shows_as_rolling_naming_the_pod_and_every_status_says_its_partition() {
    // Given the example PhasedRollout on a ready 5-replica StatefulSet, watched from its
    // creation, and web-3's replacement slow to become ready
    let phased = PhasedScene::new("phased-rolling").await;
    let record = phased.record_statuses();
    phased.create().await;
    wait_partition(&phased.scene, "web", 5).await;
    phased.scene.simulator.hold_replacement("web-3").await;

    // When its template changes, and web-4's replacement passed the check
    phased.scene.roll_out(&["web".to_owned()], "v2").await;

    // Then while the StatefulSet controller replaces web-3, the status says Rolling and names
    // it, at partition 3, however the group's own wait words it
    phased
        .wait_status("is Rolling web-3 (Pending) at partition 3", |status| {
            status["phase"] == "Rolling"
                && status["rollingPod"] == "web-3"
                && status["partition"] == 3
                && status["message"].as_str().is_some_and(|message| {
                    message.ends_with("replacing web-3, released by partition 3: Pending")
                })
        })
        .await;

    // When web-3 becomes ready, the rollout completes
    phased.scene.simulator.release("web-3").await;
    phased.scene.wait_complete(&["web".to_owned()]).await;
    phased
        .wait_status("is Updated at partition 5", |status| {
            status["phase"] == "Updated" && status["partition"] == 5
        })
        .await;

    // And a pod that goes down with nothing released is not a rollout: Waiting, none rolling
    phased.scene.simulator.hold_not_ready("web-0").await;
    phased
        .wait_status("is Waiting with no rolling pod", |status| {
            status["phase"] == "Waiting" && status.get("rollingPod").is_none()
        })
        .await;

    // And every status written since the PhasedRollout was created said its partition with
    // its phase
    let statuses = record.statuses();
    let phased_statuses: Vec<&serde_json::Value> = statuses
        .iter()
        .filter(|status| status.get("phase").is_some())
        .collect();
    assert!(!phased_statuses.is_empty(), "no status was watched");
    for status in phased_statuses {
        assert!(
            status["partition"].is_i64(),
            "a phase without a partition: {status}"
        );
    }
    phased.scene.simulator.release("web-0").await;
}

#[tokio::test]
async fn the_seeds_secret_reaches_plain_http_prometheus_once_the_phased_rollout_allows_it() {
    // Given the example's Secret, opted in by its owner, and the example PhasedRollout naming
    // it, Prometheus on plain http as in the example (the operator lists its address)
    let phased = PhasedScene::new("phased-secret").await;
    let client = phased.scene.namespace.client();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), phased.scene.namespace.name());
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "prom-secret", "labels": {"baton.dev/health-check-secret": "true"}},
        "type": "Opaque",
        "stringData": {"token": "token", "password": "password", "username": "username"},
    }))
    .expect("the example's Secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the Secret");
    phased
        .create_with(json!({"secretRef": "prom-secret"}))
        .await;
    wait_partition(&phased.scene, "web", 5).await;

    // When its template changes
    let from = phased.scene.roll_out(&["web".to_owned()], "v2").await;

    // Then no step goes, and the status and a Warning name the PhasedRollout's field to set,
    // not the generated check's
    let field = "set spec.check.query.allowInsecureCredentials of PhasedRollout \
                 phasedrollout-sample: true";
    phased
        .wait_status("names the field to set", |status| {
            status["phase"] == "Checking"
                && status["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(field))
                && status["lastCheck"]["result"]
                    .as_str()
                    .is_some_and(|result| result.contains(field))
        })
        .await;
    phased
        .scene
        .wait_event("web", "UnusableHealthCheck", &[field])
        .await;
    assert!(
        phased.replacements(from).is_empty(),
        "a step went without the check"
    );

    // When the PhasedRollout allows the Secret over plain http
    let patch = json!({"spec": {"check": {"query": {"allowInsecureCredentials": true}}}});
    phased
        .api()
        .patch(
            "phasedrollout-sample",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("allowInsecureCredentials: true");

    // Then the generated check carries it, and the rollout completes through the check
    let checks: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        phased.scene.namespace.name(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("baton.dev", "v1alpha1", "RolloutHealthCheck"),
            "rollouthealthchecks",
        ),
    );
    wait_until(TIMEOUT, "the generated check allows it", || async {
        checks
            .get("phasedrollout-phasedrollout-sample")
            .await
            .is_ok_and(|check| check.data["spec"]["prometheus"]["allowInsecureCredentials"] == true)
    })
    .await;
    phased.scene.wait_complete(&["web".to_owned()]).await;
    let replaced = phased.replacements(from);
    let order: Vec<&str> = replaced.iter().map(|(pod, _)| pod.as_str()).collect();
    assert_eq!(order, ["web-4", "web-3", "web-2", "web-1", "web-0"]);
    phased
        .wait_status("is Updated at partition 5", |status| {
            status["phase"] == "Updated" && status["partition"] == 5
        })
        .await;
}

#[tokio::test]
async fn a_check_that_stops_returning_data_holds_the_next_step_until_standard_rolling_update() {
    // Given the example PhasedRollout rolling, its first pod replaced
    let phased = PhasedScene::new("phased-hold").await;
    phased.create().await;
    wait_partition(&phased.scene, "web", 5).await;
    let from = phased.scene.roll_out(&["web".to_owned()], "v2").await;
    wait_until(TIMEOUT, "web-4 is replaced", || async {
        !phased.replacements(from).is_empty()
    })
    .await;

    // When the query stops returning data (Prometheus has scraped the change)
    phased.metrics.set(HEALTHY, 0.0);
    phased.prometheus.wait_value(HEALTHY, 0.0).await;
    let failing_since = jiff::Timestamp::now();
    let ran_since = |status: &serde_json::Value| {
        status["lastCheck"]["time"]
            .as_str()
            .and_then(|time| time.parse::<jiff::Timestamp>().ok())
            .is_some_and(|time| time > failing_since)
    };
    phased
        .wait_status("says a check failed", |status| {
            ran_since(status)
                && status["phase"] == "Checking"
                && status["consecutiveSuccesses"] == 0
        })
        .await;

    // Then no further pod is released while three more checks fail
    let released = phased.replacements(from).len();
    let mut runs: Vec<String> = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while runs.len() <= 3 {
        let status = phased.status().await;
        assert!(
            Instant::now() < deadline,
            "three more checks did not run: {status}"
        );
        if let Some(time) = status["lastCheck"]["time"].as_str()
            && !runs.iter().any(|seen| seen == time)
        {
            runs.push(time.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        phased.replacements(from).len(),
        released,
        "a step went while the check failed"
    );
    assert_eq!(phased.status().await["phase"], "Checking");

    // When the PhasedRollout asks for the standard rolling update
    let patch = json!({"spec": {"standardRollingUpdate": true}});
    phased
        .api()
        .patch(
            "phasedrollout-sample",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("standardRollingUpdate: true");

    // Then the StatefulSet controller finishes alone, the check failing all along
    phased.scene.wait_complete(&["web".to_owned()]).await;
    phased
        .wait_status("is StandardRollingUpdate", |status| {
            status["phase"] == "StandardRollingUpdate"
        })
        .await;
    assert_eq!(partition_of(&phased.scene, "web").await.0, Some(0));
}

#[tokio::test]
async fn bad_phased_rollouts_are_refused_or_reported_and_deleting_one_hands_the_target_back() {
    let phased = PhasedScene::new("phased-bad").await;
    let client = phased.scene.namespace.client();
    let namespace = phased.scene.namespace.name().to_owned();
    let with = |name: &str, check: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "sts.plus/v1alpha1",
            "kind": "PhasedRollout",
            "metadata": {"name": name},
            "spec": {"targetRef": "web", "check": check},
        }))
        .expect("a PhasedRollout")
    };

    // Given values the schema refuses: the API server says which field
    let zero_period = with(
        "zero-period",
        json!({"periodSeconds": 0, "successThreshold": 1, "query": {"expr": "up", "url": "prom"}}),
    );
    let refused = phased
        .api()
        .create(&PostParams::default(), &zero_period)
        .await;
    let error = refused.expect_err("periodSeconds 0 is refused").to_string();
    assert!(error.contains("periodSeconds"), "{error}");

    // Given a value only baton can judge (a URL it cannot query): the status and a Warning
    // Event name the field, and the target is left alone
    let ftp = with(
        "ftp",
        json!({"periodSeconds": 1, "successThreshold": 1, "query": {"expr": "up", "url": "ftp://prom"}}),
    );
    phased
        .api()
        .create(&PostParams::default(), &ftp)
        .await
        .expect("created");
    wait_until(TIMEOUT, "the status says the url is invalid", || async {
        let status = phased
            .api()
            .get("ftp")
            .await
            .map(|object| object.data["status"].clone());
        status.is_ok_and(|status| {
            status["phase"] == "Invalid"
                && status["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("spec.check.query.url"))
        })
    })
    .await;
    wait_event(
        &client,
        &namespace,
        "ftp",
        "InvalidPhasedRollout",
        &["spec.check.query.url"],
    )
    .await;
    let target = statefulsets(&phased.scene).get("web").await.expect("web");
    assert!(
        !target.labels().contains_key("rollout-group"),
        "{:?}",
        target.labels()
    );
    phased
        .api()
        .delete("ftp", &Default::default())
        .await
        .expect("deleting it");

    // When a valid one serves the target and is then deleted
    phased.create().await;
    wait_partition(&phased.scene, "web", 5).await;
    phased
        .api()
        .delete("phasedrollout-sample", &Default::default())
        .await
        .expect("deleting the PhasedRollout");

    // Then the target is handed back: out of the group, baton's keys gone, and it is gone too
    wait_until(TIMEOUT, "web is handed back", || async {
        let target = statefulsets(&phased.scene).get("web").await.expect("web");
        !target.labels().contains_key("rollout-group")
            && !target.annotations().contains_key("baton.dev/update-by")
            && !target.annotations().contains_key("baton.dev/partition")
    })
    .await;
    wait_until(TIMEOUT, "the PhasedRollout is gone", || async {
        phased
            .api()
            .get_opt("phasedrollout-sample")
            .await
            .is_ok_and(|found| found.is_none())
    })
    .await;

    // Given a StatefulSet no PhasedRollout serves, its partition set by its owner
    let held = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 3}}}});
    statefulsets(&phased.scene)
        .patch("web", &PatchParams::default(), &Patch::Merge(&held))
        .await
        .expect("setting web's partition");
    // When a PhasedRollout naming it asks for the standard rolling update
    phased
        .create_other("standard", json!({"standardRollingUpdate": true}))
        .await;
    wait_until(
        TIMEOUT,
        "the standard PhasedRollout has a status",
        || async {
            phased
                .api()
                .get("standard")
                .await
                .is_ok_and(|object| object.data["status"]["phase"] == "StandardRollingUpdate")
        },
    )
    .await;
    // Then the StatefulSet it never served keeps its partition and its annotations
    assert_eq!(partition_of(&phased.scene, "web").await.0, Some(3));
    phased
        .api()
        .delete("standard", &Default::default())
        .await
        .expect("deleting it");

    // Given a RolloutHealthCheck someone made under the name a PhasedRollout's would have
    let impostor = json!({
        "prometheus": {"address": format!("http://{}", phased.url)},
        "queries": [{"name": "q", "query": "vector(1)"}],
    });
    create_health_check(&client, &namespace, "phasedrollout-taken", impostor.clone()).await;
    // When a PhasedRollout of that name is created
    phased.create_other("taken", json!({})).await;
    // Then it says the check is not its own, neither uses nor changes it, and leaves the target
    wait_until(
        TIMEOUT,
        "the status says the check is someone else's",
        || async {
            phased.api().get("taken").await.is_ok_and(|object| {
                object.data["status"]["phase"] == "Invalid"
                    && object.data["status"]["message"]
                        .as_str()
                        .is_some_and(|message| message.contains("is not this PhasedRollout's"))
            })
        },
    )
    .await;
    let resource = baton_core::gates::health_check::api_resource();
    let checks: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let kept = checks.get("phasedrollout-taken").await.expect("the check");
    assert_eq!(kept.data["spec"]["queries"], impostor["queries"]);
    let target = statefulsets(&phased.scene).get("web").await.expect("web");
    assert!(!target.labels().contains_key("rollout-group"));

    // And a targetRef that is no name is refused, naming the field
    phased
        .create_other("no-name", json!({"targetRef": "web/../other"}))
        .await;
    wait_until(TIMEOUT, "the status names spec.targetRef", || async {
        phased.api().get("no-name").await.is_ok_and(|object| {
            object.data["status"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("spec.targetRef"))
        })
    })
    .await;
}
