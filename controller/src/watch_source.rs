//! Where a namespace's caches get their watch events: from watches of their own (one namespace
//! served: namespaced requests, so a Role suffices, as with the Go operator), or, serving several
//! namespaces, from one cluster-wide watch per kind shared by all of them
//! (`baton_shared::fanout`): the API server then holds six watches whatever the number of
//! namespaces, and a replica keeps the objects of the namespaces it serves alone.
//!
//! What each kind's watch selects is written once, here, for both ways.

use std::future::Future;
use std::sync::Arc;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::ledger::MANAGED_BY_LABEL;
use baton_core::phased::PhasedRollout;
use baton_core::zpdb::ZoneAwarePodDisruptionBudget;
use baton_shared::fanout::{Events, Fanout};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The watch events of each kind a namespace's caches hold. Cheap to clone.
#[derive(Clone)]
pub struct WatchSource {
    way: Way,
    /// The Go operator's zone tracker ConfigMap, watched by name.
    zone_tracker: String,
}

#[derive(Clone)]
enum Way {
    Own(kube::Client),
    Shared(Arc<Shared>),
}

/// One cluster-wide watch of each kind.
struct Shared {
    statefulsets: Fanout<StatefulSet>,
    pods: Fanout<Pod>,
    ledgers: Fanout<ConfigMap>,
    zone_trackers: Fanout<ConfigMap>,
    budgets: Fanout<ZoneAwarePodDisruptionBudget>,
    phased_rollouts: Fanout<PhasedRollout>,
}

/// The rollout groups' StatefulSets: those with the group label.
fn statefulsets() -> watcher::Config {
    watcher::Config::default().labels(ROLLOUT_GROUP_LABEL)
}

/// The label the StatefulSet controller gives each pod it makes (and puts back if removed).
const STATEFULSET_POD_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// StatefulSets' pods: a group's pods are found by their owner, which no selector can name, so
/// this is the narrowest the API server filters (no Deployment's, DaemonSet's or Job's pod is
/// ever sent).
fn pods() -> watcher::Config {
    watcher::Config::default().labels(STATEFULSET_POD_LABEL)
}

/// The groups' downscale ledgers, by their labels.
fn ledgers() -> watcher::Config {
    watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}=baton,{ROLLOUT_GROUP_LABEL}"))
}

/// The zone tracker, by its name.
fn zone_tracker_named(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

impl WatchSource {
    /// Each namespace watches its own objects.
    pub fn own(client: kube::Client, zone_tracker: &str) -> Self {
        Self {
            way: Way::Own(client),
            zone_tracker: zone_tracker.to_owned(),
        }
    }

    /// Every namespace's events from one cluster-wide watch per kind, and the future that
    /// drives those watches: run it as a critical task. A kind is watched only while a
    /// namespace is served.
    pub fn shared(
        client: &kube::Client,
        zone_tracker: &str,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (statefulsets, statefulset_watch) = fanout(client, statefulsets());
        let (pods, pod_watch) = fanout(client, pods());
        let (ledgers, ledger_watch) = fanout(client, ledgers());
        let (zone_trackers, tracker_watch) = fanout(client, zone_tracker_named(zone_tracker));
        let (budgets, budget_watch) = fanout(client, watcher::Config::default());
        let (phased_rollouts, phased_watch) = fanout(client, watcher::Config::default());
        let shared = Shared {
            statefulsets,
            pods,
            ledgers,
            zone_trackers,
            budgets,
            phased_rollouts,
        };
        let watches = async move {
            futures::join!(
                statefulset_watch,
                pod_watch,
                ledger_watch,
                tracker_watch,
                budget_watch,
                phased_watch
            );
        };
        let source = Self {
            way: Way::Shared(Arc::new(shared)),
            zone_tracker: zone_tracker.to_owned(),
        };
        (source, watches)
    }

    pub fn statefulsets(&self, namespace: &str) -> Events<StatefulSet> {
        self.events(namespace, statefulsets(), |shared| &shared.statefulsets)
    }

    pub fn pods(&self, namespace: &str) -> Events<Pod> {
        self.events(namespace, pods(), |shared| &shared.pods)
    }

    pub fn ledgers(&self, namespace: &str) -> Events<ConfigMap> {
        self.events(namespace, ledgers(), |shared| &shared.ledgers)
    }

    pub fn zone_tracker(&self, namespace: &str) -> Events<ConfigMap> {
        let selection = zone_tracker_named(&self.zone_tracker);
        self.events(namespace, selection, |shared| &shared.zone_trackers)
    }

    pub fn budgets(&self, namespace: &str) -> Events<ZoneAwarePodDisruptionBudget> {
        let selection = watcher::Config::default();
        self.events(namespace, selection, |shared| &shared.budgets)
    }

    pub fn phased_rollouts(&self, namespace: &str) -> Events<PhasedRollout> {
        let selection = watcher::Config::default();
        self.events(namespace, selection, |shared| &shared.phased_rollouts)
    }

    fn events<K>(
        &self,
        namespace: &str,
        selection: watcher::Config,
        shared: impl FnOnce(&Shared) -> &Fanout<K>,
    ) -> Events<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        match &self.way {
            Way::Own(client) => watch(Api::namespaced(client.clone(), namespace), selection),
            Way::Shared(fanouts) => shared(fanouts).subscribe(namespace),
        }
    }
}

/// A watch of what `api` and `selection` select, retried with the workspace's backoff.
fn watch<K>(api: Api<K>, selection: watcher::Config) -> Events<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    baton_shared::initial_list::watcher(api, selection)
        .backoff(baton_shared::kube_client::watch_backoff())
        .boxed()
}

/// The fanout of one cluster-wide watch of what `selection` selects.
fn fanout<K>(
    client: &kube::Client,
    selection: watcher::Config,
) -> (Fanout<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let client = client.clone();
    Fanout::new(move || watch(Api::all(client.clone()), selection.clone()))
}
