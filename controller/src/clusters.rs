//! Member clusters (`controller.clusters`): the controller, leader-elected in its own cluster
//! (the hub), watches the groups' StatefulSets and pods in each member cluster, and sends each
//! write to the cluster its object lives in.
//!
//! - **Reaching a member** is a chain of steps that can each fail with its own error, naming
//!   the member and the Secret: reading the Secret (in the system namespace), finding its key,
//!   parsing the kubeconfig, accepting it (inline credentials only: no field that reads a file
//!   of this pod, runs a program, goes through a proxy or weakens TLS,
//!   [`baton_core::cluster_kubeconfig`]), building a client from what was accepted alone. A member whose chain fails is retried with the
//!   watches' backoff, and until then it is *out* ([`ClusterCache::outage`]).
//! - **A member's watches start over after every failure** (`relisting_watcher`): a member is
//!   out from a watch's first error until both its watches have listed again. So a member that
//!   comes back is re-listed before anything is decided on it, and the core's rule
//!   (`StatefulSetSnapshot::unreachable`, applied by [`baton_core::clusters::mark_outages`])
//!   holds every group with a member there meanwhile.
//! - **Writes are routed by name** ([`Clusters::api`]): the caches name a member's objects
//!   `cluster/name`, so every decision reads qualified names, and only the call splits them.
//!   A write whose answer was lost (a DELETE that timed out as the cluster went away) is pending
//!   as in one cluster (`PendingDeletions`, keyed by the qualified pod name), and a repeated
//!   DELETE carries the pod's uid as a precondition: it can never remove a replacement.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use baton_config::ClusterConfig;
use baton_core::cluster_kubeconfig::Unusable;
use baton_core::clusters::Outage;
use baton_core::pods::CachedPod;
use baton_shared::kube_client::{ClientLayers, bounded};
use baton_shared::pod_cache::PodCache;
use futures::{FutureExt, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::Error;

/// Where the groups' objects live, to send each write there: the controller's own cluster, or,
/// with member clusters, the member a qualified name (`cluster/name`) names.
#[derive(Clone)]
pub struct Clusters {
    hub: kube::Client,
    /// Member name → its client, once connected. `None`: no member clusters.
    clients: Option<Arc<RwLock<HashMap<String, kube::Client>>>>,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters")
            .field("clients", &self.clients.is_some())
            .finish()
    }
}

impl Clusters {
    /// The controller's own cluster alone: names are not qualified.
    pub fn single(client: kube::Client) -> Self {
        Self {
            hub: client,
            clients: None,
        }
    }

    /// The API of `K` in `namespace` of the cluster `name` lives in, and `name` there.
    pub fn api<'n, K>(&self, namespace: &str, name: &'n str) -> Result<(Api<K>, &'n str), Error>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        let (client, local) = self.client_for(name)?;
        Ok((Api::namespaced(client, namespace), local))
    }

    /// The client of the cluster `name` lives in, and `name` there. An unqualified name is an
    /// object of the controller's own cluster (its certificates, its Lease), with member
    /// clusters or without. [`Error::NotConnected`] while its cluster is not connected (its
    /// kubeconfig could not be read yet).
    pub fn client_for<'n>(&self, name: &'n str) -> Result<(kube::Client, &'n str), Error> {
        let (Some(clients), (Some(cluster), local)) =
            (&self.clients, baton_core::clusters::split(name))
        else {
            return Ok((self.hub.clone(), name));
        };
        let client = clients
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(cluster)
            .cloned();
        match client {
            Some(client) => Ok((client, local)),
            None => Err(Error::NotConnected {
                name: name.to_owned(),
                cluster: cluster.to_owned(),
            }),
        }
    }

    fn connected(&self, cluster: &str, client: kube::Client) {
        if let Some(clients) = &self.clients {
            clients
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(cluster.to_owned(), client);
        }
    }
}

/// What the watches of one member cluster have seen, and whether they can be trusted now.
#[derive(Clone)]
pub struct ClusterCache {
    pub cluster: String,
    pub statefulsets: Store<StatefulSet>,
    pub pods: PodCache,
    health: Arc<Mutex<Health>>,
}

impl ClusterCache {
    /// Why the member cannot be trusted now, if it cannot.
    pub fn outage(&self) -> Option<Outage> {
        let health = self
            .health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        health.outage().map(|error| Outage {
            cluster: self.cluster.clone(),
            error,
            listed: health.listed_once,
        })
    }

