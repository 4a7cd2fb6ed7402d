//! Member clusters (`controller.clusters`): the controller, leader-elected in its own cluster
//! (the hub), watches the groups' StatefulSets and pods in each member cluster, and sends each
//! write to the cluster its object lives in.
//!
//! - **Reaching a member, and following its Secret** is [`baton_shared::members`]'s, as the
//!   webhook's is: a member whose chain fails is out ([`ClusterCache::outage`]) until its
//!   Secret changes (a read that failed is retried with the watches' backoff). Here, a rotated
//!   kubeconfig takes the member out: its watches through the old client are stopped and
//!   started through the new one, which lists everything again, before anything is decided on
//!   it (so its caches are rebuilt from the new client). A Secret changed to one that cannot
//!   be used disconnects it (the old credentials are not kept).
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

use std::sync::{Arc, Mutex};

use baton_config::ClusterConfig;
use baton_core::clusters::Outage;
use baton_core::pods::CachedPod;
use baton_shared::kube_client::ClientLayers;
use baton_shared::members::{Connection, Connector, MemberClients, MemberError};
use baton_shared::pod_cache::PodCache;
use futures::{FutureExt, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::Error;

/// Where the groups' objects live, to send each write there: the controller's own cluster, or,
/// with member clusters, the member a qualified name (`cluster/name`) names.
#[derive(Clone)]
pub struct Clusters {
    hub: kube::Client,
    /// Each member's client, once connected. `None`: no member clusters.
    clients: Option<MemberClients>,
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
    /// kubeconfig could not be read yet, or its Secret changed to one that cannot be used).
    pub fn client_for<'n>(&self, name: &'n str) -> Result<(kube::Client, &'n str), Error> {
        let (Some(clients), (Some(cluster), local)) =
            (&self.clients, baton_core::clusters::split(name))
        else {
            return Ok((self.hub.clone(), name));
        };
        match clients.get(cluster) {
            Ok(client) => Ok((client, local)),
            Err(_) => Err(Error::NotConnected {
                name: name.to_owned(),
                cluster: cluster.to_owned(),
            }),
        }
    }

    fn connected(&self, cluster: &str, client: kube::Client) {
        if let Some(clients) = &self.clients {
            clients.connected(cluster, client);
        }
    }

    /// `cluster` has no client any more (`why`): its writes fail with [`Error::NotConnected`]
    /// until it is connected again.
    fn disconnected(&self, cluster: &str, why: String) {
        if let Some(clients) = &self.clients {
            clients.disconnected(cluster, why);
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
    /// Which of the member's clients the watches' health is of: counted up each time the
    /// member is connected anew or disconnected, so that a late event of a stopped watch (of
    /// the client before) is not taken for the new client's.
    generation: u64,
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

    /// The member's client changes (`generation`, a new one; or none, with `error`): nothing
    /// the watches saw through the client before counts any more, so the member is out until
    /// both have listed through the new one. What they last showed stays known
    /// (`listed_once`): the caches keep it until the new lists replace it.
    fn switch(&mut self, generation: u64, error: Option<String>) {
        self.generation = generation;
        self.connect_error = error;
        self.watches = Default::default();
    }

    /// Notes a watch's event, seen through the client of `generation`; true when whether the
    /// member is out changed.
    fn observe<K>(
        &mut self,
        generation: u64,
        watch: Watch,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) -> bool {
        if generation != self.generation {
            return false;
        }
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
        clients: Some(MemberClients::default()),
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

/// The member's client as it is now, with the [`Health::generation`] it is of; `None` while
/// the member has none (not connected yet, or its Secret changed to one that cannot be used).
type CurrentClient = Option<(u64, kube::Client)>;

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
    };
    let (current, client) = tokio::sync::watch::channel::<CurrentClient>(None);
    let namespace = settings.namespace.to_owned();
    let statefulset_events = cluster_events(
        client.clone(),
        namespace.clone(),
        watcher::Config::default().labels(baton_core::annotations::ROLLOUT_GROUP_LABEL),
        Watch::StatefulSets,
        health.clone(),
        out_changed.clone(),
    );
    let pod_events = cluster_events(
        client,
        namespace.clone(),
        watcher::Config::default(),
        Watch::Pods,
        health.clone(),
        out_changed.clone(),
    );
    let (statefulsets, pods, watches) =
        crate::cache::watch_workloads(statefulset_events, pod_events, namespace, touched.clone());
    let cache = ClusterCache {
        cluster: cluster.name.clone(),
        statefulsets: statefulsets.clone(),
        pods,
        health: health.clone(),
    };
    let member = Member {
        cluster: cluster.name.clone(),
        health,
        out_changed,
        current,
        clusters,
        in_use: None,
        connected_once: false,
        last_error: None,
        failures: settings.failures.clone(),
    };
    let follow = baton_shared::members::follow_kubeconfig(connector, cluster.clone(), member);
    let name = cluster.name.clone();
    let watched = cache.clone();
    let drive = async move {
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
        futures::join!(follow, watches, retell);
    };
    (cache, drive)
}

/// The events of one of a member's watches through its current client: started when it has
/// one, started over after each failure, and stopped when the client changes (the watch of the
/// new one then lists everything again, which replaces the cache's content). Each event is
/// noted in its health, as of the client it came through (telling `out_changed` when the member
/// goes out or comes back).
fn cluster_events<K>(
    clients: tokio::sync::watch::Receiver<CurrentClient>,
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
    let each_client = futures::stream::unfold(clients, |mut clients| async move {
        loop {
            let now = clients.borrow_and_update().clone();
            if let Some((generation, client)) = now {
                // Seen up to this client: the next change ends its watch.
                let mut next = clients.clone();
                let switched = async move {
                    if next.changed().await.is_err() {
                        // No more changes: the member keeps this client.
                        std::future::pending::<()>().await;
                    }
                }
                .boxed();
                return Some(((generation, client, switched), clients));
            }
            clients.changed().await.ok()?;
        }
    });
    each_client.flat_map(move |(generation, client, switched)| {
        let api = Api::namespaced(client, &namespace);
        let (health, out_changed) = (health.clone(), out_changed.clone());
        baton_shared::initial_list::relisting_watcher(api, config.clone())
            .take_until(switched)
            .inspect(move |event| {
                let changed = health
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .observe(generation, watch, event);
                if changed {
                    let _ = out_changed.send(());
                }
            })
    })
}

/// A member's connection as its kubeconfig Secret gives it, told to its watches, its health
/// and the routing of writes.
struct Member {
    cluster: String,
    health: Arc<Mutex<Health>>,
    out_changed: UnboundedSender<()>,
    current: tokio::sync::watch::Sender<CurrentClient>,
    clusters: Clusters,
    /// The kubeconfig the current client was built from.
    in_use: Option<String>,
    /// Whether it was ever connected: a later connection is a reconnection.
    connected_once: bool,
    /// The last problem told, so that each is told once.
    last_error: Option<String>,
    /// Counts each failed attempt to connect.
    failures: crate::error::Failures,
}

impl Member {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a failed attempt to connect; its text.
    fn counted(&self, error: MemberError) -> String {
        let error = Error::from(error);
        self.failures.count(&error);
        error.to_string()
    }
}

impl Connection for Member {
    fn in_use(&self) -> Option<&str> {
        self.in_use.as_deref()
    }

    /// Connects with `client`, built from `kubeconfig`: the member is out (its health starts
    /// over) before the client is handed to the writes and the watches, and until both watches
    /// have listed through it.
    fn connect(&mut self, kubeconfig: String, client: kube::Client) {
        let generation = self.health().generation + 1;
        self.health().switch(generation, None);
        let _ = self.out_changed.send(());
        self.clusters.connected(&self.cluster, client.clone());
        self.current.send_replace(Some((generation, client)));
        if self.in_use.is_some() {
            tracing::info!(cluster = %self.cluster, "the member cluster's kubeconfig Secret changed: reconnected with it; its groups are held until its watches have listed again");
        } else if self.connected_once {
            tracing::info!(cluster = %self.cluster, "the member cluster's kubeconfig Secret can be used again: reconnected with it; its groups are held until its watches have listed again");
        } else {
            tracing::info!(cluster = %self.cluster, "connected to member cluster");
        }
        self.connected_once = true;
        self.in_use = Some(kubeconfig);
        self.last_error = None;
    }

    /// The Secret as it is now cannot be used (gone, no key, not a kubeconfig, refused): the
    /// member is out with `error`, and a client built from what the Secret held before is
    /// dropped, not kept. Whoever changed the Secret meant the old credentials to go: they may
    /// be revoked (a token rotated after a leak) or name a cluster no longer meant, and a
    /// member read with them could be trusted on a snapshot nobody vouches for. Out is the
    /// planner's safe side: its groups are held, nothing is deleted, until the Secret is fixed.
    fn refuse(&mut self, error: MemberError) {
        let error = self.counted(error);
        if self.in_use.is_none() && self.last_error.as_ref() == Some(&error) {
            return;
        }
        let generation = self.health().generation + 1;
        self.health().switch(generation, Some(error.clone()));
        let _ = self.out_changed.send(());
        if self.in_use.take().is_some() {
            self.clusters.disconnected(&self.cluster, error.clone());
            self.current.send_replace(None);
            tracing::warn!(cluster = %self.cluster, %error, "the member cluster's kubeconfig Secret changed and cannot be used: disconnected, its groups held until it is fixed");
        } else {
            tracing::warn!(cluster = %self.cluster, %error, "cannot connect to member cluster; retrying");
        }
        self.last_error = Some(error);
    }

    /// The Secret could not be read (the hub's API server did not answer, or refused): that
    /// says nothing of the Secret, so a connected member keeps its client, and one that is
    /// not connected yet stays out with `error`.
    fn unread(&mut self, error: MemberError) {
        let error = self.counted(error);
        if self.last_error.as_ref() == Some(&error) {
            return;
        }
        if self.in_use.is_none() {
            let generation = self.health().generation;
            self.health().switch(generation, Some(error.clone()));
            let _ = self.out_changed.send(());
            tracing::warn!(cluster = %self.cluster, %error, "cannot connect to member cluster; retrying");
        } else {
            tracing::warn!(cluster = %self.cluster, %error, "cannot read the member cluster's kubeconfig Secret; its connection stays as it is, and the Secret is read again");
        }
        self.last_error = Some(error);
    }
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
        assert!(!health.observe(0, Watch::StatefulSets, &listed()));
        assert!(
            health
                .outage()
                .expect("pods")
                .contains("pods are not listed yet")
        );
        // Both listed: in, and that is a change.
        assert!(health.observe(0, Watch::Pods, &listed()));
        assert_eq!(health.outage(), None);
        assert!(health.listed_once);
        // A failure takes it out at once, naming the watch.
        assert!(health.observe(0, Watch::Pods, &failure()));
        let outage = health.outage().expect("out");
        assert!(outage.contains("watching its pods failed"), "{outage}");
        // A watch that starts listing again is not enough: only the end of its list is.
        assert!(!health.observe(0, Watch::Pods, &listing()));
        assert!(health.outage().is_some());
        assert!(health.observe(0, Watch::Pods, &listed()));
        assert_eq!(health.outage(), None);
    }

    #[test]
    fn a_new_client_takes_the_cluster_out_until_both_watches_listed_through_it() {
        let mut health = Health::default();
        health.observe(0, Watch::StatefulSets, &listed());
        health.observe(0, Watch::Pods, &listed());
        assert_eq!(health.outage(), None);
        // The Secret changed: a new client, and nothing seen through the old one counts.
        health.switch(1, None);
        assert!(health.outage().expect("out").contains("not listed yet"));
        assert!(health.listed_once, "what it last showed is still known");
        // A late event of the old client's watches changes nothing.
        assert!(!health.observe(0, Watch::StatefulSets, &listed()));
        assert!(!health.observe(0, Watch::Pods, &listed()));
        assert!(health.outage().is_some());
        // Both watches listed through the new one: in again.
        assert!(!health.observe(1, Watch::StatefulSets, &listed()));
        assert!(health.observe(1, Watch::Pods, &listed()));
        assert_eq!(health.outage(), None);
        // A Secret changed to one that cannot be used: out with its problem, whatever the
        // watches of the dropped client said last.
        health.switch(
            2,
            Some("key kubeconfig of Secret baton-system/member-b is refused".into()),
        );
        assert!(health.outage().expect("out").contains("is refused"));
        assert!(!health.observe(1, Watch::Pods, &listed()));
        assert!(health.outage().expect("out").contains("is refused"));
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
