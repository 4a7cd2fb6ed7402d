//! CA injection: every webhook of every Validating- and MutatingWebhookConfiguration labelled
//! `grafana.com/inject-rollout-operator-ca=true` and `grafana.com/namespace=<namespace>` gets
//! the Secret's `ca.crt` as its `caBundle`. Only configurations that differ are written, each
//! conditioned on the resourceVersion seen, so the write's own watch event finds nothing to do.

use std::time::Duration;

use baton_shared::reflect::reflect;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use super::CertificateMetrics;
use super::pki::CA_CRT;
use crate::leader::{Leadership, Term};
use crate::runner::Runner;

pub const INJECT_LABEL: &str = "grafana.com/inject-rollout-operator-ca";
pub const NAMESPACE_LABEL: &str = "grafana.com/namespace";
/// Safety net behind the watches.
const RESYNC: Duration = Duration::from_secs(60);

/// A webhook configuration kind, seen through its webhooks' `clientConfig`s.
trait Injectable:
    k8s_openapi::Resource
    + Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    fn client_configs(&self) -> impl Iterator<Item = &WebhookClientConfig>;
    fn client_configs_mut(&mut self) -> impl Iterator<Item = &mut WebhookClientConfig>;
}

/// Validating and mutating webhooks are distinct types with the same `client_config` field,
/// which only a macro can reach in both.
macro_rules! injectable {
    ($kind:ty) => {
        impl Injectable for $kind {
            fn client_configs(&self) -> impl Iterator<Item = &WebhookClientConfig> {
                let webhooks = self.webhooks.iter().flatten();
                webhooks.map(|webhook| &webhook.client_config)
            }
            fn client_configs_mut(&mut self) -> impl Iterator<Item = &mut WebhookClientConfig> {
                let webhooks = self.webhooks.iter_mut().flatten();
                webhooks.map(|webhook| &mut webhook.client_config)
            }
        }
    };
}

injectable!(ValidatingWebhookConfiguration);
injectable!(MutatingWebhookConfiguration);

/// Whether `config` needs `bundle` written.
fn differs<K: Injectable>(config: &K, bundle: &ByteString) -> bool {
    config
        .client_configs()
        .any(|client| client.ca_bundle.as_ref() != Some(bundle))
}

/// Sets `bundle` as every webhook's `caBundle`.
fn set_bundle<K: Injectable>(config: &mut K, bundle: &ByteString) {
    for client in config.client_configs_mut() {
        client.ca_bundle = Some(bundle.clone());
    }
}

/// The CA bundle to inject from the Secret: `ca.crt` if it holds at least one certificate.
fn bundle_of(secret: Option<&Secret>) -> Option<ByteString> {
    let bytes = secret?.data.as_ref()?.get(CA_CRT)?;
    let certificates = x509_parser::pem::Pem::iter_from_buffer(&bytes.0)
        .filter_map(Result::ok)
        .filter(|pem| pem.label == "CERTIFICATE" && pem.parse_x509().is_ok())
        .count();
    (certificates > 0).then(|| bytes.clone())
}

/// Sets `kube_validating_webhook_failure_policy` from the labelled configurations: for each
/// webhook, 1 under the policy it has (`Fail` when unset, the API's default) and 0 under the
/// other, as the Go operator does (its `IncorrectWebhookConfigurationFailurePolicy` alert reads
/// it). Series of configurations gone since are dropped.
fn record_failure_policies(
    gauge: &prometheus::GaugeVec,
    validating: &Store<ValidatingWebhookConfiguration>,
    mutating: &Store<MutatingWebhookConfiguration>,
) {
    gauge.reset();
    let validating = validating.state();
    let mutating = mutating.state();
    let webhooks = validating
        .iter()
        .flat_map(|config| config.webhooks.iter().flatten())
        .map(|webhook| ("ValidatingWebhook", &webhook.name, &webhook.failure_policy))
        .chain(
            mutating
                .iter()
                .flat_map(|config| config.webhooks.iter().flatten())
                .map(|webhook| ("MutatingWebhook", &webhook.name, &webhook.failure_policy)),
        );
    for (kind, name, policy) in webhooks {
        let policy = policy.as_deref().unwrap_or("Fail");
        for each in ["Fail", "Ignore"] {
            gauge
                .with_label_values(&[kind, name.as_str(), each])
                .set(if each == policy { 1.0 } else { 0.0 });
        }
    }
}

