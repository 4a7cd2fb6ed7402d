//! Starts etcd, kube-apiserver and kube-controller-manager on free loopback ports and keeps
//! them running until told to stop. Runs inside the `baton-control-plane` binary so that the
//! processes it starts die with it: every child is started through `setpriv --pdeathsig KILL`,
//! and the binary stops when its parent (a test process) closes its stdin.
//!
//! Its parent can also send [`Command`]s, one per line on stdin, each answered by one line on
//! stdout (`ok` or `error: …`): stopping kube-apiserver (an outage, as during a control-plane
//! upgrade) and starting it again with the same flags, port, certificates and etcd.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The environment variable naming the folder of the Kubernetes binaries every test runs on
/// (envtest's convention): what `tests/control-plane/install.sh` prints.
pub const ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";
/// The environment variable naming the folder of the oldest supported Kubernetes's control
/// plane: what `tests/control-plane/install.sh --oldest` prints.
pub const OLDEST_ASSETS_ENV: &str = "E2E_OLDEST_KUBERNETES_ASSETS";
/// The cache folder `install.sh` builds the newest release into (its `K8S_VERSION` and
/// `BUILD_REVISION`), used when [`ASSETS_ENV`] is not set.
pub const DEFAULT_ASSETS_FOLDER: &str = "kubernetes-1.37.2-r1/bin";

/// The service accounts baton's manifests define (deploy/base's two, and deploy/member-cluster's
/// identity of the hub's controller in a member cluster); the token file maps a token to each
/// so RBAC tests can act as them.
pub const SERVICE_ACCOUNTS: [(&str, &str); 3] = [
    ("baton-system", "baton-controller"),
    ("baton-system", "baton-webhook"),
    ("baton-system", "baton-member"),
];

/// The binaries the control plane runs.
#[derive(Debug, Clone)]
pub struct Assets {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
}

/// The folder of the newest release's binaries: `KUBEBUILDER_ASSETS` (envtest's convention),
/// else the cache `install.sh` fills.
pub fn assets_dir() -> PathBuf {
    match std::env::var_os(ASSETS_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => cache_dir().join(DEFAULT_ASSETS_FOLDER),
    }
}

impl Assets {
    /// The binaries of [`assets_dir`].
    pub fn locate() -> anyhow::Result<Self> {
        Self::in_dir(&assets_dir())
    }

    /// The binaries in `dir`, which must hold `etcd`, `kube-apiserver` and
    /// `kube-controller-manager`.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        let assets = Self {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
            kube_controller_manager: dir.join("kube-controller-manager"),
        };
        for binary in [
            &assets.etcd,
            &assets.kube_apiserver,
            &assets.kube_controller_manager,
        ] {
            if !binary.is_file() {
                bail!(
                    "{} not found: run tests/control-plane/install.sh (builds it once) or set {ASSETS_ENV}",
                    binary.display()
                );
            }
        }
        Ok(assets)
    }
}

/// Where `install.sh` caches its builds (`E2E_CACHE_DIR`, else `~/.cache/baton`).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("E2E_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("baton")
}

/// What the supervisor prints (one JSON line on stdout) once the API server is ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handshake {
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// What the API server says it is (`/version`'s `gitVersion`, e.g. `v1.37.2`).
    pub version: String,
    /// Kubeconfig of a cluster admin (`system:masters`).
    pub kubeconfig: PathBuf,
    /// Kubeconfig of user `restricted`, who has no RBAC bindings.
    pub restricted_kubeconfig: PathBuf,
    /// Kubeconfig per service account in [`SERVICE_ACCOUNTS`], keyed `namespace/name`.
    pub service_account_kubeconfigs: BTreeMap<String, PathBuf>,
    /// PEM of the CA that signed the API server's certificate.
    pub ca_file: PathBuf,
    /// PEM of the CA that signed the client certificate the API server presents to every
    /// admission webhook (its `--admission-control-config-file`): what a webhook verifying
    /// its callers trusts (`webhook.client_ca_file`).
    #[serde(default)]
    pub webhook_client_ca_file: PathBuf,
    /// Folder holding everything above; removed on exit.
    pub dir: PathBuf,
}

