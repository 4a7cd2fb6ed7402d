//! Real nodes for the scenarios the pod simulator cannot vouch for: one kubelet per zone with a
//! containerd and runc running the test application (`tests/testapp`) for real, pods placed by
//! kube-scheduler, readiness from real probes, termination that takes as long as the process
//! takes, CrashLoopBackOff from the kubelet's own backoff, and the kubelet's own reasons for a
//! version it cannot start (an image it cannot pull or parse, a missing ConfigMap, a container
//! the runtime cannot create). Started once per test process next to the shared control plane
//! (the `baton-real-nodes` binary, stopped when the process exits); the simulator stays for
//! fast and large scenarios.
//!
//! Needs root and what `tests/control-plane/install.sh` installs; fails loudly otherwise
//! (CI runs as root), never skips.

pub mod images;
pub mod supervisor;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::{Child, ChildStdin, Command};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

pub use images::APP_IMAGE;
pub use supervisor::{NodeInfo, NodesHandshake, ZONE_LABEL};

use crate::control_plane::ControlPlane;
use crate::fixtures::StatefulSetFixture;
use crate::process::{Handshaken, spawn_handshaken, workspace_binary};

/// Where the test application listens in its pod.
pub const APP_PORT: u16 = 8080;

/// The real nodes of this test process.
#[derive(Debug)]
pub struct RealNodes {
    handshake: NodesHandshake,
    /// Kept for the life of the process: the supervisor stops when its stdin closes.
    _supervisor: Mutex<(Child, ChildStdin)>,
}

static SHARED: OnceLock<RealNodes> = OnceLock::new();

