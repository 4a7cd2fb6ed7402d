//! Cross-cluster rollout groups on three real control planes: `cluster-a` (the hub, where
//! baton's controller runs), `cluster-b` and `cluster-c`, each a [`ControlPlane::dedicated`]
//! of its own (own etcd, API server and controller-manager, so one can be stopped) with the
//! same namespace and a [`PodSimulator`] in it. cluster-b and cluster-c are set up as
//! docs/multi-cluster.md sets up a member ([`crate::cluster_setup`]): its member overlay
//! applied there, and `kubectl baton cluster add` writing their kubeconfig Secrets in the hub's
//! namespace. The controller is told its members in a YAML file (`BATON_CONFIG`,
//! `controller.clusters`), the same list as the page's.
//!
//! A group is one StatefulSet of the same name in every cluster ([`ClusterTrio::create_group`]);
//! its members are named `cluster/statefulset` ([`baton_core::clusters::qualified`]), and so are
//! the pods and StatefulSets of the [merged timeline](ClusterTrio::merged_timeline), so the
//! timeline checks of [`crate::timeline`] judge the zone rule across clusters at every step.
//!
//! One trio serves a whole test binary ([`ClusterTrio::scenario`]): starting three control
//! planes costs more than most scenarios. It lives on a runtime of its own kept in a static,
//! and so do the scenarios (plain `#[test]`s running on it): a `#[tokio::test]`'s runtime ends
//! with its test, and with it the connections its calls opened in the trio's clients. A
//! scenario that stops an API server takes the trio alone
//! ([`ClusterTrio::scenario_alone`]): every group in that cluster would feel it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use baton_core::clusters::qualified;
use baton_core::status::{GroupStatus, RolloutStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use crate::controller_support::{
    Controller, GROUP_TIMEOUT, free_address, roll_out, rollout_state, wait_group_ready,
    wait_rollout_complete,
};
use crate::fixtures::{IMAGE, StatefulSetFixture};
use crate::namespace::random_suffix;
use crate::timeline::Zone;
use crate::{ControlPlane, PodEvent, PodSimulator, PodTransition, SimulatorOptions, TestNamespace};

/// The member clusters, in the order baton rolls them (zone order sorts by the qualified name).
pub const CLUSTERS: [&str; 3] = ["cluster-a", "cluster-b", "cluster-c"];

/// The cluster the controller runs against: it lists itself, with no Secret.
pub const HUB: &str = CLUSTERS[0];

/// The key of the kubeconfig Secrets (the configuration's default, written out anyway).
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// The file of the trio's kubeconfig with a context per member ([`ClusterTrio::clusters_kubeconfig`]).
const CLUSTERS_KUBECONFIG: &str = "clusters.kubeconfig";

/// The Secret holding `cluster`'s kubeconfig, in the hub's namespace.
pub fn kubeconfig_secret(cluster: &str) -> String {
    format!("member-{cluster}")
}

/// One member cluster: its control plane, the namespace, and the simulator playing its
/// kubelets.
pub struct TestCluster {
    pub name: &'static str,
    pub simulator: PodSimulator,
    /// Dropped before the control plane (fields drop in order): its deletion needs it.
    pub namespace: TestNamespace,
    pub control_plane: ControlPlane,
}

impl TestCluster {
    /// An admin client of this cluster, made with the trio: use it on the trio's runtime (a
    /// scenario runs there).
    pub fn client(&self) -> kube::Client {
        self.namespace.client()
    }

    /// The admin kubeconfig of this cluster (a file; its CA and token inline).
    pub fn kubeconfig_path(&self) -> &Path {
        self.control_plane.kubeconfig_path()
    }
}

/// The three clusters, the namespace they share, and the controller running against the hub.
pub struct ClusterTrio {
    /// In [`CLUSTERS`] order.
    pub clusters: Vec<TestCluster>,
    /// The controller; its output (`controller.process.output()`) is shown when a scenario
    /// fails ([`ClusterTrio::witness`]).
    pub controller: Controller,
    namespace: String,
    /// Where a scenario's Prometheus listens: the controller allows health checks to query it
    /// (loopback is refused unless allowed), and it is chosen before the controller starts.
    prometheus_address: String,
    /// Holds the configuration file given as `BATON_CONFIG`.
    files: tempfile::TempDir,
}

/// The runtime the shared trio lives on (see the module's documentation).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("member-clusters")
            .enable_all()
            .build()
            .expect("the member clusters' runtime")
    })
}

