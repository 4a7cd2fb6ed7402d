//! Running `baton-controller` against the test control plane, and reading what it did.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use crate::control_plane::ControlPlane;
use crate::process::{BatonProcess, ProcessLog};
use crate::wait_until;

/// A free loopback address for a process's server. Ports come from below the kernel's
/// ephemeral range (32768 and up), so an outgoing connection cannot take one between the check
/// here and the process binding it; each test process starts at its own offset.
pub fn free_address() -> String {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 120) as u16 * 100;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 100;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().expect("bound").to_string();
        }
    }
}

/// Where a controller to start will serve its ops server and write its log.
#[derive(Debug)]
pub struct ControllerSetup {
    pub ops_address: String,
    pub log: ProcessLog,
}

impl ControllerSetup {
    /// A free address and a new log folder.
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            ops_address: free_address(),
            log: ProcessLog::new("baton-controller")?,
        })
    }
}

/// A running controller and the address of its ops server.
#[derive(Debug)]
pub struct Controller {
    pub process: BatonProcess,
    pub ops_address: String,
}

impl Controller {
    /// Starts baton-controller for `namespace` with short lease timings (tests must not wait
    /// 15 s for a takeover) plus `extra` configuration.
    pub async fn start(
        control_plane: &ControlPlane,
        namespace: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        Self::start_as(control_plane.kubeconfig_path(), namespace, extra).await
    }

    /// As [`Controller::start`], authenticating with `kubeconfig` (e.g. a service account's).
    pub async fn start_as(
        kubeconfig: &std::path::Path,
        namespace: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        Self::launch(kubeconfig, namespace, extra, false).await
    }

    /// As [`Controller::start`], the process killed when the thread starting it ends
    /// ([`BatonProcess::spawn_dying_with_parent`]): for a controller kept in a static for the
    /// whole test binary, which no `Drop` stops.
    pub async fn start_dying_with_parent(
        control_plane: &ControlPlane,
        namespace: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        Self::launch(control_plane.kubeconfig_path(), namespace, extra, true).await
    }

    async fn launch(
        kubeconfig: &std::path::Path,
        namespace: &str,
        extra: &[(&str, &str)],
        dies_with_parent: bool,
    ) -> Self {
        let setup = ControllerSetup::new().expect("a folder for baton-controller's log");
        let mut controller =
            Self::spawn(kubeconfig, namespace, extra, dies_with_parent, setup).await;
        controller.wait_ready().await;
        controller
    }

    /// As [`Controller::start`], on the ops address and log `setup` chose, returning as soon
    /// as the process runs, before it is ready ([`Controller::wait_ready`]): for the demo,
    /// which says where the controller's log and status page are before it starts, and shows
    /// the rollout from before the controller's first step.
    pub async fn start_unready(
        control_plane: &ControlPlane,
        namespace: &str,
        extra: &[(&str, &str)],
        setup: ControllerSetup,
    ) -> Self {
        Self::spawn(
            control_plane.kubeconfig_path(),
            namespace,
            extra,
            false,
            setup,
        )
        .await
    }

    async fn spawn(
        kubeconfig: &std::path::Path,
        namespace: &str,
        extra: &[(&str, &str)],
        dies_with_parent: bool,
        setup: ControllerSetup,
    ) -> Self {
        let ControllerSetup { ops_address, log } = setup;
        let mut env = vec![
            ("BATON_NAMESPACE", namespace),
            ("BATON_OPS__ADDRESS", ops_address.as_str()),
            ("BATON_LOG__LEVEL", "info,baton_controller=debug"),
            ("BATON_CONTROLLER__LEASE__DURATION", "3s"),
            ("BATON_CONTROLLER__LEASE__RENEW_DEADLINE", "2s"),
            ("BATON_CONTROLLER__LEASE__RETRY_PERIOD", "500ms"),
        ];
        env.extend_from_slice(extra);
        let process = BatonProcess::spawn_workspace_binary(
            "baton-controller",
            kubeconfig,
            &env,
            dies_with_parent,
            log,
        )
        .await
        .expect("baton-controller starts");
        Self {
            process,
            ops_address,
        }
    }

