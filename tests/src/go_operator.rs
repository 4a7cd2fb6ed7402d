//! Grafana's rollout-operator, the Go operator baton replaces, run beside baton so the
//! side-by-side tests can hand both the same inputs and compare what each decides. It is the
//! real v0.38.1 binary: tests/control-plane/install.sh builds it once from the release's source
//! archive (kept beside the repository in `../shared/anchors/`) into its cache, and links it into
//! the assets folder; `E2E_ROLLOUT_OPERATOR` names a binary built elsewhere.
//!
//! It runs as a process outside the cluster, as baton's binaries do in these tests: the
//! administrator's kubeconfig, one namespace, and its webhook server on loopback serving the
//! test's certificate (its self-signed certificate would name `rollout-operator.<ns>.svc`).
//!
//! It calls pods by their DNS names (`<pod>.<service>.<namespace>.svc.<cluster domain>`), which
//! nothing resolves on a test machine; baton is told to call pods by IP instead. The Go
//! operator's pod client honours `HTTP_PROXY`, so [`PodProxy`] stands in for the cluster's DNS:
//! a forward proxy that sends each call on to the loopback IP the pod simulator gave that pod,
//! where the test's pod endpoints listen for both operators alike.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::assets_dir;
use crate::controller_support::http_status;
use crate::http_support::read_request_with_body;
use crate::process::BatonProcess;
use crate::webhook_support::{TestTls, free_port};

/// The release the suite builds and compares with.
pub const VERSION: &str = "0.38.1";

/// The variable naming a Go operator binary built elsewhere.
pub const BINARY_ENV: &str = "E2E_ROLLOUT_OPERATOR";

/// The Go operator's binary: `$E2E_ROLLOUT_OPERATOR`, else `rollout-operator` in the assets
/// folder. Missing, the error says how to get it.
pub fn binary() -> anyhow::Result<PathBuf> {
    let binary = match std::env::var_os(BINARY_ENV) {
        Some(path) => PathBuf::from(path),
        None => assets_dir().join("rollout-operator"),
    };
    if !binary.is_file() {
        bail!(
            "MISSING: Grafana's rollout-operator v{VERSION} ({}) is not built: \
             tests/control-plane/install.sh builds it from ../shared/anchors/rollout-operator-v{VERSION}.tar.gz \
             (beside the repository; E2E_ROLLOUT_OPERATOR_ARCHIVE names another), or set {BINARY_ENV} to a binary",
            binary.display()
        );
    }
    Ok(binary)
}

/// One Go rollout-operator process (its controller and its webhook server), stopped when
/// dropped.
#[derive(Debug)]
pub struct GoOperator {
    pub process: BatonProcess,
    /// The webhook server's port (HTTPS, the test's certificate).
    pub port: u16,
    /// The instrumentation server's port (`/ready`, `/metrics`).
    pub ops_port: u16,
    _files: tempfile::TempDir,
    _pods: Option<PodProxy>,
}

impl GoOperator {
    /// Starts the Go operator for `namespace` with `extra` flags (e.g. `-use-zone-tracker`),
    /// serving `tls` on a free port, and waits until `/ready` answers 200. It cannot reach pods.
    pub async fn start(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_with(control_plane, tls, namespace, extra, None).await
    }

    /// As [`GoOperator::start`], calling the pods of `namespace` where `pod_addresses` (such
    /// as [`crate::PodSimulator::pod_addresses`]) says each listens, through a [`PodProxy`].
    pub async fn start_calling_pods(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra: &[&str],
        pod_addresses: impl Fn(&str) -> Ipv4Addr + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let proxy = PodProxy::start(namespace, pod_addresses).await?;
        Self::start_with(control_plane, tls, namespace, extra, Some(proxy)).await
    }

