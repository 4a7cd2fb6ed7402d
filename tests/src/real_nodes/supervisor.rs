//! Starts the real nodes (one containerd and one kubelet per zone, and a kube-scheduler) against
//! a running control plane and keeps them until told to stop. Runs inside the
//! `baton-real-nodes` binary for the same reason the control plane runs in its own: every child
//! is started through `setpriv --pdeathsig KILL` and dies with it, and the binary stops when its
//! parent (a test process) closes its stdin.
//!
//! What pods leave behind outlives those processes: containers (kept by their shims), overlay
//! and shm mounts, network namespaces, bridges. [`clean_up`] removes all of it, before the
//! nodes start (a run that was killed left it) and after they stop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::control_plane::supervisor::{
    assets_dir, client_from, free_port, spawn, spawn_with_env, tail,
};

/// The zones, one node each.
pub const ZONES: [&str; 3] = ["a", "b", "c"];
/// The label the nodes carry and the pods' node affinity selects on.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The sandbox image containerd is configured with (imported, never pulled).
pub const PAUSE_IMAGE: &str = "baton.test/pause:1";
/// Where the nodes keep their state unless `E2E_REAL_NODES_DIR` says otherwise: a fixed place,
/// so a run cleans up what a killed run left.
pub const DEFAULT_ROOT: &str = "/var/lib/baton-e2e";
/// Prefix of the nodes' CNI network names (`baton-zone-a`…).
const NETWORK_PREFIX: &str = "baton-zone-";
/// Where libcni caches each attachment's result (`<network>-<container>-<interface>`).
const CNI_RESULTS_DIR: &str = "/var/lib/cni/results";
/// Prefix of the CNI network namespaces containerd creates (`/run/netns/cni-…`).
const NETNS_DIR: &str = "/run/netns";
/// Where kubelets wrote container logs before `podLogsDir` (each node now has its own folder):
/// what runs of older harnesses left there is still cleaned up.
pub const POD_LOGS_DIR: &str = "/var/log/pods";
/// Test namespaces of real pods start with this prefix, so their pod logs can be told apart.
pub const NAMESPACE_PREFIX: &str = "real-";

/// The binaries the nodes run.
#[derive(Debug, Clone)]
pub struct NodeAssets {
    pub kubelet: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_proxy: PathBuf,
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    /// containerd finds its runc shim on `PATH`: this folder goes first there.
    pub bin_dir: PathBuf,
    pub runc: PathBuf,
    pub cni_bin_dir: PathBuf,
}

impl NodeAssets {
    /// The kubelet, kube-scheduler, containerd (with ctr and its runc shim) and runc
    /// `install.sh` builds into or links into the control plane's folder (`KUBEBUILDER_ASSETS`,
    /// else its cache), and Debian's CNI plugins.
    pub fn locate() -> anyhow::Result<Self> {
        let dir = assets_dir();
        let assets = Self {
            kubelet: dir.join("kubelet"),
            kube_scheduler: dir.join("kube-scheduler"),
            kube_proxy: dir.join("kube-proxy"),
            containerd: dir.join("containerd"),
            ctr: dir.join("ctr"),
            runc: dir.join("runc"),
            bin_dir: dir.clone(),
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
        };
        let shim = dir.join("containerd-shim-runc-v2");
        for binary in [
            &assets.kubelet,
            &assets.kube_scheduler,
            &assets.kube_proxy,
            &assets.containerd,
            &assets.ctr,
            &shim,
            &assets.runc,
        ] {
            if !binary.is_file() {
                bail!(
                    "{} not found: run tests/control-plane/install.sh (it builds the nodes' binaries once and links them into the folder it prints), or add them to the folder KUBEBUILDER_ASSETS names",
                    binary.display()
                );
            }
        }
        for plugin in ["bridge", "host-local", "loopback"] {
            if !assets.cni_bin_dir.join(plugin).is_file() {
                bail!(
                    "CNI plugin {plugin} not found in {}: run tests/control-plane/install.sh",
                    assets.cni_bin_dir.display()
                );
            }
        }
        Ok(assets)
    }
}

