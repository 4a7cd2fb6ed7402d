//! The stage of the controller scenarios: a namespace of their own on the shared control plane,
//! the pod simulator (or the real nodes) under it, baton's controller on it, and the steps
//! scenario files share: create a group and wait until it is Ready, deploy a version, wait
//! until the rollout completes, read Events, revisions and the pods' timeline, check the
//! zone-by-zone guarantees. A step only one file takes stays in that file, as a function of
//! the scene.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::control_plane::ControlPlane;
use crate::controller_support::{
    Controller, GROUP_TIMEOUT, roll_out, rollout_state, wait_event, wait_group_ready,
    wait_rollout_complete,
};
use crate::fixtures::{StatefulSetFixture, rollout_group};
use crate::timeline::{Zone, ZoneWindow, check_rollout_guarantees, zone_windows};
use crate::{PodSimulator, PodTransition, TestNamespace};

/// A namespace of its own with the pod simulator (or the real nodes) and a running controller,
/// with the steps the scenarios share.
pub struct Scene {
    pub control_plane: &'static ControlPlane,
    pub namespace: TestNamespace,
    pub simulator: PodSimulator,
    pub controller: Controller,
}

/// baton's writes of StatefulSets, in its metrics.
const STATEFULSET_PATCHES: &str = "rollout_operator_kubernetes_api_client_request_duration_seconds_count{method=\"PATCH\",path=\"/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}\"";

