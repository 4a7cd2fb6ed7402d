//! baton-controller serving several namespaces on the real control plane, each a scenario:
//! given rollout groups in namespaces that a selector over namespaces picks, when their
//! templates change and namespaces' labels come and go, then baton rolls the groups of the
//! namespaces served, and only those, taking namespaces up and letting them go while it runs;
//! and with several replicas sharing the namespaces by shard Leases, each namespace is served by
//! one replica at a time, also when the one serving it dies mid-rollout, or is paused past its
//! lease (SIGSTOP) and resumes while a third replica joins: the merged pod timeline of each
//! namespace never shows two actors on a group, and a resumed replica acts only under shard
//! Leases it took anew.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use baton_core::shards::ShardId;
use baton_e2e::control_plane::ControlPlane;
use baton_e2e::controller_support::{
    Controller, create_ready_group, roll_out, rollout_state, wait_rollout_complete,
};
use baton_e2e::namespace::random_suffix;
use baton_e2e::shard_support::{Replica, ShardLeaseHistory};
use baton_e2e::timeline::{Zone, check_rollout_guarantees};
use baton_e2e::{PodEvent, PodSimulator, TestNamespace, wait_until};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};

const TIMEOUT: Duration = Duration::from_secs(120);
const ZONES: [&str; 3] = ["a", "b", "c"];
const PODS_PER_ZONE: i32 = 2;
/// The shard Leases replicas share the namespaces by, in the scenarios with several.
const SHARDS: u32 = 6;

/// A namespace with a ready group `ingester` of three zones and the pod simulator under it.
struct Tenant {
    namespace: TestNamespace,
    simulator: PodSimulator,
    names: Vec<String>,
}

impl Tenant {
    async fn create(control_plane: &ControlPlane, prefix: &str) -> Self {
        Self::in_namespace(TestNamespace::create(control_plane, prefix).await).await
    }

    /// As [`Tenant::create`], the namespace named so that it falls in `shard` of [`SHARDS`]
    /// (FNV-1a of its name, as every replica computes it).
    async fn create_in_shard(control_plane: &ControlPlane, prefix: &str, shard: u32) -> Self {
        let name = std::iter::repeat_with(|| format!("{prefix}-{}", random_suffix()))
            .find(|name| ShardId::of(name, SHARDS).shard == shard)
            .expect("names keep coming");
        Self::in_namespace(TestNamespace::create_named(control_plane, &name).await).await
    }

    async fn in_namespace(namespace: TestNamespace) -> Self {
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let names =
            create_ready_group(&namespace.client(), namespace.name(), &ZONES, PODS_PER_ZONE).await;
        Self {
            namespace,
            simulator,
            names,
        }
    }

    fn name(&self) -> &str {
        self.namespace.name()
    }

    async fn roll_out(&self, version: &str) {
        roll_out(&self.namespace.client(), self.name(), &self.names, version).await;
    }

    async fn wait_complete(&self) {
        wait_rollout_complete(&self.namespace.client(), self.name(), &self.names).await;
    }

    /// Pods of the group running its update revision.
    async fn updated(&self) -> usize {
        let mut updated = 0;
        for name in &self.names {
            updated += rollout_state(&self.namespace.client(), self.name(), name)
                .await
                .updated();
        }
        updated
    }

    /// Sets (or with `None` removes) the namespace's label `key`.
    async fn label(&self, key: &str, value: Option<&str>) {
        let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
        Api::<Namespace>::all(self.namespace.client())
            .patch(self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|error| panic!("labelling namespace {}: {error}", self.name()));
    }

    /// Keeps every pod that replaces one of the group's Pending until released.
    async fn hold_every_replacement(&self) {
        for pod in self.pods() {
            self.simulator.hold_replacement(&pod).await;
        }
    }

    async fn release_every_replacement(&self) {
        for pod in self.pods() {
            self.simulator.release(&pod).await;
        }
    }

    fn pods(&self) -> Vec<String> {
        self.names
            .iter()
            .flat_map(|name| (0..PODS_PER_ZONE).map(move |ordinal| format!("{name}-{ordinal}")))
            .collect()
    }

