//! The served namespace's StatefulSets (every namespace's when baton serves more than one):
//! one watch whose cache answers both a `/scale` request's parent labels ([`crate::parents`])
//! and the eviction decisions ([`crate::evictions`]). StatefulSets are few next to pods, and
//! decoded slim, so watching every namespace's costs what the cluster's StatefulSets weigh.
//!
//! Objects are decoded slim, straight from the API's JSON: the pod template, the volume claim
//! templates, the annotations and the managed fields are skipped unparsed, never built and then
//! dropped. Those are most of a StatefulSet's bytes; decoding them whole made each listing
//! cost several times the cache it fills (the webhook's peak memory), and none of them is read
//! here. What is kept is what the decisions read: identity, labels, owners, replicas,
//! selector, minReadySeconds, ordinals, the update strategy and the status.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_shared::reflect::reflect;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetOrdinals, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use kube::Client;
use kube::runtime::reflector::{self, ObjectRef, Store};
use serde::{Deserialize, Deserializer};

/// A StatefulSet as the webhook caches it: `k8s-openapi`'s type, with what `Wire` skips left
/// empty. A type of its own so that the watch decodes it slim (the API's lists and events
/// deserialize into it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedStatefulSet(pub StatefulSet);

impl k8s_openapi::Resource for CachedStatefulSet {
    const API_VERSION: &'static str = StatefulSet::API_VERSION;
    const GROUP: &'static str = StatefulSet::GROUP;
    const KIND: &'static str = StatefulSet::KIND;
    const VERSION: &'static str = StatefulSet::VERSION;
    const URL_PATH_SEGMENT: &'static str = StatefulSet::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for CachedStatefulSet {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> Deserialize<'de> for CachedStatefulSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Wire::deserialize(deserializer).map(|wire| Self(wire.into()))
    }
}

/// The JSON fields kept; serde skips every other one without building it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    spec: Option<WireSpec>,
    status: Option<StatefulSetStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    generate_name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    replicas: Option<i32>,
    #[serde(default)]
    selector: LabelSelector,
    service_name: Option<String>,
    min_ready_seconds: Option<i32>,
    ordinals: Option<StatefulSetOrdinals>,
    pod_management_policy: Option<String>,
    update_strategy: Option<StatefulSetUpdateStrategy>,
    revision_history_limit: Option<i32>,
    persistent_volume_claim_retention_policy:
        Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
}

impl From<Wire> for StatefulSet {
    fn from(
        Wire {
            metadata,
            spec,
            status,
        }: Wire,
    ) -> Self {
        StatefulSet {
            metadata: ObjectMeta {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                generation: metadata.generation,
                generate_name: metadata.generate_name,
                labels: metadata.labels,
                owner_references: metadata.owner_references,
                finalizers: metadata.finalizers,
                creation_timestamp: metadata.creation_timestamp,
                deletion_timestamp: metadata.deletion_timestamp,
                deletion_grace_period_seconds: metadata.deletion_grace_period_seconds,
                ..ObjectMeta::default()
            },
            spec: spec.map(|spec| StatefulSetSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                service_name: spec.service_name,
                min_ready_seconds: spec.min_ready_seconds,
                ordinals: spec.ordinals,
                pod_management_policy: spec.pod_management_policy,
                update_strategy: spec.update_strategy,
                revision_history_limit: spec.revision_history_limit,
                persistent_volume_claim_retention_policy: spec
                    .persistent_volume_claim_retention_policy,
                ..StatefulSetSpec::default()
            }),
            status,
        }
    }
}

/// The cache of the namespace's StatefulSets, and how many changes its watch applied (for
/// indexes built from it). Cheap to clone.
#[derive(Clone)]
pub struct StatefulSetCache {
    store: Store<CachedStatefulSet>,
    changes: Arc<AtomicU64>,
}

impl std::fmt::Debug for StatefulSetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatefulSetCache")
            .field("statefulsets", &self.store.len())
            .field("changes", &self.changes())
            .finish()
    }
}

