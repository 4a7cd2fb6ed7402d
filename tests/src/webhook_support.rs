//! What the webhook end-to-end tests need beyond the common support: a test CA and a serving
//! certificate for 127.0.0.1, baton-webhook replicas started (and restarted) as processes,
//! webhook configurations scoped to one test namespace calling a replica or a load balancer,
//! and a probe that waits until the API server calls them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::clean_up_from_drop;
use crate::fixtures::StatefulSetFixture;
use crate::keys::{INJECT_CA, INJECT_CA_NAMESPACE, NO_DOWNSCALE, PREPARE_DOWNSCALE};
use crate::namespace::TestNamespace;
use crate::process::BatonProcess;
use crate::wait::wait_until;

/// A CA of the test and a serving certificate it signed for `127.0.0.1`.
#[derive(Debug, Clone)]
pub struct TestTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestTls {
    pub fn generate() -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "baton webhook e2e CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "baton-webhook");
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA as a webhook configuration's `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// An HTTPS client trusting only this CA.
    pub fn client(&self) -> anyhow::Result<reqwest::Client> {
        baton_shared::crypto::install_default_provider();
        Ok(reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?])
            .no_proxy()
            .build()?)
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One baton-webhook process.
#[derive(Debug)]
pub struct WebhookReplica {
    pub process: BatonProcess,
    pub port: u16,
    pub ops_port: u16,
    /// How it was started, to start it again the same way.
    launch: Launch,
    /// The certificate files this replica serves, when it wrote them itself.
    _files: Option<tempfile::TempDir>,
}

/// Everything a replica is started with but its ports.
#[derive(Debug, Clone)]
struct Launch {
    kubeconfig: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    namespace: String,
    extra_env: Vec<(String, String)>,
}

impl WebhookReplica {
    /// Starts baton-webhook watching `namespace`, serving `tls` on a free port, pods addressed
    /// by IP (the pod simulator's loopback IPs), and waits until `/ready` answers 200.
    pub async fn start(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
    ) -> anyhow::Result<Self> {
        Self::start_with(control_plane, tls, namespace, &[]).await
    }

    /// As [`WebhookReplica::start`], with more configuration (`BATON_*` keys).
    pub async fn start_with(
        control_plane: &ControlPlane,
        tls: &TestTls,
        namespace: &str,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::start_as(control_plane.kubeconfig_path(), tls, namespace, extra_env).await
    }

    /// As [`WebhookReplica::start_with`], authenticating with `kubeconfig`.
    pub async fn start_as(
        kubeconfig: &Path,
        tls: &TestTls,
        namespace: &str,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let files = tempfile::tempdir()?;
        let cert = files.path().join("tls.crt");
        let key = files.path().join("tls.key");
        std::fs::write(&cert, &tls.cert_pem)?;
        std::fs::write(&key, &tls.key_pem)?;
        let mut replica =
            Self::serving_files(kubeconfig, &cert, &key, namespace, extra_env).await?;
        replica._files = Some(files);
        Ok(replica)
    }

    /// Starts baton-webhook serving the certificate files `cert` and `key` (which the caller
    /// may keep changing, as kubelet does with a mounted Secret) on a free port, pods addressed
    /// by IP, and waits until `/ready` answers 200.
    pub async fn serving_files(
        kubeconfig: &Path,
        cert: &Path,
        key: &Path,
        namespace: &str,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let launch = Launch {
            kubeconfig: kubeconfig.to_path_buf(),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            namespace: namespace.to_owned(),
            extra_env: extra_env
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
        };
        // A free port is free when picked, not when bound: a replica started beside another
        // can lose a port to it (the other's ops port, say). Such a replica exits at once,
        // saying so, and starts again on other ports.
        for _ in 0..5 {
            let (port, ops_port) = (free_port()?, free_port()?);
            let process = launch.spawn(port, ops_port).await?;
            let mut replica = Self {
                process,
                port,
                ops_port,
                launch: launch.clone(),
                _files: None,
            };
            if replica.ready_unless_exited().await {
                return Ok(replica);
            }
            let output = replica.process.output();
            anyhow::ensure!(
                output.contains("Address already in use"),
                "baton-webhook exited before it was ready: {output}"
            );
        }
        anyhow::bail!("baton-webhook lost its ports to other processes 5 times in a row")
    }