    /// Its StatefulSets that `keep` keeps, named `cluster/name` (only those are copied).
    pub fn statefulsets_where(&self, keep: impl Fn(&StatefulSet) -> bool) -> Vec<Arc<StatefulSet>> {
        self.statefulsets
            .state_filter(keep)
            .into_iter()
            .map(|statefulset| {
                Arc::new(baton_core::clusters::qualify_statefulset(
                    &self.cluster,
                    &statefulset,
                ))
            })
            .collect()
    }

    /// Its pods that `keep` keeps, named `cluster/name` (only those are copied).
    pub fn pods_where(&self, keep: impl Fn(&CachedPod) -> bool) -> Vec<Arc<CachedPod>> {
        self.pods
            .state()
            .into_iter()
            .filter(|pod| keep(pod))
            .map(|pod| Arc::new(baton_core::clusters::qualify_pod(&self.cluster, &pod)))
            .collect()
    }
}

/// The two watches of a member.
#[derive(Debug, Clone, Copy)]
enum Watch {
    StatefulSets = 0,
    Pods = 1,
}

#[derive(Debug, Clone, Default)]
enum WatchHealth {
    #[default]
    NotListed,
    Listed,
    Failed(String),
}

#[derive(Debug, Default)]
struct Health {
    /// Why the member's client could not be built, until it is.
    connect_error: Option<String>,
    watches: [WatchHealth; 2],
    /// Both watches have listed at least once.
    listed_once: bool,
}

impl Health {
    /// Whether the member is out, without saying why: asked on every watch event.
    fn is_out(&self) -> bool {
        self.connect_error.is_some()
            || !self
                .watches
                .iter()
                .all(|health| matches!(health, WatchHealth::Listed))
    }

    fn outage(&self) -> Option<String> {
        if let Some(error) = &self.connect_error {
            return Some(error.clone());
        }
        let names = ["StatefulSets", "pods"];
        for (health, what) in self.watches.iter().zip(names) {
            match health {
                WatchHealth::Listed => {}
                WatchHealth::NotListed => return Some(format!("its {what} are not listed yet")),
                WatchHealth::Failed(error) => {
                    return Some(format!("watching its {what} failed: {error}"));
                }
            }
        }
        None
    }

    /// Notes a watch's event; true when whether the member is out changed.
    fn observe<K>(
        &mut self,
        watch: Watch,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) -> bool {
        let was_out = self.is_out();
        let slot = &mut self.watches[watch as usize];
        match event {
            Ok(watcher::Event::InitDone) => *slot = WatchHealth::Listed,
            Err(error) => *slot = WatchHealth::Failed(error.to_string()),
            Ok(_) => {}
        }
        let is_out = self.is_out();
        if !is_out {
            self.listed_once = true;
        }
        was_out != is_out
    }
}

/// `baton_member_cluster_out{member}`: 1 while a member cluster cannot be trusted (it holds
/// every group it has a member in), 0 once it is listed.
pub fn register_out_gauge(
    registry: &prometheus::Registry,
) -> prometheus::Result<prometheus::IntGaugeVec> {
    let gauge = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "baton_member_cluster_out",
            "1 while a member cluster cannot be read (not connected, a watch failed, or not listed again since): it holds its groups.",
        ),
        &["cluster"],
    )?;
    registry.register(Box::new(gauge.clone()))?;
    Ok(gauge)
}

/// What starting the member watches needs from the controller.
pub struct Settings<'a> {
    pub hub: kube::Client,
    pub layers: ClientLayers,
    /// Where the kubeconfig Secrets are.
    pub system_namespace: &'a str,
    /// The groups' namespace, in every member.
    pub namespace: &'a str,
    pub request_timeout: std::time::Duration,
    /// [`register_out_gauge`]'s gauge.
    pub out: prometheus::IntGaugeVec,
    /// Counts each failed attempt to connect to a member.
    pub failures: crate::error::Failures,
}

/// What connecting to a member needs, owned by the member's driver.
#[derive(Clone)]
struct Connector {
    hub: kube::Client,
    layers: ClientLayers,
    system_namespace: String,
    request_timeout: std::time::Duration,
    failures: crate::error::Failures,
}

/// Starts watching every member: the caches, the routing of writes, and the future that drives
/// them all (run it as a critical task). `touched` is sent each group a change concerns,
/// including every group of a member that goes out or comes back.
pub fn start(
    settings: Settings<'_>,
    configs: &[ClusterConfig],
    touched: UnboundedSender<String>,
) -> (
    Vec<ClusterCache>,
    Clusters,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let clusters = Clusters {
        hub: settings.hub.clone(),
        clients: Some(Arc::default()),
    };
    let mut caches = Vec::new();
    let mut drivers = Vec::new();
    for config in configs {
        let (cache, driver) = watch_cluster(&settings, config, clusters.clone(), touched.clone());
        caches.push(cache);
        drivers.push(driver.boxed());
    }
    let drive = async move {
        futures::future::join_all(drivers).await;
    };
    (caches, clusters, drive)
}

