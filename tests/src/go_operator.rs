//! Grafana's rollout-operator, the Go operator baton replaces, run beside baton so the
//! side-by-side tests can hand both the same inputs and compare what each decides. It is the
//! real v0.38.1 binary: tests/control-plane/install.sh builds it once from the release's source
//! archive (kept beside the repository in `../shared/anchors/`) into its cache, and links it into
//! the assets folder; `E2E_ROLLOUT_OPERATOR` names a binary built elsewhere.
//!
//! It runs as a process outside the cluster, as baton's binaries do in these tests: the
//! administrator's kubeconfig, one namespace, and its webhook server on loopback serving the
//! test's certificate (its self-signed certificate would name `rollout-operator.<ns>.svc`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::assets_dir;
use crate::controller_support::http_status;
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
}

impl GoOperator {
    /// Starts the Go operator for `namespace` with `extra` flags (e.g. `-use-zone-tracker`),
    /// serving `tls` on a free port, and waits until `/ready` answers 200.
    pub async fn start(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        // A free port is released before the Go operator binds it (on every address): another
        // test process may take it first. The operator then exits saying so, and starts again
        // on other ports.
        let mut attempts = 0;
        loop {
            match Self::start_once(control_plane, tls, namespace, extra).await {
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
        let process = BatonProcess::spawn_program("rollout-operator", &binary, &args)?;
        let mut operator = Self {
            process,
            port,
            ops_port,
            _files: files,
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