    /// Waits until `/ready` answers 200 (true), or the process has exited (false).
    async fn ready_unless_exited(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if self.ready_status().await == Some(200) {
                return true;
            }
            if self.process.has_exited() {
                return false;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after 60s waiting until baton-webhook answers /ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the replica as Kubernetes does, with SIGTERM, waits (at most `timeout`) until it
    /// has exited, and starts it again on the same ports with the same configuration, waiting
    /// until `/ready` answers 200. Returns the exit code of the stopped process.
    pub async fn restart(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        self.process.signal("TERM")?;
        let code = tokio::time::timeout(timeout, self.process.wait())
            .await
            .with_context(|| {
                format!("baton-webhook on port {} exits after SIGTERM", self.port)
            })??;
        self.process = self.launch.spawn(self.port, self.ops_port).await?;
        self.wait_ready().await;
        Ok(code)
    }

    async fn wait_ready(&self) {
        wait_until(
            Duration::from_secs(60),
            "baton-webhook answers /ready",
            || async { self.ready_status().await == Some(200) },
        )
        .await;
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The HTTP status of `/ready` (`None` when the ops server does not answer).
    pub async fn ready_status(&self) -> Option<u16> {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .ok()?
            .get(format!("http://127.0.0.1:{}/ready", self.ops_port))
            .send()
            .await
            .ok()
            .map(|response| response.status().as_u16())
    }
}

impl Launch {
    async fn spawn(&self, port: u16, ops_port: u16) -> anyhow::Result<BatonProcess> {
        let address = format!("127.0.0.1:{port}");
        let ops_address = format!("127.0.0.1:{ops_port}");
        let mut env = vec![
            ("BATON_NAMESPACE", self.namespace.as_str()),
            ("BATON_WEBHOOK__ADDRESS", address.as_str()),
            ("BATON_OPS__ADDRESS", ops_address.as_str()),
            ("BATON_WEBHOOK__CERT_FILE", path_str(&self.cert)?),
            ("BATON_WEBHOOK__KEY_FILE", path_str(&self.key)?),
            ("BATON_PODS__ADDRESS_BY", "ip"),
            ("BATON_LOG__LEVEL", "info,baton_webhook=debug"),
        ];
        env.extend(
            self.extra_env
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        );
        BatonProcess::spawn("baton-webhook", &self.kubeconfig, &env).await
    }
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().context("temporary paths are UTF-8")
}

/// Webhook configurations for one test namespace, deleted when dropped.
#[derive(Debug)]
pub struct WebhookConfigurations {
    name: String,
    kubeconfig: std::path::PathBuf,
}

/// Resources no-downscale guards: the three workloads and their `/scale`.
const NO_DOWNSCALE_RESOURCES: &[&str] = &[
    "statefulsets",
    "statefulsets/scale",
    "deployments",
    "deployments/scale",
    "replicasets",
    "replicasets/scale",
];

impl WebhookConfigurations {
    /// Registers no-downscale (validating, reviews in v1beta1) and prepare-downscale (mutating,
    /// reviews in v1) for `namespace` only (namespaceSelector on `kubernetes.io/metadata.name`),
    /// calling `replica`.
    pub async fn register(
        control_plane: &ControlPlane,
        namespace: &str,
        tls: &TestTls,
        replica: &WebhookReplica,
    ) -> anyhow::Result<Self> {
        Self::register_at(control_plane, namespace, tls, &replica.url("")).await
    }

    /// As [`WebhookConfigurations::register`], calling the webhooks at `base` (such as
    /// `https://127.0.0.1:<port>`: a load balancer in front of several replicas).
    pub async fn register_at(
        control_plane: &ControlPlane,
        namespace: &str,
        tls: &TestTls,
        base: &str,
    ) -> anyhow::Result<Self> {
        Self::create(control_plane, namespace, base, Trust::Ca(tls.ca_bundle())).await
    }

    /// The configurations a Go operator deployment leaves: labelled for CA injection
    /// (`grafana.com/inject-rollout-operator-ca`, `grafana.com/namespace`) and without a
    /// caBundle (the Go operator's CA is gone with it), plus pod-eviction for the zone-aware
    /// budgets. baton's controller injects its CA.
    pub async fn register_for_injection(
        control_plane: &ControlPlane,
        namespace: &str,
        base: &str,
    ) -> anyhow::Result<Self> {
        Self::create(control_plane, namespace, base, Trust::Injected).await
    }

    async fn create(
        control_plane: &ControlPlane,
        namespace: &str,
        base: &str,
        trust: Trust,
    ) -> anyhow::Result<Self> {
        let selected = Selected {
            name: format!("baton-e2e-{namespace}"),
            selector: json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}}),
            namespace,
        };
        let eviction = matches!(trust, Trust::Injected);
        Self::create_selecting(control_plane, selected, base, trust, eviction).await
    }