fn watch_cluster(
    settings: &Settings<'_>,
    cluster: &ClusterConfig,
    clusters: Clusters,
    touched: UnboundedSender<String>,
) -> (
    ClusterCache,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let health = Arc::new(Mutex::new(Health::default()));
    let (out_changed, mut out_changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let out = settings.out.with_label_values(&[cluster.name.as_str()]);
    out.set(1);
    let connector = Connector {
        hub: settings.hub.clone(),
        layers: settings.layers.clone(),
        system_namespace: settings.system_namespace.to_owned(),
        request_timeout: settings.request_timeout,
        failures: settings.failures.clone(),
    };
    let connect = connect(
        connector,
        cluster.clone(),
        health.clone(),
        out_changed.clone(),
    )
    .boxed()
    .shared();
    let namespace = settings.namespace.to_owned();
    let statefulset_events = cluster_events(
        connect.clone(),
        namespace.clone(),
        watcher::Config::default().labels(baton_core::annotations::ROLLOUT_GROUP_LABEL),
        Watch::StatefulSets,
        health.clone(),
        out_changed.clone(),
    );
    let pod_events = cluster_events(
        connect.clone(),
        namespace.clone(),
        watcher::Config::default(),
        Watch::Pods,
        health.clone(),
        out_changed,
    );
    let (statefulsets, pods, watches) =
        crate::cache::watch_workloads(statefulset_events, pod_events, namespace, touched.clone());
    let cache = ClusterCache {
        cluster: cluster.name.clone(),
        statefulsets: statefulsets.clone(),
        pods,
        health,
    };
    let name = cluster.name.clone();
    let watched = cache.clone();
    let drive = async move {
        let cluster = name.clone();
        let register = connect.map(move |client| clusters.connected(&cluster, client));
        // A member going out or coming back concerns every group it has a member in.
        let retell = async move {
            while out_changes.recv().await.is_some() {
                let is_out = watched.outage();
                out.set(i64::from(is_out.is_some()));
                match is_out {
                    Some(outage) => {
                        tracing::warn!(cluster = %name, error = %outage.error, "member cluster out: its groups are held")
                    }
                    None => {
                        tracing::info!(cluster = %name, "member cluster listed: its groups go on")
                    }
                }
                for group in crate::cache::groups_of(&statefulsets) {
                    let _ = touched.send(group);
                }
            }
        };
        futures::join!(register, watches, retell);
    };
    (cache, drive)
}

/// The member's client, once built; every watch of the member waits for it.
type Connected = futures::future::Shared<futures::future::BoxFuture<'static, kube::Client>>;

/// The events of one of a member's watches, started once it is connected and started over
/// after each failure, each noted in its health (telling `out_changed` when the member goes out
/// or comes back).
fn cluster_events<K>(
    connect: Connected,
    namespace: String,
    config: watcher::Config,
    watch: Watch,
    health: Arc<Mutex<Health>>,
    out_changed: UnboundedSender<()>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    futures::stream::once(connect)
        .flat_map(move |client| {
            let api = Api::namespaced(client, &namespace);
            baton_shared::initial_list::relisting_watcher(api, config.clone())
        })
        .inspect(move |event| {
            let changed = health
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .observe(watch, event);
            if changed {
                let _ = out_changed.send(());
            }
        })
}

/// The member's client: the controller's own for a member without a Secret, else built from
/// its kubeconfig Secret, retried with the watches' backoff until it can be (each new failure
/// logged once, and kept as the member's outage; each counted, in this one place).
async fn connect(
    connector: Connector,
    cluster: ClusterConfig,
    health: Arc<Mutex<Health>>,
    out_changed: UnboundedSender<()>,
) -> kube::Client {
    if cluster.kubeconfig_secret.is_empty() {
        return connector.hub;
    }
    let mut backoff = baton_shared::kube_client::watch_backoff();
    let mut last_error = None;
    loop {
        match client_of(&connector, &cluster).await {
            Ok(client) => {
                health
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .connect_error = None;
                tracing::info!(cluster = %cluster.name, "connected to member cluster");
                return client;
            }
            Err(error) => {
                connector.failures.count(&error);
                let error = error.to_string();
                if last_error.as_ref() != Some(&error) {
                    tracing::warn!(cluster = %cluster.name, %error, "cannot connect to member cluster; retrying");
                    health
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .connect_error = Some(error.clone());
                    let _ = out_changed.send(());
                    last_error = Some(error);
                }
            }
        }
        let delay = backoff.next().unwrap_or(std::time::Duration::from_secs(2));
        tokio::time::sleep(delay).await;
    }
}

async fn client_of(connector: &Connector, cluster: &ClusterConfig) -> Result<kube::Client, Error> {
    let Connector {
        hub,
        layers,
        system_namespace,
        request_timeout,
        ..
    } = connector;
    let (namespace, secret, key) = (
        system_namespace.to_owned(),
        cluster.kubeconfig_secret.clone(),
        cluster.kubeconfig_key.clone(),
    );
    let name = cluster.name.clone();
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), system_namespace);
    let reading = format!("reading Secret {secret}");
    let read = bounded(*request_timeout, reading, secrets.get(&secret))
        .await
        .map_err(|source| Error::ReadMemberSecretTimedOut {
            cluster: name.clone(),
            namespace: namespace.clone(),
            secret: secret.clone(),
            source,
        })?
        .map_err(|source| Error::ReadMemberSecret {
            cluster: name.clone(),
            namespace: namespace.clone(),
            secret: secret.clone(),
            source: Box::new(source),
        })?;
    let Some(bytes) = read.data.as_ref().and_then(|data| data.get(&key)) else {
        return Err(Error::MemberSecretKeyMissing {
            cluster: name,
            namespace,
            secret,
            key,
        });
    };
    let not_kubeconfig = |why: String| Error::MemberNotKubeconfig {
        cluster: name.clone(),
        namespace: namespace.clone(),
        secret: secret.clone(),
        key: key.clone(),
        why,
    };
    let text = std::str::from_utf8(&bytes.0).map_err(|error| not_kubeconfig(error.to_string()))?;
    // Only what the allow-list takes reaches kube: a kubeconfig can ask for files of this pod,
    // programs run in it, a proxy, unchecked certificates.
    let access = baton_core::cluster_kubeconfig::accept(text).map_err(|error| match error {
        Unusable::Unreadable(why) => not_kubeconfig(why),
        Unusable::Refused(refusals) => Error::MemberKubeconfigRefused {
            cluster: name.clone(),
            namespace: namespace.clone(),
            secret: secret.clone(),
            key: key.clone(),
            refusals: Unusable::Refused(refusals).to_string(),
        },
    })?;
    let kubeconfig: Kubeconfig = serde_json::from_value(access.kubeconfig())
        .map_err(|error| not_kubeconfig(error.to_string()))?;
    let unusable = |why: String| Error::MemberClient {
        cluster: name.clone(),
        namespace: namespace.clone(),
        secret: secret.clone(),
        why,
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|error| unusable(error.to_string()))?;
    layers
        .client(config)
        .map_err(|error| unusable(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Event = Result<watcher::Event<StatefulSet>, watcher::Error>;

    fn listed() -> Event {
        Ok(watcher::Event::InitDone)
    }

    fn listing() -> Event {
        Ok(watcher::Event::Init)
    }

    fn failure() -> Event {
        Err(watcher::Error::NoResourceVersion)
    }

    #[test]
    fn a_cluster_is_out_until_both_watches_listed_and_again_from_a_failure_to_the_next_list() {
        let mut health = Health::default();
        assert!(
            health
                .outage()
                .expect("not listed")
                .contains("not listed yet")
        );
        // The StatefulSets listed: the pods are still to come.
        assert!(!health.observe(Watch::StatefulSets, &listed()));
        assert!(
            health
                .outage()
                .expect("pods")
                .contains("pods are not listed yet")
        );
        // Both listed: in, and that is a change.
        assert!(health.observe(Watch::Pods, &listed()));
        assert_eq!(health.outage(), None);
        assert!(health.listed_once);
        // A failure takes it out at once, naming the watch.
        assert!(health.observe(Watch::Pods, &failure()));
        let outage = health.outage().expect("out");
        assert!(outage.contains("watching its pods failed"), "{outage}");
        // A watch that starts listing again is not enough: only the end of its list is.
        assert!(!health.observe(Watch::Pods, &listing()));
        assert!(health.outage().is_some());
        assert!(health.observe(Watch::Pods, &listed()));
        assert_eq!(health.outage(), None);
    }

    #[test]
    fn a_cluster_that_cannot_connect_is_out_with_the_reason() {
        let health = Health {
            connect_error: Some(
                "Secret baton/member-b of member cluster cluster-b has no key kubeconfig".into(),
            ),
            ..Health::default()
        };
        assert!(
            health
                .outage()
                .expect("out")
                .contains("has no key kubeconfig")
        );
    }
}
