//! The control plane tests run against: started once per test process (the
//! `baton-control-plane` binary, stopped when the process exits), or an existing cluster named
//! by `E2E_KUBECONFIG`.

pub mod supervisor;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, anyhow, bail};
pub use supervisor::{ASSETS_ENV, Handshake, OLDEST_ASSETS_ENV, SupervisorCommand};

use crate::process::{Handshaken, spawn_handshaken, workspace_binary};

/// Environment variable naming the kubeconfig of an existing cluster (kind, k3d…) to use
/// instead of starting a local control plane.
pub const EXISTING_CLUSTER_ENV: &str = "E2E_KUBECONFIG";

/// A command of the newest release's binaries' folder (`install.sh` builds or links kubectl
/// and helm there), else the one of that name on `PATH`: for tests that run it with no control
/// plane (`helm template`, `kubectl kustomize`).
pub fn tool(name: &str) -> PathBuf {
    Some(supervisor::assets_dir().join(name))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// A running Kubernetes control plane shared by the tests of one process.
#[derive(Debug)]
pub struct ControlPlane {
    handshake: Handshake,
    /// The kubectl matching its release: the one in its binaries' folder (install.sh builds one
    /// next to the API server), else the one on `PATH`.
    kubectl: PathBuf,
    local: bool,
    /// Only a control plane of its own may have its API server stopped: the shared one serves
    /// every test of the process at once.
    dedicated: bool,
    /// Started for real nodes' pods too (`--for-real-nodes`).
    serves_pods: bool,
    /// Its stdin is kept open for the life of the control plane (the supervisor stops when it
    /// closes); commands are written there and answered on its stdout.
    supervisor: Option<Arc<Mutex<Supervisor>>>,
}

#[derive(Debug)]
struct Supervisor {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();
/// Set before the shared control plane starts when this process runs real nodes.
static FOR_REAL_NODES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static OLDEST: OnceLock<ControlPlane> = OnceLock::new();

impl ControlPlane {
    /// The control plane of this test process, started on first use.
    ///
    /// Clients are made per call, never cached here: each `#[tokio::test]` has its own runtime
    /// and a client outliving its runtime breaks.
    pub async fn shared() -> &'static ControlPlane {
        if let Some(existing) = SHARED.get() {
            return existing;
        }
        tokio::task::spawn_blocking(|| {
            SHARED.get_or_init(|| match Self::start(false, None) {
                Ok(control_plane) => control_plane,
                Err(error) => panic!("starting the test control plane: {error:#}"),
            })
        })
        .await
        .expect("starting the control plane panicked")
    }

    /// The control plane of this test process, serving the pods of real nodes too
    /// ([`supervisor::Audience::Pods`]): what [`crate::real_nodes::RealNodes::shared`] joins.
    /// Panics if the process already started its control plane for the host alone: a test
    /// binary with real nodes asks for them before anything else.
    pub async fn shared_for_real_nodes() -> &'static ControlPlane {
        FOR_REAL_NODES.store(true, std::sync::atomic::Ordering::SeqCst);
        let control_plane = Self::shared().await;
        assert!(
            control_plane.serves_pods || !control_plane.local,
            "this process started its control plane before asking for real nodes, so their pods cannot reach it: ask for RealNodes::shared() first"
        );
        control_plane
    }

    /// A control plane for the calling test alone, stopped when dropped: for a test that stops
    /// its API server ([`stop_apiserver`](Self::stop_apiserver)). Needs the local control plane.
    pub async fn dedicated() -> ControlPlane {
        if std::env::var_os(EXISTING_CLUSTER_ENV).is_some() {
            panic!("a dedicated control plane is started locally; unset {EXISTING_CLUSTER_ENV}");
        }
        tokio::task::spawn_blocking(|| Self::start(true, None))
            .await
            .expect("starting the control plane panicked")
            .unwrap_or_else(|error| panic!("starting a dedicated control plane: {error:#}"))
    }

    /// A second control plane of this test process, on the oldest Kubernetes release baton
    /// supports: the binaries of the folder [`OLDEST_ASSETS_ENV`] names (what
    /// `tests/control-plane/install.sh --oldest` prints; `scripts/test.sh` sets it). Started on
    /// first use; fails loudly when the variable or a binary is missing, never skips.
    pub async fn oldest() -> &'static ControlPlane {
        if let Some(existing) = OLDEST.get() {
            return existing;
        }
        let Some(dir) = std::env::var_os(OLDEST_ASSETS_ENV) else {
            panic!(
                "{OLDEST_ASSETS_ENV} is not set: it names the oldest supported Kubernetes's binaries, \
                 export {OLDEST_ASSETS_ENV}=$(tests/control-plane/install.sh --oldest) (scripts/test.sh does)"
            );
        };
        let dir = PathBuf::from(dir);
        tokio::task::spawn_blocking(move || {
            OLDEST.get_or_init(|| match Self::start(false, Some(&dir)) {
                Ok(control_plane) => control_plane,
                Err(error) => panic!(
                    "starting the control plane of the oldest supported Kubernetes from {}: {error:#}",
                    dir.display()
                ),
            })
        })
        .await
        .expect("starting the control plane panicked")
    }

    /// `assets`: the folder of the binaries to run, else the newest release's.
    fn start(dedicated: bool, assets: Option<&Path>) -> anyhow::Result<Self> {
        if !dedicated
            && assets.is_none()
            && let Some(kubeconfig) = std::env::var_os(EXISTING_CLUSTER_ENV)
        {
            return Ok(Self::existing(PathBuf::from(kubeconfig)));
        }
        let binary = workspace_binary("baton-control-plane")?;
        let mut command = Command::new(&binary);
        command.arg("--until-stdin-closes");
        if let Some(assets) = assets {
            command.arg("--assets").arg(assets);
        }
        let serves_pods = !dedicated
            && assets.is_none()
            && FOR_REAL_NODES.load(std::sync::atomic::Ordering::SeqCst);
        if serves_pods {
            command.arg("--for-real-nodes");
        }
        let assets_dir = assets.map_or_else(supervisor::assets_dir, Path::to_path_buf);
        let kubectl = Some(assets_dir.join("kubectl"))
            .filter(|kubectl| kubectl.is_file())
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        let started: Handshaken<Handshake> = spawn_handshaken(command, "baton-control-plane")?;
        let Handshaken {
            handshake,
            child,
            stdin,
            stdout,
        } = started;
        Ok(Self {
            handshake,
            kubectl,
            local: true,
            dedicated,
            serves_pods,
            supervisor: Some(Arc::new(Mutex::new(Supervisor {
                _child: child,
                stdin,
                stdout,
            }))),
        })
    }

    /// Kills kube-apiserver (etcd and kube-controller-manager keep running): every client gets
    /// connection errors until [`start_apiserver`](Self::start_apiserver). Dedicated only.
    pub async fn stop_apiserver(&self) -> anyhow::Result<()> {
        self.command(SupervisorCommand::StopApiserver).await
    }

    /// Starts kube-apiserver again with the same flags, port, certificates and etcd; returns
    /// once it answers `/readyz`. Dedicated only.
    pub async fn start_apiserver(&self) -> anyhow::Result<()> {
        self.command(SupervisorCommand::StartApiserver).await
    }

    async fn command(&self, command: SupervisorCommand) -> anyhow::Result<()> {
        let Some(supervisor) = self.supervisor.clone().filter(|_| self.dedicated) else {
            bail!(
                "{} needs a dedicated local control plane (ControlPlane::dedicated)",
                command.line()
            );
        };
        let answer = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
            let mut supervisor = supervisor
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            writeln!(supervisor.stdin, "{}", command.line())?;
            supervisor.stdin.flush()?;
            let mut answer = String::new();
            supervisor.stdout.read_line(&mut answer)?;
            Ok(answer)
        })
        .await
        .context("the control plane command panicked")?
        .with_context(|| format!("sending {} to the control plane", command.line()))?;
        match answer.trim() {
            "ok" => Ok(()),
            "" => bail!("the control plane exited during {}", command.line()),
            error => bail!("{}: {error}", command.line()),
        }
    }

    fn existing(kubeconfig: PathBuf) -> Self {
        Self {
            handshake: Handshake {
                server: String::new(),
                version: String::new(),
                kubeconfig,
                restricted_kubeconfig: PathBuf::new(),
                service_account_kubeconfigs: Default::default(),
                ca_file: PathBuf::new(),
                webhook_client_ca_file: PathBuf::new(),
                dir: PathBuf::new(),
            },
            kubectl: PathBuf::from("kubectl"),
            local: false,
            dedicated: false,
            serves_pods: false,
            supervisor: None,
        }
    }

    /// Whether this is the local control plane (whose restricted identities exist).
    pub fn is_local(&self) -> bool {
        self.local
    }

    /// Kubeconfig of a cluster admin: pass it as `KUBECONFIG` to spawned binaries.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.handshake.kubeconfig
    }

    /// The kubectl to run against it: of its own release when install.sh built one (kubectl
    /// supports one minor version of skew either way), else the one on `PATH`.
    pub fn kubectl(&self) -> &Path {
        &self.kubectl
    }

    /// Everything the control plane told about itself.
    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// A cluster-admin client.
    pub async fn admin_client(&self) -> kube::Client {
        supervisor::client_from(&self.handshake.kubeconfig)
            .await
            .expect("a client for the admin kubeconfig")
    }

    /// Kubeconfig of a user with no RBAC bindings at all.
    pub fn restricted_kubeconfig(&self) -> anyhow::Result<&Path> {
        self.require_local()?;
        Ok(&self.handshake.restricted_kubeconfig)
    }

    /// Kubeconfig authenticating as `system:serviceaccount:<namespace>:<name>`.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> anyhow::Result<&Path> {
        self.require_local()?;
        self.handshake
            .service_account_kubeconfigs
            .get(&format!("{namespace}/{name}"))
            .map(PathBuf::as_path)
            .ok_or_else(|| anyhow!("the control plane has no token for {namespace}/{name}"))
    }

    fn require_local(&self) -> anyhow::Result<()> {
        if self.local {
            Ok(())
        } else {
            Err(anyhow!(
                "this needs the local control plane's token file; unset {EXISTING_CLUSTER_ENV}"
            ))
        }
    }
}