    /// Registers no-downscale, prepare-downscale and pod-eviction as
    /// [`WebhookConfigurations::register`] does, named `name`, for the namespaces `selector`
    /// (a namespaceSelector, as JSON) selects: one baton serving many namespaces.
    pub async fn register_selecting(
        control_plane: &ControlPlane,
        name: &str,
        selector: serde_json::Value,
        tls: &TestTls,
        replica: &WebhookReplica,
    ) -> anyhow::Result<Self> {
        let selected = Selected {
            name: name.to_owned(),
            selector,
            namespace: "",
        };
        let trust = Trust::Ca(tls.ca_bundle());
        Self::create_selecting(control_plane, selected, &replica.url(""), trust, true).await
    }

    /// The configurations of `selected`, pod-eviction among them when `eviction`.
    async fn create_selecting(
        control_plane: &ControlPlane,
        selected: Selected<'_>,
        base: &str,
        trust: Trust,
        eviction: bool,
    ) -> anyhow::Result<Self> {
        let client = control_plane.admin_client().await;
        let Selected {
            name,
            selector,
            namespace,
        } = selected;
        let client_config = |path: &str| match &trust {
            Trust::Ca(bundle) => json!({"url": format!("{base}{path}"), "caBundle": bundle}),
            Trust::Injected => json!({"url": format!("{base}{path}")}),
        };
        let labels = match &trust {
            Trust::Ca(_) => json!({}),
            Trust::Injected => {
                json!({INJECT_CA: "true", INJECT_CA_NAMESPACE: namespace})
            }
        };
        let mut validating_webhooks = vec![json!({
            "name": "no-downscale.baton.test",
            "clientConfig": client_config("/admission/no-downscale"),
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                       "resources": NO_DOWNSCALE_RESOURCES, "scope": "Namespaced"}],
            "namespaceSelector": selector,
            // The API server sends the first version it knows: v1beta1 here, v1 for
            // prepare-downscale, so both codecs are exercised by the real API server.
            "admissionReviewVersions": ["v1beta1", "v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
        })];
        if eviction {
            validating_webhooks.push(json!({
                "name": "pod-eviction.baton.test",
                "clientConfig": client_config("/admission/pod-eviction"),
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/eviction"], "scope": "Namespaced"}],
                "namespaceSelector": selector,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }));
        }
        let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "webhooks": validating_webhooks,
        }))?;
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "webhooks": [{
                "name": "prepare-downscale.baton.test",
                "clientConfig": client_config("/admission/prepare-downscale"),
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                           "resources": ["statefulsets", "statefulsets/scale"], "scope": "Namespaced"}],
                "namespaceSelector": selector,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "reinvocationPolicy": "Never",
            }],
        }))?;
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &validating)
            .await?;
        Api::<MutatingWebhookConfiguration>::all(client)
            .create(&PostParams::default(), &mutating)
            .await?;
        Ok(Self {
            name,
            kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
        })
    }
}

