//! Watch-fed caches of the namespace's rollout-group StatefulSets and pods. Every change is
//! routed to the one rollout group it concerns, so only that group is reconciled.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use baton_core::annotations::ROLLOUT_GROUP_LABEL;
use baton_core::clusters::Outage;
use baton_core::downscale_history::ZoneTracker;
use baton_core::ledger::{self, Ledger};
use baton_core::pods::{CachedPod, controlling_statefulset};
use baton_core::statefulset::group_of;
use baton_shared::pod_cache::{self, PodCache};
use baton_shared::reflect::reflect_stream;
use futures::Stream;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use crate::clusters::ClusterCache;
use crate::watch_source::WatchSource;

/// Read-only views of what the watches have seen.
#[derive(Clone)]
pub struct Caches {
    workloads: Workloads,
    /// The groups' downscale ledgers.
    pub ledgers: Store<ConfigMap>,
    /// The Go operator's zone tracker (at most one ConfigMap).
    pub zone_tracker: Store<ConfigMap>,
}

/// The groups' StatefulSets and the pods: of the controller's own cluster, or of every member
/// cluster, named `cluster/name`.
#[derive(Clone)]
enum Workloads {
    Local {
        statefulsets: Store<StatefulSet>,
        pods: PodCache,
    },
    Clusters(Arc<[ClusterCache]>),
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (statefulsets, pods) = match &self.workloads {
            Workloads::Local { statefulsets, pods } => (statefulsets.state().len(), pods.len()),
            Workloads::Clusters(caches) => caches.iter().fold((0, 0), |(s, p), cache| {
                (s + cache.statefulsets.state().len(), p + cache.pods.len())
            }),
        };
        f.debug_struct("Caches")
            .field("statefulsets", &statefulsets)
            .field("pods", &pods)
            .finish()
    }
}

impl Caches {
    /// Caches of the controller's own cluster alone, already filled: for tests of what reads
    /// them.
    #[cfg(test)]
    pub fn local(
        statefulsets: Store<StatefulSet>,
        pods: PodCache,
        ledgers: Store<ConfigMap>,
        zone_tracker: Store<ConfigMap>,
    ) -> Self {
        Self {
            workloads: Workloads::Local { statefulsets, pods },
            ledgers,
            zone_tracker,
        }
    }

    /// Waits until every cache of the controller's own cluster holds a complete initial list.
    /// Member clusters are not waited for: one that cannot be reached would keep the controller
    /// from ever starting; until it is listed, it holds every group instead
    /// ([`Caches::outages`]).
    pub async fn synced(&self) -> Result<(), anyhow::Error> {
        self.ledgers.wait_until_ready().await?;
        self.zone_tracker.wait_until_ready().await?;
        if let Workloads::Local { statefulsets, pods } = &self.workloads {
            statefulsets.wait_until_ready().await?;
            pods.wait_until_ready().await?;
        }
        Ok(())
    }

    /// Every rollout-group StatefulSet (members named `cluster/name`).
    pub fn statefulsets(&self) -> Vec<Arc<StatefulSet>> {
        match &self.workloads {
            Workloads::Local { statefulsets, .. } => statefulsets.state(),
            Workloads::Clusters(caches) => caches
                .iter()
                .flat_map(|cache| cache.statefulsets_where(|_| true))
                .collect(),
        }
    }

    /// Every pod of the namespace (of every member, named `cluster/name`).
    pub fn pods(&self) -> Vec<Arc<CachedPod>> {
        match &self.workloads {
            Workloads::Local { pods, .. } => pods.state(),
            Workloads::Clusters(caches) => caches
                .iter()
                .flat_map(|cache| cache.pods_where(|_| true))
                .collect(),
        }
    }

    /// The pods a snapshot of `members` reads: every pod of the namespace in one cluster (a
    /// snapshot finds its own by owner), and with member clusters only the pods the members
    /// control, each renamed `cluster/name`: a pass copies its group's pods, not the
    /// namespace's.
    pub fn pods_of(&self, members: &[Arc<StatefulSet>]) -> Vec<Arc<CachedPod>> {
        match &self.workloads {
            Workloads::Local { pods, .. } => pods.state(),
            Workloads::Clusters(caches) => {
                let owners = owners_by_cluster(members);
                caches
                    .iter()
                    .flat_map(|cache| {
                        let uids = owners.get(cache.cluster.as_str());
                        cache.pods_where(|pod| {
                            pod.controller.as_ref().is_some_and(|owner| {
                                uids.is_some_and(|uids| uids.contains(owner.uid.as_str()))
                            })
                        })
                    })
                    .collect()
            }
        }
    }

