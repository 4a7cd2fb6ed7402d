//! Watch-fed caches of the namespace's rollout-group StatefulSets and pods. Every change is
//! routed to the one rollout group it concerns, so only that group is reconciled.

use std::collections::HashMap;
use std::future::Future;

use baton_shared::annotations::ROLLOUT_GROUP_LABEL;
use baton_shared::kube_client::watch_backoff;
use baton_shared::pod_cache::{self, PodCache};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
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
    /// Waits until both caches hold a complete initial list.
    pub async fn synced(&self) -> Result<(), anyhow::Error> {
        self.statefulsets.wait_until_ready().await?;
        Ok(self.pods.wait_until_ready().await?)
    }

    /// The StatefulSets of `group`.
    pub fn group_members(&self, group: &str) -> Vec<std::sync::Arc<StatefulSet>> {
        self.statefulsets
            .state_filter(|statefulset| group_of(statefulset) == Some(group))
    }

    /// Every group name the cache knows.
    pub fn groups(&self) -> Vec<String> {
        let mut groups: Vec<String> = self
            .statefulsets
            .state()
            .iter()
            .filter_map(|statefulset| group_of(statefulset).map(str::to_owned))
            .collect();
        groups.sort();
        groups.dedup();
        groups
    }
}

/// The rollout group a StatefulSet belongs to.
pub fn group_of(statefulset: &StatefulSet) -> Option<&str> {
    statefulset
        .labels()
        .get(ROLLOUT_GROUP_LABEL)
        .map(String::as_str)
}

/// The name of the StatefulSet controlling a pod, from its controller owner reference.
pub use baton_shared::pods::controlling_statefulset;

/// Starts the reflectors of `namespace`. The returned future drives both watches until it is
/// dropped, sending the group touched by each event on `touched`.
pub fn start(
    client: kube::Client,
    namespace: &str,
    touched: UnboundedSender<String>,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    let (statefulset_store, statefulset_writer) = reflector::store();
    // Pods are most of the controller's memory: only what baton reads is kept.
    let (pod_cache, pods) = pod_cache::watch(client.clone(), namespace, watcher::Config::default());
    let caches = Caches {
        statefulsets: statefulset_store.clone(),
        pods: pod_cache,
    };

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
        futures::future::join(statefulset_events, pod_events).await;
    };
    (caches, drive)
}