/// One node as the supervisor started it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The Node's name (`node-zone-a`…).
    pub name: String,
    /// `a`, `b` or `c`; the node is labelled `topology.kubernetes.io/zone=zone-<zone>`.
    pub zone: String,
    /// The subnet its pods' IPs come from (a bridge of its own, routed on the host).
    pub pod_subnet: String,
    /// Its folder: containerd's and the kubelet's state and logs.
    pub dir: PathBuf,
}

/// What the supervisor prints (one JSON line on stdout) once every node is Ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodesHandshake {
    pub nodes: Vec<NodeInfo>,
    /// Folder of every node's state and logs (kept until the next run cleans it).
    pub dir: PathBuf,
    /// How long starting the nodes took.
    pub startup_seconds: f64,
}

/// What to run the nodes with.
#[derive(Debug, Clone)]
pub struct NodesConfig {
    pub kubeconfig: PathBuf,
    /// Image archives (docker-archive tarballs) to import into every node's containerd.
    pub images: Vec<PathBuf>,
    pub root: PathBuf,
}

/// The node of `zone`: its name, bridge and subnet (distinct per node, so the host routes to
/// every pod directly through that node's bridge).
fn node_of(index: usize, zone: &str, root: &Path) -> NodeInfo {
    NodeInfo {
        name: format!("node-zone-{zone}"),
        zone: zone.to_owned(),
        pod_subnet: format!("10.244.{}.0/24", index + 1),
        dir: root.join(format!("zone-{zone}")),
    }
}

impl NodeInfo {
    /// Where the node's containerd answers (`ctr --address`).
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd").join("containerd.sock")
    }
}

fn bridge_of(zone: &str) -> String {
    format!("baton-{zone}")
}

/// Runs the nodes until stdin closes or a signal comes; prints the [`NodesHandshake`] when
/// every node is Ready. Cleans up after them whatever happened.
pub async fn run(assets: NodeAssets, config: NodesConfig) -> anyhow::Result<()> {
    require_root()?;
    clean_up(&config.root).context("cleaning up after an earlier run of the real nodes")?;
    let mut running = Running::default();
    let outcome = async {
        let handshake = start(&assets, &config, &mut running).await?;
        println!("{}", serde_json::to_string(&handshake)?);
        eprintln!(
            "real nodes ({} zones) ready in {:.1}s; state and logs in {}",
            handshake.nodes.len(),
            handshake.startup_seconds,
            handshake.dir.display()
        );
        running.serve().await
    }
    .await;
    running.kill_all().await;
    if let Err(error) = clean_up(&config.root) {
        eprintln!("real nodes: cleaning up after the nodes: {error:#}");
    }
    outcome
}

#[derive(Default)]
struct Running {
    /// Name, process and log of everything started, in start order.
    children: Vec<(String, Child, PathBuf)>,
}