    /// The member clusters that cannot be trusted now (none without member clusters).
    pub fn outages(&self) -> Vec<Outage> {
        match &self.workloads {
            Workloads::Local { .. } => Vec::new(),
            Workloads::Clusters(caches) => caches.iter().filter_map(ClusterCache::outage).collect(),
        }
    }

    /// The pod named `name` (`cluster/name` with member clusters).
    pub fn pod(&self, name: &str) -> Option<Arc<CachedPod>> {
        match &self.workloads {
            Workloads::Local { pods, .. } => pods.get(name),
            Workloads::Clusters(caches) => {
                let (Some(cluster), local) = baton_core::clusters::split(name) else {
                    return None;
                };
                let cache = caches.iter().find(|cache| cache.cluster == cluster)?;
                let pod = cache.pods.get(local)?;
                Some(Arc::new(baton_core::clusters::qualify_pod(cluster, &pod)))
            }
        }
    }

    /// The StatefulSets of `group` (a group's key: `namespace/group` where several namespaces
    /// are served, each namespace's caches holding its own alone).
    pub fn group_members(&self, group: &str) -> Vec<Arc<StatefulSet>> {
        let group = baton_core::namespaces::split(group).1;
        match &self.workloads {
            Workloads::Local { statefulsets, .. } => {
                statefulsets.state_filter(|statefulset| group_of(statefulset) == Some(group))
            }
            Workloads::Clusters(caches) => caches
                .iter()
                .flat_map(|cache| {
                    cache.statefulsets_where(|statefulset| group_of(statefulset) == Some(group))
                })
                .collect(),
        }
    }

    /// What the group's downscale ledger and the zone tracker say now.
    pub fn downscale_records(&self, group: &str) -> (Ledger, ZoneTracker) {
        let name = ledger::ledger_name(baton_core::namespaces::split(group).1);
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
        self.workloads.groups()
    }
}

impl Workloads {
    fn groups(&self) -> Vec<String> {
        match self {
            Workloads::Local { statefulsets, .. } => groups_of(statefulsets),
            Workloads::Clusters(caches) => {
                let mut groups: Vec<String> = caches
                    .iter()
                    .flat_map(|cache| groups_of(&cache.statefulsets))
                    .collect();
                groups.sort();
                groups.dedup();
                groups
            }
        }
    }
}

/// The uids of `members` (named `cluster/name`) by their cluster: a pod is copied for a member
/// of its own cluster alone, whatever uid its owner reference names (whoever may create pods
/// in one member can name another member's StatefulSet there).
fn owners_by_cluster(members: &[Arc<StatefulSet>]) -> HashMap<&str, HashSet<&str>> {
    let mut owners: HashMap<&str, HashSet<&str>> = HashMap::new();
    for member in members {
        let (Some(name), Some(uid)) = (&member.metadata.name, &member.metadata.uid) else {
            continue;
        };
        if let (Some(cluster), _) = baton_core::clusters::split(name) {
            owners.entry(cluster).or_default().insert(uid.as_str());
        }
    }
    owners
}

