//! Member clusters reached from kubeconfig Secrets (`controller.clusters`, `webhook.clusters`):
//! what both binaries need to reach a member and to keep reaching it as its Secret changes.
//! The controller watches members through these clients; the webhook claims downscales in
//! their ledgers.
//!
//! - **Reaching a member** is a chain of steps that can each fail with its own
//!   [`MemberError`], naming the member and the Secret: reading the Secret (in the system
//!   namespace), finding its key, parsing the kubeconfig, accepting it (inline credentials only:
//!   no field that reads a file of this pod, runs a program, goes through a proxy or weakens
//!   TLS, [`baton_core::cluster_kubeconfig`]), building a client from what was accepted alone.
//! - **A member follows its Secret while running** ([`follow_kubeconfig`]): one watch of that
//!   Secret alone (by name, which RBAC can grant on that Secret alone) tells when it changes,
//!   and the Secret is read again; [`baton_core::clusters::reconnect`] decides. A rotated
//!   kubeconfig replaces the member's client at once; a Secret changed to one that cannot be
//!   used disconnects it (the old credentials are not kept); a read that failed says nothing
//!   of the Secret, so the client stays. What each binary does on each of those is its own
//!   ([`Connection`]).
//! - **Who is reachable** is one map, [`MemberClients`]: a member's client once connected, or
//!   why it is not (never connected yet, or its Secret unusable).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use baton_config::ClusterConfig;
use baton_core::cluster_kubeconfig::Unusable;
use baton_core::clusters::{Reconnect, SecretRead, reconnect};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;

use crate::kube_client::{ClientLayers, TimedOut, bounded};

/// Why a member cannot be reached from its kubeconfig Secret: each names the member, the
/// Secret and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("reading Secret {namespace}/{secret} of member cluster {cluster}: {source}")]
    ReadSecret {
        cluster: String,
        namespace: String,
        secret: String,
        /// Boxed: with the names beside it, it would make every error large.
        source: Box<kube::Error>,
    },
    #[error("reading Secret {namespace}/{secret} of member cluster {cluster}: {source}")]
    ReadSecretTimedOut {
        cluster: String,
        namespace: String,
        secret: String,
        source: TimedOut,
    },
    #[error("Secret {namespace}/{secret} of member cluster {cluster} has no key {key}")]
    SecretKeyMissing {
        cluster: String,
        namespace: String,
        secret: String,
        key: String,
    },
    #[error(
        "key {key} of Secret {namespace}/{secret} (member cluster {cluster}) is not a kubeconfig: {why}"
    )]
    NotKubeconfig {
        cluster: String,
        namespace: String,
        secret: String,
        key: String,
        why: String,
    },
    /// Fields not accepted in a member's kubeconfig ([`baton_core::cluster_kubeconfig`]): the
    /// member stays out until the Secret is fixed.
    #[error(
        "key {key} of Secret {namespace}/{secret} (member cluster {cluster}) is refused: {refusals}"
    )]
    KubeconfigRefused {
        cluster: String,
        namespace: String,
        secret: String,
        key: String,
        refusals: String,
    },
    #[error(
        "the kubeconfig of member cluster {cluster} (Secret {namespace}/{secret}) cannot be used: {why}"
    )]
    Client {
        cluster: String,
        namespace: String,
        secret: String,
        why: String,
    },
}

impl MemberError {
    /// The failure's stable snake_case label in each binary's failures counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::ReadSecret { .. } => "read_member_secret",
            Self::ReadSecretTimedOut { .. } => "read_member_secret_timeout",
            Self::SecretKeyMissing { .. } => "member_secret_key_missing",
            Self::NotKubeconfig { .. } => "member_not_kubeconfig",
            Self::KubeconfigRefused { .. } => "member_kubeconfig_refused",
            Self::Client { .. } => "member_client",
        }
    }

    /// Whether the Secret could not be read at all, which says nothing about what it holds; a
    /// Secret that is not there (404) is read, and found unusable, as one without the key is.
    pub fn read_failed(&self) -> bool {
        match self {
            Self::ReadSecretTimedOut { .. } => true,
            Self::ReadSecret { source, .. } => {
                !matches!(source.as_ref(), kube::Error::Api(status) if status.code == 404)
            }
            _ => false,
        }
    }
}

/// Every label [`MemberError::metric_label`] gives, in the order of the variants.
pub const METRIC_LABELS: [&str; 6] = [
    "read_member_secret",
    "read_member_secret_timeout",
    "member_secret_key_missing",
    "member_not_kubeconfig",
    "member_kubeconfig_refused",
    "member_client",
];

/// What reaching members needs from the binary: its own cluster's client (which reads the
/// Secrets, and is the client of a member without one), the layers every client gets, where
/// the Secrets are, and the bound of each read.
#[derive(Clone)]
pub struct Connector {
    pub hub: kube::Client,
    pub layers: ClientLayers,
    pub system_namespace: String,
    pub request_timeout: Duration,
}

