//! baton-controller replicas sharing the namespaces by shard Leases, as scenarios see them: which
//! identity (a Lease's holder, an Event's reporting instance) is which replica, and every
//! holding each shard Lease went through, watched as it happens (the Lease itself keeps only the
//! last one).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};

use crate::controller_support::Controller;
use crate::{TestNamespace, wait_until};

/// A replica, and the prefix of its identity: its HOSTNAME, to which the controller adds a
/// random part.
pub struct Replica {
    pub controller: Controller,
    pub host: String,
}

impl Replica {
    /// Whether `identity` is this replica's.
    pub fn is(&self, identity: &str) -> bool {
        identity.starts_with(&format!("{}-", self.host))
    }
}

/// One holding of a shard Lease: its holder, and the acquireTime the holder wrote taking it (a
/// renewal keeps it; taking the Lease anew, even back, writes a new one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub holder: String,
    pub acquired: Option<jiff::Timestamp>,
}

impl Holding {
    /// The holding `lease` tells, `None` when no one holds it (released).
    pub fn of(lease: &Lease) -> Option<Self> {
        let spec = lease.spec.as_ref()?;
        let holder = spec
            .holder_identity
            .clone()
            .filter(|holder| !holder.is_empty())?;
        Some(Self {
            holder,
            acquired: spec.acquire_time.as_ref().map(|time| time.0),
        })
    }
}

/// Every state each shard Lease of a namespace went through, in order, from a watch started
/// with this: a holding, or `None` once released. Renewals change neither, so they add nothing.
pub struct ShardLeaseHistory {
    seen: Arc<Mutex<BTreeMap<String, Vec<Option<Holding>>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ShardLeaseHistory {
    /// Watches the shard Leases (`baton-shard-<i>-of-<n>`) of `namespace`.
    pub fn watch(namespace: &TestNamespace) -> Self {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let into = seen.clone();
        let api = namespace.api::<Lease>();
        let task = tokio::spawn(async move {
            let mut updates =
                std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
            while let Some(update) = updates.next().await {
                let Ok(lease) = update else { continue };
                let name = lease.metadata.name.clone().unwrap_or_default();
                if !is_shard_lease(&name) {
                    continue;
                }
                let holding = Holding::of(&lease);
                let mut seen = into.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let history: &mut Vec<Option<Holding>> = seen.entry(name).or_default();
                if history.last() != Some(&holding) {
                    history.push(holding);
                }
            }
        });
        Self { seen, task }
    }

    /// Each shard Lease's states so far, by the Lease's name.
    pub fn seen(&self) -> BTreeMap<String, Vec<Option<Holding>>> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The states of shard Lease `name` so far.
    pub fn of(&self, name: &str) -> Vec<Option<Holding>> {
        self.seen().remove(name).unwrap_or_default()
    }

    /// Waits until the watch has seen the current state of each of the shard Leases `names`
    /// (which exist), so that [`Self::of`] tells them whole.
    pub async fn wait_caught_up(&self, namespace: &TestNamespace, names: &[String]) {
        wait_until(
            Duration::from_secs(60),
            "the watch saw every shard Lease as it is",
            || async {
                for name in names {
                    let Ok(lease) = namespace.api::<Lease>().get(name).await else {
                        return false;
                    };
                    if self.of(name).last() != Some(&Holding::of(&lease)) {
                        return false;
                    }
                }
                true
            },
        )
        .await;
    }
}

impl Drop for ShardLeaseHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `name` is a shard Lease's (not the shard map's, nor a replica's presence).
fn is_shard_lease(name: &str) -> bool {
    name.starts_with("baton-shard-") && name != "baton-shard-map"
}