impl WebhookConfigurations {
    /// Points every webhook of these configurations at `base` instead, each keeping its path:
    /// what a Service does when the Deployment behind it is replaced. The configurations stay
    /// in place throughout, so no request goes unjudged meanwhile.
    pub async fn repoint(&self, control_plane: &ControlPlane, base: &str) -> anyhow::Result<()> {
        let client = control_plane.admin_client().await;
        let repointed = |webhook: &mut serde_json::Value| -> anyhow::Result<()> {
            let url = webhook["clientConfig"]["url"]
                .as_str()
                .context("a webhook called by URL")?;
            let path = url::Url::parse(url)?.path().to_owned();
            webhook["clientConfig"]["url"] = json!(format!("{base}{path}"));
            Ok(())
        };
        let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
        let mut configuration = serde_json::to_value(validating.get(&self.name).await?)?;
        for webhook in configuration["webhooks"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            repointed(webhook)?;
        }
        validating
            .replace(
                &self.name,
                &PostParams::default(),
                &serde_json::from_value(configuration)?,
            )
            .await?;
        let mutating = Api::<MutatingWebhookConfiguration>::all(client);
        let mut configuration = serde_json::to_value(mutating.get(&self.name).await?)?;
        for webhook in configuration["webhooks"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            repointed(webhook)?;
        }
        mutating
            .replace(
                &self.name,
                &PostParams::default(),
                &serde_json::from_value(configuration)?,
            )
            .await?;
        Ok(())
    }
}

/// How the API server comes to trust the test webhook's certificate.
/// Which namespaces configurations select: their name, namespaceSelector, and the namespace
/// named in the CA injection's label.
struct Selected<'a> {
    name: String,
    selector: serde_json::Value,
    namespace: &'a str,
}

enum Trust {
    /// The caBundle is set at creation.
    Ca(String),
    /// The configurations are labelled for baton's controller to inject it.
    Injected,
}

impl Drop for WebhookConfigurations {
    fn drop(&mut self) {
        let name = self.name.clone();
        clean_up_from_drop(self.kubeconfig.clone(), |client| async move {
            let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .delete(&name, &DeleteParams::default())
                .await;
            let _ = Api::<MutatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await;
        });
    }
}

/// deploy/'s `baton-state-guard` and `baton-record-guard` configurations, scoped to one test
/// namespace and calling a replica: their rules and objectSelectors as shipped. Deleted when
/// dropped.
#[derive(Debug)]
pub struct StateGuardConfiguration {
    _configurations: ShippedConfigurations,
}

impl StateGuardConfiguration {
    pub async fn register(
        control_plane: &ControlPlane,
        namespace: &str,
        tls: &TestTls,
        replica: &WebhookReplica,
    ) -> anyhow::Result<Self> {
        ShippedConfigurations::register(
            control_plane,
            namespace,
            tls,
            replica,
            &["baton-state-guard", "baton-record-guard"],
            MatchConditions::AsShipped,
        )
        .await
        .map(|configurations| Self {
            _configurations: configurations,
        })
    }
}

/// Whether deploy/'s `matchConditions` are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchConditions {
    AsShipped,
    /// Removed, as an API server without them would call the webhooks.
    Stripped,
}

/// Every configuration of deploy/base/webhooks.yaml (validating and mutating), as shipped
/// except that each is scoped to one test namespace and calls a replica at the path its
/// Service reference names. Deleted when dropped.
#[derive(Debug)]
pub struct ShippedConfigurations {
    validating: Vec<String>,
    mutating: Vec<String>,
    kubeconfig: std::path::PathBuf,
}

/// The configurations of deploy/base/webhooks.yaml.
pub const SHIPPED_CONFIGURATIONS: &[&str] = &[
    "baton-no-downscale",
    "baton-prepare-downscale",
    "baton-pod-eviction",
    "baton-zpdb-validation",
    "baton-state-guard",
    "baton-record-guard",
];