impl Connector {
    /// The member's kubeconfig as its Secret holds it now (one bounded read).
    pub async fn read_kubeconfig(&self, cluster: &ClusterConfig) -> Result<String, MemberError> {
        let (namespace, secret, key) = (
            self.system_namespace.clone(),
            cluster.kubeconfig_secret.clone(),
            cluster.kubeconfig_key.clone(),
        );
        let name = cluster.name.clone();
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), &self.system_namespace);
        let reading = format!("reading Secret {secret}");
        let read = bounded(self.request_timeout, reading, secrets.get(&secret))
            .await
            .map_err(|source| MemberError::ReadSecretTimedOut {
                cluster: name.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                source,
            })?
            .map_err(|source| MemberError::ReadSecret {
                cluster: name.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                source: Box::new(source),
            })?;
        let Some(bytes) = read.data.as_ref().and_then(|data| data.get(&key)) else {
            return Err(MemberError::SecretKeyMissing {
                cluster: name,
                namespace,
                secret,
                key,
            });
        };
        String::from_utf8(bytes.0.clone()).map_err(|error| MemberError::NotKubeconfig {
            cluster: name,
            namespace,
            secret,
            key,
            why: error.to_string(),
        })
    }

    /// A client of the member from `text`, its kubeconfig, if it is accepted.
    pub async fn client_from(
        &self,
        cluster: &ClusterConfig,
        text: &str,
    ) -> Result<kube::Client, MemberError> {
        let (namespace, secret, key) = (
            self.system_namespace.clone(),
            cluster.kubeconfig_secret.clone(),
            cluster.kubeconfig_key.clone(),
        );
        let name = cluster.name.clone();
        let not_kubeconfig = |why: String| MemberError::NotKubeconfig {
            cluster: name.clone(),
            namespace: namespace.clone(),
            secret: secret.clone(),
            key: key.clone(),
            why,
        };
        // Only what the allow-list takes reaches kube: a kubeconfig can ask for files of this
        // pod, programs run in it, a proxy, unchecked certificates.
        let access = baton_core::cluster_kubeconfig::accept(text).map_err(|error| match error {
            Unusable::Unreadable(why) => not_kubeconfig(why),
            Unusable::Refused(refusals) => MemberError::KubeconfigRefused {
                cluster: name.clone(),
                namespace: namespace.clone(),
                secret: secret.clone(),
                key: key.clone(),
                refusals: Unusable::Refused(refusals).to_string(),
            },
        })?;
        let kubeconfig: Kubeconfig = serde_json::from_value(access.kubeconfig())
            .map_err(|error| not_kubeconfig(error.to_string()))?;
        let unusable = |why: String| MemberError::Client {
            cluster: name.clone(),
            namespace: namespace.clone(),
            secret: secret.clone(),
            why,
        };
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|error| unusable(error.to_string()))?;
        self.layers
            .client(config)
            .map_err(|error| unusable(error.to_string()))
    }
}

/// What a binary does as a member's Secret is followed ([`follow_kubeconfig`]).
pub trait Connection {
    /// The kubeconfig the member's current client was built from, if it has one.
    fn in_use(&self) -> Option<&str>;
    /// Connects with `client`, built from `kubeconfig` (empty: the binary's own cluster).
    fn connect(&mut self, kubeconfig: String, client: kube::Client);
    /// The Secret as it is now cannot be used (gone, no key, not a kubeconfig, refused, no
    /// client from it): a client built from what it held before must be dropped, not kept.
    /// Whoever changed the Secret meant the old credentials to go.
    fn refuse(&mut self, error: MemberError);
    /// The Secret could not be read (the API server did not answer, or refused): that says
    /// nothing of the Secret, so a connected member keeps its client.
    fn unread(&mut self, error: MemberError);
}