impl StatefulSetCache {
    /// A cache that its watch never fills (for tests of what reads it).
    pub fn unfilled() -> Self {
        let (store, _writer) = reflector::store();
        Self {
            store,
            changes: Arc::default(),
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedStatefulSet>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn state(&self) -> Vec<Arc<CachedStatefulSet>> {
        self.store.state()
    }

    /// The cached StatefulSets of `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedStatefulSet>> {
        self.store
            .state()
            .into_iter()
            .filter(|statefulset| statefulset.0.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Changes applied so far; it grows with every one.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Whether the cache holds the namespace's first full listing.
    pub fn is_synced(&self) -> bool {
        use futures::FutureExt;
        self.store.wait_until_ready().now_or_never().is_some()
    }

    /// Resolves once the cache holds the namespace's first full listing (at once if its watch
    /// is gone: the process is stopping then).
    pub async fn wait_synced(&self) {
        let _ = self.store.wait_until_ready().await;
    }
}

/// The cache of `namespace`'s StatefulSets (`None`: every namespace's) and the future that
/// fills it. The future runs until the process stops (watch errors are retried with backoff)
/// and must be polled for the cache to be filled: the caller runs it as a critical task.
pub fn watch(
    client: Client,
    namespace: Option<&str>,
) -> (StatefulSetCache, impl Future<Output = ()> + Send + 'static) {
    let api = match namespace {
        Some(namespace) => kube::Api::namespaced(client, namespace),
        None => kube::Api::all(client),
    };
    let changes = Arc::new(AtomicU64::new(0));
    let counter = changes.clone();
    // Nothing to slim: the decoding already skipped what is not kept.
    let (store, fill) = reflect(
        api,
        kube::runtime::watcher::Config::default(),
        |_: &mut CachedStatefulSet| {},
        move |_| {
            counter.fetch_add(1, Ordering::Release);
        },
    );
    let cache = StatefulSetCache { store, changes };
    (cache, fill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A StatefulSet as `kubectl get -o json` returns it.
    fn full() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": "ingester-zone-a", "namespace": "mimir", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-11-01T10:00:00Z",
                "labels": {"rollout-group": "ingester", "grafana.com/no-downscale": "true"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "o-1"}],
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "replicas": 5, "serviceName": "ingester", "minReadySeconds": 10,
                "podManagementPolicy": "Parallel", "updateStrategy": {"type": "OnDelete"},
                "ordinals": {"start": 1}, "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"name": "ingester-zone-a"}},
                "template": {
                    "metadata": {"labels": {"name": "ingester-zone-a"}},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]}
                },
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}]
            },
            "status": {"replicas": 5, "readyReplicas": 4, "updateRevision": "r-2",
                       "currentRevision": "r-1", "observedGeneration": 3}
        })
    }

    #[test]
    fn decoding_keeps_what_the_decisions_read_and_skips_the_rest() {
        let cached: CachedStatefulSet = serde_json::from_value(full()).expect("decodes");
        let mut expected: StatefulSet = serde_json::from_value(full()).expect("decodes");
        // Exactly what the slim decoding leaves out.
        expected.metadata.annotations = None;
        expected.metadata.managed_fields = None;
        let spec = expected.spec.as_mut().expect("a spec");
        spec.template = Default::default();
        spec.volume_claim_templates = None;
        assert_eq!(cached.0, expected);
    }

    #[test]
    fn decodes_watch_events_and_lists_as_kube_reads_them() {
        let event: kube::api::WatchEvent<CachedStatefulSet> =
            serde_json::from_value(json!({"type": "ADDED", "object": full()})).expect("an event");
        let kube::api::WatchEvent::Added(cached) = event else {
            panic!("not an ADDED event: {event:?}");
        };
        assert_eq!(cached.0.metadata.name.as_deref(), Some("ingester-zone-a"));
        let list: kube::core::ObjectList<CachedStatefulSet> = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSetList",
            "metadata": {"resourceVersion": "43"}, "items": [full(), full()]
        }))
        .expect("a list");
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[1].0.spec.as_ref().and_then(|s| s.replicas),
            Some(5)
        );
    }

    #[test]
    fn a_malformed_kept_field_fails_the_decoding_rather_than_defaulting() {
        let mut object = full();
        object["spec"]["replicas"] = json!("five");
        let error = serde_json::from_value::<CachedStatefulSet>(object)
            .expect_err("replicas must be a number");
        assert!(error.to_string().contains("invalid type"), "{error}");
    }
}
