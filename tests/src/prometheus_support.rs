//! A real Prometheus (Debian's `prometheus`, installed by tests/control-plane/install.sh) on
//! loopback, scraping every second a metrics endpoint the test serves with values it sets; and
//! the RolloutHealthCheck CRD, applied from deploy/crds/ as shipped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::controller_support::free_address;
use crate::http_support::PodEndpoint;
use crate::process::{BatonProcess, which};
use crate::wait_until;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The endpoint Prometheus scrapes: `/metrics` answers what [`Metrics::set`] said last.
#[derive(Debug)]
pub struct Metrics {
    endpoint: PodEndpoint,
}

impl Metrics {
    pub async fn start() -> Self {
        let endpoint = PodEndpoint::start(Ipv4Addr::LOCALHOST, 0)
            .await
            .expect("a metrics endpoint on loopback");
        Self { endpoint }
    }

    pub fn address(&self) -> SocketAddr {
        self.endpoint.address
    }

    /// Serves `name value` (one gauge, text exposition format).
    pub fn set(&self, name: &str, value: f64) {
        self.serve(&format!("# TYPE {name} gauge\n{name} {value}\n"));
    }

    /// Serves `exposition` as is (text exposition format): series with labels.
    pub fn serve(&self, exposition: &str) {
        self.endpoint.answer_with("GET", 200, exposition);
    }
}

/// A running Prometheus; killed on drop.
#[derive(Debug)]
pub struct Prometheus {
    pub address: String,
    process: Option<BatonProcess>,
    config: PathBuf,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second; returns once it is ready.
    pub async fn start(target: SocketAddr) -> Self {
        Self::start_at(target, free_address()).await
    }

    /// As [`Prometheus::start`], listening on `address` (`127.0.0.1:port`): one a controller
    /// was told to allow before it was started (`gates.prometheus_addresses`).
    pub async fn start_at(target: SocketAddr, address: String) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("writing prometheus.yml");
        let mut prometheus = Self {
            address,
            process: None,
            config,
            dir,
        };
        prometheus.restart().await;
        prometheus
    }

    /// The base URL of its HTTP API.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Kills it (as a crash would): queries fail until [`Prometheus::restart`].
    pub async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.signal("KILL").expect("kill prometheus");
            let _ = process.wait().await;
        }
    }

    /// Starts it again on the same address and storage.
    pub async fn restart(&mut self) {
        baton_shared::crypto::install_default_provider();
        let program = which("prometheus");
        let data = self.dir.path().join("data");
        let args = [
            format!("--config.file={}", self.config.display()),
            format!("--storage.tsdb.path={}", data.display()),
            format!("--web.listen-address={}", self.address),
            "--log.level=warn".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let process =
            BatonProcess::spawn_program("prometheus", &program, &args).expect("prometheus starts");
        self.process = Some(process);
        let ready = format!("{}/-/ready", self.url());
        wait_until(TIMEOUT, "prometheus is ready", || async {
            reqwest::get(&ready)
                .await
                .is_ok_and(|response| response.status().is_success())
        })
        .await;
    }

    /// Waits until `query` returns exactly the one sample `value` (the scrape caught up).
    pub async fn wait_value(&self, query: &str, value: f64) {
        let endpoint = format!("{}/api/v1/query", self.url());
        let url = reqwest::Url::parse_with_params(&endpoint, [("query", query)]).expect("a URL");
        wait_until(
            TIMEOUT,
            &format!("{query} is {value} in prometheus"),
            || async {
                let Ok(response) = reqwest::get(url.clone()).await else {
                    return false;
                };
                let Ok(body) = response.json::<serde_json::Value>().await else {
                    return false;
                };
                let result = &body["data"]["result"];
                result.as_array().is_some_and(|samples| samples.len() == 1)
                    && result[0]["value"][1].as_str() == Some(&value.to_string())
            },
        )
        .await;
    }
}

/// Applies the RolloutHealthCheck CRD from deploy/crds/ (once per control plane) and waits
/// until it is served.
pub async fn install_health_check_crd(client: &kube::Client) {
    crate::crds::install(client, crate::crds::ROLLOUT_HEALTH_CHECK).await;
}

/// Creates the RolloutHealthCheck `name` with `spec` in `namespace` (the CRD installed first).
pub async fn create_health_check(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    spec: serde_json::Value,
) {
    install_health_check_crd(client).await;
    let check = serde_json::json!({
        "apiVersion": "baton.dev/v1alpha1",
        "kind": "RolloutHealthCheck",
        "metadata": {"name": name},
        "spec": spec,
    });
    let object: kube::api::DynamicObject =
        serde_json::from_value(check).expect("a RolloutHealthCheck");
    let resource = baton_core::gates::health_check::api_resource();
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), namespace, &resource);
    api.create(&kube::api::PostParams::default(), &object)
        .await
        .unwrap_or_else(|error| panic!("creating the RolloutHealthCheck {name}: {error}"));
}