/// Scenarios that stop an API server take the trio alone; the others share it.
static OUTAGES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A scenario's hold on the trio, for as long as it runs.
enum Access {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'static, ()>),
}

impl ClusterTrio {
    /// Runs `scenario` on the trio of this test binary (started by the first scenario), with
    /// the binary's other scenarios that share it; if it fails, the controller's output
    /// meanwhile is shown. Called from a plain `#[test]`: the scenario runs on the trio's
    /// runtime, which outlives every test (a connection a client opens is a task of the
    /// runtime it was opened on, and the trio's clients are used by every scenario).
    pub fn scenario<F>(scenario: impl FnOnce(&'static ClusterTrio) -> F)
    where
        F: Future<Output = ()>,
    {
        Self::run(false, scenario);
    }

    /// As [`ClusterTrio::scenario`], with the trio alone: for a scenario that stops an API
    /// server, which every group in that cluster would feel.
    pub fn scenario_alone<F>(scenario: impl FnOnce(&'static ClusterTrio) -> F)
    where
        F: Future<Output = ()>,
    {
        Self::run(true, scenario);
    }

    /// Runs `scenario` on a trio of its own, made by `setup` (such as
    /// [`ClusterTrio::start_without_secret`]) and stopped when the scenario ends, while the
    /// binary's shared trio waits: six control planes at once would load a small machine.
    pub fn scenario_apart<S, F>(setup: impl FnOnce() -> S, scenario: impl FnOnce(ClusterTrio) -> F)
    where
        S: Future<Output = ClusterTrio>,
        F: Future<Output = ()>,
    {
        runtime().block_on(async {
            let _alone = OUTAGES.write().await;
            // Its controller dies with this thread at the latest (pdeathsig), and with the
            // trio when the scenario drops it.
            let clusters = setup().await;
            scenario(clusters).await;
        });
    }

    fn run<F>(alone: bool, scenario: impl FnOnce(&'static ClusterTrio) -> F)
    where
        F: Future<Output = ()>,
    {
        runtime().block_on(async {
            let clusters = Self::shared().await;
            let _access = if alone {
                Access::Alone(OUTAGES.write().await)
            } else {
                Access::Shared(OUTAGES.read().await)
            };
            let _witness = clusters.witness();
            scenario(clusters).await;
        });
    }

    /// The trio of this test binary, started on first use; a start that failed fails every
    /// later caller with the same message rather than starting three more control planes.
    async fn shared() -> &'static ClusterTrio {
        static SHARED: tokio::sync::OnceCell<Result<ClusterTrio, String>> =
            tokio::sync::OnceCell::const_new();
        let started = SHARED
            .get_or_init(|| async {
                // On a worker of the trio's runtime, which lives as long as the process: the
                // controller is started from it and dies with it (pdeathsig).
                // Pods are called by IP, as docs/multi-cluster.md asks of scaling across
                // clusters (a member's pod's DNS name resolves in its own cluster only), and
                // mirrored references are polled often.
                runtime()
                    .spawn(Self::start(
                        "clusters",
                        &[
                            ("BATON_PODS__ADDRESS_BY", "ip"),
                            ("BATON_CONTROLLER__SCALING_POLL_INTERVAL", "300ms"),
                        ],
                    ))
                    .await
                    .map_err(|panic| format!("starting the member clusters panicked: {panic}"))
            })
            .await;
        match started {
            Ok(clusters) => clusters,
            Err(error) => panic!("{error}"),
        }
    }

    /// A trio of its own (for a scenario that needs the controller configured with `extra`
    /// too): three control planes started at once, the namespace `<prefix>-<random>` in each,
    /// a simulator per cluster, the kubeconfig Secrets of cluster-b and cluster-c in the hub's
    /// namespace, and the controller against the hub with `BATON_CONFIG` naming the members.
    /// Call it on a runtime that outlives its use (the shared trio's, or the test's own).
    pub async fn start(prefix: &str, extra: &[(&str, &str)]) -> Self {
        Self::start_with(prefix, extra, None).await
    }

    /// As [`ClusterTrio::start`], the Secret of `cluster` left out: the controller starts
    /// unable to reach that member ([`ClusterTrio::write_secret`] writes it).
    pub async fn start_without_secret(prefix: &str, cluster: &str) -> Self {
        Self::start_with(prefix, &[], Some(cluster)).await
    }

    async fn start_with(
        prefix: &str,
        extra: &[(&str, &str)],
        without_secret: Option<&str>,
    ) -> Self {
        let started = Instant::now();
        let (a, b, c) = tokio::join!(
            ControlPlane::dedicated(),
            ControlPlane::dedicated(),
            ControlPlane::dedicated()
        );
        let namespace = format!("{prefix}-{}", random_suffix());
        let files = tempfile::Builder::new()
            .prefix("baton-member-clusters-")
            .tempdir()
            .expect("a folder for the controller's configuration");
        let mut clusters = Vec::new();
        for (name, control_plane) in CLUSTERS.into_iter().zip([a, b, c]) {
            let namespace = TestNamespace::create_named(&control_plane, &namespace).await;
            // The other members installed as docs/multi-cluster.md installs a member
            if name != HUB {
                install_member(&control_plane, namespace.name()).await;
            }
            let simulator = PodSimulator::start(
                namespace.client(),
                namespace.name(),
                SimulatorOptions::default(),
            )
            .await;
            clusters.push(TestCluster {
                name,
                simulator,
                namespace,
                control_plane,
            });
        }
        let kubeconfig = files.path().join(CLUSTERS_KUBECONFIG);
        crate::plugin_support::write_clusters_kubeconfig(
            &clusters
                .iter()
                .map(|cluster| (cluster.name, cluster.kubeconfig_path()))
                .collect::<Vec<_>>(),
            &kubeconfig,
        )
        .expect("a kubeconfig with a context per member");
        // and handed to the hub with the page's `kubectl baton cluster add`
        for member in &clusters[1..] {
            if without_secret != Some(member.name) {
                add_cluster(&kubeconfig, &namespace, member.name).await;
            }
        }

        let config = files.path().join("baton.yaml");
        let prometheus_address = free_address();
        std::fs::write(
            &config,
            controller_config(&namespace, &format!("http://{prometheus_address}")),
        )
        .expect("writing the controller's configuration");

        let config = config.to_string_lossy().into_owned();
        let mut env = vec![("BATON_CONFIG", config.as_str())];
        env.extend_from_slice(extra);
        let planes_ready = started.elapsed();
        let controller =
            Controller::start_dying_with_parent(&clusters[0].control_plane, &namespace, &env).await;
        eprintln!(
            "member clusters: {} ready in {planes_ready:?}, the controller {:?} later ({}), namespace {namespace}",
            CLUSTERS.join(", "),
            started.elapsed() - planes_ready,
            clusters
                .iter()
                .map(|cluster| format!(
                    "{} at {}",
                    cluster.name,
                    cluster.control_plane.handshake().server
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Self {
            clusters,
            controller,
            namespace,
            prometheus_address,
            files,
        }
    }

    /// Stops `cluster`'s API server until the outage [ends](Outage::end), or is dropped: a
    /// scenario that fails midway gives the trio back whole to the binary's other scenarios.
    pub async fn stop_apiserver(&self, cluster: &str) -> Outage<'_> {
        let cluster = self.cluster(cluster);
        cluster
            .control_plane
            .stop_apiserver()
            .await
            .unwrap_or_else(|error| {
                panic!("stopping the API server of {}: {error:#}", cluster.name)
            });
        Outage {
            cluster,
            stopped: Instant::now(),
            ended: false,
        }
    }

    /// Writes `cluster`'s kubeconfig Secret in the hub, as the trio does at its start: the
    /// page's `kubectl baton cluster add` run again (replacing the Secret if there is one, with
    /// a new token).
    pub async fn write_secret(&self, cluster: &str) {
        add_cluster(&self.clusters_kubeconfig(), &self.namespace, cluster).await;
    }

    /// The kubeconfig with a context per member cluster, named after it (the hub's current),
    /// as the page's commands take it.
    pub fn clusters_kubeconfig(&self) -> PathBuf {
        self.files.path().join(CLUSTERS_KUBECONFIG)
    }

    /// Returns once `cluster`'s simulator watches its pods again (after an outage its watch
    /// comes back in its own time, and what it misses meanwhile is missing from the timeline):
    /// a bare pod created there now shows in its timeline.
    pub async fn wait_watching(&self, cluster: &str) {
        let member = self.cluster(cluster);
        let name = format!("watch-probe-{}", random_suffix());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": format!("{IMAGE}:probe")}],
                     "terminationGracePeriodSeconds": 0},
        }))
        .expect("a valid pod");
        let pods = Api::<Pod>::namespaced(member.client(), &self.namespace);
        crate::wait_until(
            GROUP_TIMEOUT,
            &format!("{cluster} takes the probe pod {name}"),
            || async { pods.create(&PostParams::default(), &pod).await.is_ok() },
        )
        .await;
        crate::wait_until(
            GROUP_TIMEOUT,
            &format!("{cluster}'s simulator sees the probe pod {name}"),
            || async {
                member
                    .simulator
                    .timeline()
                    .iter()
                    .any(|transition| transition.pod == name)
            },
        )
        .await;
        let _ = pods.delete(&name, &Default::default()).await;
    }

    /// The namespace of the groups, the same in every cluster (the controller's `namespace`
    /// and system namespace).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The member cluster called `name`.
    pub fn cluster(&self, name: &str) -> &TestCluster {
        self.clusters
            .iter()
            .find(|cluster| cluster.name == name)
            .unwrap_or_else(|| panic!("no member cluster {name}"))
    }

    /// The address (`127.0.0.1:port`) the controller lets health checks query, for a
    /// scenario's [`crate::prometheus_support::Prometheus::start_at`]: one scenario at a time
    /// may listen there.
    pub fn prometheus_address(&self) -> String {
        self.prometheus_address.clone()
    }

    /// The file given to the controller as `BATON_CONFIG`.
    pub fn config_path(&self) -> PathBuf {
        self.files.path().join("baton.yaml")
    }

    /// Each cluster's name and admin kubeconfig, in [`CLUSTERS`] order: what
    /// `kubectl baton --cluster NAME` is run with across the trio (one kubeconfig with a
    /// context per member, named after it).
    pub fn kubeconfigs(&self) -> Vec<(&'static str, &Path)> {
        self.clusters
            .iter()
            .map(|cluster| (cluster.name, cluster.kubeconfig_path()))
            .collect()
    }

    /// Shows, if the calling scenario panics, what the controller wrote while it ran: the
    /// controller outlives the scenario, so nothing else shows it.
    pub fn witness(&self) -> Witness<'_> {
        Witness {
            controller: &self.controller,
            from: self.controller.process.output().len(),
        }
    }

    /// Creates `group` in every cluster: the StatefulSet `group.statefulset` of
    /// `group.replicas` pods, `OnDelete`, labelled with the group and annotated with its
    /// `rollout-max-unavailable`, `customize` deciding the rest per cluster; returns once every
    /// pod of every cluster is Ready.
    pub async fn create_group(
        &self,
        group: &Group,
        customize: impl Fn(&str, StatefulSetFixture) -> StatefulSetFixture,
    ) {
        for cluster in &self.clusters {
            let fixture = StatefulSetFixture::new(&group.statefulset)
                .group(&group.name)
                .replicas(group.replicas as i32)
                .annotation(
                    "rollout-max-unavailable",
                    &group.max_unavailable.to_string(),
                );
            customize(cluster.name, fixture)
                .create(&cluster.client(), &self.namespace)
                .await;
        }
        for cluster in &self.clusters {
            wait_group_ready(
                &cluster.client(),
                &self.namespace,
                std::slice::from_ref(&group.statefulset),
            )
            .await;
        }
    }

    /// Deploys `version` (the image tag) to the group's StatefulSet in every cluster, the
    /// hub's first; returns when each cluster's StatefulSet controller computed the new update
    /// revision, and when the first write was made.
    pub async fn roll_out(&self, group: &Group, version: &str) -> Instant {
        let from = Instant::now();
        for cluster in &self.clusters {
            roll_out(
                &cluster.client(),
                &self.namespace,
                std::slice::from_ref(&group.statefulset),
                version,
            )
            .await;
        }
        from
    }

    /// Waits until the group's rollout is complete in every cluster.
    pub async fn wait_complete(&self, group: &Group) {
        for cluster in &self.clusters {
            wait_rollout_complete(
                &cluster.client(),
                &self.namespace,
                std::slice::from_ref(&group.statefulset),
            )
            .await;
        }
    }

    /// How many pods of the group's StatefulSet in `cluster` run its update revision.
    pub async fn updated_pods(&self, group: &Group, cluster: &str) -> usize {
        rollout_state(
            &self.cluster(cluster).client(),
            &self.namespace,
            &group.statefulset,
        )
        .await
        .updated()
    }

    /// Every simulator's timeline, pods and StatefulSets named `cluster/name`, merged by time
    /// (their instants come from this one process). Transitions of one cluster keep their
    /// order; across clusters the order is that of the watches, which may see one change up to
    /// [`crate::timeline::WATCH_SKEW`] apart.
    pub fn merged_timeline(&self) -> Vec<PodTransition> {
        merge_timelines(
            self.clusters
                .iter()
                .map(|cluster| (cluster.name, cluster.simulator.timeline())),
        )
    }

    /// The pods of `member` (`cluster/statefulset`) that started terminating, or were deleted,
    /// at or after `from`, as the merged timeline shows them: one name (`cluster/pod`) per pod
    /// (uid), in the order they left.
    pub fn deleted_pods(&self, member: &str, from: Instant) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.merged_timeline()
            .into_iter()
            .filter(|transition| {
                transition.at >= from
                    && transition.statefulset.as_deref() == Some(member)
                    && matches!(transition.event, PodEvent::Terminating | PodEvent::Deleted)
            })
            .filter(|transition| seen.insert(transition.uid.clone()))
            .map(|transition| transition.pod)
            .collect()
    }

    /// The group's part of the controller's `/api/v1/status?group=`, once it answers 200.
    pub async fn status(&self, group: &Group) -> Option<GroupStatus> {
        let (code, body) = self
            .controller
            .ops_get(&format!("/api/v1/status?group={}", group.name))
            .await?;
        if code != 200 {
            return None;
        }
        let status: RolloutStatus = serde_json::from_str(&body)
            .unwrap_or_else(|error| panic!("a RolloutStatus document ({error}): {body}"));
        status
            .groups
            .into_iter()
            .find(|status| status.name == group.name)
    }

    /// Waits until the group's status satisfies `holds`; returns it. On timeout the panic
    /// shows the last status read.
    pub async fn wait_status(
        &self,
        group: &Group,
        what: &str,
        holds: impl Fn(&GroupStatus) -> bool,
    ) -> GroupStatus {
        let deadline = Instant::now() + GROUP_TIMEOUT;
        let mut last = None;
        loop {
            if let Some(status) = self.status(group).await {
                if holds(&status) {
                    return status;
                }
                last = Some(status);
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {GROUP_TIMEOUT:?} waiting until the status of {} shows {what}; last read: {last:#?}",
                    group.name
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A rollout group with one StatefulSet of the same name in every member cluster.
#[derive(Debug, Clone)]
pub struct Group {
    /// The `rollout-group` label.
    pub name: String,
    /// The StatefulSet's name in each cluster.
    pub statefulset: String,
    pub replicas: u32,
    pub max_unavailable: u32,
}

impl Group {
    /// Group `name` of StatefulSets `name`, `replicas` pods each.
    pub fn new(name: &str, replicas: u32, max_unavailable: u32) -> Self {
        Self {
            name: name.to_owned(),
            statefulset: name.to_owned(),
            replicas,
            max_unavailable,
        }
    }

    /// Its member in `cluster`, as baton names it: `cluster/statefulset`.
    pub fn member(&self, cluster: &str) -> String {
        qualified(cluster, &self.statefulset)
    }

    /// Its members in rollout order.
    pub fn members(&self) -> Vec<String> {
        CLUSTERS
            .iter()
            .map(|cluster| self.member(cluster))
            .collect()
    }

    /// Its members as the timeline checks take them.
    pub fn zones(&self) -> Vec<Zone> {
        self.members()
            .iter()
            .map(|member| Zone::new(member, self.replicas, self.max_unavailable))
            .collect()
    }
}

/// A member cluster whose API server is stopped.
pub struct Outage<'a> {
    cluster: &'a TestCluster,
    /// When the API server was gone.
    pub stopped: Instant,
    ended: bool,
}

impl Outage<'_> {
    /// Starts the API server again (same flags, port, certificates and etcd); returns once it
    /// answers `/readyz`.
    pub async fn end(mut self) -> Instant {
        self.ended = true;
        self.cluster
            .control_plane
            .start_apiserver()
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "starting the API server of {} again: {error:#}",
                    self.cluster.name
                )
            });
        Instant::now()
    }
}

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Drop cannot await: a runtime of its own, on a thread of its own.
        let control_plane = &self.cluster.control_plane;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                if let Err(error) = runtime.block_on(control_plane.start_apiserver()) {
                    eprintln!(
                        "starting the API server of {} again after a failed scenario: {error:#}",
                        self.cluster.name
                    );
                }
            });
        });
    }
}