/// What a parent can ask of a running supervisor, one per line on its stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SupervisorCommand {
    /// Kill kube-apiserver and wait until it is gone (etcd and the rest keep running).
    StopApiserver,
    /// Start kube-apiserver again, exactly as before, and wait until it is ready.
    StartApiserver,
}

impl SupervisorCommand {
    /// The line sent for this command.
    pub fn line(self) -> &'static str {
        match self {
            SupervisorCommand::StopApiserver => "stop-apiserver",
            SupervisorCommand::StartApiserver => "start-apiserver",
        }
    }

    fn parse(line: &str) -> Option<Self> {
        [Self::StopApiserver, Self::StartApiserver]
            .into_iter()
            .find(|command| command.line() == line.trim())
    }
}

/// How the supervisor is asked to stop.
#[derive(Debug, Clone, Copy)]
pub enum StopWhen {
    /// SIGINT or SIGTERM (the demo).
    Signal,
    /// Stdin closes, or a signal (tests: the parent process exiting closes the pipe).
    StdinClosesOrSignal,
}

/// Whether pods of real nodes will talk to the control plane (`--for-real-nodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Only processes of this machine, on its loopback: the simulator's tests.
    Host,
    /// Pods too, as in a cluster: the API server listens on every address and advertises one
    /// of this machine's that pods route to (the `kubernetes` Service's endpoints, kept by the
    /// API server), pods get their service account's token and the cluster's CA (ServiceAccount
    /// admission, the `serviceaccount` and `root-ca-cert-publisher` controllers), and Services
    /// get EndpointSlices (the `endpointslice` controller) for kube-proxy to route by. Not the
    /// default: ServiceAccount admission refuses a pod whose service account does not exist
    /// yet, which the simulator's tests, creating pods the moment their namespace exists, would
    /// race against.
    Pods,
}

/// The IPv4 address this machine's traffic leaves by (its default route's source), which its
/// pods, routed through their bridges to this machine, reach it at. No packet is sent: a
/// connected UDP socket only picks the route.
pub fn host_address() -> anyhow::Result<std::net::Ipv4Addr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    socket
        .connect("203.0.113.1:9")
        .or_else(|_| socket.connect("10.255.255.254:9"))
        .context("this machine has no route out: pods would have no address of it to reach")?;
    match socket.local_addr()?.ip() {
        std::net::IpAddr::V4(address) if !address.is_loopback() && !address.is_unspecified() => {
            Ok(address)
        }
        other => bail!("this machine's route out leaves from {other}, which pods cannot reach"),
    }
}

/// Runs the control plane until asked to stop; prints the [`Handshake`] when ready.
pub async fn run(assets: Assets, stop_when: StopWhen, audience: Audience) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("baton-control-plane-")
        .tempdir_in(scratch_root())
        .context("creating the control plane's folder")?;
    let root = dir.path().to_path_buf();
    let outcome = run_in(&assets, stop_when, audience, &root).await;
    if outcome.is_err() {
        // Keep the logs of a failure for whoever reads the error.
        let kept = dir.keep();
        eprintln!("control plane logs kept in {}", kept.display());
    }
    outcome
}

