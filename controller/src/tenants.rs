//! One controller for several namespaces: the namespaces served, each with the machinery one
//! namespace has always had (its caches and watches, its budgets, its PhasedRollouts, its
//! reconciler), taken up when its namespace starts being served and let go when it stops, while
//! the controller runs.
//!
//! Why a namespace keeps its own machinery rather than sharing the cluster's: everything a
//! group's pass reads and writes is in one namespace, and that code was written, tested and
//! simulated for one namespace; keeping it whole keeps those guarantees. What the namespaces
//! share is what must be one: the leader's term (every write is fenced by it, as before), the
//! work queue (so at most a few groups run at once, whichever their namespace), the status
//! board and the metrics, which know a group by its key, `namespace/group`
//! ([`baton_core::namespaces::qualify`]), so two namespaces' groups of one name stay apart.
//!
//! The cost: one watch per kind and namespace served (not one per kind for the cluster), which
//! is what docs/design/whole-cluster.md's "Cost that grows with what rolls" replaces next.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use baton_core::namespaces::{self, Scope};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cache::Caches;
use crate::group::GroupReconciler;
use crate::metrics::ControllerMetrics;
use crate::queue::Requeue;
use crate::status::StatusBoard;

/// One served namespace's machinery, as the controller had for its one namespace.
pub struct Tenant {
    pub caches: Caches,
    pub reconciler: Arc<GroupReconciler>,
    /// Whether its caches have listed once: before that, its groups are not acted on.
    pub synced: watch::Receiver<bool>,
}

/// Starts a namespace's machinery: the tenant, and the future that drives its watches and
/// timers until it ends or is dropped.
pub type StartTenant =
    Box<dyn Fn(&str) -> anyhow::Result<(Tenant, BoxFuture<'static, ()>)> + Send + Sync>;

/// The namespaces served now, each with its tenant. Cheap to clone: clones share one registry.
#[derive(Clone, Default)]
pub struct Tenants {
    by_namespace: Arc<RwLock<BTreeMap<String, Arc<Tenant>>>>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("namespaces", &self.namespaces())
            .finish()
    }
}

