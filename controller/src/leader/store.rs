//! The calls elections make, behind traits so tests can delay them or break them on purpose
//! (the fencing test checks it catches unconditional writes): [`LeaseStore`], one Lease (the
//! leader's), and [`Leases`], every Lease of one namespace (the shard loop's: its presence, the
//! shard map, the shard Leases). One Kubernetes implementation serves both, so the rules of a
//! write (conditional on a resourceVersion, 409 and 404 named) live once. Their failures are
//! the controller's [`Error`]'s `Lease*` variants.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use crate::error::Error;

/// Reads and conditionally writes one Lease. Implementations do not bound their calls: the
/// elector puts its own deadline around each.
pub trait LeaseStore: Send + Sync + 'static {
    /// Namespace of the Lease.
    fn namespace(&self) -> &str;
    /// Name of the Lease.
    fn name(&self) -> &str;
    /// The Lease, `None` when it does not exist. Must be a consistent (quorum) read.
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, Error>> + Send;
    /// Creates the Lease; [`Error::LeaseConflict`] when it already exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send;
    /// Replaces the Lease only if it is still at `lease.metadata.resourceVersion`:
    /// [`Error::LeaseConflict`] when it changed, [`Error::LeaseNotFound`] when it is gone.
    fn replace(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send;
}

/// Reads and conditionally writes the Leases of one namespace, each named in the Lease itself.
/// Implementations do not bound their calls.
pub trait Leases: Send + Sync + 'static {
    /// Namespace of the Leases.
    fn namespace(&self) -> &str;
    /// Every Lease of the namespace. Must be a consistent (quorum) read.
    fn list(&self) -> impl Future<Output = Result<Vec<Lease>, Error>> + Send;
    /// Creates `lease`; [`Error::LeaseConflict`] when it already exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send;
    /// Replaces `lease` only if it is still at its resourceVersion: [`Error::LeaseConflict`]
    /// when it changed, [`Error::LeaseNotFound`] when it is gone.
    fn replace(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send;
    /// Deletes Lease `name` only if it is still at `resource_version`.
    fn delete(
        &self,
        name: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The Leases of one namespace on the Kubernetes API.
#[derive(Clone)]
pub struct KubeLeases {
    api: Api<Lease>,
    namespace: String,
}

impl KubeLeases {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    fn error(&self, name: &str, action: &'static str, error: kube::Error) -> Error {
        let (namespace, name) = (self.namespace.clone(), name.to_owned());
        match &error {
            kube::Error::Api(status) if status.is_conflict() || status.is_already_exists() => {
                Error::LeaseConflict {
                    namespace,
                    name,
                    action,
                }
            }
            kube::Error::Api(status) if status.is_not_found() => Error::LeaseNotFound {
                namespace,
                name,
                action,
            },
            _ => Error::LeaseCall {
                namespace,
                name,
                action,
                source: Box::new(error),
            },
        }
    }

    async fn get(&self, name: &str) -> Result<Option<Lease>, Error> {
        // No resourceVersion parameter: served from etcd with a quorum read, never from the
        // watch cache, so a standby cannot see a version older than a renewal already acked.
        self.api
            .get_opt(name)
            .await
            .map_err(|error| self.error(name, "reading", error))
    }
}

/// The name a write is for, `""` when the Lease names none.
fn name_of(lease: &Lease) -> &str {
    lease.metadata.name.as_deref().unwrap_or_default()
}

impl Leases for KubeLeases {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn list(&self) -> Result<Vec<Lease>, Error> {
        // No resourceVersion parameter either: a consistent list.
        self.api
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .map_err(|error| self.error("*", "listing", error))
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, Error> {
        self.api
            .create(&PostParams::default(), lease)
            .await
            .map_err(|error| self.error(name_of(lease), "creating", error))
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, Error> {
        let name = name_of(lease);
        if lease
            .metadata
            .resource_version
            .as_deref()
            .is_none_or(str::is_empty)
        {
            return Err(Error::LeaseUnconditional {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            });
        }
        self.api
            .replace(name, &PostParams::default(), lease)
            .await
            .map_err(|error| self.error(name, "replacing", error))
    }

    async fn delete(&self, name: &str, resource_version: &str) -> Result<(), Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        self.api
            .delete(name, &params)
            .await
            .map(|_| ())
            .map_err(|error| self.error(name, "deleting", error))
    }
}

/// The Lease on the Kubernetes API.
#[derive(Clone)]
pub struct KubeLeaseStore {
    leases: KubeLeases,
    name: String,
}

impl KubeLeaseStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            leases: KubeLeases::new(client, namespace),
            name: name.to_owned(),
        }
    }

    /// `lease` named as this store's Lease, whatever its metadata says.
    fn named(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        lease.metadata.name = Some(self.name.clone());
        lease
    }
}

impl LeaseStore for KubeLeaseStore {
    fn namespace(&self) -> &str {
        &self.leases.namespace
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self) -> Result<Option<Lease>, Error> {
        self.leases.get(&self.name).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, Error> {
        self.leases.create(&self.named(lease)).await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, Error> {
        self.leases.replace(&self.named(lease)).await
    }
}