    async fn start_with(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra: &[&str],
        mut pods: Option<PodProxy>,
    ) -> anyhow::Result<Self> {
        // A free port is released before the Go operator binds it (on every address): another
        // test process may take it first. The operator then exits saying so, and starts again
        // on other ports.
        let mut attempts = 0;
        loop {
            match Self::start_once(control_plane, tls, namespace, extra, &mut pods).await {
                Err(error)
                    if attempts < 3 && format!("{error:#}").contains("address already in use") =>
                {
                    attempts += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra: &[&str],
        pods: &mut Option<PodProxy>,
    ) -> anyhow::Result<Self> {
        let binary = binary()?;
        let files = tempfile::tempdir()?;
        let cert = files.path().join("tls.crt");
        let key = files.path().join("tls.key");
        std::fs::write(&cert, &tls.cert_pem)?;
        std::fs::write(&key, &tls.key_pem)?;
        let (port, ops_port) = (free_port()?, free_port()?);
        let kubeconfig = control_plane
            .kubeconfig_path()
            .to_str()
            .context("the kubeconfig's path is UTF-8")?
            .to_owned();
        let path = |path: &PathBuf| path.to_str().map(str::to_owned).context("UTF-8 path");
        let mut args = vec![
            // (it wants the server's URL beside a kubeconfig, though the kubeconfig has it)
            format!("-kubernetes.api-url={}", control_plane.handshake().server),
            format!("-kubernetes.config-file={kubeconfig}"),
            format!("-kubernetes.namespace={namespace}"),
            format!("-server.port={ops_port}"),
            "-server-tls.enabled=true".to_owned(),
            format!("-server-tls.port={port}"),
            "-server-tls.self-signed-cert.enabled=false".to_owned(),
            format!("-server-tls.cert-file={}", path(&cert)?),
            format!("-server-tls.key-file={}", path(&key)?),
            "-webhooks.update-ca-bundle=false".to_owned(),
            "-log.level=info".to_owned(),
        ];
        args.extend(extra.iter().map(|flag| (*flag).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // (loopback addresses, the API server's among them, are never proxied)
        let proxy = pods
            .as_ref()
            .map(|proxy| format!("http://{}", proxy.address));
        let env: Vec<(&str, &str)> = proxy
            .iter()
            .map(|proxy| ("HTTP_PROXY", proxy.as_str()))
            .collect();
        let process = BatonProcess::spawn_program_with("rollout-operator", &binary, &args, &env)?;
        let mut operator = Self {
            process,
            port,
            ops_port,
            _files: files,
            _pods: None,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while operator.ready_status().await != Some(200) {
            if operator.process.has_exited() {
                bail!(
                    "the Go rollout-operator exited before it was ready:\n{}",
                    operator.process.output()
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the Go rollout-operator did not answer /ready within 60s:\n{}",
                    operator.process.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        operator._pods = pods.take();
        Ok(operator)
    }

    /// `https://127.0.0.1:<port><path>`: where its webhooks answer.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The HTTP status of `/ready` (`None` when its instrumentation server does not answer).
    pub async fn ready_status(&self) -> Option<u16> {
        http_status(&format!("http://127.0.0.1:{}/ready", self.ops_port)).await
    }

    /// Stops it as Kubernetes would (SIGTERM), and waits at most `timeout` until it exited.
    pub async fn stop(mut self, timeout: Duration) -> anyhow::Result<()> {
        self.process.signal("TERM")?;
        tokio::time::timeout(timeout, self.process.wait())
            .await
            .context("the Go rollout-operator exits after SIGTERM")??;
        Ok(())
    }
}

/// A forward HTTP proxy resolving pods' DNS names for one namespace: a request for
/// `http://<pod>.<service>.<namespace>.svc.<domain>:<port>/<path>` is sent to `<port>` of the
/// pod's address, and the pod's answer returned as it came. A name it cannot place (another
/// namespace, not a pod's name) gets 502 saying so. Stops when dropped.
#[derive(Debug)]
pub struct PodProxy {
    pub address: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl PodProxy {
    pub async fn start(
        namespace: &str,
        pod_addresses: impl Fn(&str) -> Ipv4Addr + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let pod_addresses = Arc::new(pod_addresses);
        let namespace = namespace.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (pod_addresses, namespace) = (pod_addresses.clone(), namespace.clone());
                tokio::spawn(async move {
                    let Some((method, target, body)) = read_request_with_body(&mut stream).await
                    else {
                        return;
                    };
                    let answer = match forward(&method, &target, &body, &namespace, &*pod_addresses)
                        .await
                    {
                        Ok(answer) => answer,
                        Err(error) => {
                            let body = format!("the pod proxy: {error:#}");
                            format!(
                                    "HTTP/1.1 502 Bad Gateway\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                    body.len()
                                )
                                .into_bytes()
                        }
                    };
                    let _ = stream.write_all(&answer).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(Self { address, task })
    }
}

impl Drop for PodProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends one proxied request (`target` in absolute form) on to its pod; the whole answer.
async fn forward(
    method: &str,
    target: &str,
    body: &[u8],
    namespace: &str,
    pod_addresses: &(dyn Fn(&str) -> Ipv4Addr + Send + Sync),
) -> anyhow::Result<Vec<u8>> {
    let url = url::Url::parse(target).with_context(|| format!("{target:?} is not a URL"))?;
    let host = url.host_str().context("no host")?;
    let port = url.port_or_known_default().context("no port")?;
    let labels: Vec<&str> = host.trim_end_matches('.').split('.').collect();
    let [pod, _service, pod_namespace, "svc", ..] = labels.as_slice() else {
        bail!("{host} is not a pod's DNS name");
    };
    if *pod_namespace != namespace {
        bail!("{host} is not in {namespace}");
    }
    let path = &url[url::Position::BeforePath..];
    let mut pod_stream = TcpStream::connect((pod_addresses(pod), port))
        .await
        .with_context(|| format!("connecting to {pod}:{port}"))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    pod_stream.write_all(head.as_bytes()).await?;
    pod_stream.write_all(body).await?;
    let mut answer = Vec::new();
    pod_stream.read_to_end(&mut answer).await?;
    Ok(answer)
}
