//! The webhook's certificate: issued, renewed and rotated by the leader controller into one
//! Secret, and its CA injected into labelled webhook configurations.
//!
//! The decisions are pure (`baton_core::certificates`); what is here only reads, writes and waits. One watch on
//! the Secret feeds both the issuer and the injector through a `tokio::sync::watch` channel,
//! so neither waits on a kube store's readiness.

mod inject;
mod issue;
pub mod pki;

use std::time::Duration;

use baton_config::CertificatesConfig;
use baton_shared::index::{self, Index};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::explain::Explainer;
use crate::leader::Leadership;

/// What the certificate tasks need from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: CertificatesConfig,
    /// Whose webhook configurations are injected (`grafana.com/namespace=<namespace>`): the
    /// groups' namespace, as with the Go operator.
    pub namespace: String,
    /// Where the Secret (and, by default, the webhook's Service) lives.
    pub system_namespace: String,
    pub cluster_domain: String,
    /// Bounds every API call (kube's client has no read timeout): a hung call must not stop
    /// renewals or injection for good.
    pub request_timeout: Duration,
}

/// Certificate metrics.
#[derive(Debug, Clone)]
pub struct CertificateMetrics {
    /// `notAfter` of the serving certificate and of the newest CA.
    pub expiry: GaugeVec,
    /// Writes of the Secret, by planned action.
    pub secret_writes: IntCounterVec,
    /// `caBundle` writes to webhook configurations, by kind.
    pub injections: IntCounterVec,
    /// The failurePolicy of each webhook of the labelled configurations, as the Go operator
    /// exports it: `{type, webhook, policy}`, 1 for the policy set and 0 for the other.
    pub failure_policy: GaugeVec,
}

impl CertificateMetrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let expiry = GaugeVec::new(
            Opts::new(
                "baton_certificate_expiry_timestamp_seconds",
                "When the webhook's serving certificate or newest CA expires (Unix seconds).",
            ),
            &["kind"],
        )?;
        let secret_writes = IntCounterVec::new(
            Opts::new(
                "baton_certificate_secret_writes_total",
                "Writes of the certificate Secret, by action.",
            ),
            &["action"],
        )?;
        let injections = IntCounterVec::new(
            Opts::new(
                "baton_ca_bundle_injections_total",
                "Webhook configurations whose caBundle baton updated, by kind.",
            ),
            &["kind"],
        )?;
        let failure_policy = GaugeVec::new(
            Opts::new(
                "kube_validating_webhook_failure_policy",
                "FailurePolicy setting of Kubernetes ValidatingWebhooks and MutatingWebhooks",
            ),
            &["type", "webhook", "policy"],
        )?;
        registry.register(Box::new(failure_policy.clone()))?;
        registry.register(Box::new(expiry.clone()))?;
        registry.register(Box::new(secret_writes.clone()))?;
        registry.register(Box::new(injections.clone()))?;
        Ok(Self {
            expiry,
            secret_writes,
            injections,
            failure_policy,
        })
    }
}

/// Runs issuance and injection, as configured, until `shutdown`. Failures to read or write
/// are logged and retried; nothing here stops the controller.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    leadership: Leadership,
    explainer: Explainer,
    registry: &Registry,
    failures: crate::error::Failures,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = CertificateMetrics::register(registry)?;
    let config = &settings.config;
    if !config.generate && !config.inject_ca_bundle {
        tracing::info!("certificates are brought by the deployment: not issuing, not injecting");
        shutdown.cancelled().await;
        return Ok(());
    }
    tracing::info!(
        secret = %config.secret_name,
        generate = config.generate,
        inject_ca_bundle = config.inject_ca_bundle,
        "managing the webhook certificate"
    );
    let (secret_sender, secret) = watch::channel(None);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.system_namespace);
    let watching = watch_secret(secrets.clone(), config.secret_name.clone(), secret_sender);
    let issuing = async {
        if config.generate {
            issue::run(
                secrets.clone(),
                &settings,
                secret.clone(),
                &leadership,
                &explainer,
                &metrics,
                &failures,
            )
            .await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let injecting = async {
        if config.inject_ca_bundle {
            inject::run(
                client.clone(),
                &settings.namespace,
                settings.request_timeout,
                secret.clone(),
                &leadership,
                &metrics,
            )
            .await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = watching => anyhow::bail!("the certificate Secret's watch ended"),
        () = issuing => anyhow::bail!("certificate issuance ended"),
        () = injecting => anyhow::bail!("CA injection ended"),
        () = shutdown.cancelled() => Ok(()),
    }
}

/// Keeps `sender` holding the Secret as the API server has it (`None` when absent).
async fn watch_secret(secrets: Api<Secret>, name: String, sender: watch::Sender<Option<Secret>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut latest = LatestSecret { name, sender };
    index::run(secrets, config, |_| {}, &mut latest).await;
}

/// The certificate Secret as it is now (the watch selects it alone), for the issuer and the
/// injector.
struct LatestSecret {
    name: String,
    sender: watch::Sender<Option<Secret>>,
}

impl Index<Secret> for LatestSecret {
    type Kept = Secret;
    fn keep(&self, secret: Secret) -> Secret {
        secret
    }

    fn reset(&mut self, objects: Vec<Secret>) {
        self.sender.send_replace(objects.into_iter().next());
    }
    fn apply(&mut self, secret: Secret) {
        self.sender.send_replace(Some(secret));
    }
    fn delete(&mut self, _: Secret) {
        self.sender.send_replace(None);
    }
    fn failed(&mut self, error: &watcher::Error) {
        tracing::warn!(%error, secret = %self.name, "watching the certificate Secret");
    }
}

/// How long to sleep before the next look: never negative, and at most `cap` so a clock jump
/// or a missed event is caught up with.
fn until(next: Option<time::OffsetDateTime>, cap: Duration) -> Duration {
    let Some(next) = next else { return cap };
    let left = next - time::OffsetDateTime::now_utc();
    Duration::try_from(left).unwrap_or(Duration::ZERO).min(cap)
}
