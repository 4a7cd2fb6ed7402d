//! Watch-fed caches of the namespace's rollout-group StatefulSets and pods. Every change is
//! routed to the one rollout group it concerns, so only that group is reconciled.

use std::collections::HashMap;
use std::future::Future;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::downscale_history::ZoneTracker;
use baton_core::ledger::{self, Ledger, MANAGED_BY_LABEL};
use baton_shared::kube_client::watch_backoff;
use baton_shared::pod_cache::{self, PodCache};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;

/// Read-only views of what the watches have seen.
#[derive(Clone)]
pub struct Caches {
    pub statefulsets: Store<StatefulSet>,
    pub pods: PodCache,
    /// The groups' downscale ledgers.
    pub ledgers: Store<ConfigMap>,
    /// The Go operator's zone tracker (at most one ConfigMap).
    pub zone_tracker: Store<ConfigMap>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("statefulsets", &self.statefulsets.state().len())
            .field("pods", &self.pods.len())
            .finish()
    }
}

impl Caches {
    /// Waits until every cache holds a complete initial list.
    pub async fn synced(&self) -> Result<(), anyhow::Error> {
        self.statefulsets.wait_until_ready().await?;
        self.ledgers.wait_until_ready().await?;
        self.zone_tracker.wait_until_ready().await?;
        Ok(self.pods.wait_until_ready().await?)
    }

    /// The StatefulSets of `group`.
    pub fn group_members(&self, group: &str) -> Vec<std::sync::Arc<StatefulSet>> {
        self.statefulsets
            .state_filter(|statefulset| group_of(statefulset) == Some(group))
    }

    /// What the group's downscale ledger and the zone tracker say now.
    pub fn downscale_records(&self, group: &str) -> (Ledger, ZoneTracker) {
        let name = ledger::ledger_name(group);
        let ledger = self
            .ledgers
            .find(|config_map| config_map.metadata.name.as_deref() == Some(&name))
            .map(|config_map| Ledger::from_config_map(config_map.as_ref().clone()))
            .unwrap_or_default();
        let tracker = self
            .zone_tracker
            .state()
            .first()
            .map(|config_map| ZoneTracker::from_config_map(config_map.as_ref().clone()))
            .unwrap_or_default();
        (ledger, tracker)
    }

    /// Every group name the cache knows.
    pub fn groups(&self) -> Vec<String> {
        groups_of(&self.statefulsets)
    }
}

fn groups_of(statefulsets: &Store<StatefulSet>) -> Vec<String> {
    let mut groups: Vec<String> = statefulsets
        .state()
        .iter()
        .filter_map(|statefulset| group_of(statefulset).map(str::to_owned))
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

/// The rollout group a StatefulSet belongs to.
pub fn group_of(statefulset: &StatefulSet) -> Option<&str> {
    statefulset
        .labels()
        .get(ROLLOUT_GROUP_LABEL)
        .map(String::as_str)
}

/// The name of the StatefulSet controlling a pod, from its controller owner reference.
pub use baton_core::pods::controlling_statefulset;

/// Starts the reflectors of `namespace`. The returned future drives the watches until it is
/// dropped, sending the group touched by each event on `touched`. `zone_tracker` names the Go
/// operator's zone tracker ConfigMap.
pub fn start(
    client: kube::Client,
    namespace: &str,
    zone_tracker: &str,
    touched: UnboundedSender<String>,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    let (statefulset_store, statefulset_writer) = reflector::store();
    // Pods are most of the controller's memory: only what baton reads is kept.
    let (pod_cache, pods) = pod_cache::watch(client.clone(), namespace, watcher::Config::default());
    let (ledger_store, ledger_writer) = reflector::store();
    let (tracker_store, tracker_writer) = reflector::store();
    let caches = Caches {
        statefulsets: statefulset_store.clone(),
        pods: pod_cache,
        ledgers: ledger_store,
        zone_tracker: tracker_store,
    };

    // The ledgers by their labels, the tracker by its name: each into its own store (one
    // store's relist replaces all it holds).
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let slim = |config_map: &mut ConfigMap| config_map.managed_fields_mut().clear();
    let ledgers = watcher(
        config_maps.clone(),
        watcher::Config::default()
            .labels(&format!("{MANAGED_BY_LABEL}=baton,{ROLLOUT_GROUP_LABEL}")),
    )
    .backoff(watch_backoff())
    .modify(slim)
    .reflect(ledger_writer)
    .touched_objects();
    let tracker = watcher(
        config_maps,
        watcher::Config::default().fields(&format!("metadata.name={zone_tracker}")),
    )
    .backoff(watch_backoff())
    .modify(slim)
    .reflect(tracker_writer)
    .touched_objects();
    let records = futures::stream::select(ledgers, tracker);

    let statefulsets = watcher(
        Api::<StatefulSet>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(ROLLOUT_GROUP_LABEL),
    )
    .backoff(watch_backoff())
    .modify(|statefulset: &mut StatefulSet| statefulset.managed_fields_mut().clear())
    .reflect(statefulset_writer)
    .touched_objects();

    let namespace = namespace.to_owned();
    let statefulset_touched = touched.clone();
    let records_touched = touched.clone();
    let records_statefulsets = statefulset_store.clone();
    let drive = async move {
        let mut last_group: HashMap<String, String> = HashMap::new();
        let statefulset_events = statefulsets
            .inspect_err(|error| tracing::warn!(%error, "StatefulSet watch error; retrying"))
            .filter_map(|result| async { result.ok() })
            .for_each(|statefulset| {
                let name = statefulset.name_any();
                let group = group_of(&statefulset).map(str::to_owned);
                // A StatefulSet that moved to another group leaves its old group changed too.
                let previous = match &group {
                    Some(group) => last_group.insert(name, group.clone()),
                    None => last_group.remove(&name),
                };
                for group in previous.into_iter().chain(group) {
                    let _ = statefulset_touched.send(group);
                }
                async {}
            });
        let pod_events = pods
            .inspect_err(|error| tracing::warn!(%error, "pod watch error; retrying"))
            .filter_map(|result| async { result.ok() })
            .for_each(|pod| {
                let group = controlling_statefulset(&pod).and_then(|owner| {
                    let key = ObjectRef::<StatefulSet>::new(owner).within(&namespace);
                    statefulset_store
                        .get(&key)
                        .and_then(|statefulset| group_of(&statefulset).map(str::to_owned))
                });
                if let Some(group) = group {
                    let _ = touched.send(group);
                }
                async {}
            });
        // A ledger concerns its group; the tracker every group (it changes once per downscale).
        let record_events = records
            .inspect_err(|error| tracing::warn!(%error, "ConfigMap watch error; retrying"))
            .filter_map(|result| async { result.ok() })
            .for_each(|config_map| {
                match config_map.labels().get(ROLLOUT_GROUP_LABEL) {
                    Some(group) => {
                        let _ = records_touched.send(group.clone());
                    }
                    None => {
                        for group in groups_of(&records_statefulsets) {
                            let _ = records_touched.send(group);
                        }
                    }
                }
                async {}
            });
        futures::future::join3(statefulset_events, pod_events, record_events).await;
    };
    (caches, drive)
}
