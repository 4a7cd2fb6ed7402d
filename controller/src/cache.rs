//! Watch-fed caches of the namespace's rollout-group StatefulSets and pods. Every change is
//! routed to the one rollout group it concerns, so only that group is reconciled.

use std::collections::HashMap;
use std::future::Future;

use baton_shared::annotations::ROLLOUT_GROUP_LABEL;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;

/// Read-only views of what the watches have seen.
#[derive(Clone)]
pub struct Caches {
    pub statefulsets: Store<StatefulSet>,
    pub pods: Store<Pod>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("statefulsets", &self.statefulsets.state().len())
            .field("pods", &self.pods.state().len())
            .finish()
    }
}

impl Caches {
    /// Waits until both caches hold a complete initial list.
    pub async fn synced(&self) -> Result<(), reflector::store::WriterDropped> {
        self.statefulsets.wait_until_ready().await?;
        self.pods.wait_until_ready().await
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
pub fn controlling_statefulset(pod: &Pod) -> Option<&str> {
    pod.owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true) && owner.kind == "StatefulSet")
        .map(|owner| owner.name.as_str())
}

/// Starts the reflectors of `namespace`. The returned future drives both watches until it is
/// dropped, sending the group touched by each event on `touched`.
pub fn start(
    client: kube::Client,
    namespace: &str,
    touched: UnboundedSender<String>,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    let (statefulset_store, statefulset_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let caches = Caches {
        statefulsets: statefulset_store.clone(),
        pods: pod_store,
    };

    let statefulsets = watcher(
        Api::<StatefulSet>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(ROLLOUT_GROUP_LABEL),
    )
    .default_backoff()
    .modify(|statefulset: &mut StatefulSet| statefulset.managed_fields_mut().clear())
    .reflect(statefulset_writer)
    .touched_objects();

    let pods = watcher(
        Api::<Pod>::namespaced(client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(slim_pod)
    .reflect(pod_writer)
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

/// Drops what baton never reads from cached pods (managed fields, most of the spec), which is
/// most of a pod's memory.
fn slim_pod(pod: &mut Pod) {
    pod.managed_fields_mut().clear();
    pod.annotations_mut().clear();
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.init_containers = None;
        for container in &mut spec.containers {
            container.env = None;
            container.env_from = None;
            container.volume_mounts = None;
            container.args = None;
            container.command = None;
        }
    }
}