impl ShippedConfigurations {
    /// Registers deploy/'s configurations named in `names`.
    pub async fn register(
        control_plane: &ControlPlane,
        namespace: &str,
        tls: &TestTls,
        replica: &WebhookReplica,
        names: &[&str],
        match_conditions: MatchConditions,
    ) -> anyhow::Result<Self> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/webhooks.yaml");
        let text = std::fs::read_to_string(&path)?;
        let documents = serde_saphyr::from_multiple::<serde_json::Value>(&text)?;
        Self::register_from(
            control_plane,
            &documents,
            namespace,
            tls,
            replica,
            names,
            match_conditions,
        )
        .await
    }

    /// As [`ShippedConfigurations::register`], the configurations taken from `documents`
    /// (what a kustomization of deploy/ renders, such as deploy/member-cluster).
    pub async fn register_from(
        control_plane: &ControlPlane,
        documents: &[serde_json::Value],
        namespace: &str,
        tls: &TestTls,
        replica: &WebhookReplica,
        names: &[&str],
        match_conditions: MatchConditions,
    ) -> anyhow::Result<Self> {
        let client = control_plane.admin_client().await;
        let mut registered = Self {
            validating: Vec::new(),
            mutating: Vec::new(),
            kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
        };
        for shipped_name in names {
            let mut shipped = documents
                .iter()
                .find(|document| document["metadata"]["name"] == *shipped_name)
                .cloned()
                .with_context(|| format!("the shipped configurations have {shipped_name}"))?;
            let name = format!("baton-e2e-{shipped_name}-{namespace}");
            shipped["metadata"] = json!({"name": name});
            for webhook in shipped["webhooks"]
                .as_array_mut()
                .context("a configuration has webhooks")?
            {
                let path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .context("a shipped webhook calls a path of baton's Service")?
                    .to_owned();
                webhook["clientConfig"] = json!({
                    "url": replica.url(&path),
                    "caBundle": tls.ca_bundle(),
                });
                webhook["namespaceSelector"] =
                    json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
                if match_conditions == MatchConditions::Stripped {
                    webhook
                        .as_object_mut()
                        .context("a webhook is an object")?
                        .remove("matchConditions");
                }
            }
            match shipped["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => {
                    let configuration: MutatingWebhookConfiguration =
                        serde_json::from_value(shipped)?;
                    Api::<MutatingWebhookConfiguration>::all(client.clone())
                        .create(&PostParams::default(), &configuration)
                        .await?;
                    registered.mutating.push(name);
                }
                _ => {
                    let configuration: ValidatingWebhookConfiguration =
                        serde_json::from_value(shipped)?;
                    Api::<ValidatingWebhookConfiguration>::all(client.clone())
                        .create(&PostParams::default(), &configuration)
                        .await?;
                    registered.validating.push(name);
                }
            }
        }
        Ok(registered)
    }
}

