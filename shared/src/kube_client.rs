//! The Kubernetes client both binaries use.

use std::future::Future;
use std::time::Duration;

use baton_config::KubernetesConfig;

#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error(
        "no Kubernetes configuration: neither KUBECONFIG (or ~/.kube/config) nor the in-cluster service account could be used: {0}"
    )]
    Infer(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// A client configured as kubectl would be (`KUBECONFIG`, then `~/.kube/config`), else from the
/// in-cluster service account.
pub async fn client(config: &KubernetesConfig) -> Result<kube::Client, KubeClientError> {
    let mut kube_config = kube::Config::infer().await?;
    kube_config.connect_timeout = Some(config.connect_timeout.get());
    Ok(kube::Client::try_from(kube_config)?)
}

/// An API call that did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("{what} did not answer within {timeout:?}")]
pub struct TimedOut {
    pub what: String,
    pub timeout: Duration,
}

/// Bounds a call: kube's client has no read timeout and retries throttling for long, which a
/// lease renewal or an admission answer cannot afford.
pub async fn bounded<T>(
    timeout: Duration,
    what: impl Into<String>,
    call: impl Future<Output = T>,
) -> Result<T, TimedOut> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| TimedOut {
            what: what.into(),
            timeout,
        })
}