/// Keeps the member's client that of its kubeconfig Secret as it is now: the binary's own for
/// a member without a Secret; else the Secret is read when the member starts and again each
/// time a watch of that one Secret (by name: `get`, `list` and `watch` on it alone) says it
/// changed, or fails. A kubeconfig that differs from the one in use (a token rotated by
/// `kubectl baton cluster add` run again) replaces the member's client at once; one that cannot
/// be used disconnects it. A read that fails is retried with the watches' backoff. Runs until
/// the Secret's watch ends.
pub async fn follow_kubeconfig(
    connector: Connector,
    cluster: ClusterConfig,
    mut member: impl Connection,
) {
    if cluster.kubeconfig_secret.is_empty() {
        member.connect(String::new(), connector.hub.clone());
        // The member keeps this client.
        return std::future::pending().await;
    }
    let secrets: Api<Secret> = Api::namespaced(connector.hub.clone(), &connector.system_namespace);
    let by_name =
        watcher::Config::default().fields(&format!("metadata.name={}", cluster.kubeconfig_secret));
    let mut changes = std::pin::pin!(crate::initial_list::relisting_watcher(secrets, by_name));
    let mut watch_error = None;
    loop {
        let mut backoff = crate::kube_client::watch_backoff();
        loop {
            let read = connector.read_kubeconfig(&cluster).await;
            let seen = match &read {
                Ok(kubeconfig) => SecretRead::Kubeconfig(kubeconfig),
                Err(error) if error.read_failed() => SecretRead::Unread,
                Err(_) => SecretRead::Unusable,
            };
            match (reconnect(member.in_use(), seen), read) {
                (Reconnect::Keep, Ok(_)) => break,
                (Reconnect::Keep, Err(error)) => member.unread(error),
                (_, Ok(kubeconfig)) => match connector.client_from(&cluster, &kubeconfig).await {
                    Ok(client) => break member.connect(kubeconfig, client),
                    // A kubeconfig no client can be built from is as unusable as none.
                    Err(error) => break member.refuse(error),
                },
                (_, Err(error)) => break member.refuse(error),
            }
            let delay = backoff.next().unwrap_or(Duration::from_secs(2));
            tokio::time::sleep(delay).await;
        }
        // Until the Secret changes, or its watch fails (the read that follows then catches
        // what the watch may have missed, at the pace of the watch's backoff).
        loop {
            match changes.next().await {
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
                Some(Ok(_)) => {
                    if watch_error.take().is_some() {
                        tracing::info!(cluster = %cluster.name, "watching the member cluster's kubeconfig Secret again");
                    }
                    break;
                }
                Some(Err(error)) => {
                    let error = error.to_string();
                    if watch_error.as_ref() != Some(&error) {
                        tracing::warn!(cluster = %cluster.name, secret = %cluster.kubeconfig_secret, %error, "cannot watch the member cluster's kubeconfig Secret (does this binary's Role give list and watch on it?); it is read again at each retry");
                        watch_error = Some(error);
                    }
                    break;
                }
                None => return,
            }
        }
    }
}

/// Each member's client once connected, or why it is not: one map, read by every call that
/// goes to a member, written by the [`Connection`] following its Secret. Cheap to clone.
#[derive(Clone, Default)]
pub struct MemberClients(Arc<RwLock<BTreeMap<String, Result<kube::Client, String>>>>);

impl std::fmt::Debug for MemberClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let read = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f.debug_map()
            .entries(
                read.iter()
                    .map(|(cluster, client)| (cluster, client.as_ref().map(|_| "connected"))),
            )
            .finish()
    }
}

impl MemberClients {
    /// `cluster`'s client, or why it has none.
    pub fn get(&self, cluster: &str) -> Result<kube::Client, String> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(cluster)
            .cloned()
            .unwrap_or_else(|| Err("not connected yet".to_owned()))
    }

    pub fn connected(&self, cluster: &str, client: kube::Client) {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(cluster.to_owned(), Ok(client));
    }

    /// `cluster` has no client any more, because of `why`.
    pub fn disconnected(&self, cluster: &str, why: String) {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(cluster.to_owned(), Err(why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_that_is_not_there_is_unusable_and_one_not_read_is_unknown() {
        let reading = |code: u16| MemberError::ReadSecret {
            cluster: "cluster-b".into(),
            namespace: "baton-system".into(),
            secret: "member-cluster-b".into(),
            source: Box::new(kube::Error::Api(
                kube::core::Status::failure("no", "No")
                    .with_code(code)
                    .boxed(),
            )),
        };
        // Gone: a fact about the Secret, which disconnects.
        assert!(!reading(404).read_failed());
        assert!(
            !MemberError::SecretKeyMissing {
                cluster: "cluster-b".into(),
                namespace: "baton-system".into(),
                secret: "member-cluster-b".into(),
                key: "kubeconfig".into(),
            }
            .read_failed()
        );
        // Not read (refused, the API server failing, no answer): nothing is known.
        assert!(reading(403).read_failed());
        assert!(reading(500).read_failed());
        assert!(
            MemberError::ReadSecretTimedOut {
                cluster: "cluster-b".into(),
                namespace: "baton-system".into(),
                secret: "member-cluster-b".into(),
                source: TimedOut {
                    what: "reading Secret member-cluster-b".into(),
                    timeout: Duration::from_secs(10),
                },
            }
            .read_failed()
        );
    }

    #[test]
    fn a_member_is_unreachable_until_connected_and_says_why_once_disconnected() {
        let clients = MemberClients::default();
        let why = |clients: &MemberClients| clients.get("cluster-b").err().expect("unreachable");
        assert_eq!(why(&clients), "not connected yet");
        clients.disconnected(
            "cluster-b",
            "Secret baton/member-b has no key kubeconfig".into(),
        );
        assert!(why(&clients).contains("no key"));
    }
}