impl RealNodes {
    /// The nodes of this test process (and its shared control plane), started on first use.
    pub async fn shared() -> &'static RealNodes {
        if let Some(existing) = SHARED.get() {
            return existing;
        }
        let control_plane = ControlPlane::shared_for_real_nodes().await;
        let kubeconfig = control_plane.kubeconfig_path().to_path_buf();
        if !control_plane.is_local() {
            panic!(
                "real nodes join the local control plane; unset {}",
                crate::control_plane::EXISTING_CLUSTER_ENV
            );
        }
        tokio::task::spawn_blocking(move || {
            SHARED.get_or_init(|| match Self::start(&kubeconfig) {
                Ok(nodes) => nodes,
                Err(error) => panic!("starting the real nodes: {error:#}"),
            })
        })
        .await
        .expect("starting the real nodes panicked")
    }

    fn start(kubeconfig: &std::path::Path) -> anyhow::Result<Self> {
        let mut images = images::build().context("building the real pods' images")?;
        // baton's own image too, for the scenarios that run it as deploy/ does; the others run
        // without it, and those say what is missing.
        // And the image an upgrade scenario moves it to.
        match crate::baton_image::BatonImage::available() {
            Ok(baton) => {
                images.push(baton.archive.clone());
                let next = baton
                    .next(crate::baton_image::NEXT_REVISION)
                    .context("deriving the next image of baton")?;
                images.push(next.archive);
            }
            Err(missing) => eprintln!("{missing}"),
        }
        let binary = workspace_binary("baton-real-nodes")?;
        let mut command = Command::new(&binary);
        command.arg("--kubeconfig").arg(kubeconfig);
        for image in &images {
            command.arg("--image").arg(image);
        }
        let started: Handshaken<NodesHandshake> = spawn_handshaken(command, "baton-real-nodes")?;
        let (handshake, child, stdin) = (started.handshake, started.child, started.stdin);
        Ok(Self {
            handshake,
            _supervisor: Mutex::new((child, stdin)),
        })
    }

    /// The nodes, zone a first.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.handshake.nodes
    }

    /// What `container` of `pod` wrote, read from its node's log folder, as `kubectl logs`
    /// shows it (the API server cannot reach these kubelets by their names).
    pub fn container_log(&self, pod: &Pod, container: &str) -> anyhow::Result<String> {
        let node = self.node_of(pod)?;
        let metadata = &pod.metadata;
        let folder = format!(
            "{}_{}_{}",
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.name.as_deref().unwrap_or_default(),
            metadata.uid.as_deref().unwrap_or_default()
        );
        let path = node
            .dir
            .join("pod-logs")
            .join(folder)
            .join(container)
            .join("0.log");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        // CRI's format: `<time> <stream> <tag> <text>` per line.
        Ok(text
            .lines()
            .filter_map(|line| line.splitn(4, ' ').nth(3))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// Kills `container` of `pod` with SIGKILL through its node's containerd, as the kernel's
    /// OOM killer or a crash would end it: no SIGTERM, nothing released. The kubelet restarts
    /// it as it would any container.
    pub fn kill_container(&self, pod: &Pod, container: &str) -> anyhow::Result<()> {
        let node = self.node_of(pod)?;
        let id = container_id(pod, container)?;
        let assets = supervisor::NodeAssets::locate()?;
        let output = Command::new(&assets.ctr)
            .arg("--address")
            .arg(node.containerd_socket())
            .args([
                "--namespace",
                "k8s.io",
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                id,
            ])
            .output()
            .context("running ctr tasks kill")?;
        anyhow::ensure!(
            output.status.success(),
            "ctr tasks kill {id} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// What `container` of `pod` (its running instance) has used so far, from its cgroup: the
    /// nodes run every container in `/k8s.io/<id>` of the machine's cgroup v1 hierarchies.
    pub fn container_usage(&self, pod: &Pod, container: &str) -> anyhow::Result<ContainerUsage> {
        let id = container_id(pod, container)?;
        let read = |path: String| -> anyhow::Result<u64> {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            text.trim()
                .parse()
                .with_context(|| format!("{path} holds {text:?}"))
        };
        let memory = format!("/sys/fs/cgroup/memory/k8s.io/{id}");
        let procs = std::fs::read_to_string(format!("{memory}/cgroup.procs"))
            .with_context(|| format!("reading {memory}/cgroup.procs"))?;
        let mut peak_rss_bytes = 0;
        for pid in procs.split_whitespace() {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .with_context(|| format!("reading /proc/{pid}/status"))?;
            peak_rss_bytes += status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|kib| kib.trim().trim_end_matches(" kB").parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024);
        }
        Ok(ContainerUsage {
            peak_memory_bytes: read(format!("{memory}/memory.max_usage_in_bytes"))?,
            peak_rss_bytes,
            cpu: Duration::from_nanos(read(format!(
                "/sys/fs/cgroup/cpuacct/k8s.io/{id}/cpuacct.usage"
            ))?),
        })
    }

    /// The real node `pod` runs on.
    fn node_of(&self, pod: &Pod) -> anyhow::Result<&NodeInfo> {
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.as_deref())
            .context("the pod is on no node")?;
        self.nodes()
            .iter()
            .find(|node| node.name == node_name)
            .with_context(|| format!("{node_name} is not a real node"))
    }

    /// How long the nodes took to start (images imported, every node Ready).
    pub fn startup(&self) -> Duration {
        Duration::from_secs_f64(self.handshake.startup_seconds)
    }
}

/// How a version's pods behave: the test application's own behaviour
/// (`TESTAPP_BEHAVIOUR`), or a version the kubelet cannot start at all, each stuck waiting
/// with the reason the kubelet gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Healthy,
    /// Exits 1 at start: the kubelet restarts it into CrashLoopBackOff.
    CrashLoops,
    /// Runs, but its readiness endpoint never says ready.
    NeverReady,
    /// Its image is on a registry nothing listens at ([`UNREACHABLE_REGISTRY`]): each pull is
    /// refused, and the kubelet backs off between its attempts.
    ImageCannotBePulled,
    /// Its image reference is not one (an upper-case repository): the kubelet cannot parse it
    /// and never tries to pull.
    InvalidImageName,
    /// Its environment takes a key of a ConfigMap that does not exist
    /// ([`MISSING_CONFIG_MAP`]): the kubelet cannot make the container's configuration.
    MissingConfigMap,
    /// Its container asks for a seccomp profile file the node does not have
    /// ([`MISSING_SECCOMP_PROFILE`]): the kubelet passes it on, and containerd cannot create the
    /// container.
    MissingSeccompProfile,
}

/// A registry address nothing listens at: a pull from it is refused at once, with no timeout
/// to wait out (the nodes reach no registry anyway).
pub const UNREACHABLE_REGISTRY: &str = "127.0.0.1:1";

/// The ConfigMap a [`Behaviour::MissingConfigMap`] version reads, never created.
pub const MISSING_CONFIG_MAP: &str = "baton-test-missing";

/// The seccomp profile a [`Behaviour::MissingSeccompProfile`] version asks for, in no node's
/// profile folder.
pub const MISSING_SECCOMP_PROFILE: &str = "baton-test-missing.json";

