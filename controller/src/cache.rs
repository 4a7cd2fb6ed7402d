//! Watch-fed caches of the namespace's rollout-group StatefulSets and pods. Every change is
//! routed to the one rollout group it concerns, so only that group is reconciled.

use std::collections::HashMap;
use std::future::Future;

use baton_shared::annotations::ROLLOUT_GROUP_LABEL;
use baton_shared::kube_client::watch_backoff;
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
pub use baton_shared::pods::controlling_statefulset;

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
    .backoff(watch_backoff())
    .modify(|statefulset: &mut StatefulSet| statefulset.managed_fields_mut().clear())
    .reflect(statefulset_writer)
    .touched_objects();

    let pods = watcher(
        Api::<Pod>::namespaced(client, namespace),
        watcher::Config::default(),
    )
    .backoff(watch_backoff())
    // Pods are most of the controller's memory: only what baton reads is kept.
    .modify(baton_shared::pods::slim)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::PodSnapshot;
    use baton_shared::pods::slim as slim_pod;

    fn full_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "ingester-zone-a-0",
                "uid": "uid-0",
                "labels": {"controller-revision-hash": "ingester-zone-a-abc", "name": "ingester-zone-a"},
                "annotations": {"big": "x".repeat(4096)},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ingester-zone-a", "uid": "sts", "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"containers": [{"name": "app", "image": "app:v1", "env": [{"name": "A", "value": "b"}]}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "hostIP": "10.1.0.1",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "message": "m"},
                ],
                "containerStatuses": [{"name": "app", "ready": true, "image": "app:v1", "imageID": "sha", "restartCount": 3}],
            },
        }))
        .unwrap()
    }

    /// Not ready: an init container done, the app crash-looping, a sidecar that terminated.
    fn crash_looping_pod() -> Pod {
        let mut pod = full_pod();
        pod.status = Some(serde_json::from_value(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "initContainerStatuses": [{"name": "init", "ready": true, "image": "i", "imageID": "", "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": "m", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:00Z"}}}],
            "containerStatuses": [
                {"name": "app", "ready": false, "image": "app:v1", "imageID": "sha", "restartCount": 7,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container=app pod=ingester-zone-a-0"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:00Z"}}},
                {"name": "sidecar", "ready": false, "image": "s", "imageID": "", "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:00Z"}}},
            ],
        })).unwrap());
        pod
    }

    #[test]
    fn a_slimmed_pod_keeps_why_its_containers_are_not_ready() {
        let pod = crash_looping_pod();
        let mut slim = pod.clone();
        slim_pod(&mut slim);
        let snapshot = PodSnapshot::from_kubernetes(&slim);
        assert_eq!(snapshot, PodSnapshot::from_kubernetes(&pod));
        assert_eq!(
            snapshot.container_state.as_deref(),
            Some("CrashLoopBackOff")
        );
        let kept = serde_json::to_string(&slim.status).unwrap();
        assert!(!kept.contains("back-off 5m0s"), "{kept}");
        assert!(!kept.contains("lastState"), "{kept}");
    }

    #[test]
    fn a_slimmed_pod_keeps_its_ownership_and_only_its_controller() {
        let statefulset: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ingester-zone-a", "namespace": "ns", "uid": "sts"},
            "spec": {
                "selector": {"matchLabels": {"name": "ingester-zone-a"}},
                "serviceName": "ingester",
                "template": {},
            },
        }))
        .unwrap();
        let mut pod = full_pod();
        pod.metadata.namespace = Some("ns".to_owned());
        pod.metadata.owner_references.get_or_insert_default().push(
            serde_json::from_value(serde_json::json!(
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "cm"}
            ))
            .unwrap(),
        );
        let mut slim = pod.clone();
        slim_pod(&mut slim);
        assert!(baton_shared::pods::is_controlled_by(&pod, &statefulset));
        assert!(baton_shared::pods::is_controlled_by(&slim, &statefulset));
        let owners: Vec<&str> = slim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|owner| owner.name.as_str())
            .collect();
        assert_eq!(owners, ["ingester-zone-a"]);
    }

    #[test]
    fn a_slimmed_pod_gives_the_planner_the_same_snapshot() {
        let pod = full_pod();
        let mut slim = pod.clone();
        slim_pod(&mut slim);
        assert_eq!(
            PodSnapshot::from_kubernetes(&slim),
            PodSnapshot::from_kubernetes(&pod)
        );
        assert_eq!(controlling_statefulset(&slim), Some("ingester-zone-a"));
        assert_eq!(
            slim.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
            Some("10.0.0.7")
        );
        assert!(slim.spec.is_none() && slim.metadata.annotations.is_none());
        assert_eq!(slim.metadata.resource_version, None);
        assert_eq!(slim.metadata.generate_name, None);
        let size = |pod: &Pod| serde_json::to_vec(pod).unwrap().len();
        assert!(
            size(&slim) * 4 < size(&pod),
            "{} vs {}",
            size(&slim),
            size(&pod)
        );
    }
}
