//! The three calls leader election makes, behind a trait so tests can delay them or break them
//! on purpose (the fencing test checks it catches unconditional writes). Their failures are the
//! controller's [`Error`]'s `Lease*` variants.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

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

/// The Lease on the Kubernetes API.
#[derive(Clone)]
pub struct KubeLeaseStore {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl KubeLeaseStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn error(&self, action: &'static str, error: kube::Error) -> Error {
        let (namespace, name) = (self.namespace.clone(), self.name.clone());
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
}

impl LeaseStore for KubeLeaseStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self) -> Result<Option<Lease>, Error> {
        // No resourceVersion parameter: served from etcd with a quorum read, never from the
        // watch cache, so a standby cannot see a version older than a renewal already acked.
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|error| self.error("reading", error))
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, Error> {
        self.api
            .create(&PostParams::default(), lease)
            .await
            .map_err(|error| self.error("creating", error))
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, Error> {
        if lease
            .metadata
            .resource_version
            .as_deref()
            .is_none_or(str::is_empty)
        {
            return Err(Error::LeaseUnconditional {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            });
        }
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
            .map_err(|error| self.error("replacing", error))
    }
}