/// The variable a [`Behaviour::MissingConfigMap`] version reads from it.
const CONFIG_VARIABLE: &str = "TESTAPP_CONFIG";

impl Behaviour {
    fn env(self) -> &'static str {
        match self {
            Behaviour::CrashLoops => "crash",
            Behaviour::NeverReady => "never-ready",
            // The others are never started, or start healthy.
            Behaviour::Healthy
            | Behaviour::ImageCannotBePulled
            | Behaviour::InvalidImageName
            | Behaviour::MissingConfigMap
            | Behaviour::MissingSeccompProfile => "healthy",
        }
    }

    /// The image a version's pods run.
    fn image(self, version: &str) -> String {
        match self {
            Behaviour::ImageCannotBePulled => {
                format!("{UNREACHABLE_REGISTRY}/{APP_IMAGE}:{version}")
            }
            Behaviour::InvalidImageName => format!("{}:{version}", APP_IMAGE.to_uppercase()),
            _ => format!("{APP_IMAGE}:{version}"),
        }
    }

    /// `Never` for the images imported into every node's containerd (there is no registry to
    /// pull from); the unreachable one is pulled, to fail.
    fn pull_policy(self) -> &'static str {
        match self {
            Behaviour::ImageCannotBePulled => "IfNotPresent",
            _ => "Never",
        }
    }

    /// The variable a version reads from the missing ConfigMap, if it reads one.
    fn config_variable(self) -> Option<serde_json::Value> {
        (self == Behaviour::MissingConfigMap).then(|| {
            json!({"name": CONFIG_VARIABLE, "valueFrom": {"configMapKeyRef": {
                "name": MISSING_CONFIG_MAP,
                "key": "config",
            }}})
        })
    }

    /// The container's security context, if the version sets one.
    fn security_context(self) -> Option<serde_json::Value> {
        (self == Behaviour::MissingSeccompProfile).then(|| {
            json!({"seccompProfile": {
                "type": "Localhost",
                "localhostProfile": MISSING_SECCOMP_PROFILE,
            }})
        })
    }

    /// What a version sets of the app container, as a strategic merge patch: image, pull
    /// policy, behaviour, and the ConfigMap variable and security context added or removed
    /// (null removes a field).
    fn container_patch(self, version: &str) -> serde_json::Value {
        let config = self
            .config_variable()
            .unwrap_or_else(|| json!({"name": CONFIG_VARIABLE, "$patch": "delete"}));
        json!({
            "name": "app",
            "image": self.image(version),
            "imagePullPolicy": self.pull_policy(),
            "env": [{"name": "TESTAPP_BEHAVIOUR", "value": self.env()}, config],
            "securityContext": self.security_context(),
        })
    }
}

/// A StatefulSet whose pods run the test application on the real node of its zone: required
/// node affinity on the zone label, the image never pulled, a readiness probe on the
/// application's `/ready`, and a termination that really takes `stop_delay` (bounded by the
/// grace period).
#[derive(Debug, Clone)]
pub struct RealPodsFixture {
    pub base: StatefulSetFixture,
    zone: String,
    version: String,
    behaviour: Behaviour,
    stop_delay: Duration,
    grace_period_seconds: i64,
    /// A native sidecar (an init container with `restartPolicy: Always`) running the test
    /// application on [`SIDECAR_PORT`], its readiness probe failing this long after it starts.
    sidecar_ready_after: Option<Duration>,
}

impl RealPodsFixture {
    /// `base` (its name, labels, replicas…) on the node of `zone` (`a`, `b` or `c`).
    pub fn new(base: StatefulSetFixture, zone: &str) -> Self {
        Self {
            base,
            zone: zone.to_owned(),
            version: "v1".to_owned(),
            behaviour: Behaviour::Healthy,
            stop_delay: Duration::ZERO,
            grace_period_seconds: 30,
            sidecar_ready_after: None,
        }
    }

    /// Gives its pods a native sidecar whose readiness probe fails for `ready_after` after
    /// the sidecar starts: the kubelet holds the pod's Ready condition False meanwhile.
    pub fn sidecar(mut self, ready_after: Duration) -> Self {
        self.sidecar_ready_after = Some(ready_after);
        self
    }

    pub fn version(mut self, version: &str, behaviour: Behaviour) -> Self {
        self.version = version.to_owned();
        self.behaviour = behaviour;
        self
    }