async fn run_in(
    assets: &Assets,
    stop_when: StopWhen,
    audience: Audience,
    root: &Path,
) -> anyhow::Result<()> {
    let root = root.to_path_buf();
    let started = Instant::now();

    let etcd_client = free_port()?;
    let etcd_peer = free_port()?;
    let api_port = free_port()?;
    let server = format!("https://127.0.0.1:{api_port}");

    let host = match audience {
        Audience::Host => None,
        Audience::Pods => Some(host_address()?),
    };
    let pki = Pki::generate(&root, host)?;
    let tokens = Tokens::write(&root)?;

    let mut etcd = spawn(
        &assets.etcd,
        &[
            format!("--data-dir={}", root.join("etcd").display()),
            "--name=baton".into(),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=baton=http://127.0.0.1:{etcd_peer}"),
            "--log-level=warn".into(),
        ],
        &root.join("etcd.log"),
    )?;
    let reach = match host {
        // The `kubernetes` Service's endpoints would name the advertised address, and a
        // loopback one is refused for them: nothing here reaches the API server through that
        // Service, so no endpoints are kept.
        None => vec![
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
        ],
        // Pods reach it at 10.0.0.1:443, which kube-proxy (on the real nodes) sends to these
        // endpoints: this address and the port below.
        Some(host) => vec![
            "--bind-address=0.0.0.0".to_owned(),
            format!("--advertise-address={host}"),
            "--endpoint-reconciler-type=lease".into(),
        ],
    };
    let mut apiserver_args = vec![format!("--etcd-servers=http://127.0.0.1:{etcd_client}")];
    apiserver_args.extend(reach);
    apiserver_args.extend([
        format!("--secure-port={api_port}"),
        format!("--cert-dir={}", root.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--token-auth-file={}", tokens.file.display()),
        "--authorization-mode=RBAC".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!(
            "--service-account-key-file={}",
            pki.service_account_public_key.display()
        ),
        format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key.display()
        ),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        // The API server authenticates itself to webhooks with a client certificate, as
        // docs/operations.md shows a cluster administrator how to.
        format!(
            "--admission-control-config-file={}",
            pki.admission_config.display()
        ),
        "--allow-privileged=true".into(),
        "--v=1".into(),
    ]);
    let apiserver_log = root.join("kube-apiserver.log");
    let mut apiserver = spawn(&assets.kube_apiserver, &apiserver_args, &apiserver_log)?;

    let ca_data = std::fs::read(&pki.ca_cert)?;
    let kubeconfig = write_kubeconfig(&root, "admin", &server, &ca_data, &tokens.admin)?;
    let restricted_kubeconfig =
        write_kubeconfig(&root, "restricted", &server, &ca_data, &tokens.restricted)?;
    let mut service_account_kubeconfigs = BTreeMap::new();
    for ((namespace, name), token) in SERVICE_ACCOUNTS.iter().zip(&tokens.service_accounts) {
        let path = write_kubeconfig(
            &root,
            &format!("sa-{namespace}-{name}"),
            &server,
            &ca_data,
            token,
        )?;
        service_account_kubeconfigs.insert(format!("{namespace}/{name}"), path);
    }

    wait_ready(
        &kubeconfig,
        &mut [("etcd", &mut etcd), ("kube-apiserver", &mut apiserver)],
        &root,
    )
    .await?;

    let version = server_version(&kubeconfig)
        .await
        .context("asking the API server its version")?;

    let mut controllers = "statefulset,replicaset,deployment,garbagecollector,namespace".to_owned();
    if host.is_some() {
        // What pods on real nodes need around them: their tokens, the API server's CA, the
        // Service endpoints, and disruption budgets' status (without it the API server
        // refuses every eviction a PodDisruptionBudget covers); Jobs run to their end (a Job
        // health check's), and quotas counted, so the API server enforces them.
        controllers.push_str(
            ",serviceaccount,root-ca-cert-publisher,endpointslice,disruption,job,resourcequota",
        );
    }
    let controller_manager = spawn(
        &assets.kube_controller_manager,
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect=false".into(),
            format!("--controllers={controllers}"),
            // What root-ca-cert-publisher puts in every namespace's kube-root-ca.crt, which
            // pods mount beside their token to trust the API server.
            format!("--root-ca-file={}", pki.ca_cert.display()),
            "--secure-port=0".into(),
            "--concurrent-statefulset-syncs=10".into(),
            // The default 20 QPS would take minutes to create the pods of a large benchmark.
            "--kube-api-qps=500".into(),
            "--kube-api-burst=1000".into(),
            "--v=1".into(),
        ],
        &root.join("kube-controller-manager.log"),
    )?;

    let handshake = Handshake {
        server,
        version,
        kubeconfig,
        restricted_kubeconfig,
        service_account_kubeconfigs,
        ca_file: pki.ca_cert.clone(),
        webhook_client_ca_file: pki.webhook_client_ca_cert.clone(),
        dir: root.clone(),
    };
    match stop_when {
        StopWhen::StdinClosesOrSignal => println!("{}", serde_json::to_string(&handshake)?),
        StopWhen::Signal => println!(
            "\nA local Kubernetes {} control plane is running (no kubelet: pods stay Pending).\n\n  export KUBECONFIG={}\n  kubectl get namespaces\n\nPress Ctrl-C to stop it; everything it wrote is removed.\n",
            handshake.version,
            handshake.kubeconfig.display()
        ),
    }
    eprintln!(
        "control plane (Kubernetes {}) ready in {:.1}s at {}; logs in {}",
        handshake.version,
        started.elapsed().as_secs_f64(),
        handshake.server,
        root.display()
    );

    let mut running = Running {
        etcd,
        apiserver: Some(apiserver),
        controller_manager,
        kube_apiserver: assets.kube_apiserver.clone(),
        apiserver_args,
        apiserver_log,
        kubeconfig: handshake.kubeconfig.clone(),
        root: root.clone(),
    };
    let outcome = running.serve(stop_when).await;
    running.kill_all().await;
    outcome
}