impl Tenants {
    /// The namespaces served now.
    pub fn namespaces(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Each namespace served and its caches, in name order: what the status page reads.
    pub fn caches(&self) -> Vec<(String, Caches)> {
        self.read()
            .iter()
            .map(|(namespace, tenant)| (namespace.clone(), tenant.caches.clone()))
            .collect()
    }

    /// One pass over the group keyed `namespace/group`; nothing for a namespace no longer (or
    /// not yet) served.
    pub async fn reconcile(&self, key: &str) -> Requeue {
        let (Some(namespace), _) = namespaces::split(key) else {
            tracing::warn!(key, "a group key without its namespace; ignored");
            return Requeue::Never;
        };
        let tenant = self.read().get(namespace).cloned();
        match tenant {
            Some(tenant) => tenant.reconciler.reconcile(key).await,
            None => Requeue::Never,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Tenant>>> {
        self.by_namespace
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Tenant>>> {
        self.by_namespace
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The Namespaces of the cluster, watched (every one: a label can make any of them served) and
/// the set served, kept current on `served` from every change.
pub fn watch_namespaces(
    client: kube::Client,
    scope: Scope,
) -> (
    watch::Receiver<Option<BTreeSet<String>>>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (served_sender, served) = watch::channel(None);
    let (store_sender, mut changes) = watch::channel(());
    let (store, fill): (Store<Namespace>, _) = baton_shared::reflect::reflect(
        Api::<Namespace>::all(client),
        watcher::Config::default(),
        |namespace: &mut Namespace| namespace.managed_fields_mut().clear(),
        move |_event: &watcher::Event<Namespace>| {
            store_sender.send_replace(());
        },
    );
    let judge = async move {
        if store.wait_until_ready().await.is_err() {
            return;
        }
        let mut warned: Vec<String> = Vec::new();
        loop {
            let listed = store.state();
            let empty = BTreeMap::new();
            // A namespace being deleted is let go at once: its objects are on their way out,
            // and a rollout there has nothing left to keep safe.
            let found = namespaces::served(
                &scope,
                listed
                    .iter()
                    .filter(|namespace| namespace.metadata.deletion_timestamp.is_none())
                    .map(|namespace| {
                        (
                            namespace.metadata.name.as_deref().unwrap_or_default(),
                            namespace.metadata.labels.as_ref().unwrap_or(&empty),
                        )
                    }),
            );
            // (a warning is logged when it starts to hold, not at every change of any namespace)
            for warning in &found.warnings {
                if !warned.contains(warning) {
                    tracing::warn!("{warning}");
                }
            }
            warned = found.warnings;
            served_sender.send_if_modified(|served| {
                let changed = served.as_ref() != Some(&found.namespaces);
                if changed {
                    *served = Some(found.namespaces);
                }
                changed
            });
            if changes.changed().await.is_err() {
                return;
            }
        }
    };
    let run = async move {
        futures::join!(fill, judge);
    };
    (served, run)
}

/// The namespaces of `served` whose shard this replica holds (`held`), kept current from both:
/// with shards, a replica watches, caches and acts on its share of the namespaces alone.
pub fn of_held_shards(
    mut served: watch::Receiver<Option<BTreeSet<String>>>,
    mut held: watch::Receiver<crate::shards::HeldShards>,
) -> (
    watch::Receiver<Option<BTreeSet<String>>>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (narrowed_sender, narrowed) = watch::channel(None);
    let run = async move {
        loop {
            let wanted = served.borrow_and_update().clone().map(|namespaces| {
                let held = held.borrow_and_update().clone();
                namespaces
                    .into_iter()
                    .filter(|namespace| held.serves(namespace))
                    .collect::<BTreeSet<String>>()
            });
            narrowed_sender.send_if_modified(|narrowed| {
                let changed = *narrowed != wanted;
                if changed {
                    *narrowed = wanted;
                }
                changed
            });
            tokio::select! {
                changed = served.changed() => if changed.is_err() { return },
                changed = held.changed() => if changed.is_err() { return },
            }
        }
    };
    (narrowed, run)
}

/// Takes up each namespace as it starts being served and lets it go as it stops, until
/// `shutdown`. A namespace let go stops acting at once (its reconciles find no tenant) and is
/// forgotten by the status board and the metrics. `taken_up` is told once the first served set
/// has been taken up and every one of its namespaces has listed (readiness).
pub async fn serve(
    tenants: Tenants,
    mut served: watch::Receiver<Option<BTreeSet<String>>>,
    start: StartTenant,
    forget: Forget,
    taken_up: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut running = Running {
        tenants,
        start,
        forget,
        stops: HashMap::new(),
        tasks: JoinSet::new(),
        shutdown: shutdown.clone(),
    };
    let mut first = true;
    loop {
        let wanted = served.borrow_and_update().clone();
        if let Some(wanted) = wanted {
            running.let_go(&wanted);
            let started = running.take_up(&wanted)?;
            if first {
                first = false;
                let taken_up = taken_up.clone();
                running.tasks.spawn(async move {
                    for mut synced in started {
                        let _ = synced.wait_for(|synced| *synced).await;
                    }
                    tracing::info!("every namespace served has listed");
                    taken_up.send_replace(true);
                });
            }
        }
        tokio::select! {
            changed = served.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            // (a namespace's work ends only when stopped: reap what ended)
            Some(_) = running.tasks.join_next() => {}
            () = shutdown.cancelled() => break,
        }
    }
    for stop in running.stops.values() {
        stop.cancel();
    }
    while running.tasks.join_next().await.is_some() {}
    Ok(())
}

/// The namespaces taken up, each with what stops its work.
struct Running {
    tenants: Tenants,
    start: StartTenant,
    forget: Forget,
    stops: HashMap<String, CancellationToken>,
    tasks: JoinSet<()>,
    shutdown: CancellationToken,
}

impl Running {
    /// Lets go every namespace taken up that is not `wanted`.
    fn let_go(&mut self, wanted: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .stops
            .keys()
            .filter(|namespace| !wanted.contains(*namespace))
            .cloned()
            .collect();
        for namespace in gone {
            if let Some(stop) = self.stops.remove(&namespace) {
                stop.cancel();
            }
            if let Some(tenant) = self.tenants.write().remove(&namespace) {
                self.forget.namespace(&namespace, &tenant.caches);
            }
            tracing::info!(namespace, "namespace let go: no longer served");
        }
    }

    /// Takes up every namespace `wanted` not taken up yet; whether each has listed.
    fn take_up(&mut self, wanted: &BTreeSet<String>) -> anyhow::Result<Vec<watch::Receiver<bool>>> {
        let mut started = Vec::new();
        for namespace in wanted {
            if self.stops.contains_key(namespace) {
                continue;
            }
            // Building a namespace's parts fails only on a bug (a client that cannot be
            // built): the controller stops rather than serve without it.
            let (tenant, work) = (self.start)(namespace)
                .map_err(|error| error.context(format!("taking up namespace {namespace}")))?;
            let stop = self.shutdown.child_token();
            let stopped = stop.clone();
            self.tasks.spawn(async move {
                tokio::select! {
                    () = work => {}
                    () = stopped.cancelled() => {}
                }
            });
            started.push(tenant.synced.clone());
            self.tenants
                .write()
                .insert(namespace.clone(), Arc::new(tenant));
            self.stops.insert(namespace.clone(), stop);
            tracing::info!(namespace, "namespace taken up: served");
        }
        Ok(started)
    }
}

/// What is forgotten of a namespace let go: its groups' metrics and status board entries.
#[derive(Clone)]
pub struct Forget {
    pub metrics: ControllerMetrics,
    pub board: StatusBoard,
}

impl Forget {
    fn namespace(&self, namespace: &str, caches: &Caches) {
        for group in caches.groups() {
            let key = namespaces::qualify(namespace, &group);
            self.metrics.forget_group(&key);
            self.board.forget(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::HeldShards;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// Waits until the narrowed set is `expected`.
    async fn narrowed_to(
        narrowed: &mut watch::Receiver<Option<BTreeSet<String>>>,
        expected: Option<BTreeSet<String>>,
    ) {
        let waited = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            narrowed.wait_for(|now| *now == expected),
        )
        .await
        .is_ok();
        assert!(
            waited,
            "narrowed to {expected:?}, is {:?}",
            *narrowed.borrow()
        );
    }

    #[tokio::test]
    async fn with_shards_a_replica_serves_the_namespaces_of_the_shards_it_holds_and_follows_both() {
        // Given three namespaces served and four shards, this replica holding the first's
        let count = 4;
        let shard = |namespace: &str| baton_core::shards::shard_of(namespace, count);
        let (served_sender, served) = watch::channel(None);
        let (held_sender, held) = watch::channel(HeldShards::default());
        let (mut narrowed, run) = of_held_shards(served, held);
        let running = tokio::spawn(run);
        narrowed_to(&mut narrowed, None).await;
        served_sender.send_replace(Some(set(&["a", "b", "c"])));
        held_sender.send_replace(HeldShards {
            count,
            shards: BTreeSet::from([shard("a")]),
        });
        // Then it serves the first, and those sharing its shard, and no other
        let of_a: Vec<&str> = ["a", "b", "c"]
            .into_iter()
            .filter(|namespace| shard(namespace) == shard("a"))
            .collect();
        narrowed_to(&mut narrowed, Some(set(&of_a))).await;
        // When it comes to hold every shard: every namespace served
        held_sender.send_replace(HeldShards {
            count,
            shards: (0..count).collect(),
        });
        narrowed_to(&mut narrowed, Some(set(&["a", "b", "c"]))).await;
        // When a namespace stops being served: it goes, whatever the shards
        served_sender.send_replace(Some(set(&["a", "c"])));
        narrowed_to(&mut narrowed, Some(set(&["a", "c"]))).await;
        // When it holds no shard (a count of 0: none shared by yet): nothing is served
        held_sender.send_replace(HeldShards::default());
        narrowed_to(&mut narrowed, Some(BTreeSet::new())).await;
        running.abort();
    }
}
