//! What the webhook end-to-end tests need beyond the common support: a test CA and a serving
//! certificate for 127.0.0.1, baton-webhook replicas started as processes, webhook
//! configurations scoped to one test namespace.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::clean_up_from_drop;
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
    /// The certificate files this replica serves, when it wrote them itself.
    _files: Option<tempfile::TempDir>,
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
        let port = free_port()?;
        let ops_port = free_port()?;
        let address = format!("127.0.0.1:{port}");
        let ops_address = format!("127.0.0.1:{ops_port}");
        let mut env = vec![
            ("BATON_NAMESPACE", namespace),
            ("BATON_WEBHOOK__ADDRESS", address.as_str()),
            ("BATON_OPS__ADDRESS", ops_address.as_str()),
            ("BATON_WEBHOOK__CERT_FILE", path_str(cert)?),
            ("BATON_WEBHOOK__KEY_FILE", path_str(key)?),
            ("BATON_PODS__ADDRESS_BY", "ip"),
            ("BATON_LOG__LEVEL", "info,baton_webhook=debug"),
        ];
        env.extend_from_slice(extra_env);
        let process = BatonProcess::spawn("baton-webhook", kubeconfig, &env).await?;
        let replica = Self {
            process,
            port,
            ops_port,
            _files: None,
        };
        let ready = format!("http://127.0.0.1:{ops_port}/ready");
        let http = reqwest::Client::builder().no_proxy().build()?;
        wait_until(
            Duration::from_secs(60),
            "baton-webhook answers /ready",
            || async {
                http.get(&ready)
                    .send()
                    .await
                    .is_ok_and(|response| response.status().is_success())
            },
        )
        .await;
        Ok(replica)
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
        let client = control_plane.admin_client().await;
        let name = format!("baton-e2e-{namespace}");
        let selector = json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
        let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": "no-downscale.baton.test",
                "clientConfig": {"url": replica.url("/admission/no-downscale"), "caBundle": tls.ca_bundle()},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                           "resources": NO_DOWNSCALE_RESOURCES, "scope": "Namespaced"}],
                "namespaceSelector": selector,
                // The API server sends the first version it knows: v1beta1 here, v1 for
                // prepare-downscale, so both codecs are exercised by the real API server.
                "admissionReviewVersions": ["v1beta1", "v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }],
        }))?;
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": "prepare-downscale.baton.test",
                "clientConfig": {"url": replica.url("/admission/prepare-downscale"), "caBundle": tls.ca_bundle()},
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