/// The running processes, and what it takes to start kube-apiserver again.
struct Running {
    etcd: Child,
    /// `None` while stopped on command.
    apiserver: Option<Child>,
    controller_manager: Child,
    kube_apiserver: PathBuf,
    apiserver_args: Vec<String>,
    apiserver_log: PathBuf,
    kubeconfig: PathBuf,
    root: PathBuf,
}

impl Running {
    /// Serves commands until asked to stop; fails when a process exits unexpectedly.
    async fn serve(&mut self, stop_when: StopWhen) -> anyhow::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut commands = match stop_when {
            StopWhen::Signal => None,
            StopWhen::StdinClosesOrSignal => Some(BufReader::new(tokio::io::stdin()).lines()),
        };
        loop {
            let next_line = async {
                match commands.as_mut() {
                    Some(lines) => lines.next_line().await,
                    None => std::future::pending().await,
                }
            };
            let apiserver_exited = async {
                match self.apiserver.as_mut() {
                    Some(apiserver) => apiserver.wait().await,
                    None => std::future::pending().await,
                }
            };
            let line = tokio::select! {
                _ = terminate.recv() => return Ok(()),
                _ = interrupt.recv() => return Ok(()),
                line = next_line => line,
                status = self.etcd.wait() => bail!("etcd exited: {status:?}"),
                status = apiserver_exited => bail!("kube-apiserver exited: {status:?}"),
                status = self.controller_manager.wait() => bail!("kube-controller-manager exited: {status:?}"),
            };
            // Stdin closed (or unreadable): the parent is gone.
            let Ok(Some(line)) = line else { return Ok(()) };
            let answer = match SupervisorCommand::parse(&line) {
                Some(command) => match self.run_command(command).await {
                    Ok(()) => "ok".to_owned(),
                    Err(error) => format!("error: {error:#}"),
                },
                None => format!("error: unknown command {:?}", line.trim()),
            };
            eprintln!("control plane: {} -> {answer}", line.trim());
            println!("{answer}");
        }
    }

    /// Stops everything, dependents first.
    async fn kill_all(&mut self) {
        let children = [
            Some(&mut self.controller_manager),
            self.apiserver.as_mut(),
            Some(&mut self.etcd),
        ];
        for child in children.into_iter().flatten() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    async fn run_command(&mut self, command: SupervisorCommand) -> anyhow::Result<()> {
        match command {
            SupervisorCommand::StopApiserver => {
                let Some(mut apiserver) = self.apiserver.take() else {
                    bail!("kube-apiserver is already stopped");
                };
                apiserver.start_kill()?;
                apiserver.wait().await?;
                Ok(())
            }
            SupervisorCommand::StartApiserver => {
                if self.apiserver.is_some() {
                    bail!("kube-apiserver is already running");
                }
                let mut apiserver = spawn(
                    &self.kube_apiserver,
                    &self.apiserver_args,
                    &self.apiserver_log,
                )?;
                let ready = wait_ready(
                    &self.kubeconfig,
                    &mut [("etcd", &mut self.etcd), ("kube-apiserver", &mut apiserver)],
                    &self.root,
                )
                .await;
                self.apiserver = Some(apiserver);
                ready
            }
        }
    }
}