    /// On SIGTERM the application keeps running this long: its pods stay Terminating.
    pub fn stop_delay(mut self, delay: Duration) -> Self {
        self.stop_delay = delay;
        self
    }

    pub fn grace_period_seconds(mut self, seconds: i64) -> Self {
        self.grace_period_seconds = seconds;
        self
    }

    pub fn build(&self) -> StatefulSet {
        let mut value = serde_json::to_value(self.base.build()).expect("a StatefulSet serializes");
        let spec = &mut value["spec"]["template"]["spec"];
        spec["terminationGracePeriodSeconds"] = json!(self.grace_period_seconds);
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE_LABEL, "operator": "In", "values": [format!("zone-{}", self.zone)]}
            ]}]
        }}});
        spec["containers"] = json!([container(&self.version, self.behaviour, self.stop_delay)]);
        if let Some(ready_after) = self.sidecar_ready_after {
            spec["initContainers"] = json!([sidecar(ready_after)]);
        }
        serde_json::from_value(value).expect("a valid StatefulSet")
    }

    /// Creates it in `namespace`.
    pub async fn create(&self, client: &kube::Client, namespace: &str) -> StatefulSet {
        Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "creating StatefulSet {}: {error}",
                    self.build().metadata.name.unwrap_or_default()
                )
            })
    }
}

fn container(version: &str, behaviour: Behaviour, stop_delay: Duration) -> serde_json::Value {
    let mut env = vec![
        json!({"name": "TESTAPP_BEHAVIOUR", "value": behaviour.env()}),
        json!({"name": "TESTAPP_STOP_DELAY_MS", "value": stop_delay.as_millis().to_string()}),
        json!({"name": "TESTAPP_PORT", "value": APP_PORT.to_string()}),
    ];
    env.extend(behaviour.config_variable());
    let mut container = json!({
        "name": "app",
        "image": behaviour.image(version),
        "imagePullPolicy": behaviour.pull_policy(),
        "env": env,
        "ports": [{"name": "http", "containerPort": APP_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": APP_PORT},
            "periodSeconds": 1,
            "failureThreshold": 1,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        },
    });
    if let Some(context) = behaviour.security_context() {
        container["securityContext"] = context;
    }
    container
}

/// Where a fixture's sidecar listens and is probed.
pub const SIDECAR_PORT: u16 = 8081;

/// A native sidecar: an init container the kubelet keeps running beside the app
/// (`restartPolicy: Always`), with a readiness probe of its own that fails for `ready_after`.
fn sidecar(ready_after: Duration) -> serde_json::Value {
    json!({
        "name": "sidecar",
        "image": format!("{APP_IMAGE}:v1"),
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "env": [
            {"name": "TESTAPP_PORT", "value": SIDECAR_PORT.to_string()},
            {"name": "TESTAPP_READY_AFTER_MS", "value": ready_after.as_millis().to_string()},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": SIDECAR_PORT},
            "periodSeconds": 1,
            "failureThreshold": 1,
            "successThreshold": 1,
            "timeoutSeconds": 1,
        },
    })
}

/// One StatefulSet per zone (`<group>-zone-a`, `-zone-b`, `-zone-c`), in `group`, each on the
/// node of its zone.
pub fn real_rollout_group(group: &str, replicas: i32) -> Vec<RealPodsFixture> {
    supervisor::ZONES
        .iter()
        .map(|zone| {
            RealPodsFixture::new(
                StatefulSetFixture::new(&format!("{group}-zone-{zone}"))
                    .group(group)
                    .replicas(replicas),
                zone,
            )
        })
        .collect()
}

/// Changes the version (image tag and behaviour) of a real-pods StatefulSet's template, as a
/// deploy would; the stop delay stays.
pub async fn set_version(
    client: &kube::Client,
    namespace: &str,
    statefulset: &str,
    version: &str,
    behaviour: Behaviour,
) {
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        behaviour.container_patch(version)
    ]}}}});
    Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .patch(
            statefulset,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
        .unwrap_or_else(|error| panic!("changing the template of {statefulset}: {error}"));
}

/// A namespace `real-<prefix>-<random>` on the control plane of the real nodes (started first:
/// the control plane they start is one their pods reach), and that control plane.
pub async fn namespace_on_real_nodes(
    prefix: &str,
) -> (&'static ControlPlane, crate::TestNamespace) {
    RealNodes::shared().await;
    let control_plane = ControlPlane::shared().await;
    let namespace = crate::TestNamespace::create(
        control_plane,
        &format!("{}{prefix}", supervisor::NAMESPACE_PREFIX),
    )
    .await;
    (control_plane, namespace)
}