    fn zones(&self) -> Vec<Zone> {
        self.names
            .iter()
            .map(|name| Zone::new(name, PODS_PER_ZONE as u32, 1))
            .collect()
    }
}

/// The groups the status page lists, as `namespace/group`.
async fn listed(controller: &Controller) -> BTreeSet<String> {
    let Some((200, body)) = controller.ops_get("/api/v1/status").await else {
        return BTreeSet::new();
    };
    let document: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    document["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|group| {
            format!(
                "{}/{}",
                group["namespace"].as_str().unwrap_or("?"),
                group["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

async fn wait_listed(controller: &Controller, expected: &[&Tenant]) {
    let expected: BTreeSet<String> = expected
        .iter()
        .map(|tenant| format!("{}/ingester", tenant.name()))
        .collect();
    wait_until(
        TIMEOUT,
        &format!("the status page lists exactly {expected:?}"),
        || async { listed(controller).await == expected },
    )
    .await;
}

/// A config file serving every namespace labelled `key=true`, in `folder`; its path.
fn config_serving_labelled(folder: &tempfile::TempDir, key: &str) -> String {
    let config = folder.path().join("baton.yaml");
    std::fs::write(
        &config,
        format!("namespaces: ['*']\nnamespace_selector:\n  match_labels:\n    {key}: 'true'\n"),
    )
    .expect("writing the config");
    config.to_string_lossy().into_owned()
}

#[tokio::test]
async fn a_selector_over_namespaces_serves_those_labelled_taken_up_and_let_go_while_running() {
    // Given three namespaces, each with a ready group `ingester` of the same name, two of them
    // labelled served, and one controller for every namespace the label selects
    let control_plane = ControlPlane::shared().await;
    let key = format!("e2e.baton.dev/served-{}", random_suffix());
    let system = TestNamespace::create(control_plane, "namespaces-system").await;
    let (a, b, c) = tokio::join!(
        Tenant::create(control_plane, "tenant-a"),
        Tenant::create(control_plane, "tenant-b"),
        Tenant::create(control_plane, "tenant-c"),
    );
    a.label(&key, Some("true")).await;
    b.label(&key, Some("true")).await;
    let folder = tempfile::tempdir().expect("a folder for the config");
    let config = config_serving_labelled(&folder, &key);
    let controller =
        Controller::start(control_plane, system.name(), &[("BATON_CONFIG", &config)]).await;

    // Then the status page lists the groups of the two labelled namespaces, each named with its
    // namespace, and not the third's
    wait_listed(&controller, &[&a, &b]).await;
    // And the document names no namespace of its own: each group names its own
    let (_, body) = controller
        .ops_get("/api/v1/status")
        .await
        .expect("the status page answers");
    let document: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(document["namespace"], "", "{document}");
    // And each group's series carry its namespace, the third namespace having none
    let metrics = controller.metrics().await;
    for tenant in [&a, &b] {
        let series = format!(
            "baton_rollout_group_waiting{{namespace=\"{}\",rollout_group=\"ingester\"}}",
            tenant.name()
        );
        assert!(metrics.contains(&series), "{series} in:\n{metrics}");
    }
    assert!(
        !metrics.contains(c.name()),
        "no series of an unlabelled namespace"
    );
    // And `kubectl baton status -A` names each group with its namespace, the third's too (it
    // reads the cluster, not the controller)
    let run = baton_e2e::plugin_support::kubectl_baton(
        control_plane.kubeconfig_path(),
        &["status", "-A"],
    )
    .await;
    run.exited(0);
    for tenant in [&a, &b, &c] {
        let line = format!("{}/ingester: complete", tenant.name());
        assert!(run.stdout.contains(&line), "{line} in:\n{}", run.stdout);
    }

    // When every group's template changes
    let from = Instant::now();
    tokio::join!(a.roll_out("v2"), b.roll_out("v2"), c.roll_out("v2"));

    // Then the two served groups complete zone by zone
    tokio::join!(a.wait_complete(), b.wait_complete());
    for tenant in [&a, &b] {
        check_rollout_guarantees(&tenant.simulator.timeline(), &tenant.zones(), from)
            .unwrap_or_else(|why| panic!("{}: {why}", tenant.name()));
    }
    // And the third namespace's group was never acted on
    assert_eq!(
        c.updated().await,
        0,
        "no pod of an unlabelled namespace is replaced"
    );
    assert!(
        !c.simulator
            .timeline()
            .iter()
            .any(|transition| matches!(transition.event, PodEvent::Terminating)),
        "no pod of an unlabelled namespace is deleted"
    );

    // When the third namespace is labelled while the controller runs
    c.label(&key, Some("true")).await;
    // Then it is taken up and its group completes
    wait_listed(&controller, &[&a, &b, &c]).await;
    c.wait_complete().await;
    // And the pods and StatefulSets of all three came from one cluster-wide watch of each kind:
    // never a list or watch of one namespace's
    let metrics = controller.metrics().await;
    for (cluster_wide, namespaced) in [
        ("/api/v1/pods", "/api/v1/namespaces/{namespace}/pods"),
        (
            "/apis/apps/v1/statefulsets",
            "/apis/apps/v1/namespaces/{namespace}/statefulsets",
        ),
    ] {
        assert!(
            reads_of(&metrics, cluster_wide) > 0,
            "{cluster_wide} read in:\n{metrics}"
        );
        assert_eq!(
            reads_of(&metrics, namespaced),
            0,
            "{namespaced} never read in:\n{metrics}"
        );
    }

    // When the first namespace's label goes while its group rolls (a replacement held Pending)
    a.hold_every_replacement().await;
    tokio::join!(a.roll_out("v3"), b.roll_out("v3"));
    wait_until(
        TIMEOUT,
        "baton deletes a pod of the first namespace",
        || async {
            a.simulator.timeline().iter().any(|transition| {
                matches!(transition.event, PodEvent::Terminating) && transition.at > from
            })
        },
    )
    .await;
    let deleted_before = deletions(&a.simulator);
    a.label(&key, None).await;
    wait_listed(&controller, &[&b, &c]).await;
    a.release_every_replacement().await;
    // Then it is let go: while the group still served completes its rollout, the first
    // namespace's group, whose replacement is Ready again, is not acted on any more
    b.wait_complete().await;
    wait_group_pods_ready(&a).await;
    assert_eq!(
        deletions(&a.simulator),
        deleted_before,
        "no pod of a namespace let go is deleted"
    );
    assert!(
        a.updated().await < a.names.len() * PODS_PER_ZONE as usize,
        "the first namespace's rollout stopped where it was"
    );

    // When its label comes back: it is taken up again and its rollout completes
    a.label(&key, Some("true")).await;
    a.wait_complete().await;
    wait_listed(&controller, &[&a, &b, &c]).await;

    // When the third namespace is deleted while its group rolls
    c.hold_every_replacement().await;
    let deleting = Instant::now();
    c.roll_out("v4").await;
    wait_until(
        TIMEOUT,
        "baton deletes a pod of the third namespace",
        || async {
            c.simulator.timeline().iter().any(|transition| {
                matches!(transition.event, PodEvent::Terminating) && transition.at > deleting
            })
        },
    )
    .await;
    Api::<Namespace>::all(c.namespace.client())
        .delete(c.name(), &kube::api::DeleteParams::background())
        .await
        .expect("deleting the third namespace");
    // Then it is let go, and the controller keeps serving the others: a rollout still completes
    wait_listed(&controller, &[&a, &b]).await;
    b.roll_out("v4").await;
    b.wait_complete().await;
}

/// Labelled namespaces, each with a ready group `ingester`, and how to start replicas serving
/// them by [`SHARDS`] shard Leases (in their own system namespace).
struct Sharing {
    control_plane: &'static ControlPlane,
    system: TestNamespace,
    config: String,
    _folder: tempfile::TempDir,
    tenants: Vec<Tenant>,
}

impl Sharing {
    /// `tenants` labelled namespaces, the i-th in shard i (no two in one shard), and `replicas`
    /// replicas serving them, once they share the shards evenly.
    async fn start(prefix: &str, tenants: u32, replicas: usize) -> (Self, Vec<Replica>) {
        let control_plane = ControlPlane::shared().await;
        let key = format!("e2e.baton.dev/served-{}", random_suffix());
        let system = TestNamespace::create(control_plane, &format!("{prefix}-system")).await;
        let tenants = futures::future::join_all((0..tenants).map(|index| async move {
            let prefix = format!("{prefix}-{index}");
            Tenant::create_in_shard(control_plane, &prefix, index % SHARDS).await
        }))
        .await;
        for tenant in &tenants {
            tenant.label(&key, Some("true")).await;
        }
        let folder = tempfile::tempdir().expect("a folder for the config");
        let config = config_serving_labelled(&folder, &key);
        let sharing = Self {
            control_plane,
            system,
            config,
            _folder: folder,
            tenants,
        };
        let mut started = Vec::new();
        for index in 0..replicas {
            started.push(sharing.start_replica(index).await);
        }
        sharing
            .wait_shared_evenly(&started.iter().collect::<Vec<_>>())
            .await;
        (sharing, started)
    }

    /// Starts replica `index` (HOSTNAME `<system namespace>-replica-<index>`), ready.
    async fn start_replica(&self, index: usize) -> Replica {
        let host = format!("{}-replica-{index}", self.system.name());
        let shards = SHARDS.to_string();
        let controller = Controller::start(
            self.control_plane,
            self.system.name(),
            &[
                ("BATON_CONFIG", self.config.as_str()),
                ("BATON_CONTROLLER__SHARDS", shards.as_str()),
                ("HOSTNAME", host.as_str()),
            ],
        )
        .await;
        Replica { controller, host }
    }

    /// Waits until each of `replicas` leads its even share of the shards (by its own count)
    /// and every namespace is served by exactly one of them.
    async fn wait_shared_evenly(&self, replicas: &[&Replica]) {
        let share = SHARDS as usize / replicas.len();
        wait_until(
            TIMEOUT,
            &format!(
                "the {} replicas lead {share} shards each and every namespace is served by exactly one",
                replicas.len()
            ),
            || async {
                for replica in replicas {
                    let held = replica
                        .controller
                        .metric("baton_controller_shards_held")
                        .await;
                    if held != Some(share as f64) {
                        return false;
                    }
                }
                for tenant in &self.tenants {
                    if serving(replicas.iter().copied(), tenant).await.len() != 1 {
                        return false;
                    }
                }
                true
            },
        )
        .await;
    }

    /// The namespaces whose group `replica`'s status page lists.
    async fn served_by(&self, replica: &Replica) -> Vec<&Tenant> {
        let listed = listed(&replica.controller).await;
        self.tenants
            .iter()
            .filter(|tenant| listed.contains(&format!("{}/ingester", tenant.name())))
            .collect()
    }
}

/// The replicas (positions in `replicas`) whose status page lists `tenant`'s group.
async fn serving<'a>(
    replicas: impl IntoIterator<Item = &'a Replica>,
    tenant: &Tenant,
) -> Vec<usize> {
    let key = format!("{}/ingester", tenant.name());
    let mut serving = Vec::new();
    for (index, replica) in replicas.into_iter().enumerate() {
        if listed(&replica.controller).await.contains(&key) {
            serving.push(index);
        }
    }
    serving
}

#[tokio::test]
async fn three_replicas_share_the_namespaces_by_shard_and_a_dead_ones_namespace_completes_under_another()
 {
    // Given three labelled namespaces, each with a ready group `ingester`, and three replicas
    // serving them with six shard Leases, once the shards are shared: each namespace's group
    // served by exactly one replica
    let (sharing, mut replicas) = Sharing::start("shared", 3, 3).await;
    let [a, b, c] = &sharing.tenants[..] else {
        unreachable!("three namespaces")
    };
    let tenants = [a, b, c];

    // When every group's template changes, and the replica serving the first namespace is
    // killed once its rollout started (a replacement held Pending, so it cannot finish first)
    a.hold_every_replacement().await;
    let from = Instant::now();
    tokio::join!(a.roll_out("v2"), b.roll_out("v2"), c.roll_out("v2"));
    wait_until(
        TIMEOUT,
        "a pod of the first namespace is deleted",
        || async {
            a.simulator.timeline().iter().any(|transition| {
                matches!(transition.event, PodEvent::Terminating) && transition.at > from
            })
        },
    )
    .await;
    let serving_a = serving(&replicas, a).await;
    assert_eq!(serving_a.len(), 1, "one replica serves the first namespace");
    let mut killed = replicas.remove(serving_a[0]);
    killed
        .controller
        .process
        .signal("KILL")
        .expect("killing the replica");
    let _ = killed.controller.process.wait().await;
    let died = Instant::now();
    a.release_every_replacement().await;

    // Then every group completes, zone by zone with at most one pod of a zone down at any
    // moment: never two replicas acting on one group, across the death and the takeover
    tokio::join!(a.wait_complete(), b.wait_complete(), c.wait_complete());
    for tenant in tenants {
        check_rollout_guarantees(&tenant.simulator.timeline(), &tenant.zones(), from)
            .unwrap_or_else(|why| panic!("{}: {why}", tenant.name()));
    }
    // And its rollout was carried on by another replica after the death: pods were deleted
    // since (a lower bound: the one deletion before it was not all the rollout)
    assert!(
        a.simulator.timeline().iter().any(|transition| {
            matches!(transition.event, PodEvent::Terminating) && transition.at > died
        }),
        "another replica deleted pods of the first namespace after the death"
    );
    // And the first namespace is served by one of the two left
    wait_until(
        TIMEOUT,
        "exactly one surviving replica serves the first namespace",
        || async { serving(&replicas, a).await.len() == 1 },
    )
    .await;
    // And each surviving replica's status page tells the last actions of the groups it serves
    // (whether or not it holds the leader's Lease: the history is the shard holder's)
    for tenant in [b, c] {
        let Some(&index) = serving(&replicas, tenant).await.first() else {
            continue;
        };
        let actions = last_actions(&replicas[index].controller, tenant).await;
        assert!(
            actions > 0,
            "the replica serving {} tells its group's last actions",
            tenant.name()
        );
    }
}

#[tokio::test]
async fn a_replica_paused_past_its_lease_and_one_added_mid_rollout_never_make_two_actors_on_a_group()
 {
    // Given six labelled namespaces, one in each of the six shards, each with a ready group
    // `ingester`, and two replicas sharing the shards, three each
    let (sharing, mut replicas) = Sharing::start("paused", SHARDS, 2).await;
    let tenants = &sharing.tenants;
    // Then each replica serves the three namespaces of its three shards
    for replica in &replicas {
        let served = sharing.served_by(replica).await.len();
        assert_eq!(served, 3, "{} serves three namespaces", replica.host);
    }
    let holdings = ShardLeaseHistory::watch(&sharing.system);

    // When every group's template changes, every replacement held Pending (so no group can
    // complete before the third replica comes)
    for tenant in tenants {
        tenant.hold_every_replacement().await;
    }
    let from = Instant::now();
    futures::future::join_all(tenants.iter().map(|tenant| tenant.roll_out("v2"))).await;
    // and the replica serving the first namespace, once it has deleted a pod of each namespace
    // it serves and told it (an Event of its own: what it tells after its pause is what it did
    // after it), is paused (SIGSTOP)
    let first = &tenants[0];
    let serving_first = serving(&replicas, first).await;
    assert_eq!(
        serving_first.len(),
        1,
        "one replica serves the first namespace"
    );
    let paused = replicas.remove(serving_first[0]);
    let survivor = &replicas[0];
    let lost = sharing.served_by(&paused).await;
    wait_until(
        TIMEOUT,
        "the replica to pause deleted a pod of each namespace it serves and told it",
        || async {
            for tenant in &lost {
                let deleted = deletions(&tenant.simulator) > 0;
                let told = told_deletions(tenant)
                    .await
                    .iter()
                    .any(|told| paused.is(&told.by));
                if !(deleted && told) {
                    return false;
                }
            }
            true
        },
    )
    .await;
    paused
        .controller
        .process
        .signal("STOP")
        .expect("pausing the replica");
    let deleted_before = deletions(&first.simulator);

    // Then the survivor serves every namespace: it took the paused replica's shard Leases over,
    // which it does only once they went a lease duration unrenewed (past the paused one's lease)
    wait_until(TIMEOUT, "the survivor serves every namespace", || async {
        sharing.served_by(survivor).await.len() == tenants.len()
    })
    .await;

    // When the first namespace's replacements are released, and the survivor carries its
    // rollout on (a pod deleted since: what the paused replica saw of it is stale now)
    first.release_every_replacement().await;
    wait_until(
        TIMEOUT,
        "the survivor deletes a pod of the first namespace",
        || async { deletions(&first.simulator) > deleted_before },
    )
    .await;
    // and the paused replica resumes (SIGCONT)
    let resumed = jiff::Timestamp::now();
    paused
        .controller
        .process
        .signal("CONT")
        .expect("resuming the replica");
    // and a third replica starts, every other group still mid-rollout (held)
    let third = sharing.start_replica(2).await;
    let all = [&paused, survivor, &third];
    for tenant in &tenants[1..] {
        assert!(
            tenant.updated().await < tenant.pods().len(),
            "{} is mid-rollout as the third replica starts",
            tenant.name()
        );
    }

    // Then the three share the shards evenly: each serves two namespaces, the third its share
    sharing.wait_shared_evenly(&all).await;
    let served = sharing.served_by(&third).await.len();
    assert_eq!(served, 2, "the third replica serves two namespaces");

    // When the other replacements are released
    for tenant in &tenants[1..] {
        tenant.release_every_replacement().await;
    }

    // Then every group completes, zone by zone with at most one pod of a zone down at any
    // moment: never two replicas acting on one group, across the pause, the takeover, the
    // resume and the third replica's arrival
    futures::future::join_all(tenants.iter().map(Tenant::wait_complete)).await;
    for tenant in tenants {
        check_rollout_guarantees(&tenant.simulator.timeline(), &tenant.zones(), from)
            .unwrap_or_else(|why| panic!("{}: {why}", tenant.name()));
    }
    // And every namespace ends served by exactly one replica, each serving two
    sharing.wait_shared_evenly(&all).await;
    // And the resumed and the third replicas both rolled groups after the resume (lower bounds:
    // each took a share of the work, so the check below is not of nothing)
    for (replica, what) in [
        (&paused, "the resumed replica"),
        (&third, "the third replica"),
    ] {
        wait_until(
            TIMEOUT,
            &format!("{what} told a deletion after the resume"),
            || async {
                for tenant in tenants {
                    if told_deletions(tenant)
                        .await
                        .iter()
                        .any(|told| replica.is(&told.by) && told.at.iter().any(|at| *at >= resumed))
                    {
                        return true;
                    }
                }
                false
            },
        )
        .await;
    }
    // And the resumed replica acted only on namespaces whose shard Lease it took anew after
    // its resume. A replica writes a Lease's acquireTime when it takes the Lease, before its
    // term there starts (a renewal keeps it); the survivor held every shard while it was
    // paused. So by design each deletion it told since was told after such an acquisition of
    // that namespace's shard. A stale replica acting on its pre-pause view (unfenced, or
    // under a renewal written over the survivor's holding, which keeps its old acquireTime)
    // tells a deletion with no such acquisition before it.
    let shard_leases: Vec<String> = tenants.iter().map(shard_lease).collect();
    holdings
        .wait_caught_up(&sharing.system, &shard_leases)
        .await;
    for tenant in tenants {
        let acquired: Vec<jiff::Timestamp> = holdings
            .of(&shard_lease(tenant))
            .into_iter()
            .flatten()
            .filter(|holding| paused.is(&holding.holder))
            .filter_map(|holding| holding.acquired)
            .filter(|acquired| *acquired >= resumed)
            .collect();
        for told in told_deletions(tenant).await {
            if !paused.is(&told.by) {
                continue;
            }
            for at in told.at.iter().filter(|at| **at >= resumed) {
                assert!(
                    acquired.iter().any(|acquired| acquired <= at),
                    "{}: the resumed replica told {:?} at {at} with no shard Lease taken since its resume before it (its acquisitions since: {acquired:?})",
                    tenant.name(),
                    told.note
                );
            }
        }
    }
    // And every namespace it serves now, it serves under a shard Lease taken after its resume
    for tenant in sharing.served_by(&paused).await {
        let holding = holdings.of(&shard_lease(tenant)).last().cloned().flatten();
        assert!(
            holding
                .as_ref()
                .is_some_and(|holding| paused.is(&holding.holder)
                    && holding.acquired.is_some_and(|acquired| acquired >= resumed)),
            "{} is served by the resumed replica under {holding:?}, not a Lease taken after {resumed}",
            tenant.name()
        );
    }
}

/// The name of `tenant`'s shard Lease.
fn shard_lease(tenant: &Tenant) -> String {
    ShardId::of(tenant.name(), SHARDS).lease_name()
}

/// A deletion baton told in a namespace: an Event `RolloutPodDeleted` or
/// `UnavailablePodReplaced`.
struct Told {
    /// The replica's identity (the Event's reporting instance).
    by: String,
    /// When it was told: the Event's time, and its series' last one if it repeated.
    at: Vec<jiff::Timestamp>,
    note: String,
}

/// The deletions told in `tenant`'s namespace so far (Events land a moment after the deletion
/// they tell: wait for one rather than read once); none when the Events cannot be listed.
async fn told_deletions(tenant: &Tenant) -> Vec<Told> {
    let events = tenant
        .namespace
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    events
        .into_iter()
        .filter(|event| {
            matches!(
                event.reason.as_deref(),
                Some("RolloutPodDeleted" | "UnavailablePodReplaced")
            )
        })
        .map(|event| Told {
            by: event.reporting_instance.unwrap_or_default(),
            at: [
                event.event_time.map(|time| time.0),
                event.series.map(|series| series.last_observed_time.0),
            ]
            .into_iter()
            .flatten()
            .collect(),
            note: event.note.unwrap_or_default(),
        })
        .collect()
}

/// How many last actions `replica`'s status page tells of `tenant`'s group.
async fn last_actions(replica: &Controller, tenant: &Tenant) -> usize {
    let path = format!("/api/v1/status?group={}/ingester", tenant.name());
    let Some((200, body)) = replica.ops_get(&path).await else {
        return 0;
    };
    let document: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    document["groups"][0]["lastActions"]
        .as_array()
        .map_or(0, Vec::len)
}

/// How many GET requests (lists and watches, for a collection) the controller made of `path`,
/// from its API client's request histogram.
fn reads_of(metrics: &str, path: &str) -> u64 {
    let path = format!("path=\"{path}\"");
    metrics
        .lines()
        .filter(|line| {
            line.starts_with(
                "rollout_operator_kubernetes_api_client_request_duration_seconds_count",
            ) && line.contains(&path)
                && line.contains("method=\"GET\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Deletions the simulator has seen.
fn deletions(simulator: &PodSimulator) -> usize {
    simulator
        .timeline()
        .iter()
        .filter(|transition| matches!(transition.event, PodEvent::Terminating))
        .count()
}

/// Waits until every pod of the tenant's group is Ready, whichever revision it runs.
async fn wait_group_pods_ready(tenant: &Tenant) {
    for name in &tenant.names {
        wait_until(
            TIMEOUT,
            &format!("every pod of {name} is Ready"),
            || async {
                let state = rollout_state(&tenant.namespace.client(), tenant.name(), name).await;
                state.ready_replicas == state.replicas
            },
        )
        .await;
    }
}