impl Running {
    async fn serve(&mut self) -> anyhow::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let mut check = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = terminate.recv() => return Ok(()),
                _ = interrupt.recv() => return Ok(()),
                line = lines.next_line() => match line {
                    Ok(Some(_)) => {}
                    // Stdin closed (or unreadable): the parent is gone.
                    _ => return Ok(()),
                },
                _ = check.tick() => self.check_alive()?,
            }
        }
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child, log) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{name} exited ({status}); last lines of {}:\n{}",
                    log.display(),
                    tail(log, 20)
                );
            }
        }
        Ok(())
    }

    /// Stops everything, the last started (kubelets, scheduler) first.
    async fn kill_all(&mut self) {
        for (_, child, _) in self.children.iter_mut().rev() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

async fn start(
    assets: &NodeAssets,
    config: &NodesConfig,
    running: &mut Running,
) -> anyhow::Result<NodesHandshake> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.root)
        .with_context(|| format!("creating {}", config.root.display()))?;
    let nodes: Vec<NodeInfo> = ZONES
        .iter()
        .enumerate()
        .map(|(index, zone)| node_of(index, zone, &config.root))
        .collect();
    for node in &nodes {
        let socket = start_containerd(assets, node, running)
            .await
            .with_context(|| format!("starting containerd for {}", node.name))?;
        for image in &config.images {
            import_image(assets, &socket, image, node)
                .await
                .with_context(|| {
                    format!(
                        "importing {} into the containerd of {}",
                        image.display(),
                        node.name
                    )
                })?;
        }
        record_repo_digests(assets, &socket)
            .await
            .with_context(|| format!("naming the images of {} by digest", node.name))?;
        start_kubelet(assets, config, node, &socket, running)
            .with_context(|| format!("starting the kubelet of {}", node.name))?;
    }
    start_kube_proxy(assets, config, running).context("starting kube-proxy")?;
    let scheduler_log = config.root.join("kube-scheduler.log");
    let scheduler = spawn(
        &assets.kube_scheduler,
        &[
            format!("--kubeconfig={}", config.kubeconfig.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ],
        &scheduler_log,
    )
    .context("starting kube-scheduler")?;
    running
        .children
        .push(("kube-scheduler".into(), scheduler, scheduler_log));
    wait_nodes_ready(&config.kubeconfig, &nodes, running).await?;
    Ok(NodesHandshake {
        nodes,
        dir: config.root.clone(),
        startup_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Starts the node's containerd (its own root, state, socket and CNI network: a shared one
/// would give every node the same pod subnet); returns its socket once it answers.
async fn start_containerd(
    assets: &NodeAssets,
    node: &NodeInfo,
    running: &mut Running,
) -> anyhow::Result<PathBuf> {
    let dir = node.dir.join("containerd");
    let cni_conf_dir = node.dir.join("cni");
    std::fs::create_dir_all(&dir)?;
    std::fs::create_dir_all(&cni_conf_dir)?;
    let socket = node.containerd_socket();
    let gateway = node.pod_subnet.replace(".0/24", ".1");
    let network = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": format!("{NETWORK_PREFIX}{}", node.zone),
        "plugins": [{
            "type": "bridge",
            "bridge": bridge_of(&node.zone),
            "isGateway": true,
            // Pods talk to this machine and to each other only: no masquerading.
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": node.pod_subnet, "gateway": gateway}]],
                // Through the bridge for everything beyond the node's subnet: Services' cluster
                // IPs (which kube-proxy's rules on this machine translate), this machine's own
                // addresses (the API server's) and the other nodes' pods.
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": node.dir.join("ipam"),
            },
        }],
    });
    std::fs::write(
        cni_conf_dir.join("10-baton.conflist"),
        serde_json::to_vec_pretty(&network)?,
    )?;
    // containerd 2's configuration format (version 3): the CRI plugin is split into its image
    // and runtime halves.
    let toml = format!(
        r#"version = 3
root = "{root}"
state = "{state}"
# Not used by the CRI plugin; disabled so nothing is written to /opt and no snapshotter probes
# for a filesystem this machine lacks.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.blockfile"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  level = "warn"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Imported by the harness: no image is ever pulled.
    sandbox = "{pause}"

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  # Root here cannot lower an OOM score (no CAP_SYS_RESOURCE): pods get no score below
  # containerd's own, instead of the sandbox's -998 that runc would fail to set.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # cgroupfs, as the kubelet is told (it asks containerd): there is no systemd.
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        root = dir.join("root").display(),
        state = dir.join("state").display(),
        socket = socket.display(),
        pause = PAUSE_IMAGE,
        runc = assets.runc.display(),
        cni_bin = assets.cni_bin_dir.display(),
        cni_conf = cni_conf_dir.display(),
    );
    let config = dir.join("config.toml");
    std::fs::write(&config, toml)?;
    let log = node.dir.join("containerd.log");
    let path = format!(
        "{}:{}",
        assets.bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = spawn_with_env(
        &assets.containerd,
        &[format!("--config={}", config.display())],
        &log,
        &[("PATH", path.as_str())],
    )?;
    running
        .children
        .push((format!("containerd of {}", node.name), child, log.clone()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        running.check_alive()?;
        let answered = tokio::process::Command::new(&assets.ctr)
            .arg("--address")
            .arg(&socket)
            .arg("version")
            .output()
            .await
            .is_ok_and(|output| output.status.success());
        if answered {
            return Ok(socket);
        }
        if Instant::now() > deadline {
            bail!(
                "containerd did not answer on {} within 30s; last lines of {}:\n{}",
                socket.display(),
                log.display(),
                tail(&log, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn import_image(
    assets: &NodeAssets,
    socket: &Path,
    image: &Path,
    node: &NodeInfo,
) -> anyhow::Result<()> {
    let output = tokio::process::Command::new(&assets.ctr)
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(image)
        .output()
        .await
        .context("running ctr images import")?;
    if !output.status.success() {
        bail!(
            "ctr images import failed for {} ({}): {}",
            node.name,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Names every imported `repository:tag` image also `repository@<manifest digest>`, as a pull
/// through the kubelet records it, so that a pod may refer to an image by digest (as a pinned
/// install does) on nodes that cannot reach a registry.
async fn record_repo_digests(assets: &NodeAssets, socket: &Path) -> anyhow::Result<()> {
    let ctr = |args: &[&str]| {
        let mut command = tokio::process::Command::new(&assets.ctr);
        command
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io"])
            .args(args);
        command
    };
    let listed = ctr(&["images", "ls"]).output().await?;
    if !listed.status.success() {
        bail!(
            "ctr images ls failed: {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        );
    }
    for line in String::from_utf8_lossy(&listed.stdout).lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(name), Some(digest)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        // Tag references only: not the images' own ids (`sha256:…`), nor digest references.
        let Some((repository, _tag)) = name.rsplit_once(':') else {
            continue;
        };
        if name.contains('@') || name.starts_with("sha256:") {
            continue;
        }
        let by_digest = format!("{repository}@{digest}");
        let tagged = ctr(&["images", "tag", "--force", name, &by_digest])
            .output()
            .await?;
        if !tagged.status.success() {
            bail!(
                "ctr images tag {name} {by_digest} failed: {}",
                String::from_utf8_lossy(&tagged.stderr).trim()
            );
        }
    }
    Ok(())
}

/// Starts the node's kubelet. What the sandbox cannot give a kubelet is configured around
/// (tests/control-plane/README.md): no QoS cgroups or node-allocatable enforcement (three
/// kubelets share one cgroup hierarchy, and none of them owns it), cgroupfs (no systemd), swap
/// tolerated, kernel defaults not enforced, no disk-pressure eviction (a developer's nearly
/// full disk must not evict the tests' pods), no image garbage collection (the imported images
/// cannot be pulled back), no iptables utility chains.
fn start_kubelet(
    assets: &NodeAssets,
    config: &NodesConfig,
    node: &NodeInfo,
    socket: &Path,
    running: &mut Running,
) -> anyhow::Result<()> {
    let dir = node.dir.join("kubelet");
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let endpoint = format!("unix://{}", socket.display());
    let pod_logs = node.dir.join("pod-logs");
    let kubelet_config = format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: {endpoint}
imageServiceEndpoint: {endpoint}
failCgroupV1: false
podLogsDir: {pod_logs}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
evictionHard:
  memory.available: "1Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
"#,
        pod_logs = pod_logs.display(),
    );
    let config_file = dir.join("config.yaml");
    std::fs::write(&config_file, kubelet_config)?;
    let log = node.dir.join("kubelet.log");
    let child = spawn(
        &assets.kubelet,
        &[
            format!("--config={}", config_file.display()),
            format!("--kubeconfig={}", config.kubeconfig.display()),
            format!("--root-dir={}", dir.join("root").display()),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--hostname-override={}", node.name),
            format!("--node-labels={ZONE_LABEL}=zone-{}", node.zone),
            "--v=1".into(),
        ],
        &log,
    )?;
    running
        .children
        .push((format!("kubelet of {}", node.name), child, log));
    Ok(())
}

/// The pods' addresses, every node's subnet in it: what kube-proxy tells from the rest.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// Starts one kube-proxy, in iptables mode, for every node: the nodes share this machine's
/// network namespace, so one set of rules serves them all. It routes a Service's cluster IP to
/// its endpoints for pods (the `kubernetes` Service to the API server) and for this machine's
/// processes (the API server calling a webhook through its Service). It touches no sysctl
/// (conntrack limits left as they are, no `route_localnet`); its rules are removed with
/// `kube-proxy --cleanup` when the nodes stop and start.
fn start_kube_proxy(
    assets: &NodeAssets,
    config: &NodesConfig,
    running: &mut Running,
) -> anyhow::Result<()> {
    let dir = config.root.join("kube-proxy");
    std::fs::create_dir_all(&dir)?;
    let proxy_config = format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {node}
clusterCIDR: {CLUSTER_CIDR}
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:{healthz}
metricsBindAddress: 127.0.0.1:{metrics}
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
"#,
        kubeconfig = config.kubeconfig.display(),
        node = node_of(0, ZONES[0], &config.root).name,
        healthz = free_port()?,
        metrics = free_port()?,
    );
    let config_file = dir.join("config.yaml");
    std::fs::write(&config_file, proxy_config)?;
    let log = config.root.join("kube-proxy.log");
    let child = spawn(
        &assets.kube_proxy,
        &[
            format!("--config={}", config_file.display()),
            "--v=1".into(),
        ],
        &log,
    )?;
    running.children.push(("kube-proxy".into(), child, log));
    Ok(())
}

/// Removes the rules a kube-proxy left in this machine's iptables (and nftables): the nodes'
/// is the only kube-proxy here.
fn clean_up_kube_proxy() {
    let Ok(assets) = NodeAssets::locate() else {
        return;
    };
    let quietly = |command: &mut std::process::Command| {
        let _ = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    };
    quietly(std::process::Command::new(&assets.kube_proxy).arg("--cleanup"));
    // `--cleanup` keeps KUBE-FIREWALL (the kubelet shares it); no kubelet here uses it.
    for args in [
        &["-D", "INPUT", "-j", "KUBE-FIREWALL"][..],
        &["-D", "OUTPUT", "-j", "KUBE-FIREWALL"],
        &["-F", "KUBE-FIREWALL"],
        &["-X", "KUBE-FIREWALL"],
    ] {
        quietly(std::process::Command::new("iptables").args(args));
    }
}

/// Waits until every node is Ready, and lifts the `node.kubernetes.io/not-ready` taint each
/// registers with: the node lifecycle controller that would lift it does not run in the test
/// control plane (it would also evict pods when a node stops reporting, which no test wants).
async fn wait_nodes_ready(
    kubeconfig: &Path,
    nodes: &[NodeInfo],
    running: &mut Running,
) -> anyhow::Result<()> {
    let client = client_from(kubeconfig).await?;
    let api = kube::Api::<Node>::all(client);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        running.check_alive()?;
        let mut not_ready = Vec::new();
        for node in nodes {
            let Some(found) = api.get_opt(&node.name).await.ok().flatten() else {
                not_ready.push(node);
                continue;
            };
            let ready = found
                .status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
                });
            let tainted = found
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .is_some_and(|taints| !taints.is_empty());
            if ready && tainted {
                api.patch(
                    &node.name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(serde_json::json!({"spec": {"taints": null}})),
                )
                .await
                .with_context(|| format!("lifting the not-ready taint of {}", node.name))?;
            }
            if !ready || tainted {
                not_ready.push(node);
            }
        }
        if not_ready.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let node = not_ready[0];
            bail!(
                "node {} not Ready after 120s; last lines of {}:\n{}",
                node.name,
                node.dir.join("kubelet.log").display(),
                tail(&node.dir.join("kubelet.log"), 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Fails unless running as root: checked before anything else, so that is what a user without
/// it is told.
pub fn require_root() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "real nodes need root (a kubelet and containerd mount, create network namespaces and cgroups); run the real-node tests as root, as CI does"
        );
    }
    Ok(())
}

fn is_root() -> bool {
    // The effective uid, as /proc reports it (no libc: unsafe code is forbidden here).
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .and_then(|line| line.split_whitespace().nth(2))
            == Some("0")
    })
}

/// Removes what real nodes under `root` left behind, whether they stopped or were killed:
/// their processes and containers, mounts, network namespaces nothing uses any more, bridges,
/// libcni's cached results, pod logs of the tests' namespaces, and the folder itself.
/// Idempotent.
pub fn clean_up(root: &Path) -> anyhow::Result<()> {
    let root_text = root.display().to_string();
    // Kubelets, containerds and shims of an earlier run (started with our folder in their
    // arguments), then the containers: with cgroupfs and no QoS cgroups, containerd puts every
    // container of its "k8s.io" namespace in the cgroup /k8s.io/<id>.
    kill_processes(|cmdline| cmdline.contains(&root_text));
    // Before anything below can fail: stale rules would send Services' traffic nowhere.
    clean_up_kube_proxy();
    let container_cgroups = container_cgroups();
    for _ in 0..50 {
        let mut any = false;
        for cgroup in &container_cgroups {
            for pid in std::fs::read_to_string(cgroup.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
            {
                any = true;
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", pid])
                    .status();
            }
        }
        if !any {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for cgroup in &container_cgroups {
        let _ = std::fs::remove_dir(cgroup);
    }
    for namespace in container_cgroups
        .iter()
        .filter_map(|cgroup| cgroup.parent())
    {
        let _ = std::fs::remove_dir(namespace);
    }

    // Mounts under the folder (overlay root filesystems, sandbox shm), deepest first.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&root_text))
        .map(str::to_owned)
        .collect();
    mounts.reverse();
    for point in mounts {
        let status = std::process::Command::new("umount")
            .args(["--lazy", &point])
            .status()
            .context("running umount")?;
        if !status.success() {
            bail!("umount --lazy {point} failed ({status})");
        }
    }

    remove_orphaned_network_namespaces();
    for zone in ZONES {
        let bridge = bridge_of(zone);
        if Path::new("/sys/class/net").join(&bridge).exists() {
            let _ = std::process::Command::new("ip")
                .args(["link", "delete", &bridge])
                .status();
        }
    }
    // libcni's cache of each pod's network results, `<network>-<sandbox>-<interface>`: those of
    // the nodes' networks, and the loopback ones of the same sandboxes.
    let results: Vec<String> = std::fs::read_dir(CNI_RESULTS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let sandboxes: Vec<&str> = results
        .iter()
        .filter_map(|name| name.strip_prefix(NETWORK_PREFIX))
        .filter_map(|rest| rest.split('-').nth(1))
        .collect();
    for name in &results {
        let loopback_of_ours = name
            .strip_prefix("cni-loopback-")
            .and_then(|rest| rest.split('-').next())
            .is_some_and(|sandbox| sandboxes.contains(&sandbox));
        if name.starts_with(NETWORK_PREFIX) || loopback_of_ours {
            let _ = std::fs::remove_file(Path::new(CNI_RESULTS_DIR).join(name));
        }
    }
    if let Ok(entries) = std::fs::read_dir(POD_LOGS_DIR) {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(NAMESPACE_PREFIX)
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("removing {}", root.display()))?;
    }
    Ok(())
}

/// SIGKILLs every process whose command line matches, and waits for them to go.
fn kill_processes(matches: impl Fn(&str) -> bool) {
    let own = std::process::id().to_string();
    let mut victims = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|byte| byte.is_ascii_digit()) || pid == own {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        if matches(&cmdline) {
            victims.push(pid);
        }
    }
    for pid in &victims {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", pid])
            .status();
    }
    for _ in 0..50 {
        if victims
            .iter()
            .all(|pid| !Path::new("/proc").join(pid).exists())
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every container cgroup containerd's CRI plugin made, in every v1 hierarchy.
fn container_cgroups() -> Vec<PathBuf> {
    let mut cgroups = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let namespace = hierarchy.path().join("k8s.io");
        for container in std::fs::read_dir(&namespace)
            .into_iter()
            .flatten()
            .flatten()
        {
            if container.path().is_dir() {
                cgroups.push(container.path());
            }
        }
    }
    cgroups
}

/// Unmounts and removes `/run/netns/cni-*` namespaces no process is in any more: containerd
/// removes a pod's namespace when the pod is stopped through it, which a killed node never does.
fn remove_orphaned_network_namespaces() {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    let mut in_use = std::collections::HashSet::new();
    for process in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(link) = std::fs::read_link(process.path().join("ns/net")) {
            in_use.insert(link.to_string_lossy().into_owned());
        }
    }
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("cni-") {
            continue;
        }
        let inode = std::os::unix::fs::MetadataExt::ino(&match std::fs::metadata(entry.path()) {
            Ok(metadata) => metadata,
            Err(_) => continue,
        });
        if in_use.contains(&format!("net:[{inode}]")) {
            continue;
        }
        let _ = std::process::Command::new("umount")
            .arg(entry.path())
            .status();
        let _ = std::fs::remove_file(entry.path());
    }
}