/// Deploys `version` (behaving as `behaviour`) to every StatefulSet of `names`; returns once
/// the StatefulSet controller has computed each one's new update revision.
pub async fn roll_out(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    version: &str,
    behaviour: Behaviour,
) {
    for name in names {
        let before = crate::controller_support::rollout_state(client, namespace, name).await;
        set_version(client, namespace, name, version, behaviour).await;
        crate::controller_support::wait_new_update_revision(
            client,
            namespace,
            name,
            &before.update_revision,
        )
        .await;
    }
}

/// The pod's IP, once the kubelet reported one.
pub async fn pod_ip(client: &kube::Client, namespace: &str, pod: &str) -> Option<Ipv4Addr> {
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(pod)
        .await
        .ok()??;
    pod.status?.pod_ip?.parse().ok()
}

/// What the test application in a pod was asked, read from its `/metrics` over the pod's IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppCalls {
    /// Requests served (`METHOD path` → count), `/metrics` itself aside.
    pub calls: BTreeMap<String, u64>,
    /// When its current delayed-downscale preparation began (unix seconds), if one is on.
    pub delayed_downscale_since: Option<i64>,
}

impl AppCalls {
    /// How many `method` requests on `path` it served.
    pub fn count(&self, method: &str, path: &str) -> u64 {
        self.calls
            .get(&format!("{method} {path}"))
            .copied()
            .unwrap_or(0)
    }
}

/// Reads the test application's `/metrics` on the pod's IP: what the operator asked of it.
pub async fn app_calls(ip: Ipv4Addr) -> anyhow::Result<AppCalls> {
    // No proxy: pod IPs are reached directly through the node's bridge.
    let body = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://{ip}:{APP_PORT}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .with_context(|| format!("reading /metrics of the pod at {ip}"))?
        .text()
        .await?;
    let delayed_downscale_since = body
        .lines()
        .find_map(|line| line.strip_prefix("testapp_delayed_downscale_prepared_since_seconds "))
        .and_then(|value| value.trim().parse().ok());
    let mut calls = BTreeMap::new();
    for line in body
        .lines()
        .filter(|line| line.starts_with("testapp_requests_total{"))
    {
        let method = between(line, "method=\"", "\"");
        let path = between(line, "path=\"", "\"");
        let count = line.rsplit(' ').next().and_then(|count| count.parse().ok());
        if let (Some(method), Some(path), Some(count)) = (method, path, count) {
            calls.insert(format!("{method} {path}"), count);
        }
    }
    Ok(AppCalls {
        calls,
        delayed_downscale_since,
    })
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)? + from;
    Some(&text[from..to])
}

/// What a container used, as its cgroup counted.
#[derive(Debug, Clone, Copy)]
pub struct ContainerUsage {
    /// The most memory its cgroup was charged at once (anonymous memory and the page cache it
    /// brought in): what its memory limit is held against.
    pub peak_memory_bytes: u64,
    /// Its processes' peak resident sets (VmHWM), shared pages of the binary included even
    /// where another container's cgroup was charged for them.
    pub peak_rss_bytes: u64,
    /// CPU time, all cores together.
    pub cpu: Duration,
}

/// The containerd ID of `container` of `pod`'s running instance.
fn container_id<'a>(pod: &'a Pod, container: &str) -> anyhow::Result<&'a str> {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == container))
        .and_then(|status| status.container_id.as_deref())
        .and_then(|id| id.strip_prefix("containerd://"))
        .with_context(|| format!("{container} of the pod has no containerd ID"))
}

/// Makes a node schedulable again when dropped: a drained node must not stay cordoned for the
/// scenarios after this one, whatever happened.
pub struct Uncordon {
    pub node: String,
    pub kubeconfig: std::path::PathBuf,
}

impl Drop for Uncordon {
    fn drop(&mut self) {
        let node = self.node.clone();
        crate::control_plane::supervisor::clean_up_from_drop(
            self.kubeconfig.clone(),
            |client| async move {
                let _ = Api::<k8s_openapi::api::core::v1::Node>::all(client)
                    .patch(
                        &node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"unschedulable": false}})),
                    )
                    .await;
            },
        );
    }
}