impl Scene {
    /// baton's StatefulSet writes so far (its partitions, its gate state…), from its metrics.
    pub async fn statefulset_writes(&self) -> u64 {
        let metrics = self.controller.metrics().await;
        metrics
            .lines()
            .filter(|line| line.starts_with(STATEFULSET_PATCHES))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|count| count as u64)
            .sum()
    }

    /// The annotations of StatefulSet `name`, as read from the API server.
    pub async fn annotations(&self, name: &str) -> BTreeMap<String, String> {
        let statefulset: k8s_openapi::api::apps::v1::StatefulSet = self
            .namespace
            .api()
            .get(name)
            .await
            .unwrap_or_else(|error| panic!("reading StatefulSet {name}: {error}"));
        statefulset.metadata.annotations.unwrap_or_default()
    }

    /// The last outcome of the group's health check, as stored on member `carrier` (empty
    /// while none is).
    pub async fn last_check_outcome(&self, carrier: &str) -> String {
        self.annotations(carrier)
            .await
            .get(baton_core::gates::CHECK_STATE_ANNOTATION)
            .and_then(|state| serde_json::from_str::<serde_json::Value>(state).ok())
            .and_then(|state| state["lastOutcome"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Waits until the check outcome stored on `carrier` contains every one of `expected`;
    /// each outcome seen on the way is printed (shown when the test fails).
    pub async fn wait_check_outcome(&self, carrier: &str, expected: &[&str]) {
        let seen = std::sync::Mutex::new(String::new());
        crate::wait_until(
            GROUP_TIMEOUT,
            &format!("the check's last outcome says {expected:?}"),
            || async {
                let outcome = self.last_check_outcome(carrier).await;
                let mut last = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *last != outcome {
                    eprintln!("the check's last outcome: {outcome}");
                    last.clone_from(&outcome);
                }
                expected.iter().all(|text| outcome.contains(text))
            },
        )
        .await;
    }

    /// How many pods of each of `names` run its update revision.
    pub async fn updated(&self, names: &[String]) -> BTreeMap<String, usize> {
        let mut updated = BTreeMap::new();
        for name in names {
            updated.insert(name.clone(), self.updated_pods(name).await);
        }
        updated
    }

    /// `kubectl baton <args> -n <namespace>`, as a person runs it.
    pub async fn kubectl_baton(&self, args: &[&str]) -> crate::plugin_support::Run {
        let mut all = args.to_vec();
        all.extend(["-n", self.name()]);
        crate::plugin_support::kubectl_baton(self.control_plane.kubeconfig_path(), &all).await
    }

    /// The leader's status page, as JSON text.
    pub async fn leader_status(&self) -> String {
        let (_, status) = self
            .controller
            .ops_get("/api/v1/status")
            .await
            .expect("the leader answers");
        status
    }

    /// The StatefulSets of `names` carrying `baton.dev/halted`, in `names`' order.
    pub async fn halted(&self, names: &[String]) -> Vec<String> {
        let mut halted = Vec::new();
        for name in names {
            if self
                .annotations(name)
                .await
                .contains_key(baton_core::gates::HALTED_ANNOTATION)
            {
                halted.push(name.clone());
            }
        }
        halted
    }

    /// Waits until one of `names` is halted, then checks the halt says each of `says`, the
    /// `Halted` Event and `kubectl baton wait` say `told`; returns the halted StatefulSet.
    pub async fn wait_halted_saying(&self, names: &[String], says: &[&str], told: &str) -> String {
        crate::wait_until(GROUP_TIMEOUT, "the group is halted", || async {
            !self.halted(names).await.is_empty()
        })
        .await;
        let zone = self.halted(names).await[0].clone();
        let halt = self.annotations(&zone).await[baton_core::gates::HALTED_ANNOTATION].clone();
        for expected in says {
            assert!(halt.contains(expected), "{expected:?} not in {halt:?}");
        }
        self.wait_event(&zone, "Halted", &[told]).await;
        self.kubectl_baton(&["wait", "ingester", "--timeout", "1m"])
            .await
            .complains(&[told]);
        zone
    }

    /// Sets (`Some`) or removes (`None`) an annotation of StatefulSet `name`, as a person with
    /// kubectl would (a merge patch).
    pub async fn annotate(&self, name: &str, key: &str, value: Option<&str>) {
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        self.namespace
            .api::<k8s_openapi::api::apps::v1::StatefulSet>()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|error| panic!("annotating StatefulSet {name}: {error}"));
    }

    /// A namespace `<prefix>-<random>` on the shared control plane, simulated and controlled.
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, &[]).await
    }

    /// As [`Scene::start`], the controller configured with `extra` too.
    pub async fn start_with(prefix: &str, extra: &[(&str, &str)]) -> Self {
        Self::start_on(ControlPlane::shared().await, prefix, extra).await
    }

    /// As [`Scene::start_with`], on `control_plane` (such as
    /// [`ControlPlane::oldest`]).
    pub async fn start_on(
        control_plane: &'static ControlPlane,
        prefix: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        let namespace = TestNamespace::create(control_plane, prefix).await;
        let simulator = PodSimulator::for_namespace(&namespace).await;
        let controller = Controller::start(control_plane, namespace.name(), extra).await;
        Self {
            control_plane,
            namespace,
            simulator,
            controller,
        }
    }
}

impl Scene {
    /// A namespace `real-<prefix>-<random>` whose pods run on the real nodes
    /// ([`crate::real_nodes`]), controlled with `extra` configuration; `simulator` only records
    /// the timeline.
    pub async fn on_real_nodes(prefix: &str, extra: &[(&str, &str)]) -> Self {
        let (control_plane, namespace) = crate::real_nodes::namespace_on_real_nodes(prefix).await;
        let simulator = PodSimulator::observe(namespace.client(), namespace.name());
        let controller = Controller::start(control_plane, namespace.name(), extra).await;
        Self {
            control_plane,
            namespace,
            simulator,
            controller,
        }
    }
}

/// What a scenario creates a StatefulSet from: the simulator's fixtures and the real nodes'.
pub trait Fixture {
    /// Creates the StatefulSet in `namespace`; returns it as created.
    fn create_in(
        &self,
        client: &kube::Client,
        namespace: &str,
    ) -> impl std::future::Future<Output = StatefulSet> + Send;
}

impl Fixture for StatefulSetFixture {
    async fn create_in(&self, client: &kube::Client, namespace: &str) -> StatefulSet {
        self.create(client, namespace).await
    }
}