    /// Waits until `/ready` answers 200 (caches synced); fails at once if the process exits.
    pub async fn wait_ready(&mut self) {
        let url = format!("http://{}/ready", self.ops_address);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if http_status(&url).await == Some(200) {
                return;
            }
            assert!(
                !self.process.has_exited(),
                "baton-controller exited before it was ready:\n{}",
                self.process.output()
            );
            assert!(
                std::time::Instant::now() < deadline,
                "baton-controller not ready after 60s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET path` on the ops server: the status code and body; `None` when it does not answer.
    pub async fn ops_get(&self, path: &str) -> Option<(u16, String)> {
        let url = format!("http://{}{path}", self.ops_address);
        let response = ops_client().get(url).send().await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        http_get(&format!("http://{}/metrics", self.ops_address))
            .await
            .unwrap_or_default()
    }

    /// Whether it reports holding the lease (`baton_leader 1`); false when it does not answer.
    pub async fn is_leader(&self) -> bool {
        self.metric("baton_leader").await == Some(1.0)
    }

    /// The value of an unlabelled metric, `None` when absent or the server does not answer.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.metrics().await.lines().find_map(|line| {
            let (key, value) = line.trim().split_once(' ')?;
            if key == name {
                value.parse().ok()
            } else {
                None
            }
        })
    }
}

/// The HTTP status of a plain GET of `url` (an ops server's), `None` when nothing answers.
pub(crate) async fn http_status(url: &str) -> Option<u16> {
    let response = ops_client().get(url).send().await.ok()?;
    Some(response.status().as_u16())
}

async fn http_get(url: &str) -> Option<String> {
    ops_client().get(url).send().await.ok()?.text().await.ok()
}

/// A plain-HTTP client for the ops server: no proxy, short timeout.
fn ops_client() -> reqwest::Client {
    // reqwest sets up rustls even for plain HTTP, and needs the process's provider for that.
    baton_shared::crypto::install_default_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a plain HTTP client")
}

/// Where a StatefulSet's rollout stands, read from the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutState {
    pub update_revision: String,
    pub current_revision: String,
    /// Pod name → its `controller-revision-hash`.
    pub pod_revisions: BTreeMap<String, String>,
    pub ready_replicas: i32,
    pub updated_replicas: i32,
    pub replicas: i32,
}

impl RolloutState {
    /// Every pod runs the update revision, all are ready, and currentRevision caught up.
    pub fn is_complete(&self) -> bool {
        !self.update_revision.is_empty()
            && self.current_revision == self.update_revision
            && self.pod_revisions.len() as i32 == self.replicas
            && self
                .pod_revisions
                .values()
                .all(|revision| *revision == self.update_revision)
            && self.ready_replicas == self.replicas
    }

    /// Pods at the update revision.
    pub fn updated(&self) -> usize {
        self.pod_revisions
            .values()
            .filter(|revision| **revision == self.update_revision)
            .count()
    }
}

/// Reads the rollout state of `statefulset`.
pub async fn rollout_state(
    client: &kube::Client,
    namespace: &str,
    statefulset: &str,
) -> RolloutState {
    let sts = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .get(statefulset)
        .await
        .unwrap_or_else(|error| panic!("reading {statefulset}: {error}"));
    let status = sts.status.unwrap_or_default();
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={statefulset}")))
        .await
        .expect("listing pods");
    RolloutState {
        update_revision: status.update_revision.unwrap_or_default(),
        current_revision: status.current_revision.unwrap_or_default(),
        pod_revisions: pods
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .map(|pod| {
                let revision = pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get("controller-revision-hash").cloned())
                    .unwrap_or_default();
                (pod.metadata.name.unwrap_or_default(), revision)
            })
            .collect(),
        ready_replicas: status.ready_replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        replicas: sts.spec.and_then(|spec| spec.replicas).unwrap_or(1),
    }
}

/// The Events (events.k8s.io/v1) of `namespace`; none when they cannot be listed.
async fn events(client: &kube::Client, namespace: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
}

/// The distinct reporting instances (controller identities) of the Events with `reason`.
pub async fn event_reporters(
    client: &kube::Client,
    namespace: &str,
    reason: &str,
) -> BTreeSet<String> {
    events(client, namespace)
        .await
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some(reason))
        .filter_map(|event| event.reporting_instance)
        .collect()
}