/// Every group `statefulsets` has a member of, once each.
pub fn groups_of(statefulsets: &Store<StatefulSet>) -> Vec<String> {
    let mut groups: Vec<String> = statefulsets
        .state()
        .iter()
        .filter_map(|statefulset| group_of(statefulset).map(str::to_owned))
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

/// Starts the watches of `namespace`, from `source`: its StatefulSets and pods, unless
/// `clusters` watch them in each member cluster instead, and the records. The returned future
/// drives them (run it as a critical task), sending the group touched by each change on
/// `touched`.
pub fn start(
    source: &WatchSource,
    namespace: &str,
    clusters: Option<Vec<ClusterCache>>,
    touched: UnboundedSender<String>,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    let (workloads, workload_watches) = match clusters {
        Some(caches) => (
            Workloads::Clusters(caches.into()),
            futures::future::Either::Left(futures::future::ready(())),
        ),
        None => {
            let (statefulsets, pods, watches) = watch_workloads(
                source.statefulsets(namespace),
                source.pods(namespace),
                namespace.to_owned(),
                touched.clone(),
            );
            (
                Workloads::Local { statefulsets, pods },
                futures::future::Either::Right(watches),
            )
        }
    };
    // The ledgers by their labels, the tracker by its name: each into its own store (one
    // store's relist replaces all it holds). A ledger concerns its group; the tracker every
    // group (it changes once per downscale).
    let slim = |config_map: &mut ConfigMap| config_map.managed_fields_mut().clear();
    let record_changed = |workloads: Workloads| {
        let to_group = touched.clone();
        move |event: &watcher::Event<ConfigMap>| {
            if let Some(config_map) = touched_object(event) {
                match config_map.labels().get(ROLLOUT_GROUP_LABEL) {
                    Some(group) => {
                        let _ = to_group.send(group.clone());
                    }
                    None => {
                        for group in workloads.groups() {
                            let _ = to_group.send(group);
                        }
                    }
                }
            }
        }
    };
    let (ledgers, ledger_watch) = reflect_stream(
        source.ledgers(namespace),
        slim,
        record_changed(workloads.clone()),
    );
    let (zone_tracker, tracker_watch) = reflect_stream(
        source.zone_tracker(namespace),
        slim,
        record_changed(workloads.clone()),
    );

    let caches = Caches {
        workloads,
        ledgers,
        zone_tracker,
    };
    let watches = async move {
        futures::join!(workload_watches, ledger_watch, tracker_watch);
    };
    (caches, watches)
}

/// The caches of one cluster's rollout-group StatefulSets and pods, from their watch events,
/// and the future that fills them, sending on `touched` each group a change concerns.
pub fn watch_workloads(
    statefulset_events: impl Stream<Item = Result<watcher::Event<StatefulSet>, watcher::Error>>
    + Send
    + 'static,
    pod_events: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
    namespace: String,
    touched: UnboundedSender<String>,
) -> (
    Store<StatefulSet>,
    PodCache,
    impl Future<Output = ()> + Send + 'static,
) {
    // A StatefulSet's change concerns its group, and the group it left if it moved.
    let mut moves = GroupMoves::default();
    let to_group = touched.clone();
    let (statefulsets, statefulset_watch) =
        reflect_stream(statefulset_events, slim_statefulset, move |event| {
            if let Some(statefulset) = touched_object(event) {
                for group in moves.touched(statefulset.name_any(), group_of(statefulset)) {
                    let _ = to_group.send(group);
                }
            }
        });

    // Pods are most of the controller's memory: only what baton reads is kept. A pod's change
    // concerns the group of the StatefulSet controlling it.
    let (pods, pod_watch) = {
        let statefulsets = statefulsets.clone();
        let within = namespace;
        pod_cache::watch_stream(pod_events, move |pod| {
            let group = controlling_statefulset(pod).and_then(|owner| {
                let key = ObjectRef::<StatefulSet>::new(owner).within(&within);
                statefulsets
                    .get(&key)
                    .and_then(|statefulset| group_of(&statefulset).map(str::to_owned))
            });
            if let Some(group) = group {
                let _ = touched.send(group);
            }
        })
    };
    let watches = async move {
        futures::join!(statefulset_watch, pod_watch);
    };
    (statefulsets, pods, watches)
}

/// What the controller never reads of a StatefulSet, dropped before it is cached: its managed
/// fields, its pod template's spec (the containers, volumes and the rest: a rollback writes the
/// template back from the ControllerRevision, never from here) and kubectl's copy of the whole
/// object in `last-applied-configuration`. Those are most of a real StatefulSet (a Mimir
/// ingester's is tens of KiB), and a cluster-wide baton caches thousands. The annotation map
/// stays, emptied or not: a partition patch adds its record into it.
fn slim_statefulset(statefulset: &mut StatefulSet) {
    statefulset.managed_fields_mut().clear();
    if let Some(annotations) = statefulset.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    if let Some(spec) = statefulset.spec.as_mut() {
        spec.template.spec = None;
    }
}

/// kubectl's record of the object it last applied (client-side apply).
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The group each StatefulSet was last seen in, to tell which groups a change concerns.
#[derive(Debug, Default)]
struct GroupMoves {
    last: HashMap<String, String>,
}

impl GroupMoves {
    /// The groups the change of StatefulSet `name`, now in `group`, concerns, each once: the
    /// group it left if it moved, and its group. A group sent twice for one change would be
    /// reconciled twice: the second request lands while the first pass runs, and the queue
    /// runs the group once more after it, over the same state.
    fn touched(&mut self, name: String, group: Option<&str>) -> Vec<String> {
        let previous = match group {
            Some(group) => self.last.insert(name, group.to_owned()),
            None => self.last.remove(&name),
        };
        let left = previous.filter(|previous| Some(previous.as_str()) != group);
        left.into_iter().chain(group.map(str::to_owned)).collect()
    }
}

/// The object a watch event touched, if any (a relist's objects one by one).
fn touched_object<K>(event: &watcher::Event<K>) -> Option<&K> {
    match event {
        watcher::Event::Apply(object)
        | watcher::Event::Delete(object)
        | watcher::Event::InitApply(object) => Some(object),
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::apps::v1::StatefulSet;

    use super::{GroupMoves, LAST_APPLIED_ANNOTATION, owners_by_cluster, slim_statefulset};

    #[test]
    fn a_statefulset_is_cached_without_its_pod_spec_or_kubectls_copy_but_with_all_else() {
        let mut statefulset: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "ingester-zone-a",
                "labels": {"rollout-group": "ingester"},
                "annotations": {
                    LAST_APPLIED_ANNOTATION: "{\"kind\":\"StatefulSet\"}",
                    "rollout-max-unavailable": "2",
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "selector": {"matchLabels": {"name": "ingester-zone-a"}},
                "replicas": 3,
                "template": {
                    "metadata": {"labels": {"name": "ingester-zone-a"}},
                    "spec": {"containers": [{"name": "ingester", "image": "mimir:3"}]},
                },
            },
        }))
        .expect("a StatefulSet");
        let mut expected = statefulset.clone();
        slim_statefulset(&mut statefulset);

        let annotations = expected.metadata.annotations.as_mut().expect("annotations");
        annotations.remove(LAST_APPLIED_ANNOTATION);
        expected.metadata.managed_fields = Some(Vec::new());
        expected.spec.as_mut().expect("a spec").template.spec = None;
        assert_eq!(statefulset, expected);
        assert_eq!(
            statefulset.metadata.annotations.as_ref().map(|a| a.len()),
            Some(1),
            "baton's own annotations stay"
        );

        // Only kubectl's copy: the map stays, empty, for a partition record to be added into.
        let mut only_copy = StatefulSet::default();
        only_copy.metadata.annotations =
            Some([(LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned())].into());
        slim_statefulset(&mut only_copy);
        assert_eq!(only_copy.metadata.annotations, Some(Default::default()));
    }

    #[test]
    fn a_members_pods_are_looked_for_in_its_own_cluster_only() {
        let member = |name: &str, uid: &str| {
            let mut statefulset = StatefulSet::default();
            statefulset.metadata.name = Some(name.to_owned());
            statefulset.metadata.uid = Some(uid.to_owned());
            Arc::new(statefulset)
        };
        let members = [
            member("cluster-a/ingester", "uid-a"),
            member("cluster-b/ingester", "uid-b"),
            member("unqualified", "uid-x"),
        ];
        let owners = owners_by_cluster(&members);
        assert_eq!(owners.len(), 2, "{owners:?}");
        assert!(owners["cluster-a"].contains("uid-a"));
        // A cluster-b pod naming cluster-a's StatefulSet's uid is not looked for.
        assert!(!owners["cluster-b"].contains("uid-a"));
        assert!(owners["cluster-b"].contains("uid-b"));
    }

    #[test]
    fn a_statefulset_change_concerns_its_group_once_and_the_group_it_left() {
        let mut moves = GroupMoves::default();
        // Seen first, then changed in place (a status update): its group, once each time.
        assert_eq!(
            moves.touched("zone-a".into(), Some("ingester")),
            ["ingester"]
        );
        assert_eq!(
            moves.touched("zone-a".into(), Some("ingester")),
            ["ingester"]
        );
        // Moved to another group: the one it left, then the one it joined.
        assert_eq!(
            moves.touched("zone-a".into(), Some("store")),
            ["ingester", "store"]
        );
        // Out of every group: the one it left.
        assert_eq!(moves.touched("zone-a".into(), None), ["store"]);
        assert!(moves.touched("zone-a".into(), None).is_empty());
        // Another StatefulSet has its own history.
        assert_eq!(
            moves.touched("zone-b".into(), Some("ingester")),
            ["ingester"]
        );
    }
}