/// Shows the controller's output written since it was made, if dropped while panicking.
pub struct Witness<'a> {
    controller: &'a Controller,
    from: usize,
}

impl Drop for Witness<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let output = self.controller.process.output();
            eprintln!(
                "----- output of baton-controller during this scenario -----\n{}\n----- end of baton-controller -----",
                output.get(self.from..).unwrap_or(&output)
            );
        }
    }
}

/// `timelines` (cluster, its simulator's timeline) as one: names qualified, merged by time.
pub fn merge_timelines(
    timelines: impl IntoIterator<Item = (&'static str, Vec<PodTransition>)>,
) -> Vec<PodTransition> {
    let mut merged: Vec<PodTransition> = timelines
        .into_iter()
        .flat_map(|(cluster, timeline)| {
            timeline.into_iter().map(move |mut transition| {
                transition.pod = qualified(cluster, &transition.pod);
                transition.statefulset = transition
                    .statefulset
                    .map(|statefulset| qualified(cluster, &statefulset));
                transition
            })
        })
        .collect();
    // Stable: transitions of one cluster at the same instant keep their order.
    merged.sort_by_key(|transition| transition.at);
    merged
}

/// The controller's configuration file: the hub lists itself (no Secret, its own
/// credentials), the others by their kubeconfig Secrets; health checks may query `prometheus`.
pub fn controller_config(namespace: &str, prometheus: &str) -> String {
    let mut yaml = format!(
        "namespace: {namespace}\ngates:\n  prometheus_addresses:\n    - {prometheus}\ncontroller:\n  clusters:\n"
    );
    for cluster in CLUSTERS {
        yaml.push_str(&format!("    - name: {cluster}\n"));
        if cluster != HUB {
            yaml.push_str(&format!(
                "      kubeconfig_secret: {}\n      kubeconfig_key: {KUBECONFIG_KEY}\n",
                kubeconfig_secret(cluster)
            ));
        }
    }
    yaml
}

/// Installs the page's member overlay in `control_plane` for the groups' `namespace`
/// ([`crate::cluster_setup::install_member`]).
async fn install_member(control_plane: &ControlPlane, namespace: &str) {
    let server = control_plane.handshake().server.clone();
    let kubeconfig = control_plane.kubeconfig_path().to_owned();
    let namespace = namespace.to_owned();
    // kubectl runs to its end: off the runtime's workers.
    tokio::task::spawn_blocking(move || {
        crate::cluster_setup::install_member(&kubeconfig, &namespace)
    })
    .await
    .expect("the install task")
    .unwrap_or_else(|error| panic!("installing the member at {server}: {error:#}"));
}

/// Runs the page's `kubectl baton cluster add` for `cluster` with `kubeconfig` (a context per
/// member): the member's `baton-member` token, in a kubeconfig the controller accepts, written
/// as the Secret [`kubeconfig_secret`] in the hub's `namespace` (the trio's controller keeps
/// everything there).
async fn add_cluster(kubeconfig: &Path, namespace: &str, cluster: &str) {
    let page = crate::cluster_setup::read_docs();
    let args = crate::cluster_setup::cluster_add_args(&page, cluster, namespace, namespace)
        .unwrap_or_else(|error| panic!("{error:#}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = crate::plugin_support::kubectl_baton(kubeconfig, &args).await;
    run.exited(0).says(&[&format!(
        "cluster {cluster}: Secret {namespace}/{} (key {KUBECONFIG_KEY}) written in the cluster of context {HUB}",
        kubeconfig_secret(cluster)
    )]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transition(at: Instant, pod: &str, statefulset: &str, event: PodEvent) -> PodTransition {
        PodTransition {
            at,
            pod: pod.to_owned(),
            uid: format!("{pod}-uid"),
            statefulset: Some(statefulset.to_owned()),
            revision: None,
            event,
        }
    }

    #[test]
    fn timelines_merge_by_time_with_names_qualified_by_their_cluster() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let a = vec![
            transition(at(1), "ingester-0", "ingester", PodEvent::Created),
            transition(at(4), "ingester-0", "ingester", PodEvent::Ready),
        ];
        let b = vec![
            transition(at(2), "ingester-0", "ingester", PodEvent::Created),
            transition(at(3), "ingester-0", "ingester", PodEvent::Ready),
        ];
        let merged = merge_timelines([("cluster-a", a), ("cluster-b", b)]);
        let read: Vec<(&str, Option<&str>, PodEvent)> = merged
            .iter()
            .map(|t| (t.pod.as_str(), t.statefulset.as_deref(), t.event))
            .collect();
        assert_eq!(
            read,
            [
                (
                    "cluster-a/ingester-0",
                    Some("cluster-a/ingester"),
                    PodEvent::Created
                ),
                (
                    "cluster-b/ingester-0",
                    Some("cluster-b/ingester"),
                    PodEvent::Created
                ),
                (
                    "cluster-b/ingester-0",
                    Some("cluster-b/ingester"),
                    PodEvent::Ready
                ),
                (
                    "cluster-a/ingester-0",
                    Some("cluster-a/ingester"),
                    PodEvent::Ready
                ),
            ]
        );
    }

    #[test]
    fn the_merged_timeline_catches_two_clusters_down_at_once() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut timelines = Vec::new();
        for (index, cluster) in ["cluster-a", "cluster-b"].into_iter().enumerate() {
            let offset = index as u64 * 10;
            timelines.push((
                cluster,
                vec![
                    transition(at(offset), "ingester-0", "ingester", PodEvent::Created),
                    transition(at(offset + 1), "ingester-0", "ingester", PodEvent::Ready),
                    // each cluster's pod leaves at 100 ms: both down at once
                    transition(
                        at(100 + index as u64),
                        "ingester-0",
                        "ingester",
                        PodEvent::Terminating,
                    ),
                ],
            ));
        }
        // the same pod name and uid in two clusters are two pods: uids differ in real clusters
        timelines[1].1.iter_mut().for_each(|t| t.uid.push_str("-b"));
        let merged = merge_timelines(timelines);
        let group = Group::new("ingester", 1, 1);
        let zones: Vec<Zone> = group.zones().into_iter().take(2).collect();
        let error = crate::timeline::check_rollout_guarantees(&merged, &zones, at(50))
            .expect_err("two clusters down at once");
        assert!(
            error.contains(
                "cluster-b/ingester-0 of cluster-b/ingester was deleted while other zones had unavailable pods: [(\"cluster-a/ingester\", 1)]"
            ),
            "{error}"
        );
    }

    #[test]
    fn the_configuration_lists_the_hub_without_a_secret_and_the_others_with_theirs() {
        assert_eq!(
            controller_config("clusters-1", "http://127.0.0.1:9090"),
            "namespace: clusters-1\ngates:\n  prometheus_addresses:\n    - http://127.0.0.1:9090\ncontroller:\n  clusters:\n    - name: cluster-a\n    - name: cluster-b\n      kubeconfig_secret: member-cluster-b\n      kubeconfig_key: kubeconfig\n    - name: cluster-c\n      kubeconfig_secret: member-cluster-c\n      kubeconfig_key: kubeconfig\n"
        );
    }

    #[test]
    fn the_trio_lists_the_members_the_docs_list() {
        let page = crate::cluster_setup::read_docs();
        let docs = crate::cluster_setup::clusters_of(
            &crate::cluster_setup::docs_hub_config(&page).expect("the docs' configuration"),
        )
        .expect("the docs' members");
        let trio = crate::cluster_setup::clusters_of(&controller_config(
            "clusters-1",
            "http://127.0.0.1:9090",
        ))
        .expect("the trio's members");
        assert_eq!(trio, docs);
    }

    #[test]
    fn the_configuration_is_what_the_controller_loads() {
        let dir = tempfile::tempdir().expect("a folder");
        let file = dir.path().join("baton.yaml");
        std::fs::write(
            &file,
            controller_config("clusters-1", "http://127.0.0.1:9090"),
        )
        .expect("written");
        let config = baton_config::Config::load(Some(&file)).expect("a valid configuration");
        assert_eq!(config.namespace, "clusters-1");
        assert_eq!(config.gates.prometheus_addresses.len(), 1);
        let clusters: Vec<(&str, &str, &str)> = config
            .controller
            .clusters
            .iter()
            .map(|cluster| {
                (
                    cluster.name.as_str(),
                    cluster.kubeconfig_secret.as_str(),
                    cluster.kubeconfig_key.as_str(),
                )
            })
            .collect();
        assert_eq!(
            clusters,
            [
                ("cluster-a", "", "kubeconfig"),
                ("cluster-b", "member-cluster-b", "kubeconfig"),
                ("cluster-c", "member-cluster-c", "kubeconfig"),
            ]
        );
    }
}