/// The Events about `object`, as (reason, note).
pub async fn events_about(
    client: &kube::Client,
    namespace: &str,
    object: &str,
) -> Vec<(String, String)> {
    events(client, namespace)
        .await
        .into_iter()
        .filter(|event| {
            event
                .regarding
                .as_ref()
                .and_then(|regarding| regarding.name.as_deref())
                == Some(object)
        })
        .map(|event| {
            (
                event.reason.unwrap_or_default(),
                event.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until an Event about `object` has `reason` and a note containing every one of
/// `note_contains`. Events are published off the reconcile's path, so they may land after the
/// change they explain: scenarios wait for them rather than read them once.
pub async fn wait_event(
    client: &kube::Client,
    namespace: &str,
    object: &str,
    reason: &str,
    note_contains: &[&str],
) {
    wait_until(
        GROUP_TIMEOUT,
        &format!("an Event {reason} on {object} says {note_contains:?}"),
        || async {
            events_about(client, namespace, object)
                .await
                .iter()
                .any(|(r, note)| {
                    r == reason && note_contains.iter().all(|part| note.contains(part))
                })
        },
    )
    .await;
}

/// How long the group helpers below wait for a condition.
pub const GROUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until every StatefulSet in `names` has all its pods, all Ready and updated, as its
/// status reports.
pub async fn wait_group_ready<S: AsRef<str>>(client: &kube::Client, namespace: &str, names: &[S]) {
    for name in names {
        let name = name.as_ref();
        crate::wait_until(GROUP_TIMEOUT, &format!("{name} is ready"), || async {
            let state = rollout_state(client, namespace, name).await;
            state.ready_replicas == state.replicas
                && state.updated_replicas == state.replicas
                && state.pod_revisions.len() as i32 == state.replicas
        })
        .await;
    }
}

/// Creates the rollout group `ingester` with a StatefulSet of `replicas` pods per zone (named
/// `ingester-zone-<zone>`) and waits until every pod is Ready; returns the StatefulSets' names.
pub async fn create_ready_group(
    client: &kube::Client,
    namespace: &str,
    zones: &[&str],
    replicas: i32,
) -> Vec<String> {
    let mut names = Vec::new();
    for fixture in crate::fixtures::rollout_group("ingester", zones, replicas) {
        let created = fixture.create(client, namespace).await;
        names.push(created.metadata.name.unwrap_or_default());
    }
    wait_group_ready(client, namespace, &names).await;
    names
}

/// Deploys `version` to every StatefulSet in `names`; returns once the StatefulSet controller
/// has computed each one's new update revision.
pub async fn roll_out(client: &kube::Client, namespace: &str, names: &[String], version: &str) {
    for name in names {
        let before = rollout_state(client, namespace, name).await;
        crate::fixtures::set_version(client, namespace, name, version).await;
        wait_new_update_revision(client, namespace, name, &before.update_revision).await;
    }
}

/// Waits until the StatefulSet controller has computed `name`'s update revision anew: it is no
/// longer `before`.
pub async fn wait_new_update_revision(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    before: &str,
) {
    crate::wait_until(
        GROUP_TIMEOUT,
        &format!("{name} has a new update revision"),
        || async { rollout_state(client, namespace, name).await.update_revision != before },
    )
    .await;
}

/// Waits until the rollout of every StatefulSet in `names` is complete; on timeout the panic
/// shows every StatefulSet and pod of the namespace, to tell a stuck controller from a stuck
/// pod.
pub async fn wait_rollout_complete(client: &kube::Client, namespace: &str, names: &[String]) {
    for name in names {
        let deadline = std::time::Instant::now() + GROUP_TIMEOUT;
        while !rollout_state(client, namespace, name).await.is_complete() {
            if std::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {GROUP_TIMEOUT:?} waiting until the rollout of {name} completes\n{}",
                    describe_namespace(client, namespace).await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One line per StatefulSet (replicas, ready, revisions) and per pod (uid, revision, phase,
/// readiness, deletion), as the API server has them.
pub async fn describe_namespace(client: &kube::Client, namespace: &str) -> String {
    let mut lines = Vec::new();
    let statefulsets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    for sts in statefulsets {
        let status = sts.status.unwrap_or_default();
        lines.push(format!(
            "statefulset {} replicas={} ready={} current={} update={}",
            sts.metadata.name.unwrap_or_default(),
            sts.spec.and_then(|spec| spec.replicas).unwrap_or(1),
            status.ready_replicas.unwrap_or(0),
            status.current_revision.unwrap_or_default(),
            status.update_revision.unwrap_or_default(),
        ));
    }
    let mut pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pod in pods {
        let status = pod.status.unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|condition| condition.type_ == "Ready")
            .map(|condition| condition.status)
            .unwrap_or_else(|| "-".to_owned());
        let labels = pod.metadata.labels.unwrap_or_default();
        lines.push(format!(
            "pod {} uid={} revision={} phase={} ready={} created={}{}",
            pod.metadata.name.unwrap_or_default(),
            pod.metadata.uid.unwrap_or_default(),
            labels
                .get("controller-revision-hash")
                .map_or("-", String::as_str),
            status.phase.unwrap_or_else(|| "-".to_owned()),
            ready,
            pod.metadata
                .creation_timestamp
                .map(|time| time.0.to_string())
                .unwrap_or_default(),
            if pod.metadata.deletion_timestamp.is_some() {
                " deleting"
            } else {
                ""
            },
        ));
    }
    lines.join("\n")
}