impl Fixture for crate::real_nodes::RealPodsFixture {
    async fn create_in(&self, client: &kube::Client, namespace: &str) -> StatefulSet {
        self.create(client, namespace).await
    }
}

/// The steps the scenarios share.
impl Scene {
    pub fn client(&self) -> kube::Client {
        self.namespace.client()
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        self.namespace.name()
    }

    /// Creates the StatefulSets; returns their names once every pod runs and is Ready.
    pub async fn create<F: Fixture>(&self, fixtures: &[F]) -> Vec<String> {
        let mut names = Vec::new();
        for fixture in fixtures {
            let created = fixture.create_in(&self.client(), self.name()).await;
            names.push(created.metadata.name.unwrap_or_default());
        }
        wait_group_ready(&self.client(), self.name(), &names).await;
        names
    }

    /// Creates group `ingester` of `zones` × `replicas` pods, `annotate` deciding each zone's
    /// fixture; returns the names once every pod is Ready.
    pub async fn create_group(
        &self,
        zones: &[&str],
        replicas: i32,
        annotate: impl Fn(&str, StatefulSetFixture) -> StatefulSetFixture,
    ) -> Vec<String> {
        let fixtures: Vec<StatefulSetFixture> = zones
            .iter()
            .zip(rollout_group("ingester", zones, replicas))
            .map(|(zone, fixture)| annotate(zone, fixture))
            .collect();
        self.create(&fixtures).await
    }

    /// Deploys `version` (the pod template's image tag) to every StatefulSet; returns when the
    /// StatefulSet controller has computed each one's new update revision, and when it began.
    pub async fn roll_out(&self, names: &[String], version: &str) -> Instant {
        let from = Instant::now();
        roll_out(&self.client(), self.name(), names, version).await;
        from
    }

    pub async fn wait_complete(&self, names: &[String]) {
        wait_rollout_complete(&self.client(), self.name(), names).await;
    }

    /// How many pods of `name` run its update revision.
    pub async fn updated_pods(&self, name: &str) -> usize {
        rollout_state(&self.client(), self.name(), name)
            .await
            .updated()
    }

    /// (current revision, update revision) of `name`.
    pub async fn revisions(&self, name: &str) -> (String, String) {
        let state = rollout_state(&self.client(), self.name(), name).await;
        (state.current_revision, state.update_revision)
    }

    /// Waits for an Event about `object` with `reason` whose note contains each of
    /// `note_contains`.
    pub async fn wait_event(&self, object: &str, reason: &str, note_contains: &[&str]) {
        wait_event(&self.client(), self.name(), object, reason, note_contains).await;
    }

    /// Every pod of the namespace now.
    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client(), self.name())
            .list(&ListParams::default())
            .await
            .expect("listing the pods")
            .items
    }

    /// What the simulator (or the observer of the real nodes) has seen of the pods.
    pub fn timeline(&self) -> Vec<PodTransition> {
        self.simulator.timeline()
    }

    /// The timeline since `from` kept docs/compatibility.md's guarantees, every zone of `names`
    /// holding `replicas` pods and rolling with `max_unavailable`; returns the zones.
    pub fn check_guarantees(
        &self,
        names: &[String],
        replicas: u32,
        max_unavailable: u32,
        from: Instant,
    ) -> Vec<Zone> {
        let zones: Vec<Zone> = names
            .iter()
            .map(|name| Zone::new(name, replicas, max_unavailable))
            .collect();
        check_rollout_guarantees(&self.timeline(), &zones, from).unwrap();
        zones
    }

    /// Checks the guarantees (max-unavailable 1) since `from`, then returns when each zone of
    /// `names` rolled, in the order the zones began.
    pub fn windows(
        &self,
        names: &[String],
        replicas: u32,
        from: Instant,
    ) -> Vec<(String, ZoneWindow)> {
        let zones = self.check_guarantees(names, replicas, 1, from);
        let mut windows: Vec<(String, ZoneWindow)> = zone_windows(&self.timeline(), &zones, from)
            .into_iter()
            .collect();
        windows.sort_by_key(|(_, window)| window.started);
        windows
    }
}
