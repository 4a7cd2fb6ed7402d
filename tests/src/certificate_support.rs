//! What the certificate end-to-end tests need: a stand-in for kubelet copying the certificate
//! Secret to files, baton-webhook serving those files, and webhook configurations that carry
//! (or lack) the CA-injection labels.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::control_plane::ControlPlane;
use crate::control_plane::supervisor::clean_up_from_drop;
use crate::keys::{INJECT_CA, INJECT_CA_NAMESPACE};
use crate::process::BatonProcess;
use crate::wait::wait_until;
use crate::webhook_support::WebhookReplica;

/// One key of a Secret as text (empty when absent).
pub fn secret_text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
        .unwrap_or_default()
}

/// The DNS names (subjectAltName) of the first certificate in `pem`.
pub fn dns_names(pem: &str) -> anyhow::Result<BTreeSet<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|error| anyhow::anyhow!("not a PEM certificate: {error}"))?;
    let certificate = pem
        .parse_x509()
        .map_err(|error| anyhow::anyhow!("not an X.509 certificate: {error}"))?;
    let names = certificate
        .subject_alternative_name()
        .map_err(|error| anyhow::anyhow!("bad subjectAltName: {error}"))?
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(names)
}

/// Waits until the controller has issued the certificate Secret `name`, and returns it.
pub async fn wait_issued(secrets: &Api<Secret>, name: &str) -> Secret {
    wait_until(
        Duration::from_secs(30),
        "the certificate Secret is issued",
        || async {
            secrets
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .is_some_and(|secret| !secret_text(&secret, "tls.crt").is_empty())
        },
    )
    .await;
    secrets.get(name).await.expect("the issued Secret")
}

/// Copies `tls.crt` and `tls.key` of a Secret to files every 100 ms, each replaced atomically,
/// as kubelet updates a mounted Secret. Remembers every distinct certificate and CA bundle.
#[derive(Debug)]
pub struct Kubelet {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub seen_certs: Arc<Mutex<BTreeSet<String>>>,
    pub seen_bundles: Arc<Mutex<BTreeSet<String>>>,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Kubelet {
    /// Waits for the Secret to exist, writes the files once, and keeps them current.
    pub async fn mount(secrets: Api<Secret>, name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        wait_issued(&secrets, name).await;
        let kubelet = Self {
            cert,
            key,
            seen_certs: Arc::default(),
            seen_bundles: Arc::default(),
            stop: CancellationToken::new(),
            _dir: dir,
        };
        kubelet.copy_once(&secrets, name).await?;
        tokio::spawn({
            let (secrets, name) = (secrets.clone(), name.to_owned());
            let (cert, key) = (kubelet.cert.clone(), kubelet.key.clone());
            let (seen_certs, seen_bundles) =
                (kubelet.seen_certs.clone(), kubelet.seen_bundles.clone());
            let stop = kubelet.stop.clone();
            async move {
                while !stop.is_cancelled() {
                    if let Ok(Some(secret)) = secrets.get_opt(&name).await {
                        let _ = copy(&secret, &cert, &key, &seen_certs, &seen_bundles);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Ok(kubelet)
    }

    async fn copy_once(&self, secrets: &Api<Secret>, name: &str) -> anyhow::Result<()> {
        let secret = secrets.get(name).await?;
        copy(
            &secret,
            &self.cert,
            &self.key,
            &self.seen_certs,
            &self.seen_bundles,
        )
    }

    pub fn distinct_certs(&self) -> usize {
        self.seen_certs.lock().unwrap().len()
    }

    pub fn distinct_bundles(&self) -> usize {
        self.seen_bundles.lock().unwrap().len()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn copy(
    secret: &Secret,
    cert: &Path,
    key: &Path,
    seen_certs: &Mutex<BTreeSet<String>>,
    seen_bundles: &Mutex<BTreeSet<String>>,
) -> anyhow::Result<()> {
    let cert_pem = secret_text(secret, "tls.crt");
    let key_pem = secret_text(secret, "tls.key");
    if std::fs::read_to_string(cert).ok().as_deref() != Some(cert_pem.as_str()) {
        replace(key, &key_pem)?;
        replace(cert, &cert_pem)?;
    }
    seen_certs.lock().unwrap().insert(cert_pem);
    seen_bundles
        .lock()
        .unwrap()
        .insert(secret_text(secret, "ca.crt"));
    Ok(())
}

fn replace(path: &Path, text: &str) -> anyhow::Result<()> {
    let staging = path.with_extension("new");
    std::fs::write(&staging, text)?;
    std::fs::rename(&staging, path)?;
    Ok(())
}

/// Starts baton-webhook serving `kubelet`'s files on a free port; waits until it is ready.
pub async fn start_webhook(
    control_plane: &ControlPlane,
    namespace: &str,
    kubelet: &Kubelet,
    extra_env: &[(&str, &str)],
) -> anyhow::Result<(BatonProcess, u16)> {
    let replica = WebhookReplica::serving_files(
        control_plane.kubeconfig_path(),
        &kubelet.cert,
        &kubelet.key,
        namespace,
        extra_env,
    )
    .await?;
    Ok((replica.process, replica.port))
}

/// A no-downscale ValidatingWebhookConfiguration for `namespace`'s StatefulSets calling
/// `https://127.0.0.1:<port>`, without a caBundle; with the injection labels when `labelled`.
/// Deleted when dropped.
#[derive(Debug)]
pub struct GuardConfiguration {
    pub name: String,
    api: Api<ValidatingWebhookConfiguration>,
    kubeconfig: PathBuf,
}

impl GuardConfiguration {
    pub async fn create(
        control_plane: &ControlPlane,
        name: &str,
        namespace: &str,
        port: u16,
        labelled: bool,
    ) -> anyhow::Result<Self> {
        let labels = if labelled {
            json!({INJECT_CA: "true", INJECT_CA_NAMESPACE: namespace})
        } else {
            json!({INJECT_CA_NAMESPACE: namespace})
        };
        let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "webhooks": [{
                "name": "no-downscale.baton.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/admission/no-downscale")},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                           "resources": ["statefulsets", "statefulsets/scale"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "admissionReviewVersions": ["v1beta1", "v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }],
        }))?;
        let api = Api::<ValidatingWebhookConfiguration>::all(control_plane.admin_client().await);
        api.create(&PostParams::default(), &configuration).await?;
        Ok(Self {
            name: name.to_owned(),
            api,
            kubeconfig: control_plane.kubeconfig_path().to_path_buf(),
        })
    }

    pub async fn get(&self) -> ValidatingWebhookConfiguration {
        self.api
            .get(&self.name)
            .await
            .expect("reading the configuration")
    }

    /// The caBundle of its webhook as text (empty when unset).
    pub async fn ca_bundle(&self) -> String {
        self.get()
            .await
            .webhooks
            .unwrap_or_default()
            .first()
            .and_then(|webhook| webhook.client_config.ca_bundle.as_ref())
            .map(|bundle| String::from_utf8_lossy(&bundle.0).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for GuardConfiguration {
    fn drop(&mut self) {
        // The webhook is gone with the test: a leftover Fail-policy configuration would
        // block nothing else (namespaced), but delete it anyway.
        let name = self.name.clone();
        clean_up_from_drop(self.kubeconfig.clone(), |client| async move {
            let _ = Api::<ValidatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await;
        });
    }
}