/// `/dev/shm` keeps etcd's fsyncs off the disk when it exists.
fn scratch_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Starts `binary` with `args`, appending its output to `log` (a restart keeps the earlier run's).
pub(crate) fn spawn(binary: &Path, args: &[String], log: &Path) -> anyhow::Result<Child> {
    spawn_with_env(binary, args, log, &[])
}

/// As [`spawn`], with `env` added to the environment.
pub(crate) fn spawn_with_env(
    binary: &Path,
    args: &[String],
    log: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Command::new("setpriv")
        .arg("--pdeathsig")
        .arg("KILL")
        .arg("--")
        .arg(binary)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (needs setpriv from util-linux)",
                binary.display()
            )
        })
}

async fn wait_ready(
    kubeconfig: &Path,
    children: &mut [(&str, &mut Child)],
    root: &Path,
) -> anyhow::Result<()> {
    let client = client_from(kubeconfig).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for (name, child) in children.iter_mut() {
            if let Some(status) = child.try_wait()? {
                let log = root.join(format!("{name}.log"));
                bail!(
                    "{name} exited during startup ({status}); last lines of {}:\n{}",
                    log.display(),
                    tail(&log, 15)
                );
            }
        }
        let request = http::Request::get("/readyz").body(Vec::new())?;
        if let Ok(Ok(body)) =
            tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver not ready after 120s; logs in {}",
                root.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `/version`'s `gitVersion`: what the binaries were built as (`install.sh` sets it).
async fn server_version(kubeconfig: &Path) -> anyhow::Result<String> {
    let client = client_from(kubeconfig).await?;
    Ok(client.apiserver_version().await?.git_version)
}

pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `cleanup` with a client for `kubeconfig` on a thread with a runtime of its own, and
/// waits for it: for `Drop` impls, which may run while the test's runtime is shutting down and
/// can await nothing on it. Best effort: a failure to connect skips the cleanup.
pub fn clean_up_from_drop<F, Fut>(kubeconfig: PathBuf, cleanup: F)
where
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let cleaning = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            if let Ok(client) = client_from(&kubeconfig).await {
                cleanup(client).await;
            }
        });
    });
    let _ = cleaning.join();
}

/// A client for a kubeconfig file (not the environment's).
pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

struct Pki {
    ca_cert: PathBuf,
    webhook_client_ca_cert: PathBuf,
    admission_config: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    service_account_key: PathBuf,
    service_account_public_key: PathBuf,
}