impl Drop for ShippedConfigurations {
    fn drop(&mut self) {
        let (validating, mutating) = (self.validating.clone(), self.mutating.clone());
        clean_up_from_drop(self.kubeconfig.clone(), |client| async move {
            let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
            for name in validating {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
            let api = Api::<MutatingWebhookConfiguration>::all(client);
            for name in mutating {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        });
    }
}

/// The API server picks webhook configurations up asynchronously: probes (two StatefulSets it
/// creates in `namespace`) until both webhooks judge.
pub async fn wait_for_webhooks(namespace: &TestNamespace) {
    wait_for_downscale_webhooks(namespace, "baton.test").await;
}

/// As [`wait_for_webhooks`], for deploy/'s no-downscale and prepare-downscale
/// ([`ShippedConfigurations`]): register them after any other, and once the API server calls
/// them it has the others too.
pub async fn wait_for_shipped_webhooks(namespace: &TestNamespace) {
    wait_for_downscale_webhooks(namespace, "baton.grafana.com").await;
}

/// Probes until no-downscale and prepare-downscale, named `<webhook>.<domain>`, judge.
async fn wait_for_downscale_webhooks(namespace: &TestNamespace, domain: &str) {
    let client = namespace.client();
    StatefulSetFixture::new("probe-no-downscale")
        .replicas(1)
        .label(NO_DOWNSCALE, "true")
        .create(&client, namespace.name())
        .await;
    StatefulSetFixture::new("probe-prepare")
        .replicas(1)
        .label(PREPARE_DOWNSCALE, "true")
        .create(&client, namespace.name())
        .await;
    let statefulsets = namespace.api::<StatefulSet>();
    let (no_downscale, prepare) = (
        format!("no-downscale.{domain}"),
        format!("prepare-downscale.{domain}"),
    );
    wait_until(
        Duration::from_secs(60),
        "both webhooks are called by the API server",
        || {
            let statefulsets = statefulsets.clone();
            let (no_downscale, prepare) = (&no_downscale, &prepare);
            async move {
                let validating = scale(&statefulsets, "probe-no-downscale", 0, true)
                    .await
                    .is_err_and(|error| error.contains(no_downscale.as_str()));
                // Not dry-run: prepare-downscale lets dry runs through. Without the port
                // annotation it denies; if it is not called yet the probe scales to 0 and back.
                let mutating = match scale(&statefulsets, "probe-prepare", 0, false).await {
                    Err(error) => error.contains(prepare.as_str()),
                    Ok(()) => {
                        let _ = scale(&statefulsets, "probe-prepare", 1, false).await;
                        false
                    }
                };
                validating && mutating
            }
        },
    )
    .await;
}

/// Sets replicas through the `/scale` subresource; a denial is returned as its message.
///
/// Retried, as a client should, while prepare-downscale answers that the request did not
/// describe the StatefulSet as stored: the API server calls the validating webhooks at once,
/// so when the StatefulSet controller writes a fresh StatefulSet's status meanwhile, that
/// answer can come back instead of the one the test is about. It says to retry.
pub async fn scale(
    api: &Api<StatefulSet>,
    name: &str,
    replicas: i32,
    dry_run: bool,
) -> Result<(), String> {
    let (params, patch) = replicas_patch(replicas, dry_run);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let answer = api
            .patch_scale(name, &params, &patch)
            .await
            .map(|_| ())
            .map_err(denial);
        match answer {
            Err(message) if attempts < 5 && message.contains(NOT_AS_STORED) => continue,
            answer => return answer,
        }
    }
}

/// What prepare-downscale answers a review that does not describe the StatefulSet as stored.
const NOT_AS_STORED: &str = "does not describe the StatefulSet as it is stored (it changed since, or the API server did not send this request); retry";

/// The parameters and merge patch setting `spec.replicas` (of an object or its `/scale`).
pub fn replicas_patch(replicas: i32, dry_run: bool) -> (PatchParams, Patch<serde_json::Value>) {
    let params = if dry_run {
        PatchParams::default().dry_run()
    } else {
        PatchParams::default()
    };
    (
        params,
        Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
}

/// The message of an API error (an admission denial); panics on any other error.
pub fn denial(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message,
        other => panic!("expected an admission denial, got {other}"),
    }
}

/// A ValidatingWebhookConfiguration of the test's own, deleted when dropped.
pub struct ValidatingWebhooks {
    name: String,
    kubeconfig: PathBuf,
}

impl ValidatingWebhooks {
    /// Creates configuration `name` with `webhooks` (the `webhooks` list, as JSON).
    pub async fn register(
        control_plane: &ControlPlane,
        name: &str,
        webhooks: serde_json::Value,
    ) -> Self {
        let configuration: ValidatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks}))
                .unwrap_or_else(|error| panic!("webhook configuration {name}: {error}"));
        Api::<ValidatingWebhookConfiguration>::all(control_plane.admin_client().await)
            .create(&PostParams::default(), &configuration)
            .await
            .unwrap_or_else(|error| panic!("creating webhook configuration {name}: {error}"));
        Self {
            name: name.to_owned(),
            kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
        }
    }
}

impl Drop for ValidatingWebhooks {
    fn drop(&mut self) {
        let name = self.name.clone();
        clean_up_from_drop(self.kubeconfig.clone(), |client| async move {
            let _ = Api::<ValidatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await;
        });
    }
}

/// The pod-eviction webhook `name` of `replica` for `namespace`'s pods, as deploy/ registers it.
pub fn eviction_webhook(
    name: &str,
    tls: &TestTls,
    replica: &WebhookReplica,
    namespace: &str,
) -> serde_json::Value {
    json!({
        "name": name,
        "clientConfig": {"url": replica.url("/admission/pod-eviction"), "caBundle": tls.ca_bundle()},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods/eviction"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "admissionReviewVersions": ["v1beta1", "v1"],
        "sideEffects": "NoneOnDryRun",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
    })
}