pub(super) async fn run(
    client: kube::Client,
    namespace: &str,
    request_timeout: Duration,
    mut secret: watch::Receiver<Option<Secret>>,
    leadership: &Leadership,
    metrics: &CertificateMetrics,
) {
    let selector = format!("{INJECT_LABEL}=true,{NAMESPACE_LABEL}={namespace}");
    let changed = Notify::new();
    // Every event, including the end of a relist, may mean a caBundle to restore.
    let (validating, validating_watch) = reflect(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        watcher::Config::default().labels(&selector),
        |_| {},
        |_| changed.notify_one(),
    );
    let (mutating, mutating_watch) = reflect(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        watcher::Config::default().labels(&selector),
        |_| {},
        |_| changed.notify_one(),
    );
    let injecting = async {
        // Every new term injects at once (the first, and each one after an outage).
        let mut last_term: Option<Term> = None;
        let mut elector_running = true;
        loop {
            tokio::select! {
                () = changed.notified() => {}
                result = secret.changed() => {
                    if result.is_err() {
                        return;
                    }
                }
                acquired = leadership.acquired_after(last_term), if elector_running => match acquired {
                    Ok(term) => last_term = Some(term),
                    Err(_) => elector_running = false,
                },
                () = tokio::time::sleep(RESYNC) => {}
            }
            // Every replica exports them (any may be scraped), leading or not.
            record_failure_policies(&metrics.failure_policy, &validating, &mutating);
            let Some(bundle) = bundle_of(secret.borrow_and_update().as_ref()) else {
                continue;
            };
            let Some(runner) = Runner::in_current_term(leadership, request_timeout) else {
                continue;
            };
            let writer = Writer {
                client: &client,
                runner,
                metrics,
            };
            writer.inject(&validating, &bundle).await;
            writer.inject(&mutating, &bundle).await;
        }
    };
    tokio::select! {
        () = validating_watch => tracing::error!("the ValidatingWebhookConfiguration watch ended"),
        () = mutating_watch => tracing::error!("the MutatingWebhookConfiguration watch ended"),
        () = injecting => {}
    }
}

/// What writing caBundles needs.
struct Writer<'a> {
    client: &'a kube::Client,
    /// The term the writes belong to: they stop when it ends.
    runner: Runner,
    metrics: &'a CertificateMetrics,
}

impl Writer<'_> {
    /// Writes `bundle` into every configuration in `store` that differs, if this replica leads.
    async fn inject<K: Injectable>(&self, store: &Store<K>, bundle: &ByteString) {
        let api: Api<K> = Api::all(self.client.clone());
        for config in store.state() {
            if !differs(config.as_ref(), bundle) {
                continue;
            }
            let name = config.name_any();
            // `replace` sends the resourceVersion seen: a concurrent change wins, and its watch
            // event brings this loop back with the new state.
            let mut updated = config.as_ref().clone();
            set_bundle(&mut updated, bundle);
            let params = PostParams::default();
            let replace = api.replace(&name, &params, &updated);
            let Ok(replaced) = self
                .runner
                .step("replacing a webhook configuration", replace)
                .await
            else {
                return;
            };
            match replaced {
                Ok(Ok(_)) => {
                    self.metrics.injections.with_label_values(&[K::KIND]).inc();
                    tracing::info!(kind = K::KIND, name, "caBundle injected");
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                    tracing::debug!(
                        kind = K::KIND,
                        name,
                        "changed meanwhile; the watch brings it back"
                    );
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                    tracing::warn!(
                        kind = K::KIND,
                        name,
                        "not injecting the caBundle: baton may not update this configuration; \
                         add its name to the resourceNames of the ClusterRole \
                         baton-controller-webhook-ca (docs/operations.md)"
                    )
                }
                Ok(Err(error)) => {
                    tracing::warn!(kind = K::KIND, name, %error, "injecting the caBundle")
                }
                // The resync brings it back.
                Err(timed_out) => {
                    tracing::warn!(kind = K::KIND, name, error = %timed_out, "injecting the caBundle")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validating(bundles: &[Option<&str>]) -> ValidatingWebhookConfiguration {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v"},
            "webhooks": bundles.iter().enumerate().map(|(index, bundle)| {
                let mut client_config = serde_json::json!({"url": "https://127.0.0.1/x"});
                if let Some(bundle) = bundle {
                    client_config["caBundle"] = serde_json::Value::String((*bundle).to_owned());
                }
                serde_json::json!({
                    "name": format!("w{index}.baton.test"),
                    "clientConfig": client_config,
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                })
            }).collect::<Vec<_>>(),
        }))
        .expect("a valid configuration")
    }

    #[test]
    fn a_configuration_differs_when_any_webhook_lacks_the_bundle() {
        let bundle = ByteString(b"CA".to_vec());
        // "Q0E=" is base64 of "CA".
        assert!(!differs(
            &validating(&[Some("Q0E="), Some("Q0E=")]),
            &bundle
        ));
        assert!(differs(&validating(&[Some("Q0E="), None]), &bundle));
        assert!(differs(&validating(&[Some("T0xE")]), &bundle));
        let mut fixed = validating(&[None, Some("T0xE")]);
        set_bundle(&mut fixed, &bundle);
        assert!(!differs(&fixed, &bundle));
    }

    #[test]
    fn only_a_ca_crt_holding_a_certificate_is_injected() {
        let secret = |ca: &[u8]| Secret {
            data: Some([(CA_CRT.to_owned(), ByteString(ca.to_vec()))].into()),
            ..Secret::default()
        };
        assert_eq!(bundle_of(None), None);
        assert_eq!(bundle_of(Some(&secret(b"garbage"))), None);
        let now = time::OffsetDateTime::now_utc();
        let ca = super::super::pki::new_ca(now, time::Duration::hours(1)).expect("issues");
        assert_eq!(
            bundle_of(Some(&secret(ca.cert_pem.as_bytes()))),
            Some(ByteString(ca.cert_pem.into_bytes()))
        );
    }
}