impl Pki {
    /// `host`: an address of this machine pods reach the API server at, named in its
    /// certificate too.
    fn generate(root: &Path, host: Option<std::net::Ipv4Addr>) -> anyhow::Result<Self> {
        let pki = root.join("pki");
        std::fs::create_dir_all(&pki)?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "baton test control plane CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "10.0.0.1".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ];
        names.extend(host.map(|host| host.to_string()));
        let mut serving_params = CertificateParams::new(names)?;
        serving_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let serving = serving_params.signed_by(&serving_key, &issuer)?;

        // A CA of its own for the API server's webhook client certificate: a webhook trusting
        // it trusts the API server alone, not every user with a certificate.
        let client_ca_key = KeyPair::generate()?;
        let mut client_ca_params = CertificateParams::new(Vec::<String>::new())?;
        client_ca_params
            .distinguished_name
            .push(DnType::CommonName, "baton test webhook client CA");
        client_ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        client_ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let client_ca = client_ca_params.self_signed(&client_ca_key)?;
        let client_issuer = rcgen::Issuer::new(client_ca_params, client_ca_key);
        let client_key = KeyPair::generate()?;
        let mut client_params = CertificateParams::new(Vec::<String>::new())?;
        client_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver-webhook-client");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = client_params.signed_by(&client_key, &client_issuer)?;
        let webhook_kubeconfig = pki.join("webhook-client.kubeconfig");
        let encode = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
        std::fs::write(
            &webhook_kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
                encode(client.pem()),
                encode(client_key.serialize_pem()),
            ),
        )?;
        let admission_config = pki.join("admission-config.yaml");
        let webhook_admission = format!(
            "    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n      kind: WebhookAdmissionConfiguration\n      kubeConfigFile: {}\n",
            webhook_kubeconfig.display()
        );
        std::fs::write(
            &admission_config,
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n  - name: ValidatingAdmissionWebhook\n{webhook_admission}  - name: MutatingAdmissionWebhook\n{webhook_admission}"
            ),
        )?;

        let service_account_key = KeyPair::generate()?;
        let paths = Self {
            ca_cert: pki.join("ca.crt"),
            webhook_client_ca_cert: pki.join("webhook-client-ca.crt"),
            admission_config,
            serving_cert: pki.join("apiserver.crt"),
            serving_key: pki.join("apiserver.key"),
            service_account_key: pki.join("service-account.key"),
            service_account_public_key: pki.join("service-account.pub"),
        };
        std::fs::write(&paths.ca_cert, ca.pem())?;
        std::fs::write(&paths.webhook_client_ca_cert, client_ca.pem())?;
        std::fs::write(&paths.serving_cert, serving.pem())?;
        std::fs::write(&paths.serving_key, serving_key.serialize_pem())?;
        std::fs::write(
            &paths.service_account_key,
            service_account_key.serialize_pem(),
        )?;
        std::fs::write(
            &paths.service_account_public_key,
            service_account_key.public_key_pem(),
        )?;
        Ok(paths)
    }
}

struct Tokens {
    file: PathBuf,
    admin: String,
    restricted: String,
    service_accounts: Vec<String>,
}

impl Tokens {
    fn write(root: &Path) -> anyhow::Result<Self> {
        let admin = random_token()?;
        let restricted = random_token()?;
        let mut lines = vec![
            format!("{admin},admin,admin,\"system:masters,system:authenticated\""),
            format!("{restricted},restricted,restricted,\"system:authenticated\""),
        ];
        let mut service_accounts = Vec::new();
        for (namespace, name) in SERVICE_ACCOUNTS {
            let token = random_token()?;
            let user = format!("system:serviceaccount:{namespace}:{name}");
            lines.push(format!(
                "{token},{user},{user},\"system:serviceaccounts,system:serviceaccounts:{namespace},system:authenticated\""
            ));
            service_accounts.push(token);
        }
        let file = root.join("tokens.csv");
        std::fs::write(&file, lines.join("\n") + "\n")?;
        Ok(Self {
            file,
            admin,
            restricted,
            service_accounts,
        })
    }
}

fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 24];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write_kubeconfig(
    root: &Path,
    user: &str,
    server: &str,
    ca_pem: &[u8],
    token: &str,
) -> anyhow::Result<PathBuf> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: baton-test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}@baton-test\n  context:\n    cluster: baton-test\n    user: {user}\n    namespace: default\ncurrent-context: {user}@baton-test\n"
    );
    let path = root.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, text)?;
    Ok(path)
}
