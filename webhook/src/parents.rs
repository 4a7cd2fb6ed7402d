//! Labels of the parent of a `/scale` request (StatefulSet, Deployment, ReplicaSet), from
//! watch caches of the watched namespace (the StatefulSets' shared with the eviction decisions,
//! metadata-only ones for Deployments and ReplicaSets): no API call per request (the Go
//! operator's one rate-limited GET per request collapsed at 6 req/s). A namespace outside the
//! cache, or an object the cache has not seen yet, is read from the API under the request's
//! deadline.
//!
//! Serving more than one namespace, the StatefulSets' cache holds every namespace's, and
//! Deployments and ReplicaSets are not watched: a cluster's ReplicaSets grow with every
//! Deployment's history, and a `/scale` of one is rare next to a StatefulSet's; each is read
//! from the API under the request's deadline.

use std::fmt::Debug;

use baton_shared::reflect::reflect;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use prometheus::IntCounterVec;
use serde::de::DeserializeOwned;

use crate::admission::object::ParentKind;
use crate::error::Error;
use crate::statefulsets::StatefulSetCache;

/// Where a parent's labels were found, for `baton_webhook_parent_lookups_total{source}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cache,
    Api,
}

type Meta<K> = PartialObjectMeta<K>;

/// The caches and the client for misses. Cheap to clone.
#[derive(Clone)]
pub struct ParentCache {
    client: Client,
    /// Every namespace's when more than one is served.
    statefulsets: StatefulSetCache,
    /// The one namespace served's; `None` when more than one is served.
    watched: Option<Watched>,
    lookups: Option<IntCounterVec>,
}

/// The Deployments and ReplicaSets of the one namespace served.
#[derive(Clone)]
struct Watched {
    namespace: String,
    deployments: Store<Meta<Deployment>>,
    replicasets: Store<Meta<ReplicaSet>>,
}

impl std::fmt::Debug for ParentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let watched = self.watched.as_ref();
        f.debug_struct("ParentCache")
            .field("namespace", &watched.map(|watched| &watched.namespace))
            .field("statefulsets", &self.statefulsets.len())
            .field(
                "deployments",
                &watched.map(|watched| watched.deployments.len()),
            )
            .field(
                "replicasets",
                &watched.map(|watched| watched.replicasets.len()),
            )
            .finish()
    }
}

impl ParentCache {
    /// The caches of `namespace` (`None`: more than one namespace is served, and
    /// `statefulsets` holds every namespace's) and the future that fills those of Deployments
    /// and ReplicaSets (`statefulsets` is filled by its own watch). The future runs until the
    /// process stops (watch errors are retried with backoff) and must be polled for the caches
    /// to be filled: the caller runs it as a critical task.
    pub fn new(
        client: Client,
        namespace: Option<&str>,
        statefulsets: StatefulSetCache,
        lookups: Option<IntCounterVec>,
    ) -> (Self, futures::future::BoxFuture<'static, ()>) {
        use futures::FutureExt;
        let Some(namespace) = namespace else {
            let cache = Self {
                client,
                statefulsets,
                watched: None,
                lookups,
            };
            return (cache, std::future::pending().boxed());
        };
        let (deployments, fill_deployments) = reflect(
            Api::namespaced(client.clone(), namespace),
            watcher::Config::default(),
            labels_only::<Deployment>,
            |_| {},
        );
        let (replicasets, fill_replicasets) = reflect(
            Api::namespaced(client.clone(), namespace),
            watcher::Config::default(),
            labels_only::<ReplicaSet>,
            |_| {},
        );
        let cache = Self {
            client,
            statefulsets,
            watched: Some(Watched {
                namespace: namespace.to_owned(),
                deployments,
                replicasets,
            }),
            lookups,
        };
        let fill = async move {
            futures::join!(fill_deployments, fill_replicasets);
        };
        (cache, fill.boxed())
    }

    /// Resolves once every cache holds the namespace's first full listing.
    pub async fn wait_synced(&self) {
        // The writers live in the fill future; if it is gone, the process is stopping anyway.
        self.statefulsets.wait_synced().await;
        if let Some(watched) = &self.watched {
            let _ = watched.deployments.wait_until_ready().await;
            let _ = watched.replicasets.wait_until_ready().await;
        }
    }

    /// The value of label `key` on the parent, `None` when it has no such label; else
    /// [`Error::ParentNotFound`] or [`Error::ReadParent`].
    pub async fn label(
        &self,
        kind: ParentKind,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<String>, Error> {
        // One namespace served: its caches. More: the StatefulSets' cache holds every
        // namespace's, and the rest is read.
        let watched = match &self.watched {
            Some(watched) if watched.namespace == namespace => Some(Some(watched)),
            Some(_) => None,
            None => Some(None),
        };
        if let Some(watched) = watched {
            let cached = match (kind, watched) {
                (ParentKind::StatefulSet, _) => self
                    .statefulsets
                    .get(namespace, name)
                    .map(|statefulset| label_of(&statefulset.0.metadata, key)),
                (ParentKind::Deployment, Some(watched)) => {
                    cached_label(&watched.deployments, namespace, name, key)
                }
                (ParentKind::ReplicaSet, Some(watched)) => {
                    cached_label(&watched.replicasets, namespace, name, key)
                }
                (ParentKind::Deployment | ParentKind::ReplicaSet, None) => None,
            };
            if let Some(value) = cached {
                self.count(Source::Cache);
                return Ok(value);
            }
        }
        self.count(Source::Api);
        let fetched = match kind {
            ParentKind::StatefulSet => self.fetch::<StatefulSet>(namespace, name).await,
            ParentKind::Deployment => self.fetch::<Deployment>(namespace, name).await,
            ParentKind::ReplicaSet => self.fetch::<ReplicaSet>(namespace, name).await,
        };
        let api_error = |error| Error::ReadParent {
            resource: kind.resource(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            error: Box::new(error),
        };
        match fetched.map_err(api_error)? {
            Some(labels) => Ok(labels.and_then(|mut labels| labels.remove(key))),
            None => Err(Error::ParentNotFound {
                resource: kind.resource(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
        }
    }

    async fn fetch<K>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Option<std::collections::BTreeMap<String, String>>>, kube::Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        Ok(api
            .get_metadata_opt(name)
            .await?
            .map(|meta| meta.metadata.labels))
    }

    fn count(&self, source: Source) {
        if let Some(lookups) = &self.lookups {
            let label = match source {
                Source::Cache => "cache",
                Source::Api => "api",
            };
            lookups.with_label_values(&[label]).inc();
        }
    }
}

/// `Some(label value or None)` when the object is cached, `None` when it is not.
fn cached_label<K>(
    store: &Store<Meta<K>>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Option<Option<String>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let object = store.get(&ObjectRef::new(name).within(namespace))?;
    Some(label_of(&object.metadata, key))
}

fn label_of(metadata: &ObjectMeta, key: &str) -> Option<String> {
    metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key).cloned())
}

/// Deployments and ReplicaSets are watched for their labels alone: drop what can be large.
fn labels_only<K>(object: &mut Meta<K>) {
    object.metadata.managed_fields = None;
    object.metadata.annotations = None;
}
